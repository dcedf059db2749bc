/* Loss detection: the twin of agents/mrc/loss.py (see mrcn_loss.h). Each function names the
 * LossDetector method it mirrors; float expressions keep Python's operand order. */
#include "mrcn_loss.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcn_pyfloat.h"
#include "mrcn_requester.h"

/* ---- containers ------------------------------------------------------------------------ */

void mrcn_deque_free(mrcn_deque *d)
{
    free(d->buf);
    memset(d, 0, sizeof *d);
}

int mrcn_deque_push(mrcn_deque *d, int64_t a, int64_t b)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        mrcn_pair *buf = malloc(cap * sizeof *buf);
        if (buf == NULL)
            return MRCN_ENOMEM;
        for (size_t i = 0; i < d->n; i++)
            buf[i] = d->buf[(d->head + i) & (d->cap - 1)];
        free(d->buf);
        d->buf = buf;
        d->cap = cap;
        d->head = 0;
    }
    mrcn_pair *p = &d->buf[(d->head + d->n) & (d->cap - 1)];
    p->a = a;
    p->b = b;
    d->n++;
    return MRCN_OK;
}

/* Python's tuple order (deadline, psn, ts). */
static bool timer_lt(const mrcn_timer *x, const mrcn_timer *y)
{
    if (x->deadline != y->deadline)
        return x->deadline < y->deadline;
    if (x->psn != y->psn)
        return x->psn < y->psn;
    return x->ts < y->ts;
}

int mrcn_loss_timer_push(mrcn_loss *l, double deadline, uint32_t psn, uint64_t ts)
{
    if (l->n_timers == l->cap_timers) {
        size_t cap = l->cap_timers ? l->cap_timers * 2 : 64;
        mrcn_timer *t = realloc(l->timers, cap * sizeof *t);
        if (t == NULL)
            return MRCN_ENOMEM;
        l->timers = t;
        l->cap_timers = cap;
    }
    mrcn_timer x = {deadline, psn, ts};
    size_t i = l->n_timers++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!timer_lt(&x, &l->timers[p]))
            break;
        l->timers[i] = l->timers[p];
        i = p;
    }
    l->timers[i] = x;
    return MRCN_OK;
}

static void timer_pop(mrcn_loss *l)
{
    mrcn_timer last = l->timers[--l->n_timers];
    size_t i = 0, n = l->n_timers;
    if (n == 0)
        return;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && timer_lt(&l->timers[c + 1], &l->timers[c]))
            c++;
        if (!timer_lt(&l->timers[c], &last))
            break;
        l->timers[i] = l->timers[c];
        i = c;
    }
    l->timers[i] = last;
}

/* ---- life cycle ------------------------------------------------------------------------ */

void mrcn_loss_init(mrcn_loss *l)
{
    memset(l, 0, sizeof *l);
    l->hi_acked_gseq = -1;
    l->hi_acked_sent_at = -INFINITY;
    l->hi_acked_at = -INFINITY;
    l->rtt_min_s = INFINITY;
}

void mrcn_loss_free(mrcn_loss *l)
{
    for (uint32_t i = 0; i < l->cap; i++) {
        mrcn_deque_free(&l->ev_q[i]);
        mrcn_deque_free(&l->ev_fresh[i]);
    }
    free(l->ev_q);
    free(l->ev_fresh);
    free(l->fresh_key);
    free(l->fresh_order);
    free(l->timers);
    mrcn_deque_free(&l->sent_order);
    mrcn_loss_init(l);
}

int mrcn_loss_attach(mrcn_loss *l, uint32_t cap)
{
    if (l->cap)   /* one EV set per requester life (INIT happens once after RST) */
        return MRCN_ESTATE;
    l->ev_q = calloc(cap, sizeof *l->ev_q);
    l->ev_fresh = calloc(cap, sizeof *l->ev_fresh);
    l->fresh_key = calloc(cap, sizeof *l->fresh_key);
    l->fresh_order = calloc(cap, sizeof *l->fresh_order);
    if (l->ev_q == NULL || l->ev_fresh == NULL || l->fresh_key == NULL || l->fresh_order == NULL) {
        free(l->ev_q);
        free(l->ev_fresh);
        free(l->fresh_key);
        free(l->fresh_order);
        l->ev_q = l->ev_fresh = NULL;
        l->fresh_key = NULL;
        l->fresh_order = NULL;
        return MRCN_ENOMEM;
    }
    l->cap = cap;
    return MRCN_OK;
}

