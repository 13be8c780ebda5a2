#!/usr/bin/env python3
"""airlock's bash Jupyter kernel: a ChildKernel (child_kernel.py) over one
bash process, so variables, functions, the working directory and exported
variables persist between cells.

    python3 bash_kernel.py -f CONNECTION_FILE

How a cell runs: the cell is written to a private file and bash is sent
`source FILE </dev/null; printf '{"type":"done",...,"rc":%d}' $? >&EVENTS`
on its stdin. bash is interactive (-i, without line editing, job control,
history or prompts) for one reason: on SIGINT an interactive bash abandons
the whole command line, also inside functions and loops of the sourced
cell, and reads the next one, where a non-interactive bash would exit.

Outcome: exit status 0 -> ok; non-zero -> error with ename
"NonZeroExitStatus" and evalue "Command exited with status N" (the status of
the cell's last command, as `$?`); interrupted -> ename "KeyboardInterrupt".
If a cell ends bash (`exit`), a new bash is started and the error says so.
"""

import os
import shlex
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_kernel import ChildKernel  # noqa: E402


def bash_version():
    try:
        return subprocess.run(["bash", "-c", "echo ${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}.${BASH_VERSINFO[2]}"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


class BashKernel(ChildKernel):
    implementation = "airlock-bash"
    implementation_version = "1.0"
    language = "bash"
    banner = "airlock bash kernel"
    child_name = "bash"
    requests_on_stdin = True

    def __init__(self, **kwargs):
        self._cell_dir = tempfile.mkdtemp(prefix="airlock-bash-")
        self._event_fd = None
        super().__init__(**kwargs)
        self.language_info = {"name": "bash", "version": bash_version(), "mimetype": "text/x-sh",
                              "file_extension": ".sh", "codemirror_mode": "shell"}

    def child_argv(self, request_fd, event_fd):
        self._event_fd = event_fd
        return ["bash", "--noprofile", "--norc", "--noediting", "-i"]

    def child_env(self):
        env = dict(os.environ)
        env.update(PS1="", PS2="", PS4="+ ", PROMPT_COMMAND="", TERM=env.get("TERM", "dumb"))
        env.pop("MAILCHECK", None)
        return env

    def after_spawn(self):
        # bash says nothing when it is ready: the setup line ends with "ready".
        self._write_request(("set +m +H; set +o history; unset HISTFILE MAILCHECK PROMPT_COMMAND; "
                             "PS1=; PS2=; printf '{\"type\":\"ready\"}\\n' >&%d\n"
                             % self._event_fd).encode())

    def request_bytes(self, exec_id, code):
        path = os.path.join(self._cell_dir, "cell.sh")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        return ("source %s </dev/null; printf '{\"type\":\"done\",\"id\":%d,\"rc\":%%d}\\n' $? >&%d\n"
                % (shlex.quote(path), exec_id, self._event_fd)).encode()

    def after_interrupt(self, exec_id):
        # An interrupted bash drops the rest of the line, "done" included;
        # this line says where the cell stopped. When the cell finished
        # anyway, "done" comes first and this one is ignored.
        self._write_request(("printf '{\"type\":\"interrupted\",\"id\":%d,\"rc\":%%d}\\n' $? >&%d\n"
                             % (exec_id, self._event_fd)).encode())

    def on_event(self, event, exec_id):
        if event.get("id") != exec_id or event.get("type") not in ("done", "interrupted"):
            return None
        if event["type"] == "interrupted":
            return self.error_outcome("KeyboardInterrupt", "Execution interrupted (SIGINT)")
        rc = int(event.get("rc", 0))
        if rc == 0:
            return {"status": "ok", "result": None}
        return self.error_outcome("NonZeroExitStatus", "Command exited with status %d" % rc)

    def signal_child(self, pid):
        # bash and its foreground commands share bash's process group.
        os.killpg(pid, signal.SIGINT)

    def do_shutdown(self, restart):
        reply = super().do_shutdown(restart)
        try:
            os.unlink(os.path.join(self._cell_dir, "cell.sh"))
            os.rmdir(self._cell_dir)
        except OSError:
            pass
        return reply


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(kernel_class=BashKernel)
