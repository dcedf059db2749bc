/* The responder's reverse EV set: the twin of agents/mrc/reverse.py (ReverseEVs), which
 * documents the rules. Which EV each SACK/NACK leaves on, and the responder's own view of
 * reverse-path health, counted in control packets sent (`sent`) and packets arrived (`rx`). */
#ifndef MRCN_REVERSE_H
#define MRCN_REVERSE_H

#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_evmap.h"

/* reverse.BAD_ROTATIONS and reverse.STALE_ROTATIONS. */
#define MRCN_REVERSE_BAD_ROTATIONS 16
#define MRCN_REVERSE_STALE_ROTATIONS 2

typedef struct mrcn_reverse {
    uint32_t *evs;          /* the reverse EVs (ReverseEVs.evs), owned */
    size_t n_evs;
    size_t pos;             /* _pos: next index of evs to try */
    int64_t sent;           /* _sent: control packets sent, the clock of the rules */
    mrcn_evmap bad;         /* _bad: reverse EV -> a = `sent` at which to retry it */
    int64_t last;           /* _last: reverse EV of the latest SACK, -1 for none */
    mrcn_evmap strikes;     /* _strikes: reverse EV -> a = times marked bad */
    int64_t mark_at;        /* _mark_at: `sent` when a reverse EV was last marked */
    mrcn_evmap seen;        /* _seen: forward EV -> a = `rx` at its last arrival */
    int64_t rx;             /* _rx: packets arrived, the clock of staleness */
    uint64_t marked_bad;
} mrcn_reverse;

void mrcn_reverse_init(mrcn_reverse *rv);
void mrcn_reverse_free(mrcn_reverse *rv);
/* Set `evs` (a copy is kept; the rotation position is kept, as assigning
 * ReverseEVs.evs does). MRCN_ENOMEM. */
int mrcn_reverse_set_evs(mrcn_reverse *rv, const uint32_t *evs, size_t n);
/* ReverseEVs.choose: *out = the reverse EV of the next SACK/NACK echoing `fwd_ev`.
 * MRCN_ENOMEM; MRCN_ESTATE when the position is past a shortened `evs` (Python's
 * IndexError). */
int mrcn_reverse_choose(mrcn_reverse *rv, uint32_t fwd_ev, uint32_t *out);
/* ReverseEVs.arrived: a packet arrived on forward EV `ev`. MRCN_ENOMEM. */
int mrcn_reverse_arrived(mrcn_reverse *rv, uint32_t ev);
/* ReverseEVs.ack_lost: a retransmission of a PSN already received. MRCN_ENOMEM. */
int mrcn_reverse_ack_lost(mrcn_reverse *rv);

#endif
