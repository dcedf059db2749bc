# The EV set (agents/mrc/core/mrcn_ev.h), the twin of agents.mrc.ev.EVSet.
from libc.stdint cimport int32_t, int64_t
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.math cimport NAN, isnan

from agents.mrc.ev import EV_SELECT as _EV_SELECT, EVCause as _EVCause, EVEvent as _EVEvent, \
    EVState as _EVState, EVStateError as _EVStateError   # EV_SELECT's index = MRCN_EV_SELECT_*

cdef extern from "mrcn.h":
    const char *mrcn_strerror(int status)
    enum:
        MRCN_OK, MRCN_EINVAL, MRCN_ENOSPC, MRCN_ENOMEM, MRCN_ESTATE

cdef extern from "mrcn_ev.h":
    ctypedef uint32_t mrcn_ev_state
    ctypedef int mrcn_ev_cause
    ctypedef struct mrcn_ev_info:
        uint32_t ev
        mrcn_ev_state state
        double skip_until
        uint64_t probe_ok
        double probe_due
        bint probe_outstanding
        uint32_t probe_id
        double probe_deadline
        uint64_t bytes_sent
        uint64_t packets_acked
        uint64_t packets_lost
        uint64_t retransmits
        uint64_t seq
        int64_t acked_seq
        double last_ack_s
        double rtt_last_s
        double rtt_min_s
        double rtt_srtt_s
        uint64_t rtt_samples
        uint64_t probes_sent
        uint64_t probes_ok_total
        uint64_t delivered_ts_ns
        double delivered_at_s
        uint64_t loss_run
        uint64_t loss_run_ts_ns
        bint loss_run_timeout
        uint64_t losses_excused
        uint64_t losses_chargeable
        uint64_t skip_picks
        bint always_skip
        uint64_t skips
        uint64_t drops_reported
        uint32_t penalty
    ctypedef struct mrcn_ev_event:
        double time
        uint32_t ev
        mrcn_ev_state old_state
        mrcn_ev_state new_state
        mrcn_ev_cause cause
        int64_t drop_count
        int32_t loss_cause
    ctypedef struct mrcn_ev_set:
        uint32_t qpn
        uint32_t ev_min_active
        double skip_timeout_s
        double srtt_s
        uint32_t event_mask
        uint64_t picks
        uint64_t floor_held
        bint all_good
        uint32_t n
        uint32_t *order
        uint32_t *rotation
        uint32_t rot_len
        uint32_t pos
        mrcn_ev_info *info
        uint32_t n_info
        uint32_t cap_info
        uint64_t events_overflow
        int select
        uint32_t *reuse
        uint32_t reuse_head, reuse_n
        uint64_t reused
    int mrcn_ev_next_state(mrcn_ev_state state, mrcn_ev_cause cause, mrcn_ev_state *next)
    int mrcn_ev_set_create(mrcn_ev_set **out, const uint32_t *evs, uint32_t count,
                           uint32_t capacity, uint32_t qpn, mrcn_rng *rng,
                           uint32_t ev_min_active, double skip_timeout_s,
                           mrcn_ev_state initial_state, uint32_t event_mask)
    void mrcn_ev_set_destroy(mrcn_ev_set *set)
    mrcn_ev_info *mrcn_ev_get(mrcn_ev_set *set, uint32_t ev)
    uint32_t mrcn_ev_usable_count(const mrcn_ev_set *set)
    int mrcn_ev_apply(mrcn_ev_set *set, uint32_t ev, mrcn_ev_cause cause, double now,
                      bint always, bint has_drop_count, int64_t drop_count,
                      mrcn_ev_state *new_state)
    int mrcn_ev_set_state(mrcn_ev_set *set, uint32_t ev, mrcn_ev_state state, double now)
    int mrcn_ev_replace(mrcn_ev_set *set, uint32_t cur, uint32_t new_ev, mrcn_ev_state state,
                        double now)
    double mrcn_ev_skip_bound_s(const mrcn_ev_set *set)
    int mrcn_ev_clear_always_skip(mrcn_ev_set *set, uint32_t ev, double now)
    int mrcn_ev_expire_skips(mrcn_ev_set *set, double now)
    int mrcn_ev_skip_deadline(const mrcn_ev_set *set, double *deadline)
    int mrcn_ev_pick(mrcn_ev_set *set, double now, bint has_exclude, uint32_t exclude,
                     uint64_t alive_since_ns, uint32_t *ev)
    int64_t mrcn_ev_pick_many(mrcn_ev_set *set, double now, uint32_t n, uint32_t *out)
    uint32_t mrcn_ev_probe_targets(const mrcn_ev_set *set, uint32_t *out, uint32_t cap)
    int mrcn_ev_probe_result(mrcn_ev_set *set, uint32_t ev, bint ok, double now,
                             int64_t successes_needed)
    int mrcn_ev_next_event(mrcn_ev_set *set, mrcn_ev_event *event)
    const char *mrcn_ev_state_name(mrcn_ev_state state)
    int mrcn_ev_set_select(mrcn_ev_set *set, int select)
    void mrcn_ev_reps_feedback(mrcn_ev_set *set, uint32_t ev, uint32_t penalty)
    uint32_t MRCN_EV_REPS_QUEUE_MAX

