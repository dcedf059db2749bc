"""Requester half of a QP: packetise writes, spray over EVs, detect loss, retransmit.

One module on purpose (over ~400 lines): the send path of one class (packetise, spray,
retransmit); loss detection and probes are :mod:`.loss` and :mod:`.probes`.

A :class:`Requester` is owned by its :class:`agents.mrc.qp.QP`. Inputs: posted writes
(``post``), the SACKs, NACKs and probe responses the QP hands it, its clock, and what the
QP's state machine sets (``evs`` at INIT, ``dest_qpn`` at RTR, ``attr`` at RTS); it shares
the QP's congestion controller and RTT estimator. Outputs: datagrams appended to the
list given to ``send_probes``/``send_data``, WorkCompletions and EV events into the QP's
event queue, ``deadline()``, and ``on_error(now, reason)`` when retries are exhausted (the
QP enters ERR). Loss detection (per-EV threshold, cross-EV out-of-order scan, RTO and retry
ladder) is its :class:`agents.mrc.loss.LossDetector` (``loss``); background EV probes its
:class:`agents.mrc.probes.EVProber` (``probes``). Lost PSNs are retransmitted oldest first,
on a different EV. In RC mode a loss (timeout or SEQ_ERR NACK) rewinds to the lost PSN:
go-back-N. Every retransmission but a trim's spends one of the PSN's mrc.h retries
(:data:`agents.mrc.loss.RETRY_SPENT`); when they run out the QP enters ERR. Data packets
are encoded by :func:`agents.mrc.packet.encode_data_parts`.
"""
from __future__ import annotations

import heapq
import logging
from collections import deque

from . import packet as pk
from .cc import CongestionControl
from .ev import EVCause, EVSet, EVState
from .reps import REPS_ECN_PENALTY, REPS_NACK_PENALTY
from .loss import CHARGED, LossCause, LossDetector
from .probes import EVProber
from .types import QPAttr, Transport, WCOpcode, WCStatus, WorkCompletion

log = logging.getLogger(__name__)

_OP_FIRST, _OP_MIDDLE, _OP_LAST, _OP_LAST_IMM, _OP_ONLY, _OP_ONLY_IMM = (
    int(pk.Opcode.WRITE_FIRST), int(pk.Opcode.WRITE_MIDDLE), int(pk.Opcode.WRITE_LAST),
    int(pk.Opcode.WRITE_LAST_WITH_IMM), int(pk.Opcode.WRITE_ONLY), int(pk.Opcode.WRITE_ONLY_WITH_IMM))
_encode = pk.encode_data_parts
_INF = float("inf")


class _WR:
    __slots__ = ("wr_id", "data", "remote_offset", "imm", "first_psn", "last_psn",
                 "size", "next_pos")

    def __init__(self, wr_id, data, remote_offset, imm, first_psn, last_psn):
        self.wr_id = wr_id
        self.data = data
        self.remote_offset = remote_offset
        self.imm = imm
        self.first_psn = first_psn
        self.last_psn = last_psn
        self.size = len(data)
        self.next_pos = 0


class _Tx:
    """The latest transmission of one PSN."""

    __slots__ = ("psn", "wr", "pos", "length", "opcode", "ev", "ev_seq", "ts_ns",
                 "sent_at", "timeouts", "loss_retries", "rtx_count", "lost", "gseq")

    def __init__(self, psn, wr, pos, length, opcode, ev, ev_seq, ts_ns, sent_at, gseq=-1):
        self.psn = psn
        self.wr = wr
        self.pos = pos
        self.length = length
        self.opcode = opcode
        self.ev = ev
        self.ev_seq = ev_seq
        self.ts_ns = ts_ns
        self.sent_at = sent_at
        self.timeouts = 0
        self.loss_retries = 0   # retries spent on loss evidence (loss.RETRY_SPENT)
        self.rtx_count = 0
        self.lost = False
        self.gseq = gseq      # QP-wide transmission counter (send order over all EVs)


