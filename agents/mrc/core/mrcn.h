/* The native MRC engine: common types and error codes (C11, no Python.h).
 *
 * Sans-I/O like the Python engine (agents/mrc, the specification): packets and
 * time in, packets, timers and events out. Time is seconds as a double on the
 * caller's monotonic clock, as in the Python engine, so that every float is computed
 * by the same operations in the same order (build with -ffp-contract=off); wire
 * timestamps are u64 nanoseconds. Functions return 0 or a negative MRCN_E* code; none
 * aborts, none keeps global state, so two engines can live in one process. */
#ifndef MRCN_H
#define MRCN_H

#include <stdint.h>
#include <stddef.h>

enum mrcn_status {
    MRCN_OK = 0,
    MRCN_EPROTO = -1,   /* the peer's bytes are not a valid MRC packet */
    MRCN_ECRC = -2,     /* the CRC-32 trailer does not match */
    MRCN_EINVAL = -3,   /* a caller's argument is out of range */
    MRCN_ENOSPC = -4,   /* the caller's output buffer is too small */
    MRCN_ENOMEM = -5,   /* an allocation failed */
    MRCN_ESTATE = -6,   /* the object's state does not accept the call */
};

/* A system call's failure (the endpoint's sockets): errno e as a status below every MRCN_E*. */
#define MRCN_ESYS_BASE (-1000)
#define MRCN_ESYS(e) (MRCN_ESYS_BASE - (e))

/* A one-line meaning of a status code (static storage). */
const char *mrcn_strerror(int status);

#endif
