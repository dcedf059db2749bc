# The queue pair (agents/mrc/core/mrcn_qp.h and its halves mrcn_requester.h, mrcn_loss.h,
# mrcn_probes.h), the twin of agents.mrc.qp.QP: the same constructor, methods and attributes
# as the rest of the code and the tests use them. The state machine's argument checks
# (attribute names, profiles, ValueErrors) stay here, in Python terms; every step's effect is
# the C's. The native endpoint (same module) drives ``QP.qp`` directly.
#
# Differences from the Python QP, for misuse or introspection only:
#  * ``rng``: the C keeps its own copy of the PCG32 state; the caller's Pcg32 does not advance
#    (``qp.rng`` is a snapshot);
#  * ``cc``, ``requester``, ``responder``: read-only views of the C state (``cc`` a snapshot
#    copy of the controller);
#  * a write's ``remote_offset`` + size must fit a u64 (Python raises struct.error at send);
#    a non-contiguous 1-D buffer is copied once at post (Python slices it at each send);
#  * an EV set holds its EVs plus 256 REPLACE_EV records (MemoryError beyond).
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memset
from cpython.bytes cimport PyBytes_FromStringAndSize
import collections as _collections
import dataclasses as _dataclasses
import logging as _qp_logging
import random as _random

from agents.mrc import cc as _cc_mod
from agents.mrc import rng as _rng_mod
from agents.mrc import types as _qtypes

cdef extern from "mrcn_txq.h":
    ctypedef struct mrcn_txpkt:
        size_t off
        uint32_t len
        uint32_t ev
    ctypedef struct mrcn_txq:
        uint8_t *buf
        mrcn_txpkt *pkts
        size_t count
    void mrcn_txq_init(mrcn_txq *q)
    void mrcn_txq_free(mrcn_txq *q)
    void mrcn_txq_reset(mrcn_txq *q)

cdef extern from "mrcn_loss.h":
    ctypedef struct mrcn_deque:
        size_t n
    ctypedef struct mrcn_loss:
        mrcn_deque sent_order
        int64_t hi_acked_gseq
        double hi_acked_sent_at
        double rtt_min_s
        uint64_t timeouts, ooo_losses, ev_losses_excused, ev_losses_stalled, no_path_timeouts
        uint64_t ev_losses_confirmed
        uint64_t ev_losses_live
        uint32_t n_stalled
        uint64_t loss_retries

cdef extern from "mrcn_requester.h":
    ctypedef struct mrcn_qp_config:
        int rc
        uint32_t payload_bytes
        double time_scale, min_rto_s, initial_rto_s
        int64_t sack_every
        double ack_delay_s, ack_coalesce_s
        int64_t reorder_threshold, ooo_threshold
        double ooo_time_frac
        uint64_t ev_loss_run
        int loss_inference
        double probe_interval_s, probe_timeout_s
        int64_t probe_successes
        uint32_t ev_min_active
        double skip_timeout_s
        int64_t always_skip_ce_run
        uint32_t ev_event_mask
        uint32_t max_burst
        double cnp_interval_s
        int ev_select
    ctypedef struct mrcn_qp_attr:
        uint32_t mpr, mpr_dest, max_wimm, max_wimm_dest, timeout, retry_linear_cnt, retry_exp_cnt
    int MRCN_EVENT_WRITE, MRCN_EVENT_RECV, MRCN_EVENT_EV, MRCN_EVENT_ERROR
    int MRCN_WRITE_SUCCESS, MRCN_WRITE_RETRY_EXC_ERR
    ctypedef struct mrcn_event_write:
        uint64_t wr_id
        uint64_t wr_index
        uint64_t byte_len
        int status
    ctypedef union mrcn_event_u:
        mrcn_event_write write
        mrcn_wc recv
        mrcn_ev_event ev
        char reason[112]
    ctypedef struct mrcn_event:
        int kind
        double time
        mrcn_event_u u
    ctypedef struct mrcn_events:
        mrcn_event *buf
        size_t head, n, cap
    ctypedef struct mrcn_req:
        uint64_t bad_packets
        uint64_t wr_head, wr_tail
        uint64_t psn_assign, next_psn, snd_una
        int64_t inflight_bytes
        mrcn_loss loss
        uint64_t tx_packets, tx_bytes, rtx_packets, rtx_bytes, lost_packets, acked_bytes
        uint64_t ev_skips_ecn, ev_skips_trim, ev_skips_trim_lasthop, nacks_no_buffer

