"""Congestion control: registry, the NSCC rules, and the default on a bottleneck (fake clock)."""
import random

import pytest

from agents.mrc import QP, QPAttr, QPConfig, QPError, WorkCompletion, cc, connect_pair
from agents.mrc.sim import MultipathNetwork, PathSpec


def nscc(**kw):
    return cc.create("uet-1.0-nscc", mss_bytes=1000, rate_bps=8e9, base_rtt_s=0.001, **kw)


def test_registry():
    assert {"uet-1.0-nscc", "fixed"} <= set(cc.available())
    with pytest.raises(ValueError, match="unknown"):
        cc.create("cubic", mss_bytes=1000)
    with pytest.raises(ValueError):
        cc.register("fixed", cc.FixedWindow)


def test_starts_at_max_cwnd_of_one_and_a_half_bdp():
    c = nscc()
    assert c.bdp_bytes == pytest.approx(1e6)
    assert c.cwnd_bytes == pytest.approx(1.5e6) == c.max_cwnd_bytes


def test_loss_subtracts_lost_bytes_and_a_trim_quick_adapts_to_the_acked_bytes():
    c = nscc(quick_adapt=False)
    c.on_packets_lost(now=0.0, lost_bytes=200_000)
    assert c.cwnd_bytes == pytest.approx(1.3e6)
    q = nscc()
    q.on_packets_lost(now=0.0, lost_bytes=1000, trimmed=True)
    q.on_packets_acked(now=0.0005, acked_bytes=50_000, rtt_s=0.001)
    q.on_packets_acked(now=0.0011, acked_bytes=10_000, rtt_s=0.001)   # epoch ends
    # cwnd := bytes acked in the epoch (60 kB), then this ACK's own increase (<= alpha * 10 kB)
    assert q.qa_count == 1 and 60_000 <= q.cwnd_bytes <= 65_000 + 1e-6


def test_a_loss_that_is_not_a_trim_only_shrinks_the_window():
    """uet-htsim: only a NACK arms quick-adapt; a timeout or an inferred loss takes its bytes off.
    Before, any loss in an epoch with less than half the window acked set cwnd to the acked bytes."""
    q = nscc()
    q.on_packets_lost(now=0.0, lost_bytes=4096)
    q.on_packets_acked(now=0.0005, acked_bytes=50_000, rtt_s=0.001)
    q.on_packets_acked(now=0.0011, acked_bytes=10_000, rtt_s=0.001)   # epoch ends: no quick-adapt
    assert q.qa_count == 0 and q.cwnd_bytes == pytest.approx(1.5e6)


def test_a_trim_in_an_epoch_the_requester_ran_out_of_data_does_not_quick_adapt():
    q = nscc()
    q.set_app_limited(True)
    q.on_packets_lost(now=0.0, lost_bytes=1000, trimmed=True)
    q.on_packets_acked(now=0.0005, acked_bytes=50_000, rtt_s=0.001)
    q.on_packets_acked(now=0.0011, acked_bytes=10_000, rtt_s=0.001)   # epoch ends
    assert (q.qa_count, q.qa_app_limited) == (0, 1) and q.cwnd_bytes == pytest.approx(1.5e6)   # grown back


def test_large_delay_decreases_once_per_rtt_with_floor():
    c = nscc()
    c.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=0.011)   # d = 10 ms >> target
    assert c.cwnd_bytes == pytest.approx(1.5e6 * 0.5)
    c.on_packets_acked(now=0.0101, acked_bytes=1000, rtt_s=0.011)  # same RTT: no second MD
    assert c.md_count == 1


def test_small_delay_increases_up_to_max():
    c = nscc()
    c.cwnd_bytes = 500_000
    c.on_packets_acked(now=0.0, acked_bytes=10_000, rtt_s=0.0011)
    assert 500_000 < c.cwnd_bytes <= c.max_cwnd_bytes


def test_ecn_below_target_keeps_window():
    c = nscc(ecn_capable=True)
    c.cwnd_bytes = 500_000
    c.on_packets_acked(now=0.0, acked_bytes=10_000, rtt_s=0.0012, ecn=True)
    assert c.cwnd_bytes == 500_000


def test_can_send_respects_window_but_never_blocks_an_idle_sender():
    c = cc.create("fixed", mss_bytes=1000, window_bytes=1500)
    assert c.can_send(inflight_bytes=0, size_bytes=5000)
    assert c.can_send(inflight_bytes=500, size_bytes=1000)
    assert not c.can_send(inflight_bytes=1000, size_bytes=1000)


def test_default_is_nscc_with_a_ten_packet_initial_window():
    qp = QP(1, rng=random.Random(0), config=QPConfig())
    assert QPConfig().cc == "uet-1.0-nscc" and isinstance(qp.cc, cc.NSCC)
    assert qp.cc.cwnd_bytes == 10 * qp.config.payload_bytes
    assert qp.cc.base_rtt_s is None and qp.cc.max_cwnd_bytes == float("inf")