void mrcn_loss_clear(mrcn_loss *l)
{
    l->has_no_path = false;
    l->n_stalled = 0;
    l->n_timers = 0;
    for (uint32_t i = 0; i < l->cap; i++) {
        mrcn_deque_clear(&l->ev_q[i]);
        mrcn_deque_clear(&l->ev_fresh[i]);
        l->fresh_key[i] = false;
    }
    l->n_fresh = 0;
    mrcn_deque_clear(&l->sent_order);
}

int mrcn_loss_fresh_push(mrcn_loss *l, uint32_t rec, uint32_t psn)
{
    if (!l->fresh_key[rec]) {   /* defaultdict: the key is inserted on first use */
        l->fresh_key[rec] = true;
        l->fresh_order[l->n_fresh++] = rec;
    }
    return mrcn_deque_push(&l->ev_fresh[rec], psn, 0);
}

static uint32_t rec_of(mrcn_req *r, uint32_t ev)
{
    return (uint32_t)(mrcn_ev_get(r->evs, ev) - r->evs->info);
}

/* ---- rules ----------------------------------------------------------------------------- */

int mrcn_loss_on_retransmit(mrcn_req *r, uint32_t psn, int64_t seq, double now)
{
    mrcn_loss *l = &r->loss;
    mrcn_tx *tx = mrcn_req_tx(r, psn);
    int rc;
    if (r->cfg->loss_inference) {   /* the inference rules' queues (none without inference) */
        if (!r->cfg->rc && (rc = mrcn_deque_push(&l->sent_order, tx->gseq, psn)) < 0)
            return rc;
        if ((rc = mrcn_deque_push(&l->ev_q[rec_of(r, tx->ev)], seq, psn)) < 0)
            return rc;
    }
    double d = now + mrcn_rtt_backoff_s(r->rtt, tx->timeouts, r->attr.retry_linear_cnt);
    return mrcn_loss_timer_push(l, d, psn, tx->ts_ns);
}

int mrcn_loss_on_acked(mrcn_req *r, const uint32_t *touched, uint32_t n_touched,
                       int64_t hi_gseq, double hi_sent_at, double now)
{
    mrcn_loss *l = &r->loss;
    int rc;
    /* per-EV packet threshold: reorder_threshold later ones on the EV acked (its queues
     * are empty without loss inference) */
    for (uint32_t i = 0; r->cfg->loss_inference && i < n_touched; i++) {
        uint32_t e = touched[i];
        mrcn_deque *q = &l->ev_q[e];
        mrcn_ev_info *info = &r->evs->info[e];
        while (q->n && mrcn_deque_front(q)->a <= info->acked_seq - r->cfg->reorder_threshold) {
            int64_t seq = mrcn_deque_front(q)->a;
            uint32_t psn = (uint32_t)mrcn_deque_front(q)->b;
            mrcn_deque_pop(q);
            mrcn_tx *tx = mrcn_req_tx(r, psn);
            if (tx != NULL && tx->ev_seq == seq && tx->ev == info->ev && !tx->lost &&
                (rc = mrcn_loss_lose(r, psn, now, MRCN_LOSS_EV_THRESHOLD)) <= 0)
                return rc < 0 ? rc : MRCN_OK;
        }
    }
    if (hi_gseq > l->hi_acked_gseq) {
        l->hi_acked_gseq = hi_gseq;
        l->hi_acked_sent_at = hi_sent_at;
        l->hi_acked_at = now;
        return mrcn_loss_ooo_scan(r, now);
    }
    return MRCN_OK;
}

