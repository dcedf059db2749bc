/* RFC 6298 RTT estimator and the mrc.h timeout mapping: agents/mrc/rto.py, operation for
 * operation (Python's max/min argument order, 1 << n as an exact power of two). */
#include <math.h>

#include "mrcn.h"
#include "mrcn_pyfloat.h"
#include "mrcn_rtt.h"

int mrcn_mrc_timeout_s(int64_t timeout, double time_scale, double min_rto_s, double *out)
{
    if (timeout < 0 || timeout > 1023)
        return MRCN_EINVAL;
    /* ldexp(1, n) is 2**n exactly, as Python's float(1 << n). */
    *out = mrcn_py_max(time_scale * 1.024e-6 * ldexp(1.0, (int)timeout), min_rto_s);
    return MRCN_OK;
}

/* RttEstimator._update */
static void update(mrcn_rtt *r)
{
    double rto = !r->has_srtt ? mrcn_py_max(r->floor_s, r->initial_s) :
        r->srtt_s + mrcn_py_max(MRCN_RTT_K * r->rttvar_s, r->floor_s);
    r->rto_s = mrcn_py_min(rto, mrcn_py_max(MRCN_RTT_MAX_RTO_S, r->floor_s));
}

int mrcn_rtt_init(mrcn_rtt *r, double floor_s, double initial_s)
{
    if (initial_s < 0)
        return MRCN_EINVAL;
    r->has_srtt = 0;
    r->srtt_s = 0.0;
    r->rttvar_s = 0.0;
    r->samples = 0;
    r->floor_s = 0.0;
    r->initial_s = initial_s;
    r->rto_s = 0.0;
    return mrcn_rtt_set_floor(r, floor_s);
}

int mrcn_rtt_set_floor(mrcn_rtt *r, double floor_s)
{
    if (floor_s < 0)
        return MRCN_EINVAL;
    r->floor_s = floor_s;
    update(r);
    return MRCN_OK;
}

void mrcn_rtt_sample(mrcn_rtt *r, double rtt_s)
{
    if (!r->has_srtt) {   /* RFC 6298 2.2 */
        r->has_srtt = 1;
        r->srtt_s = rtt_s;
        r->rttvar_s = rtt_s / 2;
    } else {              /* RFC 6298 2.3: RTTVAR first, from the old SRTT */
        double srtt = r->srtt_s;
        r->rttvar_s = (1 - MRCN_RTT_BETA) * r->rttvar_s + MRCN_RTT_BETA * fabs(srtt - rtt_s);
        r->srtt_s = (1 - MRCN_RTT_ALPHA) * srtt + MRCN_RTT_ALPHA * rtt_s;
    }
    r->samples++;
    update(r);
}

double mrcn_rtt_backoff_s(const mrcn_rtt *r, int64_t timeouts, int64_t linear_cnt)
{
    double rto = r->rto_s;
    if (timeouts <= linear_cnt)
        return rto;
    int64_t j = timeouts - linear_cnt;
    if (j > 30)
        j = 30;
    return mrcn_py_min(rto * (double)((int64_t)1 << j), mrcn_py_max(MRCN_RTT_MAX_RTO_S, rto));
}
