#define _GNU_SOURCE   /* recvmmsg, sendmmsg */
#include "mrcn_endpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "mrcn_delay.h"
#include "mrcn_evmap.h"

#define ECN_MASK 0x3
#define ECN_CE 0x3   /* RFC 3168 section 5 */

typedef struct ep_route {
    int fd;
    int connected;
    struct sockaddr_in6 addr;
    size_t line;            /* its delay line (index into lines), or NO_POS: sent at once */
} ep_route;

typedef struct ep_qp {
    mrcn_qp *qp;
    uint32_t qpn;
    int live;
    mrcn_evmap routes;      /* EV -> a = route id */
    double deadline;        /* seconds, valid while heap_pos != NO_POS */
    uint64_t seq;           /* tie-break among equal deadlines: the earlier arming first */
    size_t heap_pos;
    int dirty;              /* touched by this wake-up's receive */
    int eventful;           /* listed in eventful[] */
} ep_qp;

#define NO_POS ((size_t)-1)

struct mrcn_endpoint {
    unsigned batch;
    size_t max_dgram;
    uint8_t *slab;                  /* batch * max_dgram */
    struct mmsghdr *rmsg;
    struct iovec *riov;
    uint8_t *rcmsg;                 /* batch * RCMSG_BYTES */
    const uint8_t **run_data;       /* one QP's run of datagrams */
    size_t *run_len;
    ep_route *routes;
    size_t nroutes, routes_cap;
    ep_qp *qps;                     /* slots; a detached slot stays, not live, until an attach takes it */
    size_t nqps, qps_cap;
    mrcn_evmap qpn_index;           /* QPN -> a = slot */
    size_t *heap;                   /* slots, a min-heap on (deadline, seq) */
    size_t heap_n, heap_cap;
    uint64_t seq;
    size_t *dirty;                  /* slots touched by this wake-up, first touch first */
    size_t ndirty;
    uint32_t *eventful;
    size_t neventful, eventful_cap;
    mrcn_txq txq;
    mrcn_delay_line *lines;         /* one per distinct route delay */
    size_t nlines, lines_cap;
    struct mmsghdr *smsg;
    struct iovec *siov;             /* per message of one sendmmsg */
    struct iovec *sdat;             /* per datagram to send: its bytes */
    size_t *sidx;                   /* per datagram to send: its route id, NO_POS once sent */
    size_t scap;
    mrcn_ep_counters c;
    int monotonic;                  /* read CLOCK_MONOTONIC after a receive batch */
    int ctl_priority;               /* control packets carry ctl_cmsg (SO_PRIORITY) */
    union { struct cmsghdr h; uint8_t b[CMSG_SPACE(sizeof(int))]; } ctl_cmsg;
};

#define RCMSG_BYTES CMSG_SPACE(sizeof(int))

/* ---- the deadline heap ------------------------------------------------- */

static int before(const mrcn_endpoint *ep, size_t a, size_t b)
{
    const ep_qp *x = &ep->qps[a], *y = &ep->qps[b];
    return x->deadline < y->deadline || (x->deadline == y->deadline && x->seq < y->seq);
}

static void heap_set(mrcn_endpoint *ep, size_t pos, size_t slot)
{
    ep->heap[pos] = slot;
    ep->qps[slot].heap_pos = pos;
}

static void sift_up(mrcn_endpoint *ep, size_t pos)
{
    size_t slot = ep->heap[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!before(ep, slot, ep->heap[parent]))
            break;
        heap_set(ep, pos, ep->heap[parent]);
        pos = parent;
    }
    heap_set(ep, pos, slot);
}

static void sift_down(mrcn_endpoint *ep, size_t pos)
{
    size_t slot = ep->heap[pos];
    for (;;) {
        size_t l = 2 * pos + 1, best = pos;
        size_t best_slot = slot;
        if (l < ep->heap_n && before(ep, ep->heap[l], best_slot)) {
            best = l;
            best_slot = ep->heap[l];
        }
        if (l + 1 < ep->heap_n && before(ep, ep->heap[l + 1], best_slot))
            best = l + 1;
        if (best == pos)
            break;
        heap_set(ep, pos, ep->heap[best]);
        pos = best;
    }
    heap_set(ep, pos, slot);
}

