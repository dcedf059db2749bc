# The responder half of a QP (agents/mrc/core/mrcn_responder.h), the twin of
# agents.mrc.responder.Responder: same constructor keywords, methods and attributes as the
# QP and the tests use them. Completions are appended to the given events deque as
# types.WorkCompletion after every call that can make them; take_output() returns the
# same list of (bytes, EV). The binding holds the registered region's buffer (a
# memoryview and a typed view of it) for the object's lifetime, so the C pointer stays
# valid. Differences, for misuse only: wr_id/dest_qpn/EV values must fit their C types
# (OverflowError instead of a later struct.error), mpr_dest above 255 (mrc.h's bound) is a
# ValueError, and reverse_evs / reverse.evs / reverse.state() return copies.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
import logging as _logging

from agents.mrc import types as _types

cdef extern from "mrcn.h":
    int MRCN_ENOMEM, MRCN_ESTATE

cdef extern from "mrcn_evmap.h":
    ctypedef struct mrcn_evmap_val:
        int64_t a
        int64_t b
        double t
    ctypedef struct mrcn_evmap:
        uint32_t *keys
        mrcn_evmap_val *vals
        size_t n

cdef extern from "mrcn_reverse.h":
    ctypedef struct mrcn_reverse:
        uint32_t *evs
        size_t n_evs
        size_t pos
        int64_t sent
        mrcn_evmap bad
        int64_t last
        mrcn_evmap strikes
        int64_t mark_at
        mrcn_evmap seen
        int64_t rx
        uint64_t marked_bad
    int mrcn_reverse_set_evs(mrcn_reverse *rv, const uint32_t *evs, size_t n)

cdef extern from "mrcn_responder.h":
    ctypedef struct mrcn_responder_config:
        int64_t sack_every
        double ack_delay_s
        double ack_coalesce_s
        int64_t always_skip_ce_run
    ctypedef struct mrcn_ctrl:
        uint8_t bytes[52]
        uint32_t len
        uint32_t ev
    ctypedef struct mrcn_wc:
        double time
        uint64_t wr_id
        uint32_t imm
        uint32_t psn
        uint8_t status
    int MRCN_WC_SUCCESS
    ctypedef struct mrcn_responder:
        uint32_t qpn
        uint32_t dest_qpn
        uint32_t mpr_dest
        int64_t max_wimm_dest
        uint64_t rcv_cum
        size_t n_recvs
        size_t n_chunks, n_imm
        mrcn_ctrl *out
        size_t n_out
        mrcn_wc *wcs
        size_t n_wcs
        mrcn_evmap reverse_evs
        mrcn_reverse reverse
        uint64_t bad_packets, rx_packets, rx_bytes, rx_duplicates, rx_ooo, rx_access_errors
        uint64_t rx_out_of_window, rx_no_recv
    ctypedef struct mrcn_responder_batch:
        pass
    void mrcn_responder_init(mrcn_responder *r, uint32_t qpn, const mrcn_responder_config *cfg,
                             int rc, uint8_t *mem, size_t mem_len, int has_mem)
    void mrcn_responder_free(mrcn_responder *r)
    int mrcn_responder_set_mpr_dest(mrcn_responder *r, uint32_t mpr_dest)
    int mrcn_responder_on_data(mrcn_responder *r, const uint8_t *buf, size_t len, double now,
                               int ecn)
    int mrcn_responder_on_probe_req(mrcn_responder *r, const mrcn_probe *req)
    int mrcn_responder_post_recv(mrcn_responder *r, uint64_t wr_id)
    int mrcn_responder_on_timer(mrcn_responder *r, double now)
    int mrcn_responder_stop(mrcn_responder *r, double now)
    int mrcn_responder_deadline(const mrcn_responder *r, double *at)
    void mrcn_responder_batch_begin(mrcn_responder *r, mrcn_responder_batch *b)
    int mrcn_responder_batch_fast(mrcn_responder *r, mrcn_responder_batch *b,
                                  const uint8_t *buf, size_t len, int marked, double now)
    void mrcn_responder_batch_reload(mrcn_responder *r, mrcn_responder_batch *b)
    void mrcn_responder_batch_end(mrcn_responder *r, mrcn_responder_batch *b, double now)

_resp_log = _logging.getLogger("agents.mrc.responder")
_WorkCompletion, _Transport = _types.WorkCompletion, _types.Transport
_RECV_IMM = _types.WCOpcode.RECV_RDMA_WITH_IMM
_WC_SUCCESS, _WC_FLUSH = _types.WCStatus.SUCCESS, _types.WCStatus.WR_FLUSH_ERR


cdef int _resp_check(int rc) except -1:
    """Raise what the Python responder raises for a C status."""
    if rc >= 0:
        return 0
    if rc == MRCN_EPROTO or rc == MRCN_ECRC:
        raise _ProtocolError(mrcn_strerror(rc).decode())
    if rc == MRCN_ENOMEM:
        raise MemoryError()
    if rc == MRCN_ESTATE:   # Python: popleft() from the empty deque of posted receives
        raise IndexError("pop from an empty deque")
    raise ValueError(mrcn_strerror(rc).decode())


