/* Entropy values: the EV state machine and the EV set, the twin of agents/mrc/ev.py.
 * Each function names the Python method it mirrors; the order of the float and
 * counter operations follows it line by line (see mrcn_ev.h for the differences). */
#include "mrcn_ev.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Row index of a state in the table (GOOD, ASSUMED_BAD, DENIED, SKIP, UNKNOWN), -1 if none. */
static int state_row(mrcn_ev_state state)
{
    switch (state) {
    case MRCN_EV_GOOD: return 0;
    case MRCN_EV_ASSUMED_BAD: return 1;
    case MRCN_EV_DENIED: return 2;
    case MRCN_EV_SKIP: return 3;
    case MRCN_EV_UNKNOWN: return 4;
    default: return -1;
    }
}

#define G_ MRCN_EV_GOOD
#define B_ MRCN_EV_ASSUMED_BAD
#define D_ MRCN_EV_DENIED
#define S_ MRCN_EV_SKIP
#define U_ MRCN_EV_UNKNOWN

/* ev.py TRANSITIONS: [state row][cause] -> next state; 0 marks an illegal pair.
 * Columns: LOSS, CONGESTION, SKIP_EXPIRED, PROBES_OK, DELIVERED, CONTROLLER_GOOD,
 * CONTROLLER_DENY. */
static const mrcn_ev_state transitions[5][MRCN_EV_NCAUSES] = {
    /* GOOD */        {B_, S_, 0, G_, G_, G_, D_},
    /* ASSUMED_BAD */ {B_, B_, 0, G_, G_, G_, D_},
    /* DENIED */      {D_, D_, 0, D_, D_, G_, D_},
    /* SKIP */        {B_, S_, G_, S_, S_, G_, D_},
    /* UNKNOWN */     {B_, U_, 0, G_, G_, G_, D_},
};

#undef G_
#undef B_
#undef D_
#undef S_
#undef U_

int mrcn_ev_next_state(mrcn_ev_state state, mrcn_ev_cause cause, mrcn_ev_state *next)
{
    int row = state_row(state);
    if (row < 0 || (unsigned)cause >= MRCN_EV_NCAUSES)
        return MRCN_ESTATE;
    mrcn_ev_state n = transitions[row][cause];
    if (n == 0)
        return MRCN_ESTATE;
    *next = n;
    return MRCN_OK;
}

mrcn_ev_state mrcn_ev_visible(mrcn_ev_state state)
{
    return state == MRCN_EV_SKIP ? MRCN_EV_GOOD : state;
}

const char *mrcn_ev_state_name(mrcn_ev_state state)
{
    switch (state) {
    case MRCN_EV_GOOD: return "GOOD";
    case MRCN_EV_ASSUMED_BAD: return "ASSUMED_BAD";
    case MRCN_EV_DENIED: return "DENIED";
    case MRCN_EV_SKIP: return "SKIP";
    case MRCN_EV_UNKNOWN: return "UNKNOWN";
    default: return NULL;
    }
}

/* ev.py USABLE: the states counted for the ev_min_active floor. */
static bool usable(mrcn_ev_state state)
{
    return state == MRCN_EV_GOOD || state == MRCN_EV_SKIP;
}

/* ev.py EVInfo.__init__. */
static void info_init(mrcn_ev_info *info, uint32_t ev, mrcn_ev_state state)
{
    memset(info, 0, sizeof *info);
    info->ev = ev;
    info->state = state;
    info->skip_until = 0.0;
    info->probe_due = 0.0;
    info->probe_outstanding = false;
    info->acked_seq = -1;
    info->last_ack_s = -INFINITY;
    info->delivered_at_s = -INFINITY;
    info->rtt_last_s = NAN;
    info->rtt_min_s = NAN;
    info->rtt_srtt_s = NAN;
    info->always_skip = false;
}

/* Fibonacci hashing of the EV id into the index (ids are often small and consecutive). */
static uint32_t index_slot(const mrcn_ev_set *set, uint32_t ev)
{
    return (uint32_t)(((uint64_t)ev * 0x9E3779B97F4A7C15ULL) >> 32) & set->index_mask;
}

