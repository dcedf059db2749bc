"""Differential tests: the C congestion controllers and RTT estimator against the Python ones.

The same random sequence of callbacks (times rising by steps from microseconds to seconds;
ACKs with RTT samples or None and ECN echoes; losses and trims; sends; CNPs; pacing queries)
drives :mod:`agents.mrc.cc`, :mod:`agents.mrc.dcqcn` and :mod:`agents.mrc.rto` and their
twins in ``agents.mrc._core``; after every step every return value and every state attribute
must be the same float, bit for bit (``0.0`` vs ``-0.0`` included), the same int, the same None.
Parameters: those the testbed builds (:func:`testbed.spec.jobs.dcqcn_qp`, NSCC's
``{"rate_bps", "base_rtt_s"}``: 1 Mbit/s..1 Gbit/s, 10 us..50 ms) and random ones.
"""
import math
import struct

import pytest
from hypothesis import given, settings, strategies as st

from agents.mrc import cc, dcqcn, native, rto
from agents.mrc.packet import payload_bytes_for_mtu
from testbed.spec.jobs import dcqcn_qp

core = native.load()
if core is None:
    pytest.skip("the native engine (agents.mrc._core) is not built", allow_module_level=True)

SETTINGS = settings(max_examples=200, deadline=None)

NSCC_ATTRS = ("cwnd_bytes", "mss_bytes", "rate_bps", "base_rtt_s", "bdp_bytes", "base_rtt_fixed",
              "target_factor", "min_target_s", "max_cwnd_limit_bytes", "min_cwnd_bytes",
              "max_cwnd_bytes", "target_s", "alpha", "fi", "gamma", "md_floor", "ecn_capable",
              "quick_adapt", "delay_md_factor", "_last_md", "_epoch_start", "_epoch_acked",
              "_epoch_loss", "_app_limited", "_epoch_app_limited", "md_count", "qa_count",
              "qa_app_limited", "ecn_count", "acks", "noop_count", "delay_filter", "avg_delay_s",
              "md_filtered")
DCQCN_ATTRS = ("cwnd_bytes", "mss_bytes", "rate_bps", "base_rtt_s", "g", "alpha_period_s",
               "timer_s", "byte_counter_bytes", "fast_recovery_stages", "ai_rate_bps",
               "hai_rate_bps", "min_rate_bps", "overhead_bytes", "burst_bytes", "rc_bps",
               "rt_bps", "alpha", "t_stage", "b_stage", "cnps", "fr_events", "ai_events",
               "hai_events", "_started", "_alpha_next", "_timer_next", "_bytes", "_next_tx")
FIXED_ATTRS = ("cwnd_bytes", "mss_bytes")
RTT_ATTRS = ("srtt_s", "rttvar_s", "samples", "floor_s", "initial_s", "rto_s")
PACER_ATTRS = ("interval_s", "_last", "sent", "suppressed")


def same(a, b) -> bool:
    """Equal as the engines must be: None is None, bools and ints equal, floats bit for bit
    (an int of one engine against a float of the other compares as the exact float)."""
    if a is None or b is None:
        return a is b
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and \
            all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return struct.pack("<d", float(a)) == struct.pack("<d", float(b))
    return a == b


def fixed_base_rtt_s(c):
    """loss.py's reading of a controller's base RTT (LossRecovery's reordering guard)."""
    base = getattr(c, "base_rtt_s", None)
    return base if base is not None and getattr(c, "base_rtt_fixed", False) else None


def assert_state(py, nat, attrs, where):
    for name in attrs:
        a, b = getattr(py, name), getattr(nat, name)
        assert same(a, b), f"{where}: {name} python {a!r} native {b!r}"
    if isinstance(py, cc.CongestionControl):
        assert same(fixed_base_rtt_s(py), nat.fixed_base_rtt_s), f"{where}: fixed base RTT"
    if hasattr(py, "counters"):
        assert same(py.counters(), nat.counters()), f"{where}: counters"


def construct(py_factory, nat_factory, **kw):
    """Both construct, or both raise ValueError; returns the pair or None."""
    try:
        py = py_factory(**kw)
    except ValueError:
        with pytest.raises(ValueError):
            nat_factory(**kw)
        return None
    return py, nat_factory(**kw)


# ---- strategies ----------------------------------------------------------------------------

