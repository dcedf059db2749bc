"""The runner's barrier and outcome (:class:`testbed.run.state.RunState`), without root: messages,
process exits and a fake clock in; start and the outcome out."""

from __future__ import annotations

from testbed.run.ctlwatch import ControllerWatch
from testbed.run.state import Outcome, RunState

WORLD = ["h0", "h1", "h2"]


def test_the_barrier_waits_for_every_rank_and_the_controllers_hello_and_passes_once():
    s = RunState(WORLD, timeout_s=60, controller=ControllerWatch(0.0))
    assert not s.on_ready(0) and not s.on_ready(2) and not s.on_ready(1)   # no hello yet
    assert s.on_hello(0.5) and s.started
    assert not s.on_ready(1) and not s.on_hello(0.6)                      # once
    plain = RunState(WORLD, timeout_s=60)
    assert [plain.on_ready(r) for r in (2, 0, 1)] == [False, False, True]


def test_done_when_every_rank_is_done():
    s = RunState(WORLD, timeout_s=60)
    s.on_done(0)
    s.on_done(1)
    assert s.outcome is None
    assert not s.on_exit(0, 0)             # a rank that reported exits cleanly: no crash
    s.on_done(2)
    assert s.outcome == Outcome("done")


def test_the_first_failure_names_the_run_and_the_first_outcome_stands():
    s = RunState(WORLD, timeout_s=60)
    s.on_failed(1, "QP in ERR")
    s.on_failed(0, "later")
    assert s.outcome == Outcome("failed", "rank 1 (h1): QP in ERR")
    s.on_time(1e9)
    assert s.outcome.status == "failed"


def test_an_exit_without_a_report_is_a_crash_naming_the_log():
    s = RunState(WORLD, timeout_s=60, log_of=lambda r: f"/run/agents/rank{r}.log")
    assert s.on_exit(2, -9)
    assert s.outcome == Outcome("crashed", "rank 2 (h2) exited with status -9 without a report; "
                                           "see /run/agents/rank2.log")


def test_the_timeout_runs_from_the_loops_start():
    s = RunState(WORLD, timeout_s=30)
    s.on_time(1e6)                          # not begun: no deadline yet
    assert s.outcome is None
    s.begin(100.0)
    s.on_time(129.9)
    assert s.outcome is None
    s.on_time(130.0)
    assert s.outcome == Outcome("timeout", "not done within the scenario timeout (30 s)")
