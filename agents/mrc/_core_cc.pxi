# Congestion control and the RTT estimator (agents/mrc/core/mrcn_cc.h, mrcn_rtt.h), the twins
# of agents.mrc.cc (FixedWindow, NSCC), agents.mrc.dcqcn (DCQCN, CnpPacer, scaled_params) and
# agents.mrc.rto (RttEstimator, mrc_timeout_s). Same keyword arguments; Python's None is a
# has_* flag in C. Private Python attributes the differential test reads keep their names.
from libc.stdint cimport int64_t, uint64_t

from agents.mrc.cc import DELAY_FILTERS as _DELAY_FILTERS   # index = enum mrcn_nscc_delay_filter

cdef extern from "mrcn.h":
    const char *mrcn_strerror(int status)

cdef extern from "mrcn_cc.h":
    ctypedef struct mrcn_nscc_params:
        int has_rate
        double rate_bps
        int has_base_rtt
        double base_rtt_s
        double target_factor, alpha, fi, gamma, md_floor
        int ecn_capable, quick_adapt
        double delay_md_factor
        int has_initial_window
        double initial_window_bytes
        double max_cwnd_bytes, min_target_s
        int delay_filter

    ctypedef struct mrcn_nscc:
        int has_rate
        double rate_bps
        double target_factor, min_target_s, max_cwnd_limit_bytes, min_cwnd_bytes
        int has_base_rtt
        double base_rtt_s
        int has_bdp
        double bdp_bytes
        double max_cwnd_bytes, target_s
        int base_rtt_fixed
        double alpha, fi, gamma, md_floor
        int ecn_capable
        double delay_md_factor
        int quick_adapt
        double last_md, epoch_start
        uint64_t epoch_acked
        int epoch_loss
        int app_limited, epoch_app_limited
        uint64_t md_count, qa_count, ecn_count, acks, noop_count, qa_app_limited
        int delay_filter
        double avg_delay_s
        uint64_t md_filtered

    ctypedef struct mrcn_dcqcn_params:
        double rate_bps
        int has_base_rtt
        double base_rtt_s
        double g, initial_alpha
        int has_alpha_period
        double alpha_period_s
        int has_timer
        double timer_s
        int has_byte_counter
        double byte_counter_bytes
        int64_t fast_recovery_stages
        int has_ai_rate
        double ai_rate_bps
        int has_hai_rate
        double hai_rate_bps
        int has_min_rate
        double min_rate_bps
        uint64_t overhead_bytes
        int has_burst
        double burst_bytes
        double ref_rtt_s

    ctypedef struct mrcn_dcqcn:
        double rate_bps
        int has_base_rtt
        double base_rtt_s
        double g, alpha_period_s, timer_s, byte_counter_bytes
        int64_t fast_recovery_stages
        double ai_rate_bps, hai_rate_bps, min_rate_bps
        uint64_t overhead_bytes
        double burst_bytes
        double rc_bps, rt_bps, alpha
        int started
        double alpha_next, timer_next
        int64_t t_stage, b_stage
        double bytes
        double next_tx
        uint64_t cnps, fr_events, ai_events, hai_events

    ctypedef union mrcn_cc_u:
        mrcn_nscc nscc
        mrcn_dcqcn dcqcn

    ctypedef struct mrcn_cc:
        int kind
        uint64_t mss_bytes
        double cwnd_bytes
        mrcn_cc_u u

    ctypedef struct mrcn_dcqcn_scaled:
        double alpha_period_s, timer_s, byte_counter_bytes, ai_rate_bps, hai_rate_bps
        double min_rate_bps

    ctypedef struct mrcn_cnp_pacer:
        double interval_s
        double last
        uint64_t sent, suppressed

    int mrcn_dcqcn_time_scale(double base_rtt_s, double ref_rtt_s, double *out)
    int mrcn_dcqcn_scaled_cnp_interval_s(double base_rtt_s, double ref_rtt_s, double *out)
    int mrcn_dcqcn_scaled_params(double rate_bps, double base_rtt_s, double ref_rtt_s,
                                 double ref_rate_bps, mrcn_dcqcn_scaled *out)
    void mrcn_nscc_params_default(mrcn_nscc_params *p)
    void mrcn_dcqcn_params_default(mrcn_dcqcn_params *p, double rate_bps)
    int mrcn_cc_init_fixed(mrcn_cc *cc, uint64_t mss_bytes, double window_bytes)
    int mrcn_cc_init_nscc(mrcn_cc *cc, uint64_t mss_bytes, const mrcn_nscc_params *p)
    int mrcn_cc_init_dcqcn(mrcn_cc *cc, uint64_t mss_bytes, const mrcn_dcqcn_params *p)
    const char *mrcn_cc_name(const mrcn_cc *cc)
    int mrcn_cc_paced(const mrcn_cc *cc)
    int mrcn_cc_fixed_base_rtt_s(const mrcn_cc *cc, double *out)
    int mrcn_cc_can_send(const mrcn_cc *cc, uint64_t inflight_bytes, uint64_t size_bytes)
    void mrcn_cc_on_packet_sent(mrcn_cc *cc, double now, uint64_t size_bytes)
    void mrcn_cc_on_packets_acked(mrcn_cc *cc, double now, uint64_t acked_bytes, int has_rtt,
                                  double rtt_s, int ecn)
    void mrcn_cc_on_packets_lost(mrcn_cc *cc, double now, uint64_t lost_bytes, int trimmed)
    void mrcn_cc_on_cnp(mrcn_cc *cc, double now)
    void mrcn_cc_set_app_limited(mrcn_cc *cc, int limited)
    double mrcn_cc_next_send_time(mrcn_cc *cc, double now, uint64_t size_bytes)
    void mrcn_dcqcn_advance(mrcn_dcqcn *d, double now)
    int mrcn_cnp_pacer_init(mrcn_cnp_pacer *p, double interval_s)
    int mrcn_cnp_pacer_on_ce(mrcn_cnp_pacer *p, double now)

