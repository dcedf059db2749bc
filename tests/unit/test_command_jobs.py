"""Command jobs without a fabric: the launcher process driven by a test playing the runner, the
report pipe's parser, the launcher spec, and the scenario keys of a command job."""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agents.jobs.reports import BackendSeen, ReportReader, StepReport
from agents.jobs.spec import CommandSpec, CommandSpecError, parse_command_spec
from agents.protocol import Event
from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, load_scenario

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "agents" / "jobs" / "lib"
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True, bpf_egress=True)


# -- the report pipe ----------------------------------------------------------------------------
def test_report_reader_splits_lines_across_reads_and_keeps_going_after_bad_ones():
    reader = ReportReader()
    step = json.dumps({"type": "step", "step": 0, "t_start": 1.0, "t_end": 1.5, "seconds": 0.5, "loss": 2.5})
    event = json.dumps({"type": "event", "rank": 3, "t": 2.0, "kind": "qp_error", "reason": "retries exhausted"})
    data = (step + "\nnot json\n" + event + "\n" + '{"type": "backend", "name": "mrc"}\n'
            + '{"type": "step", "step": "x"}\n').encode()
    got = reader.feed(data[:17]) + reader.feed(data[17:])
    assert got[0] == StepReport(0, 1.0, 1.5, 0.5, {"loss": 2.5})
    assert isinstance(got[1], Event) and got[1].reason == "retries exhausted"
    assert got[2] == BackendSeen("mrc")
    assert len(got) == 3 and reader.bad == 2 and "not JSON" in reader.first_bad


def test_spec_round_trips_and_names_every_problem():
    spec = CommandSpec(run_id="r/gloo-tcp", job="job0", rank=1, agent=1, world_size=2, host="h1", transport="gloo-tcp",
                       backend="gloo", control_socket="/x", argv=("python", "t.py"), cwd="/", stdout="/o",
                       stderr="/e", steps_path="/s", env={"A": "1"}, steps=5)
    assert parse_command_spec(json.loads(json.dumps(spec.to_dict()))) == spec
    bad = {**spec.to_dict(), "rank": 2, "backend": "nccl", "argv": [], "extra": 1}
    del bad["cwd"]
    with pytest.raises(CommandSpecError) as err:
        parse_command_spec(bad)
    assert {"extra: unknown key", "cwd: missing"} <= set(err.value.problems)


