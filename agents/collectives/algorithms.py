"""Who sends which chunk to whom, where it lands, and what a rank does with it.

One :class:`_Algo` per (rank, iteration) of a collective (:data:`_ALGOS`):
geometry (peers, chunks, receive-region offsets) and, after ``prepare``, the
data state; the :class:`~agents.collectives.workload.Workload` drives it.

Algorithms (``n`` ranks, rank ``r``; a buffer of ``count`` float32 is cut in
``n`` chunks at ``np.array_split`` boundaries, :func:`chunk_bounds`: the first
``count % n`` chunks hold one element more):

* ``all_reduce``: ring (Patarasuk & Yuan 2009), ``2(n-1)`` steps, writes to
  ``r+1``. Reduce-scatter, ``s < n-1``: send chunk ``(r-s) % n``, receive
  ``(r-s-1) % n`` and add it. All-gather, ``s = n-1+k``: send ``(r+1-k) % n``,
  receive ``(r-k) % n`` and copy it. (NCCL's ring is the same shifted by one chunk.)
* ``reduce_scatter``: NCCL's ring (``src/device/reduce_scatter.h``, runRing),
  ``n-1`` steps: send chunk ``(r-s-1) % n``, receive ``(r-s-2) % n`` and add it;
  rank ``r`` ends with chunk ``r`` of the sum.
* ``all_gather``: NCCL's ring (``src/device/all_gather.h``), ``n-1`` steps: send
  chunk ``(r-s) % n`` (step 0: the rank's own input), receive ``(r-s-1) % n``, copy.
  In the three rings each send after step 0 forwards the previous step's arrival,
  so one write per step is posted as arrivals are consumed (one chunk per step,
  no pipelining).
* ``all_to_all``: one step; ``r`` posts its ``n-1`` writes at once, chunk ``p`` of
  its send buffer to rank ``p`` in the order ``r+1, r+2, ...`` (NCCL's p2p
  schedule, so not every rank starts with rank 0), and copies chunk ``r`` to
  itself. Output: ``n`` blocks of ``len(chunk r)``, block ``p`` from rank ``p``.
* ``permutation``: one step; ``r`` writes its whole buffer to ``targets[r]``
  (a derangement, :func:`derangement`) and receives the buffer of the rank
  that targets it: the Hedera/MPTCP permutation traffic matrix.
* ``incast``: one step; every rank but 0 writes its whole buffer to rank 0 at
  once (N-to-1, the MRC paper's incast shape, §5.2.8); rank 0's result is the
  ``n-1`` buffers in rank order.

Receive region: one per rank, written by all its senders. The stride is the
largest chunk of the largest size (permutation: the largest size), one layout
for every size of the sweep. Slot of the write of iteration ``i``, step ``s``,
from ``src`` to ``r``: all_reduce ``s`` (``2(n-1)`` slots); all_gather and
reduce_scatter ``(i%2)(n-1) + s`` (``2(n-1)``); all_to_all
``(i%2)(n-1) + (src-r-1) % n`` (``2(n-1)``); permutation ``i%2`` (2); incast
``(i%2)(n-1) + src-1`` at rank 0 (``2(n-1)``, stride the largest size). A slot is
written again only after the receiver consumed (or copied out) what it held:

* rings: with steps counted across iterations, a write of step ``G`` is posted
  after the sender consumed ``G-1``, which needed its predecessor to consume
  ``G-2``, ... so the receiver consumed ``G-n``. A slot is reused ``2(n-1) >= n``
  steps later.
* all_to_all: ``src`` writes slot ``(src, i%2)`` again in iteration ``i+2``, after
  finishing ``i+1``, which needed ``r``'s write of ``i+1``, which ``r`` posts after
  finishing ``i``, i.e. after consuming ``src``'s write of ``i``.
* permutation and incast: only completions gate a sender. ``src`` posts ``i+2`` after its
  write of ``i+1`` completed, so slot ``i%2`` is safe if write ``i`` is announced
  at ``r`` before write ``i+2`` lands there. That holds when a write is reported
  complete only after the receiver announced it (the in-memory harness), or when
  the receiver's channel announces each write of a sender before placing that
  sender's later data (TCP: completion is the kernel's ACK, but the stream is read
  in order; RDMA: the responder queues the receive completion before it
  acknowledges, and the channel hands completions to the Workload before it
  handles later packets). In a cycle of ``L`` ranks a sender runs at most
  ``L-1 < SEQ_MOD`` iterations ahead; the receiver holds copies of those writes.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .data import (COLLECTIVES, DTYPE, MAX_WORLD_SIZE, SEQ_MOD, _data_slice, _sum_slice, count_wrong,
                   count_wrong_periodic, encode_imm, pattern_total, rank_data)


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``data`` (bytes) at ``remote_offset`` bytes of rank ``peer``'s receive region.

    ``imm`` is the u32 immediate (:func:`encode_imm` of iteration seq, step, chunk).
    """

    peer: int
    step: int
    chunk: int
    data: bytes
    remote_offset: int
    imm: int



