#include "mrcn_txq.h"

#include <stdlib.h>
#include <string.h>

void mrcn_txq_init(mrcn_txq *q)
{
    memset(q, 0, sizeof *q);
}

void mrcn_txq_free(mrcn_txq *q)
{
    free(q->buf);
    free(q->pkts);
    mrcn_txq_init(q);
}

void mrcn_txq_reset(mrcn_txq *q)
{
    q->used = 0;
    q->count = 0;
}

uint8_t *mrcn_txq_reserve(mrcn_txq *q, size_t max_len)
{
    if (max_len > UINT32_MAX || q->used > SIZE_MAX - max_len)
        return NULL;
    if (q->used + max_len > q->cap) {
        size_t cap = q->cap ? q->cap : 16384;
        while (cap < q->used + max_len)
            cap *= 2;
        uint8_t *buf = realloc(q->buf, cap);
        if (buf == NULL)
            return NULL;
        q->buf = buf;
        q->cap = cap;
    }
    if (q->count == q->pcap) {
        size_t pcap = q->pcap ? q->pcap * 2 : 64;
        mrcn_txpkt *pkts = realloc(q->pkts, pcap * sizeof *pkts);
        if (pkts == NULL)
            return NULL;
        q->pkts = pkts;
        q->pcap = pcap;
    }
    return q->buf + q->used;
}

int mrcn_txq_commit(mrcn_txq *q, size_t len, uint32_t ev)
{
    if (q->count == q->pcap || q->used + len > q->cap)
        return MRCN_EINVAL;   /* commit without a matching reserve */
    q->pkts[q->count].off = q->used;
    q->pkts[q->count].len = (uint32_t)len;
    q->pkts[q->count].ev = ev;
    q->count++;
    q->used += len;
    return MRCN_OK;
}

int mrcn_txq_push(mrcn_txq *q, const uint8_t *data, size_t len, uint32_t ev)
{
    uint8_t *at = mrcn_txq_reserve(q, len);
    if (at == NULL)
        return MRCN_ENOMEM;
    if (len)
        memcpy(at, data, len);
    return mrcn_txq_commit(q, len, ev);
}