cdef extern from "mrcn_qp.h":
    ctypedef struct mrcn_qp:
        uint32_t qpn
        int state
        uint32_t dest_qpn
        mrcn_cc cc
        int paced
        mrcn_rng rng
        mrcn_ev_set *evs
        mrcn_events events
        mrcn_rtt rtt
        mrcn_req req
        mrcn_responder resp
        int has_cnp
        mrcn_cnp_pacer cnp
        uint64_t cnp_received
    int mrcn_qp_create(mrcn_qp **out, uint32_t qpn, const mrcn_qp_config *cfg, const mrcn_cc *cc,
                       uint64_t rng_state, uint64_t rng_inc, uint8_t *mem, size_t mem_len,
                       int has_mem)
    void mrcn_qp_destroy(mrcn_qp *qp)
    int mrcn_qp_init_evs(mrcn_qp *qp, const uint32_t *evs, uint32_t count,
                         uint32_t ev_min_active, uint32_t event_mask)
    int mrcn_qp_set_reverse_evs(mrcn_qp *qp, const uint32_t *evs, size_t count)
    void mrcn_qp_set_dest_qpn(mrcn_qp *qp, uint32_t dest_qpn)
    int mrcn_qp_set_attr(mrcn_qp *qp, int to, const mrcn_qp_attr *attr)
    int mrcn_qp_set_rq_psn(mrcn_qp *qp, uint32_t psn)
    int mrcn_qp_set_sq_psn(mrcn_qp *qp, uint32_t psn)
    int mrcn_qp_enter_error(mrcn_qp *qp, double now, const char *reason)
    int mrcn_qp_reset(mrcn_qp *qp)
    mrcn_ev_set *mrcn_qp_detach_evs(mrcn_qp *qp)
    int mrcn_qp_drain_ev_set(mrcn_qp *qp, mrcn_ev_set *set)
    int mrcn_qp_post_write(mrcn_qp *qp, uint64_t wr_id, const uint8_t *data, size_t len,
                           uint64_t remote_offset, bint has_imm, uint32_t imm, uint64_t *index)
    uint64_t mrcn_qp_writes_released(const mrcn_qp *qp)
    int mrcn_qp_post_recv(mrcn_qp *qp, uint64_t wr_id)
    int mrcn_qp_receive(mrcn_qp *qp, const uint8_t *data, size_t len, double now, int ecn)
    int mrcn_qp_receive_batch(mrcn_qp *qp, const uint8_t *const *data, const size_t *lens,
                              const uint8_t *ce, size_t n, double now)
    int mrcn_qp_handle_timer(mrcn_qp *qp, double now)
    int mrcn_qp_get_timer(const mrcn_qp *qp, double *deadline)
    int mrcn_qp_datagrams_to_send(mrcn_qp *qp, double now, mrcn_txq *out)
    int mrcn_qp_next_event(mrcn_qp *qp, mrcn_event *event)
    size_t mrcn_qp_events_pending(const mrcn_qp *qp)
    int mrcn_qp_set_ev_state(mrcn_qp *qp, uint32_t ev, mrcn_ev_state state, double now)
    int mrcn_qp_replace_ev(mrcn_qp *qp, uint32_t cur, uint32_t new_ev, mrcn_ev_state state,
                           double now)
    uint32_t mrcn_qp_num(const mrcn_qp *qp)
    uint32_t mrcn_qp_max_burst(const mrcn_qp *qp)
    uint64_t mrcn_qp_bad_packets(const mrcn_qp *qp)
    double mrcn_qp_probe_timeout_s(const mrcn_qp *qp)

_qp_log = _qp_logging.getLogger("agents.mrc.qp")
_QPState, _QPAttr, _QPError, _QPStateError = (_qtypes.QPState, _qtypes.QPAttr, _qtypes.QPError,
                                              _qtypes.QPStateError)
_QP_STATES = (_QPState.RST, _QPState.INIT, _QPState.RTR, _QPState.RTS, _QPState.ERR)
_QP_STATE_INDEX = {s: i for i, s in enumerate(_QP_STATES)}
_WRITE, _WC_RETRY = _qtypes.WCOpcode.RDMA_WRITE, _qtypes.WCStatus.RETRY_EXC_ERR
_WRITE_STATUS = (_qtypes.WCStatus.SUCCESS, _qtypes.WCStatus.RETRY_EXC_ERR,
                 _qtypes.WCStatus.WR_FLUSH_ERR)
_ATTR_FIELDS = tuple(f.name for f in _dataclasses.fields(_QPAttr))
# agents.mrc.qp.TRANSITIONS / REQUIRED (the attribute names each step takes)
_S = _QPState
_RTS_ATTRS = frozenset({"mpr", "max_wimm", "timeout", "retry_linear_cnt", "retry_exp_cnt"})
_TRANSITIONS = {
    (_S.RST, _S.INIT): frozenset({"evs", "ev_min_active", "ev_profile", "reverse_evs"}),
    (_S.INIT, _S.RTR): frozenset({"dest_qpn", "mpr_dest", "max_wimm_dest", "rq_psn"}),
    (_S.RTR, _S.RTS): _RTS_ATTRS | {"sq_psn"},
    (_S.RTS, _S.RTS): _RTS_ATTRS,
}
_PSN_ATTRS = ("rq_psn", "sq_psn")
_MAX_PSN = 0xFFFFFFFE
_REQUIRED = {(_S.INIT, _S.RTR): {"dest_qpn"}}
_NATIVE_CC = {"fixed": FixedWindow, "uet-1.0-nscc": NSCC, "dcqcn": DCQCN}


