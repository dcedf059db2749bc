/* Per-QP congestion control, the twin of agents/mrc/cc.py (CongestionControl, FixedWindow,
 * NSCC) and agents/mrc/dcqcn.py (DCQCN, CnpPacer, scaled_params). Units: bytes, seconds
 * (double, the caller's clock as the Python engine passes `now`), bits/s.
 *
 * One struct, mrcn_cc, with a kind tag: the window controllers (fixed, NSCC) and DCQCN's
 * paced reaction point share cwnd_bytes and the callbacks below, as the Python subclasses
 * share the CongestionControl interface. The algorithms live in mrcn_cc.c (dispatch,
 * fixed window), mrcn_nscc.c and mrcn_dcqcn.c.
 *
 * Python's None (an optional parameter or state) is a has_* flag beside the value; the value
 * is then unused. Python ints (bytes, counters, stages) are u64/i64: no value a QP reaches
 * in practice wraps (2**64 bytes acked), and every int meets float arithmetic below 2**53,
 * where the (double) conversion is exact, as Python's. */
#ifndef MRCN_CC_H
#define MRCN_CC_H

#include <stdint.h>

enum mrcn_cc_kind {
    MRCN_CC_FIXED = 0,   /* cc.FixedWindow, "fixed" */
    MRCN_CC_NSCC = 1,    /* cc.NSCC, "uet-1.0-nscc" */
    MRCN_CC_DCQCN = 2,   /* dcqcn.DCQCN, "dcqcn" */
};

/* dcqcn.py constants (paper values, see there for the sources). */
#define MRCN_DCQCN_REF_RATE_BPS 40e9
#define MRCN_DCQCN_REF_RTT_S 12e-6
#define MRCN_DCQCN_G (1.0 / 256)
#define MRCN_DCQCN_CNP_INTERVAL_S 50e-6
#define MRCN_DCQCN_ALPHA_PERIOD_S 55e-6
#define MRCN_DCQCN_TIMER_S 55e-6
#define MRCN_DCQCN_BYTE_COUNTER_BYTES 10e6
#define MRCN_DCQCN_FAST_RECOVERY_STAGES 5
#define MRCN_DCQCN_AI_RATE_BPS 40e6
#define MRCN_DCQCN_HAI_RATE_BPS 400e6
#define MRCN_DCQCN_MIN_RATE_FRACTION 0.01

/* NSCC's delay_filter (cc.DELAY_FILTERS): the decrease uses the marked ACK's delay, or
 * uet-htsim's filtered delay (cc.NSCC._filter_delay). */
enum mrcn_nscc_delay_filter {
    MRCN_NSCC_DELAY_ACK = 0,
    MRCN_NSCC_DELAY_EWMA = 1,
};
/* cc.DELAY_EWMA_WEIGHT: uet-htsim's UecSrc::_delay_alpha. */
#define MRCN_NSCC_DELAY_EWMA_WEIGHT 0.0125

/* NSCC constructor keywords (cc.NSCC.__init__); mrcn_nscc_params_default() sets Python's
 * defaults: no rate, no base RTT, no initial window (10 packets), unbounded max_cwnd, the
 * ACK's own delay. */
typedef struct mrcn_nscc_params {
    int has_rate;              double rate_bps;
    int has_base_rtt;          double base_rtt_s;
    double target_factor, alpha, fi, gamma, md_floor;
    int ecn_capable, quick_adapt;
    double delay_md_factor;
    int has_initial_window;    double initial_window_bytes;
    double max_cwnd_bytes, min_target_s;
    int delay_filter;          /* enum mrcn_nscc_delay_filter */
} mrcn_nscc_params;

