"""DCQCN in the QP, on a fake clock: the notification point's CNPs (rate-limited per QP), the
reaction point fed by them, pacing honoured by the requester, and two QPs sharing a marking
bottleneck (:mod:`agents.mrc.dumbbell`)."""
from __future__ import annotations

import random

import pytest

from agents.mrc import QP, QPAttr, QPConfig, Transport, WCStatus, WorkCompletion, connect_pair
from agents.mrc import packet as pk
from agents.mrc.dcqcn import scaled_cnp_interval_s
from agents.mrc.dumbbell import Dumbbell
from agents.mrc.sim import MultipathNetwork, PathSpec


def dcqcn_config(rate_bps=8e6, *, cnp_interval_s=0.01, **cc_params) -> QPConfig:
    return QPConfig(transport=Transport.RC, payload_bytes=1000, sack_every=1, cc="dcqcn",
                    cc_params={"rate_bps": rate_bps, "burst_bytes": 0, **cc_params},
                    cnp_interval_s=cnp_interval_s)


def pair(cfg: QPConfig, qpns=(1, 2), size=1 << 20) -> tuple[QP, QP]:
    a = QP(qpns[0], rng=random.Random(qpns[0]), config=cfg)
    b = QP(qpns[1], rng=random.Random(qpns[1]), memory=bytearray(size), config=cfg)
    connect_pair(a, b, [0], attr=QPAttr(timeout=12))
    return a, b


def cnps(out) -> list[pk.CnpPacket]:
    return [p for p in (pk.parse(d) for d, _ in out if d[1] == pk.PacketType.CNP)]


def test_two_ce_packets_within_one_interval_give_one_cnp():
    a, b = pair(dcqcn_config(cnp_interval_s=0.01, rate_bps=1e9, burst_bytes=3000))
    a.post_write(wr_id=1, local=bytes(3000), remote_offset=0)
    data = a.datagrams_to_send(0.0)
    assert len(data) == 3
    b.receive_datagram(data[0][0], 0.001, ecn=True)
    b.receive_datagram(data[1][0], 0.005, ecn=True)    # within 10 ms of the first CNP
    out = b.datagrams_to_send(0.005)
    (cnp,) = cnps(out)
    assert (cnp.dest_qpn, cnp.ev, cnp.psn) == (a.qpn, data[0][1], 0)
    b.receive_datagram(data[2][0], 0.012, ecn=True)    # the interval is over
    assert [c.psn for c in cnps(b.datagrams_to_send(0.012))] == [2]
    assert b.stats()["cnp_sent"] == 2


def test_no_cnp_without_ce_or_with_the_interval_off():
    for cfg, ecn in ((dcqcn_config(), False), (QPConfig(transport=Transport.RC, sack_every=1), True)):
        a, b = pair(cfg)
        a.post_write(wr_id=1, local=bytes(1000), remote_offset=0)
        ((data, _),) = a.datagrams_to_send(0.0)
        b.receive_datagram(data, 0.001, ecn=ecn)
        assert cnps(b.datagrams_to_send(0.001)) == []


def test_a_cnp_cuts_the_senders_rate_and_other_controllers_ignore_it():
    a, b = pair(dcqcn_config(rate_bps=1e9))
    a.post_write(wr_id=1, local=bytes(1000), remote_offset=0)
    ((data, _),) = a.datagrams_to_send(0.0)
    b.receive_datagram(data, 0.001, ecn=True)
    for d, _ in b.datagrams_to_send(0.001):
        a.receive_datagram(d, 0.002)
    alpha = (1 - 1 / 256) ** int(0.002 / 55e-6)        # unscaled: alpha decayed every 55 us
    assert a.cnp_received == 1 and a.cc.cnps == 1 and a.cc.rt_bps == 1e9
    assert a.cc.rc_bps == pytest.approx(1e9 * (1 - alpha / 2))
    assert a.stats()["cc"]["cnps"] == 1
    nscc = QP(3, rng=random.Random(3), config=QPConfig(transport=Transport.RC))
    connect_pair(nscc, QP(4, rng=random.Random(4), config=QPConfig()), [0])
    nscc.receive_datagram(pk.encode_cnp(3, 0, 0), 0.0)
    assert nscc.cnp_received == 1 and nscc.cc.cwnd_bytes == 10 * nscc.config.payload_bytes


