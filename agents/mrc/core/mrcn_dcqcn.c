/* DCQCN (RoCEv2), the twin of agents/mrc/dcqcn.py: the reaction point (rate RC paced,
 * target RT, alpha, timer and byte-counter stages), the NP's CNP pacer and the scaling of
 * the paper's constants to the emulated fabric. Sources and the algorithm: dcqcn.py's
 * docstrings (Zhu et al., SIGCOMM 2015, section 3). Float expressions keep Python's order. */
#include <math.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_cc.h"
#include "mrcn_pyfloat.h"

int mrcn_dcqcn_time_scale(double base_rtt_s, double ref_rtt_s, double *out)
{
    if (base_rtt_s <= 0 || ref_rtt_s <= 0)
        return MRCN_EINVAL;
    *out = base_rtt_s / ref_rtt_s;
    return MRCN_OK;
}

int mrcn_dcqcn_scaled_cnp_interval_s(double base_rtt_s, double ref_rtt_s, double *out)
{
    double ts;
    int rc = mrcn_dcqcn_time_scale(base_rtt_s, ref_rtt_s, &ts);
    if (rc < 0)
        return rc;
    *out = MRCN_DCQCN_CNP_INTERVAL_S * ts;
    return MRCN_OK;
}

int mrcn_dcqcn_scaled_params(double rate_bps, double base_rtt_s, double ref_rtt_s,
                             double ref_rate_bps, mrcn_dcqcn_scaled *out)
{
    double ts;
    if (rate_bps <= 0)
        return MRCN_EINVAL;
    int rc = mrcn_dcqcn_time_scale(base_rtt_s, ref_rtt_s, &ts);
    if (rc < 0)
        return rc;
    double bdp_ratio = rate_bps * base_rtt_s / (ref_rate_bps * ref_rtt_s);
    out->alpha_period_s = MRCN_DCQCN_ALPHA_PERIOD_S * ts;
    out->timer_s = MRCN_DCQCN_TIMER_S * ts;
    out->byte_counter_bytes = MRCN_DCQCN_BYTE_COUNTER_BYTES * bdp_ratio;
    out->ai_rate_bps = MRCN_DCQCN_AI_RATE_BPS * rate_bps / ref_rate_bps;
    out->hai_rate_bps = MRCN_DCQCN_HAI_RATE_BPS * rate_bps / ref_rate_bps;
    out->min_rate_bps = MRCN_DCQCN_MIN_RATE_FRACTION * rate_bps;
    return MRCN_OK;
}

void mrcn_dcqcn_params_default(mrcn_dcqcn_params *p, double rate_bps)
{
    p->rate_bps = rate_bps;
    p->has_base_rtt = 0;
    p->base_rtt_s = 0.0;
    p->g = MRCN_DCQCN_G;
    p->initial_alpha = 1.0;
    p->has_alpha_period = p->has_timer = p->has_byte_counter = 0;
    p->alpha_period_s = p->timer_s = p->byte_counter_bytes = 0.0;
    p->fast_recovery_stages = MRCN_DCQCN_FAST_RECOVERY_STAGES;
    p->has_ai_rate = p->has_hai_rate = p->has_min_rate = 0;
    p->ai_rate_bps = p->hai_rate_bps = p->min_rate_bps = 0.0;
    p->overhead_bytes = 0;
    p->has_burst = 0;
    p->burst_bytes = 0.0;
    p->ref_rtt_s = MRCN_DCQCN_REF_RTT_S;
}

