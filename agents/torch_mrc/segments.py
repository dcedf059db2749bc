"""The mrc backend's collectives as segments: each a ring algorithm over a bounded piece of the
caller's numpy buffer. No torch and no I/O here.

An op (:class:`Op`) is cut into ``n_segments`` segments; :meth:`Op.segment` makes segment ``j``
as an :class:`agents.collectives.algorithms._Algo` whose ``iteration`` is the segment's global
sequence number (its immediate's ``seq``, :func:`agents.collectives.encode_imm`) and whose
``buf`` is the data it works on; the :class:`agents.torch_mrc.sequencer.Sequencer` runs the
segments one after another. Every write goes to rank ``r+1`` and is at most ``stride`` bytes
(one receive slot):

* :class:`AllReduceOp`: the ring all-reduce (:class:`agents.collectives.algorithms._Ring`
  ``all_reduce``, ``2(n-1)`` steps: NCCL's ``src/device/all_reduce.h`` runRing shifted by one
  chunk; Patarasuk & Yuan 2009) on views of the caller's buffer, segments of at most
  ``n * stride`` bytes (chunks of at most ``stride``); a segment of fewer than ``n`` elements
  runs on a zero-padded copy. Sum in the buffer's dtype (integers wrap, as numpy's ``+=``).
* :class:`AllGatherOp`: the ring all-gather (``_Ring`` ``all_gather``, NCCL's
  ``src/device/all_gather.h`` runRing, ``n-1`` steps), segments of at most ``stride`` bytes
  of every rank's input; a barrier is an all-gather of one byte (:func:`barrier_op`).
* :class:`BroadcastOp` (:class:`_Chain`): NCCL's broadcast ring (``src/device/broadcast.h``
  runRing): the root's bytes go root -> root+1 -> ... -> root-1 in pieces of at most
  ``stride`` bytes, each forwarded as soon as it lands, :data:`CHAIN_PIECES` pieces per
  segment; then root-1 writes a one-byte token to the root (NCCL's last rank sends nothing).
  The token ends the segment at the root, so a root never runs more than a segment ahead of
  the chain (a sequence number in flight stays far from wrapping) and a broadcast that has
  completed at the root has reached every rank.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..collectives.algorithms import Send, _Algo, _Ring

CHAIN_PIECES = 16
"""Pieces per broadcast segment: the chain's pipeline depth between two tokens."""
_TOKEN = np.zeros(1, dtype=np.uint8)


class Op:
    """One collective on this rank. ``name`` for messages; ``n_segments`` (0: nothing to move,
    the op completes once every earlier op has); ``on_done(exc)`` is called once, with None
    on success or the exception that failed it (:meth:`complete`)."""

    name = "op"

    def __init__(self, on_done: Callable[[BaseException | None], None]):
        self.on_done = on_done
        self.done = False
        self.n_segments = 0

    def segment(self, j: int, seq: int, rank: int, n: int) -> _Algo:
        """Segment ``j`` (0 <= j < n_segments) as an algorithm whose immediates carry ``seq``."""
        raise NotImplementedError

    def segment_done(self, j: int, algo: _Algo) -> None:
        """Segment ``j`` has received everything: copy its result where it belongs."""

    def complete(self, exc: BaseException | None) -> None:
        """Finish the op (idempotent): ``on_done(exc)``."""
        if not self.done:
            self.done = True
            self.on_done(exc)


def _split(count: int, most: int) -> tuple[int, int]:
    """(segments, elements per segment but the last) for ``count`` elements, at most ``most``
    each, the segments as equal as possible."""
    if count == 0:
        return 0, 0
    segs = math.ceil(count / most)
    return segs, math.ceil(count / segs)


