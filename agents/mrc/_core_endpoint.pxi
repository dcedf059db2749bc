# The native endpoint (agents/mrc/core/mrcn_endpoint.h): UDP I/O of native QPs, batched per
# wake-up. Used through agents.net.native_udp.NativeEndpoint, which owns the sockets.
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memset

cdef extern from "<netinet/in.h>":
    cdef struct in6_addr:
        unsigned char s6_addr[16]
    cdef struct sockaddr_in6:
        unsigned short sin6_family
        unsigned short sin6_port
        uint32_t sin6_flowinfo
        in6_addr sin6_addr
        uint32_t sin6_scope_id
    unsigned short htons(unsigned short)
    int AF_INET6

cdef extern from "mrcn_endpoint.h":
    ctypedef struct mrcn_endpoint:
        pass
    ctypedef struct mrcn_ep_counters:
        uint64_t rx_datagrams
        uint64_t rx_unknown_qpn
        uint64_t rx_ce
        uint64_t rx_short
        uint64_t tx_datagrams
        uint64_t tx_errors
        uint64_t tx_no_route
        uint64_t tx_delayed
        uint64_t tx_released
        uint64_t rx_syscalls
        uint64_t tx_syscalls
        uint64_t timer_fires
        double timer_late_sum_s
        double timer_late_max_s
    int mrcn_ep_new(mrcn_endpoint **out, unsigned batch, size_t max_dgram_bytes)
    void mrcn_ep_free(mrcn_endpoint *ep)
    int mrcn_ep_add_route(mrcn_endpoint *ep, int fd, const sockaddr_in6 *addr, double delay_s)
    int mrcn_ep_attach(mrcn_endpoint *ep, mrcn_qp *qp)
    int mrcn_ep_set_route(mrcn_endpoint *ep, uint32_t qpn, uint32_t ev, int route_id)
    int mrcn_ep_detach(mrcn_endpoint *ep, uint32_t qpn)
    int mrcn_ep_on_readable(mrcn_endpoint *ep, int fd, int read_tclass, double now)
    int mrcn_ep_on_timer(mrcn_endpoint *ep, double now)
    int mrcn_ep_kick(mrcn_endpoint *ep, uint32_t qpn, double now)
    int mrcn_ep_next_deadline(const mrcn_endpoint *ep, double *at)
    size_t mrcn_ep_take_eventful(mrcn_endpoint *ep, uint32_t *qpns, size_t cap)
    const mrcn_ep_counters *mrcn_ep_counters_get(const mrcn_endpoint *ep)
    size_t mrcn_ep_slots(const mrcn_endpoint *ep)
    double mrcn_ep_take_timer_late_max_s(mrcn_endpoint *ep)
    void mrcn_ep_use_monotonic_clock(mrcn_endpoint *ep, int on)
    void mrcn_ep_set_control_priority(mrcn_endpoint *ep, uint32_t priority)


cdef _ep_check(int rc, what):
    if rc >= 0:
        return rc
    if rc == MRCN_ENOMEM:
        raise MemoryError(what)
    if rc <= -1000:   # MRCN_ESYS(errno): a socket call failed
        import os as _os
        raise OSError(-1000 - rc, f"{what}: {_os.strerror(-1000 - rc)}")
    raise ValueError(f"{what}: {mrcn_strerror(rc).decode()}")


