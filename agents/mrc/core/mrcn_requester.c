/* The requester half of a QP: the twin of agents/mrc/requester.py (see mrcn_requester.h).
 * Each function names the Python method it mirrors; float expressions keep Python's
 * operand order. */
#include "mrcn_requester.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcn_pyfloat.h"

/* ---- the QP's event queue ------------------------------------------------------------ */

void mrcn_events_free(mrcn_events *q)
{
    free(q->buf);
    q->buf = NULL;
    q->head = q->n = q->cap = 0;
}

mrcn_event *mrcn_events_push(mrcn_events *q)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        mrcn_event *buf = malloc(cap * sizeof *buf);
        if (buf == NULL)
            return NULL;
        for (size_t i = 0; i < q->n; i++)
            buf[i] = q->buf[(q->head + i) & (q->cap - 1)];
        free(q->buf);
        q->buf = buf;
        q->cap = cap;
        q->head = 0;
    }
    mrcn_event *e = &q->buf[(q->head + q->n) & (q->cap - 1)];
    q->n++;
    memset(e, 0, sizeof *e);
    return e;
}

int mrcn_events_pop(mrcn_events *q, mrcn_event *e)
{
    if (q->n == 0)
        return 0;
    *e = q->buf[q->head];
    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
    return 1;
}

void mrcn_events_clear(mrcn_events *q)
{
    q->head = q->n = 0;
}

int mrcn_events_drain_ev_set(mrcn_events *q, mrcn_ev_set *set)
{
    mrcn_ev_event ev;
    while (set != NULL && mrcn_ev_next_event(set, &ev)) {
        mrcn_event *e = mrcn_events_push(q);
        if (e == NULL)
            return MRCN_ENOMEM;
        e->kind = MRCN_EVENT_EV;
        e->time = ev.time;
        e->u.ev = ev;
    }
    return MRCN_OK;
}

int mrcn_req_drain_ev(mrcn_req *r)
{
    return mrcn_events_drain_ev_set(r->events, r->evs);
}

/* A requester WorkCompletion (opcode RDMA_WRITE) for write `wr`, post index `index`. */
static int push_write_event(mrcn_req *r, const mrcn_wr *wr, uint64_t index, double now, int status)
{
    mrcn_event *e = mrcn_events_push(r->events);
    if (e == NULL)
        return MRCN_ENOMEM;
    e->kind = MRCN_EVENT_WRITE;
    e->time = now;
    e->u.write.wr_id = wr->wr_id;
    e->u.write.wr_index = index;
    e->u.write.byte_len = wr->size;
    e->u.write.status = status;
    return MRCN_OK;
}

/* ---- life cycle ------------------------------------------------------------------------ */

int mrcn_req_init(mrcn_req *r, uint32_t qpn, const mrcn_qp_config *cfg, mrcn_cc *cc,
                  mrcn_rtt *rtt, mrcn_events *events, mrcn_req_error_fn on_error,
                  void *on_error_ctx, uint64_t wr_base)
{
    memset(r, 0, sizeof *r);
    r->qpn = qpn;
    r->cfg = cfg;
    r->cc = cc;
    r->cc_sent = cc->kind == MRCN_CC_DCQCN;   /* the only controller overriding on_packet_sent */
    r->rtt = rtt;
    r->events = events;
    r->on_error = on_error;
    r->on_error_ctx = on_error_ctx;
    r->attr = (mrcn_qp_attr){8, 8, 128, 128, 8, 7, 7};   /* QPAttr() */
    r->wr_head = r->wr_unsent = r->wr_tail = wr_base;
    r->gseq = 0;
    mrcn_loss_init(&r->loss);
    r->picks = malloc((size_t)cfg->max_burst * sizeof *r->picks);
    return r->picks == NULL ? MRCN_ENOMEM : MRCN_OK;
}

void mrcn_req_free(mrcn_req *r)
{
    free(r->wrs);
    free(r->txs);
    free(r->rtx);
    free(r->picks);
    free(r->touched);
    free(r->touched_flag);
    free(r->targets);
    free(r->acked);
    mrcn_loss_free(&r->loss);
    memset(r, 0, sizeof *r);
}

