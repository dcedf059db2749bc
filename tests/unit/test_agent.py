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

from agents import protocol

from agents.collectives import derangement, peers
from agents.jobspec import JobSpecError, parse_job

REPO = Path(__file__).resolve().parents[2]


def _free_port(kind) -> int:
    with socket.socket(socket.AF_INET6, kind) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


def make_jobs(tmp_path: Path, transport: str, *, world_size=3, sizes=(4 << 20,),
              iterations=2, warmup=1, n_evs=4, collective="all_reduce", targets=None,
              qps=1, **extra) -> list[dict]:
    """One job spec per rank on ::1 (each agent its own UDP/TCP port), the new format."""
    hosts = [f"h{r}" for r in range(world_size)]
    udp = [_free_port(socket.SOCK_DGRAM) for _ in hosts]
    tcp = [_free_port(socket.SOCK_STREAM) for _ in hosts]
    evs = qps if transport == "rc" else n_evs

    def peer(r):
        return {"rank": r, "host": hosts[r], "ecmp_addr": "::1", "port": udp[r],
                "tcp_port": tcp[r],
                "evs": [{"ev_id": e, "address": "::1", "links": [f"l{e}"]} for e in range(evs)]}

    jobs = []
    for r in range(world_size):
        send_to, recv_from = peers(collective, r, world_size, targets)
        job = {"run_id": "t", "rank": r, "world": hosts, "host": hosts[r],
               "transport": transport, "control_socket": str(tmp_path / "ctl.sock"),
               "seed": 5, "sizes": list(sizes), "iterations": iterations, "warmup": warmup,
               "sample_interval_s": 0.01, "port": udp[r], "mtu": 9000 if transport != "tcp"
               else 1500, "send_to": [peer(p) for p in send_to],
               "recv_from": [peer(p) for p in recv_from], "bind_addr": "::1", "tcp_port": tcp[r],
               "collective": collective, "qps": qps, "job": "j", "agent": 10 + r,
               "qp": {"timeout": 16, "retry_linear": 7, "retry_exp": 7, "cc": "uet-1.0-nscc",
                      "cc_params": {"rate_bps": 1e9, "base_rtt_s": 0.001}},
               # the test always sends stop: a ready agent must not leave on its own while a
               # slower rank (a loaded CI machine) is still finishing
               "linger_s": 60.0}
        if targets is not None:
            job["targets"] = list(targets)
        job.update(extra)
        jobs.append(job)
    return jobs


