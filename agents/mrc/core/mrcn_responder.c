/* The responder half of a QP (see mrcn_responder.h); each function names the
 * responder.py code it mirrors, in the same order of operations. */
#include "mrcn_responder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HDR MRCN_DATA_HDR_BYTES
#define PLAIN_BYTES (MRCN_DATA_HDR_BYTES + MRCN_CRC_BYTES)
/* responder._FAST_FLAGS_MASK and _ACK_NOW */
#define FAST_FLAGS_MASK (0xFFu & ~(MRCN_FLAG_RTX | MRCN_FLAG_ACK_REQ))
#define ACK_NOW (MRCN_FLAG_RTX | MRCN_FLAG_ACK_REQ)

static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* responder._PLAIN_OPCODES: the WRITE opcodes without an immediate. */
static int plain_opcode(uint8_t op)
{
    return op == MRCN_OP_WRITE_FIRST || op == MRCN_OP_WRITE_MIDDLE || op == MRCN_OP_WRITE_LAST
           || op == MRCN_OP_WRITE_ONLY;
}

/* `off + length <= len(mem)` without wrapping u64. */
static int fits(const mrcn_responder *r, uint64_t off, uint32_t length)
{
    return length <= r->mem_len && off <= (uint64_t)(r->mem_len - length);
}

void mrcn_responder_init(mrcn_responder *r, uint32_t qpn, const mrcn_responder_config *cfg,
                         int rc, uint8_t *mem, size_t mem_len, int has_mem)
{
    memset(r, 0, sizeof(*r));
    r->qpn = qpn;
    r->rc = rc;
    r->cfg = *cfg;
    r->mpr_dest = 8;          /* QPAttr().mpr_dest */
    r->max_wimm_dest = 128;   /* QPAttr().max_wimm_dest */
    r->mem = mem;
    r->mem_len = has_mem ? mem_len : 0;
    r->has_mem = has_mem;
    r->last_data_at = -INFINITY;
    mrcn_evmap_init(&r->ce_run);
    mrcn_evmap_init(&r->reverse_evs);
    mrcn_reverse_init(&r->reverse);
}

void mrcn_responder_free(mrcn_responder *r)
{
    free(r->dirty);
    free(r->imm_heap);
    free(r->recvs);
    free(r->out);
    free(r->wcs);
    mrcn_evmap_free(&r->ce_run);
    mrcn_evmap_free(&r->reverse_evs);
    mrcn_reverse_free(&r->reverse);
    r->dirty = NULL;
    r->imm_heap = NULL;
    r->recvs = NULL;
    r->out = NULL;
    r->wcs = NULL;
    r->n_dirty = r->n_imm = r->n_recvs = r->n_out = r->n_wcs = 0;
    r->cap_dirty = r->cap_imm = r->cap_recvs = r->cap_out = r->cap_wcs = 0;
}

int mrcn_responder_set_mpr_dest(mrcn_responder *r, uint32_t mpr_dest)
{
    if (mpr_dest > MRCN_RESPONDER_MAX_MPR_DEST)
        return MRCN_EINVAL;
    r->mpr_dest = mpr_dest;
    return MRCN_OK;
}

/* Grow an array of `size`-byte items to hold one more. */
static int reserve(void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return MRCN_OK;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = realloc(*items, ncap * size);
    if (!p)
        return MRCN_ENOMEM;
    *items = p;
    *cap = ncap;
    return MRCN_OK;
}

/* ---- the PSN bitmap: self._chunks ---------------------------------------------------- */

static mrcn_chunk *chunk_get(mrcn_responder *r, uint32_t ch)
{
    mrcn_chunk *c = &r->chunks[ch % MRCN_RESPONDER_CHUNKS];
    return c->used && c->ch == ch ? c : NULL;
}

/* chunks.get(ch, 0) */
static uint64_t chunk_bits(mrcn_responder *r, uint32_t ch)
{
    const mrcn_chunk *c = chunk_get(r, ch);
    return c ? c->bits : 0;
}

