"""The native EV set (agents/mrc/core/mrcn_ev.c) against agents.mrc.ev.EVSet, the spec.

A differential test drives both with the same random operations (every cause, ALWAYS_SKIP,
controller calls, REPLACE_EV, picks, SKIP expiry, probes, counter updates, clock and SRTT
steps, the REPS variant's ACK feedback) and compares after every step everything either
exposes: return values or the exception raised, states, counters, spray order and rotation,
the PCG32 state, SKIP deadline and bound, floor count, the REPS reuse queue, stats() and the
emitted EVEvents. Both EV selections (``select`` "rotation" and "reps") are drawn.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from agents.mrc import native
from agents.mrc.ev import EV_SELECT, TRANSITIONS, EVCause, EVEvent, EVInfo, EVSet, EVState, \
    EVStateError, next_state
from agents.mrc.reps import REPS_QUEUE_MAX
from agents.mrc.rng import Pcg32

core = native.load()
pytestmark = pytest.mark.skipif(core is None, reason="native engine not built (make setup)")

UNIVERSE = list(range(8)) + [1 << 31, (1 << 32) - 1]   # EV ids: small (replace reuses them) and u32 edges
INFO_FIELDS = list(EVInfo.__slots__) + ["packets_sent"]
COUNTERS = ["bytes_sent", "packets_acked", "retransmits", "seq", "acked_seq", "delivered_ts_ns",
            "loss_run", "loss_run_ts_ns", "losses_excused", "losses_chargeable", "probes_sent", "rtt_samples"]


class Pair:
    """A Python and a native EV set built alike, and the checks that they still agree."""

    def __init__(self, evs, *, seed, stream, capacity=None, **kw):
        self.srtt = None
        self.py_rng, self.c_rng = Pcg32(seed, stream), core.Pcg32(seed, stream)
        self.py = EVSet(evs, qpn=9, rng=self.py_rng, skip_timeout_fn=lambda: self.srtt, **kw)
        self.c = core.EVSet(evs, qpn=9, rng=self.c_rng, capacity=capacity, **kw)

    def set_srtt(self, v):
        self.srtt = v
        self.c.srtt_s = v

    def call(self, name, *args, **kw):
        """Call ``name`` on both; the same return value, or the same exception."""
        out = []
        for s in (self.py, self.c):
            try:
                out.append(("ok", getattr(s, name)(*args, **kw)))
            except (KeyError, ValueError, EVStateError) as exc:
                extra = (exc.state, exc.cause) if isinstance(exc, EVStateError) else ()
                out.append(("raise", type(exc), str(exc), extra))
        assert out[0] == out[1], (name, args, kw)
        assert same(out[0], out[1])
        return out[0]

    def check(self):
        py, c = self.py, self.c
        assert py.order == c.order
        assert (py._rotation, py._pos) == c.rotation
        assert py._picks == c.picks
        assert (py.select, py.reps, list(py.reuse), py.reused) == (c.select, c.reps, c.reuse, c.reused)
        assert (self.py_rng.state, self.py_rng.inc) == (self.c_rng.state, self.c_rng.inc)
        assert py.all_good == c.all_good
        assert py.usable_count() == c.usable_count()
        assert py.floor_held == c.floor_held
        assert py.event_mask == c.event_mask
        assert same(py.skip_deadline(), c.skip_deadline())
        assert same(py.skip_bound_s(), c.skip_bound_s())
        assert list(py.info) == list(c.info)
        for ev, pi in py.info.items():
            ci = c.info[ev]
            for f in INFO_FIELDS:
                assert same(getattr(pi, f), getattr(ci, f)), (ev, f)
            assert pi.state is ci.state
        assert [i.ev for i in py.probe_targets()] == [i.ev for i in c.probe_targets()]
        assert py.stats() == c.stats() and same(py.stats(), c.stats())
        assert same(py.sample_rows(), c.sample_rows())
        assert py.events == c.events
        assert [(e.old, e.new, e.cause) for e in py.events] == \
            [(e.old, e.new, e.cause) for e in c.events]


def same(a, b) -> bool:
    """Equal with the same types all the way down (a float is not an int, None is None)."""
    if type(a) is not type(b):
        return isinstance(a, bool) is isinstance(b, bool) and isinstance(a, int) and \
            isinstance(b, int) and a == b
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


ev_ids = st.integers(0, 15)   # mostly an EV of the set (see pick_ev), else any of UNIVERSE


def pick_ev(p: Pair, k: int) -> int:
    """EV ``k``: one the set knows (in or out of the spray order) for k < 12, else an id of
    UNIVERSE that may be unknown."""
    known = list(p.py.info)
    return known[k % len(known)] if k < 12 else UNIVERSE[k % len(UNIVERSE)]
ops = st.one_of(
    st.tuples(st.just("advance"), st.one_of(st.sampled_from([0.0, 1e-6, 1e-3, 0.01, 0.5]),
                                            st.floats(0.0, 0.05))),
    st.tuples(st.just("srtt"), st.one_of(st.none(), st.floats(1e-6, 0.05))),
    st.tuples(st.just("apply"), ev_ids, st.sampled_from(list(EVCause)), st.booleans(),
              st.one_of(st.none(), st.integers(-3, 50))),
    st.tuples(st.just("apply"), ev_ids, st.just(EVCause.CONGESTION), st.booleans(), st.none()),
    st.tuples(st.just("apply"), ev_ids, st.just(EVCause.LOSS), st.just(False), st.none()),
    st.tuples(st.just("set_state"), ev_ids, st.sampled_from(list(EVState))),
    st.tuples(st.just("replace"), ev_ids, ev_ids),
    st.tuples(st.just("replace"), ev_ids, ev_ids, st.sampled_from(list(EVState))),
    st.tuples(st.just("pick"), st.one_of(st.none(), ev_ids)),
    st.tuples(st.just("pick"), st.none()),
    st.tuples(st.just("pick_alive"), st.one_of(st.none(), ev_ids), st.integers(1, 1 << 40)),
    st.tuples(st.just("pick_many"), st.integers(0, 12)),
    st.tuples(st.just("expire_skips")),
    st.tuples(st.just("probe_result"), ev_ids, st.booleans(), st.integers(0, 3)),
    st.tuples(st.just("clear_always_skip"), ev_ids),
    st.tuples(st.just("lost"), ev_ids, st.integers(0, 3)),
    st.tuples(st.just("counter"), ev_ids, st.sampled_from(COUNTERS), st.integers(0, 1 << 40)),
    st.tuples(st.just("rtt"), ev_ids, st.floats(1e-6, 0.1)),
    st.tuples(st.just("probe_out"), ev_ids, st.integers(0, 0xFFFF), st.floats(0, 20)),
    st.tuples(st.just("event_mask"), st.integers(0, 3)),
    st.tuples(st.just("reps_feedback"), ev_ids, st.sampled_from([0, 0, 1, 4, 15])),
)


def step(p: Pair, now: float, op) -> float:
    """Apply one operation to both sets; returns the (possibly advanced) clock."""
    kind = op[0]
    if kind not in ("advance", "srtt", "pick", "pick_alive", "pick_many", "expire_skips", "event_mask"):
        op = (kind, pick_ev(p, op[1])) + op[2:]
    if kind == "replace":   # the new EV: any id, fresh, replaced-out or in the order
        op = (kind, op[1], UNIVERSE[op[2] % len(UNIVERSE)]) + op[3:]
    elif kind in ("pick", "pick_alive") and op[1] is not None:
        op = (kind, pick_ev(p, op[1])) + op[2:]
    if kind == "advance":
        return now + op[1]
    if kind == "srtt":
        p.set_srtt(op[1])
    elif kind == "apply":
        _, ev, cause, always, drop = op
        p.call("apply", ev, cause, now, always=always, drop_count=drop)
    elif kind == "set_state":
        p.call("set_state", op[1], op[2], now)
    elif kind == "replace":   # with the op entry's state, or without (GOOD)
        p.call("replace", op[1], op[2], now, *op[3:])
    elif kind == "pick":
        p.call("pick", now, exclude=op[1])
    elif kind == "pick_alive":   # a retransmission: only EVs that delivered since its lost stamp
        p.call("pick", now, exclude=op[1], alive_since_ns=op[2])
    elif kind == "pick_many":
        p.call("pick_many", now, op[1])
    elif kind == "expire_skips":
        p.call("expire_skips", now)
    elif kind == "probe_result":
        p.call("probe_result", op[1], op[2], now, op[3])
    elif kind == "clear_always_skip":
        p.call("clear_always_skip", op[1], now)
    elif kind == "reps_feedback":
        p.call("reps_feedback", op[1], op[2])
    elif op[1] in p.py.info:   # per-EV counters, updated as the requester and loss.py do
        pi, ci = p.py.info[op[1]], p.c.info[op[1]]
        for i in (pi, ci):
            if kind == "lost":
                i.packets_lost += op[2]
            elif kind == "counter":
                setattr(i, op[2], op[3])
            elif kind == "rtt":    # loss.py LossDetector.rtt_sample's per-EV part
                i.rtt_last_s = op[2]
                i.rtt_samples += 1
                if i.rtt_min_s is None or op[2] < i.rtt_min_s:
                    i.rtt_min_s = op[2]
                srtt = i.rtt_srtt_s
                i.rtt_srtt_s = op[2] if srtt is None else srtt + (op[2] - srtt) * 0.125
            elif kind == "probe_out":
                i.probe_outstanding = (op[2], now + op[3])
    elif kind == "event_mask":
        p.py.event_mask = p.c.event_mask = op[1]
    return now


@settings(max_examples=200, deadline=None)
@given(evs=st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=6, unique=True),
       data=st.data(),
       seed=st.integers(0, (1 << 64) - 1), stream=st.integers(0, 3),
       skip_timeout_s=st.sampled_from([0.0, 1e-4, 0.001, 0.02]),
       initial_state=st.sampled_from(list(EVState)), event_mask=st.integers(0, 3),
       start=st.floats(0.0, 100.0), steps=st.lists(ops, min_size=20, max_size=80),
       select=st.sampled_from(EV_SELECT))
def test_native_ev_set_matches_python_step_by_step(evs, data, seed, stream, skip_timeout_s,
                                                   initial_state, event_mask, start, steps, select):
    floor = data.draw(st.integers(0, len(evs)), label="ev_min_active")
    # capacity: every id of UNIVERSE fits, and the C id index is small enough to collide
    p = Pair(evs, seed=seed, stream=stream, ev_min_active=floor, skip_timeout_s=skip_timeout_s,
             initial_state=initial_state, event_mask=event_mask, capacity=len(UNIVERSE),
             select=select)
    p.check()
    now = start
    for op in steps:
        now = step(p, now, op)
        p.check()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, (1 << 64) - 1), n=st.integers(1, 8),
       steps=st.lists(st.tuples(st.sampled_from(["loss", "cong", "always", "good", "pick",
                                                 "many", "expire", "adv", "ack", "ecn", "nack"]),
                                st.integers(0, 7)), min_size=30, max_size=150),
       select=st.sampled_from(EV_SELECT))
def test_skip_heavy_runs_agree(seed, n, steps, select):
    """Long SKIP/ALWAYS_SKIP-heavy runs: rotations end SKIPs, the all-SKIP spread, timeouts;
    with ``select`` "reps" the reuse queue and the penalties too."""
    p = Pair(list(range(100, 100 + n)), seed=seed, stream=1, ev_min_active=1,
             skip_timeout_s=0.002, select=select)
    now = 1.0
    for kind, k in steps:
        ev = 100 + k % n
        if kind == "loss":
            p.call("apply", ev, EVCause.LOSS, now)
        elif kind in ("cong", "always"):
            p.call("apply", ev, EVCause.CONGESTION, now, always=kind == "always")
        elif kind == "good":
            p.call("set_state", ev, EVState.GOOD, now)
        elif kind == "pick":
            p.call("pick", now, exclude=ev if k % 2 else None)
        elif kind == "many":
            p.call("pick_many", now, k + 1)
        elif kind == "expire":
            p.call("expire_skips", now)
        elif kind in ("ack", "ecn", "nack"):   # the requester's REPS feedback
            p.call("reps_feedback", ev, {"ack": 0, "ecn": 1, "nack": 4}[kind])
        else:
            now += k * 0.0005
        p.check()


def test_the_reps_queue_forgets_its_oldest_when_full():
    """REPS_QUEUE_MAX good ACKs queued and more: both engines keep the newest, oldest first."""
    p = Pair([1, 2, 3], seed=4, stream=0, select="reps")
    for k in range(REPS_QUEUE_MAX + 7):
        p.call("reps_feedback", 1 + k % 3, 0)
    p.check()
    assert len(p.c.reuse) == REPS_QUEUE_MAX and p.c.reuse[0] == 1 + 7 % 3
    for _ in range(10):
        p.call("pick", 0.0)
    p.check()


def test_transition_table_matches_python():
    for state in EVState:
        for cause in EVCause:
            if (state, cause) in TRANSITIONS:
                assert core.ev_next_state(state, cause) is next_state(state, cause)
            else:
                with pytest.raises(EVStateError) as exc:
                    core.ev_next_state(state, cause)
                assert (exc.value.state, exc.value.cause) == (state, cause)


def test_illegal_event_raises_and_changes_nothing():
    p = Pair([1, 2, 3], seed=4, stream=0)
    r = p.call("apply", 2, EVCause.SKIP_EXPIRED, 0.5)
    assert r[0] == "raise" and r[1] is EVStateError
    p.check()
    assert p.c.info[2].state is EVState.GOOD and p.c.events == []


def test_bad_configuration_rejected_alike():
    rng = core.Pcg32(1)
    for evs, kw in [((), {}), ((1, 1), {}), ((1, 2), {"ev_min_active": 3}),
                    ((1, 2), {"event_mask": 4}), ((1, 2), {"select": "spray"})]:
        with pytest.raises(ValueError) as py_exc:
            EVSet(evs, qpn=1, rng=Pcg32(1), **kw)
        with pytest.raises(ValueError) as c_exc:
            core.EVSet(evs, qpn=1, rng=rng, **kw)
        assert str(py_exc.value) == str(c_exc.value)
    with pytest.raises(ValueError):
        core.EVSet([1, 2, 3], qpn=1, rng=rng, capacity=2)


def test_replace_beyond_capacity_is_refused_without_change():
    """The C records are bounded (Python's dict is not): a REPLACE_EV needing a new record
    past the capacity fails and leaves the set as it was; a replaced-out id is reused."""
    s = core.EVSet([1, 2], qpn=1, rng=core.Pcg32(3), capacity=3)
    s.replace(1, 7, 0.0)
    before = (s.order, list(s.info), s.stats())
    with pytest.raises(MemoryError):
        s.replace(2, 8, 0.0)
    assert (s.order, list(s.info), s.stats()) == before
    s.replace(7, 1, 0.0)                 # 1's record is reused in place, as the dict does
    assert s.order == [1, 2] and list(s.info) == [1, 2, 7]
    assert s.info[7].state is EVState.DENIED and s.info[1].state is EVState.GOOD


def test_replace_installs_the_given_state_or_refuses_it():
    """REPLACE_EV's required ``state`` (mrc_ctl.h op entry): DENIED and GOOD are installed as
    given, in both engines; any other state is refused and changes nothing."""
    p = Pair([1, 2, 3], seed=4, stream=0)
    p.call("replace", 2, 7, 0.0, EVState.DENIED)
    p.check()
    assert p.c.info[7].state is EVState.DENIED and not p.c.all_good
    assert 7 not in {p.call("pick", 0.0)[1] for _ in range(9)}
    p.call("replace", 3, 8, 0.0, EVState.GOOD)
    p.check()
    assert p.c.info[8].state is EVState.GOOD
    for bad in (EVState.ASSUMED_BAD, EVState.SKIP, EVState.UNKNOWN):
        before = (p.c.order, list(p.c.info))
        out = p.call("replace", 1, 9, 0.0, bad)
        assert out[0] == "raise" and out[1] is ValueError and bad.name in out[2]
        assert (p.c.order, list(p.c.info)) == before
    p.check()
    assert p.py.events == []


def test_drop_count_carries_losses_since_last_event():
    p = Pair([1, 2, 3], seed=5, stream=0)
    for i in (p.py.info[2], p.c.info[2]):
        i.packets_lost += 4
    p.call("apply", 2, EVCause.LOSS, 1.0)
    p.call("probe_result", 2, True, 1.5, 1)
    p.check()
    assert [e.drop_count for e in p.c.events] == [4, 0]
    assert p.c.events[0] == EVEvent(1.0, 9, 2, EVState.GOOD, EVState.ASSUMED_BAD, EVCause.LOSS, 4)


def test_skip_bound_is_the_srtt_once_known():
    p = Pair([1, 2], seed=6, stream=0, skip_timeout_s=0.001)
    p.call("apply", 1, EVCause.CONGESTION, 2.0)
    assert p.c.skip_deadline() == 2.0 + 0.001
    p.set_srtt(0.03)
    p.call("apply", 2, EVCause.CONGESTION, 2.0, always=True)
    assert p.c.info[2].skip_until == 2.0 + 8 * 0.03
    p.check()


def test_two_sets_share_the_qp_rng():
    """The C set borrows the QP's PCG32: draws by one set move the other's rotation."""
    py_rng, c_rng = Pcg32(11, 2), core.Pcg32(11, 2)
    py = [EVSet([1, 2, 3], qpn=1, rng=py_rng), EVSet([4, 5], qpn=2, rng=py_rng)]
    c = [core.EVSet([1, 2, 3], qpn=1, rng=c_rng), core.EVSet([4, 5], qpn=2, rng=c_rng)]
    for k in range(40):
        assert py[k % 2].pick(0.0) == c[k % 2].pick(0.0)
        assert py[(k // 3) % 2].pick_many(0.0, k % 5) == c[(k // 3) % 2].pick_many(0.0, k % 5)
    assert py_rng.state == c_rng.state


def test_ids_no_u32_can_hold_behave_as_unknown_evs():
    p = Pair([1, 2], seed=8, stream=0)
    for ev in (-1, 1 << 32, None):
        assert p.call("apply", ev, EVCause.LOSS, 0.0)[1] is KeyError
        assert p.call("probe_result", ev, True, 0.0, 1)[1] is KeyError
        assert p.call("set_state", ev, EVState.GOOD, 0.0)[1] is KeyError
        p.call("clear_always_skip", ev, 0.0)
        p.call("pick", 0.0, exclude=ev)
        assert p.py.info.get(ev) is None and p.c.info.get(ev) is None and ev not in p.c.info
    assert p.call("replace", -1, 3, 0.0)[1] is ValueError
    p.check()