int mrcn_dcqcn_init(mrcn_cc *cc, const mrcn_dcqcn_params *p)
{
    mrcn_dcqcn *d = &cc->u.dcqcn;
    mrcn_dcqcn_scaled s;
    int rc;
    if (p->rate_bps <= 0)
        return MRCN_EINVAL;
    /* Without a base RTT: the paper's microsecond timers (ref_rtt_s is then not used). */
    if (p->has_base_rtt)
        rc = mrcn_dcqcn_scaled_params(p->rate_bps, p->base_rtt_s, p->ref_rtt_s,
                                      MRCN_DCQCN_REF_RATE_BPS, &s);
    else
        rc = mrcn_dcqcn_scaled_params(p->rate_bps, MRCN_DCQCN_REF_RTT_S, MRCN_DCQCN_REF_RTT_S,
                                      MRCN_DCQCN_REF_RATE_BPS, &s);
    if (rc < 0)
        return rc;
    d->rate_bps = p->rate_bps;
    d->has_base_rtt = p->has_base_rtt;
    d->base_rtt_s = p->has_base_rtt ? p->base_rtt_s : 0.0;
    d->g = p->g;
    d->alpha_period_s = p->has_alpha_period ? p->alpha_period_s : s.alpha_period_s;
    d->timer_s = p->has_timer ? p->timer_s : s.timer_s;
    d->byte_counter_bytes = p->has_byte_counter ? p->byte_counter_bytes : s.byte_counter_bytes;
    d->fast_recovery_stages = p->fast_recovery_stages;
    d->ai_rate_bps = p->has_ai_rate ? p->ai_rate_bps : s.ai_rate_bps;
    d->hai_rate_bps = p->has_hai_rate ? p->hai_rate_bps : s.hai_rate_bps;
    d->min_rate_bps = p->has_min_rate ? p->min_rate_bps : s.min_rate_bps;
    d->overhead_bytes = p->overhead_bytes;
    d->burst_bytes = p->has_burst ? p->burst_bytes : (double)cc->mss_bytes;
    if (!(0 <= p->g && p->g <= 1) || !(0 <= p->initial_alpha && p->initial_alpha <= 1))
        return MRCN_EINVAL;
    /* Python: min(alpha_period_s, timer_s, byte_counter_bytes) <= 0, left to right. */
    if (mrcn_py_min(mrcn_py_min(d->alpha_period_s, d->timer_s), d->byte_counter_bytes) <= 0 ||
        !(0 < d->min_rate_bps && d->min_rate_bps <= d->rate_bps) || d->fast_recovery_stages < 0 ||
        d->ai_rate_bps < 0 || d->hai_rate_bps < 0 || d->burst_bytes < 0)
        return MRCN_EINVAL;
    d->rc_bps = d->rt_bps = d->rate_bps;
    d->alpha = p->initial_alpha;
    d->started = 0;
    d->alpha_next = d->timer_next = 0.0;
    d->t_stage = d->b_stage = 0;
    d->bytes = 0.0;
    d->next_tx = -INFINITY;
    d->cnps = d->fr_events = d->ai_events = d->hai_events = 0;
    return MRCN_OK;
}

/* DCQCN._start: (re)start alpha's period and the rate-increase timer at now. */
static void start(mrcn_dcqcn *d, double now)
{
    d->started = 1;
    d->alpha_next = now + d->alpha_period_s;
    d->timer_next = now + d->timer_s;
}

/* DCQCN._increase: one rate-increase event after a stage counter moved. */
static void increase(mrcn_dcqcn *d)
{
    int64_t f = d->fast_recovery_stages, t = d->t_stage, b = d->b_stage;
    if (t > f && b > f) {   /* hyper increase */
        d->rt_bps += (double)((t < b ? t : b) - f) * d->hai_rate_bps;
        d->hai_events++;
    } else if (t > f || b > f) {   /* additive increase, equation (4) */
        d->rt_bps += d->ai_rate_bps;
        d->ai_events++;
    } else {   /* fast recovery, equation (3) */
        d->fr_events++;
    }
    d->rt_bps = mrcn_py_min(d->rt_bps, d->rate_bps);
    d->rc_bps = mrcn_py_min(mrcn_py_max((d->rt_bps + d->rc_bps) / 2, d->min_rate_bps), d->rate_bps);
}

