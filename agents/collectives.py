"""nccl-tests' collectives, sans-I/O, on float32 numpy buffers.

One :class:`Workload` per rank runs nccl-tests' loop (per size: warmup, then
timed iterations) of one of :data:`COLLECTIVES`. The caller owns the I/O:
``post(Send)`` is an RDMA WRITE_WITH_IMM of ``data`` at ``remote_offset`` of
``Send.peer``'s receive region; the caller reports
``on_arrival(src_rank, imm, now)`` when a write has fully landed and
``on_send_complete(peer, imm, now)`` when the peer has acknowledged one.

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

Sizes are nccl-tests' ``size`` column: all_reduce the buffer; all_gather the
output (``n`` chunks); reduce_scatter the input (``n`` chunks); all_to_all the
send buffer of a rank; permutation the bytes a rank sends. Bus bandwidth
(nccl-tests ``doc/PERFORMANCE.md``): ``algbw = size / time``, ``busbw = algbw *``
:func:`bus_factor` (all_reduce ``2(n-1)/n``; all_gather, reduce_scatter and
all_to_all ``(n-1)/n``; permutation 1, nccl-tests' sendrecv factor).

An iteration ends when every arrival has been consumed and, for permutation,
the rank's own write is complete. Iteration numbers run on across sizes.

Immediate (:func:`encode_imm`, u32): ``seq`` (10 bits: iteration mod
:data:`SEQ_MOD`) | ``step`` (11 bits) | ``chunk`` (11 bits), hence at most
:data:`MAX_WORLD_SIZE` ranks. An arrival that is not due yet (from a sender
already in a later iteration, or a later step on a channel that reorders) is
copied out of its slot when announced and replayed when due. An arrival the
rank cannot expect (sender, step or chunk wrong, a duplicate, after the end)
raises :class:`CollectiveError`.

Receive region: one per rank, written by all its senders. The stride is the
largest chunk of the largest size (permutation: the largest size), one layout
for every size of the sweep. Slot of the write of iteration ``i``, step ``s``,
from ``src`` to ``r``: all_reduce ``s`` (``2(n-1)`` slots); all_gather and
reduce_scatter ``(i%2)(n-1) + s`` (``2(n-1)``); all_to_all
``(i%2)(n-1) + (src-r-1) % n`` (``2(n-1)``); permutation ``i%2`` (2). A slot is
written again only after the receiver consumed (or copied out) what it held:

* rings: with steps counted across iterations, a write of step ``G`` is posted
  after the sender consumed ``G-1``, which needed its predecessor to consume
  ``G-2``, ... so the receiver consumed ``G-n``. A slot is reused ``2(n-1) >= n``
  steps later.
* all_to_all: ``src`` writes slot ``(src, i%2)`` again in iteration ``i+2``, after
  finishing ``i+1``, which needed ``r``'s write of ``i+1``, which ``r`` posts after
  finishing ``i``, i.e. after consuming ``src``'s write of ``i``.
* permutation: only completions gate a sender. ``src`` posts ``i+2`` after its
  write of ``i+1`` completed, so slot ``i%2`` is safe if write ``i`` is announced
  at ``r`` before write ``i+2`` lands there. That holds when a write is reported
  complete only after the receiver announced it (the in-memory harness), or when
  the receiver's channel announces each write of a sender before placing that
  sender's later data (TCP: completion is the kernel's ACK, but the stream is read
  in order; RDMA: the responder queues the receive completion before it
  acknowledges, and the channel hands completions to the Workload before it
  handles later packets). In a cycle of ``L`` ranks a sender runs at most
  ``L-1 < SEQ_MOD`` iterations ahead; the receiver holds copies of those writes.

Data and check (nccl-tests style): rank data are integer-valued float32 in
[-8, 8] from ``np.random.default_rng((seed, rank, iteration))`` (a pattern of
:data:`DATA_PERIOD` elements, repeated), so every summation order gives the
exact sum, a result is bit-exact or wrong, and the expected result of any
collective costs ``O(n * DATA_PERIOD + count)``. all_gather's input is chunk
``r`` of that data. ``#wrong`` counts elements outside ``atol + rtol*|expected|``.
"""
from __future__ import annotations

import logging
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