cdef dict _evmap_dict(const mrcn_evmap *m, bint times):
    cdef size_t i
    if times:
        return {m.keys[i]: m.vals[i].t for i in range(m.n)}
    return {m.keys[i]: m.vals[i].a for i in range(m.n)}


cdef class _ReverseEVsView:
    """responder.reverse of a native Responder: reverse.ReverseEVs's evs, marked_bad, state()."""

    cdef Responder owner

    @property
    def evs(self):
        cdef mrcn_reverse *rv = &self.owner.r.reverse
        return [rv.evs[i] for i in range(rv.n_evs)]

    @evs.setter
    def evs(self, evs):
        cdef list items = list(evs)
        cdef size_t i, n = len(items)
        cdef uint32_t *buf = <uint32_t *>malloc(n * sizeof(uint32_t) + 1)
        if buf == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                buf[i] = items[i]
            _resp_check(mrcn_reverse_set_evs(&self.owner.r.reverse, buf, n))
        finally:
            free(buf)

    @property
    def marked_bad(self):
        return self.owner.r.reverse.marked_bad

    def state(self):
        """reverse.ReverseEVs.state(): everything that decides the next choice."""
        cdef mrcn_reverse *rv = &self.owner.r.reverse
        return (self.evs, rv.pos, rv.sent, _evmap_dict(&rv.bad, False), rv.last,
                _evmap_dict(&rv.strikes, False), rv.mark_at, _evmap_dict(&rv.seen, False), rv.rx,
                rv.marked_bad)


