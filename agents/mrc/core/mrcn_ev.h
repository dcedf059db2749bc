/* Entropy values (EVs): the per-path state machine and the set a QP sprays over.
 *
 * The twin of agents/mrc/ev.py (the specification): EVState, EVCause, TRANSITIONS,
 * EVInfo, EVSet and EVEvent, operation for operation, so that the same calls give the
 * same states, counters, spray order, PCG32 draws, floats and events.
 *
 * Records and order. The Python EVSet keeps a dict ``info`` (EV id -> EVInfo, insertion
 * order, replaced-out EVs stay in it) and a list ``order`` (the spray order). Here
 * ``info`` is an array of records in the same order (``n_info`` used, ``cap_info``
 * allocated) and ``order``/``rotation`` hold record indices; a Fisher-Yates shuffle of
 * indices is the same permutation as a shuffle of the ids, so the PCG32 draws match.
 * Difference from Python: the number of records is bounded by ``capacity`` (given at
 * create): a REPLACE_EV that needs a new record beyond it returns MRCN_ENOSPC and
 * changes nothing (Python's dict grows). Records are never removed, so the EV id ->
 * record index is an insert-only open-addressing table.
 *
 * The SKIP timeout (Python's ``skip_timeout_fn``, the QP's SRTT) is the settable field
 * ``srtt_s``: the caller (the QP) stores its current SRTT there whenever it changes;
 * NaN means no sample yet (Python None), then ``skip_timeout_s`` applies.
 *
 * Reported EV events go into a small queue inside the set that the caller drains with
 * mrcn_ev_next_event(). One call of this API reports at most one event, so a caller
 * that drains after every call never fills it; if it is full anyway the event is
 * counted in ``events_overflow`` and dropped (Python's sink never drops).
 *
 * Integer widths: counters are u64 (Python ints are unbounded; a u64 does not wrap in
 * any realistic run). EV ids are u32, as on the wire. */
#ifndef MRCN_EV_H
#define MRCN_EV_H

#include <stdbool.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_rng.h"

/* EV states: OCP MRC 1.0 mrc_ctl.h enum mrc_ctl_ev_state values, plus the NIC-internal
 * SKIP (ev.py EVState). A u32, since UNKNOWN = 1<<31 is not an int enumerator. */
typedef uint32_t mrcn_ev_state;
#define MRCN_EV_GOOD ((mrcn_ev_state)1u << 0)
#define MRCN_EV_ASSUMED_BAD ((mrcn_ev_state)1u << 1)
#define MRCN_EV_DENIED ((mrcn_ev_state)1u << 2)
#define MRCN_EV_SKIP ((mrcn_ev_state)1u << 8)
#define MRCN_EV_UNKNOWN ((mrcn_ev_state)1u << 31)

/* The inputs of the state machine (ev.py EVCause, in its declaration order). */
typedef enum mrcn_ev_cause {
    MRCN_EV_LOSS = 0,          /* a packet on the EV was lost (no trim) */
    MRCN_EV_CONGESTION,        /* ECN echo or trim NACK on the EV */
    MRCN_EV_SKIP_EXPIRED,
    MRCN_EV_PROBES_OK,         /* k consecutive probe successes */
    MRCN_EV_DELIVERED,         /* a packet sent on it after its last charged loss arrived */
    MRCN_EV_CONTROLLER_GOOD,
    MRCN_EV_CONTROLLER_DENY,
    MRCN_EV_NCAUSES
} mrcn_ev_cause;

/* mrc_ctl.h: the EV event mask supports only GOOD and ASSUMED_BAD (ev.py EVENT_MASK_ALLOWED). */
#define MRCN_EV_EVENT_MASK_ALLOWED (MRCN_EV_GOOD | MRCN_EV_ASSUMED_BAD)
/* An ALWAYS_SKIP lasts at most this many skip timeouts (ev.py ALWAYS_SKIP_TIMEOUTS). */
#define MRCN_EV_ALWAYS_SKIP_TIMEOUTS 8
/* Events the queue holds between two drains. */
#define MRCN_EV_EVENT_QUEUE 16

/* EV selection (ev.py EV_SELECT): the spec's rotation with SKIP, or the non-spec REPS variant
 * (reps.py pick, after uet-htsim's UecMpMixed). */
