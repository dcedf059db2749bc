"""Rank data, expected results, the check, the size sweep, the immediate and bus factors.

Data and check (nccl-tests style): rank data are integer-valued float32 in
[-8, 8]: a pattern of :data:`DATA_PERIOD` elements from
``np.random.default_rng((seed, rank))``, rotated by :data:`ITERATION_SHIFT` elements per
iteration, repeated; so every summation order gives the exact sum, a result is bit-exact
or wrong, an iteration's data differ from the one before, and the expected result of any
collective costs ``O(DATA_PERIOD + count)`` once each rank's pattern is made. all_gather's input is chunk
``r`` of that data. ``#wrong`` counts elements outside ``atol + rtol*|expected|``.

Sizes are nccl-tests' ``size`` column: all_reduce the buffer; all_gather the
output (``n`` chunks); reduce_scatter the input (``n`` chunks); all_to_all the
send buffer of a rank; permutation the bytes a rank sends. Bus bandwidth
(nccl-tests ``doc/PERFORMANCE.md``): ``algbw = size / time``, ``busbw = algbw *``
:func:`bus_factor` (all_reduce ``2(n-1)/n``; all_gather, reduce_scatter and
all_to_all ``(n-1)/n``; permutation 1, nccl-tests' sendrecv factor).

Immediate (:func:`encode_imm`, u32): ``seq`` (10 bits: iteration mod
:data:`SEQ_MOD`) | ``step`` (11 bits) | ``chunk`` (11 bits), hence at most
:data:`MAX_WORLD_SIZE` ranks.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permutation", "incast")
#: Collectives whose iteration also waits for the rank's own writes to complete (nothing else
#: bounds how far a sender runs ahead of its receiver).
COMPLETION_GATED = ("permutation", "incast")
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
    """busbw / algbw (nccl-tests doc/PERFORMANCE.md). ``incast`` is not an nccl-tests collective:
    its factor n-1 makes busbw the rate into the root (n-1 senders' ``size`` each per iteration),
    comparable with the root's link. ValueError: unknown collective, n < 1."""
    if collective not in COLLECTIVES or world_size < 1:
        raise ValueError(f"no bus factor for {collective!r} on {world_size} ranks")
    n = world_size
    return {"all_reduce": 2 * (n - 1) / n, "permutation": 1.0, "incast": float(n - 1)}.get(collective, (n - 1) / n)


def bus_bandwidth(size_bytes: int, time_s: float, world_size: int,
                  collective: str = "all_reduce") -> tuple[float, float]:
    """(algbw, busbw) in bytes/s: ``algbw = size_bytes / time_s``, busbw = algbw * bus_factor."""
    algbw = size_bytes / time_s if time_s > 0 else 0.0
    return algbw, algbw * bus_factor(collective, world_size)

ITERATION_SHIFT = 40503
"""Elements a rank's pattern is rotated by from one iteration to the next (coprime with
DATA_PERIOD, a prime): a rotation costs ~1/8 of drawing a new pattern, and the all-reduce
result of an iteration is the rotated sum of the ranks' patterns."""
PATTERN_CACHE = 256
"""Patterns kept per process (256 KiB each: 64 MiB at most)."""
_PATTERNS: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
_TOTALS: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
_BASES: "OrderedDict[tuple, np.ndarray]" = OrderedDict()       # (seed, rank, period) -> unrotated
_BASE_TOTALS: "OrderedDict[tuple, np.ndarray]" = OrderedDict()  # (seed, world_size, period) -> sum
_PREFETCHED: dict[tuple, int] = {}   # (seed, iteration, world_size, period) -> ranks prefetched so far


def _pattern(seed: int, rank: int, iteration: int, count: int) -> np.ndarray:
    """The ``min(count, DATA_PERIOD)``-element pattern of (seed, rank, iteration), read-only
    and cached (every rank's is needed to check an all-reduce; a host runtime's agents
    share them)."""
    period = min(count, DATA_PERIOD)
    return _cached(_PATTERNS, (seed, rank, iteration, period),
                   lambda: _rotated(_base(seed, rank, period), iteration))


def _cached(cache: OrderedDict, key: tuple, make, limit: int = PATTERN_CACHE) -> np.ndarray:
    """``cache[key]``, made read-only by ``make()`` when absent; the oldest of more than
    ``limit`` entries is dropped."""
    out = cache.get(key)
    if out is None:
        out = cache[key] = make()
        out.flags.writeable = False
        if len(cache) > limit:
            cache.popitem(last=False)
    return out


def _base(seed: int, rank: int, period: int) -> np.ndarray:
    """Iteration 0's pattern of ``rank`` (``period`` elements, read-only, cached)."""
    return _cached(_BASES, (seed, rank, period), lambda: np.random.default_rng((seed, rank)).integers(
        -DATA_MAX_ABS, DATA_MAX_ABS + 1, size=period, dtype=np.int8).astype(DTYPE))


def _rotated(base: np.ndarray, iteration: int) -> np.ndarray:
    """``base`` rotated left by ``iteration`` * :data:`ITERATION_SHIFT` elements (a copy)."""
    p = base.size
    k = iteration * (ITERATION_SHIFT % p or 1) % p
    return np.concatenate((base[k:], base[:k]))


def prefetch(seed: int, iteration: int, world_size: int, count: int) -> bool:
    """Make at most one of ``iteration``'s patterns (ranks in order) that is not made yet;
    True if it made one. Called once per arrival, it spreads the patterns' cost (~0.2 ms
    for a rank's first, then a rotation) over an iteration instead of paying them all in the
    check at its end, where they would delay every timer of the loop."""
    period = min(count, DATA_PERIOD)
    key = (seed, iteration, world_size, period)
    rank = _PREFETCHED.get(key, 0)          # ranks below it are made (or were, and may be made again)
    while rank < world_size:
        made = (seed, rank, iteration, period) in _PATTERNS
        if not made:
            _pattern(seed, rank, iteration, count)
        rank += 1
        _PREFETCHED[key] = rank
        if len(_PREFETCHED) > 64:
            _PREFETCHED.pop(next(iter(_PREFETCHED)))
        if not made:
            return True
    return False


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
    return _periodic(pattern_total(seed, iteration, world_size, count), start, stop)


def pattern_total(seed: int, iteration: int, world_size: int, count: int) -> np.ndarray:
    """The sum of every rank's pattern of ``iteration`` (read-only, cached): one period of the
    all-reduce result."""
    period = min(count, DATA_PERIOD)

    def unrotated():
        t = np.zeros(period, dtype=DTYPE)
        for rank in range(world_size):
            t += _base(seed, rank, period)
        return t
    return _cached(_TOTALS, (seed, iteration, world_size, period),
                   lambda: _rotated(_cached(_BASE_TOTALS, (seed, world_size, period), unrotated), iteration),
                   limit=16)


def count_wrong_periodic(result: np.ndarray, period: np.ndarray, start: int) -> int:
    """#wrong (exact) of ``result`` against ``period`` repeated from element ``start`` (element
    ``j`` against ``period[(start + j) % len(period)]``), as :func:`count_wrong` of
    :func:`_periodic`'s expectation but without making it: one comparison per period."""
    p, n = period.size, result.size
    wrong, j, off = 0, 0, start % p
    while j < n:
        k = min(p - off, n - j)
        wrong += int(np.count_nonzero(result[j:j + k] != period[off:off + k]))
        j, off = j + k, 0
    return wrong


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
    if atol == 0.0 and rtol == 0.0:   # exact: one comparison, no temporaries (NaN != anything)
        return int(np.count_nonzero(result != expected))
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
