/* The native endpoint: the UDP I/O of a set of native QPs, batched per wake-up.
 *
 * The twin of agents/net/udp.py's Endpoint, for QPs of the native engine. The caller
 * (Python, inside the host's network namespace) creates and binds every socket and
 * hands over its file descriptor; the endpoint never opens or closes one. Per wake-up:
 *   - mrcn_ep_on_readable(): one recvmmsg() of up to `batch` datagrams into a slab,
 *     the ECN field from each one's IPV6_TCLASS control message, demultiplexing by
 *     destination QPN (bytes 4..8) through a hash table, runs of one QP's datagrams
 *     handed over in one call (CE-marked ones alone, so arrival order is kept), then
 *     every touched QP flushed: its datagrams grouped per socket into sendmmsg() calls;
 *   - mrcn_ep_on_timer(): every QP whose deadline is due (a min-heap of QP deadlines,
 *     kept up to date after every call into a QP), then flushed;
 *   - after a receive batch, the QP timers that came due meanwhile run at once (as an
 *     event loop runs due timers between two sockets' batches), so that a busy endpoint
 *     does not leave them for the caller's next turn;
 *   - mrcn_ep_next_deadline(): the one deadline the caller's event loop arms;
 *   - routes with a propagation delay hold their datagrams in a delay line (one per
 *     distinct delay, mrcn_delay.h) released by mrcn_ep_on_timer() or after a receive
 *     batch, once due.
 * Every QP timer's lateness (when it ran minus its deadline) is counted here, since the
 * caller's loop sees only the endpoint's one timer. With a clock set
 * (mrcn_ep_use_monotonic_clock) the endpoint reads CLOCK_MONOTONIC for the timers it runs
 * after a batch; without one, the `now` the caller passed.
 * A QP is flushed as udp.py does: datagrams_to_send() again while it fills a burst.
 * A full socket buffer or an unreachable destination drops the datagram and counts it
 * (tx_errors), as a NIC drops; any other send error is returned to the caller.
 *
 * Time is double seconds on the caller's clock, as everywhere in the engine. */
#ifndef MRCN_ENDPOINT_H
#define MRCN_ENDPOINT_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_qp.h"

typedef struct mrcn_endpoint mrcn_endpoint;

typedef struct mrcn_ep_counters {
    uint64_t rx_datagrams;      /* datagrams read */
    uint64_t rx_unknown_qpn;    /* read, but for no attached QP (dropped) */
    uint64_t rx_ce;             /* read with ECN CE in the traffic class */
    uint64_t rx_short;          /* shorter than the 8-byte prefix (dropped) */
    uint64_t tx_datagrams;      /* datagrams handed to the kernel or dropped on send */
    uint64_t tx_errors;         /* dropped on send: ENOBUFS, EAGAIN, unreachable, refused */
    uint64_t tx_no_route;       /* on an EV with no route (dropped) */
    uint64_t tx_delayed;        /* put into a delay line (counted in tx_datagrams too) */
    uint64_t tx_released;       /* taken out of a delay line, to the wire */
    uint64_t rx_syscalls;       /* recvmmsg calls */
    uint64_t tx_syscalls;       /* sendmmsg calls */
    uint64_t timer_fires;       /* QP timers run (by mrcn_ep_on_timer or after a receive batch),
                                 * and delay-line releases (one per line per release) */
    double timer_late_sum_s;    /* their lateness: when run minus deadline, summed (s) */
    double timer_late_max_s;    /* the largest since mrcn_ep_take_timer_late_max_s() */
} mrcn_ep_counters;

/* A new endpoint reading up to `batch` (1..1024) datagrams of up to `max_dgram_bytes`
 * (64..65535) per wake-up. MRCN_EINVAL, MRCN_ENOMEM. */
int mrcn_ep_new(mrcn_endpoint **out, unsigned batch, size_t max_dgram_bytes);
/* Free the endpoint (not its QPs, not its sockets). NULL is allowed. */
void mrcn_ep_free(mrcn_endpoint *ep);

