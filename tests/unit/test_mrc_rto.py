"""Adaptive RTO: the RFC 6298 estimator, the mrc.h floor and retry ladder, and no spurious
timeouts on the fake clock when a queue builds far above a low ``timeout``."""
import random

import pytest

from agents.mrc.qp import QP, connect_pair
from agents.mrc.rto import MAX_RTO_S, RttEstimator, mrc_timeout_s
from agents.mrc.sim import MultipathNetwork, PathSpec
from agents.mrc.types import QPAttr, QPConfig, QPError, WorkCompletion


def test_first_and_later_samples_follow_rfc_6298():
    est = RttEstimator(0.0)
    est.sample(0.010)                       # (2.2): SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR
    assert est.srtt_s == pytest.approx(0.010) and est.rttvar_s == pytest.approx(0.005)
    assert est.rto_s == pytest.approx(0.030)
    est.sample(0.020)                       # (2.3): beta = 1/4 on |SRTT - R'|, then alpha = 1/8
    rttvar = 0.75 * 0.005 + 0.25 * abs(0.010 - 0.020)
    srtt = 0.875 * 0.010 + 0.125 * 0.020
    assert est.rttvar_s == pytest.approx(rttvar) and est.srtt_s == pytest.approx(srtt)
    assert est.rto_s == pytest.approx(srtt + 4 * rttvar)


def test_floor_is_the_mrc_timeout_and_ceiling_is_sixty_seconds():
    floor = mrc_timeout_s(12, time_scale=1.5, min_rto_s=0.001)
    assert floor == pytest.approx(1.5 * 1.024e-6 * 4096)
    assert mrc_timeout_s(0, min_rto_s=0.001) == 0.001
    est = RttEstimator(floor)
    assert est.rto_s == floor                 # no sample yet: the configured timeout
    for _ in range(50):
        est.sample(0.0001)                  # RTT far below the floor
    assert est.rto_s == pytest.approx(est.srtt_s + floor)   # the floor is the least margin
    est.sample(100.0)
    assert est.rto_s == MAX_RTO_S
    with pytest.raises(ValueError):
        RttEstimator(-1.0)


def test_steady_queue_keeps_the_floor_as_margin_above_srtt():
    """Linux's tcp_rto_min rule: on a steady 60 ms RTT (RTTVAR decays to ~0) RTO stays at
    SRTT + floor, not at the floor alone (which sat one packet time above SRTT on the fabric)."""
    floor = mrc_timeout_s(16)               # 67 ms, the testbed's QP default
    est = RttEstimator(floor)
    for _ in range(200):
        est.sample(0.060)
    assert est.rttvar_s < 0.001
    assert est.rto_s == pytest.approx(0.060 + floor, rel=1e-3)
    for _ in range(5):
        est.sample(0.300)                   # a jump: the RFC 6298 term takes over
    assert est.rto_s == pytest.approx(est.srtt_s + 4 * est.rttvar_s)
    assert 4 * est.rttvar_s > floor


def test_backoff_is_linear_then_doubling():
    est = RttEstimator(0.004)
    ladder = [est.backoff_s(k, linear_cnt=3) for k in range(6)]
    # the first transmission and retries 1..3 one RTO each, then retries 4, 5 doubling
    assert ladder == pytest.approx([0.004, 0.004, 0.004, 0.004, 0.008, 0.016])


def test_qp_rto_tracks_samples_above_its_floor():
    cfg = QPConfig(min_rto_s=0.0, ack_delay_s=0.000004)          # <= 1/4 of the floor
    qp = QP(1, rng=random.Random(0), config=cfg)
    peer = QP(2, rng=random.Random(1), memory=bytearray(1 << 16), config=cfg)
    connect_pair(qp, peer, [0], attr=QPAttr(timeout=4))          # floor 16.4 us
    floor = qp.rto_s
    qp.post_write(wr_id=1, local=bytes(1000), remote_offset=0)
    for data, _ in qp.datagrams_to_send(0.0):
        peer.receive_datagram(data, 0.005)
    for data, _ in peer.datagrams_to_send(0.005):
        qp.receive_datagram(data, 0.010)                          # RTT 10 ms
    assert qp.srtt_s == pytest.approx(0.010)
    assert qp.rto_s == pytest.approx(0.030) and qp.rto_s > floor


def test_building_queue_causes_no_spurious_timeouts_with_a_low_timeout():
    # timeout 12 = 4.2 ms, just above the ~3 ms base RTT; a fixed 100-packet window into a
    # 20 Mbit/s link builds ~55 ms of queue (no drops: the queue holds 200 packets).
    cfg = QPConfig(min_rto_s=0.0, cc="fixed", cc_params={"window_bytes": 100 * 1408})
    size = 4 << 20
    a = QP(1, rng=random.Random(3), config=cfg)
    b = QP(2, rng=random.Random(4), memory=bytearray(size), config=cfg)
    connect_pair(a, b, [0], attr=QPAttr(timeout=12))
    floor = a.rto_s
    net = MultipathNetwork(a, b, [PathSpec(20e6, 0.001, queue_bytes=200 * 1500)], seed=3)
    src = random.Random(3).randbytes(size)
    a.post_write(wr_id=1, local=src, remote_offset=0)
    events, max_rtt = [], [0.0]

    def done():
        while (e := a.next_event()) is not None:
            events.append(e)
        return any(isinstance(e, (WorkCompletion, QPError)) for e in events)

    def observe(now):
        max_rtt[0] = max(max_rtt[0], a.evs.info[0].rtt_last_s or 0.0)

    net.run(stop=done, until=30.0, observer=observe)
    assert [type(e) for e in events if isinstance(e, (WorkCompletion, QPError))] == \
        [WorkCompletion]
    assert max_rtt[0] > 5 * floor               # a static RTO at the floor would have fired
    assert a.requester.loss.timeouts == 0 and a.requester.rtx_packets == 0
    assert a.rto_s > max_rtt[0] * 0.9
    assert b.responder.memory.tobytes() == src


def test_initial_rto_holds_until_the_first_sample_then_the_estimator_takes_over():
    """RFC 6298 rule 2.1: before any RTT is known the timer waits the initial RTO (1 s),
    not the floor, so a start-up burst's queueing is not taken for loss."""
    from agents.mrc.rto import INITIAL_RTO_S, RttEstimator
    est = RttEstimator(0.067, INITIAL_RTO_S)
    assert est.rto_s == 1.0
    est.sample(0.120)                                   # SRTT 120 ms, RTTVAR 60 ms
    assert est.rto_s == pytest.approx(0.120 + 4 * 0.060)
    assert RttEstimator(0.067).rto_s == 0.067           # no initial value: the floor
    assert RttEstimator(2.0, 1.0).rto_s == 2.0          # a floor above it still wins
    with pytest.raises(ValueError):
        RttEstimator(0.067, -1.0)