#define MRCN_EV_SELECT_ROTATION 0
#define MRCN_EV_SELECT_REPS 1
/* reps.py REPS_ECN_PENALTY, REPS_NACK_PENALTY, REPS_MAX_PENALTY, REPS_QUEUE_MAX */
#define MRCN_EV_REPS_ECN_PENALTY 1u
#define MRCN_EV_REPS_NACK_PENALTY 4u
#define MRCN_EV_REPS_MAX_PENALTY 15u
#define MRCN_EV_REPS_QUEUE_MAX 4096u

/* The next state for (state, cause) from the table (ev.py next_state): MRCN_OK with
 * *next set, or MRCN_ESTATE for an illegal pair (Python EVStateError) or a bad state. */
int mrcn_ev_next_state(mrcn_ev_state state, mrcn_ev_cause cause, mrcn_ev_state *next);

/* The state the controller sees: SKIP is GOOD to mrc_ctl (ev.py visible). */
mrcn_ev_state mrcn_ev_visible(mrcn_ev_state state);

/* Per-EV state and counters (ev.py EVInfo). The QP's halves update the counters
 * directly (requester.py, loss.py, probes.py), as they do the Python object's. */
typedef struct mrcn_ev_info {
    uint32_t ev;
    mrcn_ev_state state;
    double skip_until;           /* s: absolute end of the current SKIP */
    uint64_t probe_ok;           /* consecutive probe successes */
    double probe_due;            /* s: absolute time of the next probe */
    bool probe_outstanding;      /* Python probe_outstanding is not None */
    uint32_t probe_id;           /*   its probe id (u16 in probes.py) */
    double probe_deadline;       /*   its deadline, s */
    uint64_t bytes_sent;
    uint64_t packets_acked;
    uint64_t packets_lost;
    uint64_t retransmits;
    uint64_t seq;                /* per-EV transmission counter (= packets_sent) */
    int64_t acked_seq;           /* highest acknowledged per-EV seq, -1 before any */
    double last_ack_s;           /* s: last SACK of new data echoing this EV, -inf before */
    double rtt_last_s;           /* s; NaN before the first sample (Python None) */
    double rtt_min_s;            /* s; NaN before the first sample */
    double rtt_srtt_s;           /* s, EWMA 1/8 of the echoed RTT; NaN before the first */
    uint64_t rtt_samples;
    uint64_t probes_sent;
    uint64_t probes_ok_total;
    uint64_t delivered_ts_ns;    /* latest send stamp on this EV known to have arrived */
    double delivered_at_s;       /* s: when delivered_ts_ns last grew, -inf before */
    uint64_t loss_run;           /* losses since its last delivery (requester/loss.py) */
    uint64_t loss_run_ts_ns;     /* send stamp of the last loss counted in loss_run */
    bool loss_run_timeout;       /* a retransmission timeout among loss_run's losses */
    uint64_t losses_excused;     /* losses not charged: a later packet on the EV arrived */
    uint64_t losses_chargeable;  /* losses of a cause in loss.CHARGED, excused or not */
    uint64_t skip_picks;         /* set pick count at which a SKIP has seen one rotation */
    bool always_skip;            /* ALWAYS_SKIP: only a clean SACK (or a long bound) ends it */
    uint64_t skips;              /* entries into SKIP (never reported) */
    uint64_t drops_reported;     /* packets_lost when the last event was reported */
    uint32_t penalty;            /* REPS variant: rotation turns it is still passed over */
} mrcn_ev_info;

/* One reported EV state change (ev.py EVEvent; the QPN is the set's). drop_count:
 * packets charged to the EV since its previous reported event, or the caller's override. */
typedef struct mrcn_ev_event {
    double time;                 /* s, the QP's clock */
    uint32_t ev;
    mrcn_ev_state old_state;
    mrcn_ev_state new_state;
    mrcn_ev_cause cause;
    int64_t drop_count;
    int32_t loss_cause;          /* how a retiring run of losses was found: an mrcn_loss_cause
                                  * (mrcn_loss.h), -1 for any other event (ev.py loss_cause) */
} mrcn_ev_event;