cdef extern from "mrcn_rtt.h":
    ctypedef struct mrcn_rtt:
        int has_srtt
        double srtt_s, rttvar_s
        uint64_t samples
        double floor_s, initial_s, rto_s
    int mrcn_mrc_timeout_s(int64_t timeout, double time_scale, double min_rto_s, double *out)
    int mrcn_rtt_init(mrcn_rtt *r, double floor_s, double initial_s)
    int mrcn_rtt_set_floor(mrcn_rtt *r, double floor_s)
    void mrcn_rtt_sample(mrcn_rtt *r, double rtt_s)
    double mrcn_rtt_backoff_s(const mrcn_rtt *r, int64_t timeouts, int64_t linear_cnt)


cdef int _check(int rc, str what) except -1:
    """Raise ValueError (where the Python engine raises it) for a negative status."""
    if rc < 0:
        raise ValueError(f"{what}: {mrcn_strerror(rc).decode()}")
    return 0


cdef uint64_t _mss(mss_bytes) except? 0:
    if mss_bytes <= 0:
        raise ValueError("mss_bytes must be positive")
    return mss_bytes


def dcqcn_time_scale(base_rtt_s, ref_rtt_s=12e-6):
    """agents.mrc.dcqcn.time_scale."""
    cdef double out = 0.0
    _check(mrcn_dcqcn_time_scale(base_rtt_s, ref_rtt_s, &out), "time_scale")
    return out


def dcqcn_scaled_cnp_interval_s(base_rtt_s, ref_rtt_s=12e-6):
    """agents.mrc.dcqcn.scaled_cnp_interval_s."""
    cdef double out = 0.0
    _check(mrcn_dcqcn_scaled_cnp_interval_s(base_rtt_s, ref_rtt_s, &out), "scaled_cnp_interval_s")
    return out


