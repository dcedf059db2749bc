/* The native event loop's wait: one epoll over a process's native endpoints' sockets and its
 * other descriptors, serving the endpoints entirely in C.
 *
 * A host runtime (or an agent) runs many native endpoints on one loop. Calling back into
 * Python for every readable socket and every QP deadline costs more than the packets' own
 * work; mrcn_poller_wait() instead stays in C while only endpoints have work: it reads their
 * sockets (mrcn_ep_on_readable), runs their due QP timers and delay-line releases
 * (mrcn_ep_on_timer), and returns to the caller only when
 *   - an endpoint has QP events for its owner to drain (its tag is reported),
 *   - a foreign descriptor (the caller's: control sockets, TCP) is readable (reported),
 *   - or `until` (the caller's next timer or its longest wait) has passed.
 * Receive moderation (a NIC's rx-usecs, the caller's `hold_s`): no epoll wake-up sooner than
 * hold_s after the previous one that brought events; the rest is slept first, never past a
 * deadline. The wait itself has nanosecond resolution (epoll_pwait2, Linux 5.11; milliseconds,
 * rounded up, with epoll_wait where the kernel lacks it or a seccomp filter refuses it).
 *
 * Time is CLOCK_MONOTONIC seconds (Python's time.monotonic), as the endpoints' own clock. */
#ifndef MRCN_POLLER_H
#define MRCN_POLLER_H

#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_endpoint.h"

typedef struct mrcn_poller mrcn_poller;

typedef struct mrcn_poller_counters {
    uint64_t waits;        /* epoll waits */
    uint64_t returns;      /* returns to the caller */
    uint64_t holds;        /* receive-moderation sleeps */
    double hold_sum_s;     /* their length, summed (s) */
} mrcn_poller_counters;

int mrcn_poller_new(mrcn_poller **out);
/* Free the poller (not its endpoints, not the descriptors). NULL is allowed. */
void mrcn_poller_free(mrcn_poller *p);

/* Serve `ep`'s timers and report its events under `tag`. MRCN_EINVAL if added already. */
int mrcn_poller_add_endpoint(mrcn_poller *p, mrcn_endpoint *ep, uint32_t tag);
/* Stop serving `ep` and every socket added for it. MRCN_EINVAL if unknown. */
int mrcn_poller_remove_endpoint(mrcn_poller *p, mrcn_endpoint *ep);
/* Read `fd` into `ep` (added before) when readable; `read_tclass`: it has IPV6_RECVTCLASS. */
int mrcn_poller_add_socket(mrcn_poller *p, int fd, mrcn_endpoint *ep, int read_tclass);
/* Report `fd` when readable (the caller serves it). */
int mrcn_poller_add_foreign(mrcn_poller *p, int fd);
/* Forget `fd` (a socket or a foreign descriptor). MRCN_EINVAL if unknown. */
int mrcn_poller_remove_fd(mrcn_poller *p, int fd);

/* Serve the endpoints until something needs the caller (header comment) or `until` passes;
 * at least one non-blocking pass over the descriptors is made even when `until` is past.
 * Readable foreign descriptors go to fds[] (at most fcap, *nfds of them), tags of endpoints
 * with events to tags[] (at most tcap, *ntags). Returns MRCN_OK or a negative MRCN_E* /
 * MRCN_ESYS(errno) from an endpoint or from epoll. */
int mrcn_poller_wait(mrcn_poller *p, double until, double hold_s, int *fds, size_t fcap, size_t *nfds,
                     uint32_t *tags, size_t tcap, size_t *ntags);

/* Run the endpoints' timers and delay-line releases due now (CLOCK_MONOTONIC), without
 * waiting or reading a socket: for the caller to call between long turns of its own, so
 * that they do not make the endpoints' timers late. MRCN_OK or an endpoint's error. */
int mrcn_poller_serve_due(mrcn_poller *p);

const mrcn_poller_counters *mrcn_poller_counters_get(const mrcn_poller *p);
/* Endpoint slots allocated: the most endpoints served at once (a removed one's slot is taken again). */
size_t mrcn_poller_slots(const mrcn_poller *p);

#endif