/* chunks[ch] |= bit. Live chunks lie within MRCN_RESPONDER_CHUNKS - 1 of the cumulative
 * PSN's chunk (the window bound), so a used slot is always this chunk's. */
static int chunk_set(mrcn_responder *r, uint32_t ch, uint64_t bit)
{
    mrcn_chunk *c = &r->chunks[ch % MRCN_RESPONDER_CHUNKS];
    if (c->used && c->ch != ch)
        return MRCN_ESTATE;
    if (!c->used) {
        c->used = 1;
        c->ch = ch;
        c->bits = 0;
        r->n_chunks++;
    }
    c->bits |= bit;
    return MRCN_OK;
}

static void chunk_del(mrcn_responder *r, uint32_t ch)
{
    mrcn_chunk *c = chunk_get(r, ch);
    if (c) {
        c->used = 0;
        c->bits = 0;
        r->n_chunks--;
    }
}

/* Responder._advance_cum */
static void advance_cum(mrcn_responder *r)
{
    uint64_t c = r->rcv_cum;
    for (;;) {
        uint32_t ch = (uint32_t)(c >> 6);
        uint64_t bits = chunk_bits(r, ch) >> (c & 63);
        if (!(bits & 1))
            break;
        /* (bits ^ (bits + 1)).bit_length() - 1: the trailing ones */
        unsigned ones = bits == UINT64_MAX ? 64u : (unsigned)__builtin_ctzll(~bits);
        c += ones;
        if (c & 63)
            break;
        chunk_del(r, ch);
    }
    r->rcv_cum = c;
}

/* ---- queues ------------------------------------------------------------------------- */

/* self._dirty[ch] = (ev, ts): update in place (dict order) or append. */
static int dirty_set(mrcn_responder *r, uint32_t ch, uint32_t ev, uint64_t ts)
{
    for (size_t i = r->n_dirty; i-- > 0;) {
        if (r->dirty[i].ch == ch) {
            r->dirty[i].ev = ev;
            r->dirty[i].ts = ts;
            return MRCN_OK;
        }
    }
    if (reserve((void **)&r->dirty, &r->cap_dirty, r->n_dirty, sizeof(*r->dirty)))
        return MRCN_ENOMEM;
    r->dirty[r->n_dirty++] = (mrcn_dirty){ch, ev, ts};
    return MRCN_OK;
}

static int reverse_seen(mrcn_responder *r, uint32_t ev, double now)
{
    mrcn_evmap_val *v = mrcn_evmap_put(&r->reverse_evs, ev);
    if (!v)
        return MRCN_ENOMEM;
    v->t = now;
    return mrcn_reverse_arrived(&r->reverse, ev);
}

/* Append an encoded control packet, its EV chosen by the reverse EV set for `fwd_ev`
 * (or `fixed_ev` when choose is 0). */
static int out_push(mrcn_responder *r, const uint8_t *bytes, int len, int choose,
                    uint32_t fwd_ev)
{
    if (len < 0)
        return len;
    uint32_t ev = fwd_ev;
    if (choose) {
        int rc = mrcn_reverse_choose(&r->reverse, fwd_ev, &ev);
        if (rc)
            return rc;
    }
    if (reserve((void **)&r->out, &r->cap_out, r->n_out, sizeof(*r->out)))
        return MRCN_ENOMEM;
    mrcn_ctrl *c = &r->out[r->n_out++];
    memcpy(c->bytes, bytes, (size_t)len);
    c->len = (uint32_t)len;
    c->ev = ev;
    return MRCN_OK;
}

static int wc_push(mrcn_responder *r, double now, uint64_t wr_id, uint32_t imm, uint32_t psn,
                   uint8_t status)
{
    if (reserve((void **)&r->wcs, &r->cap_wcs, r->n_wcs, sizeof(*r->wcs)))
        return MRCN_ENOMEM;
    r->wcs[r->n_wcs++] = (mrcn_wc){now, wr_id, imm, psn, status};
    return MRCN_OK;
}