def dcqcn_scaled_params(rate_bps, base_rtt_s, ref_rtt_s=12e-6, ref_rate_bps=40e9):
    """agents.mrc.dcqcn.scaled_params."""
    cdef mrcn_dcqcn_scaled s
    _check(mrcn_dcqcn_scaled_params(rate_bps, base_rtt_s, ref_rtt_s, ref_rate_bps, &s),
           "scaled_params")
    return {"alpha_period_s": s.alpha_period_s, "timer_s": s.timer_s,
            "byte_counter_bytes": s.byte_counter_bytes, "ai_rate_bps": s.ai_rate_bps,
            "hai_rate_bps": s.hai_rate_bps, "min_rate_bps": s.min_rate_bps}


cdef class CongestionControl:
    """The C controller behind the agents.mrc.cc.CongestionControl callbacks."""

    cdef mrcn_cc cc

    @property
    def name(self):
        return mrcn_cc_name(&self.cc).decode()

    @property
    def paced(self):
        return bool(mrcn_cc_paced(&self.cc))

    @property
    def fixed_base_rtt_s(self):
        """The configured base RTT (s) loss.py trusts, or None (mrcn_cc_fixed_base_rtt_s)."""
        cdef double out = 0.0
        return out if mrcn_cc_fixed_base_rtt_s(&self.cc, &out) else None

    @property
    def mss_bytes(self):
        return self.cc.mss_bytes

    @property
    def cwnd_bytes(self):
        return self.cc.cwnd_bytes

    def can_send(self, *, inflight_bytes, size_bytes):
        return bool(mrcn_cc_can_send(&self.cc, inflight_bytes, size_bytes))

    def on_packet_sent(self, *, double now, size_bytes):
        mrcn_cc_on_packet_sent(&self.cc, now, size_bytes)

    def on_packets_acked(self, *, double now, acked_bytes, rtt_s, ecn=False):
        mrcn_cc_on_packets_acked(&self.cc, now, acked_bytes, rtt_s is not None,
                                 0.0 if rtt_s is None else <double>rtt_s, 1 if ecn else 0)

    def on_packets_lost(self, *, double now, lost_bytes, trimmed=False):
        mrcn_cc_on_packets_lost(&self.cc, now, lost_bytes, 1 if trimmed else 0)

    def on_cnp(self, *, double now):
        mrcn_cc_on_cnp(&self.cc, now)

    def set_app_limited(self, limited):
        mrcn_cc_set_app_limited(&self.cc, 1 if limited else 0)

    def next_send_time(self, *, double now, size_bytes):
        return mrcn_cc_next_send_time(&self.cc, now, size_bytes)


cdef class FixedWindow(CongestionControl):
    """agents.mrc.cc.FixedWindow."""

    def __init__(self, *, mss_bytes, window_bytes=float("inf"), **_ignored):
        _check(mrcn_cc_init_fixed(&self.cc, _mss(mss_bytes), window_bytes), "FixedWindow")