# Time steps from 0 (two events at one instant) through microseconds to seconds.
dt = st.one_of(st.just(0.0), st.floats(1e-6, 1e-4), st.floats(1e-4, 1e-2), st.floats(1e-2, 2.0))
# An RTT sample: None (no timestamp echo), an absolute value, or relative to the base RTT.
rtt = st.one_of(st.none(), st.just(0.0), st.floats(1e-6, 0.2),
                st.tuples(st.just("rel"), st.floats(0.5, 8.0)))
size = st.integers(1, 9000)
ops = st.one_of(
    st.tuples(st.just("ack"), dt, st.integers(0, 200_000), rtt, st.booleans()),
    st.tuples(st.just("lost"), dt, st.integers(0, 100_000), st.booleans()),
    st.tuples(st.just("sent"), dt, size),
    st.tuples(st.just("cnp"), dt),
    st.tuples(st.just("next"), dt, size),
    st.tuples(st.just("can"), st.integers(0, 3_000_000), size),
    st.tuples(st.just("app"), dt, st.booleans()),
)
# Sends at line rate or faster: enough bytes for DCQCN's byte counter to pass F stages.
burst = st.tuples(st.just("burst"), dt, size, st.integers(1, 1500), st.floats(0.0, 1e-4))
# Waking exactly at a DCQCN deadline (alpha period, rate timer: k periods late; the pacing
# time): (now - deadline) // period then sits on an integer, where Python's floor division
# and a plain floor(a / b) differ; a send at the pacing time chains next_tx.
wake = st.tuples(st.just("wake"), st.sampled_from(["alpha", "timer", "tx", "tx"]),
                 st.integers(0, 1000), size)
mtu = st.sampled_from([576, 1280, 1500, 4096, 9000])
# What the testbed builds (testbed.spec.jobs): int rates, base RTTs rounded to 1 us.
tb_rate = st.one_of(st.integers(1_000_000, 1_000_000_000),
                    st.sampled_from([1_000_000, 5_000_000, 10_000_000, 100_000_000, 1_000_000_000]))
tb_rtt = st.floats(1e-5, 5e-2).map(lambda x: round(x, 6)).filter(lambda x: x > 0)
start = st.one_of(st.just(0.0), st.floats(0.0, 1e6))


def drive(py, nat, attrs, t0, steps, base_ref, max_jump=2.0):
    """Apply each op to both controllers, compare returns and state after every step; returns
    the last time. A wake-up jumps at most ``max_jump`` s (a far deadline: a slow pace)."""
    now = t0
    assert_state(py, nat, attrs, "init")
    for i, op in enumerate(steps):
        kind = op[0]
        if kind == "wake":   # the QP wakes at a deadline of the controller (+ k periods), sends
            deadline = {"alpha": py._alpha_next + op[2] * py.alpha_period_s,
                        "timer": py._timer_next + op[2] * py.timer_s, "tx": py._next_tx}[op[1]]
            now = max(now, min(deadline, now + max_jump))
        elif kind != "can":
            now += op[1]
        where = f"step {i} {op} now={now!r}"
        if kind == "ack":
            r = op[3]
            if isinstance(r, tuple):
                r = base_ref * r[1]
            for c in (py, nat):
                c.on_packets_acked(now=now, acked_bytes=op[2], rtt_s=r, ecn=op[4])
        elif kind == "lost":
            for c in (py, nat):
                c.on_packets_lost(now=now, lost_bytes=op[2], trimmed=op[3])
        elif kind == "sent":
            for c in (py, nat):
                c.on_packet_sent(now=now, size_bytes=op[2])
        elif kind == "burst":   # a window's worth of sends, gap s apart, each one compared
            for j in range(op[3]):
                now += op[4] if j else 0.0
                for c in (py, nat):
                    c.on_packet_sent(now=now, size_bytes=op[2])
                assert_state(py, nat, attrs, f"{where} packet {j}")
        elif kind == "cnp":
            for c in (py, nat):
                c.on_cnp(now=now)
        elif kind == "app":
            for c in (py, nat):
                c.set_app_limited(op[2])
        elif kind == "next" or kind == "wake":
            a = py.next_send_time(now=now, size_bytes=op[-1])
            b = nat.next_send_time(now=now, size_bytes=op[-1])
            assert same(a, b), f"{where}: next_send_time {a!r} {b!r}"
            if kind == "wake":
                for c in (py, nat):
                    c.on_packet_sent(now=now, size_bytes=op[-1])
        else:
            a = py.can_send(inflight_bytes=op[1], size_bytes=op[2])
            b = nat.can_send(inflight_bytes=op[1], size_bytes=op[2])
            assert a is b, f"{where}: can_send {a!r} {b!r}"
        assert_state(py, nat, attrs, where)
    return now