int mrcn_req_set_evs(mrcn_req *r, mrcn_ev_set *evs)
{
    uint32_t cap = evs->cap_info;
    uint32_t *touched = malloc((size_t)cap * sizeof *touched);
    bool *flag = calloc(cap, sizeof *flag);
    uint32_t *targets = malloc((size_t)cap * sizeof *targets);
    if (touched == NULL || flag == NULL || targets == NULL || mrcn_loss_attach(&r->loss, cap)) {
        free(touched);
        free(flag);
        free(targets);
        return MRCN_ENOMEM;
    }
    free(r->touched);
    free(r->touched_flag);
    free(r->targets);
    r->touched = touched;
    r->touched_flag = flag;
    r->targets = targets;
    r->evs = evs;
    return MRCN_OK;
}

/* ---- tables ---------------------------------------------------------------------------- */

mrcn_tx *mrcn_req_tx(mrcn_req *r, uint64_t psn)
{
    if (psn < r->tx_base || psn >= r->next_psn)
        return NULL;
    return &r->txs[psn & (r->cap_txs - 1)];
}

mrcn_tx *mrcn_req_outstanding(mrcn_req *r, uint64_t psn)
{
    mrcn_tx *tx = mrcn_req_tx(r, psn);
    return tx != NULL && tx->present ? tx : NULL;
}

/* Room in the PSN table for PSNs up to ``end`` (exclusive). */
static int txs_reserve(mrcn_req *r, uint64_t end)
{
    uint64_t need = end - r->tx_base;
    if (need <= r->cap_txs)
        return MRCN_OK;
    size_t cap = r->cap_txs ? r->cap_txs : 256;
    while (cap < need)
        cap *= 2;
    mrcn_tx *txs = malloc(cap * sizeof *txs);
    if (txs == NULL)
        return MRCN_ENOMEM;
    for (uint64_t p = r->tx_base; p < r->next_psn; p++)
        txs[p & (cap - 1)] = r->txs[p & (r->cap_txs - 1)];
    free(r->txs);
    r->txs = txs;
    r->cap_txs = cap;
    return MRCN_OK;
}

static int rtx_push(mrcn_req *r, uint32_t psn)
{
    if (r->n_rtx == r->cap_rtx) {
        size_t cap = r->cap_rtx ? r->cap_rtx * 2 : 64;
        uint32_t *h = realloc(r->rtx, cap * sizeof *h);
        if (h == NULL)
            return MRCN_ENOMEM;
        r->rtx = h;
        r->cap_rtx = cap;
    }
    size_t i = r->n_rtx++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (r->rtx[p] <= psn)
            break;
        r->rtx[i] = r->rtx[p];
        i = p;
    }
    r->rtx[i] = psn;
    return MRCN_OK;
}

static void rtx_pop(mrcn_req *r)
{
    uint32_t last = r->rtx[--r->n_rtx];
    size_t i = 0, n = r->n_rtx;
    if (n == 0)
        return;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && r->rtx[c + 1] < r->rtx[c])
            c++;
        if (r->rtx[c] >= last)
            break;
        r->rtx[i] = r->rtx[c];
        i = c;
    }
    r->rtx[i] = last;
}

static int acked_push(mrcn_req *r, size_t *n, uint32_t psn)
{
    if (*n == r->cap_acked) {
        size_t cap = r->cap_acked ? r->cap_acked * 2 : 256;
        uint32_t *a = realloc(r->acked, cap * sizeof *a);
        if (a == NULL)
            return MRCN_ENOMEM;
        r->acked = a;
        r->cap_acked = cap;
    }
    r->acked[(*n)++] = psn;
    return MRCN_OK;
}

/* ---- posting --------------------------------------------------------------------------- */