/* Enter record ``i`` (its id not yet indexed) into the EV id index. */
static void index_add(mrcn_ev_set *set, uint32_t i)
{
    uint32_t k = index_slot(set, set->info[i].ev);
    while (set->index[k] != 0)
        k = (k + 1) & set->index_mask;
    set->index[k] = i + 1;
}

int mrcn_ev_set_create(mrcn_ev_set **out, const uint32_t *evs, uint32_t count,
                       uint32_t capacity, uint32_t qpn, mrcn_rng *rng,
                       uint32_t ev_min_active, double skip_timeout_s,
                       mrcn_ev_state initial_state, uint32_t event_mask)
{
    if (out == NULL || evs == NULL || rng == NULL || count == 0)
        return MRCN_EINVAL;
    for (uint32_t i = 1; i < count; i++)     /* duplicates: O(n^2), once per QP */
        for (uint32_t j = 0; j < i; j++)
            if (evs[i] == evs[j])
                return MRCN_EINVAL;
    if (ev_min_active > count || (event_mask & ~MRCN_EV_EVENT_MASK_ALLOWED) ||
        state_row(initial_state) < 0 || capacity < count)
        return MRCN_EINVAL;
    mrcn_ev_set *set = calloc(1, sizeof *set);
    if (set == NULL)
        return MRCN_ENOMEM;
    set->loss_cause_next = -1;
    set->order = malloc((size_t)count * sizeof *set->order);
    set->rotation = malloc((size_t)count * sizeof *set->rotation);
    set->info = malloc((size_t)capacity * sizeof *set->info);
    uint64_t slots = 2;
    while (slots < 2 * (uint64_t)capacity)   /* load <= 1/2: short probe runs */
        slots <<= 1;
    if (slots > UINT32_MAX) {
        mrcn_ev_set_destroy(set);
        return MRCN_EINVAL;
    }
    set->index = calloc((size_t)slots, sizeof *set->index);
    set->index_mask = (uint32_t)(slots - 1);
    if (set->order == NULL || set->rotation == NULL || set->info == NULL || set->index == NULL) {
        mrcn_ev_set_destroy(set);
        return MRCN_ENOMEM;
    }
    set->qpn = qpn;
    set->rng = rng;
    set->ev_min_active = ev_min_active;
    set->skip_timeout_s = skip_timeout_s;
    set->srtt_s = NAN;
    set->event_mask = event_mask;
    set->n = count;
    set->cap_info = capacity;
    for (uint32_t i = 0; i < count; i++) {
        info_init(&set->info[i], evs[i], initial_state);
        index_add(set, i);
        set->order[i] = i;
    }
    set->n_info = count;
    set->rot_len = 0;
    set->pos = 0;
    set->all_good = initial_state == MRCN_EV_GOOD;
    *out = set;
    return MRCN_OK;
}

void mrcn_ev_set_destroy(mrcn_ev_set *set)
{
    if (set == NULL)
        return;
    free(set->order);
    free(set->rotation);
    free(set->info);
    free(set->index);
    free(set->reuse);
    free(set);
}

int mrcn_ev_set_select(mrcn_ev_set *set, int select)
{
    if (select != MRCN_EV_SELECT_ROTATION && select != MRCN_EV_SELECT_REPS)
        return MRCN_EINVAL;
    if (select == MRCN_EV_SELECT_REPS && set->reuse == NULL) {
        set->reuse = malloc(MRCN_EV_REPS_QUEUE_MAX * sizeof *set->reuse);
        if (set->reuse == NULL)
            return MRCN_ENOMEM;
    }
    set->select = select;
    set->reuse_head = set->reuse_n = 0;
    return MRCN_OK;
}

/* Record index of EV ``ev`` or -1 (the dict lookup). */
static int64_t find(const mrcn_ev_set *set, uint32_t ev)
{
    for (uint32_t k = index_slot(set, ev);; k = (k + 1) & set->index_mask) {
        uint32_t r = set->index[k];
        if (r == 0)
            return -1;
        if (set->info[r - 1].ev == ev)
            return (int64_t)r - 1;
    }
}

mrcn_ev_info *mrcn_ev_get(mrcn_ev_set *set, uint32_t ev)
{
    int64_t i = find(set, ev);
    return i < 0 ? NULL : &set->info[i];
}