/* LossDetector._charge_run: extend ``ev``'s run of unexcused losses, found by ``cause``. */
static int charge_run(mrcn_req *r, uint32_t ev, uint64_t ts, mrcn_ev_info *info, double now,
                      mrcn_loss_cause cause)
{
    if (info->loss_run_ts_ns < info->delivered_ts_ns) { /* a delivery since the last loss */
        info->loss_run = 0;
        info->loss_run_timeout = false;
    }
    if (ts <= info->loss_run_ts_ns)
        return MRCN_OK;                                 /* counted already (RC rewinds, races) */
    info->loss_run++;
    info->loss_run_ts_ns = ts;
    info->loss_run_timeout = info->loss_run_timeout || cause == MRCN_LOSS_TIMEOUT;
    if (info->loss_run >= r->cfg->ev_loss_run) {
        mrcn_ev_state st = 0;
        int a = mrcn_ev_apply_loss(r->evs, ev, now,
                                   info->loss_run_timeout ? MRCN_LOSS_TIMEOUT : (int32_t)cause, &st);
        int rc = mrcn_req_drain_ev(r);
        if (a < 0)
            return a;
        if (rc < 0)
            return rc;
        if (st != MRCN_EV_GOOD && info->state == MRCN_EV_ASSUMED_BAD)
            info->loss_run = 0;
    }
    return MRCN_OK;
}

int mrcn_loss_charge_ev(mrcn_req *r, uint32_t psn, mrcn_ev_info *info, double now,
                        mrcn_loss_cause cause)
{
    mrcn_loss *l = &r->loss;
    mrcn_tx *tx = mrcn_req_tx(r, psn);
    if (info->delivered_ts_ns >= tx->ts_ns) {   /* it, or a later packet on the EV, arrived */
        info->losses_excused++;
        l->ev_losses_excused++;
        return MRCN_OK;
    }
    if (cause == MRCN_LOSS_OOO && now - info->delivered_at_s < mrcn_loss_ooo_guard_s(r)) {
        l->ev_losses_live++;   /* the EV still delivers: a queue, not a failure */
        return MRCN_OK;
    }
    if (cause == MRCN_LOSS_TIMEOUT && l->hi_acked_gseq < tx->gseq) {
        l->ev_losses_stalled++;
        if (l->n_stalled == MRCN_STALLED_KEPT) {   /* forget the oldest */
            memmove(l->stalled_at, l->stalled_at + 1, (MRCN_STALLED_KEPT - 1) * sizeof l->stalled_at[0]);
            memmove(l->stalled_ts, l->stalled_ts + 1, (MRCN_STALLED_KEPT - 1) * sizeof l->stalled_ts[0]);
            memmove(l->stalled_ev, l->stalled_ev + 1, (MRCN_STALLED_KEPT - 1) * sizeof l->stalled_ev[0]);
            l->n_stalled--;
        }
        l->stalled_at[l->n_stalled] = mrcn_stamp_of(now);
        l->stalled_ts[l->n_stalled] = tx->ts_ns;
        l->stalled_ev[l->n_stalled] = tx->ev;
        l->n_stalled++;
        return MRCN_OK;
    }
    return charge_run(r, tx->ev, tx->ts_ns, info, now, cause);
}

/* LossDetector._confirm_stalled: the transmission stamped ``ts`` arrived; the timeouts that
 * fired before it was sent are charged. */
static int confirm_stalled(mrcn_req *r, uint64_t ts, double now)
{
    mrcn_loss *l = &r->loss;
    uint64_t cts[MRCN_STALLED_KEPT];   /* the due entries' ts_ns and ev */
    uint32_t cev[MRCN_STALLED_KEPT];
    uint32_t n = l->n_stalled, kept = 0, nc = 0;
    for (uint32_t i = 0; i < n; i++) {   /* split first: charging may not reenter this list */
        if (l->stalled_at[i] > (int64_t)ts) {
            l->stalled_at[kept] = l->stalled_at[i];
            l->stalled_ts[kept] = l->stalled_ts[i];
            l->stalled_ev[kept] = l->stalled_ev[i];
            kept++;
        } else {
            cts[nc] = l->stalled_ts[i];
            cev[nc] = l->stalled_ev[i];
            nc++;
        }
    }
    l->n_stalled = kept;
    for (uint32_t i = 0; i < nc; i++) {
        mrcn_ev_info *info = mrcn_ev_get(r->evs, cev[i]);
        if (info == NULL)
            continue;
        if (info->delivered_ts_ns >= cts[i]) {
            info->losses_excused++;
            l->ev_losses_excused++;
            continue;
        }
        l->ev_losses_confirmed++;
        int rc = charge_run(r, cev[i], cts[i], info, now, MRCN_LOSS_TIMEOUT);
        if (rc < 0)
            return rc;
    }
    return MRCN_OK;
}

