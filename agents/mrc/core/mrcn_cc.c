/* Congestion control dispatch and the fixed window: agents/mrc/cc.py's CongestionControl
 * base class and FixedWindow. NSCC is in mrcn_nscc.c, DCQCN in mrcn_dcqcn.c. */
#include <math.h>

#include "mrcn.h"
#include "mrcn_cc.h"

int mrcn_cc_init_fixed(mrcn_cc *cc, uint64_t mss_bytes, double window_bytes)
{
    if (mss_bytes == 0)   /* CongestionControl.__init__: mss_bytes must be positive */
        return MRCN_EINVAL;
    cc->kind = MRCN_CC_FIXED;
    cc->mss_bytes = mss_bytes;
    cc->cwnd_bytes = window_bytes;
    return MRCN_OK;
}

int mrcn_cc_init_nscc(mrcn_cc *cc, uint64_t mss_bytes, const mrcn_nscc_params *p)
{
    if (mss_bytes == 0)
        return MRCN_EINVAL;
    cc->kind = MRCN_CC_NSCC;
    cc->mss_bytes = mss_bytes;
    cc->cwnd_bytes = INFINITY;
    return mrcn_nscc_init(cc, p);
}

int mrcn_cc_init_dcqcn(mrcn_cc *cc, uint64_t mss_bytes, const mrcn_dcqcn_params *p)
{
    if (mss_bytes == 0)
        return MRCN_EINVAL;
    cc->kind = MRCN_CC_DCQCN;
    cc->mss_bytes = mss_bytes;
    cc->cwnd_bytes = INFINITY;   /* the base class's window: DCQCN has none */
    return mrcn_dcqcn_init(cc, p);
}

const char *mrcn_cc_name(const mrcn_cc *cc)
{
    switch (cc->kind) {
    case MRCN_CC_NSCC: return "uet-1.0-nscc";
    case MRCN_CC_DCQCN: return "dcqcn";
    default: return "fixed";
    }
}

int mrcn_cc_paced(const mrcn_cc *cc)
{
    return cc->kind == MRCN_CC_DCQCN;
}

int mrcn_cc_fixed_base_rtt_s(const mrcn_cc *cc, double *out)
{
    if (cc->kind != MRCN_CC_NSCC || !cc->u.nscc.base_rtt_fixed || !cc->u.nscc.has_base_rtt)
        return 0;
    *out = cc->u.nscc.base_rtt_s;
    return 1;
}

int mrcn_cc_can_send(const mrcn_cc *cc, uint64_t inflight_bytes, uint64_t size_bytes)
{
    if (cc->kind == MRCN_CC_DCQCN)   /* DCQCN.can_send: no window */
        return 1;
    /* CongestionControl.can_send: always one packet when idle. */
    return inflight_bytes == 0 || (double)(inflight_bytes + size_bytes) <= cc->cwnd_bytes;
}

void mrcn_cc_on_packet_sent(mrcn_cc *cc, double now, uint64_t size_bytes)
{
    if (cc->kind == MRCN_CC_DCQCN)
        mrcn_dcqcn_on_packet_sent(&cc->u.dcqcn, now, size_bytes);
}

void mrcn_cc_on_packets_acked(mrcn_cc *cc, double now, uint64_t acked_bytes, int has_rtt,
                              double rtt_s, int ecn)
{
    if (cc->kind == MRCN_CC_NSCC)
        mrcn_nscc_on_packets_acked(cc, now, acked_bytes, has_rtt, rtt_s, ecn);
}

void mrcn_cc_on_packets_lost(mrcn_cc *cc, double now, uint64_t lost_bytes, int trimmed)
{
    /* DCQCN does not react to loss (RoCE expects PFC): the base class's no-op. */
    if (cc->kind == MRCN_CC_NSCC)
        mrcn_nscc_on_packets_lost(cc, now, lost_bytes, trimmed);
}

void mrcn_cc_set_app_limited(mrcn_cc *cc, int limited)
{
    if (cc->kind != MRCN_CC_NSCC)
        return;
    cc->u.nscc.app_limited = limited != 0;
    if (limited)
        cc->u.nscc.epoch_app_limited = 1;
}

void mrcn_cc_on_cnp(mrcn_cc *cc, double now)
{
    if (cc->kind == MRCN_CC_DCQCN)
        mrcn_dcqcn_on_cnp(&cc->u.dcqcn, now);
}

double mrcn_cc_next_send_time(mrcn_cc *cc, double now, uint64_t size_bytes)
{
    (void)size_bytes;   /* DCQCN charges the size on send, not here */
    if (cc->kind == MRCN_CC_DCQCN)
        return mrcn_dcqcn_next_send_time(&cc->u.dcqcn, now);
    return now;
}