int mrcn_req_post(mrcn_req *r, uint64_t wr_id, const uint8_t *data, size_t len,
                  uint64_t remote_offset, bool has_imm, uint32_t imm)
{
    uint64_t size = r->cfg->payload_bytes;
    uint64_t npkts = len == 0 ? 1 : (len + size - 1) / size;   /* max(1, ceil(len / size)) */
    uint64_t first = r->psn_assign;
    if (npkts > MRCN_MAX_PSN || first + npkts > MRCN_MAX_PSN)
        return MRCN_EINVAL;
    uint64_t live = r->wr_tail - r->wr_head;
    if (live == r->cap_wrs) {
        size_t cap = r->cap_wrs ? r->cap_wrs * 2 : 16;
        mrcn_wr *wrs = malloc(cap * sizeof *wrs);
        if (wrs == NULL)
            return MRCN_ENOMEM;
        for (uint64_t i = r->wr_head; i < r->wr_tail; i++)
            wrs[i & (cap - 1)] = r->wrs[i & (r->cap_wrs - 1)];
        free(r->wrs);
        r->wrs = wrs;
        r->cap_wrs = cap;
    }
    r->psn_assign += npkts;
    if (r->wr_unsent == r->wr_tail)
        mrcn_cc_set_app_limited(r->cc, 0);
    mrcn_wr *wr = mrcn_req_wr(r, r->wr_tail++);
    wr->wr_id = wr_id;
    wr->data = data;
    wr->size = len;
    wr->remote_offset = remote_offset;
    wr->has_imm = has_imm;
    wr->imm = imm;
    wr->first_psn = (uint32_t)first;
    wr->last_psn = (uint32_t)(first + npkts - 1);
    return MRCN_OK;
}

/* ---- sending --------------------------------------------------------------------------- */

int64_t mrcn_stamp_of(double now)
{
    double x = now * 1e9;
    if (!(x < 9.2e18))
        return x > 0 ? INT64_MAX / 2 : 0;   /* inf/NaN: Python raises; keep a sane stamp */
    if (x < -9.2e18)
        return -INT64_MAX / 2;
    return (int64_t)x;
}

uint64_t mrcn_req_stamp(mrcn_req *r, double now)
{
    int64_t ts = mrcn_stamp_of(now);
    if (ts <= r->last_ts_ns)
        ts = r->last_ts_ns + 1;
    r->last_ts_ns = ts;
    return (uint64_t)ts;
}

static int encode_data(mrcn_req *r, mrcn_txq *out, uint32_t psn, uint32_t ev, uint8_t op,
                       uint8_t flags, uint64_t offset, uint64_t ts, bool has_imm, uint32_t imm,
                       const uint8_t *payload, uint32_t length)
{
    size_t n = mrcn_data_wire_len(has_imm, length);
    uint8_t *p = mrcn_txq_reserve(out, n);
    if (p == NULL)
        return MRCN_ENOMEM;
    int len = mrcn_encode_data_parts(p, n, r->dest_qpn, psn, ev, op, flags, offset, ts, has_imm,
                                     imm, payload, length, length);
    if (len < 0)
        return len;
    return mrcn_txq_commit(out, (size_t)len, ev);
}

/* Requester._transmit: retransmit the PSN on EV ``ev``. */
static int transmit(mrcn_req *r, uint32_t psn, mrcn_tx *tx, uint32_t ev, double now,
                    mrcn_txq *out)
{
    mrcn_wr *wr = mrcn_req_wr(r, tx->wr);
    mrcn_ev_info *info = mrcn_ev_get(r->evs, ev);
    uint64_t ts = mrcn_req_stamp(r, now);
    int64_t seq = (int64_t)info->seq;
    info->seq = (uint64_t)seq + 1;
    tx->ev = ev;
    tx->ev_seq = seq;
    tx->ts_ns = ts;
    tx->sent_at = now;
    tx->lost = false;
    tx->rtx_count++;
    if (!r->cfg->rc)
        tx->gseq = r->gseq++;
    info->retransmits++;
    r->rtx_packets++;
    r->rtx_bytes += tx->length;
    uint8_t flags = MRCN_FLAG_RTX;
    bool has_imm = false;
    if (psn == wr->last_psn) {
        flags |= MRCN_FLAG_ACK_REQ;
        has_imm = wr->has_imm;
    }
    int rc = encode_data(r, out, psn, ev, tx->opcode, flags, wr->remote_offset + tx->pos, ts,
                         has_imm, wr->imm, wr->data + tx->pos, tx->length);
    if (rc < 0)
        return rc;
    r->inflight_bytes += tx->length;
    info->bytes_sent += tx->length;
    r->tx_packets++;
    r->tx_bytes += tx->length;
    rc = mrcn_loss_on_retransmit(r, psn, seq, now);
    if (rc < 0)
        return rc;
    if (r->cc_sent)
        mrcn_cc_on_packet_sent(r->cc, now, tx->length);
    return MRCN_OK;
}