cdef class Responder:
    """The C responder: same keywords as :class:`agents.mrc.responder.Responder`."""

    cdef mrcn_responder r
    cdef bint ready
    cdef readonly object config, transport
    cdef object _events, _mem, _reverse
    cdef uint8_t[::1] _view

    def __cinit__(self):
        self.ready = False

    def __init__(self, *, qpn, config, transport, events, memory):
        cdef mrcn_responder_config cfg
        cdef uint8_t *base = NULL
        cdef size_t n = 0
        cfg.sack_every = config.sack_every
        cfg.ack_delay_s = config.ack_delay_s
        cfg.ack_coalesce_s = config.ack_coalesce_s
        cfg.always_skip_ce_run = config.always_skip_ce_run
        self.config, self.transport, self._events = config, transport, events
        self._mem = memoryview(memory).cast("B") if memory is not None else None
        if self._mem is not None:
            if self._mem.readonly:
                raise ValueError("the registered memory region must be writable")
            self._view = self._mem
            n = self._view.shape[0]
            if n:
                base = &self._view[0]
        if self.ready:
            mrcn_responder_free(&self.r)
        mrcn_responder_init(&self.r, qpn, &cfg, transport is _Transport.RC, base, n,
                            memory is not None)
        self.ready = True
        self._reverse = _ReverseEVsView()
        (<_ReverseEVsView>self._reverse).owner = self

    def __dealloc__(self):
        if self.ready:
            mrcn_responder_free(&self.r)

    cdef int _drain(self) except -1:
        """Completions made by the last call, in order, into the events deque."""
        cdef size_t i
        cdef mrcn_wc *w
        for i in range(self.r.n_wcs):
            w = &self.r.wcs[i]
            if w.status == MRCN_WC_SUCCESS:
                self._events.append(_WorkCompletion(w.time, self.r.qpn, _RECV_IMM, _WC_SUCCESS,
                                                    w.wr_id, 0, w.imm, w.psn))
            else:
                self._events.append(_WorkCompletion(w.time, self.r.qpn, _RECV_IMM, _WC_FLUSH,
                                                    w.wr_id))
        self.r.n_wcs = 0
        return 0

    cdef int _done(self, int rc) except -1:
        self._drain()
        return _resp_check(rc)

    # ---- attributes the QP sets and reads -------------------------------------------
    @property
    def qpn(self):
        return self.r.qpn

    @property
    def dest_qpn(self):
        return self.r.dest_qpn

    @dest_qpn.setter
    def dest_qpn(self, value):
        self.r.dest_qpn = value

    @property
    def mpr_dest(self):
        return self.r.mpr_dest

    @mpr_dest.setter
    def mpr_dest(self, value):
        _resp_check(mrcn_responder_set_mpr_dest(&self.r, value))

    @property
    def max_wimm_dest(self):
        return self.r.max_wimm_dest

    @max_wimm_dest.setter
    def max_wimm_dest(self, value):
        self.r.max_wimm_dest = value

    @property
    def reverse(self):
        return self._reverse

    @property
    def reverse_evs(self):
        """A copy of the forward EVs seen (EV -> last arrival time, seconds)."""
        return _evmap_dict(&self.r.reverse_evs, True)

    @property
    def memory(self):
        return self._mem

    @property
    def rx_cum_psn(self):
        return self.r.rcv_cum

    @rx_cum_psn.setter
    def rx_cum_psn(self, psn):
        """responder.Responder.rx_cum_psn's setter (tests: the end of the PSN space)."""
        if self.r.n_chunks or self.r.n_imm or not 0 <= psn <= 0xFFFFFFFF:
            raise ValueError(f"rx_cum_psn={psn!r}: only 0..{0xFFFFFFFF}, nothing held above it")
        self.r.rcv_cum = psn

    @property
    def bad_packets(self):
        return self.r.bad_packets

    @property
    def rx_packets(self):
        return self.r.rx_packets

    @property
    def rx_bytes(self):
        return self.r.rx_bytes

    @property
    def rx_duplicates(self):
        return self.r.rx_duplicates

    @property
    def rx_ooo(self):
        return self.r.rx_ooo

    @property
    def rx_access_errors(self):
        return self.r.rx_access_errors

    @property
    def rx_out_of_window(self):
        return self.r.rx_out_of_window

    @property
    def rx_no_recv(self):
        return self.r.rx_no_recv

    @property
    def deadline(self):
        cdef double at
        return at if mrcn_responder_deadline(&self.r, &at) else None

    def counters(self):
        return {"rx_packets": self.r.rx_packets, "rx_bytes": self.r.rx_bytes,
                "rx_duplicates": self.r.rx_duplicates, "rx_ooo": self.r.rx_ooo,
                "rx_cum_psn": self.r.rcv_cum, "rx_out_of_window": self.r.rx_out_of_window,
                "rx_access_errors": self.r.rx_access_errors, "rx_no_recv": self.r.rx_no_recv,
                "reverse_ev_marked_bad": self.r.reverse.marked_bad,
                "recvs_posted": self.r.n_recvs}

    # ---- inputs -------------------------------------------------------------------------
    def on_data(self, data, double now, ecn):
        cdef const uint8_t[::1] v
        cdef const uint8_t *buf = NULL
        cdef size_t n
        cdef uint64_t errors = self.r.rx_access_errors
        if type(data) is bytes:
            buf, n = <const uint8_t *>PyBytes_AS_STRING(data), len(<bytes>data)
        else:
            v = memoryview(data).cast("B")
            n = v.shape[0]
            if n:
                buf = &v[0]
        self._done(mrcn_responder_on_data(&self.r, buf, n, now, bool(ecn)))
        if self.r.rx_access_errors != errors:
            off, length = int.from_bytes(data[16:24], "big"), int.from_bytes(data[24:28], "big")
            _resp_log.warning("qpn %d: write [%d, %d) outside the memory region", self.r.qpn,
                              off, off + length)

    def receive_batch(self, datagrams, double now, slow, ce=None):
        """responder.Responder.receive_batch: in-order data placed here, anything else
        through ``slow(data, now, marked)``, with the state written back first."""
        cdef mrcn_responder_batch b
        cdef const uint8_t[::1] v
        cdef const uint8_t *buf
        cdef size_t n
        cdef int rc
        if self._mem is None:
            raise TypeError("receive_batch needs a registered memory region")
        datagrams = list(datagrams)
        mrcn_responder_batch_begin(&self.r, &b)
        for i, data in enumerate(datagrams):
            marked = ce is not None and ce[i]
            if type(data) is bytes:
                buf, n = <const uint8_t *>PyBytes_AS_STRING(data), len(<bytes>data)
            else:
                v = memoryview(data).cast("B")
                n = v.shape[0]
                buf = &v[0] if n else NULL
            rc = mrcn_responder_batch_fast(&self.r, &b, buf, n, bool(marked), now)
            if rc == 1:
                continue
            self._done(rc)
            if not slow(data, now, marked):    # e.g. a SACK ended the QP in ERR
                for j in range(i + 1, len(datagrams)):
                    slow(datagrams[j], now, ce is not None and ce[j])
                return
            mrcn_responder_batch_reload(&self.r, &b)
        mrcn_responder_batch_end(&self.r, &b, now)

    def on_probe_req(self, pkt):
        cdef mrcn_probe req
        req.dest_qpn = pkt.dest_qpn
        req.probe_id = pkt.probe_id
        req.req_ev = pkt.req_ev
        req.rsp_ev = pkt.rsp_ev
        req.timestamp_ns = pkt.timestamp_ns
        req.response = 0
        _resp_check(mrcn_responder_on_probe_req(&self.r, &req))

    def post_recv(self, uint64_t wr_id):
        _resp_check(mrcn_responder_post_recv(&self.r, wr_id))

    def on_timer(self, now):
        cdef double at
        if not mrcn_responder_deadline(&self.r, &at):
            return                     # Python tests the deadline first: `now` unread
        _resp_check(mrcn_responder_on_timer(&self.r, now))

    def stop(self, double now=0.0):
        self._done(mrcn_responder_stop(&self.r, now))

    # ---- outputs ------------------------------------------------------------------------
    def take_output(self):
        """The control packets queued since the last call, as (bytes, EV id)."""
        cdef size_t i
        cdef list out = [(PyBytes_FromStringAndSize(<char *>self.r.out[i].bytes, self.r.out[i].len),
                          self.r.out[i].ev) for i in range(self.r.n_out)]
        self.r.n_out = 0
        return out
