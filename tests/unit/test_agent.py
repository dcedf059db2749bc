"""The agent process end to end on loopback (::1), with the test playing the runner."""
from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.jobspec import JobSpecError, parse_job

REPO = Path(__file__).resolve().parents[2]


def _free_port(kind) -> int:
    with socket.socket(socket.AF_INET6, kind) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


def make_jobs(tmp_path: Path, transport: str, *, world_size=3, sizes=(4 << 20,),
              iterations=2, warmup=1, n_evs=4, **extra) -> list[dict]:
    hosts = [f"h{r}" for r in range(world_size)]
    udp = [_free_port(socket.SOCK_DGRAM) for _ in hosts]
    tcp = [_free_port(socket.SOCK_STREAM) for _ in hosts]

    def peer(r):
        return {"host": hosts[r], "ecmp_addr": "::1", "port": udp[r], "tcp_port": tcp[r],
                "evs": [{"ev_id": e, "address": "::1", "links": [f"l{e}"]} for e in range(n_evs)]}

    jobs = []
    for r in range(world_size):
        job = {"run_id": "t", "rank": r, "world": hosts, "host": hosts[r],
               "transport": transport, "control_socket": str(tmp_path / "ctl.sock"),
               "seed": 5, "sizes": list(sizes), "iterations": iterations, "warmup": warmup,
               "sample_interval_s": 0.01, "port": udp[r], "mtu": 9000 if transport != "tcp"
               else 1500, "next": peer((r + 1) % world_size),
               "prev": peer((r - 1) % world_size), "bind_addr": "::1", "tcp_port": tcp[r],
               "qp": {"timeout": 16, "retry_linear": 7, "retry_exp": 7, "cc": "uet-1.0-nscc",
                      "cc_params": {"rate_bps": 1e9, "base_rtt_s": 0.001}}, "linger_s": 5.0}
        job.update(extra)
        jobs.append(job)
    return jobs


