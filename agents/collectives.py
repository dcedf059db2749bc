"""Ring all-reduce (reduce-scatter then all-gather), sans-I/O, on float32 numpy buffers.

The algorithm (NCCL's ring; Patarasuk & Yuan 2009): ``n`` ranks in a ring,
rank ``r`` writes only to ``r+1`` and receives only from ``r-1``. The
buffer of ``count`` float32 elements is split into ``n`` chunks
(``np.array_split`` boundaries: the first ``count % n`` chunks hold one
element more). Step ``s`` of the ``2(n-1)`` steps:

* reduce-scatter, ``s < n-1``: send chunk ``(r - s) % n``; receive chunk
  ``(r - s - 1) % n`` and add it into the local buffer;
* all-gather, ``s = n-1+k``: send chunk ``(r + 1 - k) % n``; receive chunk
  ``(r - k) % n`` and copy it into the local buffer.

Every send after step 0 depends on the previous step's arrival, so the
algorithm is a small state machine: :meth:`RingAllReduce.start` returns
the step-0 :class:`Send`, :meth:`RingAllReduce.on_arrival` consumes one
arrival and returns the next Send (if any). A channel carries a Send as an
RDMA WRITE_WITH_IMM: ``data`` lands at ``remote_offset`` of the peer's
receive region, the immediate (:func:`encode_imm`: step and chunk) tells
the receiver which chunk arrived; arrivals are delivered in order.

Receive region layout (both sides derive it, nothing is negotiated): one
slot per step; step ``s`` lands at ``s * slot_size_bytes``, the stride
being the largest chunk of the largest size of the sweep (one layout for
every size). A slot is reused only ``2(n-1) >= n`` steps later, by which
time the ring dependency guarantees the receiver consumed it: a write of
global step G is posted only after the receiver finished step G - n.

Data and check (nccl-tests style): rank data is integer-valued float32 in
[-8, 8] drawn from ``np.random.default_rng((seed, rank, iteration))`` (a
pattern of DATA_PERIOD elements, repeated), so every summation order gives
the exact sum and a result is bit-exact or wrong. ``#wrong`` counts elements outside ``atol + rtol*|expected|``.
Bandwidths (nccl-tests, PERFORMANCE.md): ``algbw = size_bytes / time_s``,
``busbw = algbw * 2(n-1)/n`` for all-reduce.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

log = logging.getLogger(__name__)

DTYPE = np.float32
ELEMENT_BYTES = 4
DATA_MAX_ABS = 8
"""Rank data are integers in [-DATA_MAX_ABS, DATA_MAX_ABS]: sums exact in float32 for n < 2**20."""
DATA_PERIOD = 65521
"""Rank data repeat with this prime period (elements): a chunk misplaced by any offset that
is not a multiple of it is caught, and the expected sum is cheap for any size."""


class CollectiveError(RuntimeError):
    """An arrival the algorithm did not expect (wrong step/chunk, or none was due)."""


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``data`` (bytes) at ``remote_offset`` bytes of the next rank's receive region.

    ``imm`` is the 32-bit immediate (:func:`encode_imm` of step, chunk).
    """

    step: int
    chunk: int
    data: bytes
    remote_offset: int
    imm: int


def encode_imm(step: int, chunk: int) -> int:
    """Immediate of a ring write: step in the high 16 bits, chunk in the low 16 bits."""
    if not (0 <= step < 1 << 16 and 0 <= chunk < 1 << 16):
        raise ValueError(f"step {step} / chunk {chunk} do not fit 16 bits")
    return step << 16 | chunk


def decode_imm(imm: int) -> tuple[int, int]:
    """(step, chunk) of an immediate made by :func:`encode_imm`."""
    return imm >> 16, imm & 0xFFFF