cdef int _qp_check(int rc) except -1:
    if rc >= 0:
        return 0
    msg = mrcn_strerror(rc).decode()
    if rc == MRCN_ENOMEM or rc == MRCN_ENOSPC:
        raise MemoryError(f"QP: {msg}")
    if rc == MRCN_EINVAL:
        raise ValueError(f"QP: {msg}")
    raise RuntimeError(f"QP: {msg}")


cdef uint32_t *_u32_array(list items) except NULL:
    cdef uint32_t *buf = <uint32_t *>PyMem_Malloc(len(items) * sizeof(uint32_t) + 4)
    if buf == NULL:
        raise MemoryError()
    try:
        for i in range(len(items)):
            buf[i] = items[i]
    except BaseException:
        PyMem_Free(buf)
        raise
    return buf


cdef class _QPEVSet(EVSet):
    """``QP.evs``: the QP's EV set (agents.mrc.ev.EVSet's interface); the events its calls
    report go into the QP's event queue, in order. After RST it keeps the set it had (as a
    Python EVSet object outlives its QP's reset), still drawing from the QP's PCG32."""

    cdef QP owner

    cdef void _drain(self):
        mrcn_qp_drain_ev_set(self.owner.qp, self.s)


cdef class _QPLossView:
    """``QP.requester.loss``: the loss detector's counters."""

    cdef QP owner

    @property
    def timeouts(self):
        return self.owner.qp.req.loss.timeouts

    @property
    def loss_retries(self):
        return self.owner.qp.req.loss.loss_retries

    @property
    def ooo_losses(self):
        return self.owner.qp.req.loss.ooo_losses

    @property
    def ev_losses_excused(self):
        return self.owner.qp.req.loss.ev_losses_excused

    @property
    def ev_losses_stalled(self):
        return self.owner.qp.req.loss.ev_losses_stalled

    @property
    def ev_losses_confirmed(self):
        return self.owner.qp.req.loss.ev_losses_confirmed

    @property
    def ev_losses_live(self):
        return self.owner.qp.req.loss.ev_losses_live

    @property
    def no_path_timeouts(self):
        return self.owner.qp.req.loss.no_path_timeouts

    @property
    def sent_order(self):
        """Only its length is visible (entries still queued for the out-of-order scan)."""
        return range(self.owner.qp.req.loss.sent_order.n)

    @property
    def hi_acked_gseq(self):
        return self.owner.qp.req.loss.hi_acked_gseq

    @property
    def hi_acked_sent_at(self):
        return self.owner.qp.req.loss.hi_acked_sent_at

    @property
    def rtt_min_s(self):
        return self.owner.qp.req.loss.rtt_min_s


cdef class _QPRequesterView:
    """``QP.requester``: the requester's counters (Requester.counters())."""

    cdef QP owner
    cdef readonly _QPLossView loss

    @property
    def idle(self):
        return self.owner.qp.req.wr_head == self.owner.qp.req.wr_tail

    @property
    def bad_packets(self):
        return self.owner.qp.req.bad_packets

    @property
    def tx_packets(self):
        return self.owner.qp.req.tx_packets

    @property
    def tx_bytes(self):
        return self.owner.qp.req.tx_bytes

    @property
    def rtx_packets(self):
        return self.owner.qp.req.rtx_packets

    @property
    def rtx_bytes(self):
        return self.owner.qp.req.rtx_bytes

    @property
    def lost_packets(self):
        return self.owner.qp.req.lost_packets

    @property
    def acked_bytes(self):
        return self.owner.qp.req.acked_bytes

    @property
    def nacks_no_buffer(self):
        return self.owner.qp.req.nacks_no_buffer

    @property
    def ev_skips(self):
        cdef mrcn_req *r = &self.owner.qp.req
        return {"ecn": r.ev_skips_ecn, "trim": r.ev_skips_trim,
                "trim_lasthop": r.ev_skips_trim_lasthop}

    def counters(self):
        cdef mrcn_req *r = &self.owner.qp.req
        return {"tx_packets": r.tx_packets, "tx_bytes": r.tx_bytes,
                "retransmissions": r.rtx_packets, "retransmitted_bytes": r.rtx_bytes,
                "timeouts": r.loss.timeouts, "loss_retries": r.loss.loss_retries,
                "no_path_timeouts": r.loss.no_path_timeouts,
                "ev_losses_stalled": r.loss.ev_losses_stalled,
                "ev_losses_confirmed": r.loss.ev_losses_confirmed,
                "ev_losses_live": r.loss.ev_losses_live,
                "lost_packets": r.lost_packets, "acked_bytes": r.acked_bytes,
                "nacks_no_buffer": r.nacks_no_buffer,
                "inflight_bytes": r.inflight_bytes, "snd_una": r.snd_una,
                "next_psn": r.next_psn}