/* NSCC state: the attributes of cc.NSCC of the same names (underscored ones without it). */
typedef struct mrcn_nscc {
    int has_rate;              double rate_bps;
    double target_factor, min_target_s, max_cwnd_limit_bytes, min_cwnd_bytes;
    int has_base_rtt;          double base_rtt_s;
    int has_bdp;               double bdp_bytes;
    double max_cwnd_bytes, target_s;
    int base_rtt_fixed;
    double alpha, fi, gamma, md_floor;
    int ecn_capable;
    double delay_md_factor;
    int quick_adapt;
    double last_md;            /* s, -1.0 before the first decrease */
    double epoch_start;        /* s */
    uint64_t epoch_acked;      /* bytes acked in this epoch */
    int epoch_loss;            /* a trim was seen in this epoch: quick-adapt at its end */
    int app_limited;           /* the requester has no new data to send */
    int epoch_app_limited;     /* ... at some time in this epoch: no quick-adapt */
    uint64_t md_count, qa_count, ecn_count, acks, noop_count, qa_app_limited;
    int delay_filter;          /* enum mrcn_nscc_delay_filter */
    double avg_delay_s;        /* s, uet-htsim's _avg_delay (MRCN_NSCC_DELAY_EWMA) */
    uint64_t md_filtered;      /* marked ACKs above target whose average spared the window */
} mrcn_nscc;

/* DCQCN constructor keywords (dcqcn.DCQCN.__init__); a has_* flag 0 is Python's None, the
 * scaled default. mrcn_dcqcn_params_default() sets Python's defaults for a line rate. */
typedef struct mrcn_dcqcn_params {
    double rate_bps;
    int has_base_rtt;          double base_rtt_s;
    double g, initial_alpha;
    int has_alpha_period;      double alpha_period_s;
    int has_timer;             double timer_s;
    int has_byte_counter;      double byte_counter_bytes;
    int64_t fast_recovery_stages;
    int has_ai_rate;           double ai_rate_bps;
    int has_hai_rate;          double hai_rate_bps;
    int has_min_rate;          double min_rate_bps;
    uint64_t overhead_bytes;
    int has_burst;             double burst_bytes;
    double ref_rtt_s;
} mrcn_dcqcn_params;

/* DCQCN reaction point state: dcqcn.DCQCN's attributes of the same names (not `cuts`, which
 * the Python engine sets to 0 and never changes). */
typedef struct mrcn_dcqcn {
    double rate_bps;
    int has_base_rtt;          double base_rtt_s;
    double g, alpha_period_s, timer_s, byte_counter_bytes;
    int64_t fast_recovery_stages;
    double ai_rate_bps, hai_rate_bps, min_rate_bps;
    uint64_t overhead_bytes;
    double burst_bytes;
    double rc_bps, rt_bps, alpha;
    int started;
    double alpha_next, timer_next;   /* s: next alpha decay, next rate-increase timer */
    int64_t t_stage, b_stage;
    double bytes;                    /* bytes towards the next byte-counter event */
    double next_tx;                  /* s, earliest send time of the next packet; -inf */
    uint64_t cnps, fr_events, ai_events, hai_events;
} mrcn_dcqcn;

typedef struct mrcn_cc {
    int kind;                  /* enum mrcn_cc_kind */
    uint64_t mss_bytes;        /* payload bytes of a full data packet */
    double cwnd_bytes;         /* window, bytes; +inf: unbounded (fixed default, DCQCN) */
    union {
        mrcn_nscc nscc;
        mrcn_dcqcn dcqcn;
    } u;
} mrcn_cc;

/* dcqcn.scaled_params(rate_bps, base_rtt_s, ref_rtt_s, ref_rate_bps). */
typedef struct mrcn_dcqcn_scaled {
    double alpha_period_s, timer_s, byte_counter_bytes, ai_rate_bps, hai_rate_bps,
        min_rate_bps;
} mrcn_dcqcn_scaled;

/* dcqcn.time_scale: base_rtt_s / ref_rtt_s; MRCN_EINVAL for a non-positive RTT. */
int mrcn_dcqcn_time_scale(double base_rtt_s, double ref_rtt_s, double *out);
/* dcqcn.scaled_cnp_interval_s: 50 us x time_scale; MRCN_EINVAL as time_scale. */
int mrcn_dcqcn_scaled_cnp_interval_s(double base_rtt_s, double ref_rtt_s, double *out);
/* dcqcn.scaled_params; MRCN_EINVAL for a non-positive rate or RTT. */
int mrcn_dcqcn_scaled_params(double rate_bps, double base_rtt_s, double ref_rtt_s,
                             double ref_rate_bps, mrcn_dcqcn_scaled *out);

