"""DCQCN's reaction point against the paper's equations (Zhu et al., SIGCOMM 2015, section 3.1),
on a fake clock: CNP cut, alpha, fast recovery, additive and hyper increase, the two counters,
clamps, pacing, and the scaling rule."""
import pytest

from agents.mrc import cc
from agents.mrc import dcqcn as dq

LINE = 1e9
K, T, B = 0.001, 0.002, 10_000       # alpha period, rate-increase timer (s), byte counter (bytes)
AI, HAI, F, G = 1e6, 1e7, 5, 1 / 256


def rp(**kw):
    params = dict(mss_bytes=1000, rate_bps=LINE, alpha_period_s=K, timer_s=T, byte_counter_bytes=B,
                  ai_rate_bps=AI, hai_rate_bps=HAI, min_rate_bps=1e6, burst_bytes=0)
    return cc.create("dcqcn", **{**params, **kw})


def test_registered_rate_based_and_starting_at_line_rate():
    c = rp()
    assert "dcqcn" in cc.available() and isinstance(c, dq.DCQCN)
    assert c.rc_bps == c.rt_bps == LINE and c.alpha == 1.0
    assert c.can_send(inflight_bytes=10**9, size_bytes=1000)     # no window


def test_cnp_cuts_by_half_alpha_and_raises_alpha():
    """Equation (1): RT = RC, RC = RC (1 - alpha/2), alpha = (1 - g) alpha + g."""
    c = rp(initial_alpha=0.5)
    c.on_cnp(now=0.0)
    assert c.rt_bps == LINE
    assert c.rc_bps == pytest.approx(LINE * (1 - 0.5 / 2))
    a1 = (1 - G) * 0.5 + G
    assert c.alpha == pytest.approx(a1)
    c.on_cnp(now=0.0001)
    assert c.rt_bps == pytest.approx(LINE * 0.75)
    assert c.rc_bps == pytest.approx(LINE * 0.75 * (1 - a1 / 2))
    assert c.alpha == pytest.approx((1 - G) * a1 + G)


def test_alpha_decays_once_per_period_without_cnp_and_restarts_on_one():
    """Equation (2): alpha = (1 - g) alpha per K without a CNP; a CNP restarts the period."""
    c = rp()
    c.on_cnp(now=0.0)                                  # alpha stays 1 ((1-g) + g)
    c.advance(3 * K + 1e-9)
    assert c.alpha == pytest.approx((1 - G) ** 3)
    a = c.alpha
    c.on_cnp(now=3.5 * K)
    a = (1 - G) * a + G
    assert c.alpha == pytest.approx(a)
    c.advance(3.5 * K + 0.99 * K)                      # less than K since the CNP: no decay
    assert c.alpha == pytest.approx(a)
    c.advance(3.5 * K + 1.0 * K + 1e-9)
    assert c.alpha == pytest.approx(a * (1 - G))


def test_fast_recovery_halves_the_gap_to_the_target_five_times():
    """Equation (3): the first F timer events set RC = (RT + RC) / 2, RT unchanged."""
    c = rp()
    c.on_cnp(now=0.0)
    rt, rc = c.rt_bps, c.rc_bps
    assert rc == pytest.approx(LINE / 2)
    for k in range(1, F + 1):
        c.advance(k * T)
        rc = (rt + rc) / 2
        assert c.rt_bps == rt and c.rc_bps == pytest.approx(rc)
    assert LINE - c.rc_bps == pytest.approx(LINE / 2 / 2**F)
    assert c.fr_events == F and c.ai_events == 0


def test_additive_increase_after_fast_recovery():
    """Equation (4): once a counter passes F, RT += R_AI and RC = (RT + RC) / 2."""
    c = rp()
    c.on_cnp(now=0.0)
    c.on_cnp(now=0.0)                                  # RT = LINE/2, RC = LINE/4
    c.advance(F * T)
    rt, rc = c.rt_bps, c.rc_bps
    for k in range(F + 1, F + 4):
        c.advance(k * T)
        rt += AI
        rc = (rt + rc) / 2
        assert c.rt_bps == pytest.approx(rt) and c.rc_bps == pytest.approx(rc)
    assert c.ai_events == 3 and c.hai_events == 0


def test_hyper_increase_when_both_counters_passed_f():
    """Both counters past F: RT += i R_HAI, i = min(t, b) - F (QCN's hyper-active increase)."""
    c = rp()
    for _ in range(3):
        c.on_cnp(now=0.0)                              # RT = LINE/4, RC = LINE/8
    for _ in range(F + 3):                             # b = 1..8 at t = 0: 5 FR, then 3 AI
        c.on_packet_sent(now=0.0, size_bytes=B)
    assert (c.t_stage, c.b_stage, c.fr_events, c.ai_events) == (0, F + 3, F, 3)
    c.advance(F * T)                                   # t = 1..5 while b = 8 > F: AI
    assert c.ai_events == 3 + F and c.hai_events == 0
    rt, rc = c.rt_bps, c.rc_bps
    for k, i in ((F + 1, 1), (F + 2, 2), (F + 3, 3), (F + 4, 3)):   # i = min(t, b) - F, b = 8
        c.advance(k * T)
        rt += i * HAI
        rc = (rt + rc) / 2
        assert c.rt_bps == pytest.approx(rt) and c.rc_bps == pytest.approx(rc)
    assert c.hai_events == 4