static void heap_remove(mrcn_endpoint *ep, size_t slot)
{
    size_t pos = ep->qps[slot].heap_pos;
    if (pos == NO_POS)
        return;
    ep->qps[slot].heap_pos = NO_POS;
    size_t last = ep->heap[--ep->heap_n];
    if (pos == ep->heap_n)
        return;
    heap_set(ep, pos, last);
    sift_down(ep, pos);
    sift_up(ep, ep->qps[last].heap_pos);
}

static int heap_push(mrcn_endpoint *ep, size_t slot)
{
    if (ep->heap_n == ep->heap_cap) {
        size_t cap = ep->heap_cap ? ep->heap_cap * 2 : 16;
        size_t *heap = realloc(ep->heap, cap * sizeof *heap);
        if (heap == NULL)
            return MRCN_ENOMEM;
        ep->heap = heap;
        ep->heap_cap = cap;
    }
    ep->heap[ep->heap_n] = slot;
    ep->qps[slot].heap_pos = ep->heap_n++;
    sift_up(ep, ep->heap_n - 1);
    return MRCN_OK;
}

/* The QP's deadline after a call into it: in the heap, moved, or out. */
static int arm(mrcn_endpoint *ep, size_t slot)
{
    ep_qp *e = &ep->qps[slot];
    double at;
    if (!mrcn_qp_get_timer(e->qp, &at)) {
        heap_remove(ep, slot);
        return MRCN_OK;
    }
    if (e->heap_pos != NO_POS && e->deadline == at)
        return MRCN_OK;
    heap_remove(ep, slot);
    e->deadline = at;
    e->seq = ep->seq++;
    return heap_push(ep, slot);
}

/* ---- bookkeeping of touched QPs ------------------------------------------ */

static int note_events(mrcn_endpoint *ep, size_t slot)
{
    ep_qp *e = &ep->qps[slot];
    if (e->eventful || mrcn_qp_events_pending(e->qp) == 0)
        return MRCN_OK;
    if (ep->neventful == ep->eventful_cap) {
        size_t cap = ep->eventful_cap ? ep->eventful_cap * 2 : 16;
        uint32_t *list = realloc(ep->eventful, cap * sizeof *list);
        if (list == NULL)
            return MRCN_ENOMEM;
        ep->eventful = list;
        ep->eventful_cap = cap;
    }
    ep->eventful[ep->neventful++] = e->qpn;
    e->eventful = 1;
    return MRCN_OK;
}

size_t mrcn_ep_take_eventful(mrcn_endpoint *ep, uint32_t *qpns, size_t cap)
{
    size_t n = ep->neventful < cap ? ep->neventful : cap;
    for (size_t i = 0; i < n; i++) {
        qpns[i] = ep->eventful[i];
        mrcn_evmap_val *v = mrcn_evmap_get(&ep->qpn_index, qpns[i]);
        if (v != NULL)
            ep->qps[v->a].eventful = 0;
    }
    if (n > 0 && n < ep->neventful)   /* memmove of a NULL list is undefined, even of 0 bytes */
        memmove(ep->eventful, ep->eventful + n, (ep->neventful - n) * sizeof *ep->eventful);
    ep->neventful -= n;
    return n;
}

size_t mrcn_ep_eventful_count(const mrcn_endpoint *ep)
{
    return ep->neventful;
}

/* ---- sending ----------------------------------------------------------- */

static int send_room(mrcn_endpoint *ep, size_t n)
{
    if (n <= ep->scap)
        return MRCN_OK;
    size_t cap = ep->scap ? ep->scap : 64;
    while (cap < n)
        cap *= 2;
    struct mmsghdr *m = realloc(ep->smsg, cap * sizeof *m);
    if (m == NULL)
        return MRCN_ENOMEM;
    ep->smsg = m;
    struct iovec *v = realloc(ep->siov, cap * sizeof *v);
    if (v == NULL)
        return MRCN_ENOMEM;
    ep->siov = v;
    struct iovec *d = realloc(ep->sdat, cap * sizeof *d);
    if (d == NULL)
        return MRCN_ENOMEM;
    ep->sdat = d;
    size_t *ix = realloc(ep->sidx, cap * sizeof *ix);
    if (ix == NULL)
        return MRCN_ENOMEM;
    ep->sidx = ix;
    ep->scap = cap;
    return MRCN_OK;
}

static int dropped_on_send(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS || err == ENETUNREACH ||
           err == EHOSTUNREACH || err == ECONNREFUSED;
}

