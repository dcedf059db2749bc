/* The MRC queue pair: the twin of agents/mrc/qp.py (see mrcn_qp.h). Each function names the
 * QP method it mirrors. */
#include "mrcn_qp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcn_codec.h"

static const mrcn_qp_attr ATTR_DEFAULT = {8, 8, 128, 128, 8, 7, 7};   /* QPAttr() */

/* Completions the responder made in its last call, into the QP's queue in order. */
static int drain_resp(mrcn_qp *qp)
{
    for (size_t i = 0; i < qp->resp.n_wcs; i++) {
        mrcn_event *e = mrcn_events_push(&qp->events);
        if (e == NULL)
            return MRCN_ENOMEM;
        e->kind = MRCN_EVENT_RECV;
        e->time = qp->resp.wcs[i].time;
        e->u.recv = qp->resp.wcs[i];
    }
    qp->resp.n_wcs = 0;
    return MRCN_OK;
}

static int on_error(void *ctx, double now, const char *reason)
{
    return mrcn_qp_enter_error((mrcn_qp *)ctx, now, reason);
}

/* QP._rto_floor_s: mrc_timeout_s(attr.timeout, time_scale, min_rto_s). */
static int rto_floor(const mrcn_qp *qp, const mrcn_qp_attr *attr, double *out)
{
    return mrcn_mrc_timeout_s(attr->timeout, qp->cfg.time_scale, qp->cfg.min_rto_s, out);
}

/* QP._build: fresh halves and RTT estimator (construction and RST; the controller stays).
 * ``wr_base``: the requester's first post index. */
static int build(mrcn_qp *qp, uint64_t wr_base)
{
    double floor_s;
    int rc = rto_floor(qp, &qp->attr, &floor_s);
    if (rc < 0 || (rc = mrcn_rtt_init(&qp->rtt, floor_s, qp->cfg.initial_rto_s)) < 0)
        return rc;
    rc = mrcn_req_init(&qp->req, qp->qpn, &qp->cfg, &qp->cc, &qp->rtt, &qp->events, on_error,
                       qp, wr_base);
    mrcn_responder_config rcfg = {qp->cfg.sack_every, qp->cfg.ack_delay_s,
                                  qp->cfg.ack_coalesce_s, qp->cfg.always_skip_ce_run};
    mrcn_responder_init(&qp->resp, qp->qpn, &rcfg, qp->cfg.rc, qp->mem, qp->mem_len,
                        qp->has_mem);
    if (rc < 0)
        return rc;
    qp->has_cnp = qp->cfg.cnp_interval_s > 0;
    if (qp->has_cnp && (rc = mrcn_cnp_pacer_init(&qp->cnp, qp->cfg.cnp_interval_s)) < 0)
        return rc;
    qp->n_cnp_out = 0;
    qp->has_pace_at = 0;
    qp->cnp_received = 0;
    return MRCN_OK;
}

int mrcn_qp_create(mrcn_qp **out, uint32_t qpn, const mrcn_qp_config *cfg, const mrcn_cc *cc,
                   uint64_t rng_state, uint64_t rng_inc, uint8_t *mem, size_t mem_len,
                   int has_mem)
{
    *out = NULL;
    if (cfg->payload_bytes == 0 || cfg->max_burst == 0 || cfg->sack_every < 1)
        return MRCN_EINVAL;
    mrcn_qp *qp = calloc(1, sizeof *qp);
    if (qp == NULL)
        return MRCN_ENOMEM;
    qp->qpn = qpn;
    qp->state = MRCN_QPS_RST;
    qp->cfg = *cfg;
    qp->cc = *cc;
    qp->paced = mrcn_cc_paced(cc);
    qp->rng.state = rng_state;
    qp->rng.inc = rng_inc;
    qp->attr = ATTR_DEFAULT;
    qp->mem = mem;
    qp->mem_len = mem_len;
    qp->has_mem = has_mem;
    int rc = build(qp, 0);
    if (rc < 0) {
        mrcn_qp_destroy(qp);
        return rc;
    }
    *out = qp;
    return MRCN_OK;
}

void mrcn_qp_destroy(mrcn_qp *qp)
{
    if (qp == NULL)
        return;
    mrcn_req_free(&qp->req);
    mrcn_responder_free(&qp->resp);
    mrcn_ev_set_destroy(qp->evs);
    mrcn_events_free(&qp->events);
    free(qp->cnp_out);
    free(qp);
}

/* ---- state machine --------------------------------------------------------------------- */

