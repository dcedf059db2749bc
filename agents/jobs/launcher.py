"""The launcher of one rank of a command job: the user's command in this host's namespace, as
torchrun would start it, driven by the runner like an agent.

Phases: connect the control socket -> ``ready`` -> wait for ``start`` (the barrier: every
rank's launcher is up, so no rank's rendezvous waits for a host that is not there yet) ->
start the command (``argv`` in ``cwd``, the spec's ``env`` over this process's, stdout and
stderr to their files, the write end of the report pipe as ``TESTBED_REPORT_FD``, a session
of its own so that its whole process group can be signalled, and SIGKILL if this launcher
dies: ``PR_SET_PDEATHSIG``) -> relay its reports (:mod:`agents.jobs.reports`: a step becomes
an :class:`agents.protocol.Iteration` of ``seq`` = step and a line of ``steps_path``; an mrc
backend's event goes to the runner as it is) -> its exit decides: 0 is ``done``, anything else
``failed`` with the status, the steps reached, the last line of its stderr and the log's path.
``stop`` (or the control socket closing) before that: SIGTERM to its process group, SIGKILL
after ``stop_grace_s``.

Exit status: 0 done; 1 failed (the command could not start, exited non-zero, or an mrc run
that never created the mrc backend); 2 bad spec; 3 stopped before the command ended.
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import selectors
import signal
import subprocess

from agents.jobs.reports import BackendSeen, ReportReader, StepReport
from agents.jobs.spec import CommandSpec
from agents.net.control import ControlClient, ControlError
from agents.protocol import Done, Event, Failed, Iteration, Ready, Start, Stop

log = logging.getLogger(__name__)

EXIT_DONE, EXIT_FAILED, EXIT_BAD_SPEC, EXIT_STOPPED = 0, 1, 2, 3
PR_SET_PDEATHSIG = 1    # prctl(2)
TAIL_BYTES = 2048       # how much of the end of stderr is read for the failure's reason


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the launcher dies (no orphaned rank)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def last_line(path: str) -> str:
    """The last non-empty line of a file (at most :data:`TAIL_BYTES` from its end), '' if none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def exit_text(code: int) -> str:
    """``status 3`` or ``signal SIGKILL`` for a Popen return code."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


class Launcher:
    """Run one rank of ``spec``; :meth:`run` returns the exit status."""

    def __init__(self, spec: CommandSpec):
        self.spec = spec
        self.reader = ReportReader()
        self.steps = 0
        self.backend_seen: str | None = None
        self.proc: subprocess.Popen | None = None
        self.control: ControlClient | None = None
        self._steps_file = None

    def run(self) -> int:
        spec = self.spec
        try:
            self.control = ControlClient(spec.control_socket)
        except ControlError as exc:
            log.error("rank %d: %s", spec.rank, exc)
            return EXIT_FAILED
        try:
            return self._run()
        except ControlError as exc:
            log.error("rank %d: %s", spec.rank, exc)
            self._terminate()
            return EXIT_FAILED
        finally:
            self._terminate()
            if self._steps_file is not None:
                self._steps_file.close()
            self.control.close()

    def _run(self) -> int:
        spec, control = self.spec, self.control
        control.send(Ready(spec.agent))
        control.flush_blocking()
        if not self._wait_start():
            return EXIT_STOPPED
        read_fd, write_fd = os.pipe()
        try:
            started = self._start(write_fd)
        finally:
            os.close(write_fd)
        if not started:
            os.close(read_fd)
            return EXIT_FAILED
        log.info("rank %d: started %s (pid %d)", spec.rank, " ".join(spec.argv), self.proc.pid)
        return self._supervise(read_fd)

    def _wait_start(self) -> bool:
        """Block until ``start`` (True) or ``stop``/EOF (False)."""
        sel = selectors.DefaultSelector()
        sel.register(self.control.sock, selectors.EVENT_READ)
        try:
            while True:
                sel.select(1.0)
                self.control.on_readable()
                while self.control.inbox:
                    msg = self.control.inbox.popleft()
                    if isinstance(msg, Start):
                        return True
                    if isinstance(msg, Stop):
                        return False
                if self.control.closed:
                    return False
        finally:
            sel.close()

    def _start(self, write_fd: int) -> bool:
        """Start the command; on failure report it (``failed``) and return False."""
        spec = self.spec
        env = {**os.environ, **spec.env, "TESTBED_REPORT_FD": str(write_fd)}
        opener = lambda path, flags: os.open(path, flags, 0o600)  # noqa: E731
        with open(spec.stdout, "wb", opener=opener) as out, open(spec.stderr, "wb", opener=opener) as err:
            try:
                self.proc = subprocess.Popen(list(spec.argv), cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=err, pass_fds=(write_fd,), start_new_session=True,
                                             preexec_fn=_die_with_parent)
            except OSError as exc:
                why = exc.strerror or str(exc)
                err.write(f"testbed: cannot start {spec.argv[0]!r} in {spec.cwd}: {why}\n".encode())
                self._fail(f"cannot start the command {spec.argv[0]!r} (in {spec.cwd}): {why}; see {spec.stderr}")
                return False
        self._steps_file = open(spec.steps_path, "w", opener=opener)
        return True

    def _supervise(self, read_fd: int) -> int:
        spec, control, proc = self.spec, self.control, self.proc
        pidfd = os.pidfd_open(proc.pid)
        sel = selectors.DefaultSelector()
        sel.register(control.sock, selectors.EVENT_READ, "control")
        sel.register(read_fd, selectors.EVENT_READ, "reports")
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        try:
            while True:
                for key, _ in sel.select(1.0):
                    if key.data == "reports" and not self._read_reports(read_fd):
                        sel.unregister(read_fd)
                    elif key.data == "control":
                        control.on_readable()
                        if control.closed or any(isinstance(m, Stop) for m in control.inbox):
                            control.inbox.clear()
                            log.info("rank %d: stopped by the runner", spec.rank)
                            self._terminate()
                            return EXIT_STOPPED
                        control.inbox.clear()
                    elif key.data == "exit":
                        code = proc.wait()
                        while self._read_reports(read_fd, block=False):
                            pass
                        return self._finish(code)
                control.flush()
        finally:
            sel.close()
            os.close(pidfd)
            os.close(read_fd)

    def _read_reports(self, fd: int, block: bool = True) -> bool:
        """Read what the pipe holds and relay it; False at EOF (or nothing more, not ``block``)."""
        if not block:
            os.set_blocking(fd, False)
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not data:
            return False
        for item in self.reader.feed(data):
            if isinstance(item, StepReport):
                self._on_step(item)
            elif isinstance(item, Event):
                self.control.send(item)
            elif isinstance(item, BackendSeen):
                self.backend_seen = item.name
        return True

    def _on_step(self, rep: StepReport) -> None:
        self.steps += 1
        self._steps_file.write(json.dumps(rep.record()) + "\n")
        self._steps_file.flush()
        self.control.send(Iteration(self.spec.agent, size=0, iter=rep.step, seq=rep.step, warmup=False,
                                    t_start=rep.t_start, t_end=rep.t_end, seconds=rep.seconds, wrong=0))

    def _finish(self, code: int) -> int:
        spec = self.spec
        if self.reader.bad:
            log.warning("rank %d: %d report lines ignored (first: %s)", spec.rank, self.reader.bad,
                        self.reader.first_bad)
        if code != 0:
            tail = last_line(spec.stderr)
            self._fail(f"the command exited with {exit_text(code)} after {self.steps} steps"
                       + (f"; its last error line: {tail}" if tail else "") + f"; see {spec.stderr}")
            return EXIT_FAILED
        if spec.backend == "mrc" and self.backend_seen != "mrc":
            self._fail("the command ended without creating the mrc backend: it ran on another one. Pass "
                       "os.environ['TESTBED_DIST_BACKEND'] (or \"mrc\") to torch.distributed.init_process_group; "
                       f"see {spec.stdout}")
            return EXIT_FAILED
        self.control.send(Done(spec.agent, {"kind": "command", "exit": 0, "steps": self.steps, "host": spec.host,
                                            "job": spec.job, "job_rank": spec.rank, "transport": spec.transport,
                                            "backend": spec.backend, "bad_reports": self.reader.bad}))
        self.control.flush_blocking()
        log.info("rank %d: done after %d steps", spec.rank, self.steps)
        return EXIT_DONE

    def _fail(self, reason: str) -> None:
        log.error("rank %d: %s", self.spec.rank, reason)
        try:
            self.control.send(Failed(self.spec.agent, reason))
            self.control.flush_blocking(1.0)
        except (ControlError, OSError) as exc:
            log.error("rank %d: could not report the failure: %s", self.spec.rank, exc)

    def _terminate(self) -> None:
        """SIGTERM the command's process group, SIGKILL after ``stop_grace_s``; idempotent."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, self.spec.stop_grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue
