#!/usr/bin/env python3
"""airlock's javascript (and, with --typescript, typescript) Jupyter kernel:
a ChildKernel over one Node process running node_repl.js (see there for how
cells run, and docs/code-interpreter.md "Kernels").

    python3 js_kernel.py [--typescript] -f CONNECTION_FILE
"""

import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_kernel import ChildKernel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TYPESCRIPT = "--typescript" in sys.argv


_node_version = []


def node_version():
    if _node_version:
        return _node_version[0]
    try:
        version = subprocess.run(["node", "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip().lstrip("v")
    except (OSError, subprocess.SubprocessError):
        version = ""
    _node_version.append(version)
    return version


class JsKernel(ChildKernel):
    implementation = "airlock-typescript" if TYPESCRIPT else "airlock-javascript"
    implementation_version = "1.0"
    language = "typescript" if TYPESCRIPT else "javascript"
    banner = "airlock %s kernel (Node.js)" % language
    child_name = "node"

    @property
    def language_info(self):
        if TYPESCRIPT:
            return {"name": "typescript", "version": node_version(), "mimetype": "text/typescript",
                    "file_extension": ".ts"}
        return {"name": "javascript", "version": node_version(), "mimetype": "application/javascript",
                "file_extension": ".js"}

    def child_argv(self, request_fd, event_fd):
        interrupt_r, self._interrupt_w = os.pipe()
        self.child_only_fds.append(interrupt_r)
        argv = ["node", os.path.join(HERE, "node_repl.js"), "--request-fd=%d" % request_fd,
                "--event-fd=%d" % event_fd, "--interrupt-fd=%d" % interrupt_r]
        return argv + (["--typescript"] if TYPESCRIPT else [])

    def request_bytes(self, exec_id, code):
        return (json.dumps({"id": exec_id, "code": code}) + "\n").encode("utf-8", "surrogatepass")

    def on_event(self, event, exec_id):
        if event.get("type") != "done" or event.get("id") != exec_id:
            return None
        if event.get("status") == "ok":
            return {"status": "ok", "result": event.get("result")}
        return self.error_outcome(str(event.get("ename", "Error")), str(event.get("evalue", "")),
                                  [str(line) for line in event.get("traceback") or []])

    def signal_child(self, pid):
        os.kill(pid, signal.SIGINT)

    def escalate_interrupt(self):
        # Node is stuck outside the cell's vm call (a loop after an await):
        # node_repl.js' watchdog thread stops the running JavaScript.
        try:
            os.write(self._interrupt_w, b"!")
        except OSError:
            pass

    def _stop_child(self):
        super()._stop_child()
        if getattr(self, "_interrupt_w", None) is not None:
            try:
                os.close(self._interrupt_w)
            except OSError:
                pass
            self._interrupt_w = None


if __name__ == "__main__":
    if TYPESCRIPT:
        sys.argv.remove("--typescript")
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(kernel_class=JsKernel)