int mrcn_qp_transition_ok(int from, int to)
{
    if (to == MRCN_QPS_ERR || to == MRCN_QPS_RST)
        return 1;
    return (from == MRCN_QPS_RST && to == MRCN_QPS_INIT) ||
           (from == MRCN_QPS_INIT && to == MRCN_QPS_RTR) ||
           (from == MRCN_QPS_RTR && to == MRCN_QPS_RTS) ||
           (from == MRCN_QPS_RTS && to == MRCN_QPS_RTS);
}

int mrcn_qp_init_evs(mrcn_qp *qp, const uint32_t *evs, uint32_t count, uint32_t ev_min_active,
                     uint32_t event_mask)
{
    if (qp->state != MRCN_QPS_RST || qp->evs != NULL)
        return MRCN_ESTATE;
    if (count == 0 || count > UINT32_MAX - MRCN_QP_EV_SPARE)
        return MRCN_EINVAL;
    mrcn_ev_set *set;
    int rc = mrcn_ev_set_create(&set, evs, count, count + MRCN_QP_EV_SPARE, qp->qpn, &qp->rng,
                                ev_min_active, qp->cfg.skip_timeout_s, MRCN_EV_GOOD, event_mask);
    if (rc < 0)
        return rc;
    if ((rc = mrcn_ev_set_select(set, qp->cfg.ev_select)) < 0) {
        mrcn_ev_set_destroy(set);
        return rc;
    }
    set->srtt_s = qp->rtt.has_srtt ? qp->rtt.srtt_s : NAN;   /* skip_timeout_fn */
    if ((rc = mrcn_req_set_evs(&qp->req, set)) < 0) {
        mrcn_ev_set_destroy(set);
        return rc;
    }
    qp->evs = set;
    return MRCN_OK;
}

int mrcn_qp_set_reverse_evs(mrcn_qp *qp, const uint32_t *evs, size_t count)
{
    return mrcn_reverse_set_evs(&qp->resp.reverse, evs, count);
}

void mrcn_qp_set_dest_qpn(mrcn_qp *qp, uint32_t dest_qpn)
{
    qp->dest_qpn = qp->req.dest_qpn = qp->resp.dest_qpn = dest_qpn;
}

int mrcn_qp_set_rq_psn(mrcn_qp *qp, uint32_t psn)
{
    if (psn > MRCN_MAX_PSN || qp->resp.n_chunks || qp->resp.n_imm)
        return MRCN_EINVAL;
    qp->resp.rcv_cum = psn;
    return MRCN_OK;
}

int mrcn_qp_set_sq_psn(mrcn_qp *qp, uint32_t psn)
{
    mrcn_req *r = &qp->req;
    if (psn > MRCN_MAX_PSN || r->wr_head != r->wr_tail || r->psn_assign != r->snd_una)
        return MRCN_EINVAL;
    /* the PSN table is empty: it starts over at the first PSN sent */
    r->psn_assign = r->next_psn = r->snd_una = r->tx_base = psn;
    return MRCN_OK;
}

int mrcn_qp_set_attr(mrcn_qp *qp, int to, const mrcn_qp_attr *attr)
{
    if (to == MRCN_QPS_ERR || to == MRCN_QPS_RST || !mrcn_qp_transition_ok(qp->state, to))
        return MRCN_EINVAL;
    double floor_s;
    int rc = rto_floor(qp, attr, &floor_s);
    if (rc < 0 || (rc = mrcn_responder_set_mpr_dest(&qp->resp, attr->mpr_dest)) < 0)
        return rc;
    qp->attr = qp->req.attr = *attr;
    qp->resp.max_wimm_dest = attr->max_wimm_dest;
    if ((rc = mrcn_rtt_set_floor(&qp->rtt, floor_s)) < 0)
        return rc;
    qp->state = to;
    return MRCN_OK;
}

int mrcn_qp_enter_error(mrcn_qp *qp, double now, const char *reason)
{
    if (qp->state == MRCN_QPS_ERR)
        return MRCN_OK;
    qp->state = MRCN_QPS_ERR;
    mrcn_event *e = mrcn_events_push(&qp->events);
    if (e == NULL)
        return MRCN_ENOMEM;
    e->kind = MRCN_EVENT_ERROR;
    e->time = now;
    strncpy(e->u.reason, reason, MRCN_REASON_BYTES - 1);
    int rc = mrcn_req_flush_writes(&qp->req, now);
    if (rc < 0)
        return rc;
    rc = mrcn_responder_stop(&qp->resp, now);
    int d = drain_resp(qp);
    qp->n_cnp_out = 0;
    qp->has_pace_at = 0;
    return rc < 0 ? rc : d;
}