cdef class Endpoint:
    """The C endpoint of :mod:`agents.net.native_udp` (see mrcn_endpoint.h). It keeps a
    reference to every attached QP, so that a QP it may call into is never freed under it."""

    cdef mrcn_endpoint *ep
    cdef dict _qps
    cdef readonly size_t eventful
    """QPs that had events for their owner after the last on_readable/on_timer/kick call (0:
    nothing for Python to drain)."""

    def __cinit__(self, unsigned batch=32, size_t max_dgram_bytes=65535):
        _ep_check(mrcn_ep_new(&self.ep, batch, max_dgram_bytes), "endpoint")
        self._qps = {}

    def __dealloc__(self):
        mrcn_ep_free(self.ep)
        self.ep = NULL

    def add_route(self, int fd, addr=None, double delay_s=0.0):
        """A route out: ``fd`` connected (``addr`` None), or ``sendto`` the IPv6 ``(host, port)``;
        its datagrams held ``delay_s`` (one-way propagation, s) before they are sent."""
        cdef sockaddr_in6 sa
        if addr is None:
            return _ep_check(mrcn_ep_add_route(self.ep, fd, NULL, delay_s), "add_route")
        import socket as _socket
        host, port = addr[0], addr[1]
        packed = _socket.inet_pton(_socket.AF_INET6, host)
        memset(&sa, 0, sizeof(sa))
        sa.sin6_family = AF_INET6
        sa.sin6_port = htons(port)
        for i in range(16):
            sa.sin6_addr.s6_addr[i] = packed[i]
        return _ep_check(mrcn_ep_add_route(self.ep, fd, &sa, delay_s), "add_route")

    def attach(self, QP qp):
        _ep_check(mrcn_ep_attach(self.ep, qp.qp), f"attach QP {qp.qpn}")
        self._qps[qp.qpn] = qp

    def set_route(self, uint32_t qpn, uint32_t ev, int route_id):
        _ep_check(mrcn_ep_set_route(self.ep, qpn, ev, route_id), f"route of QP {qpn} EV {ev}")

    def detach(self, uint32_t qpn):
        if qpn in self._qps:
            _ep_check(mrcn_ep_detach(self.ep, qpn), f"detach QP {qpn}")
            del self._qps[qpn]

    def on_readable(self, int fd, bint read_tclass, double now):
        """Read one batch from ``fd``, dispatch it, flush the QPs it touched: datagrams read."""
        rc = mrcn_ep_on_readable(self.ep, fd, read_tclass, now)
        self._release_eventful()
        return _ep_check(rc, "receive")

    def on_timer(self, double now):
        """Run every QP timer due at ``now`` and flush those QPs: how many ran."""
        rc = mrcn_ep_on_timer(self.ep, now)
        self._release_eventful()
        return _ep_check(rc, "timer")

    def kick(self, uint32_t qpn, double now):
        rc = mrcn_ep_kick(self.ep, qpn, now)
        self._release_eventful()
        _ep_check(rc, f"flush QP {qpn}")

    def release_eventful(self):
        """Take the endpoint's list of QPs with events (after a :class:`Poller` served it):
        how many there were (also in ``eventful``)."""
        self._release_eventful()
        return self.eventful

    cdef _release_eventful(self):
        """Let go of the write buffers of QPs that completed something (their events say so):
        the C calls above bypass the QP binding, which otherwise releases them at its next call.
        Counts them in ``eventful``."""
        cdef uint32_t buf[64]
        cdef size_t n, i
        self.eventful = 0
        while True:
            n = mrcn_ep_take_eventful(self.ep, buf, 64)
            self.eventful += n
            for i in range(n):
                qp = self._qps.get(buf[i])
                if qp is not None:
                    (<QP>qp)._release()
            if n < 64:
                return

    def next_deadline(self):
        """The earliest QP deadline (s), or None."""
        cdef double at
        return at if mrcn_ep_next_deadline(self.ep, &at) else None

    def set_control_priority(self, uint32_t priority):
        """Every control packet (not DATA) leaves with SO_PRIORITY ``priority`` (0: none)."""
        mrcn_ep_set_control_priority(self.ep, priority)

    def use_monotonic_clock(self, bint on):
        """Timers run after a receive batch read CLOCK_MONOTONIC (the loop's time.monotonic)."""
        mrcn_ep_use_monotonic_clock(self.ep, on)

    def take_timer_late_max_s(self):
        """The largest QP timer lateness (s) since the previous call; resets it."""
        return mrcn_ep_take_timer_late_max_s(self.ep)

    @property
    def slots(self):
        """QP slots allocated (a detached QP's is taken by the next attach)."""
        return mrcn_ep_slots(self.ep)

    @property
    def timer_fires(self):
        """QP timers run so far (``counters()["timer_fires"]`` without the dict: every agent's
        sample reads it of every endpoint of its runtime)."""
        return mrcn_ep_counters_get(self.ep).timer_fires

    @property
    def timer_late_sum_s(self):
        """The sum of those timers' lateness, s (``counters()["timer_late_sum_s"]``)."""
        return mrcn_ep_counters_get(self.ep).timer_late_sum_s

    def counters(self):
        cdef const mrcn_ep_counters *c = mrcn_ep_counters_get(self.ep)
        return {"rx_datagrams": c.rx_datagrams, "rx_unknown_qpn": c.rx_unknown_qpn,
                "rx_ce": c.rx_ce, "rx_short": c.rx_short, "tx_datagrams": c.tx_datagrams,
                "tx_errors": c.tx_errors, "tx_no_route": c.tx_no_route,
                "tx_delayed": c.tx_delayed, "tx_released": c.tx_released,
                "rx_syscalls": c.rx_syscalls, "tx_syscalls": c.tx_syscalls,
                "timer_fires": c.timer_fires, "timer_late_sum_s": c.timer_late_sum_s}