cdef class _QPResponderView:
    """``QP.responder``: the responder's counters and region (Responder's attributes)."""

    cdef QP owner
    cdef _ReverseView _reverse

    @property
    def memory(self):
        return self.owner._mem

    @property
    def rx_cum_psn(self):
        return self.owner.qp.resp.rcv_cum

    @property
    def bad_packets(self):
        return self.owner.qp.resp.bad_packets

    @property
    def rx_packets(self):
        return self.owner.qp.resp.rx_packets

    @property
    def rx_bytes(self):
        return self.owner.qp.resp.rx_bytes

    @property
    def rx_duplicates(self):
        return self.owner.qp.resp.rx_duplicates

    @property
    def rx_ooo(self):
        return self.owner.qp.resp.rx_ooo

    @property
    def rx_access_errors(self):
        return self.owner.qp.resp.rx_access_errors

    @property
    def rx_out_of_window(self):
        return self.owner.qp.resp.rx_out_of_window

    @property
    def rx_no_recv(self):
        return self.owner.qp.resp.rx_no_recv

    @property
    def dest_qpn(self):
        return self.owner.qp.resp.dest_qpn

    @property
    def mpr_dest(self):
        return self.owner.qp.resp.mpr_dest

    @property
    def max_wimm_dest(self):
        return self.owner.qp.resp.max_wimm_dest

    @property
    def reverse_evs(self):
        return _evmap_dict(&self.owner.qp.resp.reverse_evs, True)

    @property
    def reverse(self):
        return self._reverse

    @property
    def deadline(self):
        cdef double at
        return at if mrcn_responder_deadline(&self.owner.qp.resp, &at) else None

    def counters(self):
        cdef mrcn_responder *r = &self.owner.qp.resp
        return {"rx_packets": r.rx_packets, "rx_bytes": r.rx_bytes,
                "rx_duplicates": r.rx_duplicates, "rx_ooo": r.rx_ooo,
                "rx_cum_psn": r.rcv_cum, "rx_out_of_window": r.rx_out_of_window,
                "rx_access_errors": r.rx_access_errors, "rx_no_recv": r.rx_no_recv,
                "reverse_ev_marked_bad": r.reverse.marked_bad,
                "recvs_posted": r.n_recvs}


cdef class _ReverseView:
    """``QP.responder.reverse``: ReverseEVs's evs, marked_bad and state()."""

    cdef QP owner

    @property
    def evs(self):
        cdef mrcn_reverse *rv = &self.owner.qp.resp.reverse
        return [rv.evs[i] for i in range(rv.n_evs)]

    @property
    def marked_bad(self):
        return self.owner.qp.resp.reverse.marked_bad

    def state(self):
        cdef mrcn_reverse *rv = &self.owner.qp.resp.reverse
        return (self.evs, rv.pos, rv.sent, _evmap_dict(&rv.bad, False), rv.last,
                _evmap_dict(&rv.strikes, False), rv.mark_at, _evmap_dict(&rv.seen, False),
                rv.marked_bad)


