/* Loss detection for a QP's requester: the twin of agents/mrc/loss.py (LossDetector), whose
 * module docstring documents the rules (per-EV packet threshold, cross-EV out-of-order scan,
 * per-EV RTO and the mrc.h retry ladder, the no-path retry timer, charging losses to EVs).
 *
 * Python's queues hold _Tx objects; a _Tx is one PSN for its whole life (a retransmission
 * updates the same object), so here they hold PSNs and the requester's PSN-indexed table
 * (mrcn_requester.h) is the object. A PSN below the table's base, or one no longer in
 * ``outstanding``, is an acknowledged _Tx (ev_seq -1). Python's per-EV dicts
 * (``ev_q``, ``ev_fresh``) are arrays by EV-set record index; ``ev_fresh``'s key order
 * (first transmission per EV since the last clear) is kept in ``fresh_order``.
 * The functions take the requester (struct mrcn_req) whose callbacks they call, as the
 * Python detector calls on_lost/go_back_n/on_error. */
#ifndef MRCN_LOSS_H
#define MRCN_LOSS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_ev.h"

/* loss.STALLED_KEPT */
#define MRCN_STALLED_KEPT 16

struct mrcn_req;

/* Why a transmission was declared lost (loss.py LossCause). */
typedef enum mrcn_loss_cause {
    MRCN_LOSS_EV_THRESHOLD = 0,
    MRCN_LOSS_OOO,
    MRCN_LOSS_TIMEOUT,
    MRCN_LOSS_TRIMMED,
    MRCN_LOSS_NACK,
    MRCN_LOSS_SEQ_ERR,
} mrcn_loss_cause;

/* loss.CHARGED: the causes that may count against the EV. */
static inline bool mrcn_loss_charged(mrcn_loss_cause c)
{
    return c == MRCN_LOSS_TIMEOUT || c == MRCN_LOSS_EV_THRESHOLD || c == MRCN_LOSS_OOO;
}

/* loss.RETRY_SPENT: loss evidence that spends one of the PSN's retries (not trims). */
static inline bool mrcn_loss_retry_spent(mrcn_loss_cause c)
{
    return c == MRCN_LOSS_EV_THRESHOLD || c == MRCN_LOSS_OOO || c == MRCN_LOSS_NACK ||
           c == MRCN_LOSS_SEQ_ERR;
}

/* A deque of (a, b) pairs: ev_q's (ev_seq, psn), sent_order's (gseq, psn), ev_fresh's psn. */
typedef struct mrcn_pair {
    int64_t a;
    int64_t b;
} mrcn_pair;

typedef struct mrcn_deque {
    mrcn_pair *buf;
    size_t head, n, cap;       /* cap a power of two or 0 */
} mrcn_deque;

void mrcn_deque_free(mrcn_deque *d);
int mrcn_deque_push(mrcn_deque *d, int64_t a, int64_t b);
static inline mrcn_pair *mrcn_deque_front(mrcn_deque *d)
{
    return &d->buf[d->head];
}
static inline void mrcn_deque_pop(mrcn_deque *d)
{
    d->head = (d->head + 1) & (d->cap - 1);
    d->n--;
}
static inline void mrcn_deque_clear(mrcn_deque *d)
{
    d->head = 0;
    d->n = 0;
}

/* One retransmission timer, ordered as Python's tuple (deadline_s, psn, ts_ns). */
typedef struct mrcn_timer {
    double deadline;           /* s */
    uint32_t psn;
    uint64_t ts;               /* ns */
} mrcn_timer;