/* sendmmsg `n` prepared messages on `fd`; a datagram the kernel refuses for a reason a
 * NIC would drop it for is counted and skipped. EINTR (a signal before anything was sent)
 * is retried, not a drop. EAGAIN (the socket's send buffer is full) drops the rest of the
 * batch at once: each further datagram would cost a sendmmsg only to be refused too. */
static int send_batch(mrcn_endpoint *ep, int fd, size_t n)
{
    size_t done = 0;
    while (done < n) {
        int sent = sendmmsg(fd, ep->smsg + done, (unsigned)(n - done), MSG_DONTWAIT);
        ep->c.tx_syscalls++;
        if (sent > 0) {
            done += (size_t)sent;
            continue;
        }
        int err = sent < 0 ? errno : 0;
        if (err == EINTR)
            continue;
        if (sent < 0 && !dropped_on_send(err))
            return MRCN_ESYS(err);
        if (err == EAGAIN || err == EWOULDBLOCK) {
            ep->c.tx_errors += n - done;   /* the queue is full: the rest is dropped */
            return MRCN_OK;
        }
        ep->c.tx_errors++;   /* the first unsent datagram is dropped; go on past it */
        done++;
    }
    return MRCN_OK;
}

/* Put the `n` datagrams of sdat[]/sidx[] on the wire: one sendmmsg per socket, each
 * socket's datagrams in their order. */
static int send_grouped(mrcn_endpoint *ep, size_t n)
{
    for (size_t first = 0; first < n; first++) {
        if (ep->sidx[first] == NO_POS)
            continue;
        int fd = ep->routes[ep->sidx[first]].fd;
        size_t m = 0;
        for (size_t i = first; i < n; i++) {
            if (ep->sidx[i] == NO_POS || ep->routes[ep->sidx[i]].fd != fd)
                continue;
            ep_route *r = &ep->routes[ep->sidx[i]];
            ep->siov[m] = ep->sdat[i];
            memset(&ep->smsg[m], 0, sizeof ep->smsg[m]);
            ep->smsg[m].msg_hdr.msg_iov = &ep->siov[m];
            ep->smsg[m].msg_hdr.msg_iovlen = 1;
            if (!r->connected) {
                ep->smsg[m].msg_hdr.msg_name = &r->addr;
                ep->smsg[m].msg_hdr.msg_namelen = sizeof r->addr;
            }
            /* a control packet (not DATA: byte 1 is the type) goes in the NIC's high class */
            if (ep->ctl_priority && ep->sdat[i].iov_len > 1 &&
                ((const uint8_t *)ep->sdat[i].iov_base)[1] != MRCN_PT_DATA) {
                ep->smsg[m].msg_hdr.msg_control = ep->ctl_cmsg.b;
                ep->smsg[m].msg_hdr.msg_controllen = sizeof ep->ctl_cmsg.b;
            }
            ep->sidx[i] = NO_POS;
            m++;
        }
        int rc = send_batch(ep, fd, m);
        if (rc < 0)
            return rc;
    }
    return MRCN_OK;
}

/* The transmit queue of slot `slot` at `now`: datagrams on a route with a delay go into its
 * line, the others on the wire at once. */
static int send_txq(mrcn_endpoint *ep, size_t slot, double now)
{
    mrcn_txq *q = &ep->txq;
    ep_qp *e = &ep->qps[slot];
    size_t n = q->count;
    if (n == 0)
        return MRCN_OK;
    int rc = send_room(ep, n);
    if (rc < 0)
        return rc;
    ep->c.tx_datagrams += n;
    for (size_t i = 0; i < n; i++) {
        mrcn_evmap_val *v = mrcn_evmap_get(&e->routes, q->pkts[i].ev);
        ep->sidx[i] = NO_POS;
        if (v == NULL) {
            ep->c.tx_no_route++;
            continue;
        }
        const uint8_t *data = q->buf + q->pkts[i].off;
        size_t line = ep->routes[v->a].line;
        if (line != NO_POS) {
            rc = mrcn_dl_push(&ep->lines[line], now, (int32_t)v->a, data, q->pkts[i].len);
            if (rc < 0)
                return rc;
            ep->c.tx_delayed++;
            continue;
        }
        ep->sdat[i].iov_base = (void *)data;
        ep->sdat[i].iov_len = q->pkts[i].len;
        ep->sidx[i] = (size_t)v->a;
    }
    return send_grouped(ep, n);
}