cdef class NSCC(CongestionControl):
    """agents.mrc.cc.NSCC (simplified UET 1.0 NSCC)."""

    def __init__(self, *, mss_bytes, rate_bps=None, base_rtt_s=None, target_factor=1.0,
                 alpha=0.5, fi=1.0, gamma=0.8, md_floor=0.5, ecn_capable=False,
                 quick_adapt=True, delay_md_factor=2.0, initial_window_bytes=None,
                 max_cwnd_bytes=float("inf"), min_target_s=0.0005, delay_filter="ack", **_ignored):
        cdef mrcn_nscc_params p
        mrcn_nscc_params_default(&p)
        if delay_filter not in _DELAY_FILTERS:
            raise ValueError(f"delay_filter={delay_filter!r}: expected one of {', '.join(_DELAY_FILTERS)}")
        p.delay_filter = _DELAY_FILTERS.index(delay_filter)
        p.has_rate = rate_bps is not None
        p.rate_bps = 0.0 if rate_bps is None else rate_bps
        p.has_base_rtt = base_rtt_s is not None
        p.base_rtt_s = 0.0 if base_rtt_s is None else base_rtt_s
        p.target_factor, p.alpha, p.fi, p.gamma, p.md_floor = \
            target_factor, alpha, fi, gamma, md_floor
        p.ecn_capable = 1 if ecn_capable else 0
        p.quick_adapt = 1 if quick_adapt else 0
        p.delay_md_factor = delay_md_factor
        p.has_initial_window = initial_window_bytes is not None
        p.initial_window_bytes = 0.0 if initial_window_bytes is None else initial_window_bytes
        p.max_cwnd_bytes, p.min_target_s = max_cwnd_bytes, min_target_s
        _check(mrcn_cc_init_nscc(&self.cc, _mss(mss_bytes), &p), "NSCC")

    def counters(self):
        """agents.mrc.cc.NSCC.counters."""
        n = &self.cc.u.nscc
        out = {"acks": n.acks, "ecn": n.ecn_count, "noop": n.noop_count, "md": n.md_count,
               "qa": n.qa_count, "qa_app_limited": n.qa_app_limited}
        if _DELAY_FILTERS[n.delay_filter] == "ewma":
            out["md_filtered"] = n.md_filtered
        return out

    @property
    def delay_filter(self):
        return _DELAY_FILTERS[self.cc.u.nscc.delay_filter]

    @property
    def avg_delay_s(self):
        return self.cc.u.nscc.avg_delay_s

    @property
    def md_filtered(self):
        return self.cc.u.nscc.md_filtered

    @property
    def rate_bps(self):
        return self.cc.u.nscc.rate_bps if self.cc.u.nscc.has_rate else None

    @property
    def base_rtt_s(self):
        return self.cc.u.nscc.base_rtt_s if self.cc.u.nscc.has_base_rtt else None

    @property
    def bdp_bytes(self):
        return self.cc.u.nscc.bdp_bytes if self.cc.u.nscc.has_bdp else None

    @property
    def base_rtt_fixed(self):
        return bool(self.cc.u.nscc.base_rtt_fixed)

    @property
    def target_factor(self):
        return self.cc.u.nscc.target_factor

    @property
    def min_target_s(self):
        return self.cc.u.nscc.min_target_s

    @property
    def max_cwnd_limit_bytes(self):
        return self.cc.u.nscc.max_cwnd_limit_bytes

    @property
    def min_cwnd_bytes(self):
        return self.cc.u.nscc.min_cwnd_bytes

    @property
    def max_cwnd_bytes(self):
        return self.cc.u.nscc.max_cwnd_bytes

    @property
    def target_s(self):
        return self.cc.u.nscc.target_s

    @property
    def alpha(self):
        return self.cc.u.nscc.alpha

    @property
    def fi(self):
        return self.cc.u.nscc.fi

    @property
    def gamma(self):
        return self.cc.u.nscc.gamma

    @property
    def md_floor(self):
        return self.cc.u.nscc.md_floor

    @property
    def ecn_capable(self):
        return bool(self.cc.u.nscc.ecn_capable)

    @property
    def quick_adapt(self):
        return bool(self.cc.u.nscc.quick_adapt)

    @property
    def delay_md_factor(self):
        return self.cc.u.nscc.delay_md_factor

    @property
    def _last_md(self):
        return self.cc.u.nscc.last_md

    @property
    def _epoch_start(self):
        return self.cc.u.nscc.epoch_start

    @property
    def _epoch_acked(self):
        return self.cc.u.nscc.epoch_acked

    @property
    def _epoch_loss(self):
        return bool(self.cc.u.nscc.epoch_loss)

    @property
    def md_count(self):
        return self.cc.u.nscc.md_count

    @property
    def qa_count(self):
        return self.cc.u.nscc.qa_count

    @property
    def qa_app_limited(self):
        return self.cc.u.nscc.qa_app_limited

    @property
    def _app_limited(self):
        return bool(self.cc.u.nscc.app_limited)

    @property
    def _epoch_app_limited(self):
        return bool(self.cc.u.nscc.epoch_app_limited)

    @property
    def ecn_count(self):
        return self.cc.u.nscc.ecn_count

    @property
    def acks(self):
        return self.cc.u.nscc.acks

    @property
    def noop_count(self):
        return self.cc.u.nscc.noop_count