_EV_CAUSES = tuple(_EVCause)   # the C enum follows EVCause's declaration order
from agents.mrc.loss import LossCause as _LossCause
_LOSS_CAUSE_NAMES = tuple(c.value for c in _LossCause)   # mrcn_loss_cause follows LossCause's order
_EV_CAUSE_INDEX = {c: i for i, c in enumerate(_EV_CAUSES)}


def ev_next_state(state, cause):
    """The C transition table (agents.mrc.ev.next_state): EVStateError for an illegal pair."""
    cdef mrcn_ev_state nxt = 0
    if mrcn_ev_next_state(<mrcn_ev_state>int(state), _EV_CAUSE_INDEX[cause], &nxt) != MRCN_OK:
        raise _EVStateError(_EVState(state), cause)
    return _EVState(nxt)


cdef _ev_none(double x):
    """NaN is the C side's None (no RTT sample yet)."""
    return None if isnan(x) else x


cdef double _ev_nan(object x):
    return NAN if x is None else x


cdef int64_t _ev_id(object ev):
    """``ev`` as a C EV id (u32), or -1 when it cannot be one (then it is in no set)."""
    if isinstance(ev, int) and 0 <= ev <= 0xFFFFFFFF:
        return ev
    return -1


cdef dict _STATE_NAMES = {int(v): v.name for v in _EVState}


cdef mrcn_ev_info *_ev_rec(mrcn_ev_set *s, object ev):
    """The record of ``ev`` in ``s`` or NULL (the Python dict lookup)."""
    cdef int64_t i = _ev_id(ev)
    return NULL if i < 0 else mrcn_ev_get(s, <uint32_t>i)