uint32_t mrcn_ev_usable_count(const mrcn_ev_set *set)
{
    uint32_t k = 0;
    for (uint32_t j = 0; j < set->n; j++)
        k += usable(set->info[set->order[j]].state);
    return k;
}

/* ev.py _update_all_good: over the spray order only, not replaced-out records. */
static void update_all_good(mrcn_ev_set *set)
{
    bool all = true;
    for (uint32_t j = 0; j < set->n && all; j++)
        all = set->info[set->order[j]].state == MRCN_EV_GOOD;
    set->all_good = all;
}

double mrcn_ev_skip_bound_s(const mrcn_ev_set *set)
{
    return isnan(set->srtt_s) ? set->skip_timeout_s : set->srtt_s;
}

/* ev.py _start_skip. */
static void start_skip(mrcn_ev_set *set, mrcn_ev_info *info, double now, bool always)
{
    double bound = mrcn_ev_skip_bound_s(set);
    info->skip_until = now + (always ? (double)MRCN_EV_ALWAYS_SKIP_TIMEOUTS * bound : bound);
    uint32_t u = mrcn_ev_usable_count(set);
    info->skip_picks = set->picks + (u > 0 ? u - 1 : 0);
    info->always_skip = info->always_skip || always;
}

/* ev.py skip_over: the SKIP has run its course (timeout, or one rotation unless ALWAYS). */
static bool skip_over(const mrcn_ev_set *set, const mrcn_ev_info *info, double now)
{
    if (now >= info->skip_until)
        return true;
    return !info->always_skip && set->picks >= info->skip_picks;
}

static void push_event(mrcn_ev_set *set, const mrcn_ev_event *event)
{
    if (set->ev_count == MRCN_EV_EVENT_QUEUE) {
        set->events_overflow++;
        return;
    }
    set->events[(set->ev_head + set->ev_count) % MRCN_EV_EVENT_QUEUE] = *event;
    set->ev_count++;
}

int mrcn_ev_next_event(mrcn_ev_set *set, mrcn_ev_event *event)
{
    if (set->ev_count == 0)
        return 0;
    *event = set->events[set->ev_head];
    set->ev_head = (set->ev_head + 1) % MRCN_EV_EVENT_QUEUE;
    set->ev_count--;
    return 1;
}

/* ev.py EVSet.apply on record ``i``. */
static int apply_at(mrcn_ev_set *set, uint32_t i, mrcn_ev_cause cause, double now,
                    bool always, bool has_drop_count, int64_t drop_count,
                    mrcn_ev_state *new_state)
{
    mrcn_ev_info *info = &set->info[i];
    mrcn_ev_state old = info->state, next;
    int rc = mrcn_ev_next_state(old, cause, &next);
    if (rc != MRCN_OK)
        return rc;
    /* signed: a usable EV outside the spray order sees usable_count() - 1 == -1 */
    if (next == MRCN_EV_ASSUMED_BAD && usable(old) &&
        (int64_t)mrcn_ev_usable_count(set) - 1 < (int64_t)set->ev_min_active) {
        set->floor_held++;
        if (new_state)
            *new_state = old;
        return MRCN_OK;
    }
    if (next != old) {
        info->state = next;
        update_all_good(set);
        if (next == MRCN_EV_SKIP) {
            info->skips++;
            start_skip(set, info, now, always);
        } else {
            info->always_skip = false;
        }
        if (next == MRCN_EV_ASSUMED_BAD || next == MRCN_EV_UNKNOWN) {
            info->probe_ok = 0;
            info->probe_due = now;
        }
        mrcn_ev_state shown = mrcn_ev_visible(next);
        if (shown != mrcn_ev_visible(old) && (shown & set->event_mask)) {
            mrcn_ev_event e;
            e.time = now;
            e.ev = info->ev;
            e.old_state = old;
            e.new_state = next;
            e.cause = cause;
            /* u64 difference read as signed: Python's int when a caller lowered packets_lost */
            e.drop_count = has_drop_count ? drop_count
                                          : (int64_t)(info->packets_lost - info->drops_reported);
            e.loss_cause = set->loss_cause_next;
            info->drops_reported = info->packets_lost;
            push_event(set, &e);
        }
    } else if (next == MRCN_EV_SKIP) {
        start_skip(set, info, now, always);
    }
    if (new_state)
        *new_state = next;
    return MRCN_OK;
}