def test_the_requester_honours_pacing_and_wakes_for_it():
    """8 Mbit/s, 1000-byte packets, no credit: one packet per ms, and get_timer names the next."""
    a, b = pair(dcqcn_config(rate_bps=8e6))
    a.post_write(wr_id=1, local=bytes(5000), remote_offset=0)
    sent = []
    now = 0.0
    for _ in range(5):
        out = a.datagrams_to_send(now)
        assert len(out) == 1
        sent.append(now)
        assert a.get_timer() == pytest.approx(now + 0.001)
        assert a.datagrams_to_send(now + 0.0005) == []    # early: held back
        now = a.get_timer()
    assert sent == pytest.approx([0.0, 0.001, 0.002, 0.003, 0.004])
    assert a.datagrams_to_send(now) == [] and a.get_timer() != now    # nothing left: no pacing wake-up


def test_window_controllers_take_the_unpaced_path():
    a, _ = pair(QPConfig(transport=Transport.RC, cc="fixed", payload_bytes=1000))
    a.post_write(wr_id=1, local=bytes(5000), remote_offset=0)
    assert len(a.datagrams_to_send(0.0)) == 5 and a.get_timer() != 0.0


def test_a_paced_write_completes_through_a_marking_path():
    """MultipathNetwork's ECN option: CE marks on a 10 Mbit/s path make CNPs, DCQCN slows down,
    and the write still arrives intact."""
    cfg = dcqcn_config(rate_bps=20e6, cnp_interval_s=scaled_cnp_interval_s(0.003), base_rtt_s=0.003)
    a, b = pair(cfg, size=2 << 20)
    net = MultipathNetwork(a, b, [PathSpec(rate_bps=10e6, delay_s=0.001, queue_bytes=200_000,
                                           ecn_kmin_bytes=5_000, ecn_kmax_bytes=50_000, ecn_pmax=0.1)])
    src = random.Random(7).randbytes(2 << 20)
    a.post_write(wr_id=1, local=src, remote_offset=0)
    done = []

    def finished():
        while (e := a.next_event()) is not None:
            done.append(e)
        return any(isinstance(e, WorkCompletion) for e in done)
    net.run(until=10.0, stop=finished)
    assert done and done[0].status is WCStatus.SUCCESS and bytes(b.responder.memory) == src
    marked = net.counters()["a->b path 0"]["ce_marked"]
    assert marked > 0 and b.stats()["cnp_sent"] > 0 and a.cc.cnps == b.stats()["cnp_sent"]
    assert a.cc.rc_bps < 20e6


def test_two_qps_through_a_marking_bottleneck_cut_and_share_it_fairly():
    """Both start at line rate (100 Mbit/s) on one 100 Mbit/s link: the queue marks, CNPs cut
    both, and after a few congestion epochs each gets about half."""
    rate, delay = 100e6, 0.001
    base = 2 * delay + 0.0003
    cfg = QPConfig(transport=Transport.RC, cc="dcqcn", sack_every=4, min_rto_s=0.02,
                   probe_interval_s=1.0, cnp_interval_s=scaled_cnp_interval_s(base),
                   cc_params={"rate_bps": rate, "base_rtt_s": base, "ai_rate_bps": 2e6})
    pairs = [pair(cfg, qpns=(10 + k, 20 + k), size=64 << 20) for k in range(2)]
    net = Dumbbell(pairs, PathSpec(rate_bps=rate, delay_s=delay, queue_bytes=300_000, ecn_kmin_bytes=5_000,
                                   ecn_kmax_bytes=200_000, ecn_pmax=0.01), seed=1)
    for a, _ in pairs:
        a.post_write(wr_id=1, local=bytes(64 << 20), remote_offset=0)
    marks: dict[float, list[int]] = {}

    def observe(t):
        if t >= 3.0 and not marks:
            marks[t] = [a.requester.acked_bytes for a, _ in pairs]
    net.run(until=4.0, observer=observe)
    assert all(a.cc.cnps > 0 for a, _ in pairs) and net.bottleneck.counters.ce_marked > 0
    (t0, acked0), = marks.items()
    goodput = [(a.requester.acked_bytes - x) * 8 / (4.0 - t0) for (a, _), x in zip(pairs, acked0)]
    assert sum(goodput) > 0.75 * rate
    assert 0.8 < goodput[0] / goodput[1] < 1.25


def test_samples_report_no_window_for_a_rate_based_controller():
    """A sample's cwnd_bytes is JSON for reports that refuse infinities (summary.json)."""
    from agents.channels.qp import _window
    a, _ = pair(dcqcn_config())
    nscc = QP(5, rng=random.Random(5), config=QPConfig(transport=Transport.RC))
    assert _window([a, a]) is None and _window([nscc]) == nscc.cc.cwnd_bytes
