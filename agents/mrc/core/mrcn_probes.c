/* Background EV probes: the twin of agents/mrc/probes.py (see mrcn_probes.h). */
#include "mrcn_probes.h"

#include "mrcn_pyfloat.h"
#include "mrcn_requester.h"

double mrcn_probes_timeout_s(const mrcn_req *r)
{
    return mrcn_py_max(r->cfg->probe_timeout_s, r->rtt->rto_s);
}

int mrcn_probes_send(mrcn_req *r, double now, mrcn_txq *out)
{
    uint32_t n = mrcn_ev_probe_targets(r->evs, r->targets, r->evs->cap_info);
    for (uint32_t i = 0; i < n; i++) {
        mrcn_ev_info *info = &r->evs->info[r->targets[i]];
        if (info->probe_outstanding || !(info->probe_due <= now))
            continue;
        r->probes.probe_id = (r->probes.probe_id + 1) & 0xFFFF;
        uint64_t ts = mrcn_req_stamp(r, now);
        mrcn_probe p = {.dest_qpn = r->dest_qpn, .probe_id = (uint16_t)r->probes.probe_id,
                        .req_ev = info->ev, .rsp_ev = info->ev, .timestamp_ns = ts,
                        .response = 0};
        uint8_t *buf = mrcn_txq_reserve(out, MRCN_PROBE_HDR_BYTES + MRCN_CRC_BYTES);
        if (buf == NULL)
            return MRCN_ENOMEM;
        int len = mrcn_encode_probe(&p, buf, MRCN_PROBE_HDR_BYTES + MRCN_CRC_BYTES);
        if (len < 0)
            return len;
        int rc = mrcn_txq_commit(out, (size_t)len, info->ev);
        if (rc < 0)
            return rc;
        info->probe_outstanding = true;
        info->probe_id = r->probes.probe_id;
        info->probe_deadline = now + mrcn_probes_timeout_s(r);
        info->probe_due = now + r->cfg->probe_interval_s;
        info->probes_sent++;
    }
    return MRCN_OK;
}

int mrcn_probes_on_timer(mrcn_req *r, double now)
{
    uint32_t n = mrcn_ev_probe_targets(r->evs, r->targets, r->evs->cap_info);
    for (uint32_t i = 0; i < n; i++) {   /* the targets as listed before any result */
        mrcn_ev_info *info = &r->evs->info[r->targets[i]];
        if (info->probe_outstanding && info->probe_deadline <= now) {
            int a = mrcn_ev_probe_result(r->evs, info->ev, false, now, r->cfg->probe_successes);
            int rc = mrcn_req_drain_ev(r);
            if (a < 0)
                return a;
            if (rc < 0)
                return rc;
        }
    }
    return MRCN_OK;
}

int mrcn_probes_deadline(mrcn_req *r, double *out)
{
    uint32_t n = mrcn_ev_probe_targets(r->evs, r->targets, r->evs->cap_info);
    int has = 0;
    double best = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        const mrcn_ev_info *info = &r->evs->info[r->targets[i]];
        double t = info->probe_outstanding ? info->probe_deadline : info->probe_due;
        if (!has || t < best) {
            best = t;
            has = 1;
        }
    }
    *out = best;
    return has;
}

int mrcn_probes_on_response(mrcn_req *r, const mrcn_probe *pkt, double now)
{
    mrcn_ev_info *info = mrcn_ev_get(r->evs, pkt->req_ev);
    if (info == NULL || !info->probe_outstanding || info->probe_id != pkt->probe_id)
        return MRCN_OK;
    /* per-EV stats, not the RTO */
    mrcn_loss_rtt_sample(&r->loss, info, now - (double)pkt->timestamp_ns * 1e-9);
    int a = mrcn_ev_probe_result(r->evs, pkt->req_ev, true, now, r->cfg->probe_successes);
    int rc = mrcn_req_drain_ev(r);
    return a < 0 ? a : rc;
}
