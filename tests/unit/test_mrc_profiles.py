"""EV profiles (mrc_ctl.h): the INIT -> OFFLINE -> ONLINE state machine, its refusals, and
the EV ops reaching every QP that uses the profile."""
from __future__ import annotations

import errno
import random

import pytest

from agents.mrc.ev import EVEvent, EVState
from agents.mrc.profiles import (EV, EV_INVALID, GENERATED_EV_BASE, EVMode, EVOp, ProfileError,
                                 ProfileState, ProfileTable)
from agents.mrc.qp import QP, bring_up
from agents.mrc.types import QPAttr, QPConfig, QPState

VALS = [10, 11, 12, 13]


def online(table=None, pid=7, vals=VALS):
    table = table or ProfileTable()
    p = table.get(pid)
    p.modify(ev_mode=EVMode.EXPLICIT, ev_count=len(vals), profile_state=ProfileState.OFFLINE)
    for v in vals:
        p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV_INVALID, new_ev=EV(v))
    p.modify(ev_min_active=1, ev_event_mask=int(EVState.GOOD | EVState.ASSUMED_BAD),
             profile_state=ProfileState.ONLINE)
    return table, p


def qps_on(profile, n=2):
    cfg = QPConfig(cc="fixed", min_rto_s=0.0, ack_delay_s=0.00005)
    out = []
    for i in range(n):
        qp = QP(100 + i, rng=random.Random(i), memory=bytearray(1 << 16), config=cfg)
        bring_up(qp, 0.0, ev_profile=profile, dest_qpn=200 + i, attr=QPAttr(timeout=12))
        out.append(qp)
    return out


def refused(code, match, fn, **kw):
    with pytest.raises(ProfileError, match=match) as exc:
        fn(**kw)
    assert exc.value.errno == code


def test_explicit_profile_walks_init_offline_online_and_back():
    table, p = online()
    assert p.state is ProfileState.ONLINE
    assert p.modify(ev_op=EVOp.QUERY_EV_ARRAY) == [EV(v) for v in VALS]
    p.modify(profile_state=ProfileState.OFFLINE)
    p.modify(profile_state=ProfileState.INIT)
    assert p.state is ProfileState.INIT and p.evs == [] and p.ev_mode is None


def test_generated_profile_is_populated_by_the_nic():
    p = ProfileTable().get(1)
    p.modify(ev_mode=EVMode.GENERATED, ev_count=3, profile_state=ProfileState.OFFLINE)
    assert p.modify(ev_op=EVOp.QUERY_EV_ARRAY) == [EV(GENERATED_EV_BASE + i) for i in range(3)]
    p.modify(ev_min_active=2, ev_event_mask=1, profile_state=ProfileState.ONLINE)
    assert p.state is ProfileState.ONLINE


def test_illegal_transitions_name_state_and_op():
    p = ProfileTable().get(3)
    refused(errno.EINVAL, "INIT: move to ONLINE: no such transition", p.modify,
            profile_state=ProfileState.ONLINE)
    refused(errno.EINVAL, "INIT: move to OFFLINE: needs COUNT, MODE", p.modify,
            profile_state=ProfileState.OFFLINE)
    refused(errno.EINVAL, "INIT: QUERY_EV_ARRAY: not allowed", p.modify, ev_op=EVOp.QUERY_EV_ARRAY)
    refused(errno.EINVAL, "INIT: set .*MIN_ACTIVE", p.modify, ev_min_active=1)
    p.modify(ev_mode=EVMode.EXPLICIT, ev_count=2, profile_state=ProfileState.OFFLINE)
    refused(errno.EINVAL, "OFFLINE: move to ONLINE: needs EVENT_MASK, MIN_ACTIVE", p.modify,
            profile_state=ProfileState.ONLINE)
    p.modify(ev_min_active=1, ev_event_mask=1)
    refused(errno.EINVAL, "OFFLINE: move to ONLINE: every EV must be populated", p.modify,
            profile_state=ProfileState.ONLINE)
    refused(errno.EINVAL, "OFFLINE: set .*MODE", p.modify, ev_mode=EVMode.GENERATED)
    refused(errno.EINVAL, "OFFLINE: move to OFFLINE: no such transition", p.modify,
            profile_state=ProfileState.OFFLINE)
    refused(errno.EINVAL, "MIN_ACTIVE 3", p.modify, ev_min_active=3)
    refused(errno.EINVAL, "only GOOD and ASSUMED_BAD", p.modify, ev_event_mask=int(EVState.DENIED))
    p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV_INVALID, new_ev=EV(5))
    refused(errno.EINVAL, "already in the array", p.modify, ev_op=EVOp.REPLACE_EV,
            cur_ev=EV_INVALID, new_ev=EV(5))
    refused(errno.ENOENT, "REPLACE_EV: EV 9/1 is not in the array", p.modify,
            ev_op=EVOp.REPLACE_EV, cur_ev=EV(9), new_ev=EV(6))
    p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV_INVALID, new_ev=EV(6))
    p.modify(profile_state=ProfileState.ONLINE)
    refused(errno.EINVAL, "ONLINE: set .*COUNT", p.modify, ev_count=4)
    refused(errno.EINVAL, "ONLINE: move to INIT: no such transition", p.modify,
            profile_state=ProfileState.INIT)
    refused(errno.ENOENT, "QUERY_EV_STATE", p.modify, ev_op=EVOp.QUERY_EV_STATE, ev=EV(99))


