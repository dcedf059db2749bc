/* Simplified NSCC (UET 1.0), the twin of agents/mrc/cc.py's NSCC: see its docstring for the
 * algorithm and its sources. Every float expression keeps Python's operand order. */
#include <math.h>

#include "mrcn.h"
#include "mrcn_cc.h"
#include "mrcn_pyfloat.h"

void mrcn_nscc_params_default(mrcn_nscc_params *p)
{
    p->has_rate = 0;
    p->rate_bps = 0.0;
    p->has_base_rtt = 0;
    p->base_rtt_s = 0.0;
    p->target_factor = 1.0;
    p->alpha = 0.5;
    p->fi = 1.0;
    p->gamma = 0.8;
    p->md_floor = 0.5;
    p->ecn_capable = 0;
    p->quick_adapt = 1;
    p->delay_md_factor = 2.0;
    p->has_initial_window = 0;
    p->initial_window_bytes = 0.0;
    p->max_cwnd_bytes = INFINITY;
    p->min_target_s = 0.0005;
    p->delay_filter = MRCN_NSCC_DELAY_ACK;
}

/* NSCC._set_base_rtt */
static void set_base_rtt(mrcn_cc *cc, double base_rtt_s)
{
    mrcn_nscc *n = &cc->u.nscc;
    n->has_base_rtt = 1;
    n->base_rtt_s = base_rtt_s;
    n->target_s = mrcn_py_max(n->target_factor * base_rtt_s, n->min_target_s);
    if (n->has_rate) {
        n->has_bdp = 1;
        n->bdp_bytes = n->rate_bps * base_rtt_s / 8;
        n->max_cwnd_bytes = mrcn_py_max(mrcn_py_min(1.5 * n->bdp_bytes, n->max_cwnd_limit_bytes),
                                        2.0 * (double)cc->mss_bytes);
    }
}

/* NSCC._clamp: cwnd within [min_cwnd, max_cwnd]. */
static void clamp(mrcn_cc *cc)
{
    const mrcn_nscc *n = &cc->u.nscc;
    cc->cwnd_bytes = mrcn_py_min(mrcn_py_max(cc->cwnd_bytes, n->min_cwnd_bytes), n->max_cwnd_bytes);
}

/* NSCC._epoch: end of a base-RTT epoch, quick-adapt if a trim was seen in it and the requester
 * had data all along. */
static void epoch(mrcn_cc *cc, double now)
{
    mrcn_nscc *n = &cc->u.nscc;
    if (!n->has_base_rtt || now - n->epoch_start < n->base_rtt_s)
        return;
    if (n->quick_adapt && n->epoch_loss && (double)n->epoch_acked < cc->cwnd_bytes / 2) {
        if (n->epoch_app_limited) {
            n->qa_app_limited++;
        } else {
            cc->cwnd_bytes = (double)n->epoch_acked;
            n->qa_count++;
            clamp(cc);
        }
    }
    n->epoch_start = now;
    n->epoch_acked = 0;
    n->epoch_loss = 0;
    n->epoch_app_limited = n->app_limited;
}

int mrcn_nscc_init(mrcn_cc *cc, const mrcn_nscc_params *p)
{
    mrcn_nscc *n = &cc->u.nscc;
    double mss = (double)cc->mss_bytes;
    if ((p->has_rate && p->rate_bps <= 0) || (p->has_base_rtt && p->base_rtt_s <= 0))
        return MRCN_EINVAL;
    double iw = !p->has_initial_window ? 10.0 * mss : p->initial_window_bytes;
    if (iw <= 0 || p->max_cwnd_bytes <= 0 || p->min_target_s < 0)
        return MRCN_EINVAL;
    if (p->delay_filter != MRCN_NSCC_DELAY_ACK && p->delay_filter != MRCN_NSCC_DELAY_EWMA)
        return MRCN_EINVAL;
    n->has_rate = p->has_rate;
    n->rate_bps = p->has_rate ? p->rate_bps : 0.0;
    n->target_factor = p->target_factor;
    n->min_target_s = p->min_target_s;
    n->max_cwnd_limit_bytes = p->max_cwnd_bytes;
    n->min_cwnd_bytes = mss;
    n->has_base_rtt = 0;
    n->base_rtt_s = 0.0;
    n->has_bdp = 0;
    n->bdp_bytes = 0.0;
    n->max_cwnd_bytes = mrcn_py_max(p->max_cwnd_bytes, 2.0 * mss);
    n->target_s = p->min_target_s;
    n->base_rtt_fixed = p->has_base_rtt;
    if (p->has_base_rtt)
        set_base_rtt(cc, p->base_rtt_s);
    /* NSCC's start at line rate when the BDP is known, else the initial window. */
    cc->cwnd_bytes = n->has_bdp ? n->max_cwnd_bytes :
        mrcn_py_min(mrcn_py_max(iw, n->min_cwnd_bytes), n->max_cwnd_bytes);
    n->alpha = p->alpha;
    n->fi = p->fi;
    n->gamma = p->gamma;
    n->md_floor = p->md_floor;
    n->ecn_capable = p->ecn_capable != 0;
    n->delay_md_factor = p->delay_md_factor;
    n->quick_adapt = p->quick_adapt != 0;
    n->last_md = -1.0;
    n->epoch_start = 0.0;
    n->epoch_acked = 0;
    n->epoch_loss = 0;
    n->app_limited = n->epoch_app_limited = 0;
    n->md_count = n->qa_count = n->ecn_count = n->acks = n->noop_count = n->qa_app_limited = 0;
    n->delay_filter = p->delay_filter;
    n->avg_delay_s = 0.0;
    n->md_filtered = 0;
    return MRCN_OK;
}

