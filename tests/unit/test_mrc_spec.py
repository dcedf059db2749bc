"""MRC as the spec defines it, on a fake clock: per-EV ECN echo, last-hop trims, SKIP duration,
ALWAYS_SKIP, the SACK's out-of-order count, the EV event mask."""
from __future__ import annotations

import dataclasses
import math
import random

import pytest

from agents.mrc import packet as pk
from agents.mrc.ev import EVCause, EVEvent, EVState
from agents.mrc.qp import QP, connect_pair
from agents.mrc.sim import MultipathNetwork, PathSpec
from agents.mrc.types import QPAttr, QPConfig, QPState

EVS = [0, 1, 2, 3]


def cfg(**kw):
    kw.setdefault("cc", "fixed")
    kw.setdefault("ack_delay_s", 0.00005)
    kw.setdefault("min_rto_s", 0.0)
    return QPConfig(**kw)


def pair(size=1 << 20, attr=QPAttr(timeout=12), **kw):
    a = QP(1, rng=random.Random(1), config=cfg(**kw))
    b = QP(2, rng=random.Random(2), memory=bytearray(size), config=cfg(**kw))
    connect_pair(a, b, EVS, attr=attr)
    return a, b


def drain(qp):
    out = []
    while (e := qp.next_event()) is not None:
        out.append(e)
    return out


def sacks(out):
    return [(pk.unpack_sack(d), ev) for d, ev in out if d[1] == pk.PacketType.SACK]


def set_srtt(a: QP, srtt_s: float) -> None:
    a._rtt.sample(srtt_s)


# ---- 1. ECN blamed on the right EV ----------------------------------------------------