/* self._recvs.popleft(); 0 when empty (Python's IndexError). */
static int recv_pop(mrcn_responder *r, uint64_t *wr_id)
{
    if (!r->n_recvs)
        return 0;
    *wr_id = r->recvs[r->recv_head];
    r->recv_head = (r->recv_head + 1) % r->cap_recvs;
    r->n_recvs--;
    return 1;
}

int mrcn_responder_post_recv(mrcn_responder *r, uint64_t wr_id)
{
    if (r->n_recvs == r->cap_recvs) {
        size_t ncap = r->cap_recvs ? r->cap_recvs * 2 : 8;
        uint64_t *p = malloc(ncap * sizeof(*p));
        if (!p)
            return MRCN_ENOMEM;
        for (size_t i = 0; i < r->n_recvs; i++)
            p[i] = r->recvs[(r->recv_head + i) % r->cap_recvs];
        free(r->recvs);
        r->recvs = p;
        r->cap_recvs = ncap;
        r->recv_head = 0;
    }
    r->recvs[(r->recv_head + r->n_recvs) % r->cap_recvs] = wr_id;
    r->n_recvs++;
    return MRCN_OK;
}

/* heapq.heappush on (psn, imm); PSNs in the heap are distinct. */
static int imm_push(mrcn_responder *r, uint32_t psn, uint32_t imm)
{
    if (reserve((void **)&r->imm_heap, &r->cap_imm, r->n_imm, sizeof(*r->imm_heap)))
        return MRCN_ENOMEM;
    size_t i = r->n_imm++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (r->imm_heap[parent].psn <= psn)
            break;
        r->imm_heap[i] = r->imm_heap[parent];
        i = parent;
    }
    r->imm_heap[i] = (mrcn_imm){psn, imm};
    return MRCN_OK;
}

static mrcn_imm imm_pop(mrcn_responder *r)
{
    mrcn_imm top = r->imm_heap[0], last = r->imm_heap[--r->n_imm];
    size_t i = 0, n = r->n_imm;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && r->imm_heap[c + 1].psn < r->imm_heap[c].psn)
            c++;
        if (last.psn <= r->imm_heap[c].psn)
            break;
        r->imm_heap[i] = r->imm_heap[c];
        i = c;
    }
    if (n)
        r->imm_heap[i] = last;
    return top;
}

/* Responder._deliver_imms */
static int deliver_imms(mrcn_responder *r, double now)
{
    while (r->n_imm && r->imm_heap[0].psn < r->rcv_cum) {
        mrcn_imm m = imm_pop(r);
        uint64_t wr_id;
        if (!recv_pop(r, &wr_id))
            return MRCN_ESTATE;
        int rc = wc_push(r, now, wr_id, m.imm, m.psn, MRCN_WC_SUCCESS);
        if (rc)
            return rc;
    }
    return MRCN_OK;
}

/* ---- control packets ---------------------------------------------------------------- */

/* Responder._nack */
static int nack(mrcn_responder *r, uint32_t psn, uint32_t ev, uint64_t ts, uint8_t reason)
{
    mrcn_nack k = {r->dest_qpn, psn, ev, ts, reason};
    uint8_t buf[MRCN_MAX_CONTROL_BYTES];
    return out_push(r, buf, mrcn_encode_nack(&k, buf, sizeof(buf)), 1, ev);
}

static int cmp_dirty(const void *a, const void *b)
{
    uint32_t x = ((const mrcn_dirty *)a)->ch, y = ((const mrcn_dirty *)b)->ch;
    return (x > y) - (x < y);
}

/* Responder._flush_sacks: one SACK per dirty chunk, chunks below the cumulative PSN's
 * folded into it; `ce` set: the latest arrival (ce_ev, ce_ts) was CE-marked. */