# ---- NSCC ----------------------------------------------------------------------------------

@SETTINGS
@given(rate=tb_rate, base=tb_rtt, m=mtu, ecn_capable=st.booleans(), t0=start,
       steps=st.lists(ops, max_size=80), delay_filter=st.sampled_from(cc.DELAY_FILTERS))
def test_nscc_testbed_params(rate, base, m, ecn_capable, t0, steps, delay_filter):
    kw = {"mss_bytes": payload_bytes_for_mtu(m), "rate_bps": rate, "base_rtt_s": base,
          "ecn_capable": ecn_capable, "delay_filter": delay_filter}
    drive(cc.NSCC(**kw), core.NSCC(**kw), NSCC_ATTRS, t0, steps, base)


@SETTINGS
@given(m=mtu, t0=start, steps=st.lists(ops, max_size=80), base_ref=tb_rtt,
       iw=st.one_of(st.none(), st.integers(1, 100_000), st.floats(1.0, 1e6)),
       delay_filter=st.sampled_from(cc.DELAY_FILTERS))
def test_nscc_learnt_base_rtt(m, t0, steps, base_ref, iw, delay_filter):
    """The QP default: no parameters, the base RTT learnt from samples (None until then)."""
    kw = {"mss_bytes": payload_bytes_for_mtu(m), "initial_window_bytes": iw, "delay_filter": delay_filter}
    drive(cc.NSCC(**kw), core.NSCC(**kw), NSCC_ATTRS, t0, steps, base_ref)


@SETTINGS
@given(mss=st.integers(-10, 9000),
       rate=st.one_of(st.none(), st.integers(-5, 2_000_000_000), st.floats(-1.0, 1e10)),
       base=st.one_of(st.none(), st.floats(-1e-3, 0.1)),
       target_factor=st.floats(0.0, 3.0), alpha=st.floats(0.0, 2.0), fi=st.floats(0.0, 4.0),
       gamma=st.floats(0.0, 1.0), md_floor=st.floats(0.0, 1.0), ecn_capable=st.booleans(),
       quick_adapt=st.booleans(), delay_md_factor=st.floats(0.0, 5.0),
       iw=st.one_of(st.none(), st.integers(-10, 10**6), st.floats(-1.0, 1e7)),
       max_cwnd=st.one_of(st.just(math.inf), st.integers(-10, 10**7), st.floats(-1.0, 1e8)),
       min_target=st.floats(-1e-3, 1e-2), t0=start, steps=st.lists(ops, max_size=60),
       delay_filter=st.sampled_from([*cc.DELAY_FILTERS, "htsim", ""]))
def test_nscc_random_params(mss, rate, base, target_factor, alpha, fi, gamma, md_floor,
                            ecn_capable, quick_adapt, delay_md_factor, iw, max_cwnd, min_target,
                            t0, steps, delay_filter):
    kw = {"mss_bytes": mss, "rate_bps": rate, "base_rtt_s": base, "target_factor": target_factor,
          "alpha": alpha, "fi": fi, "gamma": gamma, "md_floor": md_floor,
          "ecn_capable": ecn_capable, "quick_adapt": quick_adapt,
          "delay_md_factor": delay_md_factor, "initial_window_bytes": iw,
          "max_cwnd_bytes": max_cwnd, "min_target_s": min_target, "delay_filter": delay_filter,
          "unknown_key": 1}
    pair = construct(cc.NSCC, core.NSCC, **kw)
    if pair is not None:
        drive(*pair, NSCC_ATTRS, t0, steps, base if base and base > 0 else 1e-3)


# A window below its ceiling, moved by every rule: ACKs around the target delay (both sides
# of 1x and 2x), ECN echoes, losses; each increase and decrease is then seen unclamped.
nscc_walk = st.lists(st.one_of(
    st.tuples(st.just("ack"), st.floats(0.0, 2e-3), st.integers(0, 20_000),
              st.tuples(st.just("rel"), st.floats(0.9, 4.0)), st.booleans()),
    st.tuples(st.just("ack"), st.floats(0.0, 2e-3), st.integers(0, 20_000),
              st.tuples(st.just("rel"), st.floats(0.9, 4.0)), st.just(False)),
    st.tuples(st.just("lost"), st.floats(0.0, 2e-3), st.integers(0, 20_000), st.booleans()),
    st.tuples(st.just("app"), st.floats(0.0, 2e-3), st.booleans()),
), max_size=80)


