"""QP behaviour driven by hand: states, MPR window, SACK coalescing, probes, duplicates."""
import random
import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from agents.mrc import packet as pk
from agents.mrc.ev import EVCause, EVState
from agents.mrc.qp import QP, connect_pair
from agents.mrc.types import QPAttr, QPConfig, QPState, QPStateError, Transport


def cfg(**kw):
    # These tests drive the window mechanics by hand: an unbounded window, not NSCC's.
    kw.setdefault("cc", "fixed")
    kw.setdefault("ack_delay_s", 0.00005)   # <= 1/4 of timeout 8's 262 us floor
    return QPConfig(min_rto_s=0.0, **kw)


def pair(size=1 << 20, attr=QPAttr(mpr=1, mpr_dest=1), **kw):
    a = QP(1, rng=random.Random(1), config=cfg(**kw))
    b = QP(2, rng=random.Random(2), memory=bytearray(size), config=cfg(**kw))
    connect_pair(a, b, [0, 1, 2, 3], attr=attr)
    return a, b


def deliver(src, dst, now, keep=lambda data, ev: True):
    out = src.datagrams_to_send(now)
    for data, ev in out:
        if keep(data, ev):
            dst.receive_datagram(data, now)
    return out


def deliver_all_but_the_first_ev(a, b, now=0.0):
    """Send what ``a`` has at ``now``; ``b`` gets every packet except those on the first
    packet's EV (a dead path) at now + 0.5 ms, and its SACKs reach ``a`` at now + 1 ms.
    Returns the dead EV."""
    out = a.datagrams_to_send(now)
    dead = out[0][1]
    for data, ev in out:
        if ev != dead:
            b.receive_datagram(data, now + 0.0005)
    for data, _ in b.datagrams_to_send(now + 0.0005):
        a.receive_datagram(data, now + 0.001)
    return dead


def test_state_machine_follows_mrc_h():
    qp = QP(7, rng=random.Random(0))
    assert qp.state is QPState.RST
    with pytest.raises(QPStateError, match="RST -> RTR"):
        qp.modify_qp(QPState.RTR, dest_qpn=1)
    with pytest.raises(QPStateError):
        qp.post_write(wr_id=1, local=b"x", remote_offset=0)
    with pytest.raises(ValueError, match="needs"):
        qp.modify_qp(QPState.INIT)
    with pytest.raises(ValueError, match="does not take"):
        qp.modify_qp(QPState.INIT, evs=[1], timeout=3)
    qp.modify_qp(QPState.INIT, evs=[1, 2])
    qp.modify_qp(QPState.RTR, dest_qpn=9, mpr_dest=4)
    with pytest.raises(ValueError, match="timeout"):
        qp.modify_qp(QPState.RTS, timeout=25)
    with pytest.raises(ValueError, match="retry_exp_cnt"):
        qp.modify_qp(QPState.RTS, retry_exp_cnt=26)
    qp.modify_qp(QPState.RTS, timeout=8, retry_linear_cnt=7, retry_exp_cnt=25)
    assert qp.state is QPState.RTS
    qp.modify_qp(QPState.ERR)
    assert qp.state is QPState.ERR
    qp.modify_qp(QPState.RST)
    assert qp.state is QPState.RST and qp.evs is None


