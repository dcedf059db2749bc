"""The runner's decisions (:class:`testbed.run.state.RunState`), without root: messages, process
exits, the controller's health and a fake clock in; actions (start, fault steps, relayed
messages, journal records, the controller's loss and restart) and the outcome out."""

from __future__ import annotations

from agents.protocol import Command, Done, Event, Hello, Iteration, Operator, Query, Ready, Synced
from testbed.faults.timeline import Timeline, sweep_warmups
from testbed.run.control import CONTROLLER
from testbed.run.ctlwatch import HELLO_TIMEOUT_S, ControllerWatch, Restarts
from testbed.run.state import (Abort, Apply, Begin, Journal, LoseController, Outcome, RunState, Say, Send,
                               SpawnController)
from testbed.spec import TimelineEvent

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


# -- messages and actions: the barrier, the timeline's playback and the controller relay -------


def iteration(rank: int, seq: int, t: float = 5.0) -> Iteration:
    return Iteration(rank, size=1024, iter=seq, seq=seq, warmup=seq == 0, t_start=t - 1, t_end=t, seconds=1.0, wrong=0)


def test_the_barrier_is_an_action_once_every_rank_and_the_controller_are_in():
    s = RunState(WORLD, timeout_s=60)
    s.controller_spawned(0.0)
    acts = [s.on_message(Ready(r), 1.0) for r in (0, 1, 2)]
    assert acts[0] == [Journal({"kind": "agent", "rank": 0, "status": "ready"})] and Begin() not in acts[2]
    assert s.on_message(Hello("controller"), 1.5) == [Journal({"kind": "controller", "phase": "connected"}), Begin()]
    assert Begin() not in s.on_message(Ready(1), 2.0)
    assert s.on_message(Ready(7), 2.0) == []          # not one of this run's agents


def test_the_timeline_plays_from_the_start_and_the_first_jobs_iterations():
    """at 1 s a loss for 2 s; at measured iteration 1 a link down (reconvergence 0.5 s later);
    only the first job's ranks (primary 2 of 3) trigger at_iteration; nothing after the end."""
    events = [TimelineEvent(action="loss", link="a-b", at_s=1.0, loss_pct=20.0, duration_s=2.0),
              TimelineEvent(action="link_down", link="c-d", at_iteration=1)]
    s = RunState(WORLD, timeout_s=60, primary=2, timeline=Timeline(events, sweep_warmups(1, 3, 1),
                                                                   reconverge_after_s=0.5))
    s.begin(0.0)
    assert s.wake_at() == 60.0 and s.on_time(10.0) == []   # not started: nothing is due
    s.workload_started(10.0)
    assert s.wake_at() == 11.0
    (a,) = s.on_time(11.0)
    assert isinstance(a, Apply) and (a.step.action, a.step.phase) == ("loss", "apply")
    s.on_message(iteration(2, 1), 11.5)                # rank 2 runs another job: no trigger
    assert [x.step.phase for x in s.on_time(12.0)] == []
    s.on_message(iteration(0, 1), 12.0)                # measured 0 (seq 1) done: measured 1 begins
    due = s.on_time(13.0)
    assert [(x.step.action, x.step.phase) for x in due] == [("link_down", "apply"), ("loss", "revert")]
    s.step_applied(due[0].step, 13.1)                  # a link change: routing reconverges 0.5 s later
    assert s.wake_at() == 13.6 and [x.step.kind for x in s.on_time(13.6)] == ["reconverge"]
    assert s.timeline_record() is None
    s.on_message(Done(0, {}), 14.0)
    s.on_message(Done(1, {}), 14.0)
    s.on_message(Done(2, {}), 14.0)
    assert s.outcome == Outcome("done") and s.on_time(100.0) == []


def test_a_timeline_ev_action_goes_to_a_live_controller_or_is_journaled_unsent():
    events = [TimelineEvent(action="ev_deny", link="a-b", at_s=1.0), TimelineEvent(action="ev_allow", link="a-b",
                                                                                   at_s=2.0)]
    s = RunState(WORLD, timeout_s=60, timeline=Timeline(events, []))
    s.begin(0.0)
    s.workload_started(0.0)
    record = {"kind": "controller", "source": "timeline", "action": "ev_deny", "link": "a-b", "index": 0}
    assert s.on_time(1.0) == [Journal({**record, "sent": False}),
                              Say("a-b: controller: deny the EVs crossing it (no controller on this run)",
                                  head="ev_deny")]
    s.controller_spawned(1.5)
    s.on_hello(1.6)
    (send,) = s.on_time(2.0)
    assert send == Send(CONTROLLER, Operator("allow", "a-b", 1), {**record, "action": "ev_allow", "index": 1},
                        Say("a-b: controller: allow the EVs crossing it", head="ev_allow",
                            unsent=" (controller lost)"))