@SETTINGS
@given(base=st.floats(2e-4, 5e-3), rate=st.one_of(st.none(), tb_rate), mss=st.integers(500, 9000),
       target_factor=st.floats(0.5, 2.0), alpha=st.floats(0.01, 2.0), fi=st.floats(0.01, 4.0),
       gamma=st.floats(0.01, 1.0), md_floor=st.floats(0.0, 0.9), ecn_capable=st.booleans(),
       quick_adapt=st.booleans(), delay_md_factor=st.floats(1.0, 3.0),
       iw_pkts=st.integers(1, 50), min_target=st.floats(0.0, 1e-3), t0=start, steps=nscc_walk,
       delay_filter=st.sampled_from(cc.DELAY_FILTERS))
def test_nscc_random_gains(base, rate, mss, target_factor, alpha, fi, gamma, md_floor, ecn_capable,
                           quick_adapt, delay_md_factor, iw_pkts, min_target, t0, steps, delay_filter):
    kw = {"mss_bytes": mss, "rate_bps": rate, "base_rtt_s": base, "target_factor": target_factor,
          "alpha": alpha, "fi": fi, "gamma": gamma, "md_floor": md_floor,
          "ecn_capable": ecn_capable, "quick_adapt": quick_adapt,
          "delay_md_factor": delay_md_factor, "initial_window_bytes": iw_pkts * mss,
          "min_target_s": min_target, "delay_filter": delay_filter}
    py, nat = cc.NSCC(**kw), core.NSCC(**kw)
    for c in (py, nat):   # from below the ceiling (a start at line rate would clamp)
        c.on_packets_lost(now=t0, lost_bytes=int(c.cwnd_bytes * 0.7), trimmed=False)
    drive(py, nat, NSCC_ATTRS, t0, steps, base)


@SETTINGS
@given(mss=st.integers(1, 9000),
       window=st.one_of(st.just(math.inf), st.integers(0, 10**7), st.floats(0.0, 1e8)),
       t0=start, steps=st.lists(ops, max_size=40))
def test_fixed_window(mss, window, t0, steps):
    kw = {"mss_bytes": mss, "window_bytes": window, "rate_bps": 1e9}
    drive(cc.FixedWindow(**kw), core.FixedWindow(**kw), FIXED_ATTRS, t0, steps, 1e-3)


# ---- DCQCN ---------------------------------------------------------------------------------

@SETTINGS
@given(rate=tb_rate, base=tb_rtt, m=mtu, t0=start, steps=st.lists(st.one_of(ops, burst, wake, wake), max_size=60))
def test_dcqcn_testbed_params(rate, base, m, t0, steps):
    kw = {"mss_bytes": payload_bytes_for_mtu(m), **dcqcn_qp(rate, base, m)["cc_params"]}
    drive(dcqcn.DCQCN(**kw), core.DCQCN(**kw), DCQCN_ATTRS, t0, steps, base)


# The paced QP's loop: it wakes at the controller's deadlines and sends; CNPs in between.
qp_loop = st.lists(st.one_of(
    wake, wake, wake,
    st.tuples(st.just("wake"), st.sampled_from(["alpha", "timer"]), st.integers(0, 3), size),
    st.tuples(st.just("cnp"), st.floats(0.0, 1e-3)),
    st.tuples(st.just("sent"), st.floats(0.0, 1e-4), size)), min_size=20, max_size=120)


@SETTINGS
@given(rate=tb_rate, base=tb_rtt, m=mtu, t0=start, steps=qp_loop)
def test_dcqcn_qp_loop(rate, base, m, t0, steps):
    kw = {"mss_bytes": payload_bytes_for_mtu(m), **dcqcn_qp(rate, base, m)["cc_params"]}
    drive(dcqcn.DCQCN(**kw), core.DCQCN(**kw), DCQCN_ATTRS, t0, steps, base)


# Bounded so that a controller kept below line rate (no increase step) does not loop over
# seconds of microsecond timers in Python: at most ~2e4 timer events per step.
dcqcn_steps = st.lists(st.one_of(
    st.tuples(st.just("sent"), st.floats(0.0, 0.05), size),
    st.tuples(st.just("burst"), st.floats(0.0, 0.05), size, st.integers(1, 300), st.floats(0.0, 1e-4)),
    st.tuples(st.just("cnp"), st.floats(0.0, 0.05)),
    st.tuples(st.just("next"), st.floats(0.0, 0.05), size),
    st.tuples(st.just("ack"), st.floats(0.0, 0.05), st.integers(0, 10_000), rtt, st.booleans()),
    st.tuples(st.just("lost"), st.floats(0.0, 0.05), st.integers(0, 10_000), st.booleans()),
    st.tuples(st.just("can"), st.integers(0, 10**6), size), wake), max_size=60)


