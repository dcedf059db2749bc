"""Requester half of a QP: packetise writes, spray over EVs, detect loss, retransmit.

A :class:`Requester` is owned by its :class:`agents.mrc.qp.QP`. Inputs: posted writes
(``post``), the SACKs, NACKs and probe responses the QP hands it, its clock, and what the
QP's state machine sets (``evs`` at INIT, ``dest_qpn`` at RTR, ``attr`` at RTS); it shares
the QP's congestion controller and RTT estimator. Outputs: datagrams appended to the
list given to ``send_probes``/``send_data``, WorkCompletions and EV events into the QP's
event queue, ``deadline()``/``probe_deadline()``, and ``on_error(now, reason)`` when
retries are exhausted (the QP enters ERR). Loss
detection (MRC.md): a transmission is lost when ``reorder_threshold`` later
transmissions on the same EV were acknowledged (per-EV packet threshold,
only never-retransmitted PSNs count: their ACK is unambiguous), or when its
timer fires: the RFC 6298 RTO (:mod:`agents.mrc.rto`, floored by the QP
``timeout``), restarted per EV by ACKs (``on_timer``), then the
linear and exponential retry ladder. Lost PSNs are retransmitted oldest first, on a different EV. In RC
mode a loss (timeout or SEQ_ERR NACK) rewinds to the lost PSN: go-back-N.
"""
from __future__ import annotations

import heapq
import logging
from collections import defaultdict, deque

from . import packet as pk
from .cc import CongestionControl
from .ev import EVCause, EVSet, EVState
from .types import RETRY_EXP_INFINITE, QPAttr, Transport, WCOpcode, WCStatus, WorkCompletion

log = logging.getLogger(__name__)

