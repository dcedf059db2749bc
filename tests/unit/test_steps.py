"""A command job's KPIs (testbed/metrics/steps.py) and its "Real job" report, on a hand-written
run directory: 4 ranks of a DDP script, 20 steps of 100 ms, a core link failing during step 10.
On gloo-tcp that step takes 2 s and h0's host link carries nothing for 2 s; on mrc it takes
150 ms and the backend's EV crossing the link is retired 30 ms after the fault."""

import io
import json

import pytest
from rich.console import Console

from testbed import metrics, report
from testbed.metrics import steps as st
from testbed.report import realjob

T0 = 1_700_000_000.0
WORLD, N_STEPS, STEP_S, START_S = 4, 20, 0.1, 1.0
FAULT_STEP, FAULT_S, LINK_UP_S = 10, 2.03, 4.53
HOSTS = [f"h{r}" for r in range(WORLD)]
HOST_LINKS = ["h0-e0", "h1-e0", "h2-e1", "h3-e1"]
FABRIC_LINKS = ["e0-s0", "e0-s1", "e1-s0", "e1-s1"]
RATE_BPS = 10e6
FAULTED_STEP_S = {"gloo-tcp": 2.0, "mrc": 0.15}
STALLS = {"gloo-tcp": {"h0-e0": (2.1, 4.0), "h1-e0": (2.1, 2.6)}, "mrc": {}}   # idle counter intervals


