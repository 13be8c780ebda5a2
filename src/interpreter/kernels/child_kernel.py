"""A Jupyter kernel (ipykernel.kernelbase.Kernel) over one long-lived child
process: the base of airlock's javascript/typescript and bash kernels.

The child gets four pipes from this process:
  requests  what to run (the child's stdin for bash, an extra fd for node);
  events    one JSON object a line, from the child:
              {"type": "ready"}                         once, after start
              {"type": "stream", "name": ..., "text": ...}
              anything else goes to the subclass' on_event(), which returns
              the outcome of the execution when it is finished;
  stdout, stderr  raw output of the child and its own children, forwarded
              as `stream` messages.

Interrupt: SIGINT to this process while a cell runs is forwarded to the
child (subclass' signal_child); if the child has not finished the execution
after `escalate_after` seconds, the subclass' escalate_interrupt() may try
harder; after `interrupt_grace` seconds it is killed and started again (its
state is lost, and the error says so). Between executions SIGINT is ignored, as
ipykernel does.

The child runs in its own session, so a SIGINT meant for this process is
passed on once; it is killed when this process dies (setpriv --pdeathsig,
where util-linux has it) and exits on EOF of its request pipe.
"""

import codecs
import json
import os
import select
import shutil
import signal
import subprocess
import time

from ipykernel.kernelbase import Kernel


class ChildDied(Exception):
    pass