def derangement(seed: int, n: int) -> tuple[int, ...]:
    """Seeded permutation of range(n) with no fixed point: ``targets[r]`` is where r sends.

    Uniform over derangements (shuffles of ``random.Random(f"{seed}:permutation")``
    until none is fixed). ValueError if n < 2.
    """
    if n < 2:
        raise ValueError(f"a derangement needs n >= 2, got {n}")
    rng = random.Random(f"{seed}:permutation")
    while True:
        targets = list(range(n))
        rng.shuffle(targets)
        if all(t != r for r, t in enumerate(targets)):
            return tuple(targets)


def _check_world(collective: str, world_size: int, targets: Sequence[int] | None) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"collective {collective!r} is not one of {COLLECTIVES}")
    if not 2 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world size {world_size}: need 2 <= n <= {MAX_WORLD_SIZE}")
    if collective != "permutation":
        if targets is not None:
            raise ValueError(f"targets are for permutation, not {collective}")
    elif targets is None or sorted(targets) != list(range(world_size)) \
            or any(t == r for r, t in enumerate(targets)):
        raise ValueError(f"permutation targets {targets}: need a permutation of range({world_size}) "
                         "with no fixed point")


def peers(collective: str, rank: int, n: int,
          targets: Sequence[int] | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(send_to, recv_from) ranks of ``rank``, ascending. ValueError for bad arguments."""
    _check_world(collective, n, targets)
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} not in world of {n}")
    if collective == "all_to_all":
        others = tuple(p for p in range(n) if p != rank)
        return others, others
    if collective == "permutation":
        return (targets[rank],), (list(targets).index(rank),)
    if collective == "incast":
        return ((), tuple(range(1, n))) if rank == 0 else ((0,), ())
    return ((rank + 1) % n,), ((rank - 1) % n,)


def chunk_bounds(count: int, world_size: int) -> list[tuple[int, int]]:
    """[(start, stop)] element ranges of the ``world_size`` chunks of ``count`` elements."""
    base, extra = divmod(count, world_size)
    out, start = [], 0
    for c in range(world_size):
        stop = start + base + (1 if c < extra else 0)
        out.append((start, stop))
        start = stop
    return out



class _Algo:
    """One iteration of a collective on one rank: geometry (usable for any iteration, to
    validate and copy out early arrivals) and, after :meth:`prepare`, the data state.

    Subclasses define ``steps``, ``recv_chunk`` (the chunk an arrival from ``src`` at
    ``step`` carries, None if there is no such arrival), ``offset`` (byte offset of
    ``src``'s write in ``dst``'s region), ``recv_elems``, ``prepare``, ``start``, ``due``,
    ``consumed``, ``consume``, ``received_all``, ``result`` and ``expected``.
    """

    steps = 1

    def __init__(self, kind: str, rank: int, n: int, count: int, stride: int, iteration: int,
                 targets: Sequence[int] | None):
        self.kind, self.rank, self.n, self.count = kind, rank, n, count
        self.stride, self.iteration, self.parity = stride, iteration, iteration % 2
        self.bounds = chunk_bounds(count, n)

    def recv_elems(self, chunk: int) -> int:
        a, b = self.bounds[chunk]
        return b - a

    def count_wrong(self, seed: int, rtol: float = 0.0) -> int:
        """#wrong of this rank's result (nccl-tests; :func:`agents.collectives.data.count_wrong`)."""
        return count_wrong(self.result(), self.expected(seed), rtol=rtol)

    def _send(self, peer: int, step: int, chunk: int, data: np.ndarray) -> Send:
        return Send(peer, step, chunk, data.tobytes(), self.offset(self.rank, peer, step),
                    encode_imm(self.iteration % SEQ_MOD, step, chunk))


class _Ring(_Algo):
    """all_reduce, reduce_scatter, all_gather: one write per step to ``r+1``."""

    def __init__(self, *args):
        super().__init__(*args)
        self.steps = 2 * (self.n - 1) if self.kind == "all_reduce" else self.n - 1
        self.prev = (self.rank - 1) % self.n
        self.step = 0                                  # the step whose arrival is due

    def send_chunk(self, rank: int, step: int) -> int:
        n = self.n
        if self.kind == "reduce_scatter":
            return (rank - step - 1) % n
        if self.kind == "all_gather" or step < n - 1:
            return (rank - step) % n
        return (rank + 1 - (step - n + 1)) % n

    def recv_chunk(self, src: int, step: int) -> int | None:
        return self.send_chunk(src, step) if src == self.prev and 0 <= step < self.steps else None

    def offset(self, src: int, dst: int, step: int) -> int:
        slot = step if self.kind == "all_reduce" else self.parity * (self.n - 1) + step
        return slot * self.stride

    def prepare(self, seed: int) -> None:
        if self.kind == "all_gather":
            a, b = self.bounds[self.rank]
            self.buf = np.full(self.count, np.nan, dtype=DTYPE)
            self.buf[a:b] = _data_slice(seed, self.rank, self.iteration, self.count, a, b)
        else:
            self.buf = rank_data(seed, self.rank, self.iteration, self.count)

    def _send_step(self, step: int) -> Send:
        chunk = self.send_chunk(self.rank, step)
        a, b = self.bounds[chunk]
        return self._send((self.rank + 1) % self.n, step, chunk, self.buf[a:b])

    def start(self) -> list[Send]:
        return [self._send_step(0)]

    def due(self, src: int, step: int) -> bool:
        return step == self.step

    def consumed(self, src: int, step: int) -> bool:
        return step < self.step

    def consume(self, src: int, step: int, incoming: np.ndarray) -> list[Send]:
        a, b = self.bounds[self.send_chunk(src, step)]
        if self.kind == "reduce_scatter" or (self.kind == "all_reduce" and step < self.n - 1):
            self.buf[a:b] += incoming
        else:
            self.buf[a:b] = incoming
        self.step += 1
        return [self._send_step(self.step)] if self.step < self.steps else []

    @property
    def received_all(self) -> bool:
        return self.step == self.steps

    def result(self) -> np.ndarray:
        if self.kind == "reduce_scatter":
            a, b = self.bounds[self.rank]
            return self.buf[a:b]
        return self.buf

    def count_wrong(self, seed: int, rtol: float = 0.0) -> int:
        if rtol == 0.0 and self.kind != "all_gather":   # the sum is periodic: compare period by period
            a = self.bounds[self.rank][0] if self.kind == "reduce_scatter" else 0
            return count_wrong_periodic(self.result(), pattern_total(seed, self.iteration, self.n, self.count), a)
        return super().count_wrong(seed, rtol)

    def expected(self, seed: int) -> np.ndarray:
        it, n, count = self.iteration, self.n, self.count
        if self.kind == "all_gather":
            return np.concatenate([_data_slice(seed, c, it, count, a, b)
                                   for c, (a, b) in enumerate(self.bounds)])
        a, b = self.bounds[self.rank] if self.kind == "reduce_scatter" else (0, count)
        return _sum_slice(seed, it, n, count, a, b)


class _FromEach(_Algo):
    """A collective whose rank receives one write from each rank of ``pending`` (set in
    ``prepare``), each copied to its own block of ``out`` by :meth:`place`, in any order."""

    def due(self, src: int, step: int) -> bool:
        return src in self.pending

    def consumed(self, src: int, step: int) -> bool:
        return src not in self.pending

    def consume(self, src: int, step: int, incoming: np.ndarray) -> list[Send]:
        self.place(src, incoming)
        self.pending.discard(src)
        return []

    @property
    def received_all(self) -> bool:
        return not self.pending

    def result(self) -> np.ndarray:
        return self.out


class _AllToAll(_FromEach):
    """all_to_all: chunk p of the send buffer to rank p, all at once."""

    def recv_chunk(self, src: int, step: int) -> int | None:
        return self.rank if step == 0 and src != self.rank and 0 <= src < self.n else None

    def offset(self, src: int, dst: int, step: int) -> int:
        return (self.parity * (self.n - 1) + (src - dst - 1) % self.n) * self.stride

    def prepare(self, seed: int) -> None:
        self.send_buf = rank_data(seed, self.rank, self.iteration, self.count)
        self.block = self.recv_elems(self.rank)
        a, b = self.bounds[self.rank]
        self.out = np.full(self.n * self.block, np.nan, dtype=DTYPE)
        self.out[self.rank * self.block:(self.rank + 1) * self.block] = self.send_buf[a:b]
        self.pending = set(range(self.n)) - {self.rank}

    def start(self) -> list[Send]:
        sends = []
        for i in range(1, self.n):
            p = (self.rank + i) % self.n
            a, b = self.bounds[p]
            sends.append(self._send(p, 0, p, self.send_buf[a:b]))
        return sends

    def place(self, src: int, incoming: np.ndarray) -> None:
        self.out[src * self.block:(src + 1) * self.block] = incoming

    def expected(self, seed: int) -> np.ndarray:
        a, b = self.bounds[self.rank]
        return np.concatenate([_data_slice(seed, c, self.iteration, self.count, a, b)
                               for c in range(self.n)])


class _Permutation(_Algo):
    """permutation: the whole buffer to targets[r]; the buffer of the rank targeting r."""

    def __init__(self, *args):
        super().__init__(*args)
        targets = list(args[-1])
        self.dst, self.src = targets[self.rank], targets.index(self.rank)
        self.received = False

    def recv_chunk(self, src: int, step: int) -> int | None:
        return 0 if src == self.src and step == 0 else None

    def offset(self, src: int, dst: int, step: int) -> int:
        return self.parity * self.stride

    def recv_elems(self, chunk: int) -> int:
        return self.count

    def prepare(self, seed: int) -> None:
        self.send_buf = rank_data(seed, self.rank, self.iteration, self.count)
        self.out = np.full(self.count, np.nan, dtype=DTYPE)

    def start(self) -> list[Send]:
        return [self._send(self.dst, 0, 0, self.send_buf)]

    def due(self, src: int, step: int) -> bool:
        return not self.received

    def consumed(self, src: int, step: int) -> bool:
        return self.received

    def consume(self, src: int, step: int, incoming: np.ndarray) -> list[Send]:
        self.out[:] = incoming
        self.received = True
        return []

    @property
    def received_all(self) -> bool:
        return self.received

    def result(self) -> np.ndarray:
        return self.out

    def expected(self, seed: int) -> np.ndarray:
        return rank_data(seed, self.src, self.iteration, self.count)


class _Incast(_FromEach):
    """incast: every rank but 0 writes its whole buffer to rank 0; rank 0 receives n-1 buffers."""

    def recv_chunk(self, src: int, step: int) -> int | None:
        return 0 if self.rank == 0 and step == 0 and 0 < src < self.n else None

    def offset(self, src: int, dst: int, step: int) -> int:
        return (self.parity * (self.n - 1) + src - 1) * self.stride

    def recv_elems(self, chunk: int) -> int:
        return self.count

    def prepare(self, seed: int) -> None:
        self.send_buf = rank_data(seed, self.rank, self.iteration, self.count)
        self.pending = set(range(1, self.n)) if self.rank == 0 else set()
        self.out = np.full((self.n - 1) * self.count if self.rank == 0 else 0, np.nan, dtype=DTYPE)

    def start(self) -> list[Send]:
        return [] if self.rank == 0 else [self._send(0, 0, 0, self.send_buf)]

    def place(self, src: int, incoming: np.ndarray) -> None:
        self.out[(src - 1) * self.count:src * self.count] = incoming

    def expected(self, seed: int) -> np.ndarray:
        if self.rank:
            return np.empty(0, dtype=DTYPE)
        return np.concatenate([rank_data(seed, src, self.iteration, self.count) for src in range(1, self.n)])


_ALGOS = {"all_reduce": _Ring, "all_gather": _Ring, "reduce_scatter": _Ring,
          "all_to_all": _AllToAll, "permutation": _Permutation, "incast": _Incast}
