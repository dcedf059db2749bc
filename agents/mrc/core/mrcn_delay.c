#include "mrcn_delay.h"

#include <stdlib.h>
#include <string.h>

void mrcn_dl_init(mrcn_delay_line *l, double delay_s)
{
    memset(l, 0, sizeof *l);
    l->delay_s = delay_s;
}

void mrcn_dl_free(mrcn_delay_line *l)
{
    free(l->ring);
    free(l->buf);
    mrcn_dl_init(l, l->delay_s);
}

static int ring_room(mrcn_delay_line *l)
{
    if (l->count < l->cap)
        return MRCN_OK;
    size_t cap = l->cap ? l->cap * 2 : 64;
    mrcn_dl_entry *ring = malloc(cap * sizeof *ring);
    if (ring == NULL)
        return MRCN_ENOMEM;
    for (size_t i = 0; i < l->count; i++)   /* unwrap: the head goes to slot 0 */
        ring[i] = l->ring[(l->head + i) % l->cap];
    free(l->ring);
    l->ring = ring;
    l->head = 0;
    l->cap = cap;
    return MRCN_OK;
}

/* Room for `len` more bytes at the end of the stream: compact first, grow if still short. */
static int byte_room(mrcn_delay_line *l, size_t len)
{
    if (l->buf != NULL && l->end - l->base + len <= l->bcap)
        return MRCN_OK;   /* (an arena always exists: a pointer into NULL is undefined) */
    size_t live = (size_t)(l->end - l->start);
    if (l->start > l->base) {
        if (live > 0)
            memmove(l->buf, l->buf + (l->start - l->base), live);
        l->base = l->start;
    }
    if (l->buf != NULL && live + len <= l->bcap)
        return MRCN_OK;
    size_t cap = l->bcap ? l->bcap : 1 << 16;
    while (cap < live + len)
        cap *= 2;
    uint8_t *buf = realloc(l->buf, cap);
    if (buf == NULL)
        return MRCN_ENOMEM;
    l->buf = buf;
    l->bcap = cap;
    return MRCN_OK;
}

int mrcn_dl_push(mrcn_delay_line *l, double now, int32_t route, const uint8_t *data, size_t len)
{
    if (len > UINT32_MAX)
        return MRCN_EINVAL;
    if (ring_room(l) < 0 || byte_room(l, len) < 0)
        return MRCN_ENOMEM;
    if (len > 0)
        memcpy(l->buf + (l->end - l->base), data, len);
    mrcn_dl_entry *e = &l->ring[(l->head + l->count) % l->cap];
    e->due = now + l->delay_s;
    e->pos = l->end;
    e->len = (uint32_t)len;
    e->route = route;
    l->end += len;
    l->count++;
    return MRCN_OK;
}

int mrcn_dl_head_due(const mrcn_delay_line *l, double *due)
{
    if (l->count == 0)
        return 0;
    *due = l->ring[l->head].due;
    return 1;
}

size_t mrcn_dl_due(const mrcn_delay_line *l, double now, size_t max)
{
    size_t n = 0;
    while (n < l->count && n < max && l->ring[(l->head + n) % l->cap].due <= now)
        n++;
    return n;
}

const mrcn_dl_entry *mrcn_dl_at(const mrcn_delay_line *l, size_t i)
{
    return &l->ring[(l->head + i) % l->cap];
}

const uint8_t *mrcn_dl_bytes(const mrcn_delay_line *l, const mrcn_dl_entry *e)
{
    return l->buf + (e->pos - l->base);
}

void mrcn_dl_pop(mrcn_delay_line *l, size_t n)
{
    if (n > l->count)
        n = l->count;
    if (n == 0)
        return;
    const mrcn_dl_entry *last = mrcn_dl_at(l, n - 1);
    l->start = last->pos + last->len;
    l->head = (l->head + n) % l->cap;
    l->count -= n;
    if (l->count == 0)   /* empty: the next push writes from the arena's start */
        l->base = l->start = l->end;
}
