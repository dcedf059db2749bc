"""The data path outlives the controller: ev-gray-failure (mrc, a shorter workload) with its
controller SIGKILLed mid-run completes valid, with ``controller_lost`` in the records and the
report's summary; with ``controller: {restart: true}`` a new controller starts, resynchronises
from the agents' EV profiles and manages the rest of the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import net_namespaces
from tests.e2e.conftest import REPO
from tests.e2e.test_scenarios import read_events
from tests.netns.conftest import wait_for

KILL_AFTER_FAULT_S = 1.0    # the controller dies while the gray failure is on and the ranks run


def scenario_text(*, restart: bool = False) -> str:
    """scenarios/ev-gray-failure.yaml, mrc only, 8 ranks (two per pod: half the agents' CPU, so
    that the run's validity does not hang on a busy machine), 512 KiB x 5 iterations (the fault
    at iteration 1); ``restart``: the controller is restarted when lost."""
    text = (REPO / "scenarios" / "ev-gray-failure.yaml").read_text()
    hosts = "[h0_0_0, h0_1_0, h1_0_0, h1_1_0, h2_0_0, h2_1_0, h3_0_0, h3_1_0]"
    for old, new in (("transports: [mrc, rc, tcp]", "transports: [mrc]"), ("timeout: 180s", "timeout: 90s"),
                     ("hosts: all", f"hosts: {hosts}"),
                     ("min_bytes: 1MiB", "min_bytes: 512KiB"), ("max_bytes: 1MiB", "max_bytes: 512KiB"),
                     ("iterations: 8", "iterations: 5"), ("../topologies/", f"{REPO}/topologies/"),
                     *([("controller: {policy: replace}", "controller: {policy: replace, restart: true}")]
                       if restart else [])):
        assert old in text, old
        text = text.replace(old, new)
    return text


def run_and_kill(tmp_path, *, restart: bool):
    """Run the scenario, SIGKILL its controller KILL_AFTER_FAULT_S after the fault; (events, summary,
    output, return code, kill time, run directory)."""
    before = net_namespaces()
    path = tmp_path / "ev-gray-failure.yaml"
    path.write_text(scenario_text(restart=restart))
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(path), "--runs-dir", str(tmp_path / "runs"),
                             "--no-plots"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def fault_applied() -> tuple[int, float] | None:
        """(the controller's PID, when the gray failure began) once it has."""
        for events in (tmp_path / "runs").glob("*/mrc/events.jsonl"):
            records = read_events(events)
            pid = next((e["pid"] for e in records if e["kind"] == "controller" and e.get("phase") == "spawned"), None)
            fault = next((e["t"] for e in records if e["kind"] == "fault" and e["phase"] == "apply"), None)
            if pid is not None and fault is not None:
                return pid, fault
        return None

    try:
        assert wait_for(lambda: fault_applied() is not None, timeout_s=120)
        pid, t_fault = fault_applied()
        time.sleep(max(0.0, t_fault + KILL_AFTER_FAULT_S - time.time()))
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)              # by the PID the runner journaled
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert wait_for(lambda: net_namespaces() <= before)
    run_dir = next((tmp_path / "runs").iterdir())
    events = read_events(run_dir / "mrc" / "events.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())["transports"]["mrc"]
    return events, summary, out, proc.returncode, t_kill, run_dir


def test_a_sigkilled_controller_is_lost_and_the_run_completes(tmp_path):
    events, summary, out, code, t_kill, run_dir = run_and_kill(tmp_path, restart=False)
    lost = [e for e in events if e["kind"] == "controller_lost"]
    t_fault = next(e["t"] for e in events if e["kind"] == "fault" and e["phase"] == "apply")
    t0 = next(e["t"] for e in events if e["kind"] == "run" and e.get("phase") == "start")
    print(f"\ncontroller killed at {t_kill - t0:.3f} s, fault at {t_fault - t0:.3f} s, lost: "
          f"{[(round(e['t'] - t0, 3), e['reason']) for e in lost]}, status {summary['completion']['run_status']}, "
          f"valid {summary['valid']} {summary['invalid_reasons']}, busbw {summary['busbw_mbit_per_s']} Mbit/s, "
          f"run dir {run_dir}")
    assert code == 0, out
    assert [(e["reason"], e["exit"]) for e in lost] == [("exited with status -9", -9)]
    assert 0 <= lost[0]["t"] - t_kill < 10.0      # noticed (a hang bound: a few runner ticks when quiet)
    # completed, not necessarily valid: the fidelity check reads the machine's load (timers late,
    # agents starved), which a busy machine fails without any fault of the controller's
    assert summary["completion"]["run_status"] == "done", summary["invalid_reasons"]
    assert [round(x["t_s"], 3) for x in summary["controller_lost"]] == [round(lost[0]["t"] - t0, 3)]
    assert "controller lost" in out


def test_a_restarted_controller_resyncs_from_the_agents_and_manages_the_rest(tmp_path):
    events, summary, out, code, t_kill, run_dir = run_and_kill(tmp_path, restart=True)
    t0 = next(e["t"] for e in events if e["kind"] == "run" and e.get("phase") == "start")
    ctl = [e for e in events if e["kind"] in ("controller", "controller_lost")]
    lost = next(e for e in ctl if e["kind"] == "controller_lost")
    restart = next(e for e in ctl if e.get("phase") == "restart")
    after = [e for e in ctl if e["t"] >= restart["t"]]
    queries = [e for e in after if e.get("op") == "query"]
    synced = [e for e in after if e.get("phase") == "resynced"]
    decisions = [json.loads(line) for line in (run_dir / "mrc" / "controller.jsonl").read_text().splitlines()]
    acked_before = [d for d in decisions if d["decision"] == "acked" and d["t"] < t_kill]
    print(f"\ncontroller killed at {t_kill - t0:.3f} s, lost at {lost['t'] - t0:.3f} s, restarted at "
          f"{restart['t'] - t0:.3f} s (pid {restart['pid']}), resynced at "
          f"{[round(e['t'] - t0, 3) for e in synced]}: {synced}; replaces acked before the kill: "
          f"{len(acked_before)}; status {summary['completion']['run_status']}, valid {summary['valid']}, "
          f"busbw {summary['busbw_mbit_per_s']} Mbit/s, run dir {run_dir}")
    assert code == 0, out
    assert (lost["reason"], restart["attempt"], restart["after"]) == ("exited with status -9", 1, lost["reason"])
    assert restart["pid"] != lost["pid"] and any(e.get("phase") == "connected" for e in after)
    assert sorted(q["rank"] for q in queries) == list(range(8)) and all(q["sent"] for q in queries)
    assert len(synced) == 1 and synced[0]["answered"] == synced[0]["connections"] == 8
    assert synced[0]["replaced"] >= len(acked_before)         # what the predecessor did, found
    assert synced[0]["t"] - restart["t"] < 10.0
    resynced = [d for d in decisions if d["decision"] == "resynced"]
    assert len(resynced) == 8 and not [d for d in decisions if d["decision"] in ("failed", "unmanaged")]
    # completed, not necessarily valid: the fidelity check reads the machine's load (timers late,
    # agents starved), which a busy machine fails without any fault of the controller's
    assert summary["completion"]["run_status"] == "done", summary["invalid_reasons"]
    assert [round(x["t_s"], 3) for x in summary["controller_resyncs"]] == [round(synced[0]["t"] - t0, 3)]
    assert "resynced from the agents" in out and "controller restarted" in out