static int flush_sacks(mrcn_responder *r, int ce, uint32_t ce_ev, uint64_t ce_ts,
                       uint8_t ce_mode)
{
    if (!r->n_dirty)
        return MRCN_OK;
    uint32_t cum_ch = (uint32_t)(r->rcv_cum >> 6);
    mrcn_dirty *d = r->dirty;
    size_t n = r->n_dirty, m = 0;
    if (n > 1) {
        /* the marked arrival's echo wins its folded chunk: only chunk cum_ch folds */
        int ce_folded = 0;
        for (size_t i = 0; ce && i < n; i++)
            ce_folded |= d[i].ch <= cum_ch && d[i].ev == ce_ev && d[i].ts == ce_ts;
        qsort(d, n, sizeof(*d), cmp_dirty);
        for (size_t i = 0; i < n; i++) {
            uint32_t ch = d[i].ch > cum_ch ? d[i].ch : cum_ch;
            if (m && d[m - 1].ch == ch) {
                d[m - 1].ev = d[i].ev;
                d[m - 1].ts = d[i].ts;
            } else {
                d[m++] = (mrcn_dirty){ch, d[i].ev, d[i].ts};
            }
        }
        if (ce_folded) {
            d[0].ev = ce_ev;
            d[0].ts = ce_ts;
        }
    } else {
        if (d[0].ch < cum_ch)
            d[0].ch = cum_ch;
        m = 1;
    }
    for (size_t i = 0; i < m; i++) {
        mrcn_sack s;
        s.dest_qpn = r->dest_qpn;
        s.cum_psn = (uint32_t)r->rcv_cum;
        s.sack_base = d[i].ch << 6;
        s.bitmap = chunk_bits(r, d[i].ch);
        s.ev = d[i].ev;
        s.timestamp_ns = d[i].ts;
        s.ooo_count = (uint32_t)r->above;
        s.received_bytes = r->rx_bytes;
        if (ce && d[i].ev == ce_ev && d[i].ts == ce_ts) {
            s.flags = MRCN_FLAG_ECN_ECHO;
            s.mode = ce_mode;
        } else {
            s.flags = s.mode = 0;
        }
        uint8_t buf[MRCN_MAX_CONTROL_BYTES];
        int rc = out_push(r, buf, mrcn_encode_sack(&s, buf, sizeof(buf)), 1, s.ev);
        if (rc)
            return rc;
    }
    r->n_dirty = 0;
    r->sack_pending = 0;
    r->has_deadline = 0;
    return MRCN_OK;
}

/* Responder._end_ce_run */
static void end_ce_run(mrcn_responder *r, uint32_t ev)
{
    mrcn_evmap_del(&r->ce_run, ev);
    r->clean++;
}

/* Responder._ce_sack */
static int ce_sack(mrcn_responder *r, uint32_t ev, uint64_t ts)
{
    int64_t clean = r->clean;
    mrcn_evmap_val *v = mrcn_evmap_get(&r->ce_run, ev);
    int64_t run = v ? v->a : 0, start = v ? v->b : clean;
    v = mrcn_evmap_put(&r->ce_run, ev);
    if (!v)
        return MRCN_ENOMEM;
    v->a = run + 1;
    v->b = start;
    int always = run + 1 >= r->cfg.always_skip_ce_run && r->clean > start;
    return flush_sacks(r, 1, ev, ts,
                       always ? MRCN_SACK_ALWAYS_SKIP : MRCN_SACK_SKIP_ONCE);
}

/* Responder._hold_s */
static double hold_s(const mrcn_responder *r, double gap)
{
    double coalesce = r->cfg.ack_coalesce_s;
    return gap <= coalesce && coalesce > r->cfg.ack_delay_s ? coalesce : r->cfg.ack_delay_s;
}

/* The tail shared by every placed packet: ECN echo, CE run, SACK now or hold. */
static int ack_placed(mrcn_responder *r, uint32_t ev, uint64_t ts, uint8_t flags, double gap,
                      double now, int ecn)
{
    if (ecn)
        return ce_sack(r, ev, ts);
    if (r->ce_run.n)
        end_ce_run(r, ev);
    if ((flags & ACK_NOW) || r->sack_pending >= r->cfg.sack_every)
        return flush_sacks(r, 0, 0, 0, 0);
    if (!r->has_deadline) {
        r->ack_deadline = now + hold_s(r, gap);
        r->has_deadline = 1;
    }
    return MRCN_OK;
}

