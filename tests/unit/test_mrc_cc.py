"""Congestion control: registry and the NSCC rules."""
import pytest

from agents.mrc import cc


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


def test_loss_subtracts_lost_bytes_and_quick_adapt_sets_acked():
    c = nscc(quick_adapt=False)
    c.on_packets_lost(now=0.0, lost_bytes=200_000)
    assert c.cwnd_bytes == pytest.approx(1.3e6)
    q = nscc()
    q.on_packets_lost(now=0.0, lost_bytes=1000)
    q.on_packets_acked(now=0.0005, acked_bytes=50_000, rtt_s=0.001)
    q.on_packets_acked(now=0.0011, acked_bytes=10_000, rtt_s=0.001)   # epoch ends
    # cwnd := bytes acked in the epoch (60 kB), then this ACK's own increase (<= alpha * 10 kB)
    assert q.qa_count == 1 and 60_000 <= q.cwnd_bytes <= 65_000 + 1e-6


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
