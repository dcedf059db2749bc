"""The nccl-tests loop of one rank, sans-I/O: :class:`Workload` and :class:`IterationResult`.

One :class:`Workload` per rank runs nccl-tests' loop (per size: warmup, then
timed iterations) of one of :data:`COLLECTIVES`. The caller owns the I/O:
``post(Send)`` is an RDMA WRITE_WITH_IMM of ``data`` at ``remote_offset`` of
``Send.peer``'s receive region; the caller reports
``on_arrival(src_rank, imm, now)`` when a write has fully landed and
``on_send_complete(peer, imm, now)`` when the peer has acknowledged one.

An iteration ends when every arrival has been consumed and, for permutation and
incast, the rank's own write is complete. Iteration numbers run on across sizes.

An arrival that is not due yet (from a sender already in a later iteration, or
a later step on a channel that reorders) is copied out of its slot when
announced and replayed when due. An arrival the rank cannot expect (sender,
step or chunk wrong, a duplicate, after the end) raises :class:`CollectiveError`.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .algorithms import _ALGOS, Send, _Algo, peers
from .data import (COMPLETION_GATED, DTYPE, ELEMENT_BYTES, SEQ_MOD, bus_bandwidth, decode_imm,
                   prefetch)

log = logging.getLogger(__package__)   # "agents.collectives", as before the split


class CollectiveError(RuntimeError):
    """An arrival or completion the algorithm cannot expect (a peer's or channel's fault)."""


@dataclass(frozen=True)
class IterationResult:
    """One timed collective: ``t_start``/``t_end`` on the caller's clock (seconds)."""

    size_bytes: int
    iteration: int
    warmup: bool
    t_start: float
    t_end: float
    wrong: int

    @property
    def seconds(self) -> float:
        return self.t_end - self.t_start


PREFETCHED = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
"""Collectives whose check needs every rank's pattern (see :meth:`Workload._prefetch`)."""