# -- the launcher, with the test as the runner -----------------------------------------------------
class Runner:
    """A control socket for one launcher; collects its messages."""

    def __init__(self, tmp_path: Path, argv: list[str], *, backend: str = "gloo", grace_s: float = 1.0):
        self.sock_path = str(tmp_path / "ctl.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.sock_path)
        self.listener.listen(1)
        out = tmp_path / "job"
        out.mkdir()
        self.spec = CommandSpec(run_id="t/x", job="job0", rank=0, agent=0, world_size=2, host="h0",
                                transport="mrc" if backend == "mrc" else "gloo-tcp", backend=backend,
                                control_socket=self.sock_path, argv=tuple(argv), cwd=str(tmp_path),
                                stdout=str(out / "rank0.out"), stderr=str(out / "rank0.err"),
                                steps_path=str(out / "steps-rank0.jsonl"),
                                env={"PYTHONPATH": str(LIB)}, stop_grace_s=grace_s)
        path = tmp_path / "rank0.json"
        path.write_text(json.dumps(self.spec.to_dict()))
        self.proc = subprocess.Popen([sys.executable, "-m", "agents.jobs", "--job", str(path), "--log-level", "WARNING"],
                                     cwd=REPO, stderr=subprocess.PIPE, text=True)
        self.conn = None
        self.messages: list[dict] = []
        self._buf = b""

    def pump(self, until, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        sel = selectors.DefaultSelector()
        sel.register(self.listener if self.conn is None else self.conn, selectors.EVENT_READ)
        try:
            while not until():
                assert time.monotonic() < deadline, f"timeout; messages {self.messages}; exit {self.proc.poll()}"
                for key, _ in sel.select(0.1):
                    if key.fileobj is self.listener:
                        self.conn, _ = self.listener.accept()
                        sel.unregister(self.listener)
                        sel.register(self.conn, selectors.EVENT_READ)
                        continue
                    data = self.conn.recv(1 << 16)
                    if not data:
                        sel.unregister(self.conn)
                        return
                    *lines, self._buf = (self._buf + data).split(b"\n")
                    self.messages += [json.loads(line) for line in lines if line]
        finally:
            sel.close()

    def types(self) -> list[str]:
        return [m["type"] for m in self.messages]

    def send(self, msg: dict) -> None:
        self.conn.sendall(json.dumps(msg).encode() + b"\n")

    def run(self, timeout_s: float = 20.0) -> int:
        self.pump(lambda: "ready" in self.types())
        self.send({"type": "start"})
        self.pump(lambda: self.proc.poll() is not None, timeout_s)
        return self.proc.wait(5)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


@pytest.fixture
def runner(tmp_path):
    made = []

    def make(argv, **kw):
        made.append(Runner(tmp_path, argv, **kw))
        return made[-1]
    yield make
    for r in made:
        r.close()


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_steps_become_iterations_and_a_clean_exit_is_done(tmp_path, runner):
    r = runner([sys.executable, script(tmp_path, """
        import os, testbed_job
        assert os.environ.get("TESTBED_REPORT_FD")
        for i in range(3):
            testbed_job.step(loss=1.0 / (i + 1))
        print("trained")
    """)])
    assert r.run() == 0
    its = [m for m in r.messages if m["type"] == "iteration"]
    assert [m["seq"] for m in its] == [0, 1, 2] and all(m["t_end"] >= m["t_start"] for m in its)
    done = [m for m in r.messages if m["type"] == "done"][0]
    assert done["summary"]["steps"] == 3 and done["summary"]["exit"] == 0
    steps = [json.loads(line) for line in Path(r.spec.steps_path).read_text().splitlines()]
    assert [s["loss"] for s in steps] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert Path(r.spec.stdout).read_text() == "trained\n"


def test_a_missing_program_is_one_failure_naming_it_and_the_log(tmp_path, runner):
    r = runner(["/nonexistent/python9"])
    assert r.run() == 1
    failed = [m for m in r.messages if m["type"] == "failed"]
    assert len(failed) == 1 and "/nonexistent/python9" in failed[0]["reason"]
    assert r.spec.stderr in failed[0]["reason"] and "No such file" in Path(r.spec.stderr).read_text()


def test_a_crash_reports_the_status_the_steps_and_the_last_error_line(tmp_path, runner):
    r = runner([sys.executable, script(tmp_path, """
        import sys, testbed_job
        testbed_job.step()
        raise RuntimeError("rank 0 lost its peer")
    """)])
    assert r.run() == 1
    reason = [m for m in r.messages if m["type"] == "failed"][0]["reason"]
    assert "status 1 after 1 steps" in reason and "RuntimeError: rank 0 lost its peer" in reason
    assert r.spec.stderr in reason


def test_an_mrc_run_that_never_made_the_mrc_backend_fails(tmp_path, runner):
    r = runner([sys.executable, "-c", "pass"], backend="mrc")
    assert r.run() == 1
    assert "without creating the mrc backend" in [m for m in r.messages if m["type"] == "failed"][0]["reason"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _start_and_read(r: Runner, pids: Path) -> str:
    """Pass the barrier, then wait for the command to write its PIDs to ``pids``."""
    r.pump(lambda: "ready" in r.types())
    r.send({"type": "start"})
    deadline = time.monotonic() + 10
    while not (pids.exists() and pids.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return pids.read_text()


def _gone(*pids: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def test_stop_ends_the_command_and_its_children(tmp_path, runner):
    pids = tmp_path / "pids"
    r = runner([sys.executable, script(tmp_path, f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a job that ignores SIGTERM gets SIGKILL
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(60)
    """)], grace_s=0.5)
    job, child = map(int, _start_and_read(r, pids).split())
    r.send({"type": "stop"})
    assert r.proc.wait(10) == 3
    assert _gone(job, child)


def test_a_killed_launcher_takes_its_command_with_it(tmp_path, runner):
    pids = tmp_path / "pids"
    r = runner([sys.executable, script(tmp_path, f"""
        import os, time
        open({str(pids)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
    """)])
    job = int(_start_and_read(r, pids))
    r.proc.send_signal(signal.SIGKILL)
    r.proc.wait(5)
    assert _gone(job)


# -- the scenario keys -----------------------------------------------------------------------------
HEAD = """\
topology: {topo}
transports: [gloo-tcp, mrc]
workload:
  command: [python, train.py]
  hosts: [h0_0_0, h1_0_0]
  steps: 10
"""


def problems(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "train.py").write_text("")
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("{topo}", str(REPO / "topologies" / "fat-tree-k4.yaml")))
    try:
        load_scenario(path, features=FEATURES)
    except SpecError as exc:
        return [f"{p.line}: {p.key_path}: {p.message}" for p in exc.problems]
    return []


def test_a_command_job_validates_and_resolves_its_ring(tmp_path):
    assert problems(tmp_path, HEAD) == []
    path = tmp_path / "s.yaml"
    wl = load_scenario(path, features=FEATURES).workload
    assert wl.is_command and wl.command == ("python", "train.py") and wl.cwd == str(tmp_path.resolve())
    assert wl.steps == 10 and wl.peers(0) == ((1,), (1,))


@pytest.mark.parametrize("change,expected", [
    (("command: [python, train.py]", "command: [python, nowhere.py]"), "4: workload.command: script 'nowhere.py' not found"),
    (("command: [python, train.py]", "command: [no-such-program-x]"), "4: workload.command: program 'no-such-program-x' not found"),
    (("steps: 10", "steps: 10\n  env: {RANK: 3}"), "7: workload.env.RANK: RANK is set by the testbed"),
    (("steps: 10", "steps: 10\n  min_bytes: 1MiB"), "7: workload.min_bytes: 'min_bytes' is a collective's key"),
    (("transports: [gloo-tcp, mrc]", "transports: [rc]"), "2: transports[0]: 'rc' is not a command job's transport"),
    (("steps: 10", "steps: 10\ntimeline:\n  - at_iteration: 1\n    link_down: {crossed_by: gloo-tcp}"),
     "9: timeline[0].link_down: a target on Gloo's flows needs 'at_iteration' >= 2"),
    (("transports: [gloo-tcp, mrc]", "transports: [mrc, gloo-tcp]"), None),
    (("steps: 10", "steps: 10\ntimeline:\n  - at_iteration: 12\n    link_down: a0_0-c0_0"),
     "8: timeline[0].at_iteration: step 12 never happens: the job reports 10 steps"),
])
def test_bad_command_jobs_are_named_at_their_line(tmp_path, change, expected):
    got = problems(tmp_path, HEAD.replace(*change))
    if expected is None:
        assert got == []
    else:
        assert any(p.startswith(expected) for p in got), got


def test_gloo_tcp_is_refused_for_a_collective(tmp_path):
    text = ("topology: {topo}\ntransports: [gloo-tcp]\nworkload: {collective: all_reduce, hosts: all, "
            "min_bytes: 1MiB, max_bytes: 1MiB}\n")
    assert any("runs a command job's torch.distributed backend" in p for p in problems(tmp_path, text))


def test_each_rank_gets_torchruns_environment(tmp_path):
    from testbed.spec.commandjobs import build_command_specs
    problems(tmp_path, HEAD)
    sc = load_scenario(tmp_path / "s.yaml", features=FEATURES)
    specs = build_command_specs(sc, "gloo-tcp", tmp_path / "gloo-tcp", run_id="r", control_socket="/s",
                                python="/venv/python")
    assert [s["argv"] for s in specs] == [["/venv/python", "train.py"]] * 2
    env = specs[1]["env"]
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["MASTER_PORT"]) == ("1", "2", "0", "29500")
    assert env["MASTER_ADDR"] == str(sc.topology.nics["h0_0_0"][0].address)
    assert env["GLOO_SOCKET_IFNAME"] == sc.topology.nics["h1_0_0"][0].ifname
    assert env["TESTBED_DIST_BACKEND"] == "gloo" and str(LIB) in env["PYTHONPATH"].split(os.pathsep)
    with pytest.raises(ValueError):
        build_command_specs(sc, "tcp", tmp_path, run_id="r", control_socket="/s", python="p")
