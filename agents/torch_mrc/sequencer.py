"""The mrc backend's sans-I/O core on one rank: ops' segments in order over one ring connection.

:class:`Sequencer` runs the segments of the submitted :class:`~agents.torch_mrc.segments.Op`\\ s
one after another (every rank submits the same ops in the same order, the c10d contract), so
segment ``i`` of the whole run has the same global index on every rank and its writes carry
``seq = i mod SEQ_MOD`` in their immediates (:func:`agents.collectives.encode_imm`). The caller
owns the I/O: ``post(Send)`` is a WRITE_WITH_IMM (OCP MRC 1.0, mrc.h) to rank ``r+1``; it reports
:meth:`Sequencer.on_arrival` for every write of rank ``r-1`` that has fully landed in
``region`` (in posting order, as a QP announces them) and :meth:`Sequencer.on_send_complete`
for every write of its own that ``r+1`` acknowledged (in posting order).

Receive slots: the region is ``2(n-1)`` slots of ``stride`` bytes; the k-th write on the
connection goes to slot ``k mod 2(n-1)``, whatever op it belongs to, and the sender posts write
``k`` only once write ``k - 2(n-1)`` is complete (credits). A write is complete once the
receiver's QP has acknowledged it, which it does after queueing the receive completion; the
receiver drains completions before it reads more datagrams (:mod:`agents.collectives.algorithms`,
"Receive region"), so a slot is announced, and consumed or copied out, before its next write
lands. (The collectives' own layouts, slot = step or (iteration mod 2)(n-1) + step, are safe for
one collective repeated, not for a mix of collectives of different step counts.)

Early arrivals (from a segment this rank has not started: rank ``r-1`` is ahead, or its op has
not even been submitted here yet) are copied out when announced and replayed when due, as
:meth:`agents.collectives.Workload.on_arrival` does; the copy is a whole slot, since the length
of a write is known only to its segment. (A segment ends on a rank with an arrival from ``r-1``,
and ``r-1`` writes nothing of segment ``i+1`` before this rank has taken its part in segment
``i``, so an early arrival belongs to a segment not submitted here yet.) An arrival this rank
cannot expect (wrong chunk, a duplicate, a sequence number from the past) raises
:class:`agents.collectives.CollectiveError`.

An op completes (``op.complete(None)``) when its last segment has received everything and every
write posted up to then is complete (the agent's ``workload.done and channel.idle``), in
submission order.
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Callable

import numpy as np

from ..collectives import SEQ_MOD, CollectiveError, decode_imm
from ..collectives.algorithms import Send, _Algo
from .segments import Op


class Sequencer:
    """Rank ``rank`` of ``n`` (module docstring). ``region``: the uint8 receive region (at least
    ``2(n-1) * stride`` bytes); ``post(send)``: hand a write (``send.remote_offset`` set to its
    slot) to the channel. ValueError for bad arguments."""

    def __init__(self, rank: int, n: int, stride: int, region: np.ndarray, post: Callable[[Send], None]):
        if n < 2 or not 0 <= rank < n:
            raise ValueError(f"rank {rank} of {n}: the ring needs n >= 2")
        self.rank, self.n, self.stride = rank, n, stride
        self.slots = 2 * (n - 1)
        if region.dtype != np.uint8 or region.ndim != 1 or region.size < self.slots * stride:
            raise ValueError(f"region must be 1-D uint8 of at least {self.slots * stride} bytes")
        self.region = region
        self._post_now = post
        self._plan: deque[tuple[Op, int | None]] = deque()   # segments not finished; [0] is current
        self._index = 0                                     # global index of _plan[0]
        self._algo: _Algo | None = None                     # _plan[0]'s, once started
        self._held: dict[tuple[int, int, int], tuple[int, np.ndarray]] = {}   # (index, src, step)
        self._arrivals = 0
        self.posted = 0
        self.completed = 0
        self._queued: deque[Send] = deque()                 # writes waiting for a credit
        self._acks: deque[tuple[Op, int]] = deque()         # (op, writes that must complete)

    # ---- ops ------------------------------------------------------------------------
    def submit(self, op: Op) -> None:
        """Queue ``op`` after every op submitted before (its segments get the next indices)."""
        if op.n_segments:
            self._plan.extend((op, j) for j in range(op.n_segments))
        else:
            self._plan.append((op, None))
        self._advance()

    @property
    def pending(self) -> int:
        """Ops submitted and not completed."""
        ops = {id(op) for op, _ in self._plan} | {id(op) for op, _ in self._acks}
        return len(ops)

    @property
    def idle(self) -> bool:
        """No op pending and every write complete."""
        return not self._plan and not self._acks and not self._queued and self.posted == self.completed

    def fail(self, exc: BaseException) -> None:
        """Complete every pending op with ``exc`` and forget them."""
        ops = [op for op, _ in self._acks] + [op for op, _ in self._plan]
        self._plan.clear()
        self._acks.clear()
        self._held.clear()
        self._algo = None
        for op in ops:
            op.complete(exc)

    # ---- the channel's callbacks ---------------------------------------------------------
    def on_arrival(self, src: int, imm: int) -> None:
        """Write ``imm`` of rank ``src`` (= r-1) has landed in the next slot: consume it if due,
        else copy it out. CollectiveError for an arrival this rank cannot expect."""
        off = (self._arrivals % self.slots) * self.stride
        self._arrivals += 1
        seq, step, chunk = decode_imm(imm)
        it = self._index + (seq - self._index) % SEQ_MOD
        where = f"rank {self.rank}: arrival from rank {src} (seq {seq}, step {step}, chunk {chunk})"
        if it - self._index >= SEQ_MOD // 2:
            raise CollectiveError(f"{where}: a segment this rank has finished (current {self._index})")
        if (it, src, step) in self._held:
            raise CollectiveError(f"{where}: a duplicate of segment {it}")
        algo = self._algo if it == self._index else None
        nbytes = self.stride if algo is None else self._length(algo, src, step, chunk, where)
        if algo is not None and algo.consumed(src, step):
            raise CollectiveError(f"{where}: a duplicate of segment {it}")
        raw = self.region[off:off + nbytes]
        if algo is not None and algo.due(src, step):
            self._consume(algo, src, step, raw)
        else:
            self._held[(it, src, step)] = (chunk, raw.copy())
        self._advance()

    def on_send_complete(self) -> None:
        """The oldest incomplete write has been acknowledged: post what waited for its slot and
        complete the ops whose writes are all complete."""
        self.completed += 1
        while self._queued and self.posted - self.completed < self.slots:
            self._send(self._queued.popleft())
        self._complete_acked()

    # ---- internals ---------------------------------------------------------------------
    def _length(self, algo: _Algo, src: int, step: int, chunk: int, where: str) -> int:
        if algo.recv_chunk(src, step) != chunk:
            raise CollectiveError(f"{where}: not an arrival of segment {algo.iteration} "
                                  f"({type(algo).__name__} {algo.kind})")
        nbytes = algo.recv_elems(chunk) * algo.buf.itemsize
        if nbytes > self.stride:
            raise CollectiveError(f"{where}: {nbytes} bytes do not fit a slot of {self.stride}")
        return nbytes

    def _consume(self, algo: _Algo, src: int, step: int, raw: np.ndarray) -> None:
        for send in algo.consume(src, step, raw.view(algo.buf.dtype)):
            self._post(send)

    def _post(self, send: Send) -> None:
        if not self._queued and self.posted - self.completed < self.slots:
            self._send(send)
        else:
            self._queued.append(send)

    def _send(self, send: Send) -> None:
        slot = self.posted % self.slots
        self.posted += 1
        self._post_now(replace(send, remote_offset=slot * self.stride))

    def _advance(self) -> None:
        """Start segments, replay held arrivals that are due, finish what has received all."""
        while self._plan:
            algo = self._algo
            if algo is None:
                op, j = self._plan[0]
                if j is None:
                    self._finish_segment()
                    continue
                algo = self._algo = op.segment(j, self._index, self.rank, self.n)
                for send in algo.start():
                    self._post(send)
            if algo.received_all:
                self._finish_segment()
                continue
            key = next((k for k in self._held if k[0] == self._index and algo.due(k[1], k[2])), None)
            if key is None:
                return
            chunk, data = self._held.pop(key)
            where = f"rank {self.rank}: held arrival from rank {key[1]} (step {key[2]}, chunk {chunk})"
            nbytes = self._length(algo, key[1], key[2], chunk, where)
            self._consume(algo, key[1], key[2], data[:nbytes])

    def _finish_segment(self) -> None:
        op, j = self._plan.popleft()
        if j is not None:
            op.segment_done(j, self._algo)
        self._algo = None
        self._index += 1
        if j is None or j == op.n_segments - 1:
            self._acks.append((op, self.posted + len(self._queued)))
            self._complete_acked()

    def _complete_acked(self) -> None:
        while self._acks and self.completed >= self._acks[0][1]:
            op, _ = self._acks.popleft()
            op.complete(None)
