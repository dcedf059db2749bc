/* Reverse EV choice (see mrcn_reverse.h); each function mirrors reverse.py's method. */
#include "mrcn_reverse.h"

#include <stdlib.h>
#include <string.h>

void mrcn_reverse_init(mrcn_reverse *rv)
{
    memset(rv, 0, sizeof(*rv));
    mrcn_evmap_init(&rv->bad);
    mrcn_evmap_init(&rv->strikes);
    mrcn_evmap_init(&rv->seen);
    rv->last = -1;
    rv->mark_at = -((int64_t)1 << 30);
}

void mrcn_reverse_free(mrcn_reverse *rv)
{
    free(rv->evs);
    mrcn_evmap_free(&rv->bad);
    mrcn_evmap_free(&rv->strikes);
    mrcn_evmap_free(&rv->seen);
    rv->evs = NULL;
    rv->n_evs = 0;
}

int mrcn_reverse_set_evs(mrcn_reverse *rv, const uint32_t *evs, size_t n)
{
    uint32_t *copy = NULL;
    if (n) {
        copy = malloc(n * sizeof(*copy));
        if (!copy)
            return MRCN_ENOMEM;
        memcpy(copy, evs, n * sizeof(*copy));
    }
    free(rv->evs);
    rv->evs = copy;
    rv->n_evs = n;
    return MRCN_OK;
}

/* bad.get(ev, 0) */
static int64_t bad_at(const mrcn_reverse *rv, uint32_t ev)
{
    const mrcn_evmap_val *v = mrcn_evmap_get(&rv->bad, ev);
    return v ? v->a : 0;
}

int mrcn_reverse_choose(mrcn_reverse *rv, uint32_t fwd_ev, uint32_t *out)
{
    size_t n = rv->n_evs;
    if (!n) {
        *out = fwd_ev;
        return MRCN_OK;
    }
    int64_t sent = ++rv->sent;
    int64_t stale = rv->rx - MRCN_REVERSE_STALE_ROTATIONS * (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        if (rv->pos >= n)
            return MRCN_ESTATE;
        uint32_t ev = rv->evs[rv->pos];
        rv->pos = (rv->pos + 1) % n;
        const mrcn_evmap_val *s = mrcn_evmap_get(&rv->seen, ev);
        if ((s ? s->a : stale - 1) >= stale && (!rv->bad.n || bad_at(rv, ev) <= sent)) {
            rv->last = ev;
            *out = ev;
            return MRCN_OK;
        }
    }
    rv->last = fwd_ev;
    *out = fwd_ev;
    return MRCN_OK;
}

int mrcn_reverse_arrived(mrcn_reverse *rv, uint32_t ev)
{
    mrcn_evmap_val *v = mrcn_evmap_put(&rv->seen, ev);
    if (!v)
        return MRCN_ENOMEM;
    v->a = ++rv->rx;
    return MRCN_OK;
}

int mrcn_reverse_ack_lost(mrcn_reverse *rv)
{
    int64_t ev = rv->last, sent = rv->sent, n = (int64_t)rv->n_evs;
    if (ev < 0 || bad_at(rv, (uint32_t)ev) > sent || sent - rv->mark_at < n)
        return MRCN_OK;
    rv->mark_at = sent;
    int listed = 0;
    int64_t usable = 0;
    for (size_t i = 0; i < rv->n_evs; i++) {
        listed |= rv->evs[i] == (uint32_t)ev;
        usable += bad_at(rv, rv->evs[i]) <= sent;
    }
    if (!listed || usable <= 1)
        return MRCN_OK;
    mrcn_evmap_val *st = mrcn_evmap_put(&rv->strikes, (uint32_t)ev);
    if (!st)
        return MRCN_ENOMEM;
    st->a = st->a + 1 < 16 ? st->a + 1 : 16;
    mrcn_evmap_val *b = mrcn_evmap_put(&rv->bad, (uint32_t)ev);
    if (!b)
        return MRCN_ENOMEM;
    b->a = sent + ((int64_t)MRCN_REVERSE_BAD_ROTATIONS << (st->a - 1)) * n;
    rv->marked_bad++;
    return MRCN_OK;
}