def test_ce_mark_is_echoed_at_once_on_the_marked_packets_ev_only():
    """One packet per EV; only the first (EV e0) is CE-marked. The old responder set a
    QP-wide flag and echoed ECN on the next flush with the EV of the latest arrival."""
    a, b = pair(sack_every=8)
    a.post_write(wr_id=1, local=bytes(4 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    assert [ev for _, ev in out] and len(out) == 4
    marked_ev = out[0][1]
    marked_ts = pk.parse(out[0][0]).timestamp_ns
    b.receive_datagram(out[0][0], 0.001, ecn=True)
    first = sacks(b.datagrams_to_send(0.001))
    assert len(first) == 1                                    # an immediate SACK for the mark
    f, _ = first[0]
    assert f[1] & pk.FLAG_ECN_ECHO and f[6] == marked_ev and f[7] == marked_ts
    assert f[0] == pk.SackMode.SKIP_ONCE
    for data, _ in out[1:]:
        b.receive_datagram(data, 0.0011)
    b.handle_timer(1.0)
    out_b = b.datagrams_to_send(1.0)
    rest = sacks(out_b)
    assert rest and not any(f[1] & pk.FLAG_ECN_ECHO or f[0] != pk.SackMode.NONE for f, _ in rest)
    a_in = [pk.encode(pk.SackPacket(1, *f[3:10], pk.SackMode(f[0]), f[1])) for f, _ in first] + \
        [d for d, _ in out_b]
    for d in a_in:
        a.receive_datagram(d, 0.002)
    states = {ev: a.evs.info[ev].state for ev in EVS}
    assert states[marked_ev] is EVState.SKIP
    assert all(s is EVState.GOOD for ev, s in states.items() if ev != marked_ev)


def test_ce_sack_goes_to_the_requester_and_skips_only_that_ev():
    a, b = pair(sack_every=8)
    a.post_write(wr_id=1, local=bytes(4 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    marked_ev = out[2][1]
    for i, (data, _) in enumerate(out):
        b.receive_datagram(data, 0.001, ecn=(i == 2))
    for d, _ in b.datagrams_to_send(0.001):
        a.receive_datagram(d, 0.002)
    assert {ev for ev in EVS if a.evs.info[ev].state is EVState.SKIP} == {marked_ev}
    assert a.stats()["ev_skips"]["ecn"] == 1


# ---- 2. trims before the last hop vs at the last hop ---------------------------------

def trimmed(data: bytes, lasthop: bool) -> bytes:
    p = pk.parse(data)
    flags = p.flags | pk.FLAG_TRIMMED | (pk.FLAG_TRIMMED_LASTHOP if lasthop else 0)
    return pk.encode(dataclasses.replace(p, flags=flags, payload=b""))


@pytest.mark.parametrize("lasthop", [False, True])
def test_trim_nack_reason_and_skip_follow_the_last_hop_flag(lasthop):
    a, b = pair(sack_every=1, cc="uet-1.0-nscc")
    a.post_write(wr_id=1, local=bytes(4 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    hit_ev = out[1][1]
    cwnd = a.cc.cwnd_bytes
    b.receive_datagram(trimmed(out[1][0], lasthop), 0.001)
    (nack,) = [pk.parse(d) for d, _ in b.datagrams_to_send(0.001)]
    assert nack.reason is (pk.NackReason.TRIMMED_LASTHOP if lasthop else pk.NackReason.TRIMMED)
    a.receive_datagram(pk.encode(nack), 0.002)
    assert a.evs.info[hit_ev].state is (EVState.GOOD if lasthop else EVState.SKIP)
    assert a.cc.cwnd_bytes < cwnd                                 # both cut the window
    rtx = a.datagrams_to_send(0.002)
    assert [pk.parse(d).psn for d, _ in rtx] == [1]              # and both retransmit
    skips = a.stats()["ev_skips"]
    assert (skips["trim"], skips["trim_lasthop"]) == ((0, 1) if lasthop else (1, 0))


def test_lasthop_flag_needs_the_trimmed_flag():
    p = pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_MIDDLE, 0, 0, 9, pk.FLAG_TRIMMED_LASTHOP)
    raw = pk.DATA_HDR.pack(1, 1, p.opcode, p.flags, 1, 2, 3, 0, 0, 9)
    raw += pk.CRC.pack(pk.crc32(raw))
    with pytest.raises(pk.ProtocolError):
        pk.parse(raw)


# ---- 3. SKIP duration and ALWAYS_SKIP -------------------------------------------------

def ce_round_trip(a, b, now, ev_pick=0, n=4):
    """``a`` sends ``n`` packets at ``now``; packet ``ev_pick`` arrives CE-marked; SACKs
    return at once. Returns the marked packet's EV."""
    a.post_write(wr_id=now, local=bytes(n * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(now)
    marked = out[ev_pick][1]
    for i, (data, _) in enumerate(out):
        b.receive_datagram(data, now, ecn=(i == ev_pick))
    for d, _ in b.datagrams_to_send(now):
        a.receive_datagram(d, now)
    return marked


def test_skip_outlives_a_millisecond_when_the_rtt_is_longer():
    """The fabric's RTT is ~30 ms: a SKIP of 1 ms (the old fixed skip_timeout_s) would be
    over before the next window; the SKIP lasts one rotation, at most one SRTT."""
    a, b = pair(sack_every=1)
    set_srtt(a, 0.030)
    ev = ce_round_trip(a, b, 0.0)
    assert a.evs.info[ev].state is EVState.SKIP
    a.handle_timer(0.002)
    assert a.evs.info[ev].state is EVState.SKIP
    a.handle_timer(0.0305)                                      # bounded by one SRTT
    assert a.evs.info[ev].state is EVState.GOOD


def test_skip_ends_after_one_rotation_over_the_other_evs():
    a, b = pair(sack_every=1)
    set_srtt(a, 0.030)
    ev = ce_round_trip(a, b, 0.0)
    picks = [a.evs.pick(0.001) for _ in range(3)]               # the 3 other usable EVs
    assert ev not in picks and a.evs.info[ev].state is EVState.SKIP
    more = [a.evs.pick(0.001) for _ in range(4)]
    assert ev in more and a.evs.info[ev].state is EVState.GOOD


def _marked_runs(b, a, hot: int, marks: int, clean_between: bool) -> list:
    """``marks`` CE-marked packets on EV ``hot`` (and, with ``clean_between``, one unmarked packet
    on another EV after each); the SACK modes that echoed a mark."""
    modes = []
    other = None
    for k in range(marks):
        for marked in ((True, False) if clean_between else (True,)):
            a.post_write(wr_id=2 * k + marked, local=bytes(a.config.payload_bytes), remote_offset=0)
            ((data, ev),) = a.datagrams_to_send(0.001 * k)
            p = pk.parse(data)
            if not marked:
                other = other if other is not None else next(e for e in EVS if e != hot)
            data = pk.encode_data_parts(p.dest_qpn, p.psn, hot if marked else other, p.opcode, p.flags,
                                        p.remote_offset, p.timestamp_ns, p.imm, p.payload)
            b.receive_datagram(data, 0.001 * k, ecn=marked)
            for d, _ in b.datagrams_to_send(0.001 * k):
                mode, flags = pk.unpack_sack(d)[0], pk.parse(d).flags
                if flags & pk.FLAG_ECN_ECHO:
                    modes.append(mode)
                a.receive_datagram(d, 0.001 * k)
    return modes


def test_always_skip_after_a_run_of_ce_marks_holds_until_a_clean_sack():
    a, b = pair(sack_every=1, always_skip_ce_run=3)
    set_srtt(a, 0.030)
    hot = EVS[0]
    modes = _marked_runs(b, a, hot, 3, clean_between=True)
    assert modes == [pk.SackMode.SKIP_ONCE, pk.SackMode.SKIP_ONCE, pk.SackMode.ALWAYS_SKIP]
    assert a.evs.info[hot].state is EVState.SKIP
    for _ in range(12):
        a.evs.pick(0.01)                                         # several rotations
    a.handle_timer(0.1)                                          # several SRTTs
    assert a.evs.info[hot].state is EVState.SKIP
    a.receive_datagram(pk.encode(pk.SackPacket(1, 0, 0, 0, hot, 1, 0, 0)), 0.11)
    assert a.evs.info[hot].state is EVState.GOOD


def test_no_always_skip_when_every_path_is_marked():
    """Marks with no unmarked arrival on any other EV in between (the last hop, an incast: every
    path congested alike) stay SKIP_ONCE: holding one EV out would only unbalance the senders.
    Before this rule two incast-trim senders finished 17 s before the others."""
    a, b = pair(sack_every=1, always_skip_ce_run=3)
    set_srtt(a, 0.030)
    assert _marked_runs(b, a, EVS[0], 5, clean_between=False) == [pk.SackMode.SKIP_ONCE] * 5


# ---- 4. the SACK's out-of-order count ---------------------------------------------------

def test_ooo_count_is_the_current_number_above_the_cumulative_psn():
    a, b = pair(sack_every=1)
    a.post_write(wr_id=1, local=bytes(4 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    counts = []
    for data, _ in out[1:] + out[:1]:                           # PSN 0 arrives last
        b.receive_datagram(data, 0.001)
        counts += [f[8] for f, _ in sacks(b.datagrams_to_send(0.001))]
    assert counts == [1, 2, 3, 0]


# ---- 7. EV events masked, SKIPs counted -------------------------------------------------

def test_skip_is_not_reported_but_counted():
    a, b = pair(sack_every=1)
    ev = ce_round_trip(a, b, 0.0)
    assert a.evs.info[ev].state is EVState.SKIP
    assert [e for e in drain(a) if isinstance(e, EVEvent)] == []
    st = a.stats()
    assert st["ev_skips"]["ecn"] == 1 and st["evs"][ev]["skips"] == 1


def test_assumed_bad_is_reported_with_its_drop_count():
    a, b = pair(sack_every=1)
    a.evs.apply(2, EVCause.LOSS, 0.0, drop_count=3)
    (e,) = [e for e in drain(a) if isinstance(e, EVEvent)]
    assert (e.ev, e.new, e.drop_count) == (2, EVState.ASSUMED_BAD, 3)


def test_event_mask_selects_reported_states():
    a = QP(1, rng=random.Random(1), config=cfg(ev_event_mask=int(EVState.ASSUMED_BAD)))
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 16), config=cfg())
    connect_pair(a, b, EVS, attr=QPAttr(timeout=12))
    a.evs.apply(1, EVCause.LOSS, 0.0)
    a.evs.apply(1, EVCause.PROBES_OK, 0.1)
    events = [e for e in drain(a) if isinstance(e, EVEvent)]
    assert [(e.old, e.new) for e in events] == [(EVState.GOOD, EVState.ASSUMED_BAD)]
    with pytest.raises(ValueError, match="ev_event_mask"):
        cfg(ev_event_mask=int(EVState.DENIED)).validate()


# ---- 6. immediates need posted receives ------------------------------------------------

def test_write_with_imm_without_a_posted_receive_is_nacked_then_retried():
    a, b = pair(sack_every=1)
    a.post_write(wr_id=1, local=b"x" * 100, remote_offset=0, imm=42)
    ((data, _),) = a.datagrams_to_send(0.0)
    b.receive_datagram(data, 0.001)
    (nack,) = [pk.parse(d) for d, _ in b.datagrams_to_send(0.001)]
    assert isinstance(nack, pk.NackPacket) and nack.reason is pk.NackReason.NO_PKT_BUFFER
    assert drain(b) == [] and b.responder.rx_packets == 0 and b.stats()["rx_no_recv"] == 1
    a.receive_datagram(pk.encode(nack), 0.002)
    assert a.datagrams_to_send(0.002) == []                 # no resend at once: the timer's
    b.post_recv(77)
    t = a.get_timer()
    a.handle_timer(t)
    for d, _ in a.datagrams_to_send(t):
        b.receive_datagram(d, t)
    (wc,) = drain(b)
    assert (wc.imm, wc.wr_id) == (42, 77)
    assert all(i.state is EVState.GOOD for i in a.evs.info.values())


def test_max_wimm_dest_bounds_immediates_held_for_in_order_completion():
    a, b = pair(sack_every=1, attr=QPAttr(timeout=12, max_wimm_dest=1))
    for i in range(4):
        b.post_recv(i)
    size = a.config.payload_bytes
    a.post_write(wr_id=1, local=bytes(2 * size), remote_offset=0, imm=1)       # PSN 0, 1
    a.post_write(wr_id=2, local=bytes(size), remote_offset=2 * size, imm=2)    # PSN 2
    out = a.datagrams_to_send(0.0)
    b.receive_datagram(out[1][0], 0.001)      # message 1's last packet: held, PSN 0 missing
    b.receive_datagram(out[2][0], 0.001)      # message 2's: over max_wimm_dest
    reasons = [pk.parse(d).reason for d, _ in b.datagrams_to_send(0.001) if d[1] == pk.PacketType.NACK]
    assert reasons == [pk.NackReason.NO_PKT_BUFFER]
    b.receive_datagram(out[0][0], 0.002)
    assert [(w.imm, w.wr_id) for w in drain(b)] == [(1, 0)]
    b.receive_datagram(out[2][0], 0.003)      # the retransmission now fits
    assert [(w.imm, w.wr_id) for w in drain(b)] == [(2, 1)]


def test_posted_receives_are_flushed_when_the_qp_fails():
    a, b = pair()
    b.post_recv(5)
    b.modify_qp(QPState.ERR, 1.0)
    wcs = [e for e in drain(b) if not hasattr(e, "reason")]
    assert [(w.wr_id, w.status.name) for w in wcs] == [(5, "WR_FLUSH_ERR")]


# ---- 8. the responder's reverse EV set -------------------------------------------------

def test_sacks_rotate_over_reverse_evs_and_echo_the_forward_ev():
    a, b = pair(sack_every=1)
    a.post_write(wr_id=1, local=bytes(8 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    pairs_ = []
    for data, fwd in out:
        b.receive_datagram(data, 0.001)
        ((sack, back),) = b.datagrams_to_send(0.001)
        pairs_.append((fwd, pk.unpack_sack(sack)[6], back))
    assert all(f == echoed for f, echoed, _ in pairs_)          # the echo stays the forward EV
    assert {back for _, _, back in pairs_[4:]} == set(EVS)       # sent on the reverse rotation
    assert any(f != back for f, _, back in pairs_)


def test_a_retransmission_of_a_received_psn_marks_the_reverse_ev_bad():
    a, b = pair(sack_every=1)
    a.post_write(wr_id=1, local=bytes(8 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    for data, _ in out:
        b.receive_datagram(data, 0.001)
    lost_on = b.datagrams_to_send(0.001)[-1][1]                 # the latest SACK is lost

    def rtx(data):
        p = pk.parse(data)
        return pk.encode_data_parts(p.dest_qpn, p.psn, p.ev, p.opcode, p.flags | pk.FLAG_RTX,
                                    p.remote_offset, p.timestamp_ns + 1, p.imm, p.payload)
    b.receive_datagram(rtx(out[-1][0]), 0.1)
    assert b.stats()["reverse_ev_marked_bad"] == 1
    used = {ev for _, ev in b.datagrams_to_send(0.1)}
    for k in range(2):
        b.receive_datagram(rtx(out[k % 4][0]), 0.2 + k)           # duplicates: SACKed at once
        used |= {ev for _, ev in b.datagrams_to_send(0.2 + k)}
    assert lost_on not in used and len(used) == 3
    assert b.stats()["reverse_ev_marked_bad"] == 1              # one loss episode, one mark


def reverse_failure_run(dead, seed=1, n=300):
    a = QP(1, rng=random.Random(seed), config=QPConfig(min_rto_s=0.0))
    b = QP(2, rng=random.Random(seed + 1), memory=bytearray(1 << 20), config=QPConfig(min_rto_s=0.0))
    connect_pair(a, b, EVS, attr=QPAttr(timeout=12))
    fwd = [PathSpec(1e9, 0.001)] * 4
    rev = [PathSpec(1e9, 0.001, down=((0.0, math.inf),)) if i in dead else fwd[i] for i in range(4)]
    net = MultipathNetwork(a, b, fwd, seed=seed, reverse_paths=rev)
    for i in range(n):                      # a stream of small writes: SACK tails matter
        net.run(until=i * 0.0005)
        a.post_write(wr_id=i, local=bytes(2000), remote_offset=0)
    net.run(stop=lambda: a.idle, until=60.0)
    bad = [e for e in drain(a) if isinstance(e, EVEvent) and e.new is EVState.ASSUMED_BAD]
    return net.now, a, b, bad


def test_reverse_only_failure_is_not_a_forward_failure():
    """Only the b -> a direction of 3 of 4 paths fails. The old responder answered each
    packet on its arrival EV: 36 timeouts on this run. Rotating SACKs over the reverse set
    and dropping reverse EVs that lose ACKs keeps it to a few, retires no EV, and the
    transfer takes at most 25% longer than on a healthy network. At the stream's tail a
    lost SACK can still cost a forward EV: over seeds 1-10 one retirement (seed 1 since
    retransmissions prefer EVs that delivered since, seed 6 before; 20 seeds: 2 either
    way)."""
    retired = marked = 0
    for seed in range(1, 11):
        t_ok, *_ = reverse_failure_run((), seed=seed)
        t, a, b, bad = reverse_failure_run((1, 2, 3), seed=seed)
        assert a.idle and a.stats()["timeouts"] <= 5
        assert t <= 1.25 * t_ok
        retired += len(bad)
        marked += b.stats()["reverse_ev_marked_bad"]
    assert retired <= 1 and marked >= 1