typedef struct mrcn_loss {
    uint32_t cap;              /* records the per-EV arrays hold (the EV set's cap_info) */
    mrcn_deque *ev_q;          /* per record: every transmission as (ev_seq, psn) */
    mrcn_deque *ev_fresh;      /* per record: first transmissions, psn in .a */
    bool *fresh_key;           /* the record is a key of Python's ev_fresh */
    uint32_t *fresh_order;     /* those records in key insertion order */
    uint32_t n_fresh;
    mrcn_timer *timers;        /* min-heap */
    size_t n_timers, cap_timers;
    mrcn_deque sent_order;     /* (gseq, psn), MRC only */
    int64_t hi_acked_gseq;     /* -1 before any */
    double hi_acked_sent_at;   /* s, -inf before any */
    double hi_acked_at;        /* s, when hi_acked_gseq last moved; -inf before any */
    double rtt_min_s;          /* s, +inf before any sample */
    uint64_t timeouts, ooo_losses, ev_losses_excused, ev_losses_stalled, no_path_timeouts;
    uint64_t ev_losses_confirmed; /* stalled timeouts charged once a later send arrived */
    uint64_t ev_losses_live;   /* out-of-order losses not charged: their EV still delivers */
    /* LossDetector.stalled: stalled timeouts (stamp at the timeout, ts_ns, ev), oldest first */
    int64_t stalled_at[MRCN_STALLED_KEPT];
    uint64_t stalled_ts[MRCN_STALLED_KEPT];
    uint32_t stalled_ev[MRCN_STALLED_KEPT];
    uint32_t n_stalled;
    uint64_t loss_retries;     /* retries spent on RETRY_SPENT evidence */
    bool has_no_path;          /* loss.no_path is not None: */
    double no_path_deadline;   /*   (deadline_s, */
    uint32_t no_path_psn;      /*    psn, */
    uint64_t no_path_ts;       /*    ts_ns, */
    int64_t no_path_timeouts_of; /*  timeouts) */
} mrcn_loss;

void mrcn_loss_init(mrcn_loss *l);
void mrcn_loss_free(mrcn_loss *l);
/* Size the per-EV arrays for an EV set of ``cap`` records (at INIT). MRCN_ENOMEM. */
int mrcn_loss_attach(mrcn_loss *l, uint32_t cap);
/* LossDetector.clear: the QP entered ERR. */
void mrcn_loss_clear(mrcn_loss *l);
/* ev_fresh[rec].append(psn), inserting the key as the defaultdict does. MRCN_ENOMEM. */
int mrcn_loss_fresh_push(mrcn_loss *l, uint32_t rec, uint32_t psn);
int mrcn_loss_timer_push(mrcn_loss *l, double deadline, uint32_t psn, uint64_t ts);

/* LossDetector.on_retransmit (tx = the PSN's record). */
int mrcn_loss_on_retransmit(struct mrcn_req *r, uint32_t psn, int64_t seq, double now);
/* LossDetector.on_acked: ``touched`` record indices in insertion order. */
int mrcn_loss_on_acked(struct mrcn_req *r, const uint32_t *touched, uint32_t n_touched,
                       int64_t hi_gseq, double hi_sent_at, double now);
/* LossDetector.charge_ev. */
int mrcn_loss_charge_ev(struct mrcn_req *r, uint32_t psn, mrcn_ev_info *info, double now,
                        mrcn_loss_cause cause);
/* LossDetector.spend_retry: 1, or 0 when that exhausted the PSN's retries (QP in ERR), or a
 * negative status. */
int mrcn_loss_spend_retry(struct mrcn_req *r, uint32_t psn, double now, mrcn_loss_cause cause);
/* LossDetector.lose: 1, 0 (QP in ERR instead) or a negative status. */
int mrcn_loss_lose(struct mrcn_req *r, uint32_t psn, double now, mrcn_loss_cause cause);
/* LossDetector.on_no_path. */
void mrcn_loss_on_no_path(struct mrcn_req *r, uint32_t psn, double now);
/* LossDetector.on_timer; stops (MRCN_OK) once the QP entered ERR. */
int mrcn_loss_on_timer(struct mrcn_req *r, double now);
/* LossDetector.deadline: 1 and *t, or 0 for None. */
int mrcn_loss_deadline(struct mrcn_req *r, double *t);
/* LossDetector.ooo_guard_s, s. */
double mrcn_loss_ooo_guard_s(struct mrcn_req *r);
/* LossDetector.ooo_scan. */
int mrcn_loss_ooo_scan(struct mrcn_req *r, double now);
/* LossDetector.rtt_sample: one echoed RTT (s) on EV ``info``. */
void mrcn_loss_rtt_sample(mrcn_loss *l, mrcn_ev_info *info, double rtt);
/* LossDetector.delivered. */
int mrcn_loss_delivered(struct mrcn_req *r, uint32_t ev, uint64_t ts_ns, double now);

#endif