int mrcn_ev_apply(mrcn_ev_set *set, uint32_t ev, mrcn_ev_cause cause, double now,
                  bool always, bool has_drop_count, int64_t drop_count,
                  mrcn_ev_state *new_state)
{
    int64_t i = find(set, ev);
    if (i < 0)
        return MRCN_EINVAL;
    return apply_at(set, (uint32_t)i, cause, now, always, has_drop_count, drop_count, new_state);
}

int mrcn_ev_apply_loss(mrcn_ev_set *set, uint32_t ev, double now, int32_t loss_cause,
                       mrcn_ev_state *new_state)
{
    set->loss_cause_next = loss_cause;
    int rc = mrcn_ev_apply(set, ev, MRCN_EV_LOSS, now, false, false, 0, new_state);
    set->loss_cause_next = -1;
    return rc;
}

int mrcn_ev_set_state(mrcn_ev_set *set, uint32_t ev, mrcn_ev_state state, double now)
{
    if (state == MRCN_EV_GOOD)
        return mrcn_ev_apply(set, ev, MRCN_EV_CONTROLLER_GOOD, now, false, false, 0, NULL);
    if (state == MRCN_EV_DENIED)
        return mrcn_ev_apply(set, ev, MRCN_EV_CONTROLLER_DENY, now, false, false, 0, NULL);
    return MRCN_EINVAL;
}

int mrcn_ev_replace(mrcn_ev_set *set, uint32_t cur, uint32_t new_ev, mrcn_ev_state state,
                    double now)
{
    (void)now;   /* as in ev.py: no event, no timestamped state */
    if (state != MRCN_EV_GOOD && state != MRCN_EV_DENIED)
        return MRCN_EINVAL;
    int64_t slot = -1;
    for (uint32_t j = 0; j < set->n; j++) {
        uint32_t ev = set->info[set->order[j]].ev;
        if (ev == new_ev)
            return MRCN_EINVAL;
        if (ev == cur && slot < 0)
            slot = j;
    }
    if (slot < 0)
        return MRCN_EINVAL;
    /* A dict assignment to an existing key keeps its place: reuse a replaced-out record. */
    int64_t r = find(set, new_ev);
    if (r < 0) {
        if (set->n_info == set->cap_info)
            return MRCN_ENOSPC;
        r = set->n_info++;
        set->info[r].ev = new_ev;
        index_add(set, (uint32_t)r);
    }
    uint32_t cur_rec = set->order[slot];
    set->order[slot] = (uint32_t)r;
    set->info[cur_rec].state = MRCN_EV_DENIED;
    info_init(&set->info[r], new_ev, state);
    set->rot_len = 0;
    set->pos = 0;
    update_all_good(set);
    return MRCN_OK;
}

int mrcn_ev_clear_always_skip(mrcn_ev_set *set, uint32_t ev, double now)
{
    int64_t i = find(set, ev);
    if (i < 0 || !set->info[i].always_skip)
        return MRCN_OK;
    set->info[i].always_skip = false;
    if (set->info[i].state == MRCN_EV_SKIP)
        return apply_at(set, (uint32_t)i, MRCN_EV_SKIP_EXPIRED, now, false, false, 0, NULL);
    return MRCN_OK;
}

int mrcn_ev_expire_skips(mrcn_ev_set *set, double now)
{
    if (set->all_good)
        return MRCN_OK;
    for (uint32_t i = 0; i < set->n_info; i++) {
        if (set->info[i].state == MRCN_EV_SKIP && set->info[i].skip_until <= now) {
            int rc = apply_at(set, i, MRCN_EV_SKIP_EXPIRED, now, false, false, 0, NULL);
            if (rc != MRCN_OK)
                return rc;
        }
    }
    return MRCN_OK;
}

int mrcn_ev_skip_deadline(const mrcn_ev_set *set, double *deadline)
{
    int found = 0;
    double t = 0.0;
    for (uint32_t i = 0; i < set->n_info; i++) {
        const mrcn_ev_info *info = &set->info[i];
        if (info->state == MRCN_EV_SKIP && (!found || info->skip_until < t)) {
            t = info->skip_until;
            found = 1;
        }
    }
    if (found)
        *deadline = t;
    return found;
}