log = logging.getLogger(__name__)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permutation")
DTYPE = np.float32
ELEMENT_BYTES = 4
DATA_MAX_ABS = 8
"""Rank data are integers in [-DATA_MAX_ABS, DATA_MAX_ABS]: sums exact in float32 for n < 2**20."""
DATA_PERIOD = 65521
"""Rank data repeat with this prime period (elements): a chunk misplaced by any offset that
is not a multiple of it is caught, and the expected result is cheap for any size."""
SEQ_BITS, STEP_BITS, CHUNK_BITS = 10, 11, 11
SEQ_MOD = 1 << SEQ_BITS
MAX_WORLD_SIZE = SEQ_MOD
"""2(n-1) steps fit STEP_BITS, n chunks CHUNK_BITS, and a permutation sender's lead SEQ_BITS."""
_RING = ("all_reduce", "all_gather", "reduce_scatter")


class CollectiveError(RuntimeError):
    """An arrival or completion the algorithm cannot expect (a peer's or channel's fault)."""


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


def encode_imm(seq: int, step: int, chunk: int) -> int:
    """u32 immediate: seq (iteration mod SEQ_MOD) << 22 | step << 11 | chunk. ValueError if out of range."""
    if not (0 <= seq < SEQ_MOD and 0 <= step < 1 << STEP_BITS and 0 <= chunk < 1 << CHUNK_BITS):
        raise ValueError(f"seq {seq} / step {step} / chunk {chunk} do not fit the immediate")
    return (seq << STEP_BITS | step) << CHUNK_BITS | chunk


def decode_imm(imm: int) -> tuple[int, int, int]:
    """(seq, step, chunk) of an immediate made by :func:`encode_imm`."""
    return imm >> (STEP_BITS + CHUNK_BITS), imm >> CHUNK_BITS & (1 << STEP_BITS) - 1, \
        imm & (1 << CHUNK_BITS) - 1


def bus_factor(collective: str, world_size: int) -> float:
    """busbw / algbw (nccl-tests doc/PERFORMANCE.md). ValueError: unknown collective, n < 1."""
    if collective not in COLLECTIVES or world_size < 1:
        raise ValueError(f"no bus factor for {collective!r} on {world_size} ranks")
    n = world_size
    return {"all_reduce": 2 * (n - 1) / n, "permutation": 1.0}.get(collective, (n - 1) / n)


def bus_bandwidth(size_bytes: int, time_s: float, world_size: int,
                  collective: str = "all_reduce") -> tuple[float, float]:
    """(algbw, busbw) in bytes/s: ``algbw = size_bytes / time_s``, busbw = algbw * bus_factor."""
    algbw = size_bytes / time_s if time_s > 0 else 0.0
    return algbw, algbw * bus_factor(collective, world_size)


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


def _pattern(seed: int, rank: int, iteration: int, count: int) -> np.ndarray:
    rng = np.random.default_rng((seed, rank, iteration))
    return rng.integers(-DATA_MAX_ABS, DATA_MAX_ABS + 1, size=min(count, DATA_PERIOD),
                        dtype=np.int8).astype(DTYPE)


