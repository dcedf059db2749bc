"""EV state machine: the transition table, the floor, probes, spraying."""

from agents.mrc.rng import Pcg32
from collections import Counter

import pytest

from agents.mrc.ev import (TRANSITIONS, EVCause, EVEvent, EVSet, EVState, EVStateError,
                           next_state)


def make(evs=(10, 11, 12, 13), floor=1, **kw):
    return EVSet(evs, qpn=5, rng=Pcg32(7), ev_min_active=floor, **kw)


def test_every_state_cause_pair_is_either_a_transition_or_an_error():
    for state in EVState:
        for cause in EVCause:
            if (state, cause) in TRANSITIONS:
                assert next_state(state, cause) in EVState
            else:
                with pytest.raises(EVStateError, match=f"{state.name}.*{cause.value}"):
                    next_state(state, cause)


def test_state_values_follow_mrc_ctl_h():
    assert (EVState.GOOD, EVState.ASSUMED_BAD, EVState.DENIED, EVState.UNKNOWN) == \
        (1, 2, 4, 1 << 31)


def test_loss_retires_at_once_and_emits_event():
    s = make()
    s.apply(11, EVCause.LOSS, now=1.5)
    assert s.info[11].state is EVState.ASSUMED_BAD
    assert s.events == [EVEvent(1.5, 5, 11, EVState.GOOD, EVState.ASSUMED_BAD, EVCause.LOSS)]
    s.apply(11, EVCause.LOSS, now=1.6)      # self-loop: no new event
    assert len(s.events) == 1


def test_floor_holds():
    s = make(floor=3)
    s.apply(10, EVCause.LOSS, 0.0)
    s.apply(11, EVCause.LOSS, 0.0)          # would leave 2 < 3 usable
    assert s.usable_count() == 3
    assert s.info[11].state is EVState.GOOD
    assert s.floor_held == 1


def test_controller_deny_and_good():
    s = make()
    s.set_state(12, EVState.DENIED, 0.0)
    s.apply(12, EVCause.PROBES_OK, 0.1)     # probes never undo the operator
    assert s.info[12].state is EVState.DENIED
    assert all(s.pick(0.2) != 12 for _ in range(50))
    s.set_state(12, EVState.GOOD, 0.3)
    assert s.info[12].state is EVState.GOOD
    with pytest.raises(ValueError):
        s.set_state(12, EVState.ASSUMED_BAD, 0.4)


def test_probes_restore_after_k_consecutive_successes():
    s = make()
    s.apply(13, EVCause.LOSS, 0.0)
    s.probe_result(13, True, 0.1, successes_needed=3)
    s.probe_result(13, False, 0.2, successes_needed=3)   # resets the run
    s.probe_result(13, True, 0.3, successes_needed=3)
    s.probe_result(13, True, 0.4, successes_needed=3)
    assert s.info[13].state is EVState.ASSUMED_BAD
    s.probe_result(13, True, 0.5, successes_needed=3)
    assert s.info[13].state is EVState.GOOD
    assert s.events[-1].cause is EVCause.PROBES_OK and s.events[-1].time == 0.5


def test_congestion_skips_then_expires():
    s = make(skip_timeout_s=0.01)
    s.apply(10, EVCause.CONGESTION, 1.0)
    assert s.info[10].state is EVState.SKIP
    assert all(s.pick(1.001) != 10 for _ in range(3))     # out for one rotation of the others
    assert 10 in [s.pick(1.001) for _ in range(4)]         # then back on its next turn
    assert s.info[10].state is EVState.GOOD
    s.apply(10, EVCause.CONGESTION, 2.0)
    s.expire_skips(2.02)                                   # or after the timeout
    assert s.info[10].state is EVState.GOOD


def test_spray_is_balanced_seeded_and_avoids_excluded():
    picks = [make().pick(0.0) for _ in range(1)]
    s1, s2 = make(), make()
    seq1 = [s1.pick(0.0) for _ in range(400)]
    assert seq1 == [s2.pick(0.0) for _ in range(400)] and picks[0] == seq1[0]
    counts = Counter(seq1)
    assert set(counts) == {10, 11, 12, 13} and max(counts.values()) - min(counts.values()) <= 1
    assert all(s1.pick(0.0, exclude=11) != 11 for _ in range(100))
    s1.apply(12, EVCause.LOSS, 0.0)
    assert 12 not in {s1.pick(0.0) for _ in range(100)}


def test_no_usable_ev_returns_none():
    s = make(evs=(1,), floor=0)
    s.apply(1, EVCause.LOSS, 0.0)
    assert s.pick(0.0) is None


def test_bad_configuration_rejected():
    with pytest.raises(ValueError):
        make(evs=())
    with pytest.raises(ValueError):
        make(evs=(1, 1))
    with pytest.raises(ValueError):
        make(evs=(1, 2), floor=3)


def test_with_every_ev_skipped_the_spray_stays_spread():
    """When every usable EV is in SKIP (an incast marks them all), packets still go round the
    EVs instead of all onto the first one (which then congests and is marked the more)."""
    s = make(skip_timeout_s=10.0)
    for ev in (10, 11, 12, 13):
        s.apply(ev, EVCause.CONGESTION, 0.0, always=True)
    counts = Counter(s.pick(0.001) for _ in range(400))
    assert set(counts) == {10, 11, 12, 13} and max(counts.values()) - min(counts.values()) <= 1