def test_without_rate_the_base_rtt_is_the_minimum_sample():
    c = cc.create("uet-1.0-nscc", mss_bytes=1000)
    c.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=0.004)
    c.on_packets_acked(now=0.02, acked_bytes=1000, rtt_s=0.003)
    c.on_packets_acked(now=0.03, acked_bytes=1000, rtt_s=0.005)
    assert c.base_rtt_s == pytest.approx(0.003) and c.target_s == pytest.approx(0.003)
    # a configured base RTT is fixed: a lower sample does not shrink the BDP
    d = nscc()
    base, bdp = d.base_rtt_s, d.bdp_bytes
    d.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=base / 4)
    assert d.base_rtt_s == base and d.bdp_bytes == bdp


def test_without_rate_window_grows_at_low_delay_and_shrinks_at_high_delay():
    c = cc.create("uet-1.0-nscc", mss_bytes=1000)
    c.on_packets_acked(now=0.0, acked_bytes=1000, rtt_s=0.002)      # learns base 2 ms
    start = c.cwnd_bytes
    for i in range(20):
        c.on_packets_acked(now=0.001 * i, acked_bytes=1000, rtt_s=0.002)
    assert c.cwnd_bytes > start
    grown = c.cwnd_bytes
    c.on_packets_acked(now=1.0, acked_bytes=1000, rtt_s=0.010)      # d = 8 ms >= 2 * target
    assert c.cwnd_bytes < grown and c.md_count == 1


def test_min_target_floors_a_tiny_base_rtt():
    c = cc.create("uet-1.0-nscc", mss_bytes=1000, min_target_s=0.0005)
    c.on_packets_acked(now=0.0, acked_bytes=1000, rtt_s=0.00005)
    assert c.target_s == pytest.approx(0.0005)
    w = c.cwnd_bytes
    c.on_packets_acked(now=0.001, acked_bytes=1000, rtt_s=0.0004)   # jitter below the floor
    assert c.cwnd_bytes > w and c.md_count == 0


@pytest.mark.parametrize("n_paths", [1, 4])
def test_default_cc_on_a_20_mbit_bottleneck_with_a_64_packet_queue(n_paths):
    """8 MiB over 20 Mbit/s (split over ``n_paths`` EVs), drop-tail 64 packets per queue:
    default QPConfig (no link rate given) completes with few retransmissions near line rate."""
    size, rate = 8 << 20, 20e6
    a = QP(1, rng=random.Random(1), config=QPConfig())
    b = QP(2, rng=random.Random(2), memory=bytearray(size), config=QPConfig())
    connect_pair(a, b, list(range(n_paths)), attr=QPAttr())
    paths = [PathSpec(rate / n_paths, 0.001, queue_bytes=64 * 1500)] * n_paths
    net = MultipathNetwork(a, b, paths, seed=1)
    a.post_write(wr_id=1, local=bytes(size), remote_offset=0)
    events = []

    def done():
        while (e := a.next_event()) is not None:
            events.append(e)
        return any(isinstance(e, (WorkCompletion, QPError)) for e in events)

    net.run(stop=done, until=60.0)
    assert [type(e) for e in events if isinstance(e, (WorkCompletion, QPError))] == \
        [WorkCompletion]
    st = a.stats()
    assert st["retransmissions"] <= 0.03 * st["tx_packets"]
    assert size * 8 / net.now >= 0.85 * rate


def test_fixed_window_on_the_same_bottleneck_overruns_the_queue():
    """The failure the default replaced: an unbounded window drops most packets."""
    size = 1 << 20
    cfg = QPConfig(cc="fixed")
    a = QP(1, rng=random.Random(1), config=cfg)
    b = QP(2, rng=random.Random(2), memory=bytearray(size), config=cfg)
    connect_pair(a, b, [0], attr=QPAttr())
    net = MultipathNetwork(a, b, [PathSpec(20e6, 0.001, queue_bytes=64 * 1500)], seed=1)
    a.post_write(wr_id=1, local=bytes(size), remote_offset=0)
    net.run(stop=lambda: a.idle, until=30.0)
    assert a.stats()["retransmissions"] > 0.2 * a.stats()["tx_packets"]


def test_counters_tell_the_ecn_cases_apart():
    c = nscc(ecn_capable=True)
    c.cwnd_bytes = 500_000
    c.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=0.0012, ecn=True)    # d 0.2 ms < target: NOOP
    assert c.cwnd_bytes == 500_000
    c.on_packets_acked(now=0.02, acked_bytes=1000, rtt_s=0.0025, ecn=True)    # d 1.5 ms >= target: MD
    c.on_packets_acked(now=0.03, acked_bytes=1000, rtt_s=0.0011)              # unmarked: increase
    assert c.counters() == {"acks": 3, "ecn": 2, "noop": 1, "md": 1, "qa": 0, "qa_app_limited": 0}