class Requester:
    """Requester state and logic (see module docstring).

    ``qpn``, ``config`` (:class:`QPConfig`), ``transport``: the QP's; ``cc``: its congestion
    controller; ``rtt``: its :class:`agents.mrc.rto.RttEstimator`; ``events``: its event
    queue; ``on_error(now, reason)``: called when a write's retries are exhausted.
    """

    def __init__(self, *, qpn: int, config, transport: Transport, cc, rtt, events, on_error):
        self.qpn, self.config, self.transport = qpn, config, transport
        self.cc, self._rtt, self._events, self.on_error = cc, rtt, events, on_error
        self._cc_sent = None if type(cc).on_packet_sent is CongestionControl.on_packet_sent \
            else cc.on_packet_sent
        self._dest_qpn = 0
        self._evs: EVSet | None = None
        self._attr = QPAttr()
        self.bad_packets = 0
        self.failed = False                     # flushed: the QP is in ERR
        self._wrs: deque[_WR] = deque()         # posted, not yet completed (in order)
        self._unsent: deque[_WR] = deque()      # WRs with packets not yet sent once
        self._psn_assign = 0                    # next PSN handed to a posted WR
        self._next_psn = 0                      # next PSN sent for the first time
        self._snd_una = 0                       # lowest PSN not acknowledged
        self._outstanding: dict[int, _Tx] = {}
        self._rtx: list[int] = []               # heap of lost PSNs awaiting retransmit
        self._gseq = 0                          # QP-wide transmission counter (send order)
        self._inflight_bytes = 0
        self._wimm_inflight = 0
        self._last_ts_ns = 0
        self.loss = LossDetector(qpn=qpn, config=config, transport=transport, rtt=rtt, cc=cc,
                                 outstanding=self._outstanding, on_lost=self._declare_lost,
                                 go_back_n=self._go_back_n, on_error=on_error)
        self.probes = EVProber(config=config, rtt=rtt, stamp=self._stamp,
                               rtt_sample=self.loss.rtt_sample)
        self.tx_packets = 0
        self.tx_bytes = 0
        self.rtx_packets = 0
        self.rtx_bytes = 0
        self.lost_packets = 0
        self.acked_bytes = 0
        # SKIPs by cause; trim_lasthop counts last-hop trims, which by rule skip nothing
        self.ev_skips = {"ecn": 0, "trim": 0, "trim_lasthop": 0}
        self.nacks_no_buffer = 0

    def counters(self) -> dict:
        """The requester's items of :meth:`agents.mrc.qp.QP.stats`."""
        return {"tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
                "retransmissions": self.rtx_packets, "retransmitted_bytes": self.rtx_bytes,
                "timeouts": self.loss.timeouts, "loss_retries": self.loss.loss_retries,
                "no_path_timeouts": self.loss.no_path_timeouts,
                "ev_losses_stalled": self.loss.ev_losses_stalled,
                "ev_losses_confirmed": self.loss.ev_losses_confirmed,
                "ev_losses_live": self.loss.ev_losses_live,
                "lost_packets": self.lost_packets, "acked_bytes": self.acked_bytes,
                "nacks_no_buffer": self.nacks_no_buffer,
                "inflight_bytes": self._inflight_bytes, "snd_una": self._snd_una,
                "next_psn": self._next_psn}

    # ---- what the QP's state machine sets (shared with the loss detector and the prober) ----
    @property
    def evs(self) -> EVSet | None:
        return self._evs

    @evs.setter
    def evs(self, evs: EVSet) -> None:
        self._evs = self.loss.evs = self.probes.evs = evs

    @property
    def attr(self) -> QPAttr:
        return self._attr

    @attr.setter
    def attr(self, attr: QPAttr) -> None:
        self._attr = self.loss.attr = attr

    @property
    def dest_qpn(self) -> int:
        return self._dest_qpn

    @dest_qpn.setter
    def dest_qpn(self, qpn: int) -> None:
        self._dest_qpn = self.probes.dest_qpn = qpn

    def deadline(self) -> float | None:
        """The earliest retransmission deadline (:meth:`LossDetector.deadline`)."""
        return self.loss.deadline()

    def on_timer(self, now: float) -> None:
        """Fire the due retransmission timers (:meth:`LossDetector.on_timer`)."""
        self.loss.on_timer(now)

    @property
    def idle(self) -> bool:
        """No posted write is waiting for its completion."""
        return not self._wrs

    def start_at(self, psn: int) -> None:
        """The first PSN to send (``sq_psn``, set at RTR -> RTS before anything is posted)."""
        if self._wrs or self._outstanding:
            raise ValueError("sq_psn is set before the first write")
        self._psn_assign = self._next_psn = self._snd_una = psn

    # ---- posting ---------------------------------------------------------
    def post(self, wr_id, data: memoryview, remote_offset: int, imm: int | None) -> None:
        npkts = max(1, -(-len(data) // self.config.payload_bytes))
        first = self._psn_assign
        if first + npkts > pk.MAX_PSN:
            raise ValueError("PSN space exhausted on this QP")
        self._psn_assign += npkts
        wr = _WR(wr_id, data, remote_offset, imm, first, first + npkts - 1)
        self._wrs.append(wr)
        if not self._unsent:
            self.cc.set_app_limited(False)
        self._unsent.append(wr)

    # ---- sending -------------------------------------------------------
    def _stamp(self, now: float) -> int:
        ts = int(now * 1e9)
        if ts <= self._last_ts_ns:
            ts = self._last_ts_ns + 1
        self._last_ts_ns = ts
        return ts

    def _transmit(self, tx: _Tx, ev: int, now: float, out: list) -> None:
        """Retransmit ``tx`` on EV ``ev`` (first transmissions go through _send_new)."""
        wr = tx.wr
        info = self.evs.info[ev]
        ts = self._stamp(now)
        psn = tx.psn
        seq = info.seq
        info.seq = seq + 1
        tx.ev = ev
        tx.ev_seq = seq
        tx.ts_ns = ts
        tx.sent_at = now
        tx.lost = False
        tx.rtx_count += 1
        if self.transport is Transport.MRC:
            tx.gseq = self._gseq
            self._gseq += 1
        info.retransmits += 1
        self.rtx_packets += 1
        self.rtx_bytes += tx.length
        flags = pk.FLAG_RTX
        imm = None
        if psn == wr.last_psn:
            flags |= pk.FLAG_ACK_REQ
            imm = wr.imm
        pos, length = tx.pos, tx.length
        out.append((_encode(self._dest_qpn, psn, ev, tx.opcode, flags, wr.remote_offset + pos,
                            ts, imm, wr.data[pos:pos + length]), ev))
        self._inflight_bytes += length
        info.bytes_sent += length
        self.tx_packets += 1
        self.tx_bytes += length
        self.loss.on_retransmit(tx, seq, now)
        if self._cc_sent is not None:
            self._cc_sent(now=now, size_bytes=length)

    def send_data(self, now: float, out: list, limit: int | None = None) -> None:
        """Append data packets to ``out`` (retransmissions first) up to ``config.max_burst``
        entries in ``out``, or ``limit`` more packets (pacing sends one at a time)."""
        budget = self.config.max_burst if limit is None else min(self.config.max_burst, len(out) + limit)
        rtx_heap = self._rtx
        if rtx_heap:
            cc = self.cc
            rc = self.transport is Transport.RC
            outstanding = self._outstanding
            while rtx_heap and len(out) < budget:
                tx = outstanding.get(rtx_heap[0])
                if tx is None or not tx.lost:
                    heapq.heappop(rtx_heap)
                    continue
                if not cc.can_send(inflight_bytes=self._inflight_bytes, size_bytes=tx.length):
                    return
                ev = self.evs.pick(now, exclude=None if rc else tx.ev, alive_since_ns=0 if rc else tx.ts_ns)
                if ev is None:
                    self.loss.on_no_path(tx, now)
                    return
                heapq.heappop(rtx_heap)
                self._transmit(tx, ev, now, out)
        if self._unsent:
            self._send_new(now, out, budget - len(out))

    def _send_new(self, now: float, out: list, budget: int) -> None:
        """First transmissions: as many packets as window, cwnd and ``budget`` allow.

        The hot path: one EV batch from the rotation, locals for every
        counter and for the loss detector's queues.
        """
        size = self.config.payload_bytes
        psn = self._next_psn
        n = min(budget, self._snd_una + self.attr.mpr * 128 - psn, self._psn_assign - psn)
        inflight = self._inflight_bytes
        cwnd = self.cc.cwnd_bytes
        if cwnd != _INF:   # CongestionControl.can_send for full-size packets, in one step
            n = min(n, int((cwnd - inflight) // size) if inflight else max(1, int(cwnd // size)))
        if n <= 0:
            return
        evs = self.evs.pick_many(now, n)
        if not evs:
            return
        loss = self.loss
        unsent, outstanding, ev_q, ev_fresh, infos = self._unsent, self._outstanding, \
            loss.ev_q, loss.ev_fresh, self.evs.info
        dest, append, cc_sent = self._dest_qpn, out.append, self._cc_sent
        # the inference rules' queues (per-EV threshold, cross-EV scan): none without inference
        infer = self.config.loss_inference
        order = loss.sent_order.append if infer and self.transport is Transport.MRC else None
        gseq = self._gseq
        ts = int(now * 1e9)
        if ts <= self._last_ts_ns:
            ts = self._last_ts_ns + 1
        wr = unsent[0]
        data, first, last_psn, imm_wr, roff = wr.data, wr.first_psn, wr.last_psn, wr.imm, \
            wr.remote_offset
        sent_bytes = 0
        for ev in evs:
            if psn == first and imm_wr is not None:
                if self._wimm_inflight >= self.attr.max_wimm:
                    break
                self._wimm_inflight += 1
            pos = (psn - first) * size
            if psn == last_psn:
                length = wr.size - pos
                flags, imm = pk.FLAG_ACK_REQ, imm_wr
                if first == last_psn:
                    op = _OP_ONLY if imm is None else _OP_ONLY_IMM
                else:
                    op = _OP_LAST if imm is None else _OP_LAST_IMM
            else:
                length, flags, imm = size, 0, None
                op = _OP_FIRST if psn == first else _OP_MIDDLE
            info = infos[ev]
            seq = info.seq
            info.seq = seq + 1
            info.bytes_sent += length
            append((_encode(dest, psn, ev, op, flags, roff + pos, ts, imm, data[pos:pos + length]), ev))
            tx = _Tx(psn, wr, pos, length, op, ev, seq, ts, now, gseq)
            if order is not None:
                order((gseq, tx))
            gseq += 1
            outstanding[psn] = tx
            if infer:
                ev_q[ev].append((seq, tx))
            ev_fresh[ev].append(tx)
            sent_bytes += length
            if cc_sent is not None:
                cc_sent(now=now, size_bytes=length)
            ts += 1
            psn += 1
            if psn > last_psn:
                unsent.popleft()
                if not unsent:
                    self.cc.set_app_limited(True)
                    break
                wr = unsent[0]
                data, first, last_psn, imm_wr, roff = wr.data, wr.first_psn, wr.last_psn, \
                    wr.imm, wr.remote_offset
        self.tx_packets += psn - self._next_psn
        self._next_psn = psn
        self._gseq = gseq
        self._last_ts_ns = ts - 1
        self._inflight_bytes = inflight + sent_bytes
        self.tx_bytes += sent_bytes

    # ---- loss ----------------------------------------------------------
    def _declare_lost(self, tx: _Tx, now: float, cause: LossCause) -> None:
        if tx.lost:
            return
        tx.lost = True
        self._inflight_bytes -= tx.length
        self.lost_packets += 1
        info = self.evs.info[tx.ev]
        info.packets_lost += 1
        heapq.heappush(self._rtx, tx.psn)
        # A loss on an EV this QP already found dead is the path's failure, not congestion
        if cause is LossCause.TRIMMED or info.state is not EVState.ASSUMED_BAD:
            self.cc.on_packets_lost(now=now, lost_bytes=tx.length, trimmed=cause is LossCause.TRIMMED)
        if self.transport is Transport.MRC and cause in CHARGED:
            info.losses_chargeable += 1
            self.loss.charge_ev(tx, info, now, cause)
        log.debug("qpn %d psn %d lost on ev %d (%s)", self.qpn, tx.psn, tx.ev, cause.value)

    def _go_back_n(self, from_psn: int, now: float, cause: LossCause) -> None:
        for psn in range(max(from_psn, self._snd_una), self._next_psn):
            tx = self._outstanding.get(psn)
            if tx is not None:
                self._declare_lost(tx, now, cause)

    def on_sack(self, f: tuple, now: float) -> None:
        mode, flags, _, cum, base, bitmap, ev, ts, _, _ = f
        una = self._snd_una
        if cum > self._next_psn:
            self.bad_packets += 1
            return
        pop = self._outstanding.pop
        txs = [tx for psn in range(una, cum) if (tx := pop(psn, None)) is not None] \
            if cum > una else []
        if cum > una:
            una = self._snd_una = cum
        if base < una:                 # bits below the cumulative PSN are already done
            shift = una - base
            bitmap = bitmap >> shift if shift < 64 else 0
            base = una
        while bitmap:
            low = bitmap & -bitmap
            bitmap ^= low
            tx = pop(base + low.bit_length() - 1, None)
            if tx is not None:
                txs.append(tx)
        acked = 0
        if txs:
            acked = self._account_acked(txs, now, ts)
            if self.failed:            # an inferred loss exhausted a PSN's retries: ERR
                return
            first = txs[0]             # lowest PSN newly acked: the oldest first transmission
            if not first.rtx_count:    # Karn: never time a retransmitted PSN
                self._rtt.sample(now - first.sent_at)
        self._advance_una()
        info = self.evs.info.get(ev)
        rtt = None
        if info is not None:
            info.last_ack_s = now      # a packet on EV ev just arrived: restart its timer
        if info is not None and 0 < ts <= self._last_ts_ns:
            if ts > info.delivered_ts_ns:   # the transmission on ev stamped ts arrived
                self.loss.delivered(ev, ts, now)
            rtt = now - ts * 1e-9      # echoed timestamp: path delay, for CC and EV stats
            self.loss.rtt_sample(info, rtt)
        self.acked_bytes += acked
        ecn = bool(flags & pk.FLAG_ECN_ECHO)
        self.cc.on_packets_acked(now=now, acked_bytes=acked, rtt_s=rtt, ecn=ecn)
        if info is not None and self.transport is Transport.MRC:
            if self.evs.reps:          # the non-spec REPS variant: a good ACK's EV is reused
                self.evs.reps_feedback(ev, REPS_ECN_PENALTY if ecn or mode else 0)
            if ecn or mode:            # the echoed EV carried a CE mark: skip it
                self.ev_skips["ecn"] += 1
                self.evs.apply(ev, EVCause.CONGESTION, now, always=mode == pk.SackMode.ALWAYS_SKIP)
            elif info.always_skip:     # a clean SACK for it ends an ALWAYS_SKIP
                self.evs.clear_always_skip(ev, now)
        if self._wrs and self._wrs[0].last_psn < self._snd_una:
            self._complete_writes(now)

    def _account_acked(self, txs: list, now: float, echo_ts: int = 0) -> int:
        """Bookkeeping for newly acknowledged transmissions; returns their payload bytes.

        ``echo_ts``: the SACK's echoed timestamp (ns; 0: none). A retransmission stamped with it
        is known to have arrived, so it serves as the cross-EV rule's reference like a first
        transmission (RFC 8985 section 6.2 step 2 disambiguates by timestamp the same way):
        when the tail of a write is lost on a dead EV, the retransmissions sent after it are
        the only later packets acknowledged, and without them only the RTO finds the tail."""
        infos = self.evs.info
        srtt = self._rtt.srtt_s or 0.0
        acked = lost_acked = 0
        loss = self.loss
        hi_gseq, hi_sent_at = loss.hi_acked_gseq, loss.hi_acked_sent_at
        touched = {}                   # an ordered set: on_acked walks it in insertion order
        for tx in txs:
            length = tx.length
            acked += length
            if tx.lost:
                lost_acked += length
            ev = tx.ev
            info = infos[ev]
            info.packets_acked += 1
            alive = tx.sent_at + srtt  # e delivered tx: known alive until about then
            if alive > info.last_ack_s:
                info.last_ack_s = alive
            seq = tx.ev_seq
            tx.ev_seq = -1             # acknowledged: no per-EV queue entry matches it now
            if not tx.rtx_count:       # unambiguous (Karn): this transmission arrived
                if tx.ts_ns > info.delivered_ts_ns:
                    loss.delivered(ev, tx.ts_ns, now)
                if tx.gseq > hi_gseq:
                    hi_gseq, hi_sent_at = tx.gseq, tx.sent_at
                if seq > info.acked_seq:
                    info.acked_seq = seq
                    touched[ev] = None
            elif echo_ts and tx.ts_ns == echo_ts and tx.gseq > hi_gseq:   # its stamp echoed: it arrived
                hi_gseq, hi_sent_at = tx.gseq, tx.sent_at
        self._inflight_bytes -= acked - lost_acked
        if touched or hi_gseq > loss.hi_acked_gseq:
            loss.on_acked(touched, hi_gseq, hi_sent_at, now)
        return acked

    def _advance_una(self) -> None:
        una, nxt, outstanding = self._snd_una, self._next_psn, self._outstanding
        while una < nxt and una not in outstanding:
            una += 1
        self._snd_una = una

    def on_nack(self, pkt: pk.NackPacket, now: float) -> None:
        tx = self._outstanding.get(pkt.psn)
        if pkt.reason == pk.NackReason.SEQ_ERR:
            # RoCE NAK semantics: everything below the PSN arrived in order.
            pop = self._outstanding.pop
            txs = [t for psn in range(self._snd_una, min(pkt.psn, self._next_psn))
                   if (t := pop(psn, None)) is not None]
            self.acked_bytes += self._account_acked(txs, now)
            if self.failed:
                return
            self._advance_una()
            self._complete_writes(now)
            # one retry of the PSN the responder waits for (IBTA's NAK sequence error)
            if tx is not None and not tx.lost and \
                    not self.loss.spend_retry(tx, now, LossCause.SEQ_ERR):
                return
            self._go_back_n(pkt.psn, now, LossCause.SEQ_ERR)
            return
        # The echoed stamp is evidence of a delivery only if this QP could have sent it (as a
        # SACK's, :meth:`on_sack`): a stamp beyond any sent would excuse every later loss on
        # the EV and bring a retired one back.
        ts_ok = 0 < pkt.timestamp_ns <= self._last_ts_ns
        if pkt.reason == pk.NackReason.NO_PKT_BUFFER:
            # the responder had no posted receive: its header arrived, the EV is fine; the
            # retransmission timer (retry ladder) sends it again
            self.nacks_no_buffer += 1
            if self.transport is Transport.MRC and ts_ok:
                self.loss.delivered(pkt.ev, pkt.timestamp_ns, now)
            return
        trimmed = pkt.reason in (pk.NackReason.TRIMMED, pk.NackReason.TRIMMED_LASTHOP)
        if trimmed and self.transport is Transport.MRC and ts_ok:   # the header crossed the EV
            self.loss.delivered(pkt.ev, pkt.timestamp_ns, now)
        if tx is None or tx.ts_ns != pkt.timestamp_ns:
            return
        cause = LossCause.TRIMMED if trimmed else LossCause.NACK
        if not tx.lost and not self.loss.lose(tx, now, cause):   # False: retries exhausted, ERR
            return
        if trimmed and self.transport is Transport.MRC:
            if self.evs.reps:   # REPS variant: a last-hop trim is a good ACK for the path (uet-htsim)
                self.evs.reps_feedback(tx.ev, 0 if pkt.reason == pk.NackReason.TRIMMED_LASTHOP
                                       else REPS_NACK_PENALTY)
            if pkt.reason == pk.NackReason.TRIMMED_LASTHOP:   # the host's link, not the EV
                self.ev_skips["trim_lasthop"] += 1
            else:                                             # UET: trims before the last hop skip
                self.ev_skips["trim"] += 1
                self.evs.apply(tx.ev, EVCause.CONGESTION, now)

    def _complete_writes(self, now: float) -> None:
        wrs = self._wrs
        while wrs and wrs[0].last_psn < self._snd_una:
            wr = wrs.popleft()
            if wr.imm is not None:
                self._wimm_inflight -= 1
            self._events.append(WorkCompletion(now, self.qpn, WCOpcode.RDMA_WRITE,
                                               WCStatus.SUCCESS, wr.wr_id, wr.size))

    def flush_writes(self, now: float) -> None:
        self.failed = True
        status = WCStatus.RETRY_EXC_ERR
        for wr in self._wrs:
            self._events.append(WorkCompletion(now, self.qpn, WCOpcode.RDMA_WRITE, status,
                                               wr.wr_id, wr.size))
            status = WCStatus.WR_FLUSH_ERR
        self._wrs.clear()
        self._unsent.clear()
        self._outstanding.clear()
        self._rtx.clear()
        self.loss.clear()
        self._inflight_bytes = 0