/* ev.py _new_rotation: a PCG32 Fisher-Yates shuffle of the spray order. */
static void new_rotation(mrcn_ev_set *set)
{
    memcpy(set->rotation, set->order, (size_t)set->n * sizeof *set->order);
    mrcn_rng_shuffle_u32(set->rng, set->rotation, set->n);
    set->rot_len = set->n;
    set->pos = 0;
}

void mrcn_ev_reps_feedback(mrcn_ev_set *set, uint32_t ev, uint32_t penalty)
{
    int64_t i = find(set, ev);
    if (set->select != MRCN_EV_SELECT_REPS || i < 0)
        return;
    if (penalty == 0) {   /* deque(maxlen=...).append: the oldest goes when full */
        if (set->reuse_n == MRCN_EV_REPS_QUEUE_MAX) {
            set->reuse_head = (set->reuse_head + 1) % MRCN_EV_REPS_QUEUE_MAX;
            set->reuse_n--;
        }
        set->reuse[(set->reuse_head + set->reuse_n) % MRCN_EV_REPS_QUEUE_MAX] = (uint32_t)i;
        set->reuse_n++;
        return;
    }
    uint64_t sum = (uint64_t)set->info[i].penalty + penalty;   /* min(penalty + p, MAX) */
    set->info[i].penalty = sum < MRCN_EV_REPS_MAX_PENALTY ? (uint32_t)sum : MRCN_EV_REPS_MAX_PENALTY;
}

/* ev.py _PICKABLE */
static bool pickable(mrcn_ev_state state)
{
    return state == MRCN_EV_GOOD || state == MRCN_EV_SKIP;
}

/* reps.py pick (alive_since_ns already cleared when no usable EV qualifies). */
static int pick_reps(mrcn_ev_set *set, bool has_exclude, uint32_t exclude,
                     uint64_t alive_since_ns, uint32_t *ev)
{
    while (set->reuse_n > 0) {
        mrcn_ev_info *info = &set->info[set->reuse[set->reuse_head]];
        if (!pickable(info->state)) {
            set->reuse_head = (set->reuse_head + 1) % MRCN_EV_REPS_QUEUE_MAX;
            set->reuse_n--;
            continue;
        }
        if ((has_exclude && info->ev == exclude) || info->delivered_ts_ns < alive_since_ns)
            break;   /* stays queued: this pick takes the rotation */
        set->reuse_head = (set->reuse_head + 1) % MRCN_EV_REPS_QUEUE_MAX;
        set->reuse_n--;
        set->picks++;
        set->reused++;
        *ev = info->ev;
        return 1;
    }
    uint32_t passes = set->n;
    bool spent = false;
    uint64_t tries = 2 * (uint64_t)set->n + 1;
    for (uint64_t k = 0; k < tries; k++) {
        if (set->pos >= set->rot_len)
            new_rotation(set);
        mrcn_ev_info *info = &set->info[set->rotation[set->pos++]];
        if (!pickable(info->state) || (has_exclude && info->ev == exclude) ||
            info->delivered_ts_ns < alive_since_ns)
            continue;
        if (info->penalty && passes) {   /* uet-htsim: only the first one passed over pays */
            if (!spent) {
                info->penalty--;
                spent = true;
            }
            passes--;
            continue;
        }
        set->picks++;
        *ev = info->ev;
        return 1;
    }
    for (uint32_t j = 0; j < set->n; j++) {
        const mrcn_ev_info *info = &set->info[set->order[j]];
        if (pickable(info->state)) {
            set->picks++;
            *ev = info->ev;
            return 1;
        }
    }
    return 0;
}

