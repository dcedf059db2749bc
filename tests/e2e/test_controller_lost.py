"""The data path outlives the controller: ev-gray-failure (mrc, a shorter workload) with its
controller SIGKILLed mid-run completes valid, with ``controller_lost`` in the records and the
report's summary."""

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


def scenario_text() -> str:
    """scenarios/ev-gray-failure.yaml, mrc only, 8 ranks (two per pod: half the agents' CPU, so
    that the run's validity does not hang on a busy machine), 512 KiB x 5 iterations (the fault
    at iteration 1)."""
    text = (REPO / "scenarios" / "ev-gray-failure.yaml").read_text()
    hosts = "[h0_0_0, h0_1_0, h1_0_0, h1_1_0, h2_0_0, h2_1_0, h3_0_0, h3_1_0]"
    for old, new in (("transports: [mrc, rc, tcp]", "transports: [mrc]"), ("timeout: 180s", "timeout: 90s"),
                     ("hosts: all", f"hosts: {hosts}"),
                     ("min_bytes: 1MiB", "min_bytes: 512KiB"), ("max_bytes: 1MiB", "max_bytes: 512KiB"),
                     ("iterations: 8", "iterations: 5"), ("../topologies/", f"{REPO}/topologies/")):
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_a_sigkilled_controller_is_lost_and_the_run_completes_valid(tmp_path):
    before = net_namespaces()
    path = tmp_path / "ev-gray-failure.yaml"
    path.write_text(scenario_text())
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
    lost = [e for e in events if e["kind"] == "controller_lost"]
    summary = json.loads((run_dir / "summary.json").read_text())["transports"]["mrc"]
    t0 = next(e["t"] for e in events if e["kind"] == "run" and e.get("phase") == "start")
    print(f"\ncontroller killed at {t_kill - t0:.3f} s, fault at {t_fault - t0:.3f} s, lost: "
          f"{[(round(e['t'] - t0, 3), e['reason']) for e in lost]}, status {summary['completion']['run_status']}, "
          f"valid {summary['valid']} {summary['invalid_reasons']}, busbw {summary['busbw_mbit_per_s']} Mbit/s, "
          f"run dir {run_dir}")
    assert proc.returncode == 0, out
    assert [(e["reason"], e["exit"]) for e in lost] == [("exited with status -9", -9)]
    assert 0 <= lost[0]["t"] - t_kill < 1.0       # noticed within a few runner ticks
    assert summary["completion"]["run_status"] == "done" and summary["valid"], summary["invalid_reasons"]
    assert [round(x["t_s"], 3) for x in summary["controller_lost"]] == [round(lost[0]["t"] - t0, 3)]
    assert "controller lost" in out