/* Send what the delay lines hold that is due at `now`; each line that releases anything
 * counts as one timer run, late by its oldest datagram's lateness (the twin of udp.py's
 * one loop timer per release). */
static int release_lines(mrcn_endpoint *ep, double now)
{
    for (size_t k = 0; k < ep->nlines; k++) {
        mrcn_delay_line *l = &ep->lines[k];
        size_t n = mrcn_dl_due(l, now, SIZE_MAX);
        if (n == 0)
            continue;
        int rc = send_room(ep, n);
        if (rc < 0)
            return rc;
        double late = now - mrcn_dl_at(l, 0)->due;
        ep->c.timer_fires++;
        ep->c.timer_late_sum_s += late;
        if (late > ep->c.timer_late_max_s)
            ep->c.timer_late_max_s = late;
        for (size_t i = 0; i < n; i++) {
            const mrcn_dl_entry *d = mrcn_dl_at(l, i);
            ep->sdat[i].iov_base = (void *)mrcn_dl_bytes(l, d);
            ep->sdat[i].iov_len = d->len;
            ep->sidx[i] = (size_t)d->route;
        }
        rc = send_grouped(ep, n);
        mrcn_dl_pop(l, n);
        ep->c.tx_released += n;
        if (rc < 0)
            return rc;
    }
    return MRCN_OK;
}

/* udp.py's Endpoint._flush: datagrams_to_send() while it fills a burst, then re-arm. */
static int flush(mrcn_endpoint *ep, size_t slot, double now)
{
    uint32_t burst = mrcn_qp_max_burst(ep->qps[slot].qp);
    for (;;) {
        mrcn_txq_reset(&ep->txq);
        int rc = mrcn_qp_datagrams_to_send(ep->qps[slot].qp, now, &ep->txq);
        if (rc < 0)
            return rc;
        size_t n = ep->txq.count;
        rc = send_txq(ep, slot, now);
        if (rc < 0)
            return rc;
        if (n < burst)
            break;
    }
    int rc = arm(ep, slot);
    if (rc < 0)
        return rc;
    return note_events(ep, slot);
}

/* ---- receiving ---------------------------------------------------------- */

static int run_due(mrcn_endpoint *ep, double now);
static double clock_now(const mrcn_endpoint *ep, double fallback);

static int touch(mrcn_endpoint *ep, size_t slot)
{
    if (!ep->qps[slot].dirty) {
        ep->qps[slot].dirty = 1;
        ep->dirty[ep->ndirty++] = slot;   /* at most batch distinct slots per wake-up */
    }
    return MRCN_OK;
}

static int deliver_run(mrcn_endpoint *ep, size_t slot, size_t n, double now)
{
    if (n == 0)
        return MRCN_OK;
    return mrcn_qp_receive_batch(ep->qps[slot].qp, ep->run_data, ep->run_len, NULL, n, now);
}

static int ce_of(struct msghdr *h)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
            c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int tclass;
            memcpy(&tclass, CMSG_DATA(c), sizeof tclass);
            return (tclass & ECN_MASK) == ECN_CE;
        }
    }
    return 0;
}