/* Responder._in_window: *is_new = 1 if `psn` is new (duplicates, out of window and RC
 * out-of-order answered here). */
static int in_window(mrcn_responder *r, uint32_t psn, uint32_t ev, uint64_t ts, double now,
                     int rtx, int *is_new)
{
    int rc = reverse_seen(r, ev, now);
    if (rc)
        return rc;
    *is_new = 0;
    uint64_t cum = r->rcv_cum;
    uint32_t ch = psn >> 6;
    if (psn < cum || ((chunk_bits(r, ch) >> (psn & 63)) & 1)) {
        r->rx_duplicates++;
        if (rtx && (rc = mrcn_reverse_ack_lost(&r->reverse)))
            return rc;
        uint32_t cum_ch = (uint32_t)(cum >> 6);
        if ((rc = dirty_set(r, ch > cum_ch ? ch : cum_ch, ev, ts)))
            return rc;
        return flush_sacks(r, 0, 0, 0, 0);
    }
    if (psn >= cum + (uint64_t)r->mpr_dest * 128) {
        r->rx_out_of_window++;
        return nack(r, psn, ev, ts, MRCN_NACK_PSN_OOR_WINDOW);
    }
    if (r->rc && psn != cum) {
        if (!r->seq_err_sent) {
            r->seq_err_sent = 1;
            return nack(r, (uint32_t)cum, ev, ts, MRCN_NACK_SEQ_ERR);
        }
        return MRCN_OK;
    }
    *is_new = 1;
    return MRCN_OK;
}

/* Responder._place: `payload` holds `length` bytes. */
static int place(mrcn_responder *r, const uint8_t *payload, uint32_t psn, uint32_t ev,
                 uint64_t off, uint32_t length, uint64_t ts, uint8_t flags, int has_imm,
                 uint32_t imm, double now, int ecn)
{
    uint64_t cum = r->rcv_cum;
    uint32_t ch = psn >> 6;
    int is_new, rc = in_window(r, psn, ev, ts, now, flags & MRCN_FLAG_RTX, &is_new);
    if (rc || !is_new)
        return rc;
    if (has_imm) {
        size_t held = r->n_imm;   /* accepted, each holding a posted receive */
        if (held >= r->n_recvs || (int64_t)held >= r->max_wimm_dest) {
            r->rx_no_recv++;
            return nack(r, psn, ev, ts, MRCN_NACK_NO_PKT_BUFFER);
        }
    }
    if ((rc = chunk_set(r, ch, (uint64_t)1 << (psn & 63))))
        return rc;
    if (psn == cum) {
        r->seq_err_sent = 0;
        advance_cum(r);
        r->above -= (int64_t)(r->rcv_cum - cum - 1);
    } else {
        r->rx_ooo++;
        r->above++;
    }
    if (length)
        memcpy(r->mem + off, payload, length);
    r->rx_packets++;
    r->rx_bytes += length;
    double gap = now - r->last_data_at;
    r->last_data_at = now;
    if (has_imm && (rc = imm_push(r, psn, imm)))
        return rc;
    if (r->n_imm && (rc = deliver_imms(r, now)))
        return rc;
    if ((rc = dirty_set(r, ch, ev, ts)))
        return rc;
    r->sack_pending++;
    return ack_placed(r, ev, ts, flags, gap, now, ecn);
}