def _w(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _schedule(name: str) -> list[tuple[float, float]]:
    """(start, duration) of each step, relative s."""
    out, t = [], START_S
    for k in range(N_STEPS):
        d = FAULTED_STEP_S[name] if k == FAULT_STEP else STEP_S
        out.append((t, d))
        t += d
    return out


def _evs(r: int) -> list[dict]:
    """EV paths of rank r -> r+1: within a leaf, both EVs stay on it; across, EV 0 by s0, EV 1 by s1."""
    la, lb = HOST_LINKS[r], HOST_LINKS[(r + 1) % WORLD]
    ea, eb = la.split("-")[1], lb.split("-")[1]
    if ea == eb:
        return [{"ev_id": e, "address": f"fc00::{e}", "links": [la, lb]} for e in range(2)]
    return [{"ev_id": e, "address": f"fc00::{e}", "links": [la, f"{ea}-s{e}", f"{eb}-s{e}", lb]} for e in range(2)]


def _transport(d, name: str, *, fail_rank: int | None = None) -> None:
    sched = _schedule(name)
    end_s = sched[-1][0] + sched[-1][1]
    ev = [{"t": T0, "kind": "run", "phase": "start", "transport": name, "world": HOSTS},
          {"t": T0 + FAULT_S, "kind": "fault", "action": "link_down", "link": "e0-s0", "phase": "apply",
           "index": 0, "planned_s": FAULT_S - START_S},
          {"t": T0 + LINK_UP_S, "kind": "fault", "action": "link_up", "link": "e0-s0", "phase": "apply",
           "index": 1, "planned_s": LINK_UP_S - START_S}]
    ev += [{"t": T0 + 0.5, "kind": "agent", "rank": r, "status": "ready"} for r in range(WORLD)]
    for k, (a, dur) in enumerate(sched):
        for r in range(WORLD):
            if r == fail_rank and k >= 15:
                continue
            t0, sec = a + 0.001 * r, dur - 0.002 * r
            ev.append({"t": T0 + t0 + sec, "kind": "iteration", "rank": r, "size": 0, "iter": k, "seq": k,
                       "warmup": False, "t_start": T0 + t0, "t_end": T0 + t0 + sec, "seconds": sec, "wrong": 0})
    for r in range(WORLD):
        if r == fail_rank:
            ev.append({"t": T0 + end_s, "kind": "agent", "rank": r, "status": "failed", "reason": "exit 1",
                       "exit": 1})
        else:
            ev.append({"t": T0 + end_s + 0.05, "kind": "agent", "rank": r, "status": "done",
                       "summary": {"kind": "command", "exit": 0, "steps": N_STEPS, "host": HOSTS[r], "job": "job0",
                                   "transport": name}})
    if name == "mrc":
        for r, dt in ((1, 0.03), (3, 0.04)):   # the EV 0 of the flows crossing e0-s0
            ev.append({"t": T0 + FAULT_S + dt, "kind": "ev_state", "rank": r, "peer": HOSTS[(r + 1) % WORLD],
                       "dir": "tx", "qpn": 17, "ev_id": 0, "old": "GOOD", "new": "ASSUMED_BAD", "cause": "loss"})
    codes = {str(r): (1 if r == fail_rank else 0) for r in range(WORLD)}
    ev.append({"t": T0 + end_s + 0.1, "kind": "run", "phase": "end", "status": "ok" if fail_rank is None else "failed",
               "exit_codes": codes})
    _w(d / "events.jsonl", sorted(ev, key=lambda e: e["t"]))

    for r in range(WORLD):
        spec = {"kind": "command", "run_id": f"run/{name}", "rank": r, "agent": r, "world_size": WORLD,
                "host": HOSTS[r], "job": "job0", "argv": ["python", "train.py"], "env": {}, "steps": N_STEPS,
                "stdout": f"job/rank{r}.out", "stderr": f"job/rank{r}.err", "steps_path": f"job/steps-rank{r}.jsonl",
                "backend": "gloo" if name == "gloo-tcp" else "mrc", "transport": name}
        (d / "jobs").mkdir(parents=True, exist_ok=True)
        (d / "jobs" / f"rank{r}.json").write_text(json.dumps(spec))
        if name == "mrc":
            prv = (r - 1) % WORLD
            mrc = {"run_id": f"run/{name}", "rank": r, "agent": r, "job": "job0", "world": HOSTS, "host": HOSTS[r],
                   "transport": "mrc", "collective": "all_reduce", "sample_interval_s": 0.01,
                   "send_to": [{"rank": (r + 1) % WORLD, "host": HOSTS[(r + 1) % WORLD], "evs": _evs(r)}],
                   "recv_from": [{"rank": prv, "host": HOSTS[prv], "evs": _evs(prv)}],
                   "qp": {"cc_params": {"base_rtt_s": 0.002}}}
            (d / "jobs" / f"mrc-rank{r}.json").write_text(json.dumps(mrc))
        loss = [{"step": k, "t_start": T0 + a, "t_end": T0 + a + dur, "seconds": dur,
                 "loss": 2.0 * 0.9 ** k + (1e-6 * k if name == "mrc" else 0.0)} for k, (a, dur) in enumerate(sched)]
        _w(d / "job" / f"steps-rank{r}.jsonl", loss if r == 0 else [{k: v for k, v in s.items() if k != "loss"}
                                                                    for s in loss])

    links, cum = [], {(ln, e): 0 for ln in HOST_LINKS + FABRIC_LINKS for e in "ab"}
    for j in range(int((end_s + 0.5) / 0.1) + 1):
        t = round(0.1 * j, 6)
        for ln in HOST_LINKS + FABRIC_LINKS:
            idle = STALLS[name].get(ln)
            stalled = idle is not None and idle[0] < t <= idle[1] + 1e-9
            for e, off in (("a", 0.0), ("b", 0.001)):
                if j and START_S < t <= end_s + 0.1:
                    cum[(ln, e)] += (1000 if j % 5 == 0 else 0) if stalled else 50_000
                links.append({"t": T0 + t + off, "link": ln, "end": e, "node": "x", "ifname": "x",
                              "tx_bytes": cum[(ln, e)], "tx_packets": 0, "rx_bytes": 0, "rx_packets": 0, "drops": 0,
                              "rate_bps": RATE_BPS})
    _w(d / "links.jsonl", links)
    _w(d / "cpu.jsonl", [{"t": T0 + 0.1 * j, "busy_fraction": 0.3} for j in range(int(end_s * 10) + 5)])

    samples = []
    if name == "mrc":   # the backend's flows: rank r receives from r-1, sends to r+1
        rx = [0] * WORLD
        for i in range(int((end_s + 0.2) / 0.01) + 1):
            t = 0.01 * i
            on = START_S <= t <= end_s
            for r in range(WORLD):
                stalled = r == 2 and FAULT_S <= t < FAULT_S + 0.04   # 1->2 crosses the failed link
                if i and on and not stalled:
                    rx[r] += 5000
                samples.append({"t": T0 + t, "rank": r, "flows": [
                    {"peer": HOSTS[(r - 1) % WORLD], "dir": "rx", "bytes": rx[r], "retransmits": 0},
                    {"peer": HOSTS[(r + 1) % WORLD], "dir": "tx", "bytes": rx[(r + 1) % WORLD], "retransmits": 0,
                     "busy": on, "evs": [{"ev_id": e, "state": "GOOD", "sent": i, "lost": 0} for e in range(2)]}]})
    _w(d / "samples.jsonl", samples)


def make_command_run(tmp_path, *, fail_rank: int | None = None, transports=("gloo-tcp", "mrc")):
    run = tmp_path / "ddp-core-link-20261128-120000"
    run.mkdir()
    workload = {"collective": "all_reduce", "hosts": HOSTS, "min_bytes": 16, "max_bytes": 16, "factor": 2,
                "iterations": 5, "warmup": 1, "command": ["python", "train.py"], "steps": N_STEPS, "env": []}
    (run / "manifest.json").write_text(json.dumps({
        "format": 2, "scenario": {"name": "ddp-core-link", "timeout_s": 60.0, "workload": workload},
        "transports": list(transports), "world_size": WORLD, "host_link_rate_bps": RATE_BPS,
        "host_bandwidth_bps": RATE_BPS, "host_nics": 1, "workload": workload}))
    for name in transports:
        _transport(run / name, name, fail_rank=fail_rank if name == "gloo-tcp" else None)
    return run


@pytest.fixture
def command_run(tmp_path):
    return make_command_run(tmp_path)


def test_load_keeps_the_mrc_backend_specs_apart(command_run):
    tr = metrics.load_transport(command_run, "mrc")
    assert [j["kind"] for j in tr.jobs] == ["command"] * WORLD
    assert [j["rank"] for j in tr.mrc_jobs] == list(range(WORLD)) and all("kind" not in j for j in tr.mrc_jobs)
    assert len(tr.steps[0]) == N_STEPS and "loss" in tr.steps[0][0] and "loss" not in tr.steps[1][0]
    gloo = metrics.load_transport(command_run, "gloo-tcp")
    assert gloo.mrc_jobs == [] and st.is_command_job(gloo.jobs)


def test_step_kpis_faulted_step_and_host_link_stall(command_run):
    with metrics.collecting(metrics.Damage()) as damage:
        summary, _ = metrics.analyze_run(command_run)
    assert not damage, damage.lines()
    gloo, mrc = summary["transports"]["gloo-tcp"], summary["transports"]["mrc"]
    j = gloo["job"]
    assert j["kind"] == "command" and j["ranks"] == WORLD
    assert (j["steps_done"], j["steps_expected"]) == (N_STEPS, N_STEPS)
    assert j["complete"] and j["completion"].startswith("all 4 ranks done, exit 0")
    assert gloo["completion"]["complete"] and j["exit_codes"] == {str(r): 0 for r in range(WORLD)}
    # healthy: steps 1-9 and 17-19 (step 0 is start-up; 10-16 overlap the fault window 2.03 .. 4.53 s)
    assert j["step_s"]["n"] == 12 and j["step_s"]["p50"] == pytest.approx(STEP_S)
    fs = j["faulted_step"]
    assert fs["step"] == FAULT_STEP and fs["seconds"] == pytest.approx(2.0)
    assert fs["healthy_median_s"] == pytest.approx(STEP_S) and fs["slowdown_pct"] == pytest.approx(1900)
    assert fs["fault_t_s"] == pytest.approx(FAULT_S)
    assert j["worst_step"]["step"] == FAULT_STEP and j["worst_step"]["slowdown_pct"] == pytest.approx(1900)
    assert len(j["step_times_s"]) == N_STEPS and j["step_times_s"][FAULT_STEP] == pytest.approx(2.0)
    stalls = {s["link"]: s for s in j["host_link_stalls"]}
    assert set(stalls) == set(HOST_LINKS) and stalls["h0-e0"]["host"] == "h0"
    assert stalls["h0-e0"]["longest_stall_s"] == pytest.approx(2.0, abs=0.1)   # resolution: 100 ms samples
    assert stalls["h0-e0"]["at_s"] == pytest.approx(2.1, abs=0.1)
    assert stalls["h1-e0"]["longest_stall_s"] == pytest.approx(0.6, abs=0.1)
    assert stalls["h2-e1"]["longest_stall_s"] == pytest.approx(0.1, abs=0.01)
    assert j["longest_host_link_stall_s"] == stalls["h0-e0"]["longest_stall_s"]
    assert len(j["losses"]) == N_STEPS and j["losses"][0] == pytest.approx(2.0)
    # what makes no sense for a command job is empty, not a crash
    assert gloo["sizes"] == [] and gloo["busbw_mbit_per_s"] is None and gloo["busbw_fraction_of_host"] is None
    assert gloo["iteration_s"]["n"] == N_STEPS and gloo["collective"] == "command"
    assert gloo["detect_s"] is None and not gloo["has_evs"] and gloo["worst_stall"] is None
    assert not any("iteration" in w for w in gloo["warnings"])
    # mrc: the step the fault hit is 50% slower, the backend's flow KPIs work
    m = mrc["job"]
    assert m["faulted_step"]["step"] == FAULT_STEP and m["faulted_step"]["slowdown_pct"] == pytest.approx(50)
    assert m["longest_host_link_stall_s"] == pytest.approx(0.1, abs=0.01)
    assert mrc["has_evs"] and mrc["detect_s"] == pytest.approx(0.03, abs=1e-6)
    assert mrc["worst_stall"]["s"] == pytest.approx(0.05, abs=0.011) and mrc["worst_stall"]["flow"] == "1->2"
    assert mrc["kpi_resolution_s"] == 0.01 and mrc["base_rtt_s"] == 0.002
    assert realjob.loss_diff(j["losses"], m["losses"]) == (pytest.approx(19e-6), N_STEPS)


def test_a_failed_rank_makes_the_job_incomplete(tmp_path):
    summary, _ = metrics.analyze_run(make_command_run(tmp_path, fail_rank=2, transports=("gloo-tcp",)))
    s = summary["transports"]["gloo-tcp"]
    j = s["job"]
    assert not j["complete"] and not s["completion"]["complete"]
    assert j["completion"] == "rank 2 failed: exit 1; 15/20 steps"
    assert j["steps_done"] == 15 and j["exit_codes"]["2"] == 1
    assert j["step_times_s"][15:] == [None] * 5


def test_faulted_step_is_the_slowest_ranks_and_may_be_unfinished():
    per_rank = {0: {9: (1.9, 2.0), 10: (2.0, 2.1)}, 1: {9: (1.9, 2.05)}}
    spans = [{"step": 9, "seconds": 0.15, "start_s": 1.9, "end_s": 2.05}]
    f = st.faulted_step(spans, per_rank, range(2), set(), 2.06, 0.1)
    assert f["step"] == 10 and f["seconds"] is None and f["slowdown_pct"] is None   # rank 1 never ended it
    f = st.faulted_step(spans, per_rank, range(2), set(), 2.02, 0.1)
    assert f["step"] == 9 and f["slowdown_pct"] == pytest.approx(50)
    assert st.faulted_step(spans, per_rank, range(2), {0, 1}, 3.0, 0.1) is None


def test_host_links_by_name_do_not_confuse_h1_and_h10():
    names = ["h1-e0", "h10-e0", "e0-h1.7", "e0-s0"]
    assert st.host_links(["h1"], names) == {"h1-e0": "h1", "e0-h1.7": "h1"}
    assert st.host_links(["h10"], names) == {"h10-e0": "h10"}


def test_synthetic_runs_have_no_job_key(tmp_path):
    from .test_metrics import make_run
    summary, _ = metrics.analyze_run(make_run(tmp_path))
    assert all("job" not in s for s in summary["transports"].values())
    assert not realjob.is_command_run(summary)


def _render(summary, width=200) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    report.render_tables(summary, console)
    return console.export_text()


def test_report_shows_the_real_job_table(command_run):
    summary, _ = metrics.analyze_run(command_run)
    text = _render(summary)
    assert "Real job: ddp-core-link, transports side by side" in text
    for needle in ("steps done / expected", "20 / 20", "step 10: +1900% (2.000 s vs 100 ms)",
                   "step 10: +50% (150 ms vs 100 ms)", "2.000 s (+1900%) step 10", "h0 (h0-e0)",
                   "n/a (no EVs)", "n/a (no flow samples)", "30.0 ms", "1->2", "losses (vs gloo-tcp)",
                   "final 0.2702", "max |diff| 0.000019 over 20 steps", "all 0"):
        assert needle in text, needle
    assert "busbw" not in text and "Avg bus bandwidth" not in text
    assert "Real job" in _render(summary, width=80)   # fits 80 columns too


def test_render_writes_the_step_time_plot(command_run):
    buf = io.StringIO()
    report.render(command_run, Console(file=buf, width=160, color_system=None))
    assert (command_run / "step-times.png").stat().st_size > 10_000
    assert not (command_run / "iteration-cdf.png").exists()
    assert "Real job" in buf.getvalue()
