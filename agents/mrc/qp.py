"""The MRC queue pair, sans-I/O (aioquic style): no sockets, no clock, no global RNG.

One module on purpose (over ~400 lines): the QP's state machine and its dispatch; loss detection,
probes, reverse EVs, the halves and CC live in their own modules.

A QP owns both halves, like a verbs RC QP: its :class:`Requester` (posted writes go
out, see :mod:`agents.mrc.requester`) and its :class:`Responder` (the peer's writes
land in the registered memory region, see :mod:`agents.mrc.responder`), as aioquic's
connection owns its loss recovery. The QP keeps the state machine and what both halves
share (the event queue, the congestion controller, the RTT estimator, the EV set), hands
each datagram to the half it is for, and sets the halves' inputs at each transition.

Driving it::

    qp.receive_datagram(data, now)        # every datagram for this QPN
    qp.receive_datagrams([data, ...], now)  # or a batch of them, same result
    qp.handle_timer(now)                  # when now >= qp.get_timer()
    for data, ev in qp.datagrams_to_send(now): send data on EV ev
    while (event := qp.next_event()) is not None: ...

``now`` is seconds (float) on any monotonic clock; ``get_timer()`` returns an
absolute deadline on that clock, or None. Events: :class:`WorkCompletion`,
:class:`agents.mrc.ev.EVEvent`, :class:`QPError`.

States (mrc.h): RST -> INIT -> RTR -> RTS, any -> ERR, ERR/any -> RST via
:meth:`QP.modify_qp`; the attributes each step takes follow the table in
mrc.h's ``enum mrc_qp_attr_mask`` comment (INIT: EV profile; RTR: responder
``mpr_dest``/``max_wimm_dest``, the peer's QPN and verbs' ``rq_psn``; RTS: ``mpr``,
``max_wimm``, ``timeout``, retry counts and verbs' ``sq_psn``: :data:`PSN_ATTRS`). Timeout mapping: see
:class:`agents.mrc.types.QPConfig`.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from collections import deque
from typing import Iterable

from . import cc as cc_mod
from . import packet as pk
from .dcqcn import CnpPacer
from .ev import EVSet, EVState
from .requester import Requester
from .responder import Responder
from .rng import Pcg32
from .rto import RttEstimator, mrc_timeout_s
from .types import (QPAttr, QPConfig, QPError, QPState, QPStateError, Transport)

log = logging.getLogger(__name__)

S = QPState
_RTS, _RTR = QPState.RTS, QPState.RTR
_DATA, _SACK = int(pk.PacketType.DATA), int(pk.PacketType.SACK)
TRANSITIONS: dict[tuple[QPState, QPState], frozenset[str]] = {
    (S.RST, S.INIT): frozenset({"evs", "ev_min_active", "ev_profile", "reverse_evs"}),
    (S.INIT, S.RTR): frozenset({"dest_qpn", "mpr_dest", "max_wimm_dest", "rq_psn"}),
    (S.RTR, S.RTS): frozenset({"mpr", "max_wimm", "timeout", "retry_linear_cnt",
                               "retry_exp_cnt", "sq_psn"}),
    (S.RTS, S.RTS): frozenset({"mpr", "max_wimm", "timeout", "retry_linear_cnt",
                               "retry_exp_cnt"}),
}
"""(from, to) -> attributes that step may set. Any state may go to ERR or RST."""
REQUIRED = {(S.INIT, S.RTR): {"dest_qpn"}}
PSN_ATTRS = ("rq_psn", "sq_psn")
"""``struct ibv_qp_attr``'s ``rq_psn`` (``IBV_QP_RQ_PSN``, at RTR: the first PSN the responder
expects) and ``sq_psn`` (``IBV_QP_SQ_PSN``, at RTS: the first PSN the requester sends), which
mrc.h's ``mrc_modify_qp`` takes with the other verbs attributes (it does not list them as
unsupported). Default 0. PSNs never wrap (:mod:`agents.mrc.packet`): a QP started at ``sq_psn``
can send up to ``MAX_PSN - 1``, then ``post_write`` raises "PSN space exhausted"."""
_ATTR_FIELDS = {f.name for f in dataclasses.fields(QPAttr)}


class QP:
    """One MRC (or RC baseline) queue pair.

    ``qpn``: this QP's number (u32). ``rng``: the EV rotation's generator, a seeded
    :class:`agents.mrc.rng.Pcg32`; a seeded ``random.Random`` is accepted and seeds one
    (:meth:`Pcg32.from_random`), so that a job spec's seed still decides the run.
    ``memory``: the registered memory region the peer writes
    into (a writable buffer: bytearray, numpy uint8 array, mmap), or None for
    a send-only QP. ``config``: emulation parameters (:class:`QPConfig`).
    Raises ValueError for a bad config.
    """

    def __init__(self, qpn: int, *, rng: Pcg32 | random.Random, memory=None,
                 config: QPConfig | None = None):
        if not 0 <= qpn <= 0xFFFFFFFF:
            raise ValueError(f"qpn {qpn} is not a u32")
        if isinstance(rng, random.Random):
            rng = Pcg32.from_random(rng)
        elif not isinstance(rng, Pcg32):
            raise ValueError("rng must be a seeded agents.mrc.rng.Pcg32 or random.Random")
        self.qpn = qpn
        self.rng = rng
        self.config = config or QPConfig()
        self.config.validate()
        self.transport = Transport(self.config.transport)
        self.state = QPState.RST
        self.attr = QPAttr()
        self.dest_qpn = 0
        self.evs: EVSet | None = None
        self._events: deque = deque()
        self._bad_packets = 0
        self.cc = cc_mod.create(self.config.cc, mss_bytes=self.config.payload_bytes,
                                **self.config.cc_params)
        # A rate-based controller paces sends; window controllers skip the pacing path.
        self._paced = type(self.cc).next_send_time is not cc_mod.CongestionControl.next_send_time
        self._build(memory)

    def _build(self, memory) -> None:
        """Fresh halves and RTT estimator (construction and RST; the controller stays)."""
        cfg = self.config
        self._rtt = RttEstimator(self._rto_floor_s(), cfg.initial_rto_s)
        self.requester = Requester(qpn=self.qpn, config=cfg, transport=self.transport, cc=self.cc,
                                   rtt=self._rtt, events=self._events, on_error=self._enter_error)
        self.responder = Responder(qpn=self.qpn, config=cfg, transport=self.transport,
                                   events=self._events, memory=memory)
        self._cnp = CnpPacer(cfg.cnp_interval_s) if cfg.cnp_interval_s > 0 else None
        self._cnp_out: list[tuple[bytes, int]] = []
        self._pace_at: float | None = None
        self.cnp_received = 0

    # ---- state machine ---------------------------------------------------
    @property
    def rto_s(self) -> float:
        """Current retransmission timeout in seconds (before the per-PSN retry back-off).

        RFC 6298: ``max(SRTT + 4 * RTTVAR, floor)``, where the floor is the
        mrc.h mapping ``max(time_scale * 1.024e-6 * 2**timeout, min_rto_s)``
        (OCP MRC 1.0, mrc.h: local ACK timeout = 1.024 us * 2**timeout);
        before the first RTT sample it is ``max(floor, initial_rto_s)``. See :mod:`agents.mrc.rto`.
        """
        return self._rtt.rto_s

    @property
    def srtt_s(self) -> float | None:
        """RFC 6298 smoothed RTT of the data path in seconds (None before the first SACK)."""
        return self._rtt.srtt_s

    def _skip_timeout_s(self) -> float | None:
        """The SKIP bound: one SRTT (None before the first sample; see agents.mrc.ev)."""
        return self._rtt.srtt_s

    def _rto_floor_s(self) -> float:
        return mrc_timeout_s(self.attr.timeout, self.config.time_scale, self.config.min_rto_s)

    def _update_rto(self) -> None:
        self._rtt.set_floor(self._rto_floor_s())

    def modify_qp(self, state: QPState, now: float = 0.0, **attrs) -> None:
        """Move to ``state`` setting ``attrs`` (like mrc_modify_qp).

        INIT takes ``evs`` (EV ids) or ``ev_profile``, ``ev_min_active`` and ``reverse_evs``
        (the EVs its SACKs/NACKs rotate over, default ``evs``); RTR takes
        ``dest_qpn``, ``mpr_dest``, ``max_wimm_dest``, ``rq_psn``; RTS takes ``mpr``,
        ``max_wimm``, ``timeout``, ``retry_linear_cnt``, ``retry_exp_cnt`` and, from RTR only,
        ``sq_psn`` (:data:`PSN_ATTRS`).
        The requester must not be given an ``mpr`` above the peer's
        ``mpr_dest``. Raises QPStateError for an illegal transition, ValueError
        for an attribute the step does not take or out of range, or for a
        ``timeout`` whose RTO floor is too short for ``config.ack_delay_s``
        (:meth:`agents.mrc.types.QPConfig.check_ack_delay`).
        """
        state = QPState(state)
        if state is QPState.ERR:
            self._enter_error(now, "moved to ERR by the application")
            return
        if state is QPState.RST:
            self._reset()
            return
        key = (self.state, state)
        allowed = TRANSITIONS.get(key)
        if allowed is None:
            raise QPStateError(f"QP {self.qpn}: no transition {self.state.name} -> {state.name}")
        unknown = set(attrs) - allowed
        if unknown:
            raise ValueError(f"{self.state.name} -> {state.name} does not take {sorted(unknown)}")
        missing = REQUIRED.get(key, set()) - set(attrs)
        if missing:
            raise ValueError(f"{self.state.name} -> {state.name} needs {sorted(missing)}")
        for name in PSN_ATTRS:
            psn = attrs.get(name, 0)
            if type(psn) is not int or not 0 <= psn <= pk.MAX_PSN:
                raise ValueError(f"{name}={psn!r} is not a PSN (0..{pk.MAX_PSN})")
        if state is QPState.INIT:
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
            if self.transport is Transport.RC:
                evs = evs[:1]
            floor = attrs.get("ev_min_active", self.config.ev_min_active)
            # validated before anything is built: a failed INIT leaves the QP as it was (RST,
            # no EV set, not attached to the profile), so that INIT can be tried again
            reverse = list(attrs.get("reverse_evs", evs))
            if not reverse or not set(reverse) <= set(attrs["evs"]):
                raise ValueError(f"reverse_evs {reverse} must be a non-empty subset of the QP's EVs")
            self.evs = self.requester.evs = EVSet(evs, qpn=self.qpn, rng=self.rng,
                                                  ev_min_active=min(floor, len(evs)),
                                                  skip_timeout_s=self.config.skip_timeout_s,
                                                  skip_timeout_fn=self._skip_timeout_s,
                                                  event_mask=self.config.ev_event_mask
                                                  if profile is None else profile.ev_event_mask,
                                                  sink=self._events, select=self.config.ev_select)
            if profile is not None:
                profile.attach(self)
                # the controller's DENIED (MODIFY_EV_STATE, REPLACE_EV) holds for a QP that
                # attaches after it was set, as for those attached then
                for ev in profile.denied_vals():
                    self.evs.set_state(ev, EVState.DENIED, now)
            self.responder.reverse.evs = reverse[:1] if self.transport is Transport.RC else reverse
        elif state is QPState.RTR:
            dest_qpn = int(attrs["dest_qpn"])
            if not 0 <= dest_qpn <= 0xFFFFFFFF:
                raise ValueError("dest_qpn is not a u32")
            self.dest_qpn = self.requester.dest_qpn = self.responder.dest_qpn = dest_qpn
        new_attr = dataclasses.replace(self.attr, **{k: v for k, v in attrs.items()
                                                     if k in _ATTR_FIELDS})
        new_attr.validate()
        if state is QPState.RTS:
            floor = mrc_timeout_s(new_attr.timeout, self.config.time_scale, self.config.min_rto_s)
            self.config.check_ack_delay(floor, f"the RTO floor of timeout {new_attr.timeout}")
        self.attr = self.requester.attr = new_attr
        self.responder.mpr_dest = new_attr.mpr_dest
        self.responder.max_wimm_dest = new_attr.max_wimm_dest
        if "rq_psn" in attrs:
            self.responder.rx_cum_psn = attrs["rq_psn"]
        if "sq_psn" in attrs:
            self.requester.start_at(attrs["sq_psn"])
        self._update_rto()
        self.state = state

    def _reset(self) -> None:
        memory = self.responder.memory
        self.state = QPState.RST
        self.attr = QPAttr()
        self.dest_qpn = 0
        self.evs = None
        self._events.clear()
        self._build(memory)

    def _enter_error(self, now: float, reason: str) -> None:
        if self.state is QPState.ERR:
            return
        log.warning("qpn %d -> ERR: %s", self.qpn, reason)
        self.state = QPState.ERR
        self._events.append(QPError(now, self.qpn, reason))
        self.requester.flush_writes(now)
        self.responder.stop(now)
        self._cnp_out.clear()
        self._pace_at = None

    # ---- API ---------------------------------------------------------------
    def post_write(self, *, wr_id: int, local, remote_offset: int, imm: int | None = None) -> None:
        """Post an RDMA WRITE (``imm`` None) or WRITE_WITH_IMM of ``local`` to ``remote_offset``.

        ``local``: bytes-like (bytes, bytearray, memoryview, numpy uint8); it
        is referenced, not copied, until the write completes. ``imm``: u32.
        Raises QPStateError unless the QP is in RTS, ValueError for bad args.
        """
        if self.state is not QPState.RTS:
            raise QPStateError(f"QP {self.qpn}: post_write needs RTS, state is {self.state.name}")
        if remote_offset < 0:
            raise ValueError("remote_offset must be >= 0")
        if imm is not None and not 0 <= imm <= 0xFFFFFFFF:
            raise ValueError("imm must be a u32")
        data = memoryview(local).cast("B") if not isinstance(local, memoryview) or \
            local.format != "B" or local.ndim != 1 else local
        self.requester.post(wr_id, data, remote_offset, imm)

    def post_recv(self, wr_id: int) -> None:
        """Post a receive for one incoming WRITE_WITH_IMM (mrc.h ``mrc_post_recv``, like
        ``ibv_post_recv``): its completion (RECV_RDMA_WITH_IMM) carries ``wr_id``. Post them
        up front: a WRITE_WITH_IMM arriving with none posted is NACKed NO_PKT_BUFFER and
        retried by the requester's timer (:mod:`agents.mrc.responder`). QPStateError in RST
        or ERR, ValueError for a ``wr_id`` that is not a u64."""
        if self.state is QPState.RST or self.state is QPState.ERR:
            raise QPStateError(f"QP {self.qpn}: post_recv needs INIT, RTR or RTS, state is "
                               f"{self.state.name}")
        if not isinstance(wr_id, int) or not 0 <= wr_id < 2**64:
            raise ValueError(f"wr_id {wr_id!r} is not a u64")
        self.responder.post_recv(wr_id)

    def receive_datagram(self, data: bytes, now: float, *, ecn: bool = False) -> None:
        """Process one datagram addressed to this QP.

        ``ecn``: the IP header carried CE (if the I/O layer can see it).
        Malformed datagrams (ProtocolError) are counted in ``bad_packets``
        and dropped: a corrupt packet from the fabric must not crash a job.
        """
        state = self.state
        if state is not _RTS and state is not _RTR:
            return
        try:
            ptype = data[1] if len(data) > 1 else 0
            if ptype == _DATA:
                self.responder.on_data(data, now, ecn)
                if ecn and self._cnp is not None:
                    self._on_ce(data, now)
            elif ptype == _SACK:
                if state is _RTS:
                    self.requester.on_sack(pk.unpack_sack(data), now)
            else:
                pkt = pk.parse(data)
                if pkt.dest_qpn != self.qpn:
                    self._bad_packets += 1
                elif isinstance(pkt, pk.ProbePacket):
                    if pkt.response:
                        self.requester.probes.on_response(pkt, now)
                    else:
                        self.responder.on_probe_req(pkt)
                elif isinstance(pkt, pk.NackPacket) and state is _RTS:
                    self.requester.on_nack(pkt, now)
                elif isinstance(pkt, pk.CnpPacket) and state is _RTS:
                    self.cnp_received += 1
                    self.cc.on_cnp(now=now)
        except pk.ProtocolError as exc:
            self._bad_packets += 1
            log.debug("qpn %d: dropped bad datagram: %s", self.qpn, exc)

    def _on_ce(self, data: bytes, now: float) -> None:
        """DCQCN's notification point: a valid CE-marked data packet for this QP arrived; send a
        CNP back on its EV unless one went within ``config.cnp_interval_s``
        (:class:`agents.mrc.dcqcn.CnpPacer`)."""
        if pk.peek_dest_qpn(data) != self.qpn or not self._cnp.on_ce(now):
            return
        psn, ev = int.from_bytes(data[8:12], "big"), int.from_bytes(data[12:16], "big")
        self._cnp_out.append((pk.encode_cnp(self.dest_qpn, ev, psn), ev))

    def receive_datagrams(self, datagrams, now: float, ce=None) -> None:
        """Process ``datagrams`` (bytes, in arrival order) as :meth:`receive_datagram` would one by
        one: the I/O adapter's entry point for a batch read from one socket (the responder's
        fast path for in-order data, :meth:`Responder.receive_batch`). ``ce``: None, or one
        bool per datagram, its ``ecn`` (the IP header carried CE)."""
        state = self.state
        if self.responder.memory is None or (state is not _RTS and state is not _RTR):
            for i, data in enumerate(datagrams):
                self.receive_datagram(data, now, ecn=ce is not None and ce[i])
            return
        self.responder.receive_batch(datagrams, now, self._receive_in_batch, ce)

    def _receive_in_batch(self, data: bytes, now: float, ecn: bool = False) -> bool:
        """:meth:`receive_datagram`; False once the QP has left the state it was in."""
        state = self.state
        self.receive_datagram(data, now, ecn=ecn)
        return self.state is state

    def handle_timer(self, now: float) -> None:
        """Run every timer due at ``now``: retransmission, delayed SACK, probes, SKIP expiry."""
        if self.state in (QPState.RST, QPState.INIT, QPState.ERR):
            return
        self.responder.on_timer(now)
        if self.state is QPState.RTS:
            self.requester.on_timer(now)
            if self.state is QPState.RTS:
                self.requester.probes.on_timer(now)
                self.evs.expire_skips(now)

    def get_timer(self) -> float | None:
        """Earliest absolute deadline (seconds) at which handle_timer must run, or None; with a
        paced controller (DCQCN) also the time its next packet may leave (then
        :meth:`datagrams_to_send` has it)."""
        if self.state in (QPState.RST, QPState.INIT, QPState.ERR):
            return None
        t = self.responder.deadline
        if self.state is QPState.RTS:
            times = [self.requester.deadline()]
            if not self.evs.all_good:
                times.append(self.requester.probes.deadline())
                times.extend(i.skip_until for i in self.evs.info.values()
                             if i.state is EVState.SKIP)
            if self._pace_at is not None:
                times.append(self._pace_at)
            for d in times:
                if d is not None and (t is None or d < t):
                    t = d
        return t

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, int]]:
        """Datagrams to put on the wire now, as (bytes, EV id) pairs."""
        out = self.responder.take_output()
        if self._cnp_out:
            out += self._cnp_out
            self._cnp_out = []
        if self.state is QPState.RTS:
            self.requester.probes.send(now, out)
            if self._paced:
                self._send_paced(now, out)
            else:
                self.requester.send_data(now, out)
        return out

    def _send_paced(self, now: float, out: list) -> None:
        """Data one packet at a time while the controller's pacing allows
        (:meth:`agents.mrc.cc.CongestionControl.next_send_time`); when it holds a packet
        back, its time becomes a deadline of :meth:`get_timer`."""
        req, cc, size, burst = self.requester, self.cc, self.config.payload_bytes, \
            self.config.max_burst
        self._pace_at = None
        while len(out) < burst:
            t = cc.next_send_time(now=now, size_bytes=size)
            if t > now:
                if not req.idle:
                    self._pace_at = t
                return
            n = len(out)
            req.send_data(now, out, limit=1)
            if len(out) == n:                     # nothing to send, or window/EVs hold it
                return

    def next_event(self):
        """Pop the next event (WorkCompletion, EVEvent, QPError) or None."""
        return self._events.popleft() if self._events else None

    def set_ev_state(self, ev: int, state: EVState, now: float) -> None:
        """Controller call (mrc_ctl MODIFY_EV_STATE): set EV ``ev`` to GOOD or DENIED."""
        if self.evs is None:
            raise QPStateError("the QP has no EV profile before INIT")
        self.evs.set_state(ev, state, now)

    def replace_ev(self, cur: int, new: int, now: float, state: EVState = EVState.GOOD) -> None:
        """Controller call (mrc_ctl REPLACE_EV, through the QP's profile): EV ``new`` takes
        ``cur``'s slot in ``state``, GOOD or DENIED (:meth:`agents.mrc.ev.EVSet.replace`). The
        I/O layer must route ``new``."""
        if self.evs is None:
            raise QPStateError("the QP has no EV profile before INIT")
        self.evs.replace(cur, new, now, state)

    @property
    def idle(self) -> bool:
        """True when no write is pending and nothing is in flight."""
        return self.requester.idle

    # ---- counters (the halves own them) ---------------------------------------
    @property
    def bad_packets(self) -> int:
        """Malformed or misaddressed datagrams dropped (by the QP or either half)."""
        return self._bad_packets + self.requester.bad_packets + self.responder.bad_packets

    @property
    def probe_timeout_s(self) -> float:
        """Seconds a probe may take (:attr:`agents.mrc.probes.EVProber.probe_timeout_s`)."""
        return self.requester.probes.probe_timeout_s

    def stats(self) -> dict:
        """A JSON-ready snapshot of counters (see agents.mrc module docstring)."""
        return {
            "qpn": self.qpn, "state": self.state.name, "transport": self.transport.value,
            "rto_s": self.rto_s, "rttvar_s": self._rtt.rttvar_s, **self.requester.counters(),
            "cwnd_bytes": self.cc.cwnd_bytes, "srtt_s": self.srtt_s, **self.responder.counters(),
            "bad_packets": self.bad_packets,
            "ev_floor_held": self.evs.floor_held if self.evs else 0,
            "ev_skips": dict(self.requester.ev_skips),
            "evs": self.evs.stats() if self.evs else {},
            "cc": {"name": self.cc.name, **(self.cc.counters() if hasattr(self.cc, "counters") else {})},
            "cnp_sent": self._cnp.sent if self._cnp is not None else 0,
            "cnp_received": self.cnp_received,
        }


def bring_up(qp: QP, now: float, *, evs: Iterable[int] | None = None, dest_qpn: int,
             attr: QPAttr | None = None, ev_min_active: int | None = None, ev_profile=None,
             reverse_evs: Iterable[int] | None = None, rq_psn: int | None = None,
             sq_psn: int | None = None) -> None:
    """Take a fresh ``qp`` through RESET -> INIT -> RTR -> RTS (``mrc_modify_qp``'s sequence).

    ``evs``: the EV ids it sprays over (INIT); ``dest_qpn``: the peer's QPN (RTR);
    ``attr``: the mrc.h attributes (default QPAttr()), the requester's ``mpr`` capped at
    the peer's ``mpr_dest``; ``ev_min_active``: the floor of usable EVs (default: the
    QP's); ``ev_profile``: an ONLINE :class:`agents.mrc.profiles.EVProfile` to take the EVs,
    floor and event mask from instead of ``evs`` (the QP attaches to it); ``rq_psn`` (RTR) and
    ``sq_psn`` (RTS): the first PSNs received and sent (:data:`PSN_ATTRS`; not passed when
    None). Raises ValueError for attributes :meth:`QP.modify_qp` rejects.
    """
    attr = attr or QPAttr()
    init = {"evs": list(evs)} if ev_profile is None else {"ev_profile": ev_profile}
    if ev_min_active is not None:
        init["ev_min_active"] = ev_min_active
    if reverse_evs is not None:
        init["reverse_evs"] = list(reverse_evs)
    qp.modify_qp(QPState.INIT, now, **init)
    rtr = {} if rq_psn is None else {"rq_psn": rq_psn}
    rts = {} if sq_psn is None else {"sq_psn": sq_psn}
    qp.modify_qp(QPState.RTR, now, dest_qpn=dest_qpn, mpr_dest=attr.mpr_dest,
                 max_wimm_dest=attr.max_wimm_dest, **rtr)
    qp.modify_qp(QPState.RTS, now, mpr=min(attr.mpr, attr.mpr_dest), max_wimm=attr.max_wimm,
                 timeout=attr.timeout, retry_linear_cnt=attr.retry_linear_cnt,
                 retry_exp_cnt=attr.retry_exp_cnt, **rts)


def connect_pair(a: QP, b: QP, evs: Iterable[int], *, attr: QPAttr | None = None,
                 ev_min_active: int | None = None, now: float = 0.0,
                 first_psns: tuple[int, int] | None = None) -> None:
    """Bring two fresh QPs to RTS connected to each other, both using EV ids ``evs``
    (:func:`bring_up` on each, with the other's QPN).

    ``attr``: the mrc.h attributes for both sides (default QPAttr()); each
    requester's ``mpr`` is capped at the peer's ``mpr_dest``. ``first_psns``: the first PSN
    ``a`` sends and the first ``b`` sends (each the sender's ``sq_psn`` and the receiver's
    ``rq_psn``, :data:`PSN_ATTRS`); None: neither is set (both 0).
    """
    evs = list(evs)
    for i, (qp, peer) in enumerate(((a, b), (b, a))):
        psns = {} if first_psns is None else {"sq_psn": first_psns[i],
                                              "rq_psn": first_psns[1 - i]}
        bring_up(qp, now, evs=evs, dest_qpn=peer.qpn, attr=attr, ev_min_active=ev_min_active,
                 **psns)