class AllReduceOp(Op):
    """Sum ``arrays`` (1-D, equal size and dtype) over the ranks and over the list: every array
    ends with the total (Gloo's semantics for several tensors). ``stride``: the slot stride,
    bytes. ValueError for arrays that differ or are not 1-D contiguous."""

    name = "allreduce"

    def __init__(self, arrays: list[np.ndarray], n: int, stride: int, on_done):
        super().__init__(on_done)
        _check_same(arrays, self.name)
        self.flat, self.others = arrays[0], arrays[1:]
        for a in self.others:             # the local sum first (mutates arrays[0], the result's home)
            self.flat += a
        self.n_segments, self.seg = _split(self.flat.size, max(1, stride // self.flat.itemsize) * n)
        self._padded: dict[int, np.ndarray] = {}

    def _range(self, j: int) -> tuple[int, int]:
        a = j * self.seg
        return a, min(a + self.seg, self.flat.size)

    def segment(self, j, seq, rank, n):
        a, b = self._range(j)
        buf = self.flat[a:b]
        if b - a < n:                     # one element per chunk at least: pad with zeros
            buf = np.zeros(n, dtype=self.flat.dtype)
            buf[:b - a] = self.flat[a:b]
            self._padded[j] = buf
        algo = _Ring("all_reduce", rank, n, buf.size, 0, seq, None)
        algo.buf = buf
        return algo

    def segment_done(self, j, algo):
        padded = self._padded.pop(j, None)
        if padded is not None:
            a, b = self._range(j)
            self.flat[a:b] = padded[:b - a]
        if j == self.n_segments - 1:
            for a in self.others:
                a[:] = self.flat


class AllGatherOp(Op):
    """Gather ``inp`` (1-D) of every rank into ``outs`` (``n`` 1-D arrays of ``inp``'s size and
    dtype, ``outs[c]`` gets rank ``c``'s). ValueError for mismatched arrays."""

    name = "allgather"

    def __init__(self, inp: np.ndarray, outs: list[np.ndarray], n: int, stride: int, on_done):
        super().__init__(on_done)
        if len(outs) != n:
            raise ValueError(f"{self.name}: {len(outs)} output arrays for {n} ranks")
        _check_same([inp, *outs], self.name)
        self.inp, self.outs = inp, outs
        self.n_segments, self.seg = _split(inp.size, max(1, stride // inp.itemsize))

    def _range(self, j: int) -> tuple[int, int]:
        a = j * self.seg
        return a, min(a + self.seg, self.inp.size)

    def segment(self, j, seq, rank, n):
        a, b = self._range(j)
        size = b - a
        buf = np.empty(n * size, dtype=self.inp.dtype)
        buf[rank * size:(rank + 1) * size] = self.inp[a:b]
        algo = _Ring("all_gather", rank, n, buf.size, 0, seq, None)
        algo.buf = buf
        return algo

    def segment_done(self, j, algo):
        a, b = self._range(j)
        size = b - a
        for c, out in enumerate(self.outs):
            out[a:b] = algo.buf[c * size:(c + 1) * size]


def barrier_op(n: int, on_done) -> AllGatherOp:
    """A barrier: an all-gather of one byte per rank, which ends on a rank only once every rank
    has entered it."""
    op = AllGatherOp(np.zeros(1, np.uint8), [np.zeros(1, np.uint8) for _ in range(n)], n, 1, on_done)
    op.name = "barrier"
    return op


class BroadcastOp(Op):
    """Copy ``data`` (1-D uint8: any dtype as bytes) of rank ``root`` into ``data`` of every
    rank, over :class:`_Chain` segments of :data:`CHAIN_PIECES` pieces of at most ``stride``
    bytes. ValueError for a bad root."""

    name = "broadcast"

    def __init__(self, data: np.ndarray, root: int, n: int, stride: int, on_done):
        super().__init__(on_done)
        if not 0 <= root < n:
            raise ValueError(f"{self.name}: root {root} is not a rank of {n}")
        _check_same([data], self.name)
        self.data, self.root, self.stride = data.view(np.uint8), root, stride
        self.n_segments, self.seg = _split(self.data.size, stride * CHAIN_PIECES)

    def segment(self, j, seq, rank, n):
        return _Chain(rank, n, self.root, self.data[j * self.seg:(j + 1) * self.seg], self.stride, seq)


class _Chain(_Algo):
    """One broadcast segment on one rank (module docstring): pieces ``0..P-1`` (step = chunk =
    the piece) down the chain from the root, then the token (step = chunk = ``P``, one byte)
    from root-1 to the root. Arrivals come from ``r-1`` only, in order."""

    def __init__(self, rank: int, n: int, root: int, buf: np.ndarray, piece_bytes: int, iteration: int):
        super().__init__("broadcast", rank, n, buf.size, piece_bytes, iteration, None)
        self.buf, self.root = buf, root
        self.pos = (rank - root) % n                  # 0: the root, n-1: the last of the chain
        self.pieces = [(a, min(a + piece_bytes, buf.size)) for a in range(0, buf.size, piece_bytes)]
        self.steps = len(self.pieces) + 1
        self.prev, self.next = (rank - 1) % n, (rank + 1) % n
        self.step = len(self.pieces) if self.pos == 0 else 0     # the arrival that is due

    def offset(self, src: int, dst: int, step: int) -> int:
        return 0                                      # the sequencer assigns the slot

    def recv_chunk(self, src: int, step: int) -> int | None:
        if src != self.prev:
            return None
        if self.pos == 0:
            return step if step == len(self.pieces) else None
        return step if 0 <= step < len(self.pieces) else None

    def recv_elems(self, chunk: int) -> int:
        if chunk == len(self.pieces):
            return 1
        a, b = self.pieces[chunk]
        return b - a

    def start(self) -> list[Send]:
        if self.pos != 0:
            return []
        return [self._send(self.next, j, j, self.buf[a:b]) for j, (a, b) in enumerate(self.pieces)]

    def due(self, src: int, step: int) -> bool:
        return step == self.step

    def consumed(self, src: int, step: int) -> bool:
        return step < self.step

    def consume(self, src: int, step: int, incoming: np.ndarray) -> list[Send]:
        self.step += 1
        if self.pos == 0:                             # the token: everyone has the segment
            return []
        a, b = self.pieces[step]
        self.buf[a:b] = incoming
        if self.pos < self.n - 1:
            return [self._send(self.next, step, step, self.buf[a:b])]
        if self.step == len(self.pieces):
            return [self._send(self.next, self.step, self.step, _TOKEN)]
        return []

    @property
    def received_all(self) -> bool:
        return self.step == self.steps if self.pos == 0 else self.step == len(self.pieces)


def _check_same(arrays: list[np.ndarray], name: str) -> None:
    first = arrays[0]
    for a in arrays:
        if a.ndim != 1 or not a.flags.c_contiguous or not a.flags.writeable:
            raise ValueError(f"{name}: arrays must be 1-D, contiguous and writeable")
        if a.size != first.size or a.dtype != first.dtype:
            raise ValueError(f"{name}: arrays of {a.size} {a.dtype} and {first.size} {first.dtype} differ")
