"""Requester half of a QP: packetise writes, spray over EVs, detect loss, retransmit.

Mixed into :class:`agents.mrc.qp.QP`; it shares the QP's attributes. Loss
detection (MRC.md): a transmission is lost when ``reorder_threshold`` later
transmissions on the same EV were acknowledged (per-EV packet threshold,
only never-retransmitted PSNs count: their ACK is unambiguous), or when its
timer (the QP ``timeout``, with the linear then exponential retry ladder)
fires. Lost PSNs are retransmitted oldest first, on a different EV. In RC
mode a loss (timeout or SEQ_ERR NACK) rewinds to the lost PSN: go-back-N.
"""
from __future__ import annotations

import heapq
import logging
from collections import deque

from . import packet as pk
from .ev import EVCause
from .types import RETRY_EXP_INFINITE, Transport, WCOpcode, WCStatus, WorkCompletion

log = logging.getLogger(__name__)

_OP_FIRST, _OP_MIDDLE, _OP_LAST, _OP_LAST_IMM, _OP_ONLY, _OP_ONLY_IMM = 6, 7, 8, 9, 10, 11
_encode = pk.encode_data_parts


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
                 "sent_at", "timeouts", "rtx_count", "lost")

    def __init__(self, psn, wr, pos, length, opcode):
        self.psn = psn
        self.wr = wr
        self.pos = pos
        self.length = length
        self.opcode = opcode
        self.ev = -1
        self.ev_seq = 0
        self.ts_ns = 0
        self.sent_at = 0.0
        self.timeouts = 0
        self.rtx_count = 0
        self.lost = False