/* Requester._send_new: first transmissions, as many as window, cwnd and budget allow. */
static int send_new(mrcn_req *r, double now, mrcn_txq *out, int64_t budget)
{
    uint64_t size = r->cfg->payload_bytes;
    uint64_t psn = r->next_psn, start = psn;
    int64_t n = budget;
    int64_t w = (int64_t)r->snd_una + (int64_t)r->attr.mpr * 128 - (int64_t)psn;
    if (w < n)
        n = w;
    if ((int64_t)(r->psn_assign - psn) < n)
        n = (int64_t)(r->psn_assign - psn);
    int64_t inflight = r->inflight_bytes;
    double cwnd = r->cc->cwnd_bytes;
    if (cwnd != INFINITY) {   /* CongestionControl.can_send for full-size packets, in one step */
        double q = inflight ? mrcn_py_floordiv(cwnd - (double)inflight, (double)size)
                            : mrcn_py_floordiv(cwnd, (double)size);
        int64_t k = q >= 9.2e18 ? INT64_MAX : q <= -9.2e18 ? INT64_MIN : (int64_t)q;
        if (!inflight && k < 1)
            k = 1;
        if (k < n)
            n = k;
    }
    if (n <= 0)
        return MRCN_OK;
    if ((uint64_t)n > r->cfg->max_burst)   /* budget <= max_burst; never more than picks holds */
        n = r->cfg->max_burst;
    int64_t got = mrcn_ev_pick_many(r->evs, now, (uint32_t)n, r->picks);
    int rc = mrcn_req_drain_ev(r);
    if (got < 0)
        return (int)got;
    if (rc < 0)
        return rc;
    if (got == 0)
        return MRCN_OK;
    rc = txs_reserve(r, psn + (uint64_t)got);
    if (rc < 0)
        return rc;
    mrcn_loss *loss = &r->loss;
    bool mrc = !r->cfg->rc;
    bool infer = r->cfg->loss_inference != 0;   /* the inference rules' queues */
    int64_t gseq = r->gseq;
    int64_t ts = mrcn_stamp_of(now);
    if (ts <= r->last_ts_ns)
        ts = r->last_ts_ns + 1;
    uint64_t wi = r->wr_unsent;
    mrcn_wr *wr = mrcn_req_wr(r, wi);
    uint64_t sent_bytes = 0;
    for (int64_t j = 0; j < got; j++) {
        uint32_t ev = r->picks[j];
        if (psn == wr->first_psn && wr->has_imm) {
            if (r->wimm_inflight >= (int64_t)r->attr.max_wimm)
                break;
            r->wimm_inflight++;
        }
        size_t pos = (size_t)(psn - wr->first_psn) * size;
        uint32_t length;
        uint8_t flags, op;
        bool has_imm = false;
        if (psn == wr->last_psn) {
            length = (uint32_t)(wr->size - pos);
            flags = MRCN_FLAG_ACK_REQ;
            has_imm = wr->has_imm;
            if (wr->first_psn == wr->last_psn)
                op = has_imm ? MRCN_OP_WRITE_ONLY_WITH_IMM : MRCN_OP_WRITE_ONLY;
            else
                op = has_imm ? MRCN_OP_WRITE_LAST_WITH_IMM : MRCN_OP_WRITE_LAST;
        } else {
            length = (uint32_t)size;
            flags = 0;
            op = psn == wr->first_psn ? MRCN_OP_WRITE_FIRST : MRCN_OP_WRITE_MIDDLE;
        }
        mrcn_ev_info *info = mrcn_ev_get(r->evs, ev);
        int64_t seq = (int64_t)info->seq;
        info->seq = (uint64_t)seq + 1;
        info->bytes_sent += length;
        rc = encode_data(r, out, (uint32_t)psn, ev, op, flags, wr->remote_offset + pos,
                         (uint64_t)ts, has_imm, wr->imm, wr->data + pos, length);
        if (rc < 0)
            return rc;
        mrcn_tx *tx = &r->txs[psn & (r->cap_txs - 1)];
        *tx = (mrcn_tx){.wr = wi, .pos = pos, .length = length, .opcode = op, .present = true,
                        .lost = false, .ev = ev, .ev_seq = seq, .ts_ns = (uint64_t)ts,
                        .sent_at = now, .timeouts = 0, .loss_retries = 0, .rtx_count = 0,
                        .gseq = gseq};
        r->next_psn = psn + 1;   /* the table covers the PSN from here on */
        if (infer && mrc && (rc = mrcn_deque_push(&loss->sent_order, gseq, (int64_t)psn)) < 0)
            return rc;
        gseq++;
        uint32_t rec = (uint32_t)(info - r->evs->info);
        if ((infer && (rc = mrcn_deque_push(&loss->ev_q[rec], seq, (int64_t)psn)) < 0) ||
            (rc = mrcn_loss_fresh_push(loss, rec, (uint32_t)psn)) < 0)
            return rc;
        sent_bytes += length;
        if (r->cc_sent)
            mrcn_cc_on_packet_sent(r->cc, now, length);
        ts++;
        psn++;
        if (psn > wr->last_psn) {
            wi++;
            r->wr_unsent = wi;
            if (wi == r->wr_tail) {
                mrcn_cc_set_app_limited(r->cc, 1);
                break;
            }
            wr = mrcn_req_wr(r, wi);
        }
    }
    r->tx_packets += psn - start;
    r->next_psn = psn;
    r->gseq = gseq;
    r->last_ts_ns = ts - 1;
    r->inflight_bytes = inflight + (int64_t)sent_bytes;
    r->tx_bytes += sent_bytes;
    return MRCN_OK;
}