class FakeRunner:
    """Listen on the control socket, start the agents, collect their messages per rank."""

    def __init__(self, tmp_path: Path, jobs: list[dict], *, runtime: bool = False):
        self.path = jobs[0]["control_socket"]
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.conns: dict[int, socket.socket] = {}
        self.messages: dict[int, list[dict]] = {j["rank"]: [] for j in jobs}
        self.rank_of = {j.get("agent", j["rank"]): j["rank"] for j in jobs}   # agent id -> rank
        self.procs = []
        argvs = []
        for job in jobs:
            path = tmp_path / f"job{job['rank']}.json"
            path.write_text(json.dumps(job))
            argvs.append(["--job", str(path)] + (["--netns", "/proc/self/ns/net"] if runtime else []))
        for argv in ([sum(argvs, [])] if runtime else argvs):   # runtime: one host runtime for all
            self.procs.append(subprocess.Popen([sys.executable, "-m", "agents", *argv, "--log-level", "WARNING"],
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
                    rank = self.rank_of[msg["rank"]]     # messages carry the agent id
                    self.messages[rank].append(msg)
                    if msg["type"] == "ready":
                        self.conns[rank] = key.fileobj

    def types(self, rank: int) -> list[str]:
        return [m["type"] for m in self.messages[rank]]

    def broadcast(self, msg: dict) -> None:
        for rank, conn in self.conns.items():
            try:
                conn.sendall(json.dumps(msg).encode() + b"\n")
            except BrokenPipeError:
                codes = [p.poll() for p in self.procs]
                raise AssertionError(f"rank {rank} left before {msg['type']}: exit codes {codes}; "
                                     f"its messages {self.types(rank)[-3:]}; stderr "
                                     f"{[p.stderr.read() for p in self.procs if p.poll() is not None]}")

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

    def make(jobs, **kw):
        made.append(FakeRunner(tmp_path, jobs, **kw))
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
    final_timers = {}
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
        assert (summary["job"], summary["collective"], summary["job_rank"]) == ("j", "all_reduce", rank)
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
        final_timers[rank] = loops[-1]["timers"]
    if transport != "tcp":
        # QP timers (RTO, SACK delay) went through the loop: a rank on loopback fires only 3-7,
        # and now and then none, so the three ranks are asked together
        assert sum(final_timers.values()) > 0, final_timers


def test_samples_go_to_the_samples_file_not_the_control_socket(tmp_path, runner_for):
    jobs = make_jobs(tmp_path, "mrc", sizes=(256 << 10,), iterations=2, warmup=0)
    for job in jobs:
        job["samples_path"] = str(tmp_path / f"samples-{job['rank']}.jsonl")
    run = _run_job(runner_for, jobs)
    for job in jobs:
        assert "sample" not in run.types(job["rank"])       # only events and progress on the socket
        lines = (tmp_path / f"samples-{job['rank']}.jsonl").read_text().splitlines()
        recs = [protocol.sample_from_record(json.loads(line)) for line in lines]
        assert len(recs) >= 2 and all(r.rank == job.get("agent", job["rank"]) for r in recs)   # agent id
        assert [r.t for r in recs] == sorted(r.t for r in recs)
        tx = next(f for f in recs[-1].flows if f["dir"] == "tx")
        assert tx["bytes"] >= 2 * (256 << 10) // 3 and recs[-1].loop is not None   # the final sample


def _run_job(runner_for, jobs, timeout_s=60):
    """Ready, start, done, stop; every agent exits 0; returns the runner."""
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    run.broadcast({"type": "start"})
    run.pump(_all(run, "done"), timeout_s=timeout_s)
    run.broadcast({"type": "stop"})
    assert run.wait_exit(5) == [0] * len(jobs), [p.stderr.read() for p in run.procs]
    return run


def _check_done(run, jobs, collective, iterations):
    """Every rank: the timed and warm-up iterations all right; flows per peer of the job."""
    for job in jobs:
        msgs = run.messages[job["rank"]]
        assert msgs[-1]["type"] == "done", [m["type"] for m in msgs][-3:]
        summary = msgs[-1]["summary"]
        assert summary["wrong"] == 0 and summary["collective"] == collective
        assert summary["job"] == "j" and summary["job_rank"] == job["rank"]
        its = [m for m in msgs if m["type"] == "iteration"]
        assert len(its) == iterations and all(m["wrong"] == 0 for m in its)
        flows = [m for m in msgs if m["type"] == "sample"][-1]["flows"]
        tx = [f["peer"] for f in flows if f["dir"] == "tx"]
        rx = [f["peer"] for f in flows if f["dir"] == "rx"]
        assert tx == [p["host"] for p in job["send_to"]]
        assert rx == [p["host"] for p in job["recv_from"]]
        assert all(f["bytes"] > 0 for f in flows)


@pytest.mark.parametrize("transport", ["mrc", "rc", "tcp"])
def test_four_agents_all_to_all_on_loopback(tmp_path, runner_for, transport):
    jobs = make_jobs(tmp_path, transport, world_size=4, collective="all_to_all",
                     sizes=(64 << 10, 1 << 20), iterations=2, warmup=1)
    run = _run_job(runner_for, jobs)
    _check_done(run, jobs, "all_to_all", 2 * 3)
    for job in jobs:
        flows = [m for m in run.messages[job["rank"]] if m["type"] == "sample"][-1]["flows"]
        assert len(flows) == 6


@pytest.mark.parametrize("transport", ["mrc", "tcp"])
def test_permutation_on_loopback(tmp_path, runner_for, transport):
    targets = derangement(3, 4)
    jobs = make_jobs(tmp_path, transport, world_size=4, collective="permutation",
                     targets=targets, sizes=(256 << 10,), iterations=3, warmup=1)
    run = _run_job(runner_for, jobs)
    _check_done(run, jobs, "permutation", 4)
    for job in jobs:
        assert [p["rank"] for p in job["send_to"]] == [targets[job["rank"]]]


@pytest.mark.parametrize("transport", ["mrc", "rc", "tcp"])
def test_incast_on_loopback(tmp_path, runner_for, transport):
    """Rank 0 receives from the three others and sends nothing; they send and receive nothing."""
    jobs = make_jobs(tmp_path, transport, world_size=4, collective="incast", sizes=(256 << 10,),
                     iterations=3, warmup=1)
    run = _run_job(runner_for, jobs)
    _check_done(run, jobs, "incast", 4)
    assert [p["rank"] for p in jobs[0]["recv_from"]] == [1, 2, 3] and jobs[0]["send_to"] == []
    assert all([p["rank"] for p in j["send_to"]] == [0] and j["recv_from"] == [] for j in jobs[1:])


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter"])
def test_ring_collectives_on_mrc(tmp_path, runner_for, collective):
    jobs = make_jobs(tmp_path, "mrc", world_size=3, collective=collective,
                     sizes=(48 << 10, 3 << 20), iterations=2, warmup=1)
    run = _run_job(runner_for, jobs)
    _check_done(run, jobs, collective, 2 * 3)


def test_rc_with_four_qps_per_connection_stripes_over_all_of_them(tmp_path, runner_for):
    jobs = make_jobs(tmp_path, "rc", world_size=3, qps=4, sizes=(64 << 10, 1 << 20),
                     iterations=2, warmup=1)
    run = _run_job(runner_for, jobs)
    _check_done(run, jobs, "all_reduce", 2 * 3)
    for job in jobs:
        msgs = run.messages[job["rank"]]
        channel = msgs[-1]["summary"]["channel"]
        assert channel["qps_per_connection"] == 4 and msgs[-1]["summary"]["qps"] == 4
        assert channel["tx_qp"]["qps"] == channel["rx_qp"]["qps"] == 4
        for conn in channel["peers"]:
            key = "acked_bytes" if conn["dir"] == "tx" else "rx_bytes"
            # each QP carried a quarter of every message: 2 sizes x 3 iterations x 4 steps
            assert all(qp[key] > (64 << 10) // 4 for qp in conn["qps"]), conn
            assert len({qp["qpn"] for qp in conn["qps"]}) == 4
        tx = [f for f in [m for m in msgs if m["type"] == "sample"][-1]["flows"]
              if f["dir"] == "tx"]
        assert [e["ev_id"] for e in tx[0]["evs"]] == [0, 1, 2, 3]
        assert all(e["sent"] > 0 for e in tx[0]["evs"])


def test_stop_ends_agents_promptly(tmp_path, runner_for):
    jobs = make_jobs(tmp_path, "mrc", sizes=(4 << 20,), iterations=1000, warmup=0)
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    run.broadcast({"type": "start"})
    run.pump(lambda: all("iteration" in run.types(r) for r in run.messages), timeout_s=20)
    run.broadcast({"type": "stop"})
    codes = run.wait_exit(5)
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


def _problems(job) -> list[str]:
    with pytest.raises(JobSpecError) as err:
        parse_job(job)
    return err.value.problems


def test_job_spec_defaults_and_peer_lists(tmp_path):
    job = make_jobs(tmp_path, "rc")[1]
    for key in ("collective", "qps", "job", "agent"):
        del job[key]
    spec = parse_job(job)
    assert spec.world_size == 3 and spec.collective == "all_reduce" and spec.qps == 1
    assert (spec.job, spec.agent, spec.targets) == ("job0", 1, None)
    assert [p.rank for p in spec.send_to] == [2] and [p.rank for p in spec.recv_from] == [0]
    assert spec.send_to[0].host == "h2" and spec.recv_from[0].host == "h0"
    assert spec.qp_attr_kwargs() == {"timeout": 16, "retry_linear_cnt": 7, "retry_exp_cnt": 7}
    spec = parse_job(make_jobs(tmp_path, "mrc", world_size=4, collective="all_to_all")[2])
    assert [p.rank for p in spec.send_to] == [0, 1, 3] == [p.rank for p in spec.recv_from]
    assert spec.agent == 12 and spec.job == "j"


def test_job_spec_collects_every_problem_with_its_key_path(tmp_path):
    job = make_jobs(tmp_path, "rc")[1]
    job["send_to"][0]["host"] = "h0"
    job["send_to"][0]["evs"][0]["address"] = 7
    job["qp"]["warp"] = 9
    job["recv_from"][0]["evs"] = []
    job["recv_from"][0]["src_port"] = 4000
    job["collective"] = "broadcast"
    job["agent"] = -1
    assert set(_problems(job)) == {
        "send_to[0].host: 'h0' is not world[2] = 'h2'",
        "send_to[0].evs[0].address: expected str, got 7",
        "recv_from[0].evs: at least one EV is needed for this transport",
        "recv_from[0].src_port: only send_to peers have a TCP source port",
        "qp.warp: unknown key",
        "collective: must be one of all_reduce, all_gather, reduce_scatter, all_to_all, "
        "permutation, incast (got 'broadcast')",
        "agent: must be >= 0 (got -1)"}


def test_job_spec_peer_ranks_must_be_the_collectives(tmp_path):
    job = make_jobs(tmp_path, "mrc", world_size=4, collective="all_to_all")[0]
    job["send_to"].pop(1)
    job["recv_from"].reverse()
    assert _problems(job) == [
        "send_to: ranks [1, 3], but rank 0's all_to_all sends to [1, 2, 3]",
        "recv_from: ranks [3, 2, 1], but rank 0's all_to_all receives from [1, 2, 3]"]
    job = make_jobs(tmp_path, "tcp")[0]
    job["send_to"], job["recv_from"] = job["recv_from"], job["send_to"]
    assert _problems(job) == ["send_to: ranks [2], but rank 0's all_reduce sends to [1]",
                              "recv_from: ranks [1], but rank 0's all_reduce receives from [2]"]
    del job["send_to"]
    job["recv_from"] = []
    assert set(_problems(job)) == {"send_to: missing",
                                   "recv_from: ranks [], but rank 0's all_reduce receives from [2]"}


def test_job_spec_permutation_targets(tmp_path):
    targets = [1, 2, 3, 0]
    job = make_jobs(tmp_path, "mrc", world_size=4, collective="permutation", targets=targets)[2]
    spec = parse_job(job)
    assert spec.targets == (1, 2, 3, 0)
    assert [p.rank for p in spec.send_to] == [3] and [p.rank for p in spec.recv_from] == [1]
    assert _problems({**job, "targets": [0, 2, 3, 1]}) == [
        "targets: must be a permutation of 0..3 without a fixed point (targets[r] = the rank "
        "r sends to), got [0, 2, 3, 1]"]
    assert _problems({k: v for k, v in job.items() if k != "targets"}) == [
        "targets: missing (the permutation collective needs it)"]
    ring = make_jobs(tmp_path, "mrc", world_size=4)[0]
    assert _problems({**ring, "targets": targets}) == [
        "targets: only for the permutation collective, not all_reduce"]


def test_job_spec_qps_is_rc_only_with_one_ev_per_qp(tmp_path):
    job = make_jobs(tmp_path, "rc", qps=4)[0]
    assert parse_job(job).qps == 4
    job["send_to"][0]["evs"].pop()
    assert _problems(job) == ["send_to[0].evs: rc with qps 4 needs exactly ev_id 0..3 "
                              "(one EV per QP), got [0, 1, 2]"]
    job = make_jobs(tmp_path, "mrc", qps=2)[0]
    assert _problems(job) == ["qps: 2 QPs per connection is for rc only, not mrc"]
    job = make_jobs(tmp_path, "rc", qps=1)[0]
    job["qps"] = 0
    assert "qps: must be >= 1 (got 0)" in _problems(job)
    big = make_jobs(tmp_path, "rc", world_size=3, qps=1)[0]
    big["world"] = [f"h{r}" for r in range(128)]
    big["recv_from"][0].update(rank=127, host="h127")
    big["qps"] = 512                     # 2 * 512 * 128**2 QPNs: one bit too many
    for peer in big["send_to"] + big["recv_from"]:
        peer["evs"] = [{"ev_id": q, "address": "::1"} for q in range(512)]
    assert _problems(big) == ["qps: 512 QPs per connection over 128 ranks do not fit "
                              "24-bit QPNs (agents.channels.qp.qpn)"]


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
    for peer in job["send_to"] + job["recv_from"]:
        for ev in peer["evs"]:
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


def test_a_query_is_answered_with_the_profiles_evs_and_a_command_with_its_result(tmp_path, runner_for):
    """What a restarted controller reads through the runner: the agent answers ``query`` with an
    ``ev_query`` event (its connection's EV profile, QUERY_EV_ARRAY + QUERY_EV_STATE), and the
    profile it answers with reflects the commands it applied before (the stream is ordered)."""
    jobs = make_jobs(tmp_path, "mrc", world_size=2, n_evs=3)
    run = runner_for(jobs)
    run.pump(_all(run, "ready"), timeout_s=10)
    cmd = {"type": "command", "rank": 10, "peer": "h1", "op": "deny", "ev_id": 1, "reason": "test"}
    run.conns[0].sendall(json.dumps(cmd).encode() + b"\n" + b'{"type": "query", "rank": 10, "peer": "h1"}\n'
                         + b'{"type": "query", "rank": 10, "peer": "h9"}\n')
    answers = lambda: [m for m in run.messages[0] if m["type"] == "event" and m["kind"] in ("ev_command", "ev_query")]
    run.pump(lambda: len(answers()) == 3, timeout_s=10)
    done, query, unknown = answers()
    assert (done["kind"], done["reason"]) == ("ev_command", "ok")
    assert query["evs"] == [{"ev_id": 0, "port": 1, "state": "GOOD"}, {"ev_id": 1, "port": 1, "state": "DENIED"},
                            {"ev_id": 2, "port": 1, "state": "GOOD"}] and query["reason"] == "ok"
    assert (unknown["evs"], unknown["reason"]) == ([], "no MRC connection to h9")
    run.broadcast({"type": "stop"})
    run.wait_exit(10)


def test_several_jobs_need_one_netns_each(tmp_path):
    jobs = make_jobs(tmp_path, "mrc", sizes=(64 << 10,), iterations=1, warmup=0)
    paths = []
    for job in jobs[:2]:
        paths += ["--job", str(tmp_path / f"j{job['rank']}.json")]
        (tmp_path / f"j{job['rank']}.json").write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-m", "agents", *paths, "--netns", "/proc/self/ns/net"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "2 --job but 1 --netns" in proc.stderr


class _FakeAgent:
    """Stands in for agents.agent.Agent in a runtime: ``plan`` is what its turns return
    (None: still running; an int: its exit status; an exception: raised by the turn)."""

    made: list = []

    def __init__(self, spec, loop):
        self.spec, self.loop, self.plan, self.turns, self.closed = spec, loop, list(spec["plan"]), 0, None
        self.connecting = spec.get("connecting", False)
        _FakeAgent.made.append(self)

    def open(self):
        return self.spec.get("open")

    def wait_s(self):
        return 0.0

    def next_due(self, now):
        return now           # keeps asking for turns: its plan says when it ends

    def advance(self, now):
        self.turns += 1
        step = self.plan.pop(0) if self.plan else None
        if isinstance(step, Exception):
            raise step
        return step

    def outcome(self, turn):
        try:
            return turn()
        except RuntimeError:
            return 1

    def close(self, status):
        self.closed = status
        return status


def test_a_runtime_serves_every_agent_until_each_ends_and_returns_the_worst(monkeypatch):
    from agents import runtime
    entered = []
    monkeypatch.setattr(runtime, "Agent", _FakeAgent)
    monkeypatch.setattr(runtime, "setns", lambda fd: entered.append(fd))
    _FakeAgent.made = []
    specs = [{"plan": [None, None, 0]},                               # done after three turns
             {"plan": [None, RuntimeError("peer gone")]},             # fails on its second turn
             {"plan": [0], "connecting": True},                       # its turns run in its namespace
             {"plan": [], "open": 1}]                                 # its control socket: unreachable
    status = runtime.run(specs, ["/proc/self/ns/net"] * 4)
    a, b, c, d = _FakeAgent.made
    assert (a.closed, b.closed, c.closed, d.closed) == (0, 1, 0, None)   # d never opened: nothing to close
    assert (a.turns, b.turns, c.turns, d.turns) == (3, 2, 1, 0)           # one failure ends only its agent
    assert status == 1 and len(entered) == 2                              # into c's namespace and back
    assert runtime.worst([0, 3, 0]) == 3 and runtime.worst([3, 1]) == 1 and runtime.worst([]) == 0
    with pytest.raises(ValueError, match="2 jobs but 1 namespaces"):
        runtime.run(specs[:2], ["/proc/self/ns/net"])


def test_runtime_groups_deal_agents_round_robin():
    from testbed.run.agents import runtime_groups
    assert runtime_groups(16, 2) == [list(range(0, 16, 2)), list(range(1, 16, 2))]
    assert runtime_groups(3, 8) == [[0], [1], [2]]
    assert runtime_groups(5, 1) == [[0, 1, 2, 3, 4]]