def test_a_profile_with_active_qps_is_busy():
    _, p = online()
    a, _ = qps_on(p)
    refused(errno.EBUSY, "ONLINE: move to OFFLINE: QPs are attached", p.modify,
            profile_state=ProfileState.OFFLINE)
    refused(errno.EBUSY, "QPs are attached", p.modify, ev_event_mask=1)
    for qp in p.active_qps():
        qp.modify_qp(QPState.ERR)
    p.modify(profile_state=ProfileState.OFFLINE)          # no active QP left
    assert p.state is ProfileState.OFFLINE


def test_qp_takes_its_evs_floor_and_mask_from_the_profile():
    _, p = online()
    (qp,) = qps_on(p, 1)
    assert qp.evs.order == VALS and qp.evs.event_mask == 3 and qp.evs.ev_min_active == 1
    offline = ProfileTable().get(1)
    with pytest.raises(ValueError, match="not ONLINE"):
        bring_up(QP(5, rng=random.Random(0)), 0.0, ev_profile=offline, dest_qpn=1)


def test_modify_ev_state_reaches_every_qp_and_denied_is_per_profile():
    _, p = online()
    qps = qps_on(p)
    p.modify(ev_op=EVOp.MODIFY_EV_STATE, ev=EV(12), state=EVState.DENIED, now=1.0)
    assert [qp.evs.info[12].state for qp in qps] == [EVState.DENIED] * 2
    assert p.modify(ev_op=EVOp.QUERY_EV_STATE, ev=EV(12)) is EVState.DENIED
    p.modify(ev_op=EVOp.MODIFY_EV_STATE, ev=EV(12), state=EVState.GOOD, now=2.0)
    assert [qp.evs.info[12].state for qp in qps] == [EVState.GOOD] * 2
    events = [e for e in qps[0]._events if isinstance(e, EVEvent)]
    assert [(e.ev, e.new) for e in events] == [(12, EVState.GOOD)]      # DENIED is not reportable
    refused(errno.EINVAL, "only DENIED or GOOD", p.modify, ev_op=EVOp.MODIFY_EV_STATE, ev=EV(12),
            state=EVState.ASSUMED_BAD)


def test_assumed_bad_is_per_qp_and_shows_in_the_profile_query():
    _, p = online()
    a, b = qps_on(p)
    from agents.mrc.ev import EVCause
    a.evs.apply(11, EVCause.LOSS, 0.5)
    assert a.evs.info[11].state is EVState.ASSUMED_BAD and b.evs.info[11].state is EVState.GOOD
    assert p.modify(ev_op=EVOp.QUERY_EV_STATE, ev=EV(11)) is EVState.ASSUMED_BAD
    assert p.modify(ev_op=EVOp.QUERY_EV_STATE, ev=EV(10)) is EVState.GOOD


def test_replace_ev_reaches_every_qp_keeping_the_slot():
    _, p = online()
    qps = qps_on(p)
    p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV(11), new_ev=EV(21), all_copies=1, now=1.0)
    assert p.modify(ev_op=EVOp.QUERY_EV_ARRAY) == [EV(10), EV(21), EV(12), EV(13)]
    for qp in qps:
        assert qp.evs.order == [10, 21, 12, 13]
        assert qp.evs.info[21].state is EVState.GOOD and 11 not in qp.stats()["evs"]
        picks = {qp.evs.pick(1.0) for _ in range(12)}
        assert picks == {10, 21, 12, 13}