int mrcn_ep_on_readable(mrcn_endpoint *ep, int fd, int read_tclass, double now)
{
    for (unsigned i = 0; i < ep->batch; i++) {
        struct msghdr *h = &ep->rmsg[i].msg_hdr;
        ep->riov[i].iov_base = ep->slab + (size_t)i * ep->max_dgram;
        ep->riov[i].iov_len = ep->max_dgram;
        memset(h, 0, sizeof *h);
        h->msg_iov = &ep->riov[i];
        h->msg_iovlen = 1;
        if (read_tclass) {
            h->msg_control = ep->rcmsg + (size_t)i * RCMSG_BYTES;
            h->msg_controllen = RCMSG_BYTES;
        }
    }
    int got = recvmmsg(fd, ep->rmsg, ep->batch, MSG_DONTWAIT, NULL);
    ep->c.rx_syscalls++;
    if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        if (dropped_on_send(errno))   /* an ICMP error reported on the socket */
            return 0;
        return MRCN_ESYS(errno);
    }
    ep->c.rx_datagrams += (uint64_t)got;
    size_t run_slot = NO_POS, run_n = 0;
    int rc = MRCN_OK;
    for (int i = 0; i < got && rc >= 0; i++) {
        struct msghdr *h = &ep->rmsg[i].msg_hdr;
        size_t len = ep->rmsg[i].msg_len;
        const uint8_t *data = ep->riov[i].iov_base;
        if (len < 8 || (h->msg_flags & MSG_TRUNC)) {
            ep->c.rx_short++;
            continue;
        }
        uint32_t qpn = (uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 |
                       (uint32_t)data[6] << 8 | data[7];
        mrcn_evmap_val *v = mrcn_evmap_get(&ep->qpn_index, qpn);
        if (v == NULL) {
            ep->c.rx_unknown_qpn++;
            continue;
        }
        size_t slot = (size_t)v->a;
        int ce = read_tclass && ce_of(h);
        if (ce || slot != run_slot) {   /* runs of one QP's datagrams, in arrival order */
            if (run_slot != NO_POS)
                rc = deliver_run(ep, run_slot, run_n, now);
            run_slot = NO_POS;
            run_n = 0;
            if (rc < 0)
                break;
            touch(ep, slot);
        }
        if (ce) {   /* alone, with its mark, as udp.py's _on_readable_ecn */
            ep->c.rx_ce++;
            rc = mrcn_qp_receive(ep->qps[slot].qp, data, len, now, 1);
            continue;
        }
        run_slot = slot;
        ep->run_data[run_n] = data;
        ep->run_len[run_n++] = len;
    }
    if (rc >= 0 && run_slot != NO_POS)
        rc = deliver_run(ep, run_slot, run_n, now);
    for (size_t i = 0; i < ep->ndirty; i++) {
        size_t slot = ep->dirty[i];
        ep->qps[slot].dirty = 0;
        if (rc >= 0 && ep->qps[slot].live)
            rc = flush(ep, slot, now);
    }
    ep->ndirty = 0;
    if (rc >= 0 && got > 0) {   /* timers and held datagrams that came due meanwhile go now */
        double later = clock_now(ep, now);
        rc = release_lines(ep, later);
        if (rc >= 0)
            rc = run_due(ep, later);
    }
    return rc < 0 ? rc : got;
}

/* ---- timers, kicks ------------------------------------------------------- */

/* Run the QP timers due at `now` (each QP once: one whose timer stays due waits for the next
 * call), flush those QPs, count their lateness. Returns how many ran, or < 0. */
static int run_due(mrcn_endpoint *ep, double now)
{
    size_t n = 0;
    while (ep->heap_n > 0 && ep->qps[ep->heap[0]].deadline <= now && n < ep->batch) {
        size_t slot = ep->heap[0];
        double late = now - ep->qps[slot].deadline;
        ep->c.timer_late_sum_s += late;
        if (late > ep->c.timer_late_max_s)
            ep->c.timer_late_max_s = late;
        heap_remove(ep, slot);
        ep->dirty[n++] = slot;
    }
    /* Every QP taken off the heap runs, even after another's error (which would otherwise
     * leave it with no timer at all); one whose run failed is re-armed from its own
     * deadline. The first error is returned. */
    int rc = MRCN_OK;
    for (size_t i = 0; i < n; i++) {
        size_t slot = ep->dirty[i];
        int r = mrcn_qp_handle_timer(ep->qps[slot].qp, now);
        ep->c.timer_fires++;
        if (r >= 0)
            r = flush(ep, slot, now);
        if (r < 0) {
            (void)arm(ep, slot);
            if (rc >= 0)
                rc = r;
        }
    }
    return rc < 0 ? rc : (int)n;
}

int mrcn_ep_on_timer(mrcn_endpoint *ep, double now)
{
    int rc = release_lines(ep, now);
    return rc < 0 ? rc : run_due(ep, now);
}