cdef class EVInfoView:
    """One EV record of a native :class:`EVSet`, with the fields of agents.mrc.ev.EVInfo.

    Holds its set alive; records never move (they are allocated once by the set)."""

    cdef EVSet owner
    cdef mrcn_ev_info *p

    @property
    def ev(self):
        return self.p.ev

    @property
    def state(self):
        return _EVState(self.p.state)

    @property
    def skip_until(self):
        return self.p.skip_until

    @property
    def probe_ok(self):
        return self.p.probe_ok

    @property
    def probe_due(self):
        return self.p.probe_due

    @probe_due.setter
    def probe_due(self, double v):
        self.p.probe_due = v

    @property
    def probe_outstanding(self):
        """(probe_id, deadline_s) or None, as EVInfo.probe_outstanding."""
        if not self.p.probe_outstanding:
            return None
        return (self.p.probe_id, self.p.probe_deadline)

    @probe_outstanding.setter
    def probe_outstanding(self, v):
        if v is None:
            self.p.probe_outstanding = False
        else:
            self.p.probe_id, self.p.probe_deadline = v
            self.p.probe_outstanding = True

    @property
    def packets_sent(self):
        return self.p.seq

    @property
    def seq(self):
        return self.p.seq

    @seq.setter
    def seq(self, uint64_t v):
        self.p.seq = v

    @property
    def bytes_sent(self):
        return self.p.bytes_sent

    @bytes_sent.setter
    def bytes_sent(self, uint64_t v):
        self.p.bytes_sent = v

    @property
    def packets_acked(self):
        return self.p.packets_acked

    @packets_acked.setter
    def packets_acked(self, uint64_t v):
        self.p.packets_acked = v

    @property
    def packets_lost(self):
        return self.p.packets_lost

    @packets_lost.setter
    def packets_lost(self, uint64_t v):
        self.p.packets_lost = v

    @property
    def retransmits(self):
        return self.p.retransmits

    @retransmits.setter
    def retransmits(self, uint64_t v):
        self.p.retransmits = v

    @property
    def acked_seq(self):
        return self.p.acked_seq

    @acked_seq.setter
    def acked_seq(self, int64_t v):
        self.p.acked_seq = v

    @property
    def last_ack_s(self):
        return self.p.last_ack_s

    @last_ack_s.setter
    def last_ack_s(self, double v):
        self.p.last_ack_s = v

    @property
    def rtt_last_s(self):
        return _ev_none(self.p.rtt_last_s)

    @rtt_last_s.setter
    def rtt_last_s(self, v):
        self.p.rtt_last_s = _ev_nan(v)

    @property
    def rtt_min_s(self):
        return _ev_none(self.p.rtt_min_s)

    @rtt_min_s.setter
    def rtt_min_s(self, v):
        self.p.rtt_min_s = _ev_nan(v)

    @property
    def rtt_srtt_s(self):
        return _ev_none(self.p.rtt_srtt_s)

    @rtt_srtt_s.setter
    def rtt_srtt_s(self, v):
        self.p.rtt_srtt_s = _ev_nan(v)

    @property
    def rtt_samples(self):
        return self.p.rtt_samples

    @rtt_samples.setter
    def rtt_samples(self, uint64_t v):
        self.p.rtt_samples = v

    @property
    def probes_sent(self):
        return self.p.probes_sent

    @probes_sent.setter
    def probes_sent(self, uint64_t v):
        self.p.probes_sent = v

    @property
    def probes_ok_total(self):
        return self.p.probes_ok_total

    @property
    def delivered_ts_ns(self):
        return self.p.delivered_ts_ns

    @delivered_ts_ns.setter
    def delivered_ts_ns(self, uint64_t v):
        self.p.delivered_ts_ns = v

    @property
    def delivered_at_s(self):
        return self.p.delivered_at_s

    @delivered_at_s.setter
    def delivered_at_s(self, double v):
        self.p.delivered_at_s = v

    @property
    def loss_run(self):
        return self.p.loss_run

    @loss_run.setter
    def loss_run(self, uint64_t v):
        self.p.loss_run = v

    @property
    def loss_run_ts_ns(self):
        return self.p.loss_run_ts_ns

    @loss_run_ts_ns.setter
    def loss_run_ts_ns(self, uint64_t v):
        self.p.loss_run_ts_ns = v

    @property
    def loss_run_timeout(self):
        return bool(self.p.loss_run_timeout)

    @loss_run_timeout.setter
    def loss_run_timeout(self, bint v):
        self.p.loss_run_timeout = v

    @property
    def losses_excused(self):
        return self.p.losses_excused

    @losses_excused.setter
    def losses_excused(self, uint64_t v):
        self.p.losses_excused = v

    @property
    def losses_chargeable(self):
        return self.p.losses_chargeable

    @losses_chargeable.setter
    def losses_chargeable(self, uint64_t v):
        self.p.losses_chargeable = v

    @property
    def skip_picks(self):
        return self.p.skip_picks

    @property
    def always_skip(self):
        return bool(self.p.always_skip)

    @property
    def skips(self):
        return self.p.skips

    @property
    def drops_reported(self):
        return self.p.drops_reported

    @property
    def penalty(self):
        return self.p.penalty

    @penalty.setter
    def penalty(self, uint32_t v):
        self.p.penalty = v