cdef class QP:
    """The C queue pair: same constructor and interface as :class:`agents.mrc.qp.QP`
    (differences for misuse and introspection: this file's header)."""

    cdef mrcn_qp *qp
    cdef readonly object config, transport
    cdef object _mem, _writes, _wr_ids, _evs_view, _requester, _responder
    cdef object _attr
    cdef uint8_t[::1] _view
    cdef mrcn_txq txq

    def __cinit__(self):
        self.qp = NULL
        mrcn_txq_init(&self.txq)

    def __init__(self, qpn, *, rng, memory=None, config=None):
        cdef mrcn_qp_config c
        cdef CongestionControl cc
        cdef _QPRequesterView req
        cdef _QPResponderView resp
        cdef uint8_t *base = NULL
        cdef size_t n = 0
        if not 0 <= qpn <= 0xFFFFFFFF:
            raise ValueError(f"qpn {qpn} is not a u32")
        if isinstance(rng, _random.Random):
            rng = _rng_mod.Pcg32.from_random(rng)
        elif not isinstance(rng, _rng_mod.Pcg32):
            raise ValueError("rng must be a seeded agents.mrc.rng.Pcg32 or random.Random")
        cfg = config or _qtypes.QPConfig()
        cfg.validate()
        self.config = cfg
        self.transport = _qtypes.Transport(cfg.transport)
        factory = _NATIVE_CC.get(cfg.cc)
        if factory is None:
            if cfg.cc in _cc_mod.available():
                raise ValueError(f"congestion control {cfg.cc!r} has no native twin")
            raise ValueError(f"unknown congestion control {cfg.cc!r}; known: "
                             f"{_cc_mod.available()}")
        cc = factory(mss_bytes=cfg.payload_bytes, **cfg.cc_params)
        if not 1 <= cfg.payload_bytes <= 0xFFFFFFFF or not 1 <= cfg.max_burst <= 0xFFFFFFFF:
            raise ValueError("payload_bytes and max_burst must fit a u32")
        memset(&c, 0, sizeof(c))
        c.rc = self.transport is _qtypes.Transport.RC
        c.payload_bytes = cfg.payload_bytes
        c.time_scale, c.min_rto_s, c.initial_rto_s = cfg.time_scale, cfg.min_rto_s, cfg.initial_rto_s
        c.sack_every = cfg.sack_every
        c.ack_delay_s, c.ack_coalesce_s = cfg.ack_delay_s, cfg.ack_coalesce_s
        c.reorder_threshold, c.ooo_threshold = cfg.reorder_threshold, cfg.ooo_threshold
        c.ooo_time_frac = cfg.ooo_time_frac
        c.ev_loss_run = cfg.ev_loss_run
        c.loss_inference = bool(cfg.loss_inference)
        c.probe_interval_s, c.probe_timeout_s = cfg.probe_interval_s, cfg.probe_timeout_s
        c.probe_successes = cfg.probe_successes
        c.ev_min_active = cfg.ev_min_active
        c.skip_timeout_s = cfg.skip_timeout_s
        c.always_skip_ce_run = cfg.always_skip_ce_run
        c.ev_event_mask = cfg.ev_event_mask
        c.max_burst = cfg.max_burst
        c.cnp_interval_s = cfg.cnp_interval_s
        c.ev_select = _EV_SELECT.index(cfg.ev_select)   # validated above
        self._mem = memoryview(memory).cast("B") if memory is not None else None
        if self._mem is not None:
            if self._mem.readonly:
                raise ValueError("the registered memory region must be writable")
            self._view = self._mem
            n = self._view.shape[0]
            if n:
                base = &self._view[0]
        if self.qp != NULL:
            raise RuntimeError("QP.__init__ called twice")
        _qp_check(mrcn_qp_create(&self.qp, qpn, &c, &cc.cc, rng.state, rng.inc, base, n,
                                 memory is not None))
        self._writes = _collections.deque()   # (post index, memoryviews held) in post order
        self._wr_ids = {}                     # post index -> wr_id that is not a u64
        self._attr = _QPAttr()
        self._evs_view = None
        req = _QPRequesterView.__new__(_QPRequesterView)
        req.owner = self
        req.loss = _QPLossView.__new__(_QPLossView)
        req.loss.owner = self
        self._requester = req
        resp = _QPResponderView.__new__(_QPResponderView)
        resp.owner = self
        resp._reverse = _ReverseView.__new__(_ReverseView)
        resp._reverse.owner = self
        self._responder = resp

    def __dealloc__(self):
        if self.qp != NULL:
            mrcn_qp_destroy(self.qp)
            self.qp = NULL
        mrcn_txq_free(&self.txq)
        if self._writes is not None:
            for _, views in self._writes:
                for v in reversed(views):
                    v.release()

    cdef int _release(self) except -1:
        """Let go of the buffers of the writes the C no longer references, once each."""
        cdef uint64_t upto = mrcn_qp_writes_released(self.qp)
        writes = self._writes
        while writes and writes[0][0] < upto:
            _, views = writes.popleft()
            for v in reversed(views):
                v.release()
        return 0

    cdef int _done(self, int rc) except -1:
        self._release()
        return _qp_check(rc)

    # ---- state ---------------------------------------------------------------------------
    @property
    def qpn(self):
        return self.qp.qpn

    @property
    def state(self):
        return _QP_STATES[self.qp.state]

    @property
    def attr(self):
        return self._attr

    @property
    def dest_qpn(self):
        return self.qp.dest_qpn

    @property
    def evs(self):
        return self._evs_view

    @property
    def requester(self):
        return self._requester

    @property
    def responder(self):
        return self._responder

    @property
    def rng(self):
        """A snapshot of the EV rotation's PCG32 (agents.mrc.rng.Pcg32)."""
        r = _rng_mod.Pcg32(0)
        r.state, r.inc = self.qp.rng.state, self.qp.rng.inc
        return r

    @property
    def cc(self):
        """A snapshot of the congestion controller (a native CongestionControl)."""
        cdef CongestionControl c = {0: FixedWindow, 1: NSCC, 2: DCQCN}[self.qp.cc.kind].__new__(
            {0: FixedWindow, 1: NSCC, 2: DCQCN}[self.qp.cc.kind])
        c.cc = self.qp.cc
        return c

    @property
    def rto_s(self):
        return self.qp.rtt.rto_s

    @property
    def srtt_s(self):
        return self.qp.rtt.srtt_s if self.qp.rtt.has_srtt else None

    @property
    def idle(self):
        return self.qp.req.wr_head == self.qp.req.wr_tail

    @property
    def bad_packets(self):
        return mrcn_qp_bad_packets(self.qp)

    @property
    def probe_timeout_s(self):
        return mrcn_qp_probe_timeout_s(self.qp)

    @property
    def cnp_received(self):
        return self.qp.cnp_received

    @property
    def _events(self):
        """The pending events (a list; Python's deque), not consumed."""
        cdef mrcn_events *q = &self.qp.events
        return [self._event(&q.buf[(q.head + i) & (q.cap - 1)]) for i in range(q.n)]

    # ---- state machine ---------------------------------------------------------------------
    def modify_qp(self, state, now=0.0, **attrs):
        """agents.mrc.qp.QP.modify_qp."""
        cdef mrcn_qp_attr a
        cdef uint32_t *buf
        cdef _QPEVSet view
        state = _QPState(state)
        if state is _QPState.ERR:
            self._enter_error(now, "moved to ERR by the application")
            return
        if state is _QPState.RST:
            self._reset()
            return
        cur = self.state
        key = (cur, state)
        allowed = _TRANSITIONS.get(key)
        if allowed is None:
            raise _QPStateError(f"QP {self.qpn}: no transition {cur.name} -> {state.name}")
        unknown = set(attrs) - allowed
        if unknown:
            raise ValueError(f"{cur.name} -> {state.name} does not take {sorted(unknown)}")
        missing = _REQUIRED.get(key, set()) - set(attrs)
        if missing:
            raise ValueError(f"{cur.name} -> {state.name} needs {sorted(missing)}")
        for name in _PSN_ATTRS:
            psn = attrs.get(name, 0)
            if type(psn) is not int or not 0 <= psn <= _MAX_PSN:
                raise ValueError(f"{name}={psn!r} is not a PSN (0..{_MAX_PSN})")
        rc_mode = self.transport is _qtypes.Transport.RC
        if state is _QPState.INIT:
            profile = attrs.get("ev_profile")
            if ("evs" in attrs) == (profile is not None):
                raise ValueError("RST -> INIT needs exactly one of evs and ev_profile")
            if profile is not None:
                if profile.state.name != "ONLINE":
                    raise ValueError(f"EV profile {profile.profile_id} is {profile.state.name}, "
                                     f"not ONLINE")
                attrs.setdefault("ev_min_active", profile.ev_min_active)
                attrs["evs"] = profile.ev_vals()
            evs = list(attrs["evs"])
            if rc_mode:
                evs = evs[:1]
            floor = attrs.get("ev_min_active", self.config.ev_min_active)
            mask = self.config.ev_event_mask if profile is None else profile.ev_event_mask
            floor = min(floor, len(evs))
            if len(evs) == 0:
                raise ValueError("an EV set needs at least one EV")
            if len(set(evs)) != len(evs):
                raise ValueError(f"duplicate EVs in {evs}")
            if not 0 <= floor <= len(evs):
                raise ValueError(f"ev_min_active={floor} not in [0, {len(evs)}]")
            if mask & ~3:
                raise ValueError(f"event_mask {mask:#x}: only GOOD and ASSUMED_BAD (mrc_ctl.h)")
            # validated before the EV set is built: a failed INIT leaves the QP in RST with
            # no EVs (mrcn_qp_init_evs refuses a QP that has some), so INIT can be retried
            reverse = list(attrs.get("reverse_evs", evs))
            if not reverse or not set(reverse) <= set(attrs["evs"]):
                raise ValueError(f"reverse_evs {reverse} must be a non-empty subset of the QP's EVs")
            buf = _u32_array(evs)
            try:
                _qp_check(mrcn_qp_init_evs(self.qp, buf, len(evs), floor, mask))
            finally:
                PyMem_Free(buf)
            view = _QPEVSet.__new__(_QPEVSet)
            view.s = self.qp.evs
            view.borrowed = True
            view.owner = self
            view.rng = None
            view.events = None
            info = EVInfoMap.__new__(EVInfoMap)
            (<EVInfoMap>info).owner = view
            view.info = info
            self._evs_view = view
            if profile is not None:
                profile.attach(self)
                for ev in profile.denied_vals():   # as agents.mrc.qp.QP.modify_qp
                    view.set_state(ev, _EVState.DENIED, now)
            reverse = reverse[:1] if rc_mode else reverse
            buf = _u32_array(reverse)
            try:
                _qp_check(mrcn_qp_set_reverse_evs(self.qp, buf, len(reverse)))
            finally:
                PyMem_Free(buf)
        elif state is _QPState.RTR:
            dest_qpn = int(attrs["dest_qpn"])
            if not 0 <= dest_qpn <= 0xFFFFFFFF:
                raise ValueError("dest_qpn is not a u32")
            mrcn_qp_set_dest_qpn(self.qp, dest_qpn)
        new_attr = _dataclasses.replace(self._attr, **{k: v for k, v in attrs.items()
                                                       if k in _ATTR_FIELDS})
        new_attr.validate()
        if state is _QPState.RTS:
            floor = mrc_timeout_s(new_attr.timeout, self.config.time_scale, self.config.min_rto_s)
            self.config.check_ack_delay(floor, f"the RTO floor of timeout {new_attr.timeout}")
        a.mpr, a.mpr_dest, a.max_wimm, a.max_wimm_dest = (new_attr.mpr, new_attr.mpr_dest,
                                                         new_attr.max_wimm, new_attr.max_wimm_dest)
        a.timeout, a.retry_linear_cnt, a.retry_exp_cnt = (new_attr.timeout,
                                                          new_attr.retry_linear_cnt,
                                                          new_attr.retry_exp_cnt)
        _qp_check(mrcn_qp_set_attr(self.qp, _QP_STATE_INDEX[state], &a))
        self._attr = new_attr
        if "rq_psn" in attrs:
            _qp_check(mrcn_qp_set_rq_psn(self.qp, attrs["rq_psn"]))
        if "sq_psn" in attrs:
            _qp_check(mrcn_qp_set_sq_psn(self.qp, attrs["sq_psn"]))

    def _enter_error(self, double now, str reason):
        if self.qp.state == 4:
            return
        _qp_log.warning("qpn %d -> ERR: %s", self.qp.qpn, reason)
        self._done(mrcn_qp_enter_error(self.qp, now, reason.encode()[:111]))

    def _reset(self):
        view = self._evs_view
        if view is not None:   # the old set lives on in its view, as a Python EVSet would
            (<_QPEVSet>view).s = mrcn_qp_detach_evs(self.qp)
            (<_QPEVSet>view).borrowed = False
        self._evs_view = None
        self._attr = _QPAttr()
        self._wr_ids.clear()
        self._done(mrcn_qp_reset(self.qp))

    # ---- API -------------------------------------------------------------------------------
    def post_write(self, *, wr_id, local, remote_offset, imm=None):
        """agents.mrc.qp.QP.post_write: ``local`` is referenced (its buffer held, so that it
        cannot be resized or freed) until the write completes or the QP is reset."""
        cdef const uint8_t[::1] v
        cdef const uint8_t *p = NULL
        cdef uint64_t index = 0
        cdef uint64_t wid
        if self.qp.state != 3:
            raise _QPStateError(f"QP {self.qpn}: post_write needs RTS, state is {self.state.name}")
        if remote_offset < 0:
            raise ValueError("remote_offset must be >= 0")
        if imm is not None and not 0 <= imm <= 0xFFFFFFFF:
            raise ValueError("imm must be a u32")
        m = memoryview(local)
        views = [m]
        if m.format != "B" or m.ndim != 1 or not m.c_contiguous:
            if m.ndim == 1 and m.format == "B":   # strided: one copy (Python slices it)
                m = memoryview(m.tobytes())
            else:
                m = m.cast("B")
            views.append(m)
        n = len(m)
        if remote_offset + n > 0xFFFFFFFFFFFFFFFF:
            raise ValueError("remote_offset + size must fit a u64")
        v = m
        if n:
            p = &v[0]
        is_u64 = isinstance(wr_id, int) and 0 <= wr_id <= 0xFFFFFFFFFFFFFFFF
        wid = wr_id if is_u64 else 0
        rc = mrcn_qp_post_write(self.qp, wid, p, n, remote_offset, imm is not None,
                                imm if imm is not None else 0, &index)
        if rc < 0:
            v = None   # the typed view's own export first, or release() raises BufferError
        if rc == MRCN_EINVAL:
            for x in reversed(views):
                x.release()
            raise ValueError("PSN space exhausted on this QP")
        if rc < 0:
            for x in reversed(views):
                x.release()
            _qp_check(rc)
        self._writes.append((index, views))
        if not is_u64 or type(wr_id) is not int:
            self._wr_ids[index] = wr_id

    def post_recv(self, wr_id):
        if self.qp.state == 0 or self.qp.state == 4:
            raise _QPStateError(f"QP {self.qpn}: post_recv needs INIT, RTR or RTS, state is "
                                f"{self.state.name}")
        if not isinstance(wr_id, int) or not 0 <= wr_id < 2**64:
            raise ValueError(f"wr_id {wr_id!r} is not a u64")
        _qp_check(mrcn_qp_post_recv(self.qp, wr_id))

    def receive_datagram(self, data, double now, *, ecn=False):
        cdef const uint8_t[::1] v
        cdef const uint8_t *p = NULL
        cdef size_t n
        cdef uint64_t errors = self.qp.resp.rx_access_errors
        if type(data) is bytes:
            p, n = <const uint8_t *>PyBytes_AS_STRING(data), len(<bytes>data)
        else:
            v = memoryview(data).cast("B")
            n = v.shape[0]
            if n:
                p = &v[0]
        self._done(mrcn_qp_receive(self.qp, p, n, now, 1 if ecn else 0))
        if self.qp.resp.rx_access_errors != errors:
            off, length = int.from_bytes(data[16:24], "big"), int.from_bytes(data[24:28], "big")
            _resp_log.warning("qpn %d: write [%d, %d) outside the memory region", self.qp.qpn,
                              off, off + length)

    def receive_datagrams(self, datagrams, double now, ce=None):
        cdef list items = [d if type(d) is bytes else bytes(d) for d in datagrams]
        cdef size_t n = len(items), i
        cdef const uint8_t **ptrs = <const uint8_t **>PyMem_Malloc(n * sizeof(void *) + 8)
        cdef size_t *lens = <size_t *>PyMem_Malloc(n * sizeof(size_t) + 8)
        cdef uint8_t *marks = NULL
        try:
            if ptrs == NULL or lens == NULL:
                raise MemoryError()
            if ce is not None:
                marks = <uint8_t *>PyMem_Malloc(n + 1)
                if marks == NULL:
                    raise MemoryError()
                for i in range(n):
                    marks[i] = 1 if ce[i] else 0
            for i in range(n):
                ptrs[i] = <const uint8_t *>PyBytes_AS_STRING(items[i])
                lens[i] = len(<bytes>items[i])
            self._done(mrcn_qp_receive_batch(self.qp, ptrs, lens, marks, n, now))
        finally:
            PyMem_Free(ptrs)
            PyMem_Free(lens)
            PyMem_Free(marks)

    def handle_timer(self, now):
        """agents.mrc.qp.QP.handle_timer. ``now`` None (get_timer()'s None, as some tests
        pass it) is NaN here: nothing is due then, as nothing compares in Python."""
        cdef int state = self.qp.state
        cdef mrcn_events *q = &self.qp.events
        cdef mrcn_event *ev
        cdef size_t i
        self._done(mrcn_qp_handle_timer(self.qp, NAN if now is None else <double>now))
        if self.qp.state == 4 and state != 4:   # QP._enter_error's warning, with its reason
            for i in range(q.n):
                ev = &q.buf[(q.head + i) & (q.cap - 1)]
                if ev.kind == MRCN_EVENT_ERROR:
                    _qp_log.warning("qpn %d -> ERR: %s", self.qp.qpn, ev.u.reason.decode())

    def get_timer(self):
        cdef double t
        return t if mrcn_qp_get_timer(self.qp, &t) else None

    def datagrams_to_send(self, double now):
        """A list of (bytes, EV id), as agents.mrc.qp.QP.datagrams_to_send."""
        cdef size_t i
        cdef mrcn_txq *q = &self.txq
        mrcn_txq_reset(q)
        self._done(mrcn_qp_datagrams_to_send(self.qp, now, q))
        return [(PyBytes_FromStringAndSize(<char *>q.buf + q.pkts[i].off, q.pkts[i].len),
                 q.pkts[i].ev) for i in range(q.count)]

    cdef object _event(self, mrcn_event *e):
        cdef mrcn_wc *w
        qpn = self.qp.qpn
        if e.kind == MRCN_EVENT_WRITE:
            wr_id = self._wr_ids.get(e.u.write.wr_index, e.u.write.wr_id)
            return _WorkCompletion(e.time, qpn, _WRITE, _WRITE_STATUS[e.u.write.status], wr_id,
                                   e.u.write.byte_len)
        if e.kind == MRCN_EVENT_RECV:
            w = &e.u.recv
            if w.status == MRCN_WC_SUCCESS:
                return _WorkCompletion(w.time, qpn, _RECV_IMM, _WC_SUCCESS, w.wr_id, 0, w.imm,
                                       w.psn)
            return _WorkCompletion(w.time, qpn, _RECV_IMM, _WC_FLUSH, w.wr_id)
        if e.kind == MRCN_EVENT_EV:
            return _EVEvent(e.u.ev.time, qpn, e.u.ev.ev, _EVState(e.u.ev.old_state),
                            _EVState(e.u.ev.new_state), _EV_CAUSES[e.u.ev.cause],
                            e.u.ev.drop_count,
                            _LOSS_CAUSE_NAMES[e.u.ev.loss_cause] if e.u.ev.loss_cause >= 0 else None)
        return _QPError(e.time, qpn, e.u.reason.decode())

    def next_event(self):
        """Pop the next event (WorkCompletion, EVEvent, QPError) or None."""
        cdef mrcn_event e
        if not mrcn_qp_next_event(self.qp, &e):
            return None
        out = self._event(&e)
        if e.kind == MRCN_EVENT_WRITE:
            self._wr_ids.pop(e.u.write.wr_index, None)
        return out

    def set_ev_state(self, ev, state, now):
        if self.qp.evs == NULL:
            raise _QPStateError("the QP has no EV profile before INIT")
        self._evs_view.set_state(ev, state, now)

    def replace_ev(self, cur, new, now, state=_EVState.GOOD):
        if self.qp.evs == NULL:
            raise _QPStateError("the QP has no EV profile before INIT")
        self._evs_view.replace(cur, new, now, state)

    def stats(self):
        """A JSON-ready snapshot of counters, as agents.mrc.qp.QP.stats."""
        cc = self.cc
        evs = self._evs_view
        return {
            "qpn": self.qp.qpn, "state": self.state.name, "transport": self.transport.value,
            "rto_s": self.qp.rtt.rto_s, "rttvar_s": self.qp.rtt.rttvar_s,
            **self._requester.counters(),
            "cwnd_bytes": self.qp.cc.cwnd_bytes, "srtt_s": self.srtt_s,
            **self._responder.counters(),
            "bad_packets": mrcn_qp_bad_packets(self.qp),
            "ev_floor_held": evs.floor_held if evs else 0,
            "ev_skips": self._requester.ev_skips,
            "evs": evs.stats() if evs else {},
            "cc": {"name": cc.name, **(cc.counters() if hasattr(cc, "counters") else {})},
            "cnp_sent": self.qp.cnp.sent if self.qp.has_cnp else 0,
            "cnp_received": self.qp.cnp_received,
        }