def opt(s):
    return st.one_of(st.none(), s)


@SETTINGS
@given(mss=st.integers(-5, 9000),
       rate=st.one_of(st.none(), st.integers(-5, 0), st.floats(-1.0, 0.0),
                      st.integers(100_000, 2_000_000_000), st.floats(1e5, 1e10)),
       base=opt(st.floats(-1e-3, 0.1)), g=st.one_of(st.floats(-0.1, 1.1), st.sampled_from([0, 1])),
       initial_alpha=st.floats(-0.1, 1.1),
       alpha_period=opt(st.one_of(st.floats(-1e-3, 0.0), st.floats(1e-250, 0.1))),
       timer=opt(st.floats(2.5e-6, 0.1)),
       byte_counter=opt(st.one_of(st.floats(-10.0, 1e6), st.floats(100.0, 5000.0))),
       stages=st.integers(-1, 8), ai=opt(st.floats(-1.0, 1e8)), hai=opt(st.floats(-1.0, 1e9)),
       min_rate=opt(st.one_of(st.integers(-5, 10**8), st.floats(-1.0, 1e9))),
       overhead=st.integers(-1, 200), burst=opt(st.floats(-1.0, 1e5)),
       ref_rtt=st.one_of(st.just(dcqcn.REF_RTT_S), st.floats(-1e-6, 1e-3)), t0=start,
       steps=dcqcn_steps)
def test_dcqcn_random_params(mss, rate, base, g, initial_alpha, alpha_period, timer, byte_counter,
                             stages, ai, hai, min_rate, overhead, burst, ref_rtt, t0, steps):
    kw = {"mss_bytes": mss, "rate_bps": rate, "base_rtt_s": base, "g": g,
          "initial_alpha": initial_alpha, "alpha_period_s": alpha_period, "timer_s": timer,
          "byte_counter_bytes": byte_counter, "fast_recovery_stages": stages,
          "ai_rate_bps": ai, "hai_rate_bps": hai, "min_rate_bps": min_rate,
          "overhead_bytes": overhead, "burst_bytes": burst, "ref_rtt_s": ref_rtt, "ecn_capable": 1}
    pair = construct(dcqcn.DCQCN, core.DCQCN, **kw)
    if pair is None:
        return
    py, nat = pair
    # A timer far below the step (or no rate increase at all) would loop for long in Python.
    if nat.timer_s < 1e-5 or (nat.ai_rate_bps == 0 and nat.hai_rate_bps == 0) or \
            nat.byte_counter_bytes < 100.0:
        return
    now = drive(py, nat, DCQCN_ATTRS, t0, steps, base if base and base > 0 else 1e-3, 0.05) + 0.01
    py.advance(now)
    nat.advance(now)
    assert_state(py, nat, DCQCN_ATTRS, "advance")


@SETTINGS
@given(rate=st.one_of(st.integers(-5, 10**10), st.floats(-1.0, 1e11)),
       base=st.floats(-1e-3, 0.1), ref_rtt=st.one_of(st.just(dcqcn.REF_RTT_S), st.floats(-1e-6, 1e-3)),
       ref_rate=st.one_of(st.just(dcqcn.REF_RATE_BPS), st.floats(1e6, 1e11)))
def test_dcqcn_scaling(rate, base, ref_rtt, ref_rate):
    for py_f, nat_f, args in ((dcqcn.time_scale, core.dcqcn_time_scale, (base, ref_rtt)),
                              (dcqcn.scaled_cnp_interval_s, core.dcqcn_scaled_cnp_interval_s,
                               (base, ref_rtt)),
                              (dcqcn.scaled_params, core.dcqcn_scaled_params,
                               (rate, base, ref_rtt, ref_rate))):
        try:
            a = py_f(*args)
        except ValueError:
            with pytest.raises(ValueError):
                nat_f(*args)
            continue
        assert same(a, nat_f(*args)), (py_f.__name__, args)