cdef class EVInfoMap:
    """``EVSet.info``: EV id -> :class:`EVInfoView`, in the Python dict's order."""

    cdef EVSet owner

    cdef EVInfoView _view(self, uint32_t i):
        cdef EVInfoView v = EVInfoView.__new__(EVInfoView)
        v.owner = self.owner
        v.p = &self.owner.s.info[i]
        return v

    def get(self, ev, default=None):
        cdef mrcn_ev_info *p = _ev_rec(self.owner.s, ev)
        if p == NULL:
            return default
        return self._view(<uint32_t>(p - self.owner.s.info))

    def __getitem__(self, ev):
        v = self.get(ev)
        if v is None:
            raise KeyError(ev)
        return v

    def __contains__(self, ev):
        return self.get(ev) is not None

    def __len__(self):
        return self.owner.s.n_info

    def __iter__(self):
        return iter(self.keys())

    def keys(self):
        return [self.owner.s.info[i].ev for i in range(self.owner.s.n_info)]

    def values(self):
        return [self._view(i) for i in range(self.owner.s.n_info)]

    def items(self):
        return [(v.ev, v) for v in self.values()]


cdef class EVSet:
    """The C EV set: same constructor and methods as :class:`agents.mrc.ev.EVSet`, except:

    ``rng`` is a native :class:`Pcg32` (borrowed by the C set, kept alive here); the SKIP
    bound is the settable :attr:`srtt_s` (the QP's SRTT, None before a sample) instead of
    ``skip_timeout_fn``; ``capacity`` bounds the EV records (default: the EVs plus 64
    replacements), a replacement beyond it raises MemoryError."""

    cdef mrcn_ev_set *s
    cdef bint borrowed             # a QP's set (the QP frees it), see _core_qp.pxi
    cdef readonly Pcg32 rng
    cdef public object events
    cdef readonly EVInfoMap info

    def __init__(self, evs, *, qpn, Pcg32 rng, ev_min_active=1, skip_timeout_s=0.001,
                 initial_state=_EVState.GOOD, sink=None, event_mask=3, capacity=None,
                 select="rotation"):
        cdef list ev_list = list(evs)
        cdef Py_ssize_t n = len(ev_list)
        cdef uint32_t *buf
        cdef int rc
        if n == 0:
            raise ValueError("an EV set needs at least one EV")
        if len(set(ev_list)) != n:
            raise ValueError(f"duplicate EVs in {ev_list}")
        if not 0 <= ev_min_active <= n:
            raise ValueError(f"ev_min_active={ev_min_active} not in [0, {n}]")
        if event_mask & ~3:
            raise ValueError(f"event_mask {event_mask:#x}: only GOOD and ASSUMED_BAD (mrc_ctl.h)")
        if select not in _EV_SELECT:
            raise ValueError(f"select={select!r}: expected one of {', '.join(_EV_SELECT)}")
        cap = n + 64 if capacity is None else capacity
        buf = <uint32_t *>PyMem_Malloc(n * sizeof(uint32_t))
        if buf == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                buf[i] = ev_list[i]
            rc = mrcn_ev_set_create(&self.s, buf, <uint32_t>n, cap, qpn, &rng.rng,
                                    ev_min_active, skip_timeout_s, int(initial_state), event_mask)
        finally:
            PyMem_Free(buf)
        _ev_check(rc)
        _ev_check(mrcn_ev_set_select(self.s, _EV_SELECT.index(select)))
        self.rng = rng
        self.events = sink if sink is not None else []
        self.info = EVInfoMap.__new__(EVInfoMap)
        self.info.owner = self

    def __dealloc__(self):
        if not self.borrowed:
            mrcn_ev_set_destroy(self.s)

    cdef void _drain(self):
        cdef mrcn_ev_event e
        while mrcn_ev_next_event(self.s, &e):
            self.events.append(_EVEvent(e.time, self.s.qpn, e.ev, _EVState(e.old_state),
                                        _EVState(e.new_state), _EV_CAUSES[e.cause],
                                        e.drop_count,
                                        _LOSS_CAUSE_NAMES[e.loss_cause] if e.loss_cause >= 0 else None))

    @property
    def qpn(self):
        return self.s.qpn

    @property
    def ev_min_active(self):
        return self.s.ev_min_active

    @property
    def skip_timeout_s(self):
        return self.s.skip_timeout_s

    @property
    def srtt_s(self):
        """The QP's SRTT in seconds that bounds a SKIP (None: ``skip_timeout_s`` applies)."""
        return _ev_none(self.s.srtt_s)

    @srtt_s.setter
    def srtt_s(self, v):
        self.s.srtt_s = _ev_nan(v)

    @property
    def event_mask(self):
        return self.s.event_mask

    @event_mask.setter
    def event_mask(self, uint32_t v):
        self.s.event_mask = v

    @property
    def floor_held(self):
        return self.s.floor_held

    @property
    def all_good(self):
        return bool(self.s.all_good)

    @property
    def picks(self):
        """EVs handed out by pick/pick_many (the Python set's ``_picks``)."""
        return self.s.picks

    @property
    def select(self):
        return _EV_SELECT[self.s.select]

    @property
    def reps(self):
        return self.s.select == 1

    @property
    def reused(self):
        return self.s.reused

    @property
    def reuse(self):
        """REPS: the EVs queued for reuse, oldest first (the Python set's ``reuse`` deque)."""
        return [self.s.info[self.s.reuse[(self.s.reuse_head + k) % MRCN_EV_REPS_QUEUE_MAX]].ev
                for k in range(self.s.reuse_n)]

    def reps_feedback(self, ev, penalty):
        """agents.mrc.ev.EVSet.reps_feedback."""
        cdef int64_t i = _ev_id(ev)
        if i >= 0:
            mrcn_ev_reps_feedback(self.s, <uint32_t>i, penalty)

    @property
    def order(self):
        return [self.s.info[self.s.order[j]].ev for j in range(self.s.n)]

    @property
    def rotation(self):
        """(current rotation as EV ids, next position): the Python ``_rotation, _pos``."""
        return ([self.s.info[self.s.rotation[j]].ev for j in range(self.s.rot_len)],
                self.s.pos)

    def sample_rows(self):
        """agents.mrc.ev.EVSet.sample_rows, read straight off the C records (every agent's
        sample builds these for every EV of every QP)."""
        cdef list out = []
        cdef const mrcn_ev_info *p
        cdef uint32_t j
        for j in range(self.s.n):
            p = &self.s.info[self.s.order[j]]
            out.append({"ev_id": p.ev, "state": _STATE_NAMES[p.state], "sent": p.seq,
                        "lost": p.packets_lost, "rtx": p.retransmits, "skips": p.skips,
                        "charged": p.losses_chargeable})
        return out

    def usable_count(self):
        return mrcn_ev_usable_count(self.s)

    def skip_bound_s(self):
        return mrcn_ev_skip_bound_s(self.s)

    def replace(self, cur, new, now, state=_EVState.GOOD):
        """As EVSet.replace; OverflowError for a ``new`` that is not a u32 (Python takes any int)."""
        if state != _EVState.GOOD and state != _EVState.DENIED:
            raise ValueError(f"REPLACE_EV installs GOOD or DENIED, not {_EVState(state).name}")
        if _ev_id(cur) < 0:
            raise ValueError(f"EV {cur} is not in the EV set")
        rc = mrcn_ev_replace(self.s, cur, new, int(state), now)
        if rc == MRCN_EINVAL:
            if cur not in self.order:
                raise ValueError(f"EV {cur} is not in the EV set")
            raise ValueError(f"EV {new} is already in the EV set")
        _ev_check(rc)

    def apply(self, ev, cause, now, *, always=False, drop_count=None):
        cdef mrcn_ev_state new = 0
        cdef mrcn_ev_info *p = _ev_rec(self.s, ev)
        if p == NULL:
            raise KeyError(ev)
        rc = mrcn_ev_apply(self.s, ev, _EV_CAUSE_INDEX[cause], now, always,
                           drop_count is not None, 0 if drop_count is None else drop_count, &new)
        self._drain()
        if rc == MRCN_ESTATE:
            raise _EVStateError(_EVState(p.state), cause)
        _ev_check(rc)
        return _EVState(new)

    def set_state(self, ev, state, now):
        if state != _EVState.GOOD and state != _EVState.DENIED:
            raise ValueError(f"the controller may set GOOD or DENIED, not {_EVState(state).name}")
        if _ev_rec(self.s, ev) == NULL:
            raise KeyError(ev)
        rc = mrcn_ev_set_state(self.s, ev, int(state), now)
        self._drain()
        _ev_check(rc)

    def clear_always_skip(self, ev, now):
        if _ev_id(ev) >= 0:
            rc = mrcn_ev_clear_always_skip(self.s, ev, now)
            self._drain()
            _ev_check(rc)

    def expire_skips(self, now):
        rc = mrcn_ev_expire_skips(self.s, now)
        self._drain()
        _ev_check(rc)

    def skip_deadline(self):
        cdef double t
        return t if mrcn_ev_skip_deadline(self.s, &t) else None

    def pick(self, now, exclude=None, alive_since_ns=0):
        cdef uint32_t ev = 0
        cdef bint has = _ev_id(exclude) >= 0   # an exclude no EV can equal excludes nothing
        rc = mrcn_ev_pick(self.s, now, has, exclude if has else 0, alive_since_ns, &ev)
        self._drain()
        _ev_check(rc)
        return ev if rc == 1 else None

    def pick_many(self, now, n):
        cdef uint32_t *buf
        cdef int64_t k
        if n <= 0:
            return []
        buf = <uint32_t *>PyMem_Malloc(n * sizeof(uint32_t))
        if buf == NULL:
            raise MemoryError()
        try:
            k = mrcn_ev_pick_many(self.s, now, n, buf)
            self._drain()
            _ev_check(<int>k if k < 0 else 0)
            return [buf[j] for j in range(k)]
        finally:
            PyMem_Free(buf)

    def probe_targets(self):
        cdef uint32_t cnt = mrcn_ev_probe_targets(self.s, NULL, 0)
        cdef uint32_t *buf
        if cnt == 0:
            return []
        buf = <uint32_t *>PyMem_Malloc(cnt * sizeof(uint32_t))
        if buf == NULL:
            raise MemoryError()
        try:
            mrcn_ev_probe_targets(self.s, buf, cnt)
            return [self.info._view(buf[j]) for j in range(cnt)]
        finally:
            PyMem_Free(buf)

    def probe_result(self, ev, ok, now, successes_needed):
        if _ev_rec(self.s, ev) == NULL:
            raise KeyError(ev)
        rc = mrcn_ev_probe_result(self.s, ev, ok, now, successes_needed)
        self._drain()
        _ev_check(rc)

    def stats(self):
        """Per-EV snapshot, as agents.mrc.ev.EVSet.stats."""
        out = {}
        cdef mrcn_ev_info *i
        for j in range(self.s.n):
            i = &self.s.info[self.s.order[j]]
            out[i.ev] = {
                "state": mrcn_ev_state_name(i.state).decode(), "packets_sent": i.seq,
                "bytes_sent": i.bytes_sent, "packets_acked": i.packets_acked,
                "packets_lost": i.packets_lost, "retransmits": i.retransmits,
                "rtt_last_s": _ev_none(i.rtt_last_s), "rtt_min_s": _ev_none(i.rtt_min_s),
                "rtt_samples": i.rtt_samples, "probes_sent": i.probes_sent,
                "probes_ok": i.probes_ok_total, "losses_excused": i.losses_excused,
                "losses_chargeable": i.losses_chargeable, "skips": i.skips,
            }
        return out


cdef _ev_check(int rc):
    """Raise for a negative status the methods above did not map themselves."""
    if rc >= 0:
        return
    msg = mrcn_strerror(rc).decode()
    if rc == MRCN_ENOMEM or rc == MRCN_ENOSPC:
        raise MemoryError(f"EV set: {msg}")
    if rc == MRCN_EINVAL:
        raise ValueError(f"EV set: {msg}")
    raise RuntimeError(f"EV set: {msg}")