int mrcn_req_send_data(mrcn_req *r, double now, mrcn_txq *out, size_t base, int64_t limit)
{
    int64_t burst = r->cfg->max_burst;
    int64_t len = (int64_t)(out->count - base);
    int64_t budget = limit < 0 ? burst : (burst < len + limit ? burst : len + limit);
    int rc;
    if (r->n_rtx) {
        bool rc_mode = r->cfg->rc;
        while (r->n_rtx && (int64_t)(out->count - base) < budget) {
            uint32_t psn = r->rtx[0];
            mrcn_tx *tx = mrcn_req_outstanding(r, psn);
            if (tx == NULL || !tx->lost) {
                rtx_pop(r);
                continue;
            }
            if (!mrcn_cc_can_send(r->cc, (uint64_t)r->inflight_bytes, tx->length))
                return MRCN_OK;
            uint32_t ev = 0;
            int got = mrcn_ev_pick(r->evs, now, !rc_mode, tx->ev, rc_mode ? 0 : tx->ts_ns, &ev);
            rc = mrcn_req_drain_ev(r);
            if (got < 0)
                return got;
            if (rc < 0)
                return rc;
            if (got == 0) {
                mrcn_loss_on_no_path(r, psn, now);
                return MRCN_OK;
            }
            rtx_pop(r);
            rc = transmit(r, psn, tx, ev, now, out);
            if (rc < 0)
                return rc;
        }
    }
    if (r->wr_unsent != r->wr_tail)
        return send_new(r, now, out, budget - (int64_t)(out->count - base));
    return MRCN_OK;
}

/* ---- loss ------------------------------------------------------------------------------ */

int mrcn_req_declare_lost(mrcn_req *r, uint32_t psn, double now, mrcn_loss_cause cause)
{
    mrcn_tx *tx = mrcn_req_tx(r, psn);
    if (tx == NULL || tx->lost)
        return MRCN_OK;
    tx->lost = true;
    r->inflight_bytes -= tx->length;
    r->lost_packets++;
    mrcn_ev_info *info = mrcn_ev_get(r->evs, tx->ev);
    info->packets_lost++;
    int rc = rtx_push(r, psn);
    if (rc < 0)
        return rc;
    /* A loss on an EV this QP already found dead is the path's failure, not congestion. */
    if (cause == MRCN_LOSS_TRIMMED || info->state != MRCN_EV_ASSUMED_BAD)
        mrcn_cc_on_packets_lost(r->cc, now, tx->length, cause == MRCN_LOSS_TRIMMED);
    if (!r->cfg->rc && mrcn_loss_charged(cause)) {
        info->losses_chargeable++;
        return mrcn_loss_charge_ev(r, psn, info, now, cause);
    }
    return MRCN_OK;
}

