"""Rows of docs/conformance.md that no other unit test pinned down: the requester's max_wimm,
EV event drop counts, NSCC's fair increase, NACK reaction and target factor, ALWAYS_SKIP's
bound, the refusal of AUTO EV profiles, NSCC's whole multiplicative decrease on ECN and the
header's profile state and EV op values."""
from __future__ import annotations

import errno
import random

from agents.mrc.rng import Pcg32

import pytest

from agents.mrc import cc
from agents.mrc import packet as pk
from agents.mrc.ev import ALWAYS_SKIP_TIMEOUTS, EVCause, EVEvent, EVSet, EVState
from agents.mrc.profiles import EVMode, ProfileError, ProfileTable
from agents.mrc.qp import QP, connect_pair
from agents.mrc.types import QPAttr, QPConfig

EVS = [0, 1, 2, 3]


def pair(attr=QPAttr(timeout=12), **kw):
    kw.setdefault("cc", "fixed")
    kw.setdefault("ack_delay_s", 0.00005)
    kw.setdefault("min_rto_s", 0.0)
    a = QP(1, rng=random.Random(1), config=QPConfig(**kw))
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 20), config=QPConfig(**kw))
    connect_pair(a, b, EVS, attr=attr)
    return a, b


def test_max_wimm_bounds_write_with_imms_in_flight_at_the_requester():
    """mrc.h ``wimm.max_wimm``: at most that many WRITE_WITH_IMMs outstanding; the next one
    leaves once an earlier one completes."""
    a, b = pair(attr=QPAttr(timeout=12, max_wimm=2))
    for k in range(3):
        b.post_recv(k)
        a.post_write(wr_id=k, local=b"x" * 100, remote_offset=100 * k, imm=k)
    first = a.datagrams_to_send(0.0)
    assert [pk.parse(d).imm for d, _ in first] == [0, 1]
    assert a.datagrams_to_send(0.0) == []
    for data, _ in first:
        b.receive_datagram(data, 0.001)
    for data, _ in b.datagrams_to_send(0.001):
        a.receive_datagram(data, 0.002)
    assert [pk.parse(d).imm for d, _ in a.datagrams_to_send(0.002)] == [2]


def test_ev_event_drop_count_is_the_losses_charged_since_the_previous_event():
    """The emulation's ``drop_count`` (mrc_ctl.h: EV events dropped from the queue) carries the
    packets lost on the EV since its previous reported event."""
    sink: list = []
    evs = EVSet([0, 1], qpn=1, rng=Pcg32(0), sink=sink)
    evs.info[0].packets_lost += 3
    evs.apply(0, EVCause.LOSS, 0.0)
    evs.apply(0, EVCause.PROBES_OK, 0.1)
    evs.info[0].packets_lost += 1
    evs.apply(0, EVCause.LOSS, 0.2)
    assert [(e.new, e.drop_count) for e in sink if isinstance(e, EVEvent)] == \
        [(EVState.ASSUMED_BAD, 3), (EVState.GOOD, 0), (EVState.ASSUMED_BAD, 1)]


def test_nscc_fair_increase_above_target_without_ecn():
    """No ECN, target <= d: cwnd += fi * mss * acked / cwnd (ecn_capable: no delay fallback)."""
    c = cc.create("uet-1.0-nscc", mss_bytes=1000, rate_bps=8e9, base_rtt_s=0.001, ecn_capable=True)
    c.cwnd_bytes = 500_000
    c.on_packets_acked(now=0.01, acked_bytes=10_000, rtt_s=0.0025)     # d 1.5 ms >= target 1 ms
    assert c.cwnd_bytes == pytest.approx(500_000 + 1000 * 10_000 / 500_000)
    assert c.md_count == 0


def test_nscc_target_factor_sets_the_target_delay():
    """target = target_factor * base RTT (0.75 is UET's value with trimming; not automatic)."""
    c = cc.create("uet-1.0-nscc", mss_bytes=1000, base_rtt_s=0.004, target_factor=0.75)
    assert c.target_s == pytest.approx(0.003)