static double clock_now(const mrcn_endpoint *ep, double fallback)
{
    struct timespec ts;
    if (!ep->monotonic || clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return fallback;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double mrcn_ep_take_timer_late_max_s(mrcn_endpoint *ep)
{
    double late = ep->c.timer_late_max_s;
    ep->c.timer_late_max_s = 0.0;
    return late;
}

void mrcn_ep_use_monotonic_clock(mrcn_endpoint *ep, int on)
{
    ep->monotonic = on != 0;
}

int mrcn_ep_kick(mrcn_endpoint *ep, uint32_t qpn, double now)
{
    mrcn_evmap_val *v = mrcn_evmap_get(&ep->qpn_index, qpn);
    if (v == NULL)
        return MRCN_EINVAL;
    return flush(ep, (size_t)v->a, now);
}

void mrcn_ep_set_control_priority(mrcn_endpoint *ep, uint32_t priority)
{
    ep->ctl_priority = priority != 0;
    memset(&ep->ctl_cmsg, 0, sizeof ep->ctl_cmsg);
    ep->ctl_cmsg.h.cmsg_level = SOL_SOCKET;
    ep->ctl_cmsg.h.cmsg_type = SO_PRIORITY;
    ep->ctl_cmsg.h.cmsg_len = CMSG_LEN(sizeof(int));
    int p = (int)priority;
    memcpy(CMSG_DATA(&ep->ctl_cmsg.h), &p, sizeof p);
}

int mrcn_ep_next_deadline(const mrcn_endpoint *ep, double *at)
{
    int any = ep->heap_n > 0;
    if (any)
        *at = ep->qps[ep->heap[0]].deadline;
    for (size_t k = 0; k < ep->nlines; k++) {
        double due;
        if (mrcn_dl_head_due(&ep->lines[k], &due) && (!any || due < *at)) {
            *at = due;
            any = 1;
        }
    }
    return any;
}

/* ---- set-up ------------------------------------------------------------ */

int mrcn_ep_new(mrcn_endpoint **out, unsigned batch, size_t max_dgram_bytes)
{
    *out = NULL;
    if (batch < 1 || batch > 1024 || max_dgram_bytes < 64 || max_dgram_bytes > 65535)
        return MRCN_EINVAL;
    mrcn_endpoint *ep = calloc(1, sizeof *ep);
    if (ep == NULL)
        return MRCN_ENOMEM;
    ep->batch = batch;
    ep->max_dgram = max_dgram_bytes;
    ep->slab = malloc((size_t)batch * max_dgram_bytes);
    ep->rmsg = calloc(batch, sizeof *ep->rmsg);
    ep->riov = calloc(batch, sizeof *ep->riov);
    ep->rcmsg = calloc(batch, RCMSG_BYTES);
    ep->run_data = calloc(batch, sizeof *ep->run_data);
    ep->run_len = calloc(batch, sizeof *ep->run_len);
    ep->dirty = calloc(batch, sizeof *ep->dirty);
    mrcn_evmap_init(&ep->qpn_index);
    mrcn_txq_init(&ep->txq);
    if (!ep->slab || !ep->rmsg || !ep->riov || !ep->rcmsg || !ep->run_data || !ep->run_len ||
        !ep->dirty) {
        mrcn_ep_free(ep);
        return MRCN_ENOMEM;
    }
    *out = ep;
    return MRCN_OK;
}

void mrcn_ep_free(mrcn_endpoint *ep)
{
    if (ep == NULL)
        return;
    for (size_t i = 0; i < ep->nqps; i++)
        mrcn_evmap_free(&ep->qps[i].routes);
    free(ep->qps);
    free(ep->routes);
    free(ep->slab);
    free(ep->rmsg);
    free(ep->riov);
    free(ep->rcmsg);
    free(ep->run_data);
    free(ep->run_len);
    free(ep->dirty);
    free(ep->heap);
    free(ep->eventful);
    for (size_t k = 0; k < ep->nlines; k++)
        mrcn_dl_free(&ep->lines[k]);
    free(ep->lines);
    free(ep->smsg);
    free(ep->siov);
    free(ep->sdat);
    free(ep->sidx);
    mrcn_evmap_free(&ep->qpn_index);
    mrcn_txq_free(&ep->txq);
    free(ep);
}

/* The delay line of `delay_s` (one per distinct delay), made if new: its index, or < 0. */
static long line_for(mrcn_endpoint *ep, double delay_s)
{
    for (size_t k = 0; k < ep->nlines; k++)
        if (ep->lines[k].delay_s == delay_s)
            return (long)k;
    if (ep->nlines == ep->lines_cap) {
        size_t cap = ep->lines_cap ? ep->lines_cap * 2 : 4;
        mrcn_delay_line *l = realloc(ep->lines, cap * sizeof *l);
        if (l == NULL)
            return MRCN_ENOMEM;
        ep->lines = l;
        ep->lines_cap = cap;
    }
    mrcn_dl_init(&ep->lines[ep->nlines], delay_s);
    return (long)ep->nlines++;
}

int mrcn_ep_add_route(mrcn_endpoint *ep, int fd, const struct sockaddr_in6 *addr, double delay_s)
{
    if (fd < 0 || ep->nroutes >= (size_t)INT32_MAX || !(delay_s >= 0.0 && delay_s <= MRCN_EP_MAX_DELAY_S))
        return MRCN_EINVAL;
    if (ep->nroutes == ep->routes_cap) {
        size_t cap = ep->routes_cap ? ep->routes_cap * 2 : 16;
        ep_route *r = realloc(ep->routes, cap * sizeof *r);
        if (r == NULL)
            return MRCN_ENOMEM;
        ep->routes = r;
        ep->routes_cap = cap;
    }
    long line = delay_s > 0.0 ? line_for(ep, delay_s) : -1;
    if (line == MRCN_ENOMEM)
        return MRCN_ENOMEM;
    ep_route *r = &ep->routes[ep->nroutes];
    memset(r, 0, sizeof *r);
    r->fd = fd;
    r->connected = addr == NULL;
    r->line = line < 0 ? NO_POS : (size_t)line;
    if (addr != NULL)
        r->addr = *addr;
    return (int)ep->nroutes++;
}

int mrcn_ep_attach(mrcn_endpoint *ep, mrcn_qp *qp)
{
    uint32_t qpn = mrcn_qp_num(qp);
    if (mrcn_evmap_get(&ep->qpn_index, qpn) != NULL)
        return MRCN_EINVAL;
    /* a detached QP's slot is taken again, so an endpoint that outlives its QPs (a torch
     * communicator's) does not grow with every attach */
    size_t slot = ep->nqps;
    for (size_t i = 0; i < ep->nqps; i++) {
        if (!ep->qps[i].live) {
            slot = i;
            break;
        }
    }
    if (slot == ep->nqps && ep->nqps == ep->qps_cap) {
        size_t cap = ep->qps_cap ? ep->qps_cap * 2 : 16;
        ep_qp *q = realloc(ep->qps, cap * sizeof *q);
        if (q == NULL)
            return MRCN_ENOMEM;
        ep->qps = q;
        ep->qps_cap = cap;
    }
    mrcn_evmap_val *v = mrcn_evmap_put(&ep->qpn_index, qpn);
    if (v == NULL)
        return MRCN_ENOMEM;
    ep_qp *e = &ep->qps[slot];
    memset(e, 0, sizeof *e);   /* a reused slot's routes were freed at detach */
    e->qp = qp;
    e->qpn = qpn;
    e->live = 1;
    e->heap_pos = NO_POS;
    mrcn_evmap_init(&e->routes);
    v->a = (int64_t)slot;
    if (slot == ep->nqps)
        ep->nqps++;
    return MRCN_OK;
}

int mrcn_ep_set_route(mrcn_endpoint *ep, uint32_t qpn, uint32_t ev, int route_id)
{
    mrcn_evmap_val *v = mrcn_evmap_get(&ep->qpn_index, qpn);
    if (v == NULL || route_id < 0 || (size_t)route_id >= ep->nroutes)
        return MRCN_EINVAL;
    mrcn_evmap_val *r = mrcn_evmap_put(&ep->qps[v->a].routes, ev);
    if (r == NULL)
        return MRCN_ENOMEM;
    r->a = route_id;
    return MRCN_OK;
}

int mrcn_ep_detach(mrcn_endpoint *ep, uint32_t qpn)
{
    mrcn_evmap_val *v = mrcn_evmap_get(&ep->qpn_index, qpn);
    if (v == NULL)
        return MRCN_EINVAL;
    size_t slot = (size_t)v->a;
    heap_remove(ep, slot);
    ep_qp *e = &ep->qps[slot];
    e->live = 0;
    e->qp = NULL;
    mrcn_evmap_free(&e->routes);
    mrcn_evmap_init(&e->routes);
    mrcn_evmap_del(&ep->qpn_index, qpn);
    for (size_t i = 0; i < ep->neventful; i++) {   /* no event of a detached QP is reported */
        if (ep->eventful[i] == qpn) {
            memmove(ep->eventful + i, ep->eventful + i + 1,
                    (ep->neventful - i - 1) * sizeof *ep->eventful);
            ep->neventful--;
            break;
        }
    }
    return MRCN_OK;
}

const mrcn_ep_counters *mrcn_ep_counters_get(const mrcn_endpoint *ep)
{
    return &ep->c;
}

size_t mrcn_ep_slots(const mrcn_endpoint *ep)
{
    return ep->nqps;
}
