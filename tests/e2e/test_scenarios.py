"""Whole scenarios, small: each transport completes a bit-exact all-reduce through a link
failure; the summary is consistent; MRC detects and recovers within its bound; nothing is
left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.spec import load_topology
from testbed.fabric.kernel import features
from tests.conftest import net_namespaces
from tests.e2e.conftest import REPO, run_small
from tests.netns.conftest import wait_for

# 4 ranks, one per pod: every ring hop crosses the core (4 SRv6 paths per hop). The failed
# link is the unrepaired (core -> aggregation) hop of an rc and a tcp flow; with seed 5 the
# runner resolves it to a1_1-c1_0 (rc 0->1 and tcp 0->1 go down into pod 1 over it).
FAILURE = """
name: e2e-core-link-failure
topology: @REPO@/topologies/fat-tree-k4.yaml
transports: [mrc, rc, tcp]
seed: 5
timeout: 60s
reconverge_after: 1s
workload:
  collective: all_reduce
  hosts: [h0_0_0, h1_0_0, h2_0_0, h3_0_0]
  min_bytes: 512KiB
  max_bytes: 512KiB
  factor: 2
  iterations: 5
  warmup: 1
timeline:
  - at_iteration: 1
    after: 200ms
    link_down: {crossed_by: [rc, tcp]}
  - at_iteration: 3
    link_up: {crossed_by: [rc, tcp]}