/* LossCause.value, for the ERR reason. */
static const char *cause_name(mrcn_loss_cause c)
{
    static const char *const names[] = {"ev_threshold", "ooo", "timeout", "trimmed", "nack",
                                        "seq_err"};
    return (unsigned)c < sizeof names / sizeof names[0] ? names[c] : "?";
}

/* LossDetector._exhausted: 1 (the QP sent to ERR) when the PSN's timeouts and loss retries
 * together exceed linear_cnt + exp_cnt, 0 if not, or a negative status. */
static int exhausted(mrcn_req *r, uint32_t psn, const mrcn_tx *tx, double now,
                     mrcn_loss_cause cause)
{
    uint32_t exp = r->attr.retry_exp_cnt;
    int64_t n = tx->timeouts + tx->loss_retries;
    if (exp == MRCN_RETRY_EXP_INFINITE || n <= (int64_t)r->attr.retry_linear_cnt + (int64_t)exp)
        return 0;
    char reason[MRCN_REASON_BYTES];
    if (tx->loss_retries)
        snprintf(reason, sizeof reason,
                 "retry exhausted: PSN %u lost %lld times, %lld by timeout, last by %s (EV %u)",
                 psn, (long long)n, (long long)tx->timeouts, cause_name(cause), tx->ev);
    else
        snprintf(reason, sizeof reason, "retry exhausted: PSN %u timed out %lld times (EV %u)",
                 psn, (long long)n, tx->ev);
    int rc = r->on_error(r->on_error_ctx, now, reason);
    return rc < 0 ? rc : 1;
}

int mrcn_loss_spend_retry(mrcn_req *r, uint32_t psn, double now, mrcn_loss_cause cause)
{
    mrcn_tx *tx = mrcn_req_tx(r, psn);
    tx->loss_retries++;
    r->loss.loss_retries++;
    int rc = exhausted(r, psn, tx, now, cause);
    return rc < 0 ? rc : !rc;
}

int mrcn_loss_lose(mrcn_req *r, uint32_t psn, double now, mrcn_loss_cause cause)
{
    if (mrcn_loss_retry_spent(cause)) {
        int spent = mrcn_loss_spend_retry(r, psn, now, cause);
        if (spent <= 0)
            return spent;
    }
    int rc = mrcn_req_declare_lost(r, psn, now, cause);
    return rc < 0 ? rc : 1;
}

/* LossDetector._timeout: one timer expiry; 0 when the retries are exhausted (QP in ERR),
 * 1 otherwise, or a negative status. */
static int timeout(mrcn_req *r, uint32_t psn, double now)
{
    mrcn_tx *tx = mrcn_req_tx(r, psn);
    tx->timeouts++;
    r->loss.timeouts++;
    int rc = exhausted(r, psn, tx, now, MRCN_LOSS_TIMEOUT);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    rc = r->cfg->rc ? mrcn_req_go_back_n(r, psn, now, MRCN_LOSS_TIMEOUT)
                    : mrcn_req_declare_lost(r, psn, now, MRCN_LOSS_TIMEOUT);
    return rc < 0 ? rc : 1;
}

void mrcn_loss_on_no_path(mrcn_req *r, uint32_t psn, double now)
{
    mrcn_loss *l = &r->loss;
    mrcn_tx *tx = mrcn_req_tx(r, psn);
    if (l->has_no_path && l->no_path_psn == psn && l->no_path_ts == tx->ts_ns &&
        l->no_path_timeouts_of == tx->timeouts)
        return;
    l->no_path_deadline = now + mrcn_rtt_backoff_s(r->rtt, tx->timeouts,
                                                   r->attr.retry_linear_cnt);
    l->has_no_path = true;
    l->no_path_psn = psn;
    l->no_path_ts = tx->ts_ns;
    l->no_path_timeouts_of = tx->timeouts;
}

/* LossDetector._fire_no_path: 1, 0 when it exhausted the retries (ERR), or negative. */
static int fire_no_path(mrcn_req *r, double now)
{
    mrcn_loss *l = &r->loss;
    if (!l->has_no_path || !(l->no_path_deadline <= now))   /* > now; NaN: nothing due */
        return 1;
    l->has_no_path = false;
    mrcn_tx *tx = mrcn_req_outstanding(r, l->no_path_psn);
    if (tx == NULL || !tx->lost || tx->ts_ns != l->no_path_ts ||
        tx->timeouts != l->no_path_timeouts_of)
        return 1;
    l->no_path_timeouts++;
    return timeout(r, l->no_path_psn, now);
}