@dataclass
class Workload:
    """The nccl-tests loop for one rank: for each size, ``warmup`` then ``iterations`` collectives.

    Sans-I/O: ``post(send)`` is called for every write (to ``send.peer``);
    feed :meth:`on_arrival` and :meth:`on_send_complete`; each finished
    iteration is passed to ``report(IterationResult)``. ``recv_region``: the
    uint8 array every sender writes into (at least :meth:`recv_region_bytes`;
    allocated if None). ``clock`` (optional, seconds): read for ``t_start``
    after the input is generated and for ``t_end`` before the check, so neither
    is timed (otherwise the ``now`` arguments are used). ``size_bytes`` as
    nccl-tests (:mod:`.data`), rounded down to whole float32 elements; at
    least ``world_size`` elements (permutation: one). ``targets``: permutation
    only, a derangement of range(world_size). ValueError for bad arguments.
    """

    rank: int
    world_size: int
    sizes_bytes: list[int]
    iterations: int
    warmup: int
    seed: int
    post: Callable[[Send], None]
    report: Callable[[IterationResult], None] = lambda r: None
    rtol: float = 0.0
    recv_region: np.ndarray | None = None
    clock: Callable[[], float] | None = None
    collective: str = "all_reduce"
    targets: Sequence[int] | None = None
    results: list[IterationResult] = field(default_factory=list)

    def __post_init__(self):
        self.send_to, self.recv_from = peers(self.collective, self.rank, self.world_size,
                                             self.targets)
        if self.iterations < 1 or self.warmup < 0 or not self.sizes_bytes:
            raise ValueError("need iterations >= 1, warmup >= 0 and at least one size")
        least = 1 if self.collective in COMPLETION_GATED else self.world_size
        for size in self.sizes_bytes:
            if size // ELEMENT_BYTES < least:
                raise ValueError(f"size {size} bytes: {self.collective} on {self.world_size} "
                                 f"ranks needs at least {least} float32 elements")
        self._plan = [(size, i < self.warmup) for size in self.sizes_bytes
                      for i in range(self.warmup + self.iterations)]
        if self.recv_region is None:
            self.recv_region = np.zeros(self.recv_region_bytes(), dtype=np.uint8)
        elif (self.recv_region.dtype != np.uint8 or self.recv_region.ndim != 1
              or self.recv_region.size < self.recv_region_bytes()):
            raise ValueError(f"recv_region must be 1-D uint8 of at least {self.recv_region_bytes()} bytes")
        self._index = -1
        self._algo: _Algo | None = None
        self._held: dict[tuple[int, int, int], np.ndarray] = {}   # (iteration, src, step) -> data
        self._unacked: set[tuple[int, int]] = set()                 # permutation: (peer, imm)
        self._t_start = 0.0
        self.done = False

    def slot_size_bytes(self) -> int:
        """The one slot stride of the sweep: the largest chunk of the largest size."""
        count = max(self.sizes_bytes) // ELEMENT_BYTES
        if self.collective in COMPLETION_GATED:     # whole buffers
            return ELEMENT_BYTES * count
        return ELEMENT_BYTES * math.ceil(count / self.world_size)

    def recv_region_bytes(self) -> int:
        """Bytes of receive region the sweep needs: 2 slots (permutation) or 2(n-1)."""
        slots = 2 if self.collective == "permutation" else 2 * (self.world_size - 1)
        return slots * self.slot_size_bytes()

    def _make(self, iteration: int) -> _Algo:
        count = self._plan[iteration][0] // ELEMENT_BYTES
        return _ALGOS[self.collective](self.collective, self.rank, self.world_size, count,
                                       self.slot_size_bytes(), iteration, self.targets)

    def start(self, now: float) -> None:
        """Begin the first iteration (then replay arrivals that came before the start)."""
        if self._index != -1:
            raise ValueError("start() called twice")
        self._next(now)
        self._advance(now)

    def _next(self, now: float) -> None:
        self._index += 1
        if self._index == len(self._plan):
            self.done, self._algo = True, None
            return
        algo = self._make(self._index)
        algo.prepare(self.seed)
        self._algo = algo
        self._t_start = self.clock() if self.clock else now
        for send in algo.start():
            self._post(send)

    def _post(self, send: Send) -> None:
        if self.collective in COMPLETION_GATED:
            self._unacked.add((send.peer, send.imm))
        self.post(send)

    def on_arrival(self, src_rank: int, imm: int, now: float) -> None:
        """A write from ``src_rank`` with immediate ``imm`` has fully landed in the region.

        Consumed at once if due, else copied out and replayed when due. Raises
        CollectiveError for an arrival this rank cannot expect.
        """
        seq, step, chunk = decode_imm(imm)
        base = max(self._index, 0)
        it = base + (seq - base) % SEQ_MOD
        if self.done or it >= len(self._plan):
            raise CollectiveError(f"rank {self.rank}: arrival from rank {src_rank} (seq {seq}, "
                                  f"step {step}, chunk {chunk}) after the last iteration")
        algo = self._algo if it == self._index else self._make(it)
        current = algo is self._algo
        if (src_rank not in self.recv_from or algo.recv_chunk(src_rank, step) != chunk
                or (it, src_rank, step) in self._held or (current and algo.consumed(src_rank, step))):
            raise CollectiveError(
                f"rank {self.rank} ({self.collective}, iteration {self._index}): unexpected arrival "
                f"from rank {src_rank}: iteration {it}, step {step}, chunk {chunk}")
        off = algo.offset(src_rank, self.rank, step)
        incoming = self.recv_region[off:off + algo.recv_elems(chunk) * ELEMENT_BYTES].view(DTYPE)
        if current and algo.due(src_rank, step):
            for send in algo.consume(src_rank, step, incoming):
                self._post(send)
        else:
            self._held[(it, src_rank, step)] = incoming.copy()
        self._advance(now)
        self._prefetch()

    def _prefetch(self) -> None:
        """Make one more of the patterns the check of this iteration (else the next) needs
        (:func:`agents.collectives.data.prefetch`): every rank's, for the collectives whose
        expected result involves them all."""
        if self.collective not in PREFETCHED or self.done:
            return
        for it in (self._index, self._index + 1):
            if 0 <= it < len(self._plan) and prefetch(self.seed, it, self.world_size,
                                                      self._plan[it][0] // ELEMENT_BYTES):
                return

    def on_send_complete(self, peer: int, imm: int, now: float) -> None:
        """The write to ``peer`` with immediate ``imm`` is complete (landed, announced there).

        Ends a permutation iteration whose arrival is in; other collectives need no
        completions. CollectiveError for a completion of no outstanding write.
        """
        if self.collective not in COMPLETION_GATED:
            if peer not in self.send_to:
                raise CollectiveError(f"rank {self.rank}: completion for rank {peer}, not a peer")
            return
        if (peer, imm) not in self._unacked:
            raise CollectiveError(f"rank {self.rank}: completion of no outstanding write "
                                  f"(peer {peer}, imm {decode_imm(imm)})")
        self._unacked.discard((peer, imm))
        self._advance(now)

    def _advance(self, now: float) -> None:
        """Finish iterations that are complete and replay held arrivals that are due."""
        while self._algo is not None:
            algo = self._algo
            if algo.received_all and not self._unacked:
                self._finish(now)
                continue
            key = next((k for k in self._held
                        if k[0] == self._index and algo.due(k[1], k[2])), None)
            if key is None:
                return
            for send in algo.consume(key[1], key[2], self._held.pop(key)):
                self._post(send)

    def _finish(self, now: float) -> None:
        now = self.clock() if self.clock else now
        size, warm = self._plan[self._index]
        algo = self._algo
        wrong = algo.count_wrong(self.seed, self.rtol)
        if wrong:
            log.warning("rank %d: %s size %d iteration %d: %d wrong elements",
                        self.rank, self.collective, size, self._index, wrong)
        result = IterationResult(size, self._index, warm, self._t_start, now, wrong)
        self.results.append(result)
        self.report(result)
        self._next(now)

    def summary(self) -> dict:
        """Per size (timed iterations only): time avg/min/max (s), algbw/busbw (GB/s, 1e9), #wrong."""
        out = []
        for size in self.sizes_bytes:
            rs = [r for r in self.results if r.size_bytes == size and not r.warmup]
            if not rs:
                continue
            times = [r.seconds for r in rs]
            avg = sum(times) / len(times)
            algbw, busbw = bus_bandwidth(size, avg, self.world_size, self.collective)
            out.append({"size_bytes": size, "count": size // ELEMENT_BYTES, "iterations": len(rs),
                        "time_avg_s": avg, "time_min_s": min(times), "time_max_s": max(times),
                        "algbw_GBps": algbw / 1e9, "busbw_GBps": busbw / 1e9,
                        "wrong": sum(r.wrong for r in rs)})
        return {"collective": self.collective, "world_size": self.world_size, "sizes": out,
                "wrong": sum(r.wrong for r in self.results)}