def test_replace_ev_installs_the_entrys_state():
    """mrc_ctl.h's op entry requires REPLACE_EV's ``state``: the new EV is installed DENIED or
    GOOD as given, on the QPs attached now and on those that attach later; another state is
    EINVAL and changes nothing."""
    table = ProfileTable()
    p = table.get(7)
    p.modify(ev_mode=EVMode.EXPLICIT, ev_count=4, profile_state=ProfileState.OFFLINE)
    for v, state in zip(VALS, [EVState.GOOD, EVState.DENIED, EVState.GOOD, EVState.GOOD]):
        p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV_INVALID, new_ev=EV(v), state=state)
    p.modify(ev_min_active=1, ev_event_mask=3, profile_state=ProfileState.ONLINE)
    qps = qps_on(p)                               # attach after 11 was installed DENIED
    assert p.modify(ev_op=EVOp.QUERY_EV_STATE, ev=EV(11)) is EVState.DENIED
    for qp in qps:
        assert [qp.evs.info[v].state for v in VALS] == \
            [EVState.GOOD, EVState.DENIED, EVState.GOOD, EVState.GOOD]
        assert 11 not in {qp.evs.pick(0.0) for _ in range(12)}
    p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV(12), new_ev=EV(22), state=EVState.DENIED, now=1.0)
    p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV(11), new_ev=EV(21), state=EVState.GOOD, now=1.0)
    assert p.modify(ev_op=EVOp.QUERY_EV_STATE, ev=EV(22)) is EVState.DENIED
    assert p.modify(ev_op=EVOp.QUERY_EV_STATE, ev=EV(21)) is EVState.GOOD
    for qp in qps:
        assert qp.evs.order == [10, 21, 22, 13]
        assert qp.evs.info[22].state is EVState.DENIED and qp.evs.info[21].state is EVState.GOOD
        assert {qp.evs.pick(1.0) for _ in range(12)} == {10, 21, 13}
        assert qp.next_event() is None            # DENIED is never reported
    for bad in (EVState.ASSUMED_BAD, EVState.SKIP, EVState.UNKNOWN, 3):
        refused(errno.EINVAL, "REPLACE_EV", p.modify, ev_op=EVOp.REPLACE_EV, cur_ev=EV(13),
                new_ev=EV(23), state=bad)
    assert p.modify(ev_op=EVOp.QUERY_EV_ARRAY) == [EV(10), EV(21), EV(22), EV(13)]
    assert all(qp.evs.order == [10, 21, 22, 13] and 23 not in qp.evs.info for qp in qps)


def test_packets_in_flight_on_a_replaced_ev_are_still_acknowledged():
    _, p = online()
    a, b = qps_on(p)
    a.modify_qp(QPState.RST)
    b.modify_qp(QPState.RST)
    bring_up(a, 0.0, ev_profile=p, dest_qpn=b.qpn, attr=QPAttr(timeout=12))
    bring_up(b, 0.0, ev_profile=p, dest_qpn=a.qpn, attr=QPAttr(timeout=12))
    a.post_write(wr_id=1, local=bytes(8 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    assert 11 in {ev for _, ev in out}
    p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV(11), new_ev=EV(21), now=0.0005)
    for data, _ in out:
        b.receive_datagram(data, 0.001)
    b.handle_timer(1.0)
    for data, _ in b.datagrams_to_send(1.0):
        a.receive_datagram(data, 0.002)
    a.handle_timer(0.002)
    assert a.idle and a.requester.rtx_packets == 0
    a.post_write(wr_id=2, local=bytes(8 * a.config.payload_bytes), remote_offset=0)
    assert {ev for _, ev in a.datagrams_to_send(0.003)} == {10, 21, 12, 13}


def test_replace_all_copies_of_unpopulated_slots_is_refused():
    """mrc_ctl.h REPLACE_EV with all_copies replaces every instance of cur_ev; in an explicit
    array only unpopulated slots repeat, and one EV in all of them would make a profile that
    no QP can use (its EV set refuses duplicates). EINVAL, array unchanged; one at a time works."""
    p = ProfileTable().get(3)
    p.modify(ev_mode=EVMode.EXPLICIT, ev_count=3, profile_state=ProfileState.OFFLINE)
    refused(errno.EINVAL, "all_copies", p.modify, ev_op=EVOp.REPLACE_EV, cur_ev=EV_INVALID,
            new_ev=EV(5), all_copies=1)
    assert p.modify(ev_op=EVOp.QUERY_EV_ARRAY) == [EV_INVALID] * 3
    for v in (5, 6, 7):
        p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV_INVALID, new_ev=EV(v), all_copies=0)
    p.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV(7), new_ev=EV(8), all_copies=1)   # one copy: fine
    p.modify(ev_min_active=1, ev_event_mask=1, profile_state=ProfileState.ONLINE)
    assert [q.evs.order for q in qps_on(p, 1)] == [[5, 6, 8]]
