"""The fault timeline (sans-I/O, fake clock): triggers, expansion, reconvergence."""
from __future__ import annotations

import pytest

from testbed.spec import TimelineEvent
from testbed.faults.timeline import Timeline, sweep_warmups


def ev(action, link="a0_0-c0_0", **kw):
    return TimelineEvent(action=action, link=link, **kw)


def steps(tl, now):
    return [(round(s.t, 6), s.kind, s.value, s.phase) for s in tl.due(now)]


def test_sweep_order_is_warmups_then_measured_per_size():
    assert sweep_warmups(2, 3, 1) == [True, False, False, False, True, False, False, False]
    assert sweep_warmups(1, 2, 0) == [False, False]


def test_at_seconds_counts_from_the_start():
    tl = Timeline([ev("link_down", at_s=2.5)], sweep_warmups(1, 3, 1))
    assert tl.next_time() is None            # nothing before the start barrier
    tl.start(100.0)
    assert steps(tl, 102.4) == []
    assert steps(tl, 102.5) == [(102.5, "link", False, "apply")]
    assert tl.unfired() == []


def test_at_iteration_fires_when_the_previous_sweep_position_ends():
    # sizes 2 x (1 warm-up + 3 measured): measured index 3 is the first of size 2, seq 5;
    # it begins when seq 4 (size 2's warm-up) ends.
    tl = Timeline([ev("link_down", at_iteration=3, after_s=0.05)], sweep_warmups(2, 3, 1))
    tl.start(0.0)
    for seq in range(4):
        tl.iteration_done(seq, 1.0 + seq)
    assert tl.next_time() is None
    tl.iteration_done(4, 10.0)
    tl.iteration_done(4, 10.2)               # a slower rank: the first report counts
    assert steps(tl, 11.0) == [(10.05, "link", False, "apply")]


def test_at_iteration_zero_without_warmup_fires_after_the_start():
    tl = Timeline([ev("link_down", at_iteration=0, after_s=0.3)], sweep_warmups(1, 2, 0))
    tl.start(5.0)
    assert steps(tl, 6.0) == [(5.3, "link", False, "apply")]


def test_flap_expands_into_down_up_cycles():
    tl = Timeline([ev("flap", at_s=1.0, period_s=0.5, count=3)], sweep_warmups(1, 1, 0))
    tl.start(0.0)
    assert steps(tl, 10) == [(1.0, "link", False, "apply"), (1.25, "link", True, "revert"),
                             (1.5, "link", False, "apply"), (1.75, "link", True, "revert"),
                             (2.0, "link", False, "apply"), (2.25, "link", True, "revert")]


@pytest.mark.parametrize("action,kw,value,reverted", [
    ("loss", {"loss_pct": 1.0}, 1.0, None),
    ("rate", {"rate_bps": 5_000_000}, 5_000_000, None),
    ("blackhole", {}, True, False),
])
def test_duration_schedules_the_revert(action, kw, value, reverted):
    tl = Timeline([ev(action, at_s=1.0, duration_s=2.0, **kw)], sweep_warmups(1, 1, 0))
    tl.start(0.0)
    assert steps(tl, 10) == [(1.0, action, value, "apply"), (3.0, action, reverted, "revert")]


def test_without_duration_nothing_is_reverted_by_the_timeline():
    tl = Timeline([ev("blackhole", at_s=1.0)], sweep_warmups(1, 1, 0))
    tl.start(0.0)
    assert steps(tl, 10) == [(1.0, "blackhole", True, "apply")]


def test_reconvergence_follows_each_link_change_after_the_delay():
    tl = Timeline([], sweep_warmups(1, 1, 0), reconverge_after_s=2.0)
    tl.link_changed(1.0)
    tl.link_changed(1.5)
    assert steps(tl, 10) == [(3.0, "reconverge", None, "apply"), (3.5, "reconverge", None, "apply")]
    no_delay = Timeline([], sweep_warmups(1, 1, 0))
    no_delay.link_changed(1.0)
    assert no_delay.next_time() is None


