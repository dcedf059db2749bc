"""Responder half of a QP: place payloads by offset, track PSNs, coalesce SACKs.

One module on purpose (over ~400 lines): one class whose batch and one-by-one paths must stay
side by side (a property test holds them equal).

A :class:`Responder` is owned by its :class:`agents.mrc.qp.QP`. Inputs: the datagrams the QP
hands it (``on_data``, ``receive_batch``, ``on_probe_req``), its clock, and what the QP's
state machine sets (``dest_qpn`` and ``mpr_dest`` at RTR); outputs: control packets in
``take_output()`` (SACKs, NACKs, probe responses, as (bytes, EV)), completions of
WRITE_WITH_IMM into the QP's event queue, and its ``deadline``. The PSN bitmap is kept as 64-PSN
chunks (Python ints) above the cumulative PSN, the same granularity as the
SACK's 64-bit bitmap. A SACK is sent every ``sack_every`` new data packets,
at once for a retransmission, a duplicate or an ACK request, and otherwise
after a hold: ``ack_delay_s``, or ``ack_coalesce_s`` when the data packet that starts
the hold came at most ``ack_coalesce_s`` after the previous one. That is adaptive
coalescing, as a NIC's dynamic interrupt moderation (Linux net_dim) widens its window
only while packets come fast: a flow at full rate shares each SACK between the packets
that arrive within the hold, and a slow flow (an incast sender at 1/7 of a link) is
acknowledged after ``ack_delay_s`` as before, instead of waiting out a hold that no
second packet will share. One SACK is sent per 64-PSN chunk touched
since the last one, so no received PSN goes unreported.

ECN (UET): a CE-marked data packet is acknowledged at once by a SACK of its own that
echoes that packet's EV and timestamp with ECN_ECHO and ``m`` SKIP_ONCE, so the requester
skips the EV that carried the mark; SACKs for unmarked packets carry no echo. When an EV's
arrivals were CE-marked ``config.always_skip_ce_run`` times in a row (no unmarked arrival
on that EV in between) while other EVs of the QP delivered unmarked packets (the congestion
is that path's, not the last hop's that every path shares), the mark's SACK says ALWAYS_SKIP
instead: after a SKIP_ONCE the requester leaves the EV for a rotation, so a run of marks
means the EV stays congested while it is used. The SACK's out-of-order count is the number of PSNs received above the
cumulative PSN now (UET's ooo count), falling as the cumulative PSN advances.

Trims: a trimmed header is NACKed TRIMMED, or TRIMMED_LASTHOP when the switch set
``FLAG_TRIMMED_LASTHOP`` (it trimmed on the port that faces this host).

Immediates (mrc.h ``mrc_post_recv``: "Posts a receive operation for RDMA w/ IMM"; MRC has
no RNR, receive buffers are posted up front): a WRITE_WITH_IMM's last packet reserves one
posted receive (:meth:`Responder.post_recv`) when it is accepted; completions come in PSN
order and take the posted receives in posting order (their ``wr_id``), as on a verbs RC QP. With no posted receive, or ``max_wimm_dest`` immediates already
accepted and awaiting in-order completion, the packet is not accepted (not placed, not
acknowledged, no completion) and is NACKed NO_PKT_BUFFER: of the MRC/UET NACK reasons the
one that says "the responder lacks a resource for this packet, send it again later", as
RoCE's RNR NAK does. The requester leaves such a packet to its retransmission timer.

Reverse EVs: SACKs and NACKs leave on a reverse EV chosen by the responder's
:class:`agents.mrc.reverse.ReverseEVs` (``reverse``), still echoing the forward EV. A
probe response leaves on the request's ``rsp_ev``. The forward EVs seen recently are
kept in ``reverse_evs`` (EV -> last arrival time) for the stats.

RC mode: only the next expected PSN is accepted; anything later is dropped
and answered with one SEQ_ERR NACK per episode (RoCE go-back-N).
"""
from __future__ import annotations

import heapq
import logging
from collections import deque

from . import packet as pk
from .reverse import ReverseEVs
from .types import QPAttr, Transport, WCOpcode, WCStatus, WorkCompletion

