/* A propagation delay line: datagrams held for a fixed one-way delay before they go on
 * the wire, released in the order they entered (one line per delay value, so FIFO order
 * is due order).
 *
 * The fabric's kernel here has no netem; the endpoint holds each datagram for the sum of
 * the one-way delays of the links its route crosses, so a path's RTT gains both ways'
 * propagation while the fabric's queues and shaping see the same packets, later.
 * Entries keep stream positions, not pointers: the byte arena may move as it grows or
 * compacts, and positions stay valid across both. */
#ifndef MRCN_DELAY_H
#define MRCN_DELAY_H

#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"

typedef struct mrcn_dl_entry {
    double due;        /* when it leaves, s (entry time + the line's delay) */
    uint64_t pos;      /* its first byte in the line's byte stream */
    uint32_t len;      /* bytes */
    int32_t route;     /* the endpoint's route id */
} mrcn_dl_entry;

typedef struct mrcn_delay_line {
    double delay_s;
    mrcn_dl_entry *ring;   /* entries, oldest at head */
    size_t head, count, cap;
    uint8_t *buf;          /* bytes of stream positions [base, base + bcap) */
    size_t bcap;
    uint64_t base, start, end;   /* live bytes: stream positions [start, end) */
} mrcn_delay_line;

void mrcn_dl_init(mrcn_delay_line *l, double delay_s);
void mrcn_dl_free(mrcn_delay_line *l);
/* Hold a copy of `len` bytes for `route`, due at `now + delay_s`. MRCN_ENOMEM. */
int mrcn_dl_push(mrcn_delay_line *l, double now, int32_t route, const uint8_t *data, size_t len);
/* The oldest entry's due time: 1 and *due, or 0 when the line is empty. */
int mrcn_dl_head_due(const mrcn_delay_line *l, double *due);
/* How many entries from the head are due at `now` (at most `max`). */
size_t mrcn_dl_due(const mrcn_delay_line *l, double now, size_t max);
/* Entry i from the head (i < count), and its bytes (valid until the next push or pop). */
const mrcn_dl_entry *mrcn_dl_at(const mrcn_delay_line *l, size_t i);
const uint8_t *mrcn_dl_bytes(const mrcn_delay_line *l, const mrcn_dl_entry *e);
/* Drop `n` entries (<= count) from the head. */
void mrcn_dl_pop(mrcn_delay_line *l, size_t n);
/* Bytes held now. */
static inline size_t mrcn_dl_bytes_held(const mrcn_delay_line *l)
{
    return (size_t)(l->end - l->start);
}

#endif