def test_sq_psn_and_rq_psn_start_the_psns_at_the_end_of_the_psn_space():
    """ibv_qp_attr's rq_psn (RTR) and sq_psn (RTS): a write runs over the last PSNs of the
    32-bit space (they never wrap: the next write finds it exhausted)."""
    qp = QP(7, rng=random.Random(0))
    qp.modify_qp(QPState.INIT, evs=[1])
    for bad in (-1, pk.MAX_PSN + 1, 1.0, True):
        with pytest.raises(ValueError, match="rq_psn"):
            qp.modify_qp(QPState.RTR, dest_qpn=9, rq_psn=bad)
    assert qp.state is QPState.INIT
    qp.modify_qp(QPState.RTR, dest_qpn=9, rq_psn=5)
    with pytest.raises(ValueError, match="does not take"):
        qp.modify_qp(QPState.RTS, rq_psn=5)
    qp.modify_qp(QPState.RTS, sq_psn=6)
    with pytest.raises(ValueError, match="does not take"):
        qp.modify_qp(QPState.RTS, sq_psn=7)      # RTS -> RTS: not once running
    assert qp.stats()["next_psn"] == qp.stats()["snd_una"] == 6
    assert qp.stats()["rx_cum_psn"] == 5

    first = pk.MAX_PSN - 300
    a = QP(1, rng=random.Random(1), config=cfg(payload_bytes=256))
    b = QP(2, rng=random.Random(2), memory=bytearray(300 * 256), config=cfg(payload_bytes=256))
    connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(mpr=4, mpr_dest=4), first_psns=(first, 0))
    data = random.Random(3).randbytes(300 * 256)       # 300 packets: PSNs first..MAX_PSN - 1
    a.post_write(wr_id=1, local=data, remote_offset=0, imm=7)
    b.post_recv(11)
    now, psns, done = 0.0, [], []
    for _ in range(50):
        for d, _ in a.datagrams_to_send(now):
            psns.append(pk.parse(d).psn)
            b.receive_datagram(d, now)
        now += 0.001
        b.handle_timer(now)
        for d, _ in b.datagrams_to_send(now):
            a.receive_datagram(d, now)
        for qp in (a, b):
            while (e := qp.next_event()) is not None:
                done.append(e)
        if len(done) == 2:
            break
    assert sorted(psns) == list(range(first, pk.MAX_PSN))
    assert bytes(b.responder.memory) == data
    assert {(e.opcode.name, e.status.name, e.wr_id) for e in done} == \
        {("RDMA_WRITE", "SUCCESS", 1), ("RECV_RDMA_WITH_IMM", "SUCCESS", 11)}
    assert [e.psn for e in done if e.wr_id == 11] == [pk.MAX_PSN - 1]
    assert a.stats()["snd_una"] == b.stats()["rx_cum_psn"] == pk.MAX_PSN
    buf = bytearray(b"x")
    with pytest.raises(ValueError, match="PSN space exhausted"):
        a.post_write(wr_id=2, local=buf, remote_offset=0)
    buf.append(1)                              # a refused write holds no buffer


def test_rto_maps_mrc_timeout_with_scale_and_floor():
    qp = QP(1, rng=random.Random(0), config=QPConfig(time_scale=10.0, min_rto_s=0.001,
                                                     ack_delay_s=0.00025))
    qp.modify_qp(QPState.INIT, evs=[0])
    qp.modify_qp(QPState.RTR, dest_qpn=2)
    qp.modify_qp(QPState.RTS, timeout=8)
    assert qp.rto_s == pytest.approx(10 * 1.024e-6 * 256)
    qp.modify_qp(QPState.RTS, timeout=0)
    assert qp.rto_s == 0.001


def test_requester_never_sends_past_the_mpr_window():
    a, b = pair()                                   # mpr 1 = 128 PSNs
    a.post_write(wr_id=1, local=bytes(300 * 1000), remote_offset=0)
    sent = [pk.parse(d) for d, _ in a.datagrams_to_send(0.0)]
    sent += [pk.parse(d) for d, _ in a.datagrams_to_send(0.0)]
    assert max(p.psn for p in sent) == 127 and len(sent) == 128
    # a SACK with cumulative PSN 64 opens exactly 64 more PSNs.
    sack = pk.SackPacket(1, 64, 64, 0, sent[-1].ev, sent[-1].timestamp_ns)
    a.receive_datagram(pk.encode(sack), 0.001)
    more = [pk.parse(d) for d, _ in a.datagrams_to_send(0.001)]
    assert [p.psn for p in more] == list(range(128, 192))