cdef class DCQCN(CongestionControl):
    """agents.mrc.dcqcn.DCQCN (the reaction point, paced)."""

    def __init__(self, *, mss_bytes, rate_bps, base_rtt_s=None, g=1 / 256, initial_alpha=1.0,
                 alpha_period_s=None, timer_s=None, byte_counter_bytes=None,
                 fast_recovery_stages=5, ai_rate_bps=None, hai_rate_bps=None,
                 min_rate_bps=None, overhead_bytes=0, burst_bytes=None, ref_rtt_s=12e-6,
                 **_ignored):
        cdef mrcn_dcqcn_params p
        cdef uint64_t mss = _mss(mss_bytes)
        if rate_bps is None or rate_bps <= 0:
            raise ValueError("rate_bps (the line rate) must be positive")
        if overhead_bytes < 0:
            raise ValueError("overhead_bytes must be >= 0")
        mrcn_dcqcn_params_default(&p, rate_bps)
        p.has_base_rtt = base_rtt_s is not None
        p.base_rtt_s = 0.0 if base_rtt_s is None else base_rtt_s
        p.g, p.initial_alpha = g, initial_alpha
        p.has_alpha_period = alpha_period_s is not None
        p.alpha_period_s = 0.0 if alpha_period_s is None else alpha_period_s
        p.has_timer = timer_s is not None
        p.timer_s = 0.0 if timer_s is None else timer_s
        p.has_byte_counter = byte_counter_bytes is not None
        p.byte_counter_bytes = 0.0 if byte_counter_bytes is None else byte_counter_bytes
        p.fast_recovery_stages = fast_recovery_stages
        p.has_ai_rate = ai_rate_bps is not None
        p.ai_rate_bps = 0.0 if ai_rate_bps is None else ai_rate_bps
        p.has_hai_rate = hai_rate_bps is not None
        p.hai_rate_bps = 0.0 if hai_rate_bps is None else hai_rate_bps
        p.has_min_rate = min_rate_bps is not None
        p.min_rate_bps = 0.0 if min_rate_bps is None else min_rate_bps
        p.overhead_bytes = overhead_bytes
        p.has_burst = burst_bytes is not None
        p.burst_bytes = 0.0 if burst_bytes is None else burst_bytes
        p.ref_rtt_s = ref_rtt_s
        _check(mrcn_cc_init_dcqcn(&self.cc, mss, &p), "DCQCN")

    def counters(self):
        """agents.mrc.dcqcn.DCQCN.counters."""
        d = &self.cc.u.dcqcn
        return {"rate_bps": d.rc_bps, "target_bps": d.rt_bps, "alpha": d.alpha,
                "cnps": d.cnps, "fr": d.fr_events, "ai": d.ai_events, "hai": d.hai_events}

    def advance(self, double now):
        """DCQCN.advance: run the alpha and rate-increase timers due by now (s)."""
        mrcn_dcqcn_advance(&self.cc.u.dcqcn, now)

    @property
    def rate_bps(self):
        return self.cc.u.dcqcn.rate_bps

    @property
    def base_rtt_s(self):
        return self.cc.u.dcqcn.base_rtt_s if self.cc.u.dcqcn.has_base_rtt else None

    @property
    def g(self):
        return self.cc.u.dcqcn.g

    @property
    def alpha_period_s(self):
        return self.cc.u.dcqcn.alpha_period_s

    @property
    def timer_s(self):
        return self.cc.u.dcqcn.timer_s

    @property
    def byte_counter_bytes(self):
        return self.cc.u.dcqcn.byte_counter_bytes

    @property
    def fast_recovery_stages(self):
        return self.cc.u.dcqcn.fast_recovery_stages

    @property
    def ai_rate_bps(self):
        return self.cc.u.dcqcn.ai_rate_bps

    @property
    def hai_rate_bps(self):
        return self.cc.u.dcqcn.hai_rate_bps

    @property
    def min_rate_bps(self):
        return self.cc.u.dcqcn.min_rate_bps

    @property
    def overhead_bytes(self):
        return self.cc.u.dcqcn.overhead_bytes

    @property
    def burst_bytes(self):
        return self.cc.u.dcqcn.burst_bytes

    @property
    def rc_bps(self):
        return self.cc.u.dcqcn.rc_bps

    @property
    def rt_bps(self):
        return self.cc.u.dcqcn.rt_bps

    @property
    def alpha(self):
        return self.cc.u.dcqcn.alpha

    @property
    def t_stage(self):
        return self.cc.u.dcqcn.t_stage

    @property
    def b_stage(self):
        return self.cc.u.dcqcn.b_stage

    @property
    def cnps(self):
        return self.cc.u.dcqcn.cnps

    @property
    def fr_events(self):
        return self.cc.u.dcqcn.fr_events

    @property
    def ai_events(self):
        return self.cc.u.dcqcn.ai_events

    @property
    def hai_events(self):
        return self.cc.u.dcqcn.hai_events

    @property
    def _started(self):
        return bool(self.cc.u.dcqcn.started)

    @property
    def _alpha_next(self):
        return self.cc.u.dcqcn.alpha_next

    @property
    def _timer_next(self):
        return self.cc.u.dcqcn.timer_next

    @property
    def _bytes(self):
        return self.cc.u.dcqcn.bytes

    @property
    def _next_tx(self):
        return self.cc.u.dcqcn.next_tx