def test_the_relay_journals_forwards_and_routes_as_the_runner_did():
    s = RunState(WORLD, timeout_s=60)
    stats = Event(1, 2.0, "ev_stats", peer="h2", evs=[])
    state = Event(1, 2.0, "ev_state", peer="h2", dir="tx", qpn=7, ev_id=3, old="GOOD", new="ASSUMED_BAD", cause="loss")
    error = Event(1, 2.0, "qp_error", reason="retry exhausted")
    assert s.on_message(stats, 2.0) == []                         # no controller: telemetry goes nowhere
    assert s.on_message(state, 2.0) == [Journal(state.as_dict(), stamp=False)]
    s.controller_spawned(0.0)
    s.on_hello(1.0)
    assert s.on_message(stats, 2.0) == [Send(CONTROLLER, stats)]  # forwarded, not journaled
    assert s.on_message(state, 2.0) == [Journal(state.as_dict(), stamp=False), Send(CONTROLLER, state)]
    assert s.on_message(error, 2.0) == [Journal(error.as_dict(), stamp=False),
                                        Say("rank 1: retry exhausted", head="QP error", style="red")]
    cmd = Command(2, "h0", "replace", 3, "why", 9)
    rec = {"kind": "controller", "op": "replace", "rank": 2, "peer": "h0", "ev_id": 3, "new_ev_id": 9, "reason": "why"}
    assert s.on_message(cmd, 3.0) == [Send(2, cmd, rec, Say("rank 2 -> h0: replace EV 3 by EV 9 (why)",
                                                              head="controller"))]
    bad = Command(9, "h0", "deny", 3, "why")
    assert s.on_message(bad, 3.0)[0] == Journal({**rec, "rank": 9, "op": "deny", "new_ev_id": None, "sent": False})
    assert s.on_message(Query(1, "h2"), 3.0) == [Send(1, Query(1, "h2"), {"kind": "controller", "op": "query",
                                                                            "rank": 1, "peer": "h2"})]
    assert s.on_message(Synced(3, 3, 1, 0, 0), 4.0)[0] == Journal(
        {"kind": "controller", "phase": "resynced", "connections": 3, "answered": 3, "replaced": 1, "denied": 0,
         "assumed_bad": 0})


def test_a_lost_controller_is_restarted_within_the_limit_and_no_hello_aborts():
    s = RunState(WORLD, timeout_s=60, restarts=Restarts(True, limit=1))
    assert s.check_controller(0.0, exit_code=None, connected=False, stalled_s=0) == []   # none runs
    s.controller_spawned(0.0)
    assert s.check_controller(HELLO_TIMEOUT_S, exit_code=None, connected=False, stalled_s=0) == [
        Abort(f"the controller said no hello within {HELLO_TIMEOUT_S:g} s of its start")]
    s.controller_spawned(20.0)
    s.on_hello(21.0)
    assert s.check_controller(22.0, exit_code=-9, connected=False, stalled_s=0) == [
        LoseController("exited with status -9"), SpawnController("exited with status -9")]
    s.controller_spawned(22.0, restarted=True)
    assert not s.controller_live
    assert s.check_controller(22.0 + HELLO_TIMEOUT_S, exit_code=None, connected=False, stalled_s=0) == [
        LoseController(f"restarted, said no hello within {HELLO_TIMEOUT_S:g} s of its start"),
        Journal({"kind": "controller", "phase": "not_restarted", "reason": "the limit of 1 restarts is reached"})]


def test_the_ranks_do_not_wait_for_a_restarted_controller_that_never_comes_up():
    """Lost before the start (after its hello), restarted, and the restart says no hello: the
    barrier passes without it, the moment it is given up."""
    s = RunState(WORLD, timeout_s=60, restarts=Restarts(True, limit=1))
    s.controller_spawned(0.0)
    s.on_hello(0.5)
    assert s.check_controller(1.0, exit_code=1, connected=False, stalled_s=0)[-1] == SpawnController("exited with "
                                                                                                      "status 1")
    s.controller_spawned(1.0, restarted=True)
    assert [s.on_ready(r) for r in range(3)] == [False, False, False]   # the new one's hello is due
    acts = s.check_controller(1.0 + HELLO_TIMEOUT_S, exit_code=None, connected=False, stalled_s=0)
    assert acts[-1] == Begin() and s.started