def test_responder_nacks_beyond_its_bitmap_edge():
    a, b = pair()
    pkt = pk.DataPacket(2, 128, 3, pk.Opcode.WRITE_ONLY, 0, 4, 5, 0, None, b"abcd")
    b.receive_datagram(pk.encode(pkt), 0.0)
    (nack_bytes, ev), = b.datagrams_to_send(0.0)
    nack = pk.parse(nack_bytes)
    assert nack.reason is pk.NackReason.PSN_OOR_WINDOW and nack.psn == 128 and ev == 3
    assert bytes(b.responder.memory[:4]) == bytes(4)


def test_sack_coalescing_every_n_and_at_once_on_ack_request():
    a, b = pair(sack_every=4)
    a.post_write(wr_id=1, local=bytes(10 * a.config.payload_bytes), remote_offset=0)
    for data, _ in a.datagrams_to_send(0.0):
        b.receive_datagram(data, 0.0)
    sacks = [pk.parse(d) for d, _ in b.datagrams_to_send(0.0)]
    # 10 packets: SACKs after 4 and 8, and one at once for the last (ACK_REQ) packet.
    assert [s.cum_psn for s in sacks] == [4, 8, 10]
    assert b.get_timer() is None


def test_delayed_sack_timer_flushes_a_partial_batch():
    a, b = pair(sack_every=8, ack_delay_s=0.002, attr=QPAttr(mpr=1, mpr_dest=1, timeout=13))
    a.post_write(wr_id=1, local=bytes(5 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    for data, _ in out[:3]:                          # the ACK_REQ packet is held back
        b.receive_datagram(data, 0.0)
    assert b.datagrams_to_send(0.0) == [] and b.get_timer() == pytest.approx(0.002)
    b.handle_timer(0.002)
    (sack,) = [pk.parse(d) for d, _ in b.datagrams_to_send(0.002)]
    assert sack.cum_psn == 3


def test_adaptive_sack_hold_coalesces_only_packets_that_come_fast():
    """ack_coalesce_s: a packet that comes within it of the previous one starts the long hold,
    so the next full-rate packet shares its SACK; a packet after a longer gap (a slow flow)
    is acknowledged after ack_delay_s, as without coalescing."""
    t, frame = QPAttr(mpr=1, mpr_dest=1, timeout=13), 0.001    # 8.4 ms floor: a 2.1 ms bound
    a, b = pair(sack_every=8, ack_delay_s=0.0002, ack_coalesce_s=1.5 * frame, attr=t)
    a.post_write(wr_id=1, local=bytes(9 * a.config.payload_bytes), remote_offset=0)
    out = [d for d, _ in a.datagrams_to_send(0.0)][:8]           # the 9th (ACK_REQ) held back
    sacks, now = [], 0.0
    for i, data in enumerate(out[:6]):                          # full rate: one per frame time
        now = i * frame
        while (due := b.get_timer()) is not None and due <= now:
            b.handle_timer(due)
            sacks += [(due, pk.parse(d).cum_psn) for d, _ in b.datagrams_to_send(due)]
        b.receive_datagram(data, now)
    # packet 0 has no predecessor: short hold, SACK at 0.2 ms; then 1 starts a 1.5 ms hold
    # that packet 2 shares (SACK at 2.5 ms), 3 and 4 likewise, 5 is left pending
    assert sacks == [(pytest.approx(0.0002), 1), (pytest.approx(0.0025), 3), (pytest.approx(0.0045), 5)]
    assert b.get_timer() == pytest.approx(5 * frame + 1.5 * frame)
    b.handle_timer(b.get_timer())
    b.datagrams_to_send(0.0)
    slow = 5 * frame + 10 * frame                              # a slow flow: 10 frame times later
    b.receive_datagram(out[6], slow)
    assert b.get_timer() == pytest.approx(slow + 0.0002)        # ack_delay_s, not the long hold
    b.handle_timer(b.get_timer())
    (sack,) = [pk.parse(d) for d, _ in b.datagrams_to_send(b.get_timer() or slow)]
    assert sack.cum_psn == 7


def test_out_of_order_placement_and_duplicates_ignored():
    a, b = pair()
    src = random.Random(3).randbytes(6 * a.config.payload_bytes)
    a.post_write(wr_id=1, local=src, remote_offset=0)
    out = a.datagrams_to_send(0.0)
    for data, _ in reversed(out):
        b.receive_datagram(data, 0.0)
    b.receive_datagram(out[2][0], 0.0)
    assert b.responder.memory[:len(src)].tobytes() == src
    assert b.responder.rx_duplicates == 1 and b.responder.rx_cum_psn == 6 and b.responder.rx_ooo == 5


def test_sack_bitmap_acknowledges_out_of_order_psns():
    a, b = pair(sack_every=1)
    a.post_write(wr_id=1, local=bytes(4 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    b.receive_datagram(out[2][0], 0.0)                # only PSN 2 arrives
    for data, _ in b.datagrams_to_send(0.0):
        a.receive_datagram(data, 0.001)
    assert 2 not in a.requester._outstanding and {0, 1, 3} <= set(a.requester._outstanding)


def test_a_loss_on_a_delivering_ev_is_retransmitted_elsewhere_without_penalty():
    a, b = pair(sack_every=1, reorder_threshold=1)
    a.post_write(wr_id=1, local=bytes(16 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    first = pk.parse(out[0][0])
    lost_ev = out[0][1]
    for data, ev in out[1:]:
        b.receive_datagram(data, 0.0)
    for data, _ in b.datagrams_to_send(0.0):
        a.receive_datagram(data, 0.001)
    # later packets on lost_ev arrived: a congestion drop, not a failure
    assert a.evs.info[lost_ev].state is EVState.GOOD
    assert a.requester.loss.ev_losses_excused == 1 and a.stats()["evs"][lost_ev]["losses_excused"] == 1
    rtx = [pk.parse(d) for d, ev in a.datagrams_to_send(0.001) if d[1] == pk.PacketType.DATA]
    assert [p.psn for p in rtx] == [first.psn]
    assert rtx[0].ev != lost_ev and rtx[0].flags & pk.FLAG_RTX


def test_an_ev_that_delivers_nothing_is_retired_by_later_acks_on_other_evs():
    a, b = pair(sack_every=1)
    size = 8 * a.config.payload_bytes
    a.post_write(wr_id=1, local=bytes(size), remote_offset=0)
    dead = deliver_all_but_the_first_ev(a, b)            # RTT 1 ms
    assert a.evs.info[dead].state is EVState.GOOD       # nothing sent later than the guard
    a.post_write(wr_id=2, local=bytes(size), remote_offset=size)
    for data, ev in a.datagrams_to_send(0.002):
        if ev != dead:
            b.receive_datagram(data, 0.0025)
    for data, _ in b.datagrams_to_send(0.0025):
        a.receive_datagram(data, 0.003)
    # PSNs sent >= 5 transmissions and > guard (RTT / 4) later were acked on the other EVs:
    # both first-batch packets on the dead EV are lost, a run of 2 -> ASSUMED_BAD
    assert a.requester.loss.ooo_losses == 2 and a.requester.loss.timeouts == 0
    assert a.evs.info[dead].state is EVState.ASSUMED_BAD
    rtx = [pk.parse(d) for d, ev in a.datagrams_to_send(0.003) if d[1] == pk.PacketType.DATA]
    assert len(rtx) == 2 and all(p.ev != dead and p.flags & pk.FLAG_RTX for p in rtx)


def test_timeouts_with_nothing_later_delivered_do_not_retire_evs():
    """Every packet of the QP queued past the RTO (a start-up queue): timeouts, no EV charged."""
    a, b = pair(sack_every=1)
    a.post_write(wr_id=1, local=bytes(8 * a.config.payload_bytes), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    assert len({ev for _, ev in out}) == 4
    t = a.get_timer()
    a.handle_timer(t)                                   # nothing acknowledged: all time out
    a.handle_timer(a.get_timer())
    assert a.requester.loss.timeouts >= 8 and a.requester.loss.ev_losses_stalled == a.requester.loss.timeouts
    assert all(i.state is EVState.GOOD for i in a.evs.info.values())
    assert a.stats()["ev_losses_stalled"] == a.requester.loss.ev_losses_stalled


def test_timeouts_on_an_ev_whose_later_packets_elsewhere_arrived_retire_it():
    a, b = pair(sack_every=1, reorder_threshold=100, ooo_threshold=1000)  # the timer must find it
    a.post_write(wr_id=1, local=bytes(8 * a.config.payload_bytes), remote_offset=0)
    dead = deliver_all_but_the_first_ev(a, b)
    a.handle_timer(a.get_timer())
    assert a.requester.loss.timeouts == 2 and a.requester.loss.ev_losses_stalled == 0
    assert a.evs.info[dead].state is EVState.ASSUMED_BAD


def test_probes_restore_an_assumed_bad_ev():
    a, b = pair(probe_interval_s=0.01, probe_timeout_s=0.005, probe_successes=2)
    a.evs.apply(2, EVCause.LOSS, 0.0)
    assert a.evs.info[2].state is EVState.ASSUMED_BAD
    now = 0.0
    for _ in range(2):
        probes = [(d, ev) for d, ev in a.datagrams_to_send(now)]
        assert [ev for _, ev in probes] == [2]
        req = pk.parse(probes[0][0])
        assert isinstance(req, pk.ProbePacket) and not req.response
        b.receive_datagram(probes[0][0], now + 0.001)
        for data, ev in b.datagrams_to_send(now + 0.001):
            assert ev == 2
            a.receive_datagram(data, now + 0.002)
        now = a.get_timer()
        a.handle_timer(now)
    assert a.evs.info[2].state is EVState.GOOD
    assert a.stats()["evs"][2]["probes_ok"] == 2


def test_probe_timeout_resets_the_success_run():
    a, b = pair(probe_interval_s=0.01, probe_timeout_s=0.005, probe_successes=1)
    a.evs.apply(1, EVCause.LOSS, 0.0)
    assert len(a.datagrams_to_send(0.0)) == 1       # probe lost: never delivered
    a.handle_timer(0.005)
    assert a.evs.info[1].probe_outstanding is None and a.evs.info[1].state is EVState.ASSUMED_BAD


def test_bad_datagrams_are_counted_not_raised():
    a, b = pair()
    for junk in (b"", b"\x01", b"\x01\x01" + bytes(60), b"\xff" * 100):
        b.receive_datagram(junk, 0.0)
    assert b.bad_packets == 4


def test_controller_deny_stops_spraying_on_that_ev():
    a, b = pair()
    a.set_ev_state(3, EVState.DENIED, 0.0)
    a.post_write(wr_id=1, local=bytes(40 * a.config.payload_bytes), remote_offset=0)
    assert 3 not in {ev for _, ev in a.datagrams_to_send(0.0)}


@settings(max_examples=2000, deadline=None)
@given(st.integers(4, 13), st.sampled_from([0, 1, 2, 3, 4, 8, 0x80]), st.integers(0, 3),
       st.binary(max_size=80), st.integers(0, 6))
def test_responder_fast_path_accepts_exactly_what_the_parser_accepts(opcode, flags, psn, body,
                                                                     cut):
    """Data packets with a valid CRC: placed iff pk.parse accepts them, else counted as bad."""
    hdr = pk.DATA_HDR.pack(pk.VERSION, 1, opcode, flags, 2, psn, 0, 0, max(len(body) - cut, 0), 1)
    raw = hdr + body
    raw += struct.pack("!I", zlib.crc32(raw))
    _, b = pair(size=4096)
    b.post_recv(1)
    try:
        pkt = pk.parse(raw)
    except pk.ProtocolError:
        pkt = None
    b.receive_datagram(raw, 0.0)
    if pkt is None:
        assert b.bad_packets == 1 and b.responder.rx_packets == 0
    elif not pkt.flags & pk.FLAG_TRIMMED and pkt.length <= 4096:
        assert b.bad_packets == 0 and b.responder.rx_packets == 1
        assert b.responder.memory.tobytes()[:pkt.length] == pkt.payload


def _responder_view(qp, now):
    pending = (qp.responder._ack_deadline, qp.responder._sack_pending, dict(qp.responder._dirty))
    qp.responder._flush_sacks()   # the SACKs still pending must match too: flush both the same way
    events = []
    while (e := qp.next_event()) is not None:
        events.append(e)
    return (qp.responder.memory.tobytes(), qp.responder._rcv_cum, dict(qp.responder._chunks), qp.responder.rx_packets, qp.responder.rx_bytes,
            qp.responder.rx_duplicates, qp.responder.rx_ooo, qp.bad_packets, qp.state, pending,
            dict(qp.responder.reverse_evs), qp.responder.reverse.state(), qp.datagrams_to_send(now), events)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40_000), st.booleans(), st.integers(0, 2**32 - 1),
       st.lists(st.sampled_from(["keep", "keep", "keep", "swap", "dup", "drop", "corrupt", "rtx", "ce"]),
                min_size=1, max_size=60),
       st.lists(st.integers(1, 12), min_size=1, max_size=20), st.sampled_from(list(Transport)),
       st.lists(st.sampled_from([0.0, 0.00003, 0.00006, 0.0001, 0.001]), min_size=1, max_size=20),
       st.sampled_from([0.0, 0.00006]))
def test_batch_receive_matches_one_by_one(size, imm, seed, ops, cuts, transport, gaps, coalesce):
    """receive_datagrams (the I/O adapter's batch path) leaves the responder exactly as
    receive_datagram on each datagram would: memory, PSN state, counters, SACKs (and the
    adaptive hold: batches ``gaps`` apart, with and without ``ack_coalesce_s``), completions;
    CE-marked datagrams ("ce": ``ecn=True`` one by one, ``ce`` flags in the batch)."""
    rnd = random.Random(seed)
    kw = dict(size=1 << 16, payload_bytes=1024, sack_every=4, transport=transport, ack_coalesce_s=coalesce,
              always_skip_ce_run=2)
    a, _ = pair(**kw)
    a.post_write(wr_id=1, local=rnd.randbytes(size), remote_offset=7,
                 imm=rnd.getrandbits(32) if imm else None)
    sent = [d for d, _ in a.datagrams_to_send(0.0)]
    wire, marks = [], []
    for i, op in enumerate(ops):
        if i >= len(sent):
            break
        d = sent[i]
        if op == "swap" and i + 1 < len(sent):
            sent[i], sent[i + 1] = sent[i + 1], d
            d = sent[i]
        if op == "drop":
            continue
        if op == "corrupt":
            d = d[:-5] + bytes([d[-5] ^ 0xFF]) + d[-4:]
        if op == "rtx":      # a retransmission of it: same PSN, FLAG_RTX
            f = pk.parse(d)
            d = pk.encode_data_parts(f.dest_qpn, f.psn, f.ev, f.opcode, pk.FLAG_RTX, f.remote_offset,
                                     f.timestamp_ns, f.imm, f.payload)
        wire.append(d)
        marks.append(op == "ce")
        if op == "dup":
            wire.append(d)
            marks.append(False)
    wire += sent[len(ops):]
    marks += [False] * (len(wire) - len(marks))
    _, one = pair(**kw)
    _, batch = pair(**kw)
    for _ in range(rnd.randint(0, 1)):      # with no posted receive the immediate is NACKed
        one.post_recv(9)
        batch.post_recv(9)
    i, now = 0, 1.0
    for k, c in enumerate(cuts * (len(wire) // len(cuts) + 1)):
        if i >= len(wire):
            break
        now += gaps[k % len(gaps)]
        for d, ce in zip(wire[i:i + c], marks[i:i + c]):
            one.receive_datagram(d, now, ecn=ce)
        batch.receive_datagrams(wire[i:i + c], now, ce=marks[i:i + c])
        i += c
        light = [(q.responder._rcv_cum, q.responder._sack_pending, q.responder._ack_deadline, q.responder._last_data_at, dict(q.responder._dirty),
                  list(q.responder._ctrl_out), q.responder.rx_packets, q.responder.rx_bytes, q.responder._seq_err_sent,
                  dict(q.responder._ce_run), q.responder._above) for q in (batch, one)]
        assert light[0] == light[1]
    assert _responder_view(batch, now) == _responder_view(one, now)


def _trimmed(data: bytes) -> bytes:
    """What a trimming switch forwards for a DATA packet: its header, flagged, no payload."""
    import dataclasses
    p = pk.parse(data)
    return pk.encode(dataclasses.replace(p, flags=p.flags | pk.FLAG_TRIMMED, payload=b""))


def test_a_trim_nack_returning_after_the_loss_was_inferred_restores_the_ev():
    """The switch trimmed every packet on one EV; the losses were inferred from later ACKs
    on the other EVs (run of 2: ASSUMED_BAD) before the trimmed headers' NACKs came back.
    The NACKs show the path delivers: the EV comes back (cause DELIVERED) at once, and the
    next loss on it sent before a delivered header is excused."""
    a, b = pair(sack_every=1)
    size = 8 * a.config.payload_bytes
    a.post_write(wr_id=1, local=bytes(size), remote_offset=0)
    first = a.datagrams_to_send(0.0)
    hot = first[0][1]
    held = [data for data, ev in first if ev == hot]          # trimmed, their NACKs held back
    for data, ev in first:
        if ev != hot:
            b.receive_datagram(data, 0.0005)
    for data, _ in b.datagrams_to_send(0.0005):
        a.receive_datagram(data, 0.001)
    a.post_write(wr_id=2, local=bytes(size), remote_offset=size)
    second = a.datagrams_to_send(0.002)
    held += [data for data, ev in second if ev == hot]
    for data, ev in second:
        if ev != hot:
            b.receive_datagram(data, 0.0025)
    for data, _ in b.datagrams_to_send(0.0025):
        a.receive_datagram(data, 0.003)
    assert a.evs.info[hot].state is EVState.ASSUMED_BAD      # inferred lost, as a dead EV would be
    for data in held:                                        # the trimmed headers arrive late
        b.receive_datagram(_trimmed(data), 0.0035)
    nacks = [d for d, _ in b.datagrams_to_send(0.0035) if d[1] == pk.PacketType.NACK]
    assert nacks
    for data in nacks:
        a.receive_datagram(data, 0.004)
    info = a.evs.info[hot]
    assert info.state in (EVState.GOOD, EVState.SKIP)       # back at once, not after probes
    events = []
    while (e := a.next_event()) is not None:
        events.append(e)
    assert [(e.old, e.new, e.cause) for e in events if e.ev == hot and e.new is EVState.GOOD][:1] == \
        [(EVState.ASSUMED_BAD, EVState.GOOD, EVCause.DELIVERED)]


def test_a_trim_nack_does_not_restore_an_ev_retired_for_losses_sent_after_it():
    """A header trimmed before the path died proves nothing about packets sent after it."""
    a, b = pair(sack_every=1)
    info = a.evs.info[0]
    a.evs.apply(0, EVCause.LOSS, 0.0)
    info.loss_run_ts_ns = 2_000_000                      # the charged losses were sent at 2 ms
    a.requester.loss.delivered(0, 1_000_000, 0.003)               # a header sent at 1 ms came back
    assert info.state is EVState.ASSUMED_BAD
    a.requester.loss.delivered(0, 2_500_000, 0.004)               # one sent after them: the path delivers
    assert info.state is EVState.GOOD


def test_reordering_guard_counts_from_the_configured_base_rtt_not_a_burst_sample():
    """EV SRTTs 45-55 ms, a lowest sample of 2 ms (an idle path's packets through HTB's
    bucket), NSCC's base RTT configured at 40 ms: the guard is the spread above the base
    plus base / 4, not the whole queueing above the 2 ms sample."""
    a, _ = pair(cc="uet-1.0-nscc", cc_params={"rate_bps": 5e6, "base_rtt_s": 0.040})
    a.requester.loss.rtt_min_s = 0.002
    for ev, srtt in zip(sorted(a.evs.info), (0.045, 0.050, 0.055, 0.048)):
        a.evs.info[ev].rtt_srtt_s = srtt
    assert a.requester.loss.ooo_guard_s() == pytest.approx(0.055 - 0.040 + 0.25 * 0.040)
    learnt, _ = pair(cc="uet-1.0-nscc")          # no configured base: the lowest sample, as before
    learnt.requester.loss.rtt_min_s = 0.002
    learnt.evs.info[0].rtt_srtt_s = 0.055
    assert learnt.requester.loss.ooo_guard_s() == pytest.approx(0.055 - 0.002 + 0.25 * 0.002)


@pytest.mark.parametrize("reason", [pk.NackReason.TRIMMED, pk.NackReason.TRIMMED_LASTHOP,
                                    pk.NackReason.NO_PKT_BUFFER])
def test_a_nack_stamped_beyond_anything_sent_proves_no_delivery(reason):
    """NACK timestamps are validated as SACK timestamps are (0 < ts <= the latest stamp sent):
    one CRC-valid NACK echoing a stamp from the future neither revives a retired EV nor
    marks the EV delivered (which would excuse every later loss on it)."""
    a, b = pair(sack_every=1)
    size = 8 * a.config.payload_bytes
    a.post_write(wr_id=1, local=bytes(size), remote_offset=0)
    dead = deliver_all_but_the_first_ev(a, b)
    a.post_write(wr_id=2, local=bytes(size), remote_offset=size)
    for data, ev in a.datagrams_to_send(0.002):
        if ev != dead:
            b.receive_datagram(data, 0.0025)
    for data, _ in b.datagrams_to_send(0.0025):
        a.receive_datagram(data, 0.003)
    info = a.evs.info[dead]
    assert info.state is EVState.ASSUMED_BAD
    good = next(e for e in a.evs.info if e != dead)
    before = {e: a.evs.info[e].delivered_ts_ns for e in a.evs.info}
    for ev in (dead, good):
        forged = pk.encode(pk.NackPacket(dest_qpn=1, psn=0, ev=ev, timestamp_ns=2**63,
                                         reason=reason))
        a.receive_datagram(forged, 0.0031)
    assert a.evs.info[dead].state is EVState.ASSUMED_BAD
    assert {e: a.evs.info[e].delivered_ts_ns for e in a.evs.info} == before
    assert before[good] > 0          # the GOOD EV had delivered: its real stamp stands


def test_an_init_refused_for_its_reverse_evs_leaves_the_qp_in_rst_and_retryable():
    """reverse_evs is validated before the EV set is built: the refused INIT leaves the QP in
    RST without a timer, a second INIT with valid reverse EVs works, and the QP comes up."""
    a = QP(1, rng=random.Random(1), config=cfg())
    with pytest.raises(ValueError, match="reverse_evs"):
        a.modify_qp(QPState.INIT, evs=[0, 1], reverse_evs=[7])
    assert a.state is QPState.RST and a.get_timer() is None
    a.modify_qp(QPState.INIT, evs=[0, 1], reverse_evs=[1])
    a.modify_qp(QPState.RTR, dest_qpn=2)
    a.modify_qp(QPState.RTS, timeout=8)
    assert a.state is QPState.RTS and a.get_timer() is None
    a.post_write(wr_id=1, local=bytes(100), remote_offset=0)
    assert a.datagrams_to_send(0.0) and a.get_timer() is not None
