"""The data path outlives the controller: the runner's controller handling on a fake clock and a
fake controller process. A controller that exits or stops reading after its hello is lost
(journaled, the run goes on); one that never says hello is an error naming its log."""

from __future__ import annotations

import socket
import time

import pytest

from agents.protocol import Event, Hello
from testbed.faults.steps import EVAction
from testbed.run.control import CONTROLLER, ControlServer
from testbed.run.ctlwatch import HELLO_TIMEOUT_S, MAX_RESTARTS, SILENCE_S, ControllerWatch, Lost, NoHello, Restarts
from testbed.run.sampling import LINK_SAMPLE_S
from testbed.run.state import RunState
from testbed.run.transport import RunnerError, TransportRun


class FakeProc:
    """A controller process: runs until :meth:`exit` (or kill)."""

    def __init__(self, pid: int = 4242):
        self.pid = pid
        self.code: int | None = None
        self.killed = False

    def poll(self):
        return self.code

    def exit(self, code: int) -> None:
        self.code = code

    def kill(self) -> None:
        self.killed, self.code = True, -9

    def wait(self, timeout=None):
        return self.code


class Records(list):
    """events.jsonl in memory."""

    def write(self, record: dict) -> None:
        self.append(record)


class Display:
    def __init__(self):
        self.lines = []

    def say(self, transport, t, text, **kw):
        self.lines.append(text)


def test_watch_verdicts_on_a_fake_clock():
    w = ControllerWatch(100.0)
    assert w.check(100.0 + HELLO_TIMEOUT_S - 0.1, exit_code=None, connected=False, stalled_s=0) is None
    assert isinstance(w.check(100.0 + HELLO_TIMEOUT_S, exit_code=None, connected=False, stalled_s=0), NoHello)
    w = ControllerWatch(0.0)
    assert "status 2 before it said hello" in w.check(0.5, exit_code=2, connected=False, stalled_s=0).reason
    w = ControllerWatch(0.0)
    w.on_hello(1.0)
    assert w.live and w.check(2.0, exit_code=None, connected=True, stalled_s=SILENCE_S - 0.1) is None
    assert w.check(3.0, exit_code=None, connected=True, stalled_s=SILENCE_S) == \
        Lost(f"silent: read nothing for {SILENCE_S:.1f} s with messages waiting")
    assert not w.live and w.check(4.0, exit_code=-9, connected=False, stalled_s=0) is None   # once
    w = ControllerWatch(0.0)
    w.on_hello(1.0)
    assert w.check(2.0, exit_code=None, connected=False, stalled_s=0) is None   # EOF: its exit comes next
    assert w.check(2.5, exit_code=-9, connected=False, stalled_s=0) == Lost("exited with status -9")


@pytest.fixture
def runner(tmp_path):
    """A TransportRun's controller handling alone: a real ControlServer on a fake clock, a
    connected controller socket (the test decides when it reads), a fake controller process."""
    now = [0.0]
    run = object.__new__(TransportRun)
    run.dir, run.transport = tmp_path, "mrc"
    run.records = None
    run.events = Records()
    run.journal = lambda rec: run.events.append(rec)
    run.display, run._t_wall_start = Display(), None
    run.server = ControlServer(str(tmp_path / "c.sock"), clock=lambda: now[0], limit_bytes=16 << 10)
    run.controller, run._drops_journaled, run._ctl_socket = FakeProc(), 0, run.server.path
    run.status, run.world, run.procs = None, ["h0", "h1"], {}
    run.state = RunState(run.world, timeout_s=60, controller=ControllerWatch(0.0))
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ctl.connect(run.server.path)
    ctl.sendall(b'{"type":"hello","role":"controller"}\n')
    deadline = time.monotonic() + 5
    while not run.server.has_controller and time.monotonic() < deadline:
        for msg in run.server.poll(0.05):
            assert isinstance(msg, Hello)
            run.state.controller.on_hello(now[0])
    run.server.by_rank[CONTROLLER].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    yield run, ctl, now
    ctl.close()
    run.server.close()


def ev_stats(i: int) -> Event:
    return Event(0, float(i), "ev_stats", peer="h1", evs=[{"ev_id": e, "sent": i, "lost": 0} for e in range(8)])


def test_a_killed_controller_is_lost_and_the_run_goes_on(runner):
    run, ctl, now = runner
    now[0] = 6.0
    run.controller.exit(-9)
    ctl.close()
    run._check_processes()          # tick: the controller is lost, the run is not over
    assert run.state.outcome is None
    lost = [e for e in run.events if e["kind"] == "controller_lost"]
    assert lost == [{"kind": "controller_lost", "reason": "exited with status -9", "exit": -9, "pid": 4242}]
    assert not run.controller_live and not run.server.has_controller
    run._on_message(ev_stats(1))    # nothing is relayed to it any more, nothing fails
    run._check_processes()
    assert len([e for e in run.events if e["kind"] == "controller_lost"]) == 1