/* LossDetector._ev_head: the oldest first transmission on record ``rec`` still waiting for
 * its ACK; 1 with *psn, or 0. */
static int ev_head(mrcn_req *r, uint32_t rec, uint32_t *psn)
{
    mrcn_deque *q = &r->loss.ev_fresh[rec];
    while (q->n) {
        uint32_t p = (uint32_t)mrcn_deque_front(q)->a;
        mrcn_tx *tx = mrcn_req_tx(r, p);   /* NULL: acknowledged long ago (ev_seq -1) */
        if (tx != NULL && tx->ev_seq >= 0 && !tx->lost && !tx->rtx_count) {
            *psn = p;
            return 1;
        }
        mrcn_deque_pop(q);
    }
    return 0;
}

static double ev_deadline(mrcn_req *r, uint32_t rec, const mrcn_tx *tx)
{
    return mrcn_py_max(tx->sent_at, r->evs->info[rec].last_ack_s) + r->rtt->rto_s;
}

int mrcn_loss_on_timer(mrcn_req *r, double now)
{
    mrcn_loss *l = &r->loss;
    int rc = fire_no_path(r, now);
    if (rc <= 0)
        return rc < 0 ? rc : MRCN_OK;
    uint32_t n_keys = l->n_fresh;   /* list(self.ev_fresh): no key is added meanwhile */
    for (uint32_t i = 0; i < n_keys; i++) {
        uint32_t rec = l->fresh_order[i];
        uint32_t psn;
        while (ev_head(r, rec, &psn) && ev_deadline(r, rec, mrcn_req_tx(r, psn)) <= now) {
            mrcn_deque_pop(&l->ev_fresh[rec]);
            rc = timeout(r, psn, now);
            if (rc <= 0)
                return rc < 0 ? rc : MRCN_OK;
        }
    }
    while (l->n_timers && l->timers[0].deadline <= now) {
        mrcn_timer t = l->timers[0];
        timer_pop(l);
        mrcn_tx *tx = mrcn_req_outstanding(r, t.psn);
        if (tx == NULL || tx->ts_ns != t.ts || tx->lost)
            continue;
        rc = timeout(r, t.psn, now);
        if (rc <= 0)
            return rc < 0 ? rc : MRCN_OK;
    }
    if (!r->cfg->rc)
        return mrcn_loss_ooo_scan(r, now);
    return MRCN_OK;
}

/* LossDetector._ooo_head: the first transmission in send order still waiting (stale
 * entries dropped), if ooo_threshold sent after it are acknowledged; else NULL. */
static mrcn_tx *ooo_head(mrcn_req *r, uint32_t *psn)
{
    mrcn_loss *l = &r->loss;
    mrcn_deque *q = &l->sent_order;
    while (q->n) {
        int64_t g = mrcn_deque_front(q)->a;
        *psn = (uint32_t)mrcn_deque_front(q)->b;
        mrcn_tx *tx = mrcn_req_tx(r, *psn);
        if (tx == NULL || tx->gseq != g || tx->ev_seq < 0 || tx->lost) {   /* resent, acked, lost */
            mrcn_deque_pop(q);
            continue;
        }
        return g <= l->hi_acked_gseq - r->cfg->ooo_threshold ? tx : NULL;
    }
    return NULL;
}

/* LossDetector._ooo_deadline: RACK's reordering timer for the first transmission the
 * cross-EV rule waits on; 0 when none waits or no RTT sample yet. */
static int ooo_deadline(mrcn_req *r, double *out)
{
    mrcn_loss *l = &r->loss;
    uint32_t psn;
    mrcn_tx *tx = ooo_head(r, &psn);
    if (tx == NULL)
        return 0;
    double guard = mrcn_loss_ooo_guard_s(r);
    if (guard == INFINITY)
        return 0;
    *out = tx->sent_at + ((l->hi_acked_at - l->hi_acked_sent_at) + guard);
    return 1;
}