def chunk_bounds(count: int, world_size: int) -> list[tuple[int, int]]:
    """[(start, stop)] element ranges of the ``world_size`` chunks of ``count`` elements."""
    base, extra = divmod(count, world_size)
    out, start = [], 0
    for c in range(world_size):
        stop = start + base + (1 if c < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def slot_bytes(count: int, world_size: int) -> int:
    """Bytes per receive slot: the largest chunk."""
    return ELEMENT_BYTES * math.ceil(count / world_size)


def recv_region_bytes(count: int, world_size: int) -> int:
    """Receive region size for one all-reduce of ``count`` elements: 2(n-1) slots."""
    return 2 * (world_size - 1) * slot_bytes(count, world_size)


def _pattern(seed: int, rank: int, iteration: int, count: int) -> np.ndarray:
    rng = np.random.default_rng((seed, rank, iteration))
    return rng.integers(-DATA_MAX_ABS, DATA_MAX_ABS + 1, size=min(count, DATA_PERIOD),
                        dtype=np.int8).astype(DTYPE)


def rank_data(seed: int, rank: int, iteration: int, count: int) -> np.ndarray:
    """Deterministic input of ``rank`` for ``iteration``: float32[count], integers in [-8, 8].

    A random pattern of DATA_PERIOD elements seeded by (seed, rank, iteration),
    repeated: checking costs O(n * DATA_PERIOD + count), not O(n * count).
    """
    return np.resize(_pattern(seed, rank, iteration, count), count)


def expected_sum(seed: int, iteration: int, world_size: int, count: int) -> np.ndarray:
    """The exact all-reduce result: sum of every rank's :func:`rank_data` (float32[count])."""
    total = np.zeros(min(count, DATA_PERIOD), dtype=DTYPE)
    for rank in range(world_size):
        total += _pattern(seed, rank, iteration, count)
    return np.resize(total, count)


def count_wrong(result: np.ndarray, expected: np.ndarray, *, rtol: float = 0.0,
                atol: float = 0.0) -> int:
    """#wrong (nccl-tests): elements with ``|result - expected| > atol + rtol*|expected|``.

    NaN counts as wrong. Raises ValueError when the shapes differ.
    """
    if result.shape != expected.shape:
        raise ValueError(f"result shape {result.shape} != expected {expected.shape}")
    ok = np.abs(result - expected) <= atol + rtol * np.abs(expected)
    return int(result.size - np.count_nonzero(ok))


def bus_bandwidth(size_bytes: int, time_s: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s for an all-reduce (nccl-tests: busbw = algbw * 2(n-1)/n)."""
    algbw = size_bytes / time_s if time_s > 0 else 0.0
    return algbw, algbw * 2 * (world_size - 1) / world_size


def size_sweep(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """nccl-tests ``-b min -e max -f factor``: min, min*f, ... up to max (bytes)."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError("need 0 < min_bytes <= max_bytes and factor >= 2")
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


class RingAllReduce:
    """One ring all-reduce on ``buffer`` (float32[count], reduced in place) for ``rank``.

    ``recv_region``: the uint8 array the previous rank writes into (at least
    :func:`recv_region_bytes`). ``slot_size_bytes``: the slot stride, at least
    :func:`slot_bytes` (default); a size sweep must use one stride for every
    size so that a fast sender's next size cannot overwrite a slot the
    receiver has not consumed. Raises ValueError for a bad rank/world, fewer
    elements than ranks or a too small region/stride; CollectiveError for an
    unexpected arrival.
    """

    def __init__(self, rank: int, world_size: int, buffer: np.ndarray, recv_region: np.ndarray,
                 *, slot_size_bytes: int | None = None):
        if world_size < 2 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of world {world_size}: need 0 <= rank < world >= 2")
        if buffer.dtype != DTYPE or buffer.ndim != 1:
            raise ValueError("buffer must be 1-D float32")
        count = buffer.size
        if count < world_size:
            raise ValueError(f"{count} elements cannot be split over {world_size} ranks")
        stride = slot_bytes(count, world_size) if slot_size_bytes is None else slot_size_bytes
        if stride < slot_bytes(count, world_size):
            raise ValueError(f"slot_size_bytes {stride} < largest chunk "
                             f"{slot_bytes(count, world_size)} bytes")
        if recv_region.dtype != np.uint8 or recv_region.size < 2 * (world_size - 1) * stride:
            raise ValueError("recv_region must be uint8 of at least 2(n-1) slots")
        self.rank, self.n, self.buffer = rank, world_size, buffer
        self.recv_region = recv_region
        self.bounds = chunk_bounds(count, world_size)
        self.slot_bytes = stride
        self.steps = 2 * (world_size - 1)
        self.step = 0          # the step whose arrival is awaited
        self.done = False

    def _send_chunk(self, step: int) -> int:
        r, n = self.rank, self.n
        return (r - step) % n if step < n - 1 else (r + 1 - (step - n + 1)) % n

    def _recv_chunk(self, step: int) -> int:
        r, n = self.rank, self.n
        return (r - step - 1) % n if step < n - 1 else (r - (step - n + 1)) % n

    def _make_send(self, step: int) -> Send:
        chunk = self._send_chunk(step)
        a, b = self.bounds[chunk]
        return Send(step, chunk, self.buffer[a:b].tobytes(), step * self.slot_bytes,
                    encode_imm(step, chunk))

    def start(self) -> Send:
        """The step-0 write (reduce-scatter of the rank's own chunk)."""
        return self._make_send(0)

    def on_arrival(self, imm: int) -> Send | None:
        """Consume the arrival announced by ``imm``; return the next write or None.

        Reduce-scatter arrivals are added into the buffer, all-gather arrivals
        copied. After the last arrival ``done`` is True and None is returned.
        """
        step, chunk = decode_imm(imm)
        if self.done or step != self.step or chunk != self._recv_chunk(step):
            raise CollectiveError(
                f"rank {self.rank}: arrival step {step} chunk {chunk}, expected "
                f"{'nothing' if self.done else (self.step, self._recv_chunk(self.step))}")
        a, b = self.bounds[chunk]
        off = step * self.slot_bytes
        incoming = self.recv_region[off:off + (b - a) * ELEMENT_BYTES].view(DTYPE)
        if step < self.n - 1:
            self.buffer[a:b] += incoming
        else:
            self.buffer[a:b] = incoming
        self.step += 1
        if self.step == self.steps:
            self.done = True
            return None
        return self._make_send(self.step)


@dataclass(frozen=True)
class IterationResult:
    """One timed all-reduce: ``t_start``/``t_end`` on the caller's clock (seconds)."""

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
    """The nccl-tests loop for one rank: for each size, ``warmup`` then ``iterations`` all-reduces.

    Sans-I/O: ``post(send)`` is called for every write to the next rank;
    feed arrivals with :meth:`on_arrival(imm, now)`; each finished
    iteration is passed to ``report(IterationResult)``. ``recv_region`` is
    the uint8 array the previous rank writes into (size
    :meth:`recv_region_bytes`). ``clock`` (optional, seconds): read for
    ``t_start`` after the input is generated and for ``t_end`` before the
    check, so neither is timed (otherwise the ``now`` arguments are used). Sizes are rounded down to whole float32
    elements; ``count >= world_size`` is required (ValueError otherwise).
    Iteration numbers run on across sizes so every all-reduce has fresh data.
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
    results: list[IterationResult] = field(default_factory=list)

    def __post_init__(self):
        if self.iterations < 1 or self.warmup < 0:
            raise ValueError("iterations must be >= 1 and warmup >= 0")
        for size in self.sizes_bytes:
            if size // ELEMENT_BYTES < self.world_size:
                raise ValueError(f"size {size} bytes has fewer float32 elements than "
                                 f"{self.world_size} ranks")
        self._plan = [(size, i < self.warmup) for size in self.sizes_bytes
                      for i in range(self.warmup + self.iterations)]
        if self.recv_region is None:
            self.recv_region = np.zeros(self.recv_region_bytes(), dtype=np.uint8)
        self._index = -1
        self._algo: RingAllReduce | None = None
        self._t_start = 0.0
        self._early: list[int] = []   # arrivals before start(): the peer started first
        self.done = False

    def slot_size_bytes(self) -> int:
        """The one slot stride of the sweep: the largest chunk of the largest size."""
        return slot_bytes(max(self.sizes_bytes) // ELEMENT_BYTES, self.world_size)

    def recv_region_bytes(self) -> int:
        """Bytes of receive region the sweep needs: 2(n-1) slots."""
        return 2 * (self.world_size - 1) * self.slot_size_bytes()

    def start(self, now: float) -> None:
        """Begin the first all-reduce (then replay arrivals that came before the start)."""
        self._next(now)
        early, self._early = self._early, []
        for imm in early:
            self.on_arrival(imm, now)

    def _next(self, now: float) -> None:
        self._index += 1
        if self._index == len(self._plan):
            self.done = True
            self._algo = None
            return
        size, _ = self._plan[self._index]
        count = size // ELEMENT_BYTES
        buffer = rank_data(self.seed, self.rank, self._index, count)
        self._algo = RingAllReduce(self.rank, self.world_size, buffer, self.recv_region,
                                   slot_size_bytes=self.slot_size_bytes())
        self._t_start = self.clock() if self.clock else now
        self.post(self._algo.start())

    def on_arrival(self, imm: int, now: float) -> None:
        """One write from the previous rank has fully landed (in order)."""
        if self._index == -1:
            self._early.append(imm)
            return
        if self._algo is None:
            raise CollectiveError(f"rank {self.rank}: arrival {decode_imm(imm)} with no "
                                  "all-reduce running")
        send = self._algo.on_arrival(imm)
        if send is not None:
            self.post(send)
            return
        if self._algo.done:
            self._finish(self.clock() if self.clock else now)

    def _finish(self, now: float) -> None:
        size, warm = self._plan[self._index]
        algo = self._algo
        expected = expected_sum(self.seed, self._index, self.world_size, algo.buffer.size)
        wrong = count_wrong(algo.buffer, expected, rtol=self.rtol)
        if wrong:
            log.warning("rank %d: size %d iteration %d: %d wrong elements",
                        self.rank, size, self._index, wrong)
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
            algbw, busbw = bus_bandwidth(size, avg, self.world_size)
            out.append({"size_bytes": size, "count": size // ELEMENT_BYTES, "iterations": len(rs),
                        "time_avg_s": avg, "time_min_s": min(times), "time_max_s": max(times),
                        "algbw_GBps": algbw / 1e9, "busbw_GBps": busbw / 1e9,
                        "wrong": sum(r.wrong for r in rs)})
        return {"world_size": self.world_size, "sizes": out,
                "wrong": sum(r.wrong for r in self.results)}


def run_in_memory(world_size: int, sizes_bytes: Iterable[int], *, iterations: int = 1,
                  warmup: int = 0, seed: int = 0,
                  corrupt: Callable[[int, Send], bytes] | None = None,
                  eager_placement: bool = False) -> list[Workload]:
    """Run ``world_size`` Workloads joined by perfect in-memory channels; return them.

    ``corrupt(rank, send)`` may return replacement bytes for a write (tests).
    Arrivals are delivered one at a time in FIFO order, like a real ring.
    ``eager_placement``: the data lands in the peer's region when posted,
    long before the peer consumes the arrival (the worst case for slot reuse).
    """
    from collections import deque
    queue: deque = deque()
    workloads: list[Workload] = []

    def place(rank: int, send: Send) -> None:
        data = corrupt(rank, send) if corrupt else send.data
        peer = workloads[(rank + 1) % world_size]
        peer.recv_region[send.remote_offset:send.remote_offset + len(data)] = \
            np.frombuffer(data, dtype=np.uint8)

    for rank in range(world_size):
        def post(send: Send, rank=rank) -> None:
            if eager_placement:
                place(rank, send)
            queue.append((rank, send))
        workloads.append(Workload(rank, world_size, list(sizes_bytes), iterations, warmup,
                                  seed, post))
    for w in workloads:
        w.start(0.0)
    clock = 0.0
    while queue:
        rank, send = queue.popleft()
        if not eager_placement:
            place(rank, send)
        clock += 1e-6
        workloads[(rank + 1) % world_size].on_arrival(send.imm, clock)
    return workloads
