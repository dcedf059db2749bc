# The native event loop's wait (agents/mrc/core/mrcn_poller.h): one epoll over native endpoints'
# sockets and foreign descriptors, the endpoints served in C. Used by agents.net.loop.EventLoop.
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "mrcn_poller.h":
    ctypedef struct mrcn_poller:
        pass
    ctypedef struct mrcn_poller_counters:
        uint64_t waits
        uint64_t returns
        uint64_t holds
        double hold_sum_s
    int mrcn_poller_new(mrcn_poller **out)
    void mrcn_poller_free(mrcn_poller *p)
    int mrcn_poller_add_endpoint(mrcn_poller *p, mrcn_endpoint *ep, uint32_t tag)
    int mrcn_poller_remove_endpoint(mrcn_poller *p, mrcn_endpoint *ep)
    int mrcn_poller_add_socket(mrcn_poller *p, int fd, mrcn_endpoint *ep, int read_tclass)
    int mrcn_poller_add_foreign(mrcn_poller *p, int fd)
    int mrcn_poller_remove_fd(mrcn_poller *p, int fd)
    int mrcn_poller_wait(mrcn_poller *p, double until, double hold_s, int *fds, size_t fcap, size_t *nfds,
                         uint32_t *tags, size_t tcap, size_t *ntags)
    int mrcn_poller_serve_due(mrcn_poller *p)
    const mrcn_poller_counters *mrcn_poller_counters_get(const mrcn_poller *p)
    size_t mrcn_poller_slots(const mrcn_poller *p)


cdef enum:
    POLL_MAX = 64


cdef class Poller:
    """The C wait of a native :class:`agents.net.loop.EventLoop` (see mrcn_poller.h). Keeps a
    reference to every endpoint it serves, so that none is freed under it."""

    cdef mrcn_poller *p
    cdef dict _eps       # tag -> Endpoint

    def __cinit__(self):
        _ep_check(mrcn_poller_new(&self.p), "poller")
        self._eps = {}

    def __dealloc__(self):
        mrcn_poller_free(self.p)
        self.p = NULL

    def add_endpoint(self, Endpoint ep, uint32_t tag):
        """Serve ``ep``'s timers; report its QP events under ``tag``."""
        _ep_check(mrcn_poller_add_endpoint(self.p, ep.ep, tag), f"poller: endpoint {tag}")
        self._eps[tag] = ep

    def remove_endpoint(self, uint32_t tag):
        ep = self._eps.pop(tag, None)
        if ep is not None:
            _ep_check(mrcn_poller_remove_endpoint(self.p, (<Endpoint>ep).ep), f"poller: endpoint {tag}")

    def add_socket(self, int fd, uint32_t tag, bint read_tclass):
        """Read ``fd`` into the endpoint of ``tag`` whenever it is readable."""
        ep = self._eps[tag]
        _ep_check(mrcn_poller_add_socket(self.p, fd, (<Endpoint>ep).ep, read_tclass), f"poller: socket {fd}")

    def add_foreign(self, int fd):
        _ep_check(mrcn_poller_add_foreign(self.p, fd), f"poller: descriptor {fd}")

    def remove_fd(self, int fd):
        _ep_check(mrcn_poller_remove_fd(self.p, fd), f"poller: descriptor {fd}")

    def wait(self, double until, double hold_s):
        """Serve the endpoints until ``until`` (time.monotonic seconds) or until the caller is
        needed: ``(readable foreign descriptors, tags of endpoints with QP events)``."""
        cdef int fds[POLL_MAX]
        cdef uint32_t tags[POLL_MAX]
        cdef size_t nfds = 0, ntags = 0, i
        rc = mrcn_poller_wait(self.p, until, hold_s, fds, POLL_MAX, &nfds, tags, POLL_MAX, &ntags)
        _ep_check(rc, "poller wait")
        return [fds[i] for i in range(nfds)], [tags[i] for i in range(ntags)]

    def serve_due(self):
        """Run the endpoints' timers and delay-line releases that are due now (no wait, no read)."""
        _ep_check(mrcn_poller_serve_due(self.p), "poller timers")

    @property
    def slots(self):
        """Endpoint slots allocated (a removed endpoint's is taken by the next add)."""
        return mrcn_poller_slots(self.p)

    def counters(self):
        cdef const mrcn_poller_counters *c = mrcn_poller_counters_get(self.p)
        return {"waits": c.waits, "returns": c.returns, "holds": c.holds, "hold_sum_s": c.hold_sum_s}