/* Python's n = int((now - next) // period) + 1, the periods elapsed since a deadline, as the
 * float Python turns n into when it meets a float (pow, n * period): the floor quotient is
 * integral, so quotient + 1.0 rounds the same exact integer the same way. Kept a double so
 * that a period far below the elapsed time (n above 2**63) gives Python's value; Python's
 * OverflowError for an infinite quotient (a period under ~1e-300 s) has no twin here. */
static double periods_due(double now, double next, double period)
{
    return mrcn_py_floordiv(now - next, period) + 1.0;
}

/* n as a stage count: exact below 2**53; saturates instead of overflowing (2**63 timer
 * periods are beyond any clock a QP runs on; Python's int would keep counting). */
static int64_t stage_count(double n)
{
    return n < 9.2e18 ? (int64_t)n : INT64_MAX;
}

void mrcn_dcqcn_advance(mrcn_dcqcn *d, double now)
{
    if (!d->started) {
        start(d, now);
        return;
    }
    if (now >= d->alpha_next) {   /* equation (2), once per elapsed K */
        double n = periods_due(now, d->alpha_next, d->alpha_period_s);
        d->alpha *= pow(1 - d->g, n);
        d->alpha_next += n * d->alpha_period_s;
    }
    while (now >= d->timer_next) {
        if (d->rc_bps >= d->rate_bps && d->rt_bps >= d->rate_bps) {   /* at the ceiling: count */
            double n = periods_due(now, d->timer_next, d->timer_s);
            int64_t c = stage_count(n);
            d->t_stage = d->t_stage > INT64_MAX - c ? INT64_MAX : d->t_stage + c;
            d->timer_next += n * d->timer_s;
            break;
        }
        d->timer_next += d->timer_s;
        d->t_stage += 1;
        increase(d);
    }
}

void mrcn_dcqcn_on_cnp(mrcn_dcqcn *d, double now)
{
    /* Equation (1): cut RC by alpha / 2, RT = old RC, raise alpha; restart the stages. */
    mrcn_dcqcn_advance(d, now);
    d->cnps++;
    d->rt_bps = d->rc_bps;
    d->rc_bps = mrcn_py_max(d->rc_bps * (1 - d->alpha / 2), d->min_rate_bps);
    d->alpha = (1 - d->g) * d->alpha + d->g;
    d->t_stage = d->b_stage = 0;
    d->bytes = 0.0;
    start(d, now);
}

void mrcn_dcqcn_on_packet_sent(mrcn_dcqcn *d, double now, uint64_t size_bytes)
{
    mrcn_dcqcn_advance(d, now);
    d->bytes += (double)size_bytes;
    while (d->bytes >= d->byte_counter_bytes) {   /* one event per B bytes */
        d->bytes -= d->byte_counter_bytes;
        d->b_stage += 1;
        increase(d);
    }
    double rate = d->rc_bps;
    /* Python: (size + overhead) * 8 is an int, exact, then divided as a float. */
    d->next_tx = mrcn_py_max(d->next_tx, now - d->burst_bytes * 8 / rate) +
        (double)((size_bytes + d->overhead_bytes) * 8) / rate;
}

double mrcn_dcqcn_next_send_time(mrcn_dcqcn *d, double now)
{
    mrcn_dcqcn_advance(d, now);
    return d->next_tx;
}

int mrcn_cnp_pacer_init(mrcn_cnp_pacer *p, double interval_s)
{
    if (interval_s < 0)
        return MRCN_EINVAL;
    p->interval_s = interval_s;
    p->last = -INFINITY;
    p->sent = p->suppressed = 0;
    return MRCN_OK;
}

int mrcn_cnp_pacer_on_ce(mrcn_cnp_pacer *p, double now)
{
    if (now - p->last >= p->interval_s) {
        p->last = now;
        p->sent++;
        return 1;
    }
    p->suppressed++;
    return 0;
}