cdef class CnpPacer:
    """agents.mrc.dcqcn.CnpPacer: at most one CNP per interval_s (s) per QP."""

    cdef mrcn_cnp_pacer p

    def __init__(self, double interval_s):
        _check(mrcn_cnp_pacer_init(&self.p, interval_s), "CnpPacer")

    def on_ce(self, double now):
        return bool(mrcn_cnp_pacer_on_ce(&self.p, now))

    @property
    def interval_s(self):
        return self.p.interval_s

    @property
    def _last(self):
        return self.p.last

    @property
    def sent(self):
        return self.p.sent

    @property
    def suppressed(self):
        return self.p.suppressed


def mrc_timeout_s(timeout, time_scale=1.0, min_rto_s=0.0):
    """agents.mrc.rto.mrc_timeout_s, s."""
    cdef double out = 0.0
    _check(mrcn_mrc_timeout_s(timeout, time_scale, min_rto_s, &out), "mrc_timeout_s")
    return out


cdef class RttEstimator:
    """agents.mrc.rto.RttEstimator: RFC 6298 with the mrc.h floor as the least margin."""

    cdef mrcn_rtt r

    def __init__(self, double floor_s, double initial_s=0.0):
        _check(mrcn_rtt_init(&self.r, floor_s, initial_s), "RttEstimator")

    def set_floor(self, double floor_s):
        _check(mrcn_rtt_set_floor(&self.r, floor_s), "RttEstimator.set_floor")

    def sample(self, double rtt_s):
        mrcn_rtt_sample(&self.r, rtt_s)

    def backoff_s(self, int64_t timeouts, int64_t linear_cnt):
        return mrcn_rtt_backoff_s(&self.r, timeouts, linear_cnt)

    @property
    def srtt_s(self):
        return self.r.srtt_s if self.r.has_srtt else None

    @property
    def rttvar_s(self):
        return self.r.rttvar_s

    @property
    def samples(self):
        return self.r.samples

    @property
    def floor_s(self):
        return self.r.floor_s

    @property
    def initial_s(self):
        return self.r.initial_s

    @property
    def rto_s(self):
        return self.r.rto_s