def test_a_trim_nack_takes_the_lost_bytes_off_the_window_and_skips_the_ev():
    """NSCC's NACK reaction through the QP: a TRIMMED NACK charges the packet's bytes to cwnd
    and retransmits it; the EV goes to SKIP, not ASSUMED_BAD."""
    a, _ = pair(cc="uet-1.0-nscc", cc_params={"rate_bps": 8e9, "base_rtt_s": 0.001})
    a.post_write(wr_id=1, local=bytes(4 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    p = pk.parse(out[1][0])
    before = a.cc.cwnd_bytes
    nack = pk.NackPacket(1, p.psn, p.ev, p.timestamp_ns, pk.NackReason.TRIMMED)
    a.receive_datagram(pk.encode(nack), 0.0005)
    assert a.cc.cwnd_bytes == pytest.approx(before - p.length)
    assert a.evs.info[p.ev].state is EVState.SKIP
    again = [pk.parse(d) for d, _ in a.datagrams_to_send(0.0005)]
    assert [q.psn for q in again] == [p.psn] and again[0].ev != p.ev


def test_always_skip_ends_after_eight_skip_timeouts_without_a_clean_sack():
    evs = EVSet([0, 1, 2], qpn=1, rng=Pcg32(0), skip_timeout_fn=lambda: 0.010)
    evs.apply(0, EVCause.CONGESTION, 0.0, always=True)
    evs.expire_skips(ALWAYS_SKIP_TIMEOUTS * 0.010 - 1e-6)
    assert evs.info[0].state is EVState.SKIP
    evs.expire_skips(ALWAYS_SKIP_TIMEOUTS * 0.010)
    assert evs.info[0].state is EVState.GOOD


def test_ev_mode_auto_is_refused():
    p = ProfileTable().get(1)
    with pytest.raises(ProfileError, match="AUTO") as exc:
        p.modify(ev_mode=EVMode.AUTO)
    assert exc.value.errno == errno.EINVAL


def test_nscc_multiplicative_decrease_follows_gamma_above_the_floor():
    """ECN and d >= target: cwnd *= max(1 - gamma * (d - target) / d, 0.5), here 1 - 0.8 * 1/3."""
    c = cc.create("uet-1.0-nscc", mss_bytes=1000, rate_bps=8e9, base_rtt_s=0.001, ecn_capable=True)
    c.cwnd_bytes = 600_000
    c.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=0.0025, ecn=True)   # d 1.5 ms, target 1 ms
    assert c.cwnd_bytes == pytest.approx(600_000 * (1 - 0.8 * 0.5 / 1.5))
    assert c.md_count == 1


def test_nscc_multiplicative_decrease_on_ecn_the_whole_rule():
    """ECN with d >= target: cwnd *= max(1 - gamma * (d - target) / d, 0.5), at most once per base
    RTT (a second ECN echo within it changes nothing; one a base RTT later decreases again);
    ECN below target: no change (a NOOP); no ECN on an ECN-capable QP, however late: no decrease."""
    c = cc.create("uet-1.0-nscc", mss_bytes=1000, rate_bps=8e9, base_rtt_s=0.001, ecn_capable=True)
    c.cwnd_bytes = 600_000
    c.on_packets_acked(now=0.010, acked_bytes=1000, rtt_s=0.011, ecn=True)     # d 10 ms: 1 - 0.8*0.9 < 0.5
    assert c.cwnd_bytes == pytest.approx(300_000) and c.md_count == 1            # the 0.5 floor
    c.on_packets_acked(now=0.0109, acked_bytes=1000, rtt_s=0.011, ecn=True)    # within one base RTT
    assert c.cwnd_bytes == pytest.approx(300_000) and c.md_count == 1
    c.on_packets_acked(now=0.0111, acked_bytes=1000, rtt_s=0.0025, ecn=True)   # a base RTT later, d 1.5 ms
    assert c.cwnd_bytes == pytest.approx(300_000 * (1 - 0.8 * 0.5 / 1.5)) and c.md_count == 2
    before = c.cwnd_bytes
    c.on_packets_acked(now=0.020, acked_bytes=1000, rtt_s=0.0015, ecn=True)    # d 0.5 ms < target
    assert c.cwnd_bytes == before and c.noop_count == 1 and c.md_count == 2
    c.on_packets_acked(now=0.030, acked_bytes=1000, rtt_s=0.011)               # late, unmarked
    assert c.cwnd_bytes > before and c.md_count == 2                              # a fair increase


def test_profile_state_and_ev_op_values_are_the_headers():
    """``enum mrc_ctl_profile_state`` (INIT, OFFLINE, ONLINE) and ``enum mrc_ctl_ev_op``
    (REPLACE_EV, MODIFY_EV_STATE, QUERY_EV_STATE, QUERY_EV_ARRAY) have no explicit values in
    mrc_ctl.h: C numbers them from 0 in declaration order; ``enum mrc_ctl_ev_mode`` gives them."""
    from agents.mrc.profiles import EVOp, ProfileState
    assert [(s.name, s.value) for s in ProfileState] == [("INIT", 0), ("OFFLINE", 1), ("ONLINE", 2)]
    assert [(o.name, o.value) for o in EVOp] == [("REPLACE_EV", 0), ("MODIFY_EV_STATE", 1), ("QUERY_EV_STATE", 2),
                                                 ("QUERY_EV_ARRAY", 3)]
    assert [(m.name, m.value) for m in EVMode] == [("AUTO", 0), ("EXPLICIT", 1), ("GENERATED", 2)]