log = logging.getLogger(__name__)


_unpack_hdr, _unpack_crc, _crc32 = pk.DATA_HDR.unpack_from, pk.CRC.unpack_from, pk.crc32
_pack_sack, _pack_crc = pk.SACK_HDR.pack, pk.CRC.pack
_SKIP_ONCE, _ALWAYS_SKIP = int(pk.SackMode.SKIP_ONCE), int(pk.SackMode.ALWAYS_SKIP)
_HDR_BYTES = pk.DATA_HDR.size
_VERSION, _DATA, _SACK = pk.VERSION, int(pk.PacketType.DATA), int(pk.PacketType.SACK)
_PLAIN_BYTES = _HDR_BYTES + pk.CRC_BYTES
_PLAIN_OPCODES = frozenset({pk.Opcode.WRITE_FIRST, pk.Opcode.WRITE_MIDDLE, pk.Opcode.WRITE_LAST,
                            pk.Opcode.WRITE_ONLY})
_FAST_FLAGS_MASK = 0xFF & ~(pk.FLAG_RTX | pk.FLAG_ACK_REQ)
_ACK_NOW = pk.FLAG_RTX | pk.FLAG_ACK_REQ
_MAX_PSN = pk.MAX_PSN


class Responder:
    """Responder state and logic (see module docstring).

    ``qpn``: the QP's number; ``config``: its :class:`QPConfig`; ``transport``: MRC or RC;
    ``events``: the QP's event queue (WorkCompletions are appended); ``memory``: the
    registered region (writable buffer) or None. ValueError for a read-only region.
    """

    def __init__(self, *, qpn: int, config, transport: Transport, events, memory):
        self.qpn, self.config, self.transport, self._events = qpn, config, transport, events
        self.dest_qpn = 0
        self.mpr_dest = QPAttr().mpr_dest
        self.bad_packets = 0
        self._mem = memoryview(memory).cast("B") if memory is not None else None
        if self._mem is not None and self._mem.readonly:
            raise ValueError("the registered memory region must be writable")
        self._rcv_cum = 0
        self._chunks: dict[int, int] = {}
        self._dirty: dict[int, tuple[int, int]] = {}   # chunk -> (ev, ts_ns) of latest arrival
        self._sack_pending = 0
        self._ack_deadline: float | None = None
        self._last_data_at = float("-inf")           # arrival time of the latest new data packet
        self._imm_heap: list[tuple[int, int]] = []    # (psn, imm) awaiting in-order delivery
        self._recvs: deque = deque()                 # posted receives (wr_id), oldest first
        self.max_wimm_dest = QPAttr().max_wimm_dest
        self.rx_no_recv = 0                          # WRITE_WITH_IMMs NACKed NO_PKT_BUFFER
        self._seq_err_sent = False
        self._ce_run: dict[int, tuple[int, int]] = {}  # EV -> (CE-marked arrivals in a row, _clean then)
        self._clean = 0                              # unmarked arrivals while some EV has a CE run
        self._above = 0                              # PSNs received above the cumulative PSN
        self._ctrl_out: list[tuple[bytes, int]] = []
        self.reverse_evs: dict[int, float] = {}
        self.reverse = ReverseEVs()
        self.rx_packets = 0
        self.rx_bytes = 0
        self.rx_duplicates = 0
        self.rx_ooo = 0
        self.rx_access_errors = 0
        self.rx_out_of_window = 0

    @property
    def rx_cum_psn(self) -> int:
        """Every PSN below this one has been received (responder view)."""
        return self._rcv_cum

    @rx_cum_psn.setter
    def rx_cum_psn(self, psn: int) -> None:
        """Start the receive window at ``psn`` (0..MAX_PSN + 1) before anything arrived above
        it: tests place a responder at the end of the PSN space."""
        if self._chunks or self._imm_heap or not 0 <= psn <= _MAX_PSN + 1:
            raise ValueError(f"rx_cum_psn={psn!r}: only 0..{_MAX_PSN + 1}, nothing held above it")
        self._rcv_cum = psn

    def on_data(self, data: bytes, now: float, ecn: bool) -> None:
        """One DATA datagram (``ecn``: its IP header carried CE)."""
        n = len(data)
        if n >= _PLAIN_BYTES:
            # Fast path: an in-window, non-trimmed packet without an immediate, fully
            # validated here (same checks as packet.unpack_data, CRC included).
            (ver, ptype, opcode, flags, qpn, psn, ev, off, length, ts) = _unpack_hdr(data)
            end = n - 4
            mem = self._mem
            if ver == _VERSION and ptype == _DATA and opcode in _PLAIN_OPCODES and not flags & _FAST_FLAGS_MASK and \
                    end - _HDR_BYTES == length and psn <= _MAX_PSN and qpn == self.qpn and \
                    mem is not None and off + length <= len(mem):
                mv = memoryview(data)
                if _crc32(mv[:end]) != _unpack_crc(data, end)[0]:
                    raise pk.ProtocolError("CRC mismatch")
                if psn != self._rcv_cum or self._chunks or self._imm_heap:
                    self._place(mv, psn, ev, off, length, ts, flags, None, now, ecn)
                    return
                # In order with nothing pending above it: _place without the bitmap work.
                self._rcv_cum = psn + 1
                self._seq_err_sent = False
                self.reverse_evs[ev] = now
                self.reverse.arrived(ev)
                mem[off:off + length] = mv[_HDR_BYTES:end]
                self.rx_packets += 1
                self.rx_bytes += length
                gap, self._last_data_at = now - self._last_data_at, now
                self._dirty[psn >> 6] = (ev, ts)
                self._sack_pending += 1
                if ecn:
                    self._ce_sack(ev, ts)
                    return
                if self._ce_run:
                    self._end_ce_run(ev)
                if flags & _ACK_NOW or self._sack_pending >= self.config.sack_every:
                    self._flush_sacks()
                elif self._ack_deadline is None:
                    self._ack_deadline = now + self._hold_s(gap)
                return
        (opcode, flags, qpn, psn, ev, off, length, ts, imm, start,
         end) = pk.unpack_data(data)
        if qpn != self.qpn:
            self.bad_packets += 1
            return
        if flags & pk.FLAG_TRIMMED:
            self.reverse_evs[ev] = now
            self.reverse.arrived(ev)
            self._nack(psn, ev, ts, pk.NackReason.TRIMMED_LASTHOP if flags & pk.FLAG_TRIMMED_LASTHOP
                       else pk.NackReason.TRIMMED)
            return
        mem = self._mem
        if mem is None or off + length > len(mem):
            if self._in_window(psn, ev, ts, now, flags & pk.FLAG_RTX):
                self.rx_access_errors += 1
                log.warning("qpn %d: write [%d, %d) outside the memory region", self.qpn, off,
                            off + length)
            return
        mv = memoryview(data)[start - _HDR_BYTES:]   # payload at _HDR_BYTES, like the fast path
        self._place(mv, psn, ev, off, length, ts, flags, imm, now, ecn)

    def counters(self) -> dict:
        """The responder's items of :meth:`agents.mrc.qp.QP.stats`."""
        return {"rx_packets": self.rx_packets, "rx_bytes": self.rx_bytes,
                "rx_duplicates": self.rx_duplicates, "rx_ooo": self.rx_ooo,
                "rx_cum_psn": self._rcv_cum, "rx_out_of_window": self.rx_out_of_window,
                "rx_access_errors": self.rx_access_errors, "rx_no_recv": self.rx_no_recv,
                "reverse_ev_marked_bad": self.reverse.marked_bad,
                "recvs_posted": len(self._recvs)}

    @property
    def memory(self) -> memoryview | None:
        """The registered region, as bytes (None for a send-only QP)."""
        return self._mem

    @property
    def deadline(self) -> float | None:
        """When a held SACK is due (the delayed-SACK timer), or None."""
        return self._ack_deadline

    def take_output(self) -> list[tuple[bytes, int]]:
        """The control packets queued since the last call, as (bytes, EV id)."""
        out, self._ctrl_out = self._ctrl_out, []
        return out

    def post_recv(self, wr_id: int) -> None:
        """Post one receive for a WRITE_WITH_IMM (mrc_post_recv); consumed oldest first."""
        self._recvs.append(wr_id)

    def stop(self, now: float = 0.0) -> None:
        """The QP entered ERR: drop queued output and the held SACK; posted receives complete
        with WR_FLUSH_ERR (verbs semantics)."""
        self._ctrl_out.clear()
        self._ack_deadline = None
        while self._recvs:
            self._events.append(WorkCompletion(now, self.qpn, WCOpcode.RECV_RDMA_WITH_IMM,
                                               WCStatus.WR_FLUSH_ERR, self._recvs.popleft()))

    def receive_batch(self, datagrams, now: float, slow, ce=None) -> None:
        """Process ``datagrams`` (bytes, in arrival order, the QP receiving in RTR or RTS, with a
        memory region) as the QP would one by one.

        The I/O adapter's batch path. In-order data packets (the common case: the next PSN,
        nothing pending above it, no immediate) are placed with the responder state held in
        locals; anything else goes to ``slow(data, now)`` (the QP's one-by-one dispatch,
        which returns False once the QP left the state it was in, e.g. ERR after a SACK)
        with the state written back first, so the result is identical to the one-by-one
        path (``tests/unit/test_mrc_qp_unit.py``). ``ce``: None, or one bool per datagram
        (its IP header carried CE); a marked one takes the one-by-one path,
        ``slow(data, now, True)``.
        """
        mem = self._mem
        memlen, qpn, sack_every = len(mem), self.qpn, self.config.sack_every
        rev, dirty, arrived = self.reverse_evs, self._dirty, self.reverse.arrived
        cum, pending, last = self._rcv_cum, self._sack_pending, self._last_data_at
        hold_gap = None      # the gap of the packet that starts a hold, until the hold is set
        packets = nbytes = 0
        clear = not self._chunks and not self._imm_heap
        ce_run = self._ce_run
        for i, data in enumerate(datagrams):
            n = len(data)
            marked = ce is not None and ce[i]
            if clear and not marked and n >= _PLAIN_BYTES and data[1] == _DATA:
                (ver, _, opcode, flags, dq, psn, ev, off, length, ts) = _unpack_hdr(data)
                end = n - 4
                if psn == cum and psn <= _MAX_PSN and ver == _VERSION and opcode in _PLAIN_OPCODES and \
                        not flags & _FAST_FLAGS_MASK and end - _HDR_BYTES == length and dq == qpn and \
                        off + length <= memlen:
                    mv = memoryview(data)
                    if _crc32(mv[:end]) == _unpack_crc(data, end)[0]:
                        cum = psn + 1
                        rev[ev] = now
                        arrived(ev)
                        mem[off:off + length] = mv[_HDR_BYTES:end]
                        packets += 1
                        nbytes += length
                        gap, last = now - last, now
                        dirty[psn >> 6] = (ev, ts)
                        pending += 1
                        if ce_run:
                            self._end_ce_run(ev)
                        if flags & _ACK_NOW or pending >= sack_every:
                            self._rcv_cum, self._sack_pending = cum, pending
                            self.rx_packets += packets
                            self.rx_bytes += nbytes
                            packets = nbytes = 0
                            self._seq_err_sent = False
                            self._flush_sacks()
                            pending, hold_gap = 0, None
                        elif hold_gap is None and self._ack_deadline is None:
                            hold_gap = gap
                        continue
            # anything else: the one-by-one path on the written-back state
            self._rcv_cum, self._sack_pending, self._last_data_at = cum, pending, last
            if hold_gap is not None:          # the hold the one-by-one path would have started
                self._ack_deadline, hold_gap = now + self._hold_s(hold_gap), None
            self.rx_packets += packets
            self.rx_bytes += nbytes
            if packets:
                self._seq_err_sent = False
            packets = nbytes = 0
            if not slow(data, now, marked):    # e.g. a SACK ended the QP in ERR: no fast path now
                for j in range(i + 1, len(datagrams)):
                    slow(datagrams[j], now, ce is not None and ce[j])
                return
            cum, pending, last = self._rcv_cum, self._sack_pending, self._last_data_at
            clear = not self._chunks and not self._imm_heap
        self._rcv_cum, self._sack_pending, self._last_data_at = cum, pending, last
        if packets:
            self.rx_packets += packets
            self.rx_bytes += nbytes
            self._seq_err_sent = False
        if hold_gap is not None:
            self._ack_deadline = now + self._hold_s(hold_gap)

    def _in_window(self, psn: int, ev: int, ts: int, now: float, rtx: int = 0) -> bool:
        """Duplicate, beyond-the-bitmap and RC out-of-order handling; True if ``psn`` is new."""
        self.reverse_evs[ev] = now
        self.reverse.arrived(ev)
        cum = self._rcv_cum
        ch = psn >> 6
        if psn < cum or (self._chunks.get(ch, 0) >> (psn & 63)) & 1:
            self.rx_duplicates += 1
            if rtx:
                self.reverse.ack_lost(self.qpn)
            self._dirty[max(ch, cum >> 6)] = (ev, ts)
            self._flush_sacks()
            return False
        if psn >= cum + self.mpr_dest * 128:
            self.rx_out_of_window += 1
            self._nack(psn, ev, ts, pk.NackReason.PSN_OOR_WINDOW)
            return False
        if self.transport is Transport.RC and psn != cum:
            if not self._seq_err_sent:
                self._seq_err_sent = True
                self._nack(cum, ev, ts, pk.NackReason.SEQ_ERR)
            return False
        return True

    def _place(self, mv: memoryview, psn: int, ev: int, off: int, length: int, ts: int,
               flags: int, imm: int | None, now: float, ecn: bool) -> None:
        """Write a valid packet's payload (``mv[_HDR_BYTES:_HDR_BYTES + length]``) and ack it."""
        cum = self._rcv_cum
        chunks = self._chunks
        ch = psn >> 6
        if not self._in_window(psn, ev, ts, now, flags & pk.FLAG_RTX):
            return
        if imm is not None:
            held = len(self._imm_heap)            # accepted, each holding a posted receive
            if held >= len(self._recvs) or held >= self.max_wimm_dest:
                self.rx_no_recv += 1
                self._nack(psn, ev, ts, pk.NackReason.NO_PKT_BUFFER)
                return
        chunks[ch] = chunks.get(ch, 0) | (1 << (psn & 63))
        if psn == cum:
            self._seq_err_sent = False
            self._advance_cum()
            self._above -= self._rcv_cum - cum - 1
        else:
            self.rx_ooo += 1
            self._above += 1
        self._mem[off:off + length] = mv[_HDR_BYTES:_HDR_BYTES + length]
        self.rx_packets += 1
        self.rx_bytes += length
        gap, self._last_data_at = now - self._last_data_at, now
        if imm is not None:
            heapq.heappush(self._imm_heap, (psn, imm))
        if self._imm_heap:
            self._deliver_imms(now)
        self._dirty[ch] = (ev, ts)
        self._sack_pending += 1
        if ecn:
            self._ce_sack(ev, ts)
            return
        if self._ce_run:
            self._end_ce_run(ev)
        if flags & _ACK_NOW or self._sack_pending >= self.config.sack_every:
            self._flush_sacks()
        elif self._ack_deadline is None:
            self._ack_deadline = now + self._hold_s(gap)

    def _hold_s(self, gap: float) -> float:
        """How long to hold a SACK whose first packet came ``gap`` s after the previous new data
        packet: ``ack_coalesce_s`` while packets come at most that far apart (when it is the
        longer of the two), else ``ack_delay_s`` (module docstring)."""
        cfg = self.config
        coalesce = cfg.ack_coalesce_s
        return coalesce if gap <= coalesce and coalesce > cfg.ack_delay_s else cfg.ack_delay_s

    def _advance_cum(self) -> None:
        c = self._rcv_cum
        chunks = self._chunks
        while True:
            ch = c >> 6
            bits = chunks.get(ch, 0) >> (c & 63)
            if not bits & 1:
                break
            ones = (bits ^ (bits + 1)).bit_length() - 1
            c += ones
            if c & 63:
                break
            del chunks[ch]
        self._rcv_cum = c

    def _deliver_imms(self, now: float) -> None:
        """WRITE_WITH_IMM completions, in PSN order, for every immediate below the cum PSN."""
        heap = self._imm_heap
        c = self._rcv_cum
        while heap and heap[0][0] < c:
            psn, imm = heapq.heappop(heap)
            self._events.append(WorkCompletion(now, self.qpn, WCOpcode.RECV_RDMA_WITH_IMM,
                                               WCStatus.SUCCESS, self._recvs.popleft(), 0, imm, psn))

    def _nack(self, psn: int, ev: int, ts: int, reason: pk.NackReason) -> None:
        self._ctrl_out.append((pk.encode(pk.NackPacket(self.dest_qpn, psn, ev, ts, reason)),
                               self.reverse.choose(ev)))

    def _end_ce_run(self, ev: int) -> None:
        """An unmarked arrival on ``ev`` while some EV has a CE run (callers test that first)."""
        self._ce_run.pop(ev, None)
        self._clean += 1

    def _ce_sack(self, ev: int, ts: int) -> None:
        """A CE-marked packet (EV ``ev``, stamp ``ts``) just placed: SACK now, echoing it."""
        run, start = self._ce_run.get(ev, (0, self._clean))
        self._ce_run[ev] = (run + 1, start)
        # ALWAYS_SKIP only for a path-specific run: other EVs delivered unmarked meanwhile. When
        # every path is marked (the last hop, an incast) skipping one helps nothing and only
        # unbalances the senders sharing it.
        always = run + 1 >= self.config.always_skip_ce_run and self._clean > start
        mode = _ALWAYS_SKIP if always else _SKIP_ONCE
        self._flush_sacks(ev, ts, mode)

    def _flush_sacks(self, ce_ev: int = -1, ce_ts: int = 0, ce_mode: int = 0) -> None:
        """Queue one SACK per dirty 64-PSN chunk (chunks below cum fold into one).

        ``ce_ev`` >= 0: the latest arrival was CE-marked; the SACK of its chunk echoes its EV
        and stamp ``ce_ts`` with ECN_ECHO and ``m`` = ``ce_mode``; the others carry no echo.
        """
        if not self._dirty:
            return
        cum = self._rcv_cum
        cum_ch = cum >> 6
        dirty = self._dirty
        if len(dirty) == 1:
            ((ch, evts),) = dirty.items()
            per_chunk = {max(ch, cum_ch): evts}
        else:
            per_chunk = {}
            for ch, evts in sorted(dirty.items()):
                per_chunk[max(ch, cum_ch)] = evts
            if ce_ev >= 0:             # the marked arrival's echo wins its folded chunk
                for ch, evts in dirty.items():
                    if evts == (ce_ev, ce_ts):
                        per_chunk[max(ch, cum_ch)] = evts
        chunks, out, dest, ooo, nbytes = self._chunks, self._ctrl_out, self.dest_qpn, self._above, \
            self.rx_bytes
        for ch, (ev, ts) in per_chunk.items():
            if ev == ce_ev and ts == ce_ts:
                flags, mode = pk.FLAG_ECN_ECHO, ce_mode
            else:
                flags = mode = 0
            pkt = _pack_sack(_VERSION, _SACK, mode, flags, dest, cum, ch << 6, chunks.get(ch, 0), ev, ts, ooo,
                             nbytes)
            out.append((pkt + _pack_crc(_crc32(pkt)), self.reverse.choose(ev)))
        dirty.clear()
        self._sack_pending = 0
        self._ack_deadline = None

    def on_probe_req(self, pkt: pk.ProbePacket) -> None:
        rsp = pk.ProbePacket(self.dest_qpn, pkt.probe_id, pkt.req_ev, pkt.rsp_ev,
                             pkt.timestamp_ns, response=True)
        self._ctrl_out.append((pk.encode(rsp), pkt.rsp_ev))

    def on_timer(self, now: float) -> None:
        """Send the held SACKs if their hold is over."""
        if self._ack_deadline is not None and self._ack_deadline <= now:
            self._flush_sacks()