class FakeRunner:
    """Listen on the control socket, start the agents, collect their messages per rank."""

    def __init__(self, tmp_path: Path, jobs: list[dict]):
        self.path = jobs[0]["control_socket"]
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.conns: dict[int, socket.socket] = {}
        self.messages: dict[int, list[dict]] = {j["rank"]: [] for j in jobs}
        self.procs = []
        for job in jobs:
            path = tmp_path / f"job{job['rank']}.json"
            path.write_text(json.dumps(job))
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "agents", "--job", str(path), "--log-level", "WARNING"],
                cwd=REPO, stderr=subprocess.PIPE, text=True))
        self._buf: dict[socket.socket, bytes] = {}

    def pump(self, until, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                errs = [p.poll() for p in self.procs]
                raise AssertionError(f"timeout; exit codes {errs}; got "
                                     f"{ {r: [m['type'] for m in ms][-3:] for r, ms in self.messages.items()} }")
            for key, _ in self.sel.select(min(left, 0.1)):
                if key.fileobj is self.listener:
                    conn, _ = self.listener.accept()
                    self.sel.register(conn, selectors.EVENT_READ)
                    self._buf[conn] = b""
                    continue
                data = key.fileobj.recv(1 << 20)
                if not data:
                    self.sel.unregister(key.fileobj)
                    continue
                buf = self._buf[key.fileobj] + data
                *lines, self._buf[key.fileobj] = buf.split(b"\n")
                for line in lines:
                    msg = json.loads(line)
                    self.messages[msg["rank"]].append(msg)
                    if msg["type"] == "ready":
                        self.conns[msg["rank"]] = key.fileobj

    def types(self, rank: int) -> list[str]:
        return [m["type"] for m in self.messages[rank]]

    def broadcast(self, msg: dict) -> None:
        for conn in self.conns.values():
            conn.sendall(json.dumps(msg).encode() + b"\n")

    def wait_exit(self, timeout_s: float) -> list[int]:
        return [p.wait(timeout_s) for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.sel.close()
        self.listener.close()


@pytest.fixture
def runner_for(tmp_path):
    made = []

    def make(jobs):
        made.append(FakeRunner(tmp_path, jobs))
        return made[-1]
    yield make
    for r in made:
        r.close()


def _all(runner, kind):
    return lambda: all(kind in runner.types(r) or "failed" in runner.types(r)
                       for r in runner.messages)


@pytest.mark.parametrize("transport", ["mrc", "rc", "tcp"])
def test_three_agents_all_reduce_on_loopback(tmp_path, runner_for, transport):
    jobs = make_jobs(tmp_path, transport, sizes=(64 << 10, 1 << 20), iterations=2, warmup=1)
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    run.broadcast({"type": "start"})
    run.pump(_all(run, "done"), timeout_s=30)
    run.broadcast({"type": "stop"})
    assert run.wait_exit(5) == [0, 0, 0], [p.stderr.read() for p in run.procs]
    for rank, msgs in run.messages.items():
        types = [m["type"] for m in msgs]
        assert types[0] == "ready" and types[-1] == "done", types
        its = [m for m in msgs if m["type"] == "iteration"]
        assert len(its) == 2 * 3
        assert all(m["wrong"] == 0 and m["t_end"] >= m["t_start"] for m in its)
        assert [(m["size"], m["warmup"], m["iter"]) for m in its[:3]] == \
            [(64 << 10, True, 0), (64 << 10, False, 0), (64 << 10, False, 1)]
        summary = msgs[-1]["summary"]
        assert summary["wrong"] == 0 and summary["world_size"] == 3
        assert [s["size_bytes"] for s in summary["sizes"]] == [64 << 10, 1 << 20]
        samples = [m for m in msgs if m["type"] == "sample"]
        assert samples, "at least the final sample"
        flow = {f["dir"]: f for f in samples[-1]["flows"]}
        assert flow["tx"]["peer"] == f"h{(rank + 1) % 3}" and flow["tx"]["bytes"] > 1 << 20
        if transport == "mrc":
            assert len(flow["tx"]["evs"]) == 4
        # loopback loses nothing: every transport reports retransmitted bytes, and they are few
        assert 0 <= flow["tx"]["retransmitted_bytes"] <= flow["tx"]["bytes"] // 10
        ts = [m["t"] for m in samples]
        assert ts == sorted(ts)
        loops = [m["loop"] for m in samples]      # the event loop's timer lateness
        assert all(set(lp) == {"timers", "late_sum_s", "late_max_s"} for lp in loops)
        assert all(lp["late_max_s"] >= 0 for lp in loops)
        assert [lp["timers"] for lp in loops] == sorted(lp["timers"] for lp in loops)
        assert loops[-1]["late_sum_s"] >= max(lp["late_max_s"] for lp in loops)
        if transport != "tcp":
            assert loops[-1]["timers"] > 0          # QP timers (RTO, SACK delay) went through the loop


def test_stop_ends_agents_promptly(tmp_path, runner_for):
    jobs = make_jobs(tmp_path, "mrc", sizes=(4 << 20,), iterations=1000, warmup=0)
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    run.broadcast({"type": "start"})
    run.pump(lambda: all("iteration" in run.types(r) for r in run.messages), timeout_s=20)
    t0 = time.monotonic()
    run.broadcast({"type": "stop"})
    codes = run.wait_exit(5)
    assert time.monotonic() - t0 < 2.0
    assert codes == [3, 3, 3]
    assert "stopped by the runner" in run.procs[0].stderr.read()


def test_bad_job_spec_exits_non_zero_with_a_clear_message(tmp_path):
    job = make_jobs(tmp_path, "mrc")[0]
    job["transport"] = "rdma"
    job["sizes"] = [4]
    del job["seed"]
    job["bogus"] = 1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-m", "agents", "--job", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2
    err = proc.stderr
    assert "bad job spec" in err and str(path) in err
    for needle in ("transport: must be one of mrc, rc, tcp", "seed: missing",
                   "bogus: unknown key", "sizes: 4 bytes"):
        assert needle in err, err


def test_unreadable_job_and_unreachable_control_socket(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "agents", "--job", str(tmp_path / "no.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2 and "cannot read" in proc.stderr
    job = make_jobs(tmp_path, "mrc")[0]
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-m", "agents", "--job", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 1 and "control socket" in proc.stderr


def test_job_spec_ring_consistency_and_qp_keys(tmp_path):
    job = make_jobs(tmp_path, "rc")[1]
    spec = parse_job(job)
    assert spec.world_size == 3 and spec.next.host == "h2" and spec.prev.host == "h0"
    assert spec.qp_attr_kwargs() == {"timeout": 16, "retry_linear_cnt": 7, "retry_exp_cnt": 7}
    job["next"]["host"] = "h0"
    job["qp"]["warp"] = 9
    job["prev"]["evs"] = []
    with pytest.raises(JobSpecError) as err:
        parse_job(job)
    assert err.value.problems == ["next.host: 'h0', the ring says 'h2'"] or \
        set(err.value.problems) == {"prev.evs: at least one EV is needed for this transport",
                                    "qp.warp: unknown key",
                                    "next.host: 'h0', the ring says 'h2'"}


def test_unreachable_tcp_peer_fails_with_reason(tmp_path, runner_for):
    jobs = make_jobs(tmp_path, "tcp", connect_timeout_s=0.5)
    run = runner_for(jobs[:1])                     # rank 0 alone: next never listens
    run.pump(lambda: "failed" in run.types(0), timeout_s=10)
    assert run.wait_exit(5) == [1]
    failed = run.messages[0][-1]
    assert "unreachable" in failed["reason"]
    assert "failed" in run.procs[0].stderr.read()


def _local_unbound_ipv6() -> str | None:
    """A local, non-loopback IPv6 address of this host (packets to it never leave the host)."""
    try:
        with open("/proc/net/if_inet6") as fh:
            for line in fh:
                hexaddr, _, _, scope, _, dev = line.split()
                if dev != "lo" and scope == "00":
                    return socket.inet_ntop(socket.AF_INET6, bytes.fromhex(hexaddr))
    except OSError:
        pass
    return None


def _kill_ev(job: dict, ev_id: int, address: str) -> None:
    for side in ("next", "prev"):
        for ev in job[side]["evs"]:
            if ev["ev_id"] == ev_id:
                ev["address"] = address   # local, but nobody listens there: a black hole


def test_mrc_agents_survive_a_dead_ev_and_report_it(tmp_path, runner_for):
    dead = _local_unbound_ipv6()
    if dead is None:
        pytest.skip("no non-loopback IPv6 address to black-hole an EV")
    jobs = make_jobs(tmp_path, "mrc", sizes=(1 << 20,), iterations=2, warmup=0)
    for job in jobs:
        _kill_ev(job, 2, dead)
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    run.broadcast({"type": "start"})
    run.pump(_all(run, "done"), timeout_s=30)
    run.broadcast({"type": "stop"})
    assert run.wait_exit(5) == [0, 0, 0]
    for rank, msgs in run.messages.items():
        assert all(m["wrong"] == 0 for m in msgs if m["type"] == "iteration")
        bad = [m for m in msgs if m["type"] == "event" and m["kind"] == "ev_state"
               and m["ev_id"] == 2 and m["new"] == "ASSUMED_BAD"]
        assert bad and bad[0]["dir"] == "tx" and bad[0]["cause"] == "loss"


def test_rc_pinned_to_a_dead_path_crashes_the_job(tmp_path, runner_for):
    dead = _local_unbound_ipv6()
    if dead is None:
        pytest.skip("no non-loopback IPv6 address to black-hole an EV")
    jobs = make_jobs(tmp_path, "rc", sizes=(64 << 10,), iterations=1, warmup=0)
    for job in jobs:
        _kill_ev(job, 0, dead)
        job["qp"] = {"timeout": 12, "retry_linear": 1, "retry_exp": 1, "min_rto_s": 0.005}
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    run.broadcast({"type": "start"})
    run.pump(_all(run, "failed"), timeout_s=10)
    codes = run.wait_exit(5)
    assert set(codes) == {1}
    for msgs in run.messages.values():
        assert any(m["type"] == "event" and m["kind"] == "qp_error" for m in msgs)
        assert "ERR" in msgs[-1]["reason"]


def test_garbage_from_the_runner_fails_the_agent_with_a_control_error(tmp_path, runner_for):
    jobs = make_jobs(tmp_path, "mrc", world_size=2)
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    for conn in run.conns.values():
        conn.sendall(b'{"type": "start"}\n{"type": "teleport"}\n')
    assert run.wait_exit(10) == [1, 1]
    err = run.procs[0].stderr.read()
    assert "unknown control message type 'teleport'" in err, err