int mrcn_loss_deadline(mrcn_req *r, double *out)
{
    mrcn_loss *l = &r->loss;
    while (l->n_timers) {
        mrcn_tx *tx = mrcn_req_outstanding(r, l->timers[0].psn);
        if (tx == NULL || tx->ts_ns != l->timers[0].ts || tx->lost) {
            timer_pop(l);
            continue;
        }
        break;
    }
    int has = l->n_timers > 0;
    double t = has ? l->timers[0].deadline : 0.0;
    if (l->has_no_path && (!has || l->no_path_deadline < t)) {
        t = l->no_path_deadline;
        has = 1;
    }
    for (uint32_t i = 0; i < l->n_fresh; i++) {
        uint32_t rec = l->fresh_order[i], psn;
        if (ev_head(r, rec, &psn)) {
            double d = ev_deadline(r, rec, mrcn_req_tx(r, psn));
            if (!has || d < t) {
                t = d;
                has = 1;
            }
        }
    }
    double d;
    if (!r->cfg->rc && ooo_deadline(r, &d) && (!has || d < t)) {
        t = d;
        has = 1;
    }
    *out = t;
    return has;
}

double mrcn_loss_ooo_guard_s(mrcn_req *r)
{
    double rmin = r->loss.rtt_min_s;
    if (rmin == INFINITY)
        return INFINITY;
    double base;
    if (mrcn_cc_fixed_base_rtt_s(r->cc, &base) && base > rmin)
        rmin = base;
    double hi = rmin;
    for (uint32_t i = 0; i < r->evs->n_info; i++) {
        const mrcn_ev_info *info = &r->evs->info[i];
        double x = info->rtt_srtt_s;
        if (!isnan(x) && x > hi && (info->state == MRCN_EV_GOOD || info->state == MRCN_EV_SKIP))
            hi = x;
    }
    return hi - rmin + r->cfg->ooo_time_frac * rmin;
}

int mrcn_loss_ooo_scan(mrcn_req *r, double now)
{
    mrcn_loss *l = &r->loss;
    bool has_limit_t = false;
    double limit_t = 0.0, wait = 0.0;
    uint32_t psn;
    mrcn_tx *tx;
    while ((tx = ooo_head(r, &psn)) != NULL) {
        if (!has_limit_t) {
            double guard = mrcn_loss_ooo_guard_s(r);
            limit_t = l->hi_acked_sent_at - guard;
            wait = (l->hi_acked_at - l->hi_acked_sent_at) + guard;   /* RACK's reordering timer */
            has_limit_t = true;
        }
        if (tx->sent_at > limit_t && now < tx->sent_at + wait)
            return MRCN_OK;
        mrcn_deque_pop(&l->sent_order);
        l->ooo_losses++;
        int rc = mrcn_loss_lose(r, psn, now, MRCN_LOSS_OOO);
        if (rc <= 0)
            return rc < 0 ? rc : MRCN_OK;
    }
    return MRCN_OK;
}

void mrcn_loss_rtt_sample(mrcn_loss *l, mrcn_ev_info *info, double rtt)
{
    info->rtt_last_s = rtt;
    info->rtt_samples++;
    if (isnan(info->rtt_min_s) || rtt < info->rtt_min_s) {
        info->rtt_min_s = rtt;
        if (rtt < l->rtt_min_s)
            l->rtt_min_s = rtt;
    }
    double srtt = info->rtt_srtt_s;   /* RFC 6298's alpha, 1/8, per EV */
    info->rtt_srtt_s = isnan(srtt) ? rtt : srtt + (rtt - srtt) * 0.125;
}

int mrcn_loss_delivered(mrcn_req *r, uint32_t ev, uint64_t ts_ns, double now)
{
    mrcn_ev_info *info = mrcn_ev_get(r->evs, ev);
    if (info == NULL)
        return MRCN_OK;
    if (ts_ns > info->delivered_ts_ns) {
        info->delivered_ts_ns = ts_ns;
        info->delivered_at_s = now;
    }
    if (info->state == MRCN_EV_ASSUMED_BAD && 0 < info->loss_run_ts_ns &&
        info->loss_run_ts_ns <= ts_ns && !r->cfg->rc) {
        info->loss_run = 0;
        int a = mrcn_ev_apply(r->evs, ev, MRCN_EV_DELIVERED, now, false, false, 0, NULL);
        int rc = mrcn_req_drain_ev(r);
        if (a < 0)
            return a;
        if (rc < 0)
            return rc;
    }
    if (r->loss.n_stalled)
        return confirm_stalled(r, ts_ns, now);
    return MRCN_OK;
}