def test_events_never_triggered_are_reported():
    tl = Timeline([ev("link_down", at_iteration=2), ev("link_up", at_s=1.0)], sweep_warmups(1, 3, 1))
    tl.start(0.0)
    tl.iteration_done(0, 0.5)
    assert tl.unfired() == [0]
    assert [s.kind for s in tl.pending()] == ["link"]


def test_steps_carry_typed_changes():
    from testbed.faults import Blackhole, LinkState, Loss, Rate, Reconverge
    tl = Timeline([ev("flap", at_s=0.0, period_s=1.0, count=1), ev("blackhole", at_s=0.5, duration_s=1.0),
                   ev("loss", at_s=0.5, loss_pct=3.0), ev("rate", at_s=0.7, rate_bps=10, duration_s=1.0)],
                  sweep_warmups(1, 1, 0), reconverge_after_s=0.1)
    tl.start(0.0)
    tl.link_changed(0.0)
    assert [s.change for s in tl.due(10)] == [
        LinkState("a0_0-c0_0", up=False), Reconverge(), LinkState("a0_0-c0_0", up=True),
        Blackhole("a0_0-c0_0", True), Loss("a0_0-c0_0", 3.0), Rate("a0_0-c0_0", 10),
        Blackhole("a0_0-c0_0", False), Rate("a0_0-c0_0", None)]


def test_a_switch_action_takes_every_link_of_the_switch_at_once():
    links = ("a2_0-c0_0", "a2_0-c0_1", "e2_0-a2_0", "e2_1-a2_0")
    from testbed.faults import LinkState
    tl = Timeline([TimelineEvent("switch_down", None, at_s=1.0, switch="a2_0", links=links),
                   TimelineEvent("switch_up", None, at_s=3.0, switch="a2_0", links=links)],
                  sweep_warmups(1, 1, 0), reconverge_after_s=2.0)
    tl.start(0.0)
    due = tl.due(10)
    assert [(s.t, s.change, s.action, s.phase, s.index) for s in due] == \
        [(1.0, LinkState(l, up=False), "switch_down", "apply", 0) for l in links] + \
        [(3.0, LinkState(l, up=True), "switch_up", "apply", 1) for l in links]


def test_steps_planned_for_one_instant_carry_equal_planned_times():
    """Two entries with one trigger and offset are planned for the same instant (the metrics'
    one fault); a flap's cycles and a revert are planned apart; before the start nothing is."""
    tl = Timeline([ev("link_down", "a-b", at_iteration=1, after_s=0.3), ev("link_down", "c-d", at_iteration=1,
                                                                          after_s=0.3),
                   ev("flap", "e-f", at_s=1.0, period_s=0.2, count=2)], sweep_warmups(1, 3, 0))
    tl.start(100.0)
    tl.iteration_done(0, 100.4)
    got = [(s.link, s.phase, s.planned_s) for s in tl.due(200.0)]
    assert got == [("a-b", "apply", pytest.approx(0.7)), ("c-d", "apply", pytest.approx(0.7)),
                   ("e-f", "apply", 1.0), ("e-f", "revert", 1.1), ("e-f", "apply", 1.2), ("e-f", "revert", 1.3)]
    assert got[0][2] == got[1][2]


def test_a_loss_on_a_link_set_drops_on_every_link_at_once_and_reverts_each():
    links = ("a0_0-c0_0", "e0_0-a0_0", "h0_0_0-e0_0")
    from testbed.faults import Loss
    tl = Timeline([TimelineEvent("loss", None, at_s=1.0, loss_pct=1.0, duration_s=2.0, selector="all",
                                 links=links)], sweep_warmups(1, 1, 0))
    tl.start(0.0)
    got = [(s.t, s.change, s.phase, s.planned_s) for s in tl.due(10)]
    assert got == [(1.0, Loss(l, 1.0), "apply", 1.0) for l in links] + \
        [(3.0, Loss(l, None), "revert", 3.0) for l in links]