mrcn_ev_set *mrcn_qp_detach_evs(mrcn_qp *qp)
{
    mrcn_ev_set *set = qp->evs;
    qp->evs = NULL;
    qp->req.evs = NULL;
    return set;
}

int mrcn_qp_drain_ev_set(mrcn_qp *qp, mrcn_ev_set *set)
{
    return mrcn_events_drain_ev_set(&qp->events, set);
}

int mrcn_qp_reset(mrcn_qp *qp)
{
    uint64_t wr_base = qp->req.wr_tail;
    qp->state = MRCN_QPS_RST;
    qp->attr = ATTR_DEFAULT;
    qp->dest_qpn = 0;
    mrcn_req_free(&qp->req);
    mrcn_responder_free(&qp->resp);
    mrcn_ev_set_destroy(qp->evs);
    qp->evs = NULL;
    mrcn_events_clear(&qp->events);
    return build(qp, wr_base);
}

/* ---- API ------------------------------------------------------------------------------- */

int mrcn_qp_post_write(mrcn_qp *qp, uint64_t wr_id, const uint8_t *data, size_t len,
                       uint64_t remote_offset, bool has_imm, uint32_t imm, uint64_t *index)
{
    if (qp->state != MRCN_QPS_RTS)
        return MRCN_ESTATE;
    uint64_t i = qp->req.wr_tail;
    int rc = mrcn_req_post(&qp->req, wr_id, data, len, remote_offset, has_imm, imm);
    if (rc == MRCN_OK && index != NULL)
        *index = i;
    return rc;
}

uint64_t mrcn_qp_writes_released(const mrcn_qp *qp)
{
    return qp->req.wr_head;
}