def test_a_silent_controller_is_lost_killed_and_its_drops_journaled(runner):
    run, ctl, now = runner
    slowest = 0.0
    for i in range(2000):           # the controller reads nothing
        t = time.perf_counter()
        run._on_message(ev_stats(i))
        slowest = max(slowest, time.perf_counter() - t)
        now[0] += 0.01
        if i % 100 == 0:
            run._check_processes()
    # a relay never waits for the controller (a blocking send would hang here: the controller reads
    # nothing); the bound only catches that, a busy machine may run one call late
    assert slowest < 20 * LINK_SAMPLE_S
    drops = [e["dropped_ev_stats"] for e in run.events if e["kind"] == "relay"]
    assert drops and drops == sorted(set(drops)) and drops[-1] <= 2000   # journaled as they grow
    lost = next(e for e in run.events if e["kind"] == "controller_lost")
    assert lost["reason"].startswith("silent: read nothing for") and lost["exit"] == -9 and run.controller.killed
    assert run.state.outcome is None and not run.controller_live


def test_a_timeline_ev_action_after_the_loss_is_journaled_unsent(runner):
    run, ctl, now = runner
    run.controller.exit(1)
    run._check_processes()

    class Step:
        change, index, action = EVAction("l1", "deny"), 3, "ev_deny"

    class Timeline:
        def due(self, now):
            return [Step()]
    run.state.timeline = Timeline()
    run._do(run.state.on_time(1.0))
    rec = run.events[-1]
    assert rec["kind"] == "controller" and rec["sent"] is False
    assert run.display.lines[-1].endswith("(controller lost)")


def test_restarts_are_counted_and_bounded():
    off = Restarts(False)
    assert "restart is off" in off.after_loss() and off.done == 0
    on = Restarts(True)
    assert [on.after_loss() for _ in range(MAX_RESTARTS)] == [None] * MAX_RESTARTS
    assert on.after_loss() == f"the limit of {MAX_RESTARTS} restarts is reached" and on.done == MAX_RESTARTS


def test_a_restarted_controller_without_hello_is_lost_again_not_an_error():
    w = ControllerWatch(10.0, restarted=True)
    assert w.check(10.0 + HELLO_TIMEOUT_S - 0.1, exit_code=None, connected=False, stalled_s=0) is None
    assert w.check(10.0 + HELLO_TIMEOUT_S, exit_code=None, connected=False, stalled_s=0) == \
        Lost(f"restarted, said no hello within {HELLO_TIMEOUT_S:g} s of its start")
    w = ControllerWatch(10.0, restarted=True)
    assert w.check(10.5, exit_code=1, connected=False, stalled_s=0) == Lost("restarted, exited with status 1 before "
                                                                             "it said hello")


def test_a_lost_controller_is_restarted_with_resync_and_the_journal_says_so(runner, monkeypatch):
    """controller: {restart: true}: the killed controller is journaled lost, a new one is spawned
    with --resync (journaled ``restart``), joins the barrier's watch, and its hello and its
    resync are journaled; the limit ends the restarts."""
    import subprocess
    from agents.protocol import Synced
    run, ctl, now = runner
    spawned = []

    def popen(argv, **kw):
        spawned.append(argv)
        return FakeProc(5000 + len(spawned))
    monkeypatch.setattr(subprocess, "Popen", popen)
    run.state.restarts = Restarts(True, limit=1)
    run.scenario = type("S", (), {"controller": "replace"})()
    run.python, run.logs = "python", []
    run.controller.exit(-9)
    ctl.close()
    run._check_processes()
    assert [e.get("phase", e["kind"]) for e in run.events] == ["controller_lost", "restart"]
    restart = run.events[-1]
    assert restart == {"kind": "controller", "phase": "restart", "pid": 5001, "attempt": 1,
                       "after": "exited with status -9"}
    assert spawned[0][-1] == "--resync" and run.controller.pid == 5001
    assert run.state.controller.restarted and not run.controller_live
    run._on_message(Hello("controller"))
    run._on_message(Synced(2, 2, 1, 0, 1))
    assert run.controller_live and run.events[-2:] == [
        {"kind": "controller", "phase": "connected"},
        {"kind": "controller", "phase": "resynced", "connections": 2, "answered": 2, "replaced": 1, "denied": 0,
         "assumed_bad": 1}]
    run.controller.exit(1)
    run._check_processes()       # lost again: the limit (1) is reached
    assert run.events[-1] == {"kind": "controller", "phase": "not_restarted",
                              "reason": "the limit of 1 restarts is reached"}
    assert len(spawned) == 1


def test_a_restart_that_cannot_start_ends_nothing(runner, monkeypatch):
    import subprocess

    def popen(argv, **kw):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(subprocess, "Popen", popen)
    run, ctl, now = runner
    run.state.restarts = Restarts(True)
    run.scenario = type("S", (), {"controller": "replace"})()
    run.python, run.logs = "python", []
    run.controller.exit(-9)
    run._check_processes()
    assert run.events[-1] == {"kind": "controller", "phase": "not_restarted",
                              "reason": "cannot start it: [Errno 24] Too many open files"}
    assert run.state.outcome is None and not run.controller_live


def test_no_hello_is_an_error_naming_the_controller_log(tmp_path):
    run = object.__new__(TransportRun)
    run.dir, run.controller = tmp_path, FakeProc()
    run.state = RunState(["h0"], timeout_s=60, controller=ControllerWatch(0.0))
    run.server = ControlServer(str(tmp_path / "c.sock"))
    try:
        run._check_controller(HELLO_TIMEOUT_S - 1)
        with pytest.raises(RunnerError, match=rf"no hello within {HELLO_TIMEOUT_S:g} s.*controller\.log"):
            run._check_controller(HELLO_TIMEOUT_S)
    finally:
        run.server.close()
