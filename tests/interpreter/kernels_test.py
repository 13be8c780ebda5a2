#!/usr/bin/python3
"""Tests of airlock's interpreter kernels (src/interpreter/kernels/), on this
host: each kernel is started from kernels.json as the interpreter server does
({dir} and {connection_file} replaced; "python3" is this interpreter, which
must be Debian's, /usr/bin/python3) and driven with jupyter_client.

    /usr/bin/python3 tests/interpreter/kernels_test.py [-v] [Class.test_name ...]

Exit status 77 (ctest's SKIP_RETURN_CODE) when Debian's ipykernel or
jupyter_client is not importable. Kernels whose runtime is missing (node,
TypeScript, matplotlib, pandas, PIL) skip their tests, saying why.
"""

import base64
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import ipykernel  # noqa: F401
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager
except ImportError as e:
    print("SKIP: Debian's ipykernel/jupyter_client are not importable (%s); "
          "apt-get install python3-ipykernel python3-jupyter-client" % e)
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS_DIR = os.path.join(ROOT, "src", "interpreter", "kernels")
TIMEOUT = 60  # s per execution; the machine is small and shared


def has_module(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def has_typescript():
    if not shutil.which("node"):
        return False
    probe = ("for (const c of ['typescript', '/usr/share/nodejs/typescript']) "
             "{ try { require(c); process.exit(0) } catch (e) {} } process.exit(1)")
    return subprocess.run(["node", "-e", probe], capture_output=True).returncode == 0


class Kernel:
    """One kernel from kernels.json, started as the server starts it."""

    def __init__(self, language):
        with open(os.path.join(KERNELS_DIR, "kernels.json")) as f:
            entry = json.load(f)[language]
        argv = [a.replace("{dir}", KERNELS_DIR) for a in entry["argv"]]
        if argv[0] == "python3":
            argv[0] = sys.executable
        self.spec_dir = tempfile.mkdtemp(prefix="airlock-kernels-test-")
        # Not the bare language name: jupyter_client turns "python" into its
        # own native "python3" kernel.
        name = "airlock-" + language
        os.makedirs(os.path.join(self.spec_dir, name))
        with open(os.path.join(self.spec_dir, name, "kernel.json"), "w") as f:
            json.dump({"argv": argv, "display_name": language, "language": language,
                       "env": entry.get("env", {})}, f)
        self.cwd = tempfile.mkdtemp(prefix="airlock-kernels-cwd-")
        self.km = KernelManager(kernel_name=name,
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[self.spec_dir]))
        self.km.start_kernel(cwd=self.cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        self.kc = self.km = None  # not left to interpreter shutdown, where __del__ logs fail
        shutil.rmtree(self.spec_dir, ignore_errors=True)
        shutil.rmtree(self.cwd, ignore_errors=True)

    def info(self):
        msg_id = self.kc.kernel_info()
        return self._reply(msg_id)["content"]

    def _reply(self, msg_id, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def run(self, code, interrupt_after=None, timeout=TIMEOUT):
        """Executes code; returns (reply content, [iopub messages for it]),
        the iopub messages reduced to (msg_type, content). With
        interrupt_after, SIGINT is sent to the kernel that many seconds
        after the request."""
        # stop_on_error=False: after an error reply, ipykernel 6.17 aborts
        # ("aborted") requests that arrive before its event loop has turned
        # once, a race a test sending the next cell at once can lose.
        msg_id = self.kc.execute(code, stop_on_error=False)
        start = time.monotonic()
        interrupted = False
        outputs = []
        while True:
            if interrupt_after is not None and not interrupted and time.monotonic() - start > interrupt_after:
                self.km.interrupt_kernel()
                interrupted = True
            if time.monotonic() - start > timeout:
                raise AssertionError("no idle status for %r within %d s" % (code, timeout))
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "execute_input":
                continue
            if kind == "status":
                if msg["content"]["execution_state"] == "idle":
                    break
                continue
            outputs.append((kind, msg["content"]))
        return self._reply(msg_id)["content"], outputs


def streams(outputs):
    """[(name, text)] of the stream messages, neighbours of one stream merged."""
    merged = []
    for kind, content in outputs:
        if kind != "stream":
            continue
        if merged and merged[-1][0] == content["name"]:
            merged[-1] = (content["name"], merged[-1][1] + content["text"])
        else:
            merged.append((content["name"], content["text"]))
    return merged


def results(outputs, kind=None):
    return [c["data"] for k, c in outputs if k in (("execute_result", "display_data") if kind is None else (kind,))]


class KernelTest(unittest.TestCase):
    language = None
    kernel = None

    @classmethod
    def setUpClass(cls):
        cls.kernel = Kernel(cls.language)

    @classmethod
    def tearDownClass(cls):
        if cls.kernel:
            cls.kernel.close()

    def ok(self, code, **kwargs):
        reply, outputs = self.kernel.run(code, **kwargs)
        self.assertEqual(reply["status"], "ok", "%r -> %r %r" % (code, reply, outputs))
        return outputs

    def error(self, code, **kwargs):
        reply, outputs = self.kernel.run(code, **kwargs)
        self.assertEqual(reply["status"], "error", "%r -> %r %r" % (code, reply, outputs))
        errors = [c for k, c in outputs if k == "error"]
        self.assertEqual(len(errors), 1, outputs)
        self.assertEqual((errors[0]["ename"], errors[0]["evalue"]), (reply["ename"], reply["evalue"]))
        return reply, outputs

    def text_result(self, code):
        data = results(self.ok(code), "execute_result")
        self.assertEqual(len(data), 1, "%r gave no single execute_result" % code)
        return data[0]["text/plain"]


# --- python -------------------------------------------------------------------

class PythonTest(KernelTest):
    language = "python"

    def chart(self, code):
        data = [d for d in results(self.ok(code)) if "e2b/chart" in d]
        self.assertEqual(len(data), 1, "one figure expected from %r" % code)
        chart = data[0]["e2b/chart"]
        json.dumps(chart, allow_nan=False)  # JSON-safe
        self.assertTrue(data[0]["text/plain"].startswith("<Figure size"), data[0]["text/plain"])
        self.assertTrue(base64.b64decode(data[0]["image/png"]).startswith(b"\x89PNG"))
        return chart

    def test_language_info(self):
        self.assertEqual(self.kernel.info()["language_info"]["name"], "python")

    def test_png_is_the_figure_size_not_cropped(self):
        code = ("import matplotlib.pyplot as plt\n"
                "plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()")
        pngs = [d["image/png"] for d in results(self.ok(code)) if "image/png" in d]
        self.assertEqual(len(pngs), 1)
        png = base64.b64decode(pngs[0])
        # IHDR: width and height, big-endian, at bytes 16..24.
        self.assertEqual((int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")), (400, 300))

    def test_startup_preimports_and_leaves_the_namespace_clean(self):
        names = self.text_result("import sys; sorted(m for m in ('numpy', 'pandas', 'matplotlib.pyplot') "
                                 "if m in sys.modules), [n for n in dir() if 'airlock' in n]")
        expected = [m for m in ("numpy", "pandas", "matplotlib") if has_module(m)]
        expected = ["matplotlib.pyplot" if m == "matplotlib" else m for m in expected]
        self.assertEqual(names, repr((sorted(expected), [])))

    @unittest.skipUnless(has_module("matplotlib"), "python3-matplotlib is not installed")
    def test_plt_show_gives_display_data_with_png_and_line_chart(self):
        outputs = self.ok("import matplotlib.pyplot as plt\n"
                          "fig, ax = plt.subplots()\n"
                          "ax.plot([1, 2, 3], [4, 5, 6], label='up')\n"
                          "ax.plot([1, 2, 3], [6, float('nan'), 4])\n"
                          "ax.set_title('Voltage'); ax.set_xlabel('Time (s)'); ax.set_ylabel('V')\n"
                          "plt.show()")
        self.assertEqual([k for k, _ in outputs], ["display_data"])
        data = outputs[0][1]["data"]
        self.assertTrue(base64.b64decode(data["image/png"]).startswith(b"\x89PNG"))
        self.assertEqual(data["text/plain"], "<Figure size 640x480 with 1 Axes>")
        chart = data["e2b/chart"]
        self.assertEqual(chart["type"], "line")
        self.assertEqual((chart["title"], chart["x_label"], chart["y_label"], chart["x_unit"], chart["y_unit"]),
                         ("Voltage", "Time (s)", "V", "s", None))
        self.assertEqual((chart["x_scale"], chart["y_scale"]), ("linear", "linear"))
        self.assertEqual(len(chart["x_ticks"]), len(chart["x_tick_labels"]))
        self.assertTrue(all(1 <= t <= 3 for t in chart["x_ticks"]), chart["x_ticks"])
        self.assertEqual(chart["elements"], [
            {"label": "up", "points": [[1, 4], [2, 5], [3, 6]]},
            {"label": "Line 1", "points": [[1, 6], [2, None], [3, 4]]},
        ])

    @unittest.skipUnless(has_module("matplotlib"), "python3-matplotlib is not installed")
    def test_figure_as_last_expression_is_the_main_result(self):
        outputs = self.ok("import matplotlib.pyplot as plt\nfig = plt.figure(); plt.scatter([1, 2], [3, 4]); fig")
        main = results(outputs, "execute_result")
        self.assertEqual(len(main), 1)
        self.assertEqual(main[0]["e2b/chart"]["type"], "scatter")
        self.assertIn("image/png", main[0])

    @unittest.skipUnless(has_module("matplotlib"), "python3-matplotlib is not installed")
    def test_scatter_chart(self):
        chart = self.chart("import matplotlib.pyplot as plt, numpy as np\n"
                           "plt.scatter(np.array([1, 2, 3]), np.array([1.5, 2.5, 0.5]), label='pts')\n"
                           "plt.title('S'); plt.show()")
        self.assertEqual(chart["type"], "scatter")
        self.assertEqual(chart["title"], "S")
        self.assertEqual(chart["elements"], [{"label": "pts", "points": [[1.0, 1.5], [2.0, 2.5], [3.0, 0.5]]}])

    @unittest.skipUnless(has_module("matplotlib"), "python3-matplotlib is not installed")
    def test_bar_chart(self):
        chart = self.chart("import matplotlib.pyplot as plt\n"
                           "fig, ax = plt.subplots()\n"
                           "ax.bar(['a', 'b'], [3, 4], label='first')\n"
                           "ax.bar(['a', 'b'], [1, 2], bottom=[3, 4], label='second')\n"
                           "ax.set_ylabel('Count [n]'); plt.show()")
        self.assertEqual(chart["type"], "bar")
        self.assertEqual(chart["y_unit"], "n")
        self.assertEqual(chart["elements"], [
            {"label": "a", "value": 3, "group": "first"}, {"label": "b", "value": 4, "group": "first"},
            {"label": "a", "value": 1, "group": "second"}, {"label": "b", "value": 2, "group": "second"},
        ])

    @unittest.skipUnless(has_module("matplotlib"), "python3-matplotlib is not installed")
    def test_pie_chart(self):
        chart = self.chart("import matplotlib.pyplot as plt\n"
                           "plt.pie([1, 3], labels=['x', 'y']); plt.title('P'); plt.show()")
        self.assertEqual(chart["type"], "pie")
        self.assertEqual(chart["title"], "P")
        self.assertEqual([(e["label"], round(e["angle"], 6), e["radius"]) for e in chart["elements"]],
                         [("x", 90.0, 1), ("y", 270.0, 1)])

    @unittest.skipUnless(has_module("matplotlib"), "python3-matplotlib is not installed")
    def test_box_and_whisker_chart(self):
        chart = self.chart("import matplotlib.pyplot as plt\n"
                           "plt.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4]], labels=['A', 'B']); plt.show()")
        self.assertEqual(chart["type"], "box_and_whisker")
        self.assertEqual(chart["elements"], [
            {"label": "A", "min": 1, "first_quartile": 2.25, "median": 3.5, "third_quartile": 4.75, "max": 5,
             "outliers": [20]},
            {"label": "B", "min": 2, "first_quartile": 2.5, "median": 3.0, "third_quartile": 3.5, "max": 4,
             "outliers": []},
        ])

    @unittest.skipUnless(has_module("matplotlib"), "python3-matplotlib is not installed")
    def test_several_axes_make_a_superchart_and_dates_are_iso(self):
        chart = self.chart("import matplotlib.pyplot as plt, datetime\n"
                           "fig, (a, b) = plt.subplots(1, 2)\n"
                           "a.plot([datetime.datetime(2024, 1, d) for d in (1, 2)], [1, 2])\n"
                           "b.imshow([[1, 2], [3, 4]]); b.set_title('img'); fig.suptitle('Two')\n"
                           "plt.show()")
        self.assertEqual((chart["type"], chart["title"]), ("superchart", "Two"))
        line, image = chart["elements"]
        self.assertEqual(line["type"], "line")
        self.assertEqual(line["x_scale"], "datetime")
        self.assertEqual(line["elements"][0]["points"], [["2024-01-01T00:00:00", 1], ["2024-01-02T00:00:00", 2]])
        self.assertTrue(all(isinstance(t, str) for t in line["x_ticks"]))
        self.assertEqual(image, {"type": "unknown", "title": "img", "elements": []})

    @unittest.skipUnless(has_module("pandas"), "python3-pandas is not installed")
    def test_dataframe_gives_data_html_and_text(self):
        data = results(self.ok("import pandas as pd\n"
                               "pd.DataFrame({'a': [1, 2], 't': pd.to_datetime(['2024-01-01', None]),"
                               " 'f': [1.5, float('nan')], 3: ['x', None]})"), "execute_result")[0]
        self.assertEqual(data["e2b/data"], {"a": [1, 2], "t": ["2024-01-01T00:00:00", None],
                                            "f": [1.5, None], "3": ["x", None]})
        self.assertIn("<table", data["text/html"])
        self.assertIn("2024-01-01", data["text/plain"])

    @unittest.skipUnless(has_module("PIL"), "python3-pil is not installed")
    def test_pil_save_to_a_path_displays_the_image(self):
        path = os.path.join(self.kernel.cwd, "red.png")
        outputs = self.ok("from PIL import Image\nImage.new('RGB', (3, 2), 'red').save(%r)" % path)
        shown = results(outputs, "display_data")
        self.assertEqual(len(shown), 1)
        self.assertTrue(base64.b64decode(shown[0]["image/png"]).startswith(b"\x89PNG"))
        with open(path, "rb") as f:
            self.assertTrue(f.read().startswith(b"\x89PNG"))
        # Saving to a file object displays nothing.
        self.assertEqual(results(self.ok("import io\nImage.new('RGB', (3, 2)).save(io.BytesIO(), 'PNG')")), [])

    def test_interrupt_keeps_state(self):
        self.ok("kept = 42")
        reply, _ = self.error("import time\ntime.sleep(60)", interrupt_after=1.5)
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        self.assertEqual(self.text_result("kept"), "42")


# --- javascript / typescript --------------------------------------------------

@unittest.skipUnless(shutil.which("node"), "node is not on PATH")
class JavascriptTest(KernelTest):
    language = "javascript"

    def test_language_info(self):
        self.assertEqual(self.kernel.info()["language_info"]["name"], "javascript")

    def test_state_persists_across_cells_including_let_and_const(self):
        self.ok("let a = 1; const b = 2; var c = 3\nfunction twice(x) { return 2 * x }\n"
                "class Box { constructor(v) { this.v = v } }\nconst {d, e: [f]} = {d: 4, e: [5]}")
        self.assertEqual(self.text_result("a + b + c + d + f + twice(new Box(10).v)"), "35")
        # Running a declaring cell again does not fail.
        self.ok("const b = 20; let a = 10")
        self.assertEqual(self.text_result("a + b"), "30")

    def test_top_level_await(self):
        self.assertEqual(self.text_result("const v = await new Promise(r => setTimeout(() => r(7), 50)); v * 6"),
                         "42")
        self.assertEqual(self.text_result("v"), "7")

    def test_last_expression_is_the_result(self):
        self.assertEqual(self.text_result("'a' + 'b'"), "'ab'")
        self.assertEqual(self.text_result("({x: [1, 2]})"), "{ x: [ 1, 2 ] }")
        self.assertEqual(results(self.ok("let nothing = 1")), [])
        self.assertEqual(results(self.ok("undefined")), [])

    def test_console_output_streams_in_order_before_the_result(self):
        outputs = self.ok("console.log('one'); console.error('two'); process.stdout.write('three\\n');\n"
                          "await null; console.log('four', {k: 1}); 5")
        self.assertEqual(streams(outputs), [("stdout", "one\n"), ("stderr", "two\n"),
                                            ("stdout", "three\nfour { k: 1 }\n")])
        self.assertEqual(outputs[-1][0], "execute_result")
        self.assertEqual(outputs[-1][1]["data"]["text/plain"], "5")

    def test_uncaught_exception_is_an_error(self):
        reply, _ = self.error("function boom() { throw new TypeError('bad thing') }\nboom()")
        self.assertEqual((reply["ename"], reply["evalue"]), ("TypeError", "bad thing"))
        self.assertEqual(reply["traceback"][0], "TypeError: bad thing")
        self.assertTrue(any("boom" in line for line in reply["traceback"]), reply["traceback"])
        reply, _ = self.error("await Promise.reject(new RangeError('later'))")
        self.assertEqual((reply["ename"], reply["evalue"]), ("RangeError", "later"))
        reply, _ = self.error("let = ;")
        self.assertEqual(reply["ename"], "SyntaxError")

    def test_require(self):
        self.assertEqual(self.text_result("require('path').join('a', 'b')"), "'a/b'")
        self.assertEqual(self.text_result("import {join} from 'path'; join('c', 'd')"), "'c/d'")
        self.assertEqual(self.text_result("(await import('os')).platform()"), "'linux'")
        if has_typescript():  # a module found only in the global directories (/usr/share/nodejs)
            self.assertEqual(self.text_result("typeof require('typescript').transpileModule"), "'function'")
            self.assertEqual(self.text_result("typeof (await import('typescript')).default.transpileModule"),
                             "'function'")

    def test_interrupt_stops_a_loop_and_an_endless_await_keeping_state(self):
        self.ok("let kept = 'yes'")
        reply, _ = self.error("while (true) {}", interrupt_after=1.5)
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        self.assertEqual(self.text_result("kept"), "'yes'")
        reply, _ = self.error("await new Promise(() => {})", interrupt_after=1.5)
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        self.assertEqual(self.text_result("kept"), "'yes'")
        # A loop after an await runs outside the cell's vm call: node_repl.js'
        # watchdog stops it, and the state is still there.
        reply, _ = self.error("kept = 'still'; await null; for (;;) {}", interrupt_after=1.5)
        self.assertEqual((reply["ename"], reply["evalue"]), ("KeyboardInterrupt", "Execution interrupted (SIGINT)"))
        self.assertEqual(self.text_result("kept"), "'still'")


@unittest.skipUnless(has_typescript(), "node or Debian's node-typescript is missing")
class TypescriptTest(KernelTest):
    language = "typescript"

    def test_language_info(self):
        self.assertEqual(self.kernel.info()["language_info"]["name"], "typescript")

    def test_types_are_stripped_and_state_persists(self):
        self.ok("interface P { a: number }\nconst p: P = {a: 5}\nenum Color { Red, Green }\n"
                "function area(r: number): number { return r * r }")
        self.assertEqual(self.text_result("p.a + Color.Green + area(2)"), "10")

    def test_top_level_await_and_result(self):
        self.assertEqual(self.text_result("const s: string = await Promise.resolve('ts'); s.length"), "2")

    def test_syntax_error(self):
        reply, _ = self.error("let x: = 1")
        self.assertEqual(reply["ename"], "SyntaxError")

    def test_interrupt_keeps_state(self):
        self.ok("let n: number = 0")
        reply, _ = self.error("while (true) { n++ }", interrupt_after=1.5)
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        self.assertEqual(self.text_result("n > 0"), "true")


# --- bash -----------------------------------------------------------------------

class BashTest(KernelTest):
    language = "bash"

    def test_language_info(self):
        self.assertEqual(self.kernel.info()["language_info"]["name"], "bash")

    def test_state_persists(self):
        self.ok("x=5; export Y=6; cd /tmp; greet() { echo \"hi $1\"; }; declare -A m=([k]=v)")
        outputs = self.ok("echo $x $Y $PWD ${m[k]}; greet you; bash -c 'echo $Y'")
        self.assertEqual(streams(outputs), [("stdout", "5 6 /tmp v\nhi you\n6\n")])

    def test_stdout_and_stderr_stream(self):
        outputs = self.ok("echo out; echo err >&2; printf 'caf\\xc3\\xa9\\n'")
        # Two pipes: the order between stdout and stderr is not kept.
        text = {name: "".join(t for n, t in streams(outputs) if n == name) for name in ("stdout", "stderr")}
        self.assertEqual(text, {"stdout": "out\ncafé\n", "stderr": "err\n"})

    def test_nonzero_exit_status_is_an_error(self):
        reply, outputs = self.error("echo before; ls /nonexistent-airlock")
        self.assertEqual((reply["ename"], reply["evalue"]), ("NonZeroExitStatus", "Command exited with status 2"))
        self.assertIn(("stdout", "before\n"), streams(outputs))
        reply, _ = self.error("false")
        self.assertEqual(reply["evalue"], "Command exited with status 1")
        self.ok("false; true")

    def test_interrupt_keeps_the_shell(self):
        self.ok("kept=yes")
        reply, _ = self.error("sleep 60; echo not-reached", interrupt_after=1.5)
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        reply, outputs = self.error("spin() { while :; do :; done; }; spin; echo not-reached", interrupt_after=1.5)
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        self.assertNotIn("not-reached", "".join(t for _, t in streams(outputs)))
        self.assertEqual(streams(self.ok("echo $kept")), [("stdout", "yes\n")])

    def test_exit_restarts_the_shell(self):
        reply, outputs = self.error("echo bye; exit 3")
        self.assertEqual(reply["ename"], "KernelChildDied")
        self.assertIn(("stdout", "bye\n"), streams(outputs))
        self.assertEqual(streams(self.ok("echo again")), [("stdout", "again\n")])


if __name__ == "__main__":
    unittest.main()
