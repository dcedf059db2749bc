"""The runner's CPU priority (root): raised for the run, restored after, whether the runner
sits in an autogroup of its own or in the root autogroup (a CI job started by a daemon)."""
from __future__ import annotations

import os
import threading

import pytest

from testbed.run import priority


def _autogroup_text() -> str:
    try:
        with open(priority.AUTOGROUP) as f:
            return f.read()
    except OSError:
        return ""


def _nice() -> int:
    return int(_autogroup_text().split("nice")[1])


@pytest.mark.skipif("nice" not in _autogroup_text(),
                    reason="not in an autogroup of its own (kernel without autogroup, or root autogroup)")
def test_autogroup_nice_is_set_and_restored():
    before = _nice()
    prio = priority.RunnerPriority()
    assert prio.raise_(-7) == "autogroup"
    try:
        assert _nice() == -7
    finally:
        prio.restore()
    assert _nice() == before and prio.how is None


def test_root_autogroup_falls_back_to_thread_nice(tmp_path, monkeypatch):
    """The root autogroup reads empty: every thread's nice is raised instead, and put back."""
    empty = tmp_path / "autogroup"
    empty.write_text("")
    monkeypatch.setattr(priority, "AUTOGROUP", str(empty))
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    tids = {os.getpid(), worker.native_id}
    before = {t: os.getpriority(os.PRIO_PROCESS, t) for t in tids}
    prio = priority.RunnerPriority()
    try:
        assert prio.raise_(-7) == "threads"
        assert {t: os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {t: -7 for t in tids}
    finally:
        prio.restore()
        stop.set()
        worker.join()
    assert {os.getpid(): os.getpriority(os.PRIO_PROCESS, os.getpid())} == {os.getpid(): before[os.getpid()]}
    assert empty.read_text() == ""


def test_nothing_to_raise_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(priority, "AUTOGROUP", str(tmp_path / "absent"))
    monkeypatch.setattr(priority, "_threads_nice", lambda nice: {})
    prio = priority.RunnerPriority()
    assert prio.raise_() is None
    prio.restore()


def test_realtime_puts_every_thread_one_level_above_the_agents_and_back_and_children_start_normal():
    import subprocess
    import sys
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    tids = {os.getpid(), worker.native_id}
    prio = priority.RunnerPriority()
    try:
        assert prio.raise_(realtime=2).startswith("SCHED_RR 2")
        assert {t: (os.sched_getscheduler(t), os.sched_getparam(t).sched_priority) for t in tids} == \
            {t: (os.SCHED_RR | os.SCHED_RESET_ON_FORK, 2) for t in tids}
        child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                               capture_output=True, text=True, check=True)
        assert int(child.stdout) == os.SCHED_OTHER     # an agent or controller it starts is not real-time
    finally:
        prio.restore()
        stop.set()
        worker.join()
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == (os.SCHED_OTHER, 0)
    assert prio.how is None