"""
FAILED = "a1_1-c1_0"
RECONVERGE_S = 1.0

MRC_DETECT_BOUND_S = 0.5     # loss on an EV -> ASSUMED_BAD: a few RTTs + the reorder window
MRC_STALL_BOUND_RTTS = 8     # no flow stops for longer than a few base RTTs (RTO + a retransmit + the
                             # ring's next hop), read off the samples to one 20 ms interval: measured
                             # 7.2 (163 ms; 10 ms bins had read the same run's stall as 5.7)


def read_events(path: Path) -> list[dict]:
    """The records of one events.jsonl."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def start_long_run(tmp_path: Path) -> subprocess.Popen:
    """``testbed run`` of the LONG scenario (60 s timeout) in a child process, output captured."""
    path = tmp_path / "s.yaml"
    path.write_text(LONG.replace("@REPO@", str(REPO)).replace("timeout: 4s", "timeout: 60s"))
    # SIGINT as a terminal gives it: a suite started in the background inherits it ignored
    return subprocess.Popen([sys.executable, "-m", "testbed", "run", str(path), "--runs-dir",
                             str(tmp_path / "runs"), "--no-plots"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.fixture(scope="module")
def failure_run(tmp_path_factory):
    return run_small(tmp_path_factory.mktemp("e2e"), FAILURE)


def test_every_transport_completes_bit_exact(failure_run):
    result, summary, _, _ = failure_run
    assert result.status == {"mrc": "done", "rc": "done", "tcp": "done"}, result.reasons
    for name, t in summary["transports"].items():
        assert t["completion"]["complete"], (name, t["completion"])
        assert t["wrong"] == 0, name
        assert t["sizes"][0]["iterations"] == 5


def test_summary_fields_are_consistent(failure_run):
    result, summary, _, _ = failure_run
    n = summary["world_size"]
    rate = min(l.params.rate_bps for l in load_topology(REPO / "topologies/fat-tree-k4.yaml", features=features()).links)
    assert n == 4 and summary["host_link_rate_bps"] == summary["host_bandwidth_bps"] == rate  # one plane
    on_disk = json.loads((result.run_dir / "summary.json").read_text())
    assert on_disk["transports"].keys() == summary["transports"].keys()
    for name, t in summary["transports"].items():
        s = t["sizes"][0]
        assert s["algbw_bytes_per_s"] == pytest.approx(s["size_bytes"] / s["time_s"], rel=1e-9)
        assert s["busbw_bytes_per_s"] == pytest.approx(s["algbw_bytes_per_s"] * 2 * (n - 1) / n, rel=1e-9)
        it = s["iteration_s"]
        assert 0 < it["p50"] <= it["p99"] <= it["max"]
        # no transport beats the host link (tolerance: HTB burst)
        assert s["busbw_mbit_per_s"] <= rate / 1e6 * 1.05, name
        faults = [f for f in t["faults"] if f["phase"] == "apply"]
        assert [f["action"] for f in faults] == ["link_down", "link_up"], name
        # every transport reports retransmitted bytes, and only with retransmissions counted
        assert t["retransmitted_bytes"] is not None, name
        assert t["retransmitted_bytes"] == 0 or t["retransmits"] > 0, name
        for f in ("events.jsonl", "samples.jsonl", "links.jsonl", "cpu.jsonl"):
            assert (result.run_dir / name / f).stat().st_size > 0, (name, f)
    for f in ("manifest.json", "flows.csv", "links.csv", "goodput.csv"):
        assert (result.run_dir / f).is_file(), f


def test_mrc_retired_evs_come_back_by_probes_once_the_link_is_up(failure_run):
    """EVs whose path crosses the failed link go ASSUMED_BAD, stay out while it is down (SRv6
    paths are not rerouted, so their probes fail) and come back by probes soon after link_up;
    any other EV retired meanwhile (congestion loss looks like failure without trimming) comes
    back by probes, or at once when a packet sent on it after its charged losses is acknowledged
    (delivered): a dead path can never show that."""
    result = failure_run[0]
    events = read_events(result.run_dir / "mrc" / "events.jsonl")
    t_down, t_up = (next(e["t"] for e in events if e["kind"] == "fault" and e["action"] == a
                         and e["phase"] == "apply") for a in ("link_down", "link_up"))
    topo = load_topology(REPO / "topologies/fat-tree-k4.yaml", features=features())
    ring = ["h0_0_0", "h1_0_0", "h2_0_0", "h3_0_0"]
    ev_events = [e for e in events if e["kind"] == "ev_state"]
    retired = {(e["rank"], e["ev_id"]): e["t"] for e in reversed(ev_events)
               if e["new"] == "ASSUMED_BAD" and t_down <= e["t"] < t_up}
    through = {k for k in retired
               if FAILED in topo.evs(ring[k[0]], ring[(k[0] + 1) % 4])[k[1]].links}
    assert through, f"no EV through {FAILED} retired: {retired}"
    for key, t_bad in retired.items():
        back = [e for e in ev_events if (e["rank"], e["ev_id"]) == key and e["new"] == "GOOD"
                and e["t"] > t_bad]
        assert back, key
        if key in through:
            assert back[0]["cause"] == "probes_ok", (key, back[:1])
            assert t_up <= back[0]["t"] <= t_up + 1.0, (key, back[0]["t"] - t_up)
        else:
            assert back[0]["cause"] in ("probes_ok", "delivered"), (key, back[:1])


def test_the_target_resolves_to_the_same_link_on_every_fabric(failure_run):
    result = failure_run[0]
    for name in ("mrc", "rc", "tcp"):
        targets = [e for e in read_events(result.run_dir / name / "events.jsonl") if e["kind"] == "target"]
        assert [t["link"] for t in targets] == [FAILED, FAILED], name
        assert targets[0]["flows"] == ["rc 0->1", "tcp 0->1"]
        paths = json.loads((result.run_dir / name / "paths.json").read_text())["flows"]
        assert {p["outcome"] for p in paths} == {"delivered"} and len(paths) == (32 if name == "mrc" else 8)


def test_single_path_baselines_stall_until_reconvergence_while_mrc_does_not(failure_run):
    """The failed hop has no local repair: the rc and tcp flows over it are black-holed until
    routing reconverges (1 s), and the ring behind them waits; MRC retires the dead EVs and
    keeps every flow moving. Checked on the per-flow KPIs."""
    _, summary, _, _ = failure_run
    t = summary["transports"]
    # Load only lengthens stalls: the baselines' lower bounds hold on a busy machine; MRC's bound is
    # the claim itself (it does not wait for routing), not a latency target (make reproduce has those)
    for name in ("rc", "tcp"):
        worst = t[name]["worst_stall"]
        assert worst["s"] >= 0.9 * RECONVERGE_S, (name, worst)
        fault_t = t[name]["per_fault"][0]["t_s"]
        assert worst["at_s"] - 0.5 <= fault_t <= worst["at_s"] + worst["s"], (name, worst, fault_t)   # it spans the fault
        assert {f["label"] for f in t[name]["fault_flows"]} == {"0->1"}, name
        assert t[name]["faulted_iteration"]["seconds"] >= 0.9 * RECONVERGE_S, (name, t[name]["faulted_iteration"])
    mrc = t["mrc"]
    print(f"mrc worst stall {mrc['worst_stall']['s']:.3f} s ({mrc['worst_stall']['rtts']} base RTTs; "
          f"target {MRC_STALL_BOUND_RTTS}), faulted iteration +{mrc['faulted_iteration']['slowdown_pct']:.0f}% "
          f"(rc +{t['rc']['faulted_iteration']['slowdown_pct']:.0f}%, tcp +{t['tcp']['faulted_iteration']['slowdown_pct']:.0f}%)")
    assert mrc["worst_stall"]["s"] < RECONVERGE_S, mrc["worst_stall"]
    assert all(t[n]["wrong"] == 0 for n in t)


def test_mrc_detects_and_recovers_within_its_bound(failure_run):
    _, summary, _, _ = failure_run
    mrc = summary["transports"]["mrc"]
    down = mrc["per_fault"][0]
    assert down["action"] == "link_down" and down["link"] == FAILED
    print(f"mrc detect {down['detect_s']} s (target {MRC_DETECT_BOUND_S} s)")
    assert down["detect_s"] is not None and down["detect_s"] < RECONVERGE_S, down   # before routing would fix it
    # MRC's slowest flow is back before the single-path baselines' (they wait for routing); its
    # own recovery time varies with congestion retirements (no ECN here), so no absolute bound.
    rec = mrc["worst_recovery"]
    baselines = [summary["transports"][n]["worst_recovery"] for n in ("rc", "tcp")]
    assert all(b["dip"] for b in baselines), baselines
    assert not rec["dip"] or (rec["recovered"] and all(not b["recovered"] or rec["s"] < b["s"]
                                                       for b in baselines)), (rec, baselines)
    assert mrc["qp_errors"] == 0
    assert mrc["evs_crossing_fault"]
    assert summary["transports"]["tcp"]["detect_s"] is None      # no EVs


def test_faults_journaled_and_reverted_and_fabric_gone(failure_run):
    result, _, ns_left, if_left = failure_run
    assert not ns_left and not if_left
    for name in ("mrc", "rc", "tcp"):
        events = read_events(result.run_dir / name / "events.jsonl")
        kinds = [e["kind"] for e in events]
        assert kinds.count("reconverge") == 2, name                 # after the down and after the up
        end = [e for e in events if e["kind"] == "run" and e["phase"] == "end"]
        assert end and end[0]["status"] == "done"
        assert all(code == 0 for code in end[0]["exit_codes"].values()), end[0]["exit_codes"]


LONG = """
name: e2e-long
topology: @REPO@/topologies/fat-tree-k4.yaml
transports: [mrc]
seed: 2
timeout: 4s
workload:
  collective: all_reduce
  hosts: [h0_0_0, h1_0_0, h2_0_0]
  min_bytes: 4MiB
  max_bytes: 4MiB
  factor: 2
  iterations: 20
  warmup: 0
timeline:
  - at: 1s
    blackhole: {link: a0_0-c0_0}
"""


def test_timeout_tears_down_reverts_and_keeps_what_was_gathered(tmp_path):
    result, summary, ns_left, if_left = run_small(tmp_path, LONG)
    assert result.status == {"mrc": "timeout"}
    assert not ns_left and not if_left
    events = read_events(result.run_dir / "mrc" / "events.jsonl")
    faults = [(e["action"], e["phase"]) for e in events if e["kind"] == "fault"]
    assert faults[0] == ("blackhole", "apply") and ("end", "revert") in faults
    assert (result.run_dir / "mrc" / "samples.jsonl").stat().st_size > 0
    mrc = summary["transports"]["mrc"]
    assert not mrc["completion"]["complete"] and mrc["completion"]["run_status"] == "timeout"
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"]["mrc"]["status"] == "timeout"


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_cli_cleanly(tmp_path, signum, status):
    """Ctrl-C and SIGTERM tear down and keep what was gathered; exit 128 + the signal."""
    before = net_namespaces()
    proc = start_long_run(tmp_path)
    try:
        assert wait_for(lambda: any(p.stat().st_size > 0 for p in (tmp_path / "runs").glob("*/mrc/samples/rank*.jsonl")),
                        timeout_s=60)     # the agents' own samples files (merged at the end)
        time.sleep(0.5)   # the passage of time: the signal lands mid-run, after the first samples
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=90)   # teardown on a loaded 2-core machine takes tens of s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, out
    assert wait_for(lambda: net_namespaces() <= before)
    run_dir = next((tmp_path / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"]["mrc"]["status"] == "interrupted"
    assert (run_dir / "summary.json").is_file()
    assert Path(run_dir / "mrc" / "events.jsonl").read_text().count('"phase":"end"') == 1
    assert (run_dir / "mrc" / "samples.jsonl").stat().st_size > 0            # merged, not lost
    assert not (run_dir / "mrc" / "samples").exists()
    for path, mode in ((run_dir, 0o700), (run_dir / "mrc", 0o700), (run_dir / "manifest.json", 0o600),
                       (run_dir / "mrc" / "events.jsonl", 0o600), (run_dir / "summary.json", 0o600)):
        assert path.stat().st_mode & 0o777 == mode, path


def test_agent_crash_ends_the_transport_and_keeps_what_was_gathered(tmp_path):
    """SIGKILL one agent mid-run (a crashed host process): the runner reports ``crashed``,
    exits 1, reverts the fault, tears the fabric down and still writes the summary."""
    before = net_namespaces()
    proc = start_long_run(tmp_path)

    def spawned() -> dict | None:
        """The agents' PIDs once they run and the blackhole (at 1 s) is in place."""
        for events in (tmp_path / "runs").glob("*/mrc/events.jsonl"):
            records = read_events(events)
            pids = [e["pids"] for e in records if e["kind"] == "agents" and e.get("phase") == "spawned"]
            if pids and any(e["kind"] == "fault" and e["phase"] == "apply" for e in records):
                return pids[0]
        return None

    try:
        assert wait_for(lambda: spawned() is not None, timeout_s=30)
        victim = int(spawned()["1"])
        os.kill(victim, signal.SIGKILL)          # by the PID the runner journaled
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    assert wait_for(lambda: net_namespaces() <= before)
    run_dir = next((tmp_path / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"]["mrc"]["status"] == "crashed", manifest["status"]
    events = read_events(run_dir / "mrc" / "events.jsonl")
    assert any(e["kind"] == "agent" and e.get("rank") == 1 and e.get("status") == "crashed" for e in events)
    faults = [(e["action"], e["phase"]) for e in events if e["kind"] == "fault"]
    assert ("blackhole", "apply") in faults and ("end", "revert") in faults
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["transports"]["mrc"]["completion"]["run_status"] == "crashed"