int mrcn_req_go_back_n(mrcn_req *r, uint64_t from_psn, double now, mrcn_loss_cause cause)
{
    for (uint64_t psn = from_psn > r->snd_una ? from_psn : r->snd_una; psn < r->next_psn; psn++) {
        if (mrcn_req_outstanding(r, psn) != NULL) {
            int rc = mrcn_req_declare_lost(r, (uint32_t)psn, now, cause);
            if (rc < 0)
                return rc;
        }
    }
    return MRCN_OK;
}

/* Requester._account_acked over r->acked[0..n): their payload bytes in *acked_out. echo_ts: the
 * SACK's echoed stamp (0: none); a retransmission carrying it arrived, so it is a reference. */
static int account_acked(mrcn_req *r, size_t n, double now, uint64_t echo_ts, uint64_t *acked_out)
{
    double srtt = r->rtt->has_srtt && r->rtt->srtt_s != 0.0 ? r->rtt->srtt_s : 0.0;
    uint64_t acked = 0, lost_acked = 0;
    mrcn_loss *loss = &r->loss;
    int64_t hi_gseq = loss->hi_acked_gseq;
    double hi_sent_at = loss->hi_acked_sent_at;
    uint32_t n_touched = 0;
    int rc;
    for (size_t i = 0; i < n; i++) {
        mrcn_tx *tx = mrcn_req_tx(r, r->acked[i]);
        uint64_t length = tx->length;
        acked += length;
        if (tx->lost)
            lost_acked += length;
        mrcn_ev_info *info = mrcn_ev_get(r->evs, tx->ev);
        info->packets_acked++;
        double alive = tx->sent_at + srtt;   /* e delivered tx: known alive until about then */
        if (alive > info->last_ack_s)
            info->last_ack_s = alive;
        int64_t seq = tx->ev_seq;
        tx->ev_seq = -1;
        if (!tx->rtx_count) {
            if (tx->ts_ns > info->delivered_ts_ns &&
                (rc = mrcn_loss_delivered(r, tx->ev, tx->ts_ns, now)) < 0)
                return rc;
            if (tx->gseq > hi_gseq) {
                hi_gseq = tx->gseq;
                hi_sent_at = tx->sent_at;
            }
            if (seq > info->acked_seq) {
                info->acked_seq = seq;
                uint32_t rec = (uint32_t)(info - r->evs->info);
                if (!r->touched_flag[rec]) {   /* an ordered set: first insertion's place */
                    r->touched_flag[rec] = true;
                    r->touched[n_touched++] = rec;
                }
            }
        } else if (echo_ts != 0 && tx->ts_ns == echo_ts && tx->gseq > hi_gseq) {   /* stamp echoed */
            hi_gseq = tx->gseq;
            hi_sent_at = tx->sent_at;
        }
    }
    for (uint32_t i = 0; i < n_touched; i++)
        r->touched_flag[r->touched[i]] = false;
    r->inflight_bytes -= (int64_t)(acked - lost_acked);
    if (n_touched || hi_gseq > loss->hi_acked_gseq) {
        rc = mrcn_loss_on_acked(r, r->touched, n_touched, hi_gseq, hi_sent_at, now);
        if (rc < 0)
            return rc;
    }
    *acked_out = acked;
    return MRCN_OK;
}

/* Requester._advance_una. */
static void advance_una(mrcn_req *r)
{
    uint64_t una = r->snd_una;
    while (una < r->next_psn && mrcn_req_outstanding(r, una) == NULL)
        una++;
    r->snd_una = una;
    if (una > r->tx_base)
        r->tx_base = una;
}

/* Requester._complete_writes. */
static int complete_writes(mrcn_req *r, double now)
{
    while (r->wr_head != r->wr_tail && mrcn_req_wr(r, r->wr_head)->last_psn < r->snd_una) {
        mrcn_wr *wr = mrcn_req_wr(r, r->wr_head);
        uint64_t index = r->wr_head++;
        if (wr->has_imm)
            r->wimm_inflight--;
        if (push_write_event(r, wr, index, now, MRCN_WRITE_SUCCESS) < 0)
            return MRCN_ENOMEM;
    }
    return MRCN_OK;
}