@SETTINGS
@given(interval=st.one_of(st.floats(-1.0, 1.0), st.just(0.0), tb_rtt.map(dcqcn.scaled_cnp_interval_s)),
       t0=start, steps=st.lists(dt, max_size=60))
def test_cnp_pacer(interval, t0, steps):
    pair = construct(lambda **k: dcqcn.CnpPacer(k["i"]), lambda **k: core.CnpPacer(k["i"]), i=interval)
    if pair is None:
        return
    py, nat = pair
    now = t0
    assert_state(py, nat, PACER_ATTRS, "init")
    for i, step in enumerate(steps):
        now += step
        assert py.on_ce(now) is nat.on_ce(now), f"step {i}"
        assert_state(py, nat, PACER_ATTRS, f"step {i}")


# ---- RTT estimator -------------------------------------------------------------------------

rtt_ops = st.lists(st.one_of(
    st.tuples(st.just("sample"), st.one_of(st.just(0.0), st.floats(1e-6, 0.2), st.floats(0.2, 100.0))),
    st.tuples(st.just("floor"), st.one_of(st.floats(-1.0, 0.2), st.floats(0.2, 200.0), st.just(0.0))),
), max_size=60)


@SETTINGS
@given(timeout=st.integers(0, 24), time_scale=st.one_of(st.just(1.0), st.floats(1e-3, 1e3)),
       min_rto=st.one_of(st.just(0.0), st.floats(0.0, 2.0)),
       initial=st.one_of(st.just(0.0), st.just(rto.INITIAL_RTO_S), st.floats(-1.0, 5.0)),
       linear=st.integers(0, 8), steps=rtt_ops)
def test_rtt_estimator(timeout, time_scale, min_rto, initial, linear, steps):
    """The QP's use: a floor from mrc_timeout_s, samples, new floors; the whole retry ladder
    (backoff_s for every retry number past the 30-doubling cap) after every step."""
    floor = rto.mrc_timeout_s(timeout, time_scale, min_rto)
    assert same(floor, core.mrc_timeout_s(timeout, time_scale, min_rto))
    pair = construct(lambda **k: rto.RttEstimator(k["f"], k["i"]),
                     lambda **k: core.RttEstimator(k["f"], k["i"]), f=floor, i=initial)
    if pair is None:
        return
    py, nat = pair

    def check(where):
        assert_state(py, nat, RTT_ATTRS, where)
        for timeouts in range(linear + 34):
            a, b = py.backoff_s(timeouts, linear), nat.backoff_s(timeouts, linear)
            assert same(a, b), f"{where}: backoff_s({timeouts}, {linear}) {a!r} {b!r}"

    check("init")
    for i, (kind, x) in enumerate(steps):
        if kind == "sample":
            py.sample(x)
            nat.sample(x)
        else:
            try:
                py.set_floor(x)
            except ValueError:
                with pytest.raises(ValueError):
                    nat.set_floor(x)
            else:
                nat.set_floor(x)
        check(f"step {i} {kind}({x!r})")


@SETTINGS
@given(time_scale=st.one_of(st.just(1.0), st.floats(1e-6, 1e6), st.integers(1, 1000)),
       min_rto=st.one_of(st.just(0.0), st.floats(0.0, 1e3)))
def test_mrc_timeout_s(time_scale, min_rto):
    """Every mrc.h exponent (0..24) and beyond, up to where Python's 2**n stops converting."""
    for timeout in list(range(0, 64)) + [100, 1000, 1023]:
        assert same(rto.mrc_timeout_s(timeout, time_scale, min_rto),
                    core.mrc_timeout_s(timeout, time_scale, min_rto)), timeout
    for timeout in (-1, -30, 1024, 5000):
        with pytest.raises((ValueError, OverflowError)):
            rto.mrc_timeout_s(timeout, time_scale, min_rto)
        with pytest.raises(ValueError):
            core.mrc_timeout_s(timeout, time_scale, min_rto)


def test_native_names_and_pacing_flag():
    """The registry names and which controller paces (the QP's _paced test)."""
    for py, nat in ((cc.FixedWindow(mss_bytes=1000), core.FixedWindow(mss_bytes=1000)),
                    (cc.NSCC(mss_bytes=1000), core.NSCC(mss_bytes=1000)),
                    (dcqcn.DCQCN(mss_bytes=1000, rate_bps=1e9), core.DCQCN(mss_bytes=1000, rate_bps=1e9))):
        assert py.name == nat.name
        assert nat.paced is (type(py).next_send_time is not cc.CongestionControl.next_send_time)