void mrcn_nscc_params_default(mrcn_nscc_params *p);
void mrcn_dcqcn_params_default(mrcn_dcqcn_params *p, double rate_bps);

/* Constructors: 0, or MRCN_EINVAL where Python raises ValueError (cc is then unusable). */
int mrcn_cc_init_fixed(mrcn_cc *cc, uint64_t mss_bytes, double window_bytes);
int mrcn_cc_init_nscc(mrcn_cc *cc, uint64_t mss_bytes, const mrcn_nscc_params *p);
int mrcn_cc_init_dcqcn(mrcn_cc *cc, uint64_t mss_bytes, const mrcn_dcqcn_params *p);

/* Registry name of the kind ("fixed", "uet-1.0-nscc", "dcqcn"), as the Python `name`. */
const char *mrcn_cc_name(const mrcn_cc *cc);
/* 1 when the controller paces (overrides next_send_time: DCQCN), else 0. */
int mrcn_cc_paced(const mrcn_cc *cc);

/* loss.py's guard for the reordering window: the controller's base RTT (s) when it is a
 * configured one (NSCC with base_rtt_s given: `base_rtt_fixed`); returns 1 and sets *out,
 * else 0 (learnt or no base RTT, fixed window, DCQCN: no `base_rtt_fixed` attribute). */
int mrcn_cc_fixed_base_rtt_s(const mrcn_cc *cc, double *out);

/* The CongestionControl callbacks (cc.py), one for one. can_send returns 1 or 0. */
int mrcn_cc_can_send(const mrcn_cc *cc, uint64_t inflight_bytes, uint64_t size_bytes);
void mrcn_cc_on_packet_sent(mrcn_cc *cc, double now, uint64_t size_bytes);
/* has_rtt 0: rtt_s is Python's None (no delay sample on this ACK). */
void mrcn_cc_on_packets_acked(mrcn_cc *cc, double now, uint64_t acked_bytes, int has_rtt,
                              double rtt_s, int ecn);
void mrcn_cc_on_packets_lost(mrcn_cc *cc, double now, uint64_t lost_bytes, int trimmed);
/* CongestionControl.set_app_limited: the requester ran out of new data (1) or got more (0). */
void mrcn_cc_set_app_limited(mrcn_cc *cc, int limited);
void mrcn_cc_on_cnp(mrcn_cc *cc, double now);
/* Earliest send time (s) of a packet of size_bytes; `now` for a window controller. */
double mrcn_cc_next_send_time(mrcn_cc *cc, double now, uint64_t size_bytes);

/* NSCC and DCQCN internals the dispatcher calls (cc->kind must match). */
int mrcn_nscc_init(mrcn_cc *cc, const mrcn_nscc_params *p);
void mrcn_nscc_on_packets_acked(mrcn_cc *cc, double now, uint64_t acked_bytes, int has_rtt,
                                double rtt_s, int ecn);
void mrcn_nscc_on_packets_lost(mrcn_cc *cc, double now, uint64_t lost_bytes, int trimmed);
int mrcn_dcqcn_init(mrcn_cc *cc, const mrcn_dcqcn_params *p);
/* DCQCN.advance: run the alpha and rate-increase timers due by now (s). */
void mrcn_dcqcn_advance(mrcn_dcqcn *d, double now);
void mrcn_dcqcn_on_cnp(mrcn_dcqcn *d, double now);
void mrcn_dcqcn_on_packet_sent(mrcn_dcqcn *d, double now, uint64_t size_bytes);
double mrcn_dcqcn_next_send_time(mrcn_dcqcn *d, double now);

/* dcqcn.CnpPacer, the notification point's rate limit: one CNP per interval_s per QP. */
typedef struct mrcn_cnp_pacer {
    double interval_s;
    double last;               /* s, -inf before the first CNP */
    uint64_t sent, suppressed;
} mrcn_cnp_pacer;

/* MRCN_EINVAL for a negative interval (Python's ValueError). */
int mrcn_cnp_pacer_init(mrcn_cnp_pacer *p, double interval_s);
/* A CE-marked data packet arrived at now (s): 1 if a CNP is due now, else 0. */
int mrcn_cnp_pacer_on_ce(mrcn_cnp_pacer *p, double now);

#endif