class RequesterMixin:
    """Requester state and logic (see module docstring)."""

    def _init_requester(self) -> None:
        self._wrs: deque[_WR] = deque()         # posted, not yet completed (in order)
        self._unsent: deque[_WR] = deque()      # WRs with packets not yet sent once
        self._psn_assign = 0                    # next PSN handed to a posted WR
        self._next_psn = 0                      # next PSN sent for the first time
        self._snd_una = 0                       # lowest PSN not acknowledged
        self._outstanding: dict[int, _Tx] = {}
        self._rtx: list[int] = []               # heap of lost PSNs awaiting retransmit
        self._timers: list[tuple[float, int, int]] = []  # heap (deadline, psn, ts_ns)
        self._fresh_timers: deque = deque()     # same, deadlines non-decreasing (no backoff)
        self._ev_q: dict[int, deque] = {}
        self._inflight_bytes = 0
        self._wimm_inflight = 0
        self._last_ts_ns = 0
        self._probe_id = 0
        self.tx_packets = 0
        self.tx_bytes = 0
        self.rtx_packets = 0
        self.timeouts = 0
        self.lost_packets = 0
        self.acked_bytes = 0
        self.srtt_s: float | None = None

    # ---- posting ---------------------------------------------------------
    def _post(self, wr_id, data: memoryview, remote_offset: int, imm: int | None) -> None:
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

    def _rto_for(self, timeouts: int) -> float:
        lin = self.attr.retry_linear_cnt
        if timeouts < lin:
            return self.rto_s
        return self.rto_s * (1 << min(timeouts - lin + 1, 20))

    def _transmit(self, tx: _Tx, ev: int, now: float, out: list, rtx: bool) -> None:
        # Hot path: locals instead of repeated attribute lookups, no per-packet helper calls.
        wr = tx.wr
        info = self.evs.info[ev]
        ts = int(now * 1e9)
        last = self._last_ts_ns
        if ts <= last:
            ts = last + 1
        self._last_ts_ns = ts
        psn = tx.psn
        seq = info.seq
        info.seq = seq + 1
        tx.ev = ev
        tx.ev_seq = seq
        tx.ts_ns = ts
        tx.sent_at = now
        tx.lost = False
        flags = 0
        if rtx:
            flags = pk.FLAG_RTX
            tx.rtx_count += 1
            info.retransmits += 1
            self.rtx_packets += 1
        if psn == wr.last_psn:
            flags |= pk.FLAG_ACK_REQ
            imm = wr.imm
        else:
            imm = None
        pos = tx.pos
        length = tx.length
        out.append((_encode(self.dest_qpn, psn, ev, tx.opcode, flags, wr.remote_offset + pos,
                            ts, imm, wr.data[pos:pos + length]), ev))
        self._inflight_bytes += length
        info.packets_sent += 1
        info.bytes_sent += length
        self.tx_packets += 1
        self.tx_bytes += length
        q = self._ev_q.get(ev)
        if q is None:
            q = self._ev_q[ev] = deque()
        q.append((seq, psn, ts))
        if tx.timeouts == 0 and not rtx:
            self._fresh_timers.append((now + self._rto_s, psn, ts))
        else:
            heapq.heappush(self._timers, (now + self._rto_for(tx.timeouts), psn, ts))
        if self._cc_sent is not None:
            self._cc_sent(now=now, size_bytes=length)

    def _new_tx(self) -> _Tx | None:
        wr = self._unsent[0]
        psn = self._next_psn
        idx = psn - wr.first_psn
        if idx == 0 and wr.imm is not None:
            if self._wimm_inflight >= self.attr.max_wimm:
                return None
            self._wimm_inflight += 1
        payload = self.config.payload_bytes
        pos = idx * payload
        length = min(payload, wr.size - pos)
        if wr.first_psn == wr.last_psn:
            op = _OP_ONLY if wr.imm is None else _OP_ONLY_IMM
        elif psn == wr.first_psn:
            op = _OP_FIRST
        elif psn == wr.last_psn:
            op = _OP_LAST if wr.imm is None else _OP_LAST_IMM
        else:
            op = _OP_MIDDLE
        if psn == wr.last_psn:
            self._unsent.popleft()
        self._next_psn = psn + 1
        return _Tx(psn, wr, pos, length, op)

    def _send_data(self, now: float, out: list) -> None:
        cc = self.cc
        budget = self.config.max_burst
        rc = self.transport is Transport.RC
        rtx_heap = self._rtx
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
            self._transmit(tx, ev, now, out, rtx=True)
        # New data. The window test is CongestionControl.can_send, inlined for speed.
        window_end = self._snd_una + self.attr.mpr * 128
        size = self.config.payload_bytes
        pick = self.evs.pick
        unsent = self._unsent
        while unsent and len(out) < budget and self._next_psn < window_end:
            inflight = self._inflight_bytes
            if inflight and inflight + size > cc.cwnd_bytes:
                return
            ev = pick(now)
            if ev is None:
                return
            tx = self._new_tx()
            if tx is None:
                return
            outstanding[tx.psn] = tx
            self._transmit(tx, ev, now, out, False)

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
        if self.transport is Transport.MRC and cause in ("timeout", "ev_threshold"):
            self.evs.apply(tx.ev, EVCause.LOSS, now)
        log.debug("qpn %d psn %d lost on ev %d (%s)", self.qpn, tx.psn, tx.ev, cause)

    def _go_back_n(self, from_psn: int, now: float, cause: str) -> None:
        for psn in range(max(from_psn, self._snd_una), self._next_psn):
            tx = self._outstanding.get(psn)
            if tx is not None:
                self._declare_lost(tx, now, cause)

    def _detect_ev_losses(self, ev: int, now: float) -> None:
        q = self._ev_q.get(ev)
        if not q:
            return
        limit = self.evs.info[ev].acked_seq - self.config.reorder_threshold
        outstanding = self._outstanding
        while q and q[0][0] <= limit:
            _, psn, ts = q.popleft()
            tx = outstanding.get(psn)
            if tx is not None and tx.ts_ns == ts and not tx.lost:
                self._declare_lost(tx, now, "ev_threshold")

    def _requester_timers(self, now: float) -> None:
        fresh = self._fresh_timers
        while fresh and fresh[0][0] <= now:
            heapq.heappush(self._timers, fresh.popleft())
        timers = self._timers
        outstanding = self._outstanding
        exp = self.attr.retry_exp_cnt
        limit = self.attr.retry_linear_cnt + exp
        while timers and timers[0][0] <= now:
            _, psn, ts = heapq.heappop(timers)
            tx = outstanding.get(psn)
            if tx is None or tx.ts_ns != ts or tx.lost:
                continue
            tx.timeouts += 1
            self.timeouts += 1
            if exp != RETRY_EXP_INFINITE and tx.timeouts > limit:
                self._enter_error(now, f"retry exhausted: PSN {psn} timed out "
                                       f"{tx.timeouts} times (EV {tx.ev})")
                return
            if self.transport is Transport.RC:
                self._go_back_n(psn, now, "timeout")
            else:
                self._declare_lost(tx, now, "timeout")

    def _requester_deadline(self) -> float | None:
        timers = self._timers
        outstanding = self._outstanding
        fresh = self._fresh_timers
        while fresh:
            _, psn, ts = fresh[0]
            tx = outstanding.get(psn)
            if tx is None or tx.ts_ns != ts or tx.lost:
                fresh.popleft()
                continue
            break
        while timers:
            _, psn, ts = timers[0]
            tx = outstanding.get(psn)
            if tx is None or tx.ts_ns != ts or tx.lost:
                heapq.heappop(timers)
                continue
            return min(timers[0][0], fresh[0][0]) if fresh else timers[0][0]
        return fresh[0][0] if fresh else None

    # ---- acknowledgements ---------------------------------------------
    def _acked(self, tx: _Tx, touched: set) -> int:
        if not tx.lost:
            self._inflight_bytes -= tx.length
        info = self.evs.info[tx.ev]
        info.packets_acked += 1
        if tx.rtx_count == 0:
            if tx.ev_seq > info.acked_seq:
                info.acked_seq = tx.ev_seq
            touched.add(tx.ev)
        return tx.length

    def _on_sack(self, f: tuple, now: float) -> None:
        mode, flags, _, cum, base, bitmap, ev, ts, _, _ = f
        outstanding = self._outstanding
        acked = 0
        touched: set = set()
        if cum > self._next_psn:
            self.bad_packets += 1
            return
        if cum > self._snd_una:
            for psn in range(self._snd_una, cum):
                tx = outstanding.pop(psn, None)
                if tx is not None:
                    acked += self._acked(tx, touched)
            self._snd_una = cum
        b = bitmap
        if base < self._snd_una:       # bits below the cumulative PSN are already done
            shift = self._snd_una - base
            b = b >> shift if shift < 64 else 0
            base = self._snd_una
        while b:
            low = b & -b
            b ^= low
            tx = outstanding.pop(base + low.bit_length() - 1, None)
            if tx is not None:
                acked += self._acked(tx, touched)
        self._advance_una()
        for e in touched:
            self._detect_ev_losses(e, now)
        rtt = None
        info = self.evs.info.get(ev)
        if info is not None and 0 < ts <= self._last_ts_ns:
            rtt = now - ts * 1e-9
            self._rtt_sample(info, rtt)
        self.acked_bytes += acked
        ecn = bool(flags & pk.FLAG_ECN_ECHO)
        self.cc.on_packets_acked(now=now, acked_bytes=acked, rtt_s=rtt, ecn=ecn)
        if info is not None and (ecn or mode != pk.SackMode.NONE) and \
                self.transport is Transport.MRC:
            self.evs.apply(ev, EVCause.CONGESTION, now)
        self._complete_writes(now)

    def _rtt_sample(self, info, rtt: float) -> None:
        info.rtt_last_s = rtt
        info.rtt_samples += 1
        if info.rtt_min_s is None or rtt < info.rtt_min_s:
            info.rtt_min_s = rtt
        self.srtt_s = rtt if self.srtt_s is None else 0.875 * self.srtt_s + 0.125 * rtt

    def _advance_una(self) -> None:
        una, nxt, outstanding = self._snd_una, self._next_psn, self._outstanding
        while una < nxt and una not in outstanding:
            una += 1
        self._snd_una = una

    def _on_nack(self, pkt: pk.NackPacket, now: float) -> None:
        tx = self._outstanding.get(pkt.psn)
        if pkt.reason == pk.NackReason.SEQ_ERR:
            # RoCE NAK semantics: everything below the PSN arrived in order.
            touched: set = set()
            for psn in range(self._snd_una, min(pkt.psn, self._next_psn)):
                t = self._outstanding.pop(psn, None)
                if t is not None:
                    self.acked_bytes += self._acked(t, touched)
            self._advance_una()
            self._go_back_n(pkt.psn, now, "seq_err")
            self._complete_writes(now)
            return
        if tx is None or tx.ts_ns != pkt.timestamp_ns:
            return
        trimmed = pkt.reason in (pk.NackReason.TRIMMED, pk.NackReason.TRIMMED_LASTHOP)
        self._declare_lost(tx, now, "trimmed" if trimmed else "nack")
        if trimmed and self.transport is Transport.MRC:
            self.evs.apply(tx.ev, EVCause.CONGESTION, now)

    def _complete_writes(self, now: float) -> None:
        wrs = self._wrs
        while wrs and wrs[0].last_psn < self._snd_una:
            wr = wrs.popleft()
            if wr.imm is not None:
                self._wimm_inflight -= 1
            self._events.append(WorkCompletion(now, self.qpn, WCOpcode.RDMA_WRITE,
                                               WCStatus.SUCCESS, wr.wr_id, wr.size))

    def _flush_writes(self, now: float) -> None:
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
        self._fresh_timers.clear()
        self._inflight_bytes = 0

    # ---- probes ----------------------------------------------------------
    def _send_probes(self, now: float, out: list) -> None:
        cfg = self.config
        for info in self.evs.probe_targets():
            if info.probe_outstanding is None and info.probe_due <= now:
                self._probe_id = (self._probe_id + 1) & 0xFFFF
                ts = self._stamp(now)
                out.append((pk.encode(pk.ProbePacket(self.dest_qpn, self._probe_id, info.ev,
                                                     info.ev, ts)), info.ev))
                info.probe_outstanding = (self._probe_id, now + cfg.probe_timeout_s)
                info.probe_due = now + cfg.probe_interval_s
                info.probes_sent += 1

    def _probe_timers(self, now: float) -> None:
        for info in self.evs.probe_targets():
            po = info.probe_outstanding
            if po is not None and po[1] <= now:
                self.evs.probe_result(info.ev, False, now, self.config.probe_successes)

    def _probe_deadline(self) -> float | None:
        best = None
        for info in self.evs.probe_targets():
            po = info.probe_outstanding
            t = po[1] if po is not None else info.probe_due
            if best is None or t < best:
                best = t
        return best

    def _on_probe_rsp(self, pkt: pk.ProbePacket, now: float) -> None:
        info = self.evs.info.get(pkt.req_ev)
        if info is None or info.probe_outstanding is None or \
                info.probe_outstanding[0] != pkt.probe_id:
            return
        self._rtt_sample(info, now - pkt.timestamp_ns * 1e-9)
        self.evs.probe_result(pkt.req_ev, True, now, self.config.probe_successes)