def _periodic(pattern: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Elements [start, stop) of ``pattern`` repeated forever."""
    return np.resize(np.roll(pattern, -(start % pattern.size)), stop - start)


def rank_data(seed: int, rank: int, iteration: int, count: int) -> np.ndarray:
    """Deterministic input of ``rank`` for ``iteration``: float32[count], integers in [-8, 8].

    A random pattern of DATA_PERIOD elements seeded by (seed, rank, iteration),
    repeated: checking costs O(n * DATA_PERIOD + count), not O(n * count).
    """
    return np.resize(_pattern(seed, rank, iteration, count), count)


def _data_slice(seed: int, rank: int, iteration: int, count: int, start: int, stop: int) -> np.ndarray:
    return _periodic(_pattern(seed, rank, iteration, count), start, stop)


def _sum_slice(seed: int, iteration: int, world_size: int, count: int, start: int,
               stop: int) -> np.ndarray:
    total = np.zeros(min(count, DATA_PERIOD), dtype=DTYPE)
    for rank in range(world_size):
        total += _pattern(seed, rank, iteration, count)
    return _periodic(total, start, stop)


def expected_sum(seed: int, iteration: int, world_size: int, count: int) -> np.ndarray:
    """The exact all-reduce result: sum of every rank's :func:`rank_data` (float32[count])."""
    return _sum_slice(seed, iteration, world_size, count, 0, count)


def count_wrong(result: np.ndarray, expected: np.ndarray, *, rtol: float = 0.0,
                atol: float = 0.0) -> int:
    """#wrong (nccl-tests): elements with ``|result - expected| > atol + rtol*|expected|``.

    NaN counts as wrong. Raises ValueError when the shapes differ.
    """
    if result.shape != expected.shape:
        raise ValueError(f"result shape {result.shape} != expected {expected.shape}")
    ok = np.abs(result - expected) <= atol + rtol * np.abs(expected)
    return int(result.size - np.count_nonzero(ok))


def size_sweep(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """nccl-tests ``-b min -e max -f factor``: min, min*f, ... up to max (bytes)."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError("need 0 < min_bytes <= max_bytes and factor >= 2")
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
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

    def expected(self, seed: int) -> np.ndarray:
        it, n, count = self.iteration, self.n, self.count
        if self.kind == "all_gather":
            return np.concatenate([_data_slice(seed, c, it, count, a, b)
                                   for c, (a, b) in enumerate(self.bounds)])
        a, b = self.bounds[self.rank] if self.kind == "reduce_scatter" else (0, count)
        return _sum_slice(seed, it, n, count, a, b)


class _AllToAll(_Algo):
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

    def due(self, src: int, step: int) -> bool:
        return src in self.pending

    def consumed(self, src: int, step: int) -> bool:
        return src not in self.pending

    def consume(self, src: int, step: int, incoming: np.ndarray) -> list[Send]:
        self.out[src * self.block:(src + 1) * self.block] = incoming
        self.pending.discard(src)
        return []

    @property
    def received_all(self) -> bool:
        return not self.pending

    def result(self) -> np.ndarray:
        return self.out

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


_ALGOS = {"all_reduce": _Ring, "all_gather": _Ring, "reduce_scatter": _Ring,
          "all_to_all": _AllToAll, "permutation": _Permutation}


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
    nccl-tests (module docstring), rounded down to whole float32 elements; at
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
        least = 1 if self.collective == "permutation" else self.world_size
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
        if self.collective == "permutation":
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
        if self.collective == "permutation":
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

    def on_send_complete(self, peer: int, imm: int, now: float) -> None:
        """The write to ``peer`` with immediate ``imm`` is complete (landed, announced there).

        Ends a permutation iteration whose arrival is in; other collectives need no
        completions. CollectiveError for a completion of no outstanding write.
        """
        if self.collective != "permutation":
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
        wrong = count_wrong(algo.result(), algo.expected(self.seed), rtol=self.rtol)
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


def run_in_memory(world_size: int, sizes: Iterable[int], *, collective: str = "all_reduce",
                  targets: Sequence[int] | None = None, iterations: int = 1, warmup: int = 0,
                  seed: int = 0, corrupt: Callable[[int, Send], bytes] | None = None,
                  eager_placement: bool = False,
                  rng: random.Random | None = None) -> list[Workload]:
    """Run ``world_size`` Workloads joined by perfect in-memory channels; return them.

    ``targets`` (permutation) defaults to ``derangement(seed, world_size)``.
    ``corrupt(rank, send)`` may return replacement bytes for a write (tests).
    A sender's writes to one receiver arrive in the order posted; a write's
    completion is reported after the receiver's ``on_arrival`` returned. Without
    ``rng`` every event runs in the order it was queued; with ``rng`` the next
    event is a random one of the (sender, receiver) queues of arrivals and of
    completions, so senders interleave and completions lag arbitrarily.
    ``eager_placement``: the data lands in the peer's region when posted, long
    before the peer consumes the arrival (the worst case for slot reuse).
    """
    if collective == "permutation" and targets is None:
        targets = derangement(seed, world_size)
    queues: dict[tuple[str, int, int], deque] = {}     # (kind, sender, receiver) -> Sends
    order: deque = deque()                             # keys in queueing order (rng None)
    workloads: list[Workload] = []

    def push(kind: str, rank: int, send: Send) -> None:
        key = (kind, rank, send.peer)
        queues.setdefault(key, deque()).append(send)
        if rng is None:
            order.append(key)

    def place(rank: int, send: Send) -> None:
        data = corrupt(rank, send) if corrupt else send.data
        region = workloads[send.peer].recv_region
        region[send.remote_offset:send.remote_offset + len(data)] = np.frombuffer(data, dtype=np.uint8)

    for rank in range(world_size):
        def post(send: Send, rank=rank) -> None:
            if eager_placement:
                place(rank, send)
            push("arrive", rank, send)
        workloads.append(Workload(rank, world_size, list(sizes), iterations, warmup, seed, post,
                                  collective=collective, targets=targets))
    for w in workloads:
        w.start(0.0)
    clock = 0.0
    while queues:
        key = order.popleft() if rng is None else rng.choice(list(queues))
        kind, rank, peer = key
        send = queues[key].popleft()
        if not queues[key]:
            del queues[key]
        clock += 1e-6
        if kind == "arrive":
            if not eager_placement:
                place(rank, send)
            workloads[peer].on_arrival(rank, send.imm, clock)
            push("complete", rank, send)
        else:
            workloads[rank].on_send_complete(peer, send.imm, clock)
    return workloads