int mrcn_responder_on_data(mrcn_responder *r, const uint8_t *buf, size_t n, double now, int ecn)
{
    int rc;
    if (n >= PLAIN_BYTES) {
        /* Fast path: an in-window, non-trimmed packet without an immediate, fully
         * validated here (same checks as packet.unpack_data, CRC included). */
        uint8_t ver = buf[0], ptype = buf[1], opcode = buf[2], flags = buf[3];
        uint32_t qpn = be32(buf + 4), psn = be32(buf + 8), ev = be32(buf + 12);
        uint64_t off = be64(buf + 16), ts = be64(buf + 28);
        uint32_t length = be32(buf + 24);
        size_t end = n - MRCN_CRC_BYTES;
        if (ver == MRCN_VERSION && ptype == MRCN_PT_DATA && plain_opcode(opcode)
            && !(flags & FAST_FLAGS_MASK) && end - HDR == length && psn <= MRCN_MAX_PSN
            && qpn == r->qpn && r->has_mem && fits(r, off, length)) {
            if (mrcn_crc32(buf, end) != be32(buf + end))
                return MRCN_ECRC;
            if (psn != r->rcv_cum || r->n_chunks || r->n_imm)
                return place(r, buf + HDR, psn, ev, off, length, ts, flags, 0, 0, now, ecn);
            /* In order with nothing pending above it: place without the bitmap work. */
            r->rcv_cum = (uint64_t)psn + 1;
            r->seq_err_sent = 0;
            if ((rc = reverse_seen(r, ev, now)))
                return rc;
            if (length)
                memcpy(r->mem + off, buf + HDR, length);
            r->rx_packets++;
            r->rx_bytes += length;
            double gap = now - r->last_data_at;
            r->last_data_at = now;
            if ((rc = dirty_set(r, psn >> 6, ev, ts)))
                return rc;
            r->sack_pending++;
            return ack_placed(r, ev, ts, flags, gap, now, ecn);
        }
    }
    /* pk.unpack_data: a DATA packet, fully validated */
    if (n < 2 || buf[1] != MRCN_PT_DATA)
        return MRCN_EPROTO;
    mrcn_packet p;
    if ((rc = mrcn_decode(buf, n, &p)))
        return rc;
    const mrcn_data *d = &p.u.data;
    if (d->dest_qpn != r->qpn) {
        r->bad_packets++;
        return MRCN_OK;
    }
    if (d->flags & MRCN_FLAG_TRIMMED) {
        if ((rc = reverse_seen(r, d->ev, now)))
            return rc;
        return nack(r, d->psn, d->ev, d->timestamp_ns,
                    d->flags & MRCN_FLAG_TRIMMED_LASTHOP ? MRCN_NACK_TRIMMED_LASTHOP
                                                         : MRCN_NACK_TRIMMED);
    }
    if (!r->has_mem || !fits(r, d->remote_offset, d->length)) {
        int is_new;
        rc = in_window(r, d->psn, d->ev, d->timestamp_ns, now, d->flags & MRCN_FLAG_RTX,
                       &is_new);
        if (!rc && is_new)
            r->rx_access_errors++;
        return rc;
    }
    return place(r, buf + d->payload_off, d->psn, d->ev, d->remote_offset, d->length,
                 d->timestamp_ns, d->flags, d->has_imm, d->imm, now, ecn);
}

int mrcn_responder_on_probe_req(mrcn_responder *r, const mrcn_probe *req)
{
    mrcn_probe rsp = {r->dest_qpn, req->probe_id, req->req_ev, req->rsp_ev, req->timestamp_ns, 1};
    uint8_t buf[MRCN_MAX_CONTROL_BYTES];
    return out_push(r, buf, mrcn_encode_probe(&rsp, buf, sizeof(buf)), 0, req->rsp_ev);
}

int mrcn_responder_on_timer(mrcn_responder *r, double now)
{
    if (r->has_deadline && r->ack_deadline <= now)
        return flush_sacks(r, 0, 0, 0, 0);
    return MRCN_OK;
}

int mrcn_responder_stop(mrcn_responder *r, double now)
{
    r->n_out = 0;
    r->has_deadline = 0;
    uint64_t wr_id;
    while (recv_pop(r, &wr_id)) {
        int rc = wc_push(r, now, wr_id, 0, 0, MRCN_WC_WR_FLUSH_ERR);
        if (rc)
            return rc;
    }
    return MRCN_OK;
}

