/* Retransmission timeout, the twin of agents/mrc/rto.py: RFC 6298 SRTT/RTTVAR with the
 * mrc.h timeout mapping as the least margin above SRTT, and the mrc.h retry ladder. Units:
 * seconds (double). See rto.py's module docstring for the sources and the reasoning. */
#ifndef MRCN_RTT_H
#define MRCN_RTT_H

#include <stdint.h>

#define MRCN_RTT_ALPHA (1.0 / 8)     /* RFC 6298 2.3: SRTT gain */
#define MRCN_RTT_BETA (1.0 / 4)      /* RFC 6298 2.3: RTTVAR gain */
#define MRCN_RTT_K 4                 /* RFC 6298 2.3: RTO = SRTT + K * RTTVAR */
#define MRCN_RTT_INITIAL_RTO_S 1.0   /* RFC 6298 2.1 */
#define MRCN_RTT_MAX_RTO_S 60.0      /* RFC 6298 2.5: an upper bound, at least 60 s */

/* rto.RttEstimator; has_srtt 0 is Python's srtt_s None (no sample yet). */
typedef struct mrcn_rtt {
    int has_srtt;
    double srtt_s, rttvar_s;
    uint64_t samples;
    double floor_s, initial_s, rto_s;
} mrcn_rtt;

/* rto.mrc_timeout_s: max(time_scale * 1.024e-6 * 2**timeout, min_rto_s), s. MRCN_EINVAL for
 * a timeout outside 0..1023 (Python raises for a negative shift, and above 1023 the int
 * 2**timeout no longer converts to a float). */
int mrcn_mrc_timeout_s(int64_t timeout, double time_scale, double min_rto_s, double *out);

/* RttEstimator(floor_s, initial_s): MRCN_EINVAL for a negative floor or initial RTO. */
int mrcn_rtt_init(mrcn_rtt *r, double floor_s, double initial_s);
/* set_floor: a new mrc.h timeout; MRCN_EINVAL (state unchanged) for a negative floor. */
int mrcn_rtt_set_floor(mrcn_rtt *r, double floor_s);
/* sample: one RTT measurement (s, >= 0); recomputes rto_s. */
void mrcn_rtt_sample(mrcn_rtt *r, double rtt_s);
/* backoff_s: the timer (s) of a PSN that timed out `timeouts` times, retry.linear_cnt
 * `linear_cnt`: one RTO up to linear_cnt, then RTO * 2**min(timeouts - linear_cnt, 30),
 * capped at max(MAX_RTO_S, RTO). */
double mrcn_rtt_backoff_s(const mrcn_rtt *r, int64_t timeouts, int64_t linear_cnt);

#endif