/* NSCC._filter_delay: uet-htsim's UecSrc::update_delay (htsim/sim/uec.cpp); an unmarked sample
 * above the target counts as a quarter of the base RTT. */
static void filter_delay(mrcn_nscc *n, double sample_s, int marked)
{
    if (!marked && sample_s > n->target_s)
        sample_s = n->base_rtt_s * 0.25;
    double w = MRCN_NSCC_DELAY_EWMA_WEIGHT;
    n->avg_delay_s = w * sample_s + (1.0 - w) * n->avg_delay_s;
}

void mrcn_nscc_on_packets_acked(mrcn_cc *cc, double now, uint64_t acked_bytes, int has_rtt,
                                double rtt_s, int ecn)
{
    mrcn_nscc *n = &cc->u.nscc;
    if (has_rtt && rtt_s > 0 && !n->base_rtt_fixed && (!n->has_base_rtt || rtt_s < n->base_rtt_s))
        set_base_rtt(cc, rtt_s);
    n->epoch_acked += acked_bytes;
    epoch(cc, now);
    n->acks++;
    if (ecn)
        n->ecn_count++;
    if (!has_rtt || !n->has_base_rtt)
        return;
    double base = n->base_rtt_s;
    double d = mrcn_py_max(rtt_s - base, 0.0);
    double target = n->target_s;
    int congested = ecn || (!n->ecn_capable && d >= n->delay_md_factor * target);
    int filtered = n->delay_filter == MRCN_NSCC_DELAY_EWMA;
    if (filtered) {
        if (rtt_s >= base) {
            filter_delay(n, d, congested);
        } else {          /* uet-htsim: a sample below the base RTT takes the average's place */
            d = n->avg_delay_s;
            congested = ecn || (!n->ecn_capable && d >= n->delay_md_factor * target);
        }
    }
    if (!congested) {
        if (d < target)   /* proportional increase */
            cc->cwnd_bytes += n->alpha * (double)acked_bytes * (target - d) / target;
        else              /* fair increase */
            cc->cwnd_bytes += n->fi * (double)cc->mss_bytes * (double)acked_bytes / cc->cwnd_bytes;
    } else if (d >= target) {
        double cut = filtered ? n->avg_delay_s : d;
        if (filtered && cut <= target) {
            n->md_filtered++;
        } else if (now - n->last_md >= base) {
            /* multiplicative decrease, at most once per base RTT */
            double factor = cut > 0 ? mrcn_py_max(1.0 - n->gamma * (cut - target) / cut, n->md_floor)
                                    : 1.0;
            cc->cwnd_bytes *= factor;
            n->last_md = now;
            n->md_count++;
        }
    } else {
        n->noop_count++;
    }
    clamp(cc);
}

void mrcn_nscc_on_packets_lost(mrcn_cc *cc, double now, uint64_t lost_bytes, int trimmed)
{
    cc->cwnd_bytes -= (double)lost_bytes;
    if (trimmed) {   /* cc.py: only a trim arms quick-adapt (uet-htsim's NACK) */
        mrcn_nscc *n = &cc->u.nscc;
        n->epoch_loss = 1;
        if (n->delay_filter == MRCN_NSCC_DELAY_EWMA && n->has_base_rtt)
            filter_delay(n, n->base_rtt_s, 1);
    }
    clamp(cc);
    epoch(cc, now);
}