int mrcn_responder_deadline(const mrcn_responder *r, double *at)
{
    if (!r->has_deadline)
        return 0;
    *at = r->ack_deadline;
    return 1;
}

/* ---- Responder.receive_batch --------------------------------------------------------- */

void mrcn_responder_batch_begin(mrcn_responder *r, mrcn_responder_batch *b)
{
    b->cum = r->rcv_cum;
    b->pending = r->sack_pending;
    b->last = r->last_data_at;
    b->has_hold_gap = 0;
    b->hold_gap = 0.0;
    b->packets = b->nbytes = 0;
    b->clear = !r->n_chunks && !r->n_imm;
}

/* "anything else: the one-by-one path on the written-back state" */
static void batch_write_back(mrcn_responder *r, mrcn_responder_batch *b, double now)
{
    r->rcv_cum = b->cum;
    r->sack_pending = b->pending;
    r->last_data_at = b->last;
    if (b->has_hold_gap) {       /* the hold the one-by-one path would have started */
        r->ack_deadline = now + hold_s(r, b->hold_gap);
        r->has_deadline = 1;
        b->has_hold_gap = 0;
    }
    r->rx_packets += b->packets;
    r->rx_bytes += b->nbytes;
    if (b->packets)
        r->seq_err_sent = 0;
    b->packets = b->nbytes = 0;
}

int mrcn_responder_batch_fast(mrcn_responder *r, mrcn_responder_batch *b, const uint8_t *buf,
                              size_t n, int marked, double now)
{
    if (b->clear && !marked && n >= PLAIN_BYTES && buf[1] == MRCN_PT_DATA) {
        uint8_t ver = buf[0], opcode = buf[2], flags = buf[3];
        uint32_t dq = be32(buf + 4), psn = be32(buf + 8), ev = be32(buf + 12);
        uint64_t off = be64(buf + 16), ts = be64(buf + 28);
        uint32_t length = be32(buf + 24);
        size_t end = n - MRCN_CRC_BYTES;
        /* the one-by-one fast path's checks (on_data), PSN bound and memory included */
        if (psn == b->cum && psn <= MRCN_MAX_PSN && ver == MRCN_VERSION && plain_opcode(opcode)
            && !(flags & FAST_FLAGS_MASK) && end - HDR == length && dq == r->qpn
            && r->has_mem && fits(r, off, length) && mrcn_crc32(buf, end) == be32(buf + end)) {
            int rc;
            b->cum = (uint64_t)psn + 1;
            if ((rc = reverse_seen(r, ev, now)))
                return rc;
            if (length)
                memcpy(r->mem + off, buf + HDR, length);
            b->packets++;
            b->nbytes += length;
            double gap = now - b->last;
            b->last = now;
            if ((rc = dirty_set(r, psn >> 6, ev, ts)))
                return rc;
            b->pending++;
            if (r->ce_run.n)
                end_ce_run(r, ev);
            if ((flags & ACK_NOW) || b->pending >= r->cfg.sack_every) {
                r->rcv_cum = b->cum;
                r->sack_pending = b->pending;
                r->rx_packets += b->packets;
                r->rx_bytes += b->nbytes;
                b->packets = b->nbytes = 0;
                r->seq_err_sent = 0;
                if ((rc = flush_sacks(r, 0, 0, 0, 0)))
                    return rc;
                b->pending = 0;
                b->has_hold_gap = 0;
            } else if (!b->has_hold_gap && !r->has_deadline) {
                b->has_hold_gap = 1;
                b->hold_gap = gap;
            }
            return 1;
        }
    }
    batch_write_back(r, b, now);
    return 0;
}

void mrcn_responder_batch_reload(mrcn_responder *r, mrcn_responder_batch *b)
{
    b->cum = r->rcv_cum;
    b->pending = r->sack_pending;
    b->last = r->last_data_at;
    b->clear = !r->n_chunks && !r->n_imm;
}

void mrcn_responder_batch_end(mrcn_responder *r, mrcn_responder_batch *b, double now)
{
    batch_write_back(r, b, now);
}