_OP_FIRST, _OP_MIDDLE, _OP_LAST, _OP_LAST_IMM, _OP_ONLY, _OP_ONLY_IMM = 6, 7, 8, 9, 10, 11
_encode = pk.encode_data_parts
_pack_hdr, _pack_imm, _pack_crc = pk.DATA_HDR.pack, pk.IMM.pack, pk.CRC.pack
_crc32 = pk.crc32
_INF = float("inf")
_USABLE = (EVState.GOOD, EVState.SKIP)


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
                 "sent_at", "timeouts", "rtx_count", "lost", "gseq")

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
        self.dest_qpn = 0
        self.evs: EVSet | None = None
        self.attr = QPAttr()
        self.bad_packets = 0
        self._wrs: deque[_WR] = deque()         # posted, not yet completed (in order)
        self._unsent: deque[_WR] = deque()      # WRs with packets not yet sent once
        self._psn_assign = 0                    # next PSN handed to a posted WR
        self._next_psn = 0                      # next PSN sent for the first time
        self._snd_una = 0                       # lowest PSN not acknowledged
        self._outstanding: dict[int, _Tx] = {}
        self._rtx: list[int] = []               # heap of lost PSNs awaiting retransmit
        # Timers (see on_timer). First transmissions: per EV, in send order
        # (ev -> deque of _Tx); retransmissions: a heap of (deadline, psn, ts_ns).
        self._ev_fresh: defaultdict[int, deque] = defaultdict(deque)
        self._timers: list[tuple[float, int, int]] = []
        self._ev_q: defaultdict[int, deque] = defaultdict(deque)  # ev -> (ev_seq, tx)
        # Loss inference across EVs (MRC only): every transmission in send order
        # as (gseq, tx), and the latest-sent unambiguously acknowledged one.
        self._gseq = 0
        self._sent_order: deque = deque()
        self._hi_acked_gseq = -1
        self._hi_acked_sent_at = -_INF
        self._rtt_min_s = _INF             # lowest echoed-timestamp RTT over all EVs
        self._inflight_bytes = 0
        self._wimm_inflight = 0
        self._last_ts_ns = 0
        self._probe_id = 0
        self.tx_packets = 0
        self.tx_bytes = 0
        self.rtx_packets = 0
        self.rtx_bytes = 0
        self.timeouts = 0
        self.lost_packets = 0
        self.ooo_losses = 0
        self.ev_losses_excused = 0
        self.ev_losses_stalled = 0   # timeouts not charged: nothing sent later had arrived
        self.acked_bytes = 0
        # SKIPs by cause; trim_lasthop counts last-hop trims, which by rule skip nothing
        self.ev_skips = {"ecn": 0, "trim": 0, "trim_lasthop": 0}
        self.nacks_no_buffer = 0

    def counters(self) -> dict:
        """The requester's items of :meth:`agents.mrc.qp.QP.stats`."""
        return {"tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
                "retransmissions": self.rtx_packets, "retransmitted_bytes": self.rtx_bytes,
                "timeouts": self.timeouts, "ev_losses_stalled": self.ev_losses_stalled,
                "lost_packets": self.lost_packets, "acked_bytes": self.acked_bytes,
                "nacks_no_buffer": self.nacks_no_buffer,
                "inflight_bytes": self._inflight_bytes, "snd_una": self._snd_una,
                "next_psn": self._next_psn}

    @property
    def idle(self) -> bool:
        """No posted write is waiting for its completion."""
        return not self._wrs

    # ---- posting ---------------------------------------------------------
    def post(self, wr_id, data: memoryview, remote_offset: int, imm: int | None) -> None:
        npkts = max(1, -(-len(data) // self.config.payload_bytes))
        first = self._psn_assign
        if first + npkts > pk.MAX_PSN:
            raise ValueError("PSN space exhausted on this QP")
        self._psn_assign += npkts
        wr = _WR(wr_id, data, remote_offset, imm, first, first + npkts - 1)
        self._wrs.append(wr)
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
            self._sent_order.append((tx.gseq, tx))
        info.retransmits += 1
        self.rtx_packets += 1
        self.rtx_bytes += tx.length
        flags = pk.FLAG_RTX
        imm = None
        if psn == wr.last_psn:
            flags |= pk.FLAG_ACK_REQ
            imm = wr.imm
        pos, length = tx.pos, tx.length
        out.append((_encode(self.dest_qpn, psn, ev, tx.opcode, flags, wr.remote_offset + pos,
                            ts, imm, wr.data[pos:pos + length]), ev))
        self._inflight_bytes += length
        info.bytes_sent += length
        self.tx_packets += 1
        self.tx_bytes += length
        self._ev_q[ev].append((seq, tx))
        heapq.heappush(self._timers, (now + self._rtt.backoff_s(tx.timeouts,
                                                                self.attr.retry_linear_cnt),
                                      psn, ts))
        if self._cc_sent is not None:
            self._cc_sent(now=now, size_bytes=length)

    def send_data(self, now: float, out: list) -> None:
        budget = self.config.max_burst
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
                ev = self.evs.pick(now, exclude=None if rc else tx.ev)
                if ev is None:
                    return
                heapq.heappop(rtx_heap)
                self._transmit(tx, ev, now, out)
        if self._unsent:
            self._send_new(now, out, budget - len(out))

    def _send_new(self, now: float, out: list, budget: int) -> None:
        """First transmissions: as many packets as window, cwnd and ``budget`` allow.

        The hot path: one EV batch from the rotation, locals for every
        counter, the header packed and CRC-sealed inline.
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
        unsent, outstanding, ev_q, ev_fresh, infos = self._unsent, self._outstanding, \
            self._ev_q, self._ev_fresh, self.evs.info
        dest, append, cc_sent = self.dest_qpn, out.append, self._cc_sent
        order = self._sent_order.append if self.transport is Transport.MRC else None
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
            body = _pack_hdr(1, 1, op, flags, dest, psn, ev, roff + pos, length, ts)
            if imm is not None:
                body += _pack_imm(imm)
            body += data[pos:pos + length]
            append((body + _pack_crc(_crc32(body)), ev))
            tx = _Tx(psn, wr, pos, length, op, ev, seq, ts, now, gseq)
            if order is not None:
                order((gseq, tx))
            gseq += 1
            outstanding[psn] = tx
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
    def _declare_lost(self, tx: _Tx, now: float, cause: str) -> None:
        if tx.lost:
            return
        tx.lost = True
        self._inflight_bytes -= tx.length
        self.lost_packets += 1
        info = self.evs.info[tx.ev]
        info.packets_lost += 1
        heapq.heappush(self._rtx, tx.psn)
        self.cc.on_packets_lost(now=now, lost_bytes=tx.length, trimmed=(cause == "trimmed"))
        if self.transport is Transport.MRC and cause in ("timeout", "ev_threshold", "ooo"):
            self._charge_ev(tx, info, now, cause)
        log.debug("qpn %d psn %d lost on ev %d (%s)", self.qpn, tx.psn, tx.ev, cause)

    def _charge_ev(self, tx: _Tx, info, now: float, cause: str = "timeout") -> None:
        """Charge an untrimmed loss to its EV: ASSUMED_BAD only if the loss persists there.

        A timeout is evidence against its EV only when the QP knows that a
        transmission sent after it, on any EV, arrived (acknowledged, first
        transmissions only). Otherwise the whole QP is waiting, not one path:
        queues that grew after the RTO was set (start-up, where the first
        samples cross idle paths: incast-trim's seed 1 timed out 33 packets
        of 7 QPs in its first 0.25 s, srtt 12 ms against 100-250 ms of
        start-up queue, with no packet dropped anywhere, and retired 9 EVs),
        or every path down, where retiring EVs tells nothing. The packet is
        still retransmitted and the window reacts; ``ev_losses_stalled``
        counts these. The same evidence test makes RACK (RFC 8985) mark a
        packet lost only from a later delivery, and F-RTO (RFC 5682) undo a
        timeout that later ACKs show spurious.

        Rule: a loss is excused (congestion, not failure) when a transmission
        sent on the same EV after it is known to have arrived (its stamp
        echoed in a SACK, or it was acknowledged): the path delivers, it
        only dropped from a full queue. Otherwise it extends the EV's run of
        losses since its last delivery, and ``config.ev_loss_run`` losses in
        a row retire the EV. A dead EV loses every packet, so its run grows
        with each packet on it that is detected lost (one spray rotation
        apart); a drop-tail burst on a healthy EV is cut short by the next
        packet on that EV that gets through.

        Measured on :mod:`agents.mrc.sim` (15 kB drop-tail queues, congestion
        only, 4 MB, ``tests/unit/test_mrc_loss.py``): GOOD->ASSUMED_BAD 4 -> 0
        on 4 x 1 Gb/s 1 ms paths (write 36-60 ms -> 21 ms), 12 -> 0 on 8 such
        paths (89 -> 47 ms), 7 -> 1-2 on 8 x 1 Gb/s 100 us paths (tail
        drops: no later packet on the EV exists). ev_loss_run 1, 2 and 3
        gave the same counts there (the excuse rule does the work); the
        default 2 tolerates one unexcused loss, e.g. an EV's last packet of
        a write dropped by a full queue, for one more lost packet (one spray
        rotation) on a dead EV, still retired in ~1.3-1.5 base RTTs.
        """
        if info.delivered_ts_ns >= tx.ts_ns:     # it, or a later packet on the EV, arrived
            info.losses_excused += 1
            self.ev_losses_excused += 1
            return
        if cause == "timeout" and self._hi_acked_gseq < tx.gseq:
            self.ev_losses_stalled += 1
            return
        if info.loss_run_ts_ns < info.delivered_ts_ns:   # a delivery since the last counted loss
            info.loss_run = 0
        if tx.ts_ns <= info.loss_run_ts_ns:
            return                                       # counted already (RC rewinds, races)
        info.loss_run += 1
        info.loss_run_ts_ns = tx.ts_ns
        if info.loss_run >= self.config.ev_loss_run:
            if self.evs.apply(tx.ev, EVCause.LOSS, now) is not EVState.GOOD and \
                    info.state is EVState.ASSUMED_BAD:
                info.loss_run = 0

    def _go_back_n(self, from_psn: int, now: float, cause: str) -> None:
        for psn in range(max(from_psn, self._snd_una), self._next_psn):
            tx = self._outstanding.get(psn)
            if tx is not None:
                self._declare_lost(tx, now, cause)

    def _timeout(self, tx: _Tx, now: float) -> bool:
        """One timer expiry of ``tx``; False if the retries are exhausted (QP now in ERR)."""
        tx.timeouts += 1
        self.timeouts += 1
        exp = self.attr.retry_exp_cnt
        if exp != RETRY_EXP_INFINITE and tx.timeouts > self.attr.retry_linear_cnt + exp:
            self.on_error(now, f"retry exhausted: PSN {tx.psn} timed out "
                                   f"{tx.timeouts} times (EV {tx.ev})")
            return False
        info = self.evs.info.get(tx.ev)
        log.info("qpn %d psn %d timed out on ev %d: sent %.1f ms ago, ev last ack %.1f ms ago, "
                 "rto %.1f ms, srtt %.1f ms, rttvar %.1f ms, inflight %d B", self.qpn, tx.psn, tx.ev,
                 (now - tx.sent_at) * 1e3, (now - info.last_ack_s) * 1e3 if info else -1,
                 self._rtt.rto_s * 1e3, (self._rtt.srtt_s or 0) * 1e3, self._rtt.rttvar_s * 1e3,
                 self._inflight_bytes)
        if self.transport is Transport.RC:
            self._go_back_n(tx.psn, now, "timeout")
        else:
            self._declare_lost(tx, now, "timeout")
        return True

    def _ev_head(self, ev: int) -> _Tx | None:
        """Oldest first transmission on ``ev`` still waiting for its ACK (None if none)."""
        q = self._ev_fresh[ev]
        while q:
            tx = q[0]
            if tx.ev_seq >= 0 and not tx.lost and not tx.rtx_count:   # acked: ev_seq -1
                return tx
            q.popleft()
        return None

    def _ev_deadline(self, ev: int, tx: _Tx) -> float:
        return max(tx.sent_at, self.evs.info[ev].last_ack_s) + self._rtt.rto_s

    def on_timer(self, now: float) -> None:
        """Fire due timers: first transmissions per EV, then backed-off retransmissions.

        A first transmission on EV e times out at max(its send time, e's
        ``last_ack_s``) + RTO: RFC 6298 rule 5.3 ("when an ACK is received that
        acknowledges new data, restart the retransmission timer"), applied per
        EV so that a queue building on a working path is not a timeout while a
        dead EV still is. ``last_ack_s`` is the latest of: the arrival of a SACK
        echoing e (a packet on e just arrived), and send time + SRTT of any
        packet on e newly acknowledged (e delivered it; a late cumulative ACK
        for a packet sent before a failure restarts nothing past it); a retransmission at its send time plus
        the mrc.h retry ladder (:meth:`agents.mrc.rto.RttEstimator.backoff_s`).
        """
        for ev in list(self._ev_fresh):
            while (tx := self._ev_head(ev)) is not None and self._ev_deadline(ev, tx) <= now:
                self._ev_fresh[ev].popleft()
                if not self._timeout(tx, now):
                    return
        timers = self._timers
        outstanding = self._outstanding
        while timers and timers[0][0] <= now:
            _, psn, ts = heapq.heappop(timers)
            tx = outstanding.get(psn)
            if tx is None or tx.ts_ns != ts or tx.lost:
                continue
            if not self._timeout(tx, now):
                return

    def deadline(self) -> float | None:
        timers = self._timers
        outstanding = self._outstanding
        while timers:
            _, psn, ts = timers[0]
            tx = outstanding.get(psn)
            if tx is None or tx.ts_ns != ts or tx.lost:
                heapq.heappop(timers)
                continue
            break
        t = timers[0][0] if timers else None
        for ev in self._ev_fresh:
            tx = self._ev_head(ev)
            if tx is not None:
                d = self._ev_deadline(ev, tx)
                if t is None or d < t:
                    t = d
        return t

    # ---- acknowledgements ---------------------------------------------
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
            acked = self._account_acked(txs, now)
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
                self._delivered(ev, ts, now)
            rtt = now - ts * 1e-9      # echoed timestamp: path delay, for CC and EV stats
            self._rtt_sample(info, rtt)
        self.acked_bytes += acked
        ecn = bool(flags & pk.FLAG_ECN_ECHO)
        self.cc.on_packets_acked(now=now, acked_bytes=acked, rtt_s=rtt, ecn=ecn)
        if info is not None and self.transport is Transport.MRC:
            if ecn or mode:            # the echoed EV carried a CE mark: skip it
                self.ev_skips["ecn"] += 1
                self.evs.apply(ev, EVCause.CONGESTION, now, always=mode == pk.SackMode.ALWAYS_SKIP)
            elif info.always_skip:     # a clean SACK for it ends an ALWAYS_SKIP
                self.evs.clear_always_skip(ev, now)
        if self._wrs and self._wrs[0].last_psn < self._snd_una:
            self._complete_writes(now)

    def _account_acked(self, txs: list, now: float) -> int:
        """Bookkeeping for newly acknowledged transmissions; returns their payload bytes."""
        infos = self.evs.info
        srtt = self._rtt.srtt_s or 0.0
        acked = lost_acked = 0
        hi_gseq, hi_sent_at = self._hi_acked_gseq, self._hi_acked_sent_at
        touched = set()
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
                    self._delivered(ev, tx.ts_ns, now)
                if tx.gseq > hi_gseq:
                    hi_gseq, hi_sent_at = tx.gseq, tx.sent_at
                if seq > info.acked_seq:
                    info.acked_seq = seq
                    touched.add(ev)
        self._inflight_bytes -= acked - lost_acked
        if touched:   # per-EV packet threshold: reorder_threshold later ones on the EV acked
            ev_q, threshold = self._ev_q, self.config.reorder_threshold
            for e in touched:
                q = ev_q[e]
                limit = infos[e].acked_seq - threshold
                while q and q[0][0] <= limit:
                    seq, tx = q.popleft()
                    if tx.ev_seq == seq and tx.ev == e and not tx.lost:   # acked: ev_seq -1
                        self._declare_lost(tx, now, "ev_threshold")
        if hi_gseq > self._hi_acked_gseq:
            self._hi_acked_gseq, self._hi_acked_sent_at = hi_gseq, hi_sent_at
            self._ooo_scan(now)
        return acked

    def _ooo_guard_s(self) -> float:
        """The time guard of the cross-EV rule in seconds (inf before any RTT sample).

        ``(max over usable EVs of their smoothed RTT - min RTT) + ooo_time_frac
        * min RTT``. The first term is the reordering that spraying itself
        causes: a packet on the longest (or most queued) path is overtaken by
        packets sent up to that long after it on the shortest one. The second
        is RACK's reordering window, min_RTT / 4 (RFC 8985 section 6.2, step
        4), for jitter the smoothed values hide. RTTs are the echoed
        timestamps (path delay, SACK coalescing excluded).

        min RTT is the lowest sample, raised to the base RTT the congestion
        control was configured with (NSCC's ``base_rtt_s``: the fabric's
        unloaded RTT, a CC-profile parameter) when that is higher. On the
        emulated fabric an idle path's first packets pass HTB's bucket at
        wire speed, so the lowest sample (~2 ms on a 5 Mbit/s k4 path whose
        base RTT is 43.5 ms) counted the queueing every EV shares (the host
        link's) as reordering: a ~50 ms guard, and a dead EV found 76-144 ms
        after a core-link failure, the later ones only by the RTO.
        """
        rmin = self._rtt_min_s
        if rmin == _INF:
            return _INF
        base = getattr(self.cc, "base_rtt_s", None)
        if base is not None and getattr(self.cc, "base_rtt_fixed", False) and base > rmin:
            rmin = base
        hi = rmin
        for info in self.evs.info.values():
            r = info.rtt_srtt_s
            if r is not None and r > hi and info.state in _USABLE:
                hi = r
        return hi - rmin + self.config.ooo_time_frac * rmin

    def _ooo_scan(self, now: float) -> None:
        """Infer losses from later transmissions acknowledged on any EV (MRC only).

        A transmission is lost once (1) at least ``config.ooo_threshold``
        transmissions sent after it, on any EV, have been acknowledged
        (the latest-sent acknowledged one is ``ooo_threshold`` or more
        transmissions later in send order), and (2) it was sent at least
        :meth:`_ooo_guard_s` before that latest-sent acknowledged one.
        (1) is UET's out-of-order threshold as uet-htsim models it
        (``UecSrc::runSleek`` in ``htsim/sim/src/protocols/uec.cpp``:
        retransmit from the cumulative ACK once the SACK's out-of-order count
        reaches ``max(min(1.5 * cwnd, maxwnd), 5 packets)``), in the form of
        RFC 9002 section 6.1.1 (largest acknowledged minus the packet >=
        kPacketThreshold); the floor, 5 packets, is uet-htsim's
        ``min_retx_config``. The cwnd-sized part is replaced by (2), a
        RACK-style time condition (RFC 8985): spraying reorders by the spread
        of path RTTs, not by a packet count. Only never-retransmitted
        transmissions serve as the reference (their ACK is unambiguous);
        retransmissions are judged like first transmissions, so a lost
        retransmission is found too. Scanning stops at the first
        transmission that is not yet lost: both conditions are monotone in
        send order.
        """
        q = self._sent_order
        limit_seq = self._hi_acked_gseq - self.config.ooo_threshold
        limit_t = None
        while q:
            g, tx = q[0]
            if tx.gseq != g or tx.ev_seq < 0 or tx.lost:    # resent, acked or lost already
                q.popleft()
                continue
            if g > limit_seq:
                return
            if limit_t is None:
                limit_t = self._hi_acked_sent_at - self._ooo_guard_s()
            if tx.sent_at > limit_t:
                return
            q.popleft()
            self.ooo_losses += 1
            self._declare_lost(tx, now, "ooo")

    def _rtt_sample(self, info, rtt: float) -> None:
        info.rtt_last_s = rtt
        info.rtt_samples += 1
        if info.rtt_min_s is None or rtt < info.rtt_min_s:
            info.rtt_min_s = rtt
            if rtt < self._rtt_min_s:
                self._rtt_min_s = rtt
        srtt = info.rtt_srtt_s         # RFC 6298's alpha, 1/8, per EV
        info.rtt_srtt_s = rtt if srtt is None else srtt + (rtt - srtt) * 0.125

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
            self._advance_una()
            self._go_back_n(pkt.psn, now, "seq_err")
            self._complete_writes(now)
            return
        if pkt.reason == pk.NackReason.NO_PKT_BUFFER:
            # the responder had no posted receive: its header arrived, the EV is fine; the
            # retransmission timer (retry ladder) sends it again
            self.nacks_no_buffer += 1
            if self.transport is Transport.MRC:
                self._delivered(pkt.ev, pkt.timestamp_ns, now)
            return
        trimmed = pkt.reason in (pk.NackReason.TRIMMED, pk.NackReason.TRIMMED_LASTHOP)
        if trimmed and self.transport is Transport.MRC:   # the header crossed the EV: it delivers
            self._delivered(pkt.ev, pkt.timestamp_ns, now)
        if tx is None or tx.ts_ns != pkt.timestamp_ns:
            return
        self._declare_lost(tx, now, "trimmed" if trimmed else "nack")
        if trimmed and self.transport is Transport.MRC:
            if pkt.reason == pk.NackReason.TRIMMED_LASTHOP:   # the host's link, not the EV
                self.ev_skips["trim_lasthop"] += 1
            else:                                             # UET: trims before the last hop skip
                self.ev_skips["trim"] += 1
                self.evs.apply(tx.ev, EVCause.CONGESTION, now)

    def _delivered(self, ev: int, ts_ns: int, now: float) -> None:
        """The transmission stamped ``ts_ns`` on EV ``ev`` reached the receiver: acknowledged,
        its stamp echoed, or its header NACKed after a switch trimmed it. Losses on the EV
        sent before it are excused (:meth:`_charge_ev`), and an EV retired for a loss run no
        newer than it comes back at once (cause DELIVERED): the run was congestion or
        reordering inferred as loss (out-of-order threshold) before the evidence returned.
        Measured on incast-trim (fat-tree-k4-trim): 3 EVs retired that way in the first
        0.15 s with no packet dropped anywhere. A path that died after ``ts_ns`` is not
        restored: its charged losses were sent later."""
        info = self.evs.info.get(ev)
        if info is None:
            return
        if ts_ns > info.delivered_ts_ns:
            info.delivered_ts_ns = ts_ns
        if info.state is EVState.ASSUMED_BAD and 0 < info.loss_run_ts_ns <= ts_ns \
                and self.transport is Transport.MRC:
            info.loss_run = 0
            self.evs.apply(ev, EVCause.DELIVERED, now)

    def _complete_writes(self, now: float) -> None:
        wrs = self._wrs
        while wrs and wrs[0].last_psn < self._snd_una:
            wr = wrs.popleft()
            if wr.imm is not None:
                self._wimm_inflight -= 1
            self._events.append(WorkCompletion(now, self.qpn, WCOpcode.RDMA_WRITE,
                                               WCStatus.SUCCESS, wr.wr_id, wr.size))

    def flush_writes(self, now: float) -> None:
        status = WCStatus.RETRY_EXC_ERR
        for wr in self._wrs:
            self._events.append(WorkCompletion(now, self.qpn, WCOpcode.RDMA_WRITE, status,
                                               wr.wr_id, wr.size))
            status = WCStatus.WR_FLUSH_ERR
        self._wrs.clear()
        self._unsent.clear()
        self._outstanding.clear()
        self._rtx.clear()
        self._timers.clear()
        self._ev_q.clear()
        self._ev_fresh.clear()
        self._sent_order.clear()
        self._inflight_bytes = 0

    # ---- probes ----------------------------------------------------------
    def send_probes(self, now: float, out: list) -> None:
        cfg = self.config
        for info in self.evs.probe_targets():
            if info.probe_outstanding is None and info.probe_due <= now:
                self._probe_id = (self._probe_id + 1) & 0xFFFF
                ts = self._stamp(now)
                out.append((pk.encode(pk.ProbePacket(self.dest_qpn, self._probe_id, info.ev,
                                                     info.ev, ts)), info.ev))
                info.probe_outstanding = (self._probe_id, now + self.probe_timeout_s)
                info.probe_due = now + cfg.probe_interval_s
                info.probes_sent += 1

    @property
    def probe_timeout_s(self) -> float:
        """Seconds a probe may take: ``max(config.probe_timeout_s, current RTO)``.

        mrc_ctl's example timeout (2 ms) is many RTTs of a real fabric; on an
        emulated one a probe's RTT is the data path's (tens of ms with shaped
        links and queues), so a fixed 2 ms would fail every probe, keep an
        EV ASSUMED_BAD for ever and send a probe every ``probe_interval_s``.
        The RTO (SRTT + 4 RTTVAR, floored by the QP ``timeout``) is the
        bound the data path already trusts.
        """
        return max(self.config.probe_timeout_s, self._rtt.rto_s)

    def on_probe_timer(self, now: float) -> None:
        for info in self.evs.probe_targets():
            po = info.probe_outstanding
            if po is not None and po[1] <= now:
                self.evs.probe_result(info.ev, False, now, self.config.probe_successes)

    def probe_deadline(self) -> float | None:
        best = None
        for info in self.evs.probe_targets():
            po = info.probe_outstanding
            t = po[1] if po is not None else info.probe_due
            if best is None or t < best:
                best = t
        return best

    def on_probe_rsp(self, pkt: pk.ProbePacket, now: float) -> None:
        info = self.evs.info.get(pkt.req_ev)
        if info is None or info.probe_outstanding is None or \
                info.probe_outstanding[0] != pkt.probe_id:
            return
        self._rtt_sample(info, now - pkt.timestamp_ns * 1e-9)   # per-EV stats, not the RTO
        self.evs.probe_result(pkt.req_ev, True, now, self.config.probe_successes)