typedef struct mrcn_ev_set {
    uint32_t qpn;
    mrcn_rng *rng;               /* the QP's PCG32, not owned */
    uint32_t ev_min_active;      /* floor of usable EVs (mrc_ctl.h ev_min_active) */
    double skip_timeout_s;       /* SKIP bound before the first SRTT sample, s */
    double srtt_s;               /* the QP's SRTT, s, NaN before the first sample (settable) */
    uint32_t event_mask;         /* states whose changes are reported (settable) */
    uint64_t picks;              /* EVs handed out by pick/pick_many (the rotation clock) */
    uint64_t floor_held;         /* losses kept usable by the ev_min_active floor */
    bool all_good;               /* every EV in the spray order is GOOD */
    uint32_t n;                  /* EVs in the spray order */
    uint32_t *order;             /* n record indices: the spray order */
    uint32_t *rotation;          /* record indices: the current shuffled rotation */
    uint32_t rot_len;            /* 0 (none drawn yet / reset by replace) or n */
    uint32_t pos;                /* next position in rotation */
    mrcn_ev_info *info;          /* records, in Python's dict order */
    uint32_t n_info;
    uint32_t cap_info;
    uint32_t *index;             /* EV id -> record index + 1 (0: empty), open addressing */
    uint32_t index_mask;         /* index size - 1 (a power of two >= 2 * cap_info) */
    mrcn_ev_event events[MRCN_EV_EVENT_QUEUE];  /* ring: head, count */
    uint32_t ev_head;
    uint32_t ev_count;
    uint64_t events_overflow;    /* events dropped because the caller did not drain */
    int32_t loss_cause_next;     /* the next event's loss_cause (-1 unless mrcn_ev_apply_loss) */
    int select;                  /* MRCN_EV_SELECT_* */
    uint32_t *reuse;             /* REPS: record indices of good ACKs' EVs, a ring (NULL: rotation) */
    uint32_t reuse_head, reuse_n;
    uint64_t reused;             /* REPS: picks that reused a good ACK's EV */
} mrcn_ev_set;

/* Create a set over ``evs`` (count >= 1 distinct ids) with room for ``capacity``
 * records (>= count; REPLACE_EV adds one record per new id). ``rng`` is borrowed and
 * must outlive the set. MRCN_EINVAL for an empty or duplicate list, ev_min_active >
 * count, event_mask outside GOOD|ASSUMED_BAD or capacity < count (ev.py EVSet's
 * ValueErrors); MRCN_ENOMEM if an allocation fails. On success *out owns the set. */
int mrcn_ev_set_create(mrcn_ev_set **out, const uint32_t *evs, uint32_t count,
                       uint32_t capacity, uint32_t qpn, mrcn_rng *rng,
                       uint32_t ev_min_active, double skip_timeout_s,
                       mrcn_ev_state initial_state, uint32_t event_mask);
void mrcn_ev_set_destroy(mrcn_ev_set *set);

/* Choose the EV selection (ev.py EVSet's ``select``): MRCN_EV_SELECT_ROTATION (the default at
 * create) or MRCN_EV_SELECT_REPS, whose reuse ring it allocates. MRCN_EINVAL for another value,
 * MRCN_ENOMEM. */
int mrcn_ev_set_select(mrcn_ev_set *set, int select);

/* REPS variant (reps.py feedback): an ACK for ``ev``; penalty 0 queues it for reuse (the
 * oldest entry is forgotten when the ring is full), else adds to its penalty (capped). Nothing
 * for an unknown EV or in rotation mode. */
void mrcn_ev_reps_feedback(mrcn_ev_set *set, uint32_t ev, uint32_t penalty);

/* The record of EV ``ev`` (in or out of the spray order), or NULL. */
mrcn_ev_info *mrcn_ev_get(mrcn_ev_set *set, uint32_t ev);

/* EVs in the spray order that are GOOD or SKIP (ev.py usable_count). */
uint32_t mrcn_ev_usable_count(const mrcn_ev_set *set);

/* Feed ``cause`` to EV ``ev`` at ``now`` (ev.py EVSet.apply). ``always``: a CONGESTION
 * that is an ALWAYS_SKIP; ``drop_count``: used for a reported event when
 * ``has_drop_count``. *new_state (may be NULL) gets the returned state. MRCN_EINVAL for
 * an unknown EV (Python KeyError), MRCN_ESTATE for an illegal (state, cause): nothing
 * changes then. */