class ChildKernel(Kernel):
    # Subclasses set these and implement child_argv(), request_bytes(),
    # on_event(), signal_child().
    requests_on_stdin = False
    escalate_after = 1.0
    interrupt_grace = 5.0
    startup_timeout = 60.0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._proc = None
        self._next_id = 0
        self._events_buffer = b""
        self._start_child()

    # --- child lifetime ---------------------------------------------------

    def _start_child(self):
        self._stop_child()
        req_r, req_w = os.pipe()
        ev_r, ev_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self.child_only_fds = []  # child_argv may add fds the child gets and this process closes
        argv = self.child_argv(request_fd=req_r, event_fd=ev_w)
        if shutil.which("setpriv"):
            argv = ["setpriv", "--pdeathsig", "KILL", "--"] + argv
        self._start_error = None
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=req_r if self.requests_on_stdin else subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                pass_fds=(req_r, ev_w, *self.child_only_fds),
                start_new_session=True,
                env=self.child_env(),
            )
        except OSError as e:  # e.g. no node on PATH: the kernel runs and says so
            self._start_error = "cannot start %s: %s" % (argv[0], e)
            self.log.error("%s", self._start_error)
            for fd in (req_w, ev_r, out_r, err_r):
                os.close(fd)
            return
        finally:
            for fd in (req_r, ev_w, out_w, err_w, *self.child_only_fds):
                os.close(fd)
        self._req_w, self._ev_r, self._out_r, self._err_r = req_w, ev_r, out_r, err_r
        self._events_buffer = b""
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }
        self.after_spawn()
        # Wait for "ready", dropping whatever the child says while starting.
        deadline = time.monotonic() + self.startup_timeout
        said = []
        while time.monotonic() < deadline:
            try:
                events, streams = self._poll(0.5)
            except ChildDied as e:  # e.g. the program is missing (setpriv's exec failed)
                said += [text for _, text in (e.args[0] if e.args else []) + self._drain_raw()]
                status = self._proc.wait()
                self._stop_child()
                self._start_error = "%s ended while starting (status %s): %s" % (
                    self.child_name, status, "".join(said).strip()[-500:])
                self.log.error("%s", self._start_error)
                return
            said += [text for _, text in streams]
            if any(e.get("type") == "ready" for e in events):
                return
        self.log.error("%s did not become ready within %d s", argv, self.startup_timeout)

    def _stop_child(self):
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self._proc.kill()
            self._proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for fd in (self._req_w, self._ev_r, self._out_r, self._err_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._proc = None

    def child_env(self):
        return None  # inherit

    def after_spawn(self):
        """Called once the child runs, before waiting for its "ready"."""

    # --- I/O ----------------------------------------------------------------

    def _poll(self, timeout):
        """Waits up to `timeout` s for the child; returns (events, streams):
        the event objects, and [(name, text)] of the raw output. Raises
        ChildDied (with the streams read) when the event pipe closes."""
        fds = [self._ev_r, self._out_r, self._err_r]
        ready, _, _ = select.select(fds, [], [], timeout)
        events, streams = [], []
        for fd in (self._out_r, self._err_r):  # raw output first: it was written earlier
            if fd in ready:
                name = "stdout" if fd == self._out_r else "stderr"
                data = os.read(fd, 65536)
                if data:
                    streams.append((name, self._decoders[name].decode(data)))
        if self._ev_r in ready:
            data = os.read(self._ev_r, 65536)
            if not data:
                raise ChildDied(streams)
            self._events_buffer += data
            *lines, self._events_buffer = self._events_buffer.split(b"\n")
            for line in lines:
                try:
                    events.append(json.loads(line.decode("utf-8", "replace")))
                except ValueError:
                    continue
        return events, streams

    def _publish_streams(self, chunks, silent):
        """Publishes [(name, text)], merging neighbours of the same stream."""
        merged = []
        for name, text in chunks:
            if not text:
                continue
            if merged and merged[-1][0] == name:
                merged[-1][1] += text
            else:
                merged.append([name, text])
        if silent:
            return
        for name, text in merged:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def _drain_raw(self):
        """The raw output already in the pipes (it was written before the
        child's "done" event)."""
        chunks = []
        for _ in range(64):  # bounded: a background writer must not keep us here
            ready, _, _ = select.select([self._out_r, self._err_r], [], [], 0)
            if not ready:
                return chunks
            for fd in ready:
                name = "stdout" if fd == self._out_r else "stderr"
                data = os.read(fd, 65536)
                if data:
                    chunks.append((name, self._decoders[name].decode(data)))
                else:  # EOF: the child is gone; stop watching
                    return chunks
        return chunks

    # --- execution ------------------------------------------------------------

    def _execute(self, code, silent):
        """Runs one cell; returns the outcome dict the subclass' on_event
        made: {"status": "ok", "result": str|None} or {"status": "error",
        "ename", "evalue", "traceback": [str]}."""
        if self._proc is None:
            self._start_child()
            if self._proc is None:
                return self.error_outcome("KernelChildDied", self._start_error or "no %s process" % self.child_name)
        self._next_id += 1
        exec_id = self._next_id
        interrupted_at = []

        def on_sigint(signum, frame):
            if not interrupted_at:
                interrupted_at.append(time.monotonic())
                try:
                    self.signal_child(self._proc.pid)
                except OSError:
                    pass

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            try:
                self._write_request(self.request_bytes(exec_id, code))
                after_interrupt_done = False
                escalated = False
                while True:
                    events, streams = self._poll(0.1)
                    chunks = list(streams)
                    outcome = None
                    for event in events:
                        if event.get("type") == "stream":
                            chunks.append((event.get("name", "stdout"), str(event.get("text", ""))))
                        elif outcome is None:
                            outcome = self.on_event(event, exec_id)
                    if outcome is not None:
                        chunks += self._drain_raw()
                    self._publish_streams(chunks, silent)
                    if outcome is not None:
                        return outcome
                    if interrupted_at and not after_interrupt_done:
                        after_interrupt_done = True
                        self.after_interrupt(exec_id)
                    if (interrupted_at and not escalated and
                            time.monotonic() - interrupted_at[0] > self.escalate_after):
                        escalated = True
                        self.escalate_interrupt()
                    if interrupted_at and time.monotonic() - interrupted_at[0] > self.interrupt_grace:
                        self._publish_streams(self._drain_raw(), silent)
                        self._start_child()
                        return self.error_outcome(
                            "KeyboardInterrupt",
                            "Execution interrupted; the %s process did not stop, so it was "
                            "restarted and the state of this context was lost" % self.child_name)
            except (ChildDied, BrokenPipeError) as e:
                early = e.args[0] if isinstance(e, ChildDied) and e.args else []
                self._publish_streams(early + self._drain_raw(), silent)
                status = self._proc.poll() if self._proc else None
                self._start_child()
                return self.error_outcome(
                    "KernelChildDied",
                    "The %s process ended (status %s); a new one was started and the state "
                    "of this context was lost" % (self.child_name, status))
        finally:
            signal.signal(signal.SIGINT, previous)

    def _write_request(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self._req_w, view)
            view = view[n:]

    @staticmethod
    def error_outcome(ename, evalue, traceback=None):
        return {"status": "error", "ename": ename, "evalue": evalue,
                "traceback": traceback if traceback is not None else ["%s: %s" % (ename, evalue)]}

    def after_interrupt(self, exec_id):
        """Called once, in the loop, after SIGINT was forwarded."""

    def escalate_interrupt(self):
        """Called once when the child has not answered a forwarded SIGINT
        within `escalate_after` seconds."""

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False, *, cell_id=None):
        outcome = self._execute(code, silent)
        if outcome["status"] == "ok":
            if outcome.get("result") is not None and not silent:
                self.send_response(self.iopub_socket, "execute_result", {
                    "execution_count": self.execution_count,
                    "data": {"text/plain": outcome["result"]},
                    "metadata": {},
                })
            return {"status": "ok", "execution_count": self.execution_count,
                    "payload": [], "user_expressions": {}}
        error = {"ename": outcome["ename"], "evalue": outcome["evalue"],
                 "traceback": outcome["traceback"]}
        if not silent:
            self.send_response(self.iopub_socket, "error", error)
        return dict(error, status="error", execution_count=self.execution_count)

    def do_shutdown(self, restart):
        self._stop_child()
        return {"status": "ok", "restart": restart}