/* The longest propagation delay a route may have, s (a sanity bound: minutes of held data
 * would be a unit error, not an experiment). */
#define MRCN_EP_MAX_DELAY_S 10.0

/* A way out: send on `fd` to `addr`, or with addr NULL on `fd` as connected (send()).
 * `delay_s` (0..MRCN_EP_MAX_DELAY_S): the one-way propagation delay of the route's path;
 * a datagram on it is held that long in a delay line (mrcn_delay.h) before it is sent, and
 * mrcn_ep_next_deadline() covers the lines' release times. Returns the route id (>= 0) or
 * MRCN_EINVAL / MRCN_ENOMEM. */
int mrcn_ep_add_route(mrcn_endpoint *ep, int fd, const struct sockaddr_in6 *addr, double delay_s);

/* Serve `qp` (datagrams to its QPN). MRCN_EINVAL if its QPN is attached already. The
 * QP must outlive its attachment: mrcn_ep_detach() it before freeing it. */
int mrcn_ep_attach(mrcn_endpoint *ep, mrcn_qp *qp);
/* Datagrams of QP `qpn` on EV `ev` leave by route `route_id`. MRCN_EINVAL if unknown. */
int mrcn_ep_set_route(mrcn_endpoint *ep, uint32_t qpn, uint32_t ev, int route_id);
/* Stop serving `qpn`: out of the QPN table and the deadline heap. MRCN_EINVAL if unknown. */
int mrcn_ep_detach(mrcn_endpoint *ep, uint32_t qpn);

/* Read what `fd` has (one recvmmsg, MSG_DONTWAIT), dispatch it, flush the touched QPs.
 * `read_tclass`: the socket has IPV6_RECVTCLASS set (read CE). Returns the number of
 * datagrams read (0: nothing was waiting) or a negative MRCN_E* / MRCN_ESYS(errno). */
int mrcn_ep_on_readable(mrcn_endpoint *ep, int fd, int read_tclass, double now);
/* Run the timers of every QP due at `now`, flush them. Returns how many ran, or < 0. */
int mrcn_ep_on_timer(mrcn_endpoint *ep, double now);
/* Flush QP `qpn` now and re-arm its deadline (after post_write or a controller call). */
int mrcn_ep_kick(mrcn_endpoint *ep, uint32_t qpn, double now);
/* The earliest QP deadline or delay-line release: 1 and *at, or 0 when there is none. */
int mrcn_ep_next_deadline(const mrcn_endpoint *ep, double *at);

/* QPNs with events waiting since the last call (each once, in the order they were
 * first touched), for the caller to drain; returns how many were written (<= cap). */
size_t mrcn_ep_take_eventful(mrcn_endpoint *ep, uint32_t *qpns, size_t cap);

/* How many QPs have events waiting that mrcn_ep_take_eventful() has not taken yet. */
size_t mrcn_ep_eventful_count(const mrcn_endpoint *ep);

const mrcn_ep_counters *mrcn_ep_counters_get(const mrcn_endpoint *ep);
/* QP slots allocated: the most QPs attached at once (a detached QP's slot is taken again). */
size_t mrcn_ep_slots(const mrcn_endpoint *ep);
/* The largest QP timer lateness (s) since the previous call; resets it. */
double mrcn_ep_take_timer_late_max_s(mrcn_endpoint *ep);
/* Read CLOCK_MONOTONIC (the caller's loop clock: Python's time.monotonic) for timers run
 * after a receive batch (on != 0), or only ever use the caller's `now` (0, the default). */
void mrcn_ep_use_monotonic_clock(mrcn_endpoint *ep, int on);
/* Send every control packet (any type but DATA) with SO_PRIORITY `priority` as a control
 * message, so that a host NIC's HTB puts it in the class of that id, ahead of queued data
 * (0: none, the default). The caller checks that the kernel takes the message. */
void mrcn_ep_set_control_priority(mrcn_endpoint *ep, uint32_t priority);

#endif
