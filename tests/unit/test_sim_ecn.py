"""The simulator's RED-style ECN marking (DCQCN's CP): probability by queue, validation, CE delivery."""
import random

import pytest

from agents.mrc import QP, QPAttr, QPConfig, Transport, connect_pair
from agents.mrc.sim import MultipathNetwork, PathSpec


def test_mark_probability_is_zero_to_kmin_linear_to_pmax_at_kmax_then_one():
    p = PathSpec(ecn_kmin_bytes=5_000, ecn_kmax_bytes=200_000, ecn_pmax=0.01)
    assert p.mark_probability(0) == p.mark_probability(5_000) == 0.0
    assert p.mark_probability(102_500) == pytest.approx(0.005)
    assert p.mark_probability(200_000) == pytest.approx(0.01)
    assert p.mark_probability(200_001) == 1.0
    assert PathSpec().mark_probability(10**9) == 0.0


@pytest.mark.parametrize("bad", [dict(ecn_kmin_bytes=10), dict(ecn_kmin_bytes=10, ecn_kmax_bytes=5),
                                 dict(ecn_kmin_bytes=1, ecn_kmax_bytes=2, ecn_pmax=1.5)])
def test_bad_marking_raises(bad):
    with pytest.raises(ValueError):
        PathSpec(**bad)


def test_a_queue_above_kmax_delivers_ce_to_the_receiver():
    cfg = QPConfig(transport=Transport.RC, cc="fixed", payload_bytes=1000)
    a = QP(1, rng=random.Random(1), config=cfg)
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 20), config=cfg)
    connect_pair(a, b, [0], attr=QPAttr(timeout=12))
    seen = []
    receive = b.receive_datagram
    b.receive_datagram = lambda data, now, ecn=False: (seen.append(ecn), receive(data, now, ecn=ecn))
    net = MultipathNetwork(a, b, [PathSpec(rate_bps=1e8, ecn_kmin_bytes=2_000, ecn_kmax_bytes=2_000)])
    a.post_write(wr_id=1, local=bytes(10_000), remote_offset=0)
    net.run(until=1.0)
    # 1040-byte datagrams sent at once: the third finds 2080 bytes queued, above 2000
    assert seen[:2] == [False, False] and all(seen[2:]) and len(seen) == 10
    assert net.counters()["a->b path 0"]["ce_marked"] == 8