int mrcn_req_on_sack(mrcn_req *r, const mrcn_sack *s, double now)
{
    uint64_t una = r->snd_una, cum = s->cum_psn, base = s->sack_base, bitmap = s->bitmap;
    int rc;
    if (cum > r->next_psn) {
        r->bad_packets++;
        return MRCN_OK;
    }
    size_t n = 0;
    if (cum > una) {
        for (uint64_t psn = una; psn < cum; psn++) {
            mrcn_tx *tx = mrcn_req_outstanding(r, psn);
            if (tx != NULL) {
                tx->present = false;
                if ((rc = acked_push(r, &n, (uint32_t)psn)) < 0)
                    return rc;
            }
        }
        una = r->snd_una = cum;
    }
    if (base < una) {   /* bits below the cumulative PSN are already done */
        uint64_t shift = una - base;
        bitmap = shift < 64 ? bitmap >> shift : 0;
        base = una;
    }
    while (bitmap) {
        int bit = __builtin_ctzll(bitmap);
        bitmap &= bitmap - 1;
        mrcn_tx *tx = mrcn_req_outstanding(r, base + (uint64_t)bit);
        if (tx != NULL) {
            tx->present = false;
            if ((rc = acked_push(r, &n, (uint32_t)(base + (uint64_t)bit))) < 0)
                return rc;
        }
    }
    uint64_t acked = 0;
    if (n) {
        if ((rc = account_acked(r, n, now, s->timestamp_ns, &acked)) < 0)
            return rc;
        if (r->failed)   /* an inferred loss exhausted a PSN's retries: ERR */
            return MRCN_OK;
        mrcn_tx *first = mrcn_req_tx(r, r->acked[0]);   /* lowest PSN newly acked */
        if (!first->rtx_count) {   /* Karn: never time a retransmitted PSN */
            mrcn_rtt_sample(r->rtt, now - first->sent_at);
            r->evs->srtt_s = r->rtt->has_srtt ? r->rtt->srtt_s : NAN;   /* skip_timeout_fn */
        }
    }
    advance_una(r);
    uint32_t ev = s->ev;
    uint64_t ts = s->timestamp_ns;
    mrcn_ev_info *info = mrcn_ev_get(r->evs, ev);
    int has_rtt = 0;
    double rtt = 0.0;
    if (info != NULL)
        info->last_ack_s = now;   /* a packet on EV ev just arrived: restart its timer */
    if (info != NULL && 0 < ts && ts <= (uint64_t)r->last_ts_ns) {
        if (ts > info->delivered_ts_ns && (rc = mrcn_loss_delivered(r, ev, ts, now)) < 0)
            return rc;
        rtt = now - (double)ts * 1e-9;   /* echoed timestamp: path delay */
        has_rtt = 1;
        mrcn_loss_rtt_sample(&r->loss, info, rtt);
    }
    r->acked_bytes += acked;
    int ecn = (s->flags & MRCN_FLAG_ECN_ECHO) != 0;
    mrcn_cc_on_packets_acked(r->cc, now, acked, has_rtt, rtt, ecn);
    if (info != NULL && !r->cfg->rc) {
        /* the non-spec REPS variant: a good ACK's EV is reused */
        mrcn_ev_reps_feedback(r->evs, ev, ecn || s->mode ? MRCN_EV_REPS_ECN_PENALTY : 0);
        if (ecn || s->mode) {   /* the echoed EV carried a CE mark: skip it */
            r->ev_skips_ecn++;
            int a = mrcn_ev_apply(r->evs, ev, MRCN_EV_CONGESTION, now,
                                  s->mode == MRCN_SACK_ALWAYS_SKIP, false, 0, NULL);
            if ((rc = mrcn_req_drain_ev(r)) < 0)
                return rc;
            if (a < 0)
                return a;
        } else if (info->always_skip) {   /* a clean SACK for it ends an ALWAYS_SKIP */
            int a = mrcn_ev_clear_always_skip(r->evs, ev, now);
            if ((rc = mrcn_req_drain_ev(r)) < 0)
                return rc;
            if (a < 0)
                return a;
        }
    }
    if (r->wr_head != r->wr_tail && mrcn_req_wr(r, r->wr_head)->last_psn < r->snd_una)
        return complete_writes(r, now);
    return MRCN_OK;
}

