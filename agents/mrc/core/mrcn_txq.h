/* A transmit queue: the datagrams a QP (or its halves) put on the wire now, encoded in
 * place into one growable byte arena, each tagged with its EV. The caller owns it, hands
 * it to mrcn_qp_datagrams_to_send()-style producers, then reads the entries (to sendmmsg,
 * or to Python as (bytes, ev) pairs) and resets it. Entries keep offsets, not pointers,
 * because the arena may move while it grows. */
#ifndef MRCN_TXQ_H
#define MRCN_TXQ_H

#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"

typedef struct mrcn_txpkt {
    size_t off;      /* bytes into mrcn_txq.buf */
    uint32_t len;    /* bytes */
    uint32_t ev;     /* the EV the datagram goes on */
} mrcn_txpkt;

typedef struct mrcn_txq {
    uint8_t *buf;
    size_t used, cap;            /* bytes */
    mrcn_txpkt *pkts;
    size_t count, pcap;          /* datagrams */
} mrcn_txq;

void mrcn_txq_init(mrcn_txq *q);
void mrcn_txq_free(mrcn_txq *q);
/* Forget every entry, keep the memory. */
void mrcn_txq_reset(mrcn_txq *q);
/* Room for one datagram of up to `max_len` bytes: a pointer to write it at (valid until
 * the next reserve), or NULL (MRCN_ENOMEM). Commit it with mrcn_txq_commit(). */
uint8_t *mrcn_txq_reserve(mrcn_txq *q, size_t max_len);
/* The datagram just written at the reserved pointer is `len` bytes (<= max_len), on `ev`. */
int mrcn_txq_commit(mrcn_txq *q, size_t len, uint32_t ev);
/* Append a copy of `len` bytes on `ev` (reserve + copy + commit). */
int mrcn_txq_push(mrcn_txq *q, const uint8_t *data, size_t len, uint32_t ev);
/* The bytes of entry i (valid until the next reserve or push). */
static inline const uint8_t *mrcn_txq_data(const mrcn_txq *q, size_t i)
{
    return q->buf + q->pkts[i].off;
}

#endif