def test_byte_counter_and_timer_share_the_stages_and_a_cnp_resets_both():
    c = rp()
    c.on_cnp(now=0.0)
    c.on_packet_sent(now=0.0, size_bytes=3 * B + 10)   # three byte-counter events, 10 bytes left
    c.advance(2 * T)                                   # two timer events
    assert (c.t_stage, c.b_stage, c.fr_events) == (2, 3, 5)
    c.on_cnp(now=2 * T)
    assert (c.t_stage, c.b_stage) == (0, 0)
    c.on_packet_sent(now=2 * T, size_bytes=B - 10)     # the leftover was reset too
    assert c.b_stage == 0
    c.advance(2 * T + T * 0.999)                       # the timer restarted at the CNP
    assert c.t_stage == 0
    c.advance(3 * T)
    assert c.t_stage == 1 and c.fr_events == 6


def test_rates_stay_between_the_floor_and_line_rate():
    c = rp()
    for i in range(100):
        c.on_cnp(now=i * 1e-6)
    assert c.rc_bps == 1e6 and c.rt_bps >= 1e6
    c.advance(10_000 * T)                              # long recovery: hyper increase is bounded
    c.on_packet_sent(now=10_000 * T, size_bytes=1000 * B)
    assert c.rt_bps == LINE and c.rc_bps == pytest.approx(LINE)


def test_pacing_spaces_packets_at_the_current_rate_on_the_wire_size():
    c = rp(rate_bps=8e6, min_rate_bps=1e5, overhead_bytes=100)   # 1100 B = 1.1 ms at 8 Mbit/s
    assert c.next_send_time(now=0.0, size_bytes=1000) <= 0.0
    c.on_packet_sent(now=0.0, size_bytes=1000)
    assert c.next_send_time(now=0.0, size_bytes=1000) == pytest.approx(0.0011)
    c.on_packet_sent(now=0.0011, size_bytes=1000)
    assert c.next_send_time(now=0.0011, size_bytes=1000) == pytest.approx(0.0022)
    alpha = (1 - G) ** 2                               # two alpha periods (K = 1 ms) without a CNP
    c.on_cnp(now=0.0022)                               # RC x (1 - alpha/2): the gap grows alike
    assert c.rc_bps == pytest.approx(8e6 * (1 - alpha / 2))
    c.on_packet_sent(now=0.0022, size_bytes=1000)
    assert c.next_send_time(now=0.0022, size_bytes=1000) == pytest.approx(0.0022 + 0.0011 / (1 - alpha / 2))


def test_burst_credit_absorbs_a_late_wakeup_but_not_idleness():
    c = rp(rate_bps=8e6, min_rate_bps=1e5, burst_bytes=1000)      # 1 ms per 1000 B packet
    c.on_packet_sent(now=0.0, size_bytes=1000)
    c.on_packet_sent(now=0.0, size_bytes=1000)         # the credit: two back to back at start
    assert c.next_send_time(now=0.0, size_bytes=1000) == pytest.approx(0.001)
    c.on_packet_sent(now=0.0015, size_bytes=1000)      # woke 0.5 ms late: the next is not delayed
    assert c.next_send_time(now=0.0015, size_bytes=1000) == pytest.approx(0.002)
    c.on_packet_sent(now=1.0, size_bytes=1000)         # after idling, at most one packet of credit
    assert c.next_send_time(now=1.0, size_bytes=1000) == pytest.approx(1.0)
    c.on_packet_sent(now=1.0, size_bytes=1000)
    assert c.next_send_time(now=1.0, size_bytes=1000) == pytest.approx(1.001)


def test_other_controllers_ignore_cnps_and_do_not_pace():
    for c in (cc.create("fixed", mss_bytes=1000), cc.create("uet-1.0-nscc", mss_bytes=1000)):
        before = c.cwnd_bytes
        c.on_cnp(now=1.0)
        assert c.cwnd_bytes == before and c.next_send_time(now=1.0, size_bytes=1000) == 1.0


def test_scaling_rule_keeps_rtt_and_bdp_ratios():
    """Times x base RTT / 12 us, bytes x BDP / (40 Gbit/s x 12 us), rates x line / 40 Gbit/s."""
    p = dq.scaled_params(10e6, 0.0227)
    ts = 0.0227 / 12e-6
    assert p["timer_s"] == pytest.approx(55e-6 * ts) and p["alpha_period_s"] == pytest.approx(55e-6 * ts)
    assert p["byte_counter_bytes"] == pytest.approx(10e6 * 10e6 * 0.0227 / (40e9 * 12e-6))
    assert p["ai_rate_bps"] == pytest.approx(10e3) and p["hai_rate_bps"] == pytest.approx(100e3)
    assert dq.scaled_cnp_interval_s(0.0227) == pytest.approx(50e-6 * ts)
    # B / (line rate x T), the timer periods one byte-counter event takes, is the paper's
    assert p["byte_counter_bytes"] * 8 / (10e6 * p["timer_s"]) == pytest.approx(10e6 * 8 / (40e9 * 55e-6))
    c = cc.create("dcqcn", mss_bytes=1000, rate_bps=10e6, base_rtt_s=0.0227)
    assert c.timer_s == pytest.approx(p["timer_s"]) and c.min_rate_bps == pytest.approx(1e5)


@pytest.mark.parametrize("bad", [dict(rate_bps=0), dict(g=2), dict(timer_s=0), dict(min_rate_bps=2e9),
                                 dict(byte_counter_bytes=-1)])
def test_bad_parameters_raise_value_error(bad):
    with pytest.raises(ValueError):
        rp(**bad)


def test_cnp_pacer_sends_at_most_one_per_interval():
    p = dq.CnpPacer(0.05)
    assert p.on_ce(1.0) and not p.on_ce(1.01) and not p.on_ce(1.0499)
    assert p.on_ce(1.05) and (p.sent, p.suppressed) == (2, 2)
    with pytest.raises(ValueError):
        dq.CnpPacer(-1)