int mrcn_req_on_nack(mrcn_req *r, const mrcn_nack *k, double now)
{
    mrcn_tx *tx = mrcn_req_outstanding(r, k->psn);
    int rc;
    bool mrc = !r->cfg->rc;
    if (k->reason == MRCN_NACK_SEQ_ERR) {
        /* RoCE NAK semantics: everything below the PSN arrived in order */
        size_t n = 0;
        uint64_t end = k->psn < r->next_psn ? k->psn : r->next_psn;
        for (uint64_t psn = r->snd_una; psn < end; psn++) {
            mrcn_tx *t = mrcn_req_outstanding(r, psn);
            if (t != NULL) {
                t->present = false;
                if ((rc = acked_push(r, &n, (uint32_t)psn)) < 0)
                    return rc;
            }
        }
        uint64_t acked = 0;
        if ((rc = account_acked(r, n, now, 0, &acked)) < 0)
            return rc;
        r->acked_bytes += acked;
        if (r->failed)
            return MRCN_OK;
        advance_una(r);
        if ((rc = complete_writes(r, now)) < 0)
            return rc;
        /* one retry of the PSN the responder waits for (IBTA's NAK sequence error) */
        if (tx != NULL && !tx->lost &&
            (rc = mrcn_loss_spend_retry(r, k->psn, now, MRCN_LOSS_SEQ_ERR)) <= 0)
            return rc < 0 ? rc : MRCN_OK;
        return mrcn_req_go_back_n(r, k->psn, now, MRCN_LOSS_SEQ_ERR);
    }
    /* the echoed stamp is a delivery only if this QP could have sent it (as a SACK's) */
    bool ts_ok = 0 < k->timestamp_ns && k->timestamp_ns <= (uint64_t)r->last_ts_ns;
    if (k->reason == MRCN_NACK_NO_PKT_BUFFER) {
        /* the responder had no posted receive: the EV is fine, the retry timer resends */
        r->nacks_no_buffer++;
        if (mrc && ts_ok)
            return mrcn_loss_delivered(r, k->ev, k->timestamp_ns, now);
        return MRCN_OK;
    }
    bool trimmed = k->reason == MRCN_NACK_TRIMMED || k->reason == MRCN_NACK_TRIMMED_LASTHOP;
    if (trimmed && mrc && ts_ok && (rc = mrcn_loss_delivered(r, k->ev, k->timestamp_ns, now)) < 0)
        return rc;
    if (tx == NULL || tx->ts_ns != k->timestamp_ns)
        return MRCN_OK;
    if (!tx->lost &&
        (rc = mrcn_loss_lose(r, k->psn, now, trimmed ? MRCN_LOSS_TRIMMED : MRCN_LOSS_NACK)) <= 0)
        return rc < 0 ? rc : MRCN_OK;
    if (trimmed && mrc) {
        /* REPS variant: a last-hop trim is a good ACK for the path (uet-htsim) */
        mrcn_ev_reps_feedback(r->evs, tx->ev, k->reason == MRCN_NACK_TRIMMED_LASTHOP
                                                  ? 0 : MRCN_EV_REPS_NACK_PENALTY);
        if (k->reason == MRCN_NACK_TRIMMED_LASTHOP) {   /* the host's link, not the EV */
            r->ev_skips_trim_lasthop++;
        } else {                                        /* UET: trims before the last hop skip */
            r->ev_skips_trim++;
            int a = mrcn_ev_apply(r->evs, tx->ev, MRCN_EV_CONGESTION, now, false, false, 0, NULL);
            if ((rc = mrcn_req_drain_ev(r)) < 0)
                return rc;
            if (a < 0)
                return a;
        }
    }
    return MRCN_OK;
}

int mrcn_req_flush_writes(mrcn_req *r, double now)
{
    int status = MRCN_WRITE_RETRY_EXC_ERR;
    r->failed = true;
    for (uint64_t i = r->wr_head; i < r->wr_tail; i++) {
        if (push_write_event(r, mrcn_req_wr(r, i), i, now, status) < 0)
            return MRCN_ENOMEM;
        status = MRCN_WRITE_WR_FLUSH_ERR;
    }
    r->wr_head = r->wr_unsent = r->wr_tail;
    for (uint64_t psn = r->tx_base; psn < r->next_psn; psn++)
        r->txs[psn & (r->cap_txs - 1)].present = false;
    r->n_rtx = 0;
    mrcn_loss_clear(&r->loss);
    r->inflight_bytes = 0;
    return MRCN_OK;
}