int mrcn_ev_apply(mrcn_ev_set *set, uint32_t ev, mrcn_ev_cause cause, double now,
                  bool always, bool has_drop_count, int64_t drop_count,
                  mrcn_ev_state *new_state);

/* mrcn_ev_apply of MRCN_EV_LOSS whose reported event carries ``loss_cause`` (an
 * mrcn_loss_cause: how the retiring run of losses was found; ev.py apply(loss_cause=)). */
int mrcn_ev_apply_loss(mrcn_ev_set *set, uint32_t ev, double now, int32_t loss_cause,
                       mrcn_ev_state *new_state);

/* Controller call (mrc_ctl MODIFY_EV_STATE, ev.py set_state): GOOD or DENIED, else
 * MRCN_EINVAL (checked first); an unknown EV is MRCN_EINVAL as in apply. */
int mrcn_ev_set_state(mrcn_ev_set *set, uint32_t ev, mrcn_ev_state state, double now);

/* mrc_ctl REPLACE_EV (ev.py replace): EV ``new_ev`` takes ``cur``'s slot with fresh counters,
 * in ``state`` (the op entry's: GOOD or DENIED); ``cur``'s record stays, DENIED. MRCN_EINVAL
 * for another state, if ``cur`` is not in the spray order or ``new_ev`` is; MRCN_ENOSPC when a
 * new record would exceed the capacity. */
int mrcn_ev_replace(mrcn_ev_set *set, uint32_t cur, uint32_t new_ev, mrcn_ev_state state,
                    double now);

/* The SKIP bound in seconds: srtt_s, or skip_timeout_s while it is NaN (ev.py skip_bound_s). */
double mrcn_ev_skip_bound_s(const mrcn_ev_set *set);

/* A SACK for ``ev`` arrived without ECN: an ALWAYS_SKIP on it ends (ev.py
 * clear_always_skip; an unknown EV is ignored). */
int mrcn_ev_clear_always_skip(mrcn_ev_set *set, uint32_t ev, double now);

/* SKIPs (of any record) whose timeout is <= now go back to GOOD (ev.py expire_skips). */
int mrcn_ev_expire_skips(mrcn_ev_set *set, double now);

/* The earliest SKIP timeout in *deadline; returns 1, or 0 when no EV is in SKIP
 * (ev.py skip_deadline's None). */
int mrcn_ev_skip_deadline(const mrcn_ev_set *set, double *deadline);

/* The next EV of the seeded rotation (ev.py pick), avoiding ``exclude`` (when
 * ``has_exclude``) if another is usable and, when ``alive_since_ns`` is not 0 and a usable
 * EV has delivered a transmission stamped no earlier, every EV that has not. Returns 1 with
 * *ev set, 0 when no EV is usable (Python None), or a negative status. */
int mrcn_ev_pick(mrcn_ev_set *set, double now, bool has_exclude, uint32_t exclude,
                 uint64_t alive_since_ns, uint32_t *ev);

/* The next ``n`` picks into out[0..n) (ev.py pick_many): returns how many were written
 * (fewer when no EV is usable), or a negative status. */
int64_t mrcn_ev_pick_many(mrcn_ev_set *set, double now, uint32_t n, uint32_t *out);

/* Record indices of the EVs to probe (ASSUMED_BAD, UNKNOWN), in record order, into
 * out[0..cap); returns how many there are (ev.py probe_targets). */
uint32_t mrcn_ev_probe_targets(const mrcn_ev_set *set, uint32_t *out, uint32_t cap);

/* One probe outcome for ``ev`` (ev.py probe_result): ``successes_needed`` consecutive
 * successes restore an ASSUMED_BAD or UNKNOWN EV. MRCN_EINVAL for an unknown EV. */
int mrcn_ev_probe_result(mrcn_ev_set *set, uint32_t ev, bool ok, double now,
                         int64_t successes_needed);

/* Pop the oldest reported event into *event: 1, or 0 when the queue is empty. */
int mrcn_ev_next_event(mrcn_ev_set *set, mrcn_ev_event *event);

/* The state's mrc_ctl name ("GOOD", ...; ev.py EVState.name), or NULL if unknown. */
const char *mrcn_ev_state_name(mrcn_ev_state state);

#endif
