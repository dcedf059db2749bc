/* Background EV probes: the twin of agents/mrc/probes.py (EVProber). ASSUMED_BAD and
 * UNKNOWN EVs are probed every probe_interval_s; probe_successes consecutive answers
 * restore one. Probe ids are 16 bits; the request carries the requester's send stamp, echoed
 * by the responder; the probe's RTT feeds the EV's statistics, not the RTO. */
#ifndef MRCN_PROBES_H
#define MRCN_PROBES_H

#include <stdint.h>

#include "mrcn.h"
#include "mrcn_codec.h"
#include "mrcn_txq.h"

struct mrcn_req;

typedef struct mrcn_probes {
    uint32_t probe_id;         /* the last probe id sent (u16) */
} mrcn_probes;

/* EVProber.probe_timeout_s: max(config.probe_timeout_s, RTO), s. */
double mrcn_probes_timeout_s(const struct mrcn_req *r);
/* EVProber.send: probe requests appended to ``out``. */
int mrcn_probes_send(struct mrcn_req *r, double now, mrcn_txq *out);
/* EVProber.on_timer: outstanding probes past their deadline fail. */
int mrcn_probes_on_timer(struct mrcn_req *r, double now);
/* EVProber.deadline: 1 and *t, or 0 for None. */
int mrcn_probes_deadline(struct mrcn_req *r, double *t);
/* EVProber.on_response: a probe response (pkt->response set). */
int mrcn_probes_on_response(struct mrcn_req *r, const mrcn_probe *pkt, double now);

#endif
