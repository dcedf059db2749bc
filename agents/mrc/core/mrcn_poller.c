#define _GNU_SOURCE   /* epoll_pwait2 */
#include "mrcn_poller.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 64
#define FAR_FUTURE_S 3600.0

enum fd_kind { FD_NONE = 0, FD_SOCKET, FD_FOREIGN };

typedef struct poll_fd {
    unsigned char kind;
    unsigned char read_tclass;
    size_t ep;              /* FD_SOCKET: index into eps */
} poll_fd;

typedef struct poll_ep {
    mrcn_endpoint *ep;      /* NULL: a removed slot */
    uint32_t tag;
} poll_ep;

struct mrcn_poller {
    int epfd;
    int have_pwait2;        /* epoll_pwait2 works (cleared on ENOSYS or EPERM) */
    poll_fd *fds;           /* indexed by descriptor */
    size_t fds_cap;
    poll_ep *eps;
    size_t neps, eps_cap;
    double last_wake;       /* the last epoll wake-up that brought events (s) */
    mrcn_poller_counters c;
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct timespec to_timespec(double s)
{
    struct timespec ts;
    if (s < 0.0)
        s = 0.0;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int mrcn_poller_new(mrcn_poller **out)
{
    *out = NULL;
    mrcn_poller *p = calloc(1, sizeof *p);
    if (p == NULL)
        return MRCN_ENOMEM;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (p->epfd < 0) {
        int err = errno;
        free(p);
        return MRCN_ESYS(err);
    }
    p->have_pwait2 = 1;
    p->last_wake = -1e18;
    *out = p;
    return MRCN_OK;
}

void mrcn_poller_free(mrcn_poller *p)
{
    if (p == NULL)
        return;
    close(p->epfd);
    free(p->fds);
    free(p->eps);
    free(p);
}

static long find_ep(const mrcn_poller *p, const mrcn_endpoint *ep)
{
    for (size_t i = 0; i < p->neps; i++)
        if (p->eps[i].ep == ep)
            return (long)i;
    return -1;
}

int mrcn_poller_add_endpoint(mrcn_poller *p, mrcn_endpoint *ep, uint32_t tag)
{
    if (ep == NULL || find_ep(p, ep) >= 0)
        return MRCN_EINVAL;
    for (size_t i = 0; i < p->neps; i++) {   /* a removed endpoint's slot first: no socket indexes it */
        if (p->eps[i].ep == NULL) {
            p->eps[i].ep = ep;
            p->eps[i].tag = tag;
            return MRCN_OK;
        }
    }
    if (p->neps == p->eps_cap) {
        size_t cap = p->eps_cap ? p->eps_cap * 2 : 8;
        poll_ep *eps = realloc(p->eps, cap * sizeof *eps);
        if (eps == NULL)
            return MRCN_ENOMEM;
        p->eps = eps;
        p->eps_cap = cap;
    }
    p->eps[p->neps].ep = ep;
    p->eps[p->neps].tag = tag;
    p->neps++;
    return MRCN_OK;
}

static int add_fd(mrcn_poller *p, int fd, poll_fd entry)
{
    if (fd < 0)
        return MRCN_EINVAL;
    if ((size_t)fd >= p->fds_cap) {
        size_t cap = p->fds_cap ? p->fds_cap : 64;
        while (cap <= (size_t)fd)
            cap *= 2;
        poll_fd *fds = realloc(p->fds, cap * sizeof *fds);
        if (fds == NULL)
            return MRCN_ENOMEM;
        memset(fds + p->fds_cap, 0, (cap - p->fds_cap) * sizeof *fds);
        p->fds = fds;
        p->fds_cap = cap;
    }
    if (p->fds[fd].kind != FD_NONE)
        return MRCN_EINVAL;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return MRCN_ESYS(errno);
    p->fds[fd] = entry;
    return MRCN_OK;
}

int mrcn_poller_add_socket(mrcn_poller *p, int fd, mrcn_endpoint *ep, int read_tclass)
{
    long i = find_ep(p, ep);
    if (i < 0)
        return MRCN_EINVAL;
    poll_fd entry = {.kind = FD_SOCKET, .read_tclass = read_tclass != 0, .ep = (size_t)i};
    return add_fd(p, fd, entry);
}

int mrcn_poller_add_foreign(mrcn_poller *p, int fd)
{
    poll_fd entry = {.kind = FD_FOREIGN};
    return add_fd(p, fd, entry);
}

int mrcn_poller_remove_fd(mrcn_poller *p, int fd)
{
    if (fd < 0 || (size_t)fd >= p->fds_cap || p->fds[fd].kind == FD_NONE)
        return MRCN_EINVAL;
    p->fds[fd].kind = FD_NONE;
    /* a descriptor closed already left the epoll set by itself */
    if (epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL) != 0 && errno != EBADF && errno != ENOENT)
        return MRCN_ESYS(errno);
    return MRCN_OK;
}

int mrcn_poller_remove_endpoint(mrcn_poller *p, mrcn_endpoint *ep)
{
    long i = find_ep(p, ep);
    if (i < 0)
        return MRCN_EINVAL;
    int rc = MRCN_OK;
    for (size_t fd = 0; fd < p->fds_cap; fd++) {
        if (p->fds[fd].kind == FD_SOCKET && p->fds[fd].ep == (size_t)i) {
            int r = mrcn_poller_remove_fd(p, (int)fd);
            if (r < 0)
                rc = r;
        }
    }
    p->eps[i].ep = NULL;   /* the slot stays (socket entries index the others by position) until an add takes it */
    return rc;
}

/* Run every endpoint's due timers; with `tags`, report the ones with events; with `next`,
 * lower it to the earliest deadline left. */
static int serve_timers(mrcn_poller *p, double now, uint32_t *tags, size_t tcap, size_t *ntags, double *next)
{
    for (size_t i = 0; i < p->neps; i++) {
        mrcn_endpoint *ep = p->eps[i].ep;
        if (ep == NULL)
            continue;
        double at;
        if (mrcn_ep_next_deadline(ep, &at) && at <= now) {
            int rc = mrcn_ep_on_timer(ep, now);
            if (rc < 0)
                return rc;
        }
        if (tags != NULL && mrcn_ep_eventful_count(ep) > 0 && *ntags < tcap)
            tags[(*ntags)++] = p->eps[i].tag;
        if (next != NULL && mrcn_ep_next_deadline(ep, &at) && at < *next)
            *next = at;
    }
    return MRCN_OK;
}

static int epoll_until(mrcn_poller *p, struct epoll_event *evs, double wait_s)
{
    if (p->have_pwait2) {
        struct timespec ts = to_timespec(wait_s);
        int n = epoll_pwait2(p->epfd, evs, MAX_EVENTS, &ts, NULL);
        /* ENOSYS: a kernel before 5.11; EPERM: a seccomp filter that predates the call (older
         * container runtimes' profiles). epoll_pwait2 itself never fails with EPERM. */
        if (n >= 0 || (errno != ENOSYS && errno != EPERM))
            return n;
        p->have_pwait2 = 0;
    }
    double ms = ceil(wait_s * 1e3);
    return epoll_wait(p->epfd, evs, MAX_EVENTS, ms > 1e9 ? 1000000000 : (int)ms);
}

int mrcn_poller_wait(mrcn_poller *p, double until, double hold_s, int *fds, size_t fcap, size_t *nfds,
                     uint32_t *tags, size_t tcap, size_t *ntags)
{
    struct epoll_event evs[MAX_EVENTS];
    *nfds = 0;
    *ntags = 0;
    p->c.returns++;
    for (int pass = 0;; pass++) {
        double now = mono();
        double next = until < now + FAR_FUTURE_S ? until : now + FAR_FUTURE_S;
        int rc = serve_timers(p, now, tags, tcap, ntags, &next);
        if (rc < 0)
            return rc;
        if (*ntags > 0 || *nfds > 0 || (pass > 0 && now >= until))
            return MRCN_OK;
        if (hold_s > 0.0) {   /* receive moderation: not sooner than hold_s after the last wake-up */
            double pause = p->last_wake + hold_s - now;
            if (pause > next - now)
                pause = next - now;
            if (pause > 0.0) {
                struct timespec ts = to_timespec(pause);
                nanosleep(&ts, NULL);
                p->c.holds++;
                p->c.hold_sum_s += pause;
                now = mono();
            }
        }
        int n = epoll_until(p, evs, next - now);
        p->c.waits++;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return MRCN_ESYS(errno);
        }
        if (n == 0)
            continue;
        now = mono();
        if (hold_s > 0.0)
            p->last_wake = now;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd < 0 || (size_t)fd >= p->fds_cap)
                continue;
            poll_fd *e = &p->fds[fd];
            if (e->kind == FD_FOREIGN) {
                if (*nfds < fcap)
                    fds[(*nfds)++] = fd;
                continue;
            }
            if (e->kind != FD_SOCKET || p->eps[e->ep].ep == NULL)
                continue;
            rc = mrcn_ep_on_readable(p->eps[e->ep].ep, fd, e->read_tclass, now);
            if (rc < 0)
                return rc;
            now = mono();
            if (now >= until)   /* the caller's timer goes before the next socket's batch */
                break;          /* (level-triggered: the rest are reported again) */
        }
    }
}

int mrcn_poller_serve_due(mrcn_poller *p)
{
    return serve_timers(p, mono(), NULL, 0, NULL, NULL);
}

const mrcn_poller_counters *mrcn_poller_counters_get(const mrcn_poller *p)
{
    return &p->c;
}

size_t mrcn_poller_slots(const mrcn_poller *p)
{
    return p->neps;
}