int mrcn_qp_post_recv(mrcn_qp *qp, uint64_t wr_id)
{
    if (qp->state == MRCN_QPS_RST || qp->state == MRCN_QPS_ERR)
        return MRCN_ESTATE;
    return mrcn_responder_post_recv(&qp->resp, wr_id);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* QP._on_ce: a valid CE-marked data packet arrived; a CNP back on its EV unless paced out. */
static int on_ce(mrcn_qp *qp, const uint8_t *data, size_t len, double now)
{
    uint32_t dq;
    if (mrcn_peek_dest_qpn(data, len, &dq) < 0 || len < 16)
        return MRCN_OK;   /* on_data accepted it: a full header is there */
    if (dq != qp->qpn || !mrcn_cnp_pacer_on_ce(&qp->cnp, now))
        return MRCN_OK;
    if (qp->n_cnp_out == qp->cap_cnp_out) {
        size_t cap = qp->cap_cnp_out ? qp->cap_cnp_out * 2 : 8;
        mrcn_ctrl *c = realloc(qp->cnp_out, cap * sizeof *c);
        if (c == NULL)
            return MRCN_ENOMEM;
        qp->cnp_out = c;
        qp->cap_cnp_out = cap;
    }
    mrcn_ctrl *c = &qp->cnp_out[qp->n_cnp_out];
    mrcn_cnp cnp = {.dest_qpn = qp->dest_qpn, .ev = be32(data + 12), .psn = be32(data + 8)};
    int n = mrcn_encode_cnp(&cnp, c->bytes, sizeof c->bytes);
    if (n < 0)
        return n;
    c->len = (uint32_t)n;
    c->ev = cnp.ev;
    qp->n_cnp_out++;
    return MRCN_OK;
}

int mrcn_qp_receive(mrcn_qp *qp, const uint8_t *data, size_t len, double now, int ecn)
{
    int state = qp->state;
    if (state != MRCN_QPS_RTS && state != MRCN_QPS_RTR)
        return MRCN_OK;
    uint8_t ptype = len > 1 ? data[1] : 0;
    int rc;
    if (ptype == MRCN_PT_DATA) {
        rc = mrcn_responder_on_data(&qp->resp, data, len, now, ecn);
        int d = drain_resp(qp);
        if (rc == MRCN_EPROTO || rc == MRCN_ECRC) {
            qp->bad_packets++;
            return d;
        }
        if (rc < 0)
            return rc;
        if (d < 0)
            return d;
        if (ecn && qp->has_cnp)
            return on_ce(qp, data, len, now);
        return MRCN_OK;
    }
    mrcn_packet pkt;
    if (ptype == MRCN_PT_SACK) {
        if (state != MRCN_QPS_RTS)
            return MRCN_OK;
        if (mrcn_decode(data, len, &pkt) < 0) {
            qp->bad_packets++;
            return MRCN_OK;
        }
        return mrcn_req_on_sack(&qp->req, &pkt.u.sack, now);
    }
    if (mrcn_decode(data, len, &pkt) < 0) {
        qp->bad_packets++;
        return MRCN_OK;
    }
    switch (pkt.type) {
    case MRCN_PT_PROBE_REQ:
    case MRCN_PT_PROBE_RSP:
        if (pkt.u.probe.dest_qpn != qp->qpn)
            break;
        if (pkt.u.probe.response)
            return mrcn_probes_on_response(&qp->req, &pkt.u.probe, now);
        return mrcn_responder_on_probe_req(&qp->resp, &pkt.u.probe);
    case MRCN_PT_NACK:
        if (pkt.u.nack.dest_qpn != qp->qpn)
            break;
        return state == MRCN_QPS_RTS ? mrcn_req_on_nack(&qp->req, &pkt.u.nack, now) : MRCN_OK;
    case MRCN_PT_CNP:
        if (pkt.u.cnp.dest_qpn != qp->qpn)
            break;
        if (state == MRCN_QPS_RTS) {
            qp->cnp_received++;
            mrcn_cc_on_cnp(&qp->cc, now);
        }
        return MRCN_OK;
    default:   /* DATA or SACK cannot reach here (their type byte took the branches above) */
        return MRCN_OK;
    }
    qp->bad_packets++;   /* misaddressed */
    return MRCN_OK;
}

int mrcn_qp_receive_batch(mrcn_qp *qp, const uint8_t *const *data, const size_t *lens,
                          const uint8_t *ce, size_t n, double now)
{
    int state = qp->state, rc;
    if (!qp->has_mem || (state != MRCN_QPS_RTS && state != MRCN_QPS_RTR)) {
        for (size_t i = 0; i < n; i++)
            if ((rc = mrcn_qp_receive(qp, data[i], lens[i], now, ce != NULL && ce[i])) < 0)
                return rc;
        return MRCN_OK;
    }
    mrcn_responder_batch b;
    mrcn_responder_batch_begin(&qp->resp, &b);
    for (size_t i = 0; i < n; i++) {
        int marked = ce != NULL && ce[i];
        rc = mrcn_responder_batch_fast(&qp->resp, &b, data[i], lens[i], marked, now);
        if (rc == 1)
            continue;
        if (rc < 0)
            return rc;
        int before = qp->state;   /* QP._receive_in_batch: False once the state changed */
        if ((rc = mrcn_qp_receive(qp, data[i], lens[i], now, marked)) < 0)
            return rc;
        if (qp->state != before) {   /* e.g. ERR: no fast path now */
            for (size_t j = i + 1; j < n; j++)
                if ((rc = mrcn_qp_receive(qp, data[j], lens[j], now, ce != NULL && ce[j])) < 0)
                    return rc;
            return MRCN_OK;
        }
        mrcn_responder_batch_reload(&qp->resp, &b);
    }
    mrcn_responder_batch_end(&qp->resp, &b, now);
    return MRCN_OK;
}

int mrcn_qp_handle_timer(mrcn_qp *qp, double now)
{
    if (qp->state == MRCN_QPS_RST || qp->state == MRCN_QPS_INIT || qp->state == MRCN_QPS_ERR)
        return MRCN_OK;
    int rc = mrcn_responder_on_timer(&qp->resp, now);
    int d = drain_resp(qp);
    if (rc < 0 || d < 0)
        return rc < 0 ? rc : d;
    if (qp->state == MRCN_QPS_RTS) {
        if ((rc = mrcn_loss_on_timer(&qp->req, now)) < 0)
            return rc;
        if (qp->state == MRCN_QPS_RTS) {
            if ((rc = mrcn_probes_on_timer(&qp->req, now)) < 0)
                return rc;
            return mrcn_qp_expire_skips(qp, now);
        }
    }
    return MRCN_OK;
}

int mrcn_qp_get_timer(const mrcn_qp *cqp, double *deadline)
{
    /* The deadline scans drop stale entries (Python's deadline() pops them too): the object
     * is never const itself, only this view of it. */
    mrcn_qp *qp = (mrcn_qp *)cqp;
    if (qp->state == MRCN_QPS_RST || qp->state == MRCN_QPS_INIT || qp->state == MRCN_QPS_ERR)
        return 0;
    double t = 0.0, d;
    if (qp->evs == NULL)   /* no EV set (an INIT that failed): nothing of the requester's */
        return mrcn_responder_deadline(&qp->resp, deadline);
    int has = mrcn_responder_deadline(&qp->resp, &t);
    if (qp->state == MRCN_QPS_RTS) {
        if (mrcn_loss_deadline(&qp->req, &d) && (!has || d < t)) {
            t = d;
            has = 1;
        }
        if (!qp->evs->all_good) {
            if (mrcn_probes_deadline(&qp->req, &d) && (!has || d < t)) {
                t = d;
                has = 1;
            }
            for (uint32_t i = 0; i < qp->evs->n_info; i++) {
                const mrcn_ev_info *info = &qp->evs->info[i];
                if (info->state == MRCN_EV_SKIP && (!has || info->skip_until < t)) {
                    t = info->skip_until;
                    has = 1;
                }
            }
        }
        if (qp->has_pace_at && (!has || qp->pace_at < t)) {
            t = qp->pace_at;
            has = 1;
        }
    }
    if (has)
        *deadline = t;
    return has;
}

/* QP._send_paced: data one packet at a time while the controller's pacing allows. */
static int send_paced(mrcn_qp *qp, double now, mrcn_txq *out, size_t base)
{
    uint64_t size = qp->cfg.payload_bytes;
    qp->has_pace_at = 0;
    while (out->count - base < qp->cfg.max_burst) {
        double t = mrcn_cc_next_send_time(&qp->cc, now, size);
        if (t > now) {
            if (!mrcn_req_idle(&qp->req)) {
                qp->pace_at = t;
                qp->has_pace_at = 1;
            }
            return MRCN_OK;
        }
        size_t n = out->count;
        int rc = mrcn_req_send_data(&qp->req, now, out, base, 1);
        if (rc < 0)
            return rc;
        if (out->count == n)   /* nothing to send, or window/EVs hold it */
            return MRCN_OK;
    }
    return MRCN_OK;
}

int mrcn_qp_datagrams_to_send(mrcn_qp *qp, double now, mrcn_txq *out)
{
    size_t base = out->count;
    int rc;
    for (size_t i = 0; i < qp->resp.n_out; i++)
        if ((rc = mrcn_txq_push(out, qp->resp.out[i].bytes, qp->resp.out[i].len,
                                qp->resp.out[i].ev)) < 0)
            return rc;
    qp->resp.n_out = 0;
    for (size_t i = 0; i < qp->n_cnp_out; i++)
        if ((rc = mrcn_txq_push(out, qp->cnp_out[i].bytes, qp->cnp_out[i].len,
                                qp->cnp_out[i].ev)) < 0)
            return rc;
    qp->n_cnp_out = 0;
    if (qp->state == MRCN_QPS_RTS) {
        if ((rc = mrcn_probes_send(&qp->req, now, out)) < 0)
            return rc;
        if (qp->paced)
            return send_paced(qp, now, out, base);
        return mrcn_req_send_data(&qp->req, now, out, base, -1);
    }
    return MRCN_OK;
}

int mrcn_qp_next_event(mrcn_qp *qp, mrcn_event *event)
{
    return mrcn_events_pop(&qp->events, event);
}

size_t mrcn_qp_events_pending(const mrcn_qp *qp)
{
    return qp->events.n;
}

int mrcn_qp_set_ev_state(mrcn_qp *qp, uint32_t ev, mrcn_ev_state state, double now)
{
    if (qp->evs == NULL)
        return MRCN_ESTATE;
    int rc = mrcn_ev_set_state(qp->evs, ev, state, now);
    int d = mrcn_req_drain_ev(&qp->req);
    return rc < 0 ? rc : d;
}

int mrcn_qp_replace_ev(mrcn_qp *qp, uint32_t cur, uint32_t new_ev, mrcn_ev_state state,
                       double now)
{
    if (qp->evs == NULL)
        return MRCN_ESTATE;
    int rc = mrcn_ev_replace(qp->evs, cur, new_ev, state, now);
    int d = mrcn_req_drain_ev(&qp->req);
    return rc < 0 ? rc : d;
}

int mrcn_qp_expire_skips(mrcn_qp *qp, double now)
{
    if (qp->evs == NULL)
        return MRCN_ESTATE;
    int rc = mrcn_ev_expire_skips(qp->evs, now);
    int d = mrcn_req_drain_ev(&qp->req);
    return rc < 0 ? rc : d;
}

uint32_t mrcn_qp_num(const mrcn_qp *qp)
{
    return qp->qpn;
}

uint32_t mrcn_qp_max_burst(const mrcn_qp *qp)
{
    return qp->cfg.max_burst;
}

uint64_t mrcn_qp_bad_packets(const mrcn_qp *qp)
{
    return qp->bad_packets + qp->req.bad_packets + qp->resp.bad_packets;
}

double mrcn_qp_probe_timeout_s(const mrcn_qp *qp)
{
    return mrcn_probes_timeout_s(&qp->req);
}