int mrcn_ev_pick(mrcn_ev_set *set, double now, bool has_exclude, uint32_t exclude,
                 uint64_t alive_since_ns, uint32_t *ev)
{
    if (alive_since_ns) {   /* no usable EV has delivered since: no constraint */
        bool any = false;
        for (uint32_t i = 0; i < set->n_info && !any; i++) {
            const mrcn_ev_info *x = &set->info[i];
            any = x->delivered_ts_ns >= alive_since_ns && !(has_exclude && x->ev == exclude) &&
                  (x->state == MRCN_EV_GOOD || x->state == MRCN_EV_SKIP);
        }
        if (!any)
            alive_since_ns = 0;
    }
    if (set->select == MRCN_EV_SELECT_REPS)
        return pick_reps(set, has_exclude, exclude, alive_since_ns, ev);
    uint64_t tries = 2 * (uint64_t)set->n + 1;
    for (uint64_t k = 0; k < tries; k++) {
        if (set->pos >= set->rot_len)
            new_rotation(set);
        uint32_t i = set->rotation[set->pos++];
        mrcn_ev_info *info = &set->info[i];
        bool excluded = (has_exclude && info->ev == exclude) || info->delivered_ts_ns < alive_since_ns;
        if (info->state == MRCN_EV_GOOD && !excluded) {
            set->picks++;
            *ev = info->ev;
            return 1;
        }
        if (info->state == MRCN_EV_SKIP && skip_over(set, info, now)) {
            int rc = apply_at(set, i, MRCN_EV_SKIP_EXPIRED, now, false, false, 0, NULL);
            if (rc != MRCN_OK)
                return rc;
            if (!excluded) {
                set->picks++;
                *ev = info->ev;
                return 1;
            }
        }
    }
    for (uint32_t j = 0; j < set->n; j++) {
        const mrcn_ev_info *info = &set->info[set->order[j]];
        if (info->state == MRCN_EV_GOOD) {
            set->picks++;
            *ev = info->ev;
            return 1;
        }
    }
    /* every usable EV skipped: spread over them, never pile onto the first */
    uint32_t skipped = 0;
    for (uint32_t j = 0; j < set->n; j++)
        skipped += set->info[set->order[j]].state == MRCN_EV_SKIP;
    if (skipped == 0)
        return 0;
    uint64_t want = set->picks % skipped;
    for (uint32_t j = 0; j < set->n; j++) {
        const mrcn_ev_info *info = &set->info[set->order[j]];
        if (info->state == MRCN_EV_SKIP && want-- == 0) {
            set->picks++;
            *ev = info->ev;
            return 1;
        }
    }
    return MRCN_ESTATE;   /* unreachable: skipped counted a SKIP above */
}

int64_t mrcn_ev_pick_many(mrcn_ev_set *set, double now, uint32_t n, uint32_t *out)
{
    int64_t k = 0;
    if (set->all_good && set->select != MRCN_EV_SELECT_REPS) {   /* the requester's hot path */
        while (n > 0) {
            if (set->pos >= set->rot_len)
                new_rotation(set);
            uint32_t take = set->rot_len - set->pos;
            if (take > n)
                take = n;
            for (uint32_t j = 0; j < take; j++)
                out[k++] = set->info[set->rotation[set->pos + j]].ev;
            set->pos += take;
            n -= take;
        }
        set->picks += (uint64_t)k;
        return k;
    }
    for (uint32_t j = 0; j < n; j++) {
        int rc = mrcn_ev_pick(set, now, false, 0, 0, &out[k]);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
        k++;
    }
    return k;
}

uint32_t mrcn_ev_probe_targets(const mrcn_ev_set *set, uint32_t *out, uint32_t cap)
{
    uint32_t k = 0;
    if (set->all_good)
        return 0;
    for (uint32_t i = 0; i < set->n_info; i++) {
        mrcn_ev_state st = set->info[i].state;
        if (st == MRCN_EV_ASSUMED_BAD || st == MRCN_EV_UNKNOWN) {
            if (k < cap)
                out[k] = i;
            k++;
        }
    }
    return k;
}

int mrcn_ev_probe_result(mrcn_ev_set *set, uint32_t ev, bool ok, double now,
                         int64_t successes_needed)
{
    int64_t i = find(set, ev);
    if (i < 0)
        return MRCN_EINVAL;
    mrcn_ev_info *info = &set->info[i];
    info->probe_outstanding = false;
    if (!ok) {
        info->probe_ok = 0;
        return MRCN_OK;
    }
    info->probe_ok++;
    info->probes_ok_total++;
    if ((int64_t)info->probe_ok >= successes_needed &&
        (info->state == MRCN_EV_ASSUMED_BAD || info->state == MRCN_EV_UNKNOWN))
        return apply_at(set, (uint32_t)i, MRCN_EV_PROBES_OK, now, false, false, 0, NULL);
    return MRCN_OK;
}
