"""nccl-tests' collectives, sans-I/O, on float32 numpy buffers.

One :class:`Workload` per rank runs nccl-tests' loop (per size: warmup, then
timed iterations) of one of :data:`COLLECTIVES` (all_reduce, all_gather,
reduce_scatter, all_to_all, permutation, incast). The caller owns the I/O:
``post(Send)`` is an RDMA WRITE_WITH_IMM of ``data`` at ``remote_offset`` of
``Send.peer``'s receive region; the caller reports
``on_arrival(src_rank, imm, now)`` when a write has fully landed and
``on_send_complete(peer, imm, now)`` when the peer has acknowledged one.

Modules, one concern each:

* :mod:`.data`: rank data and expected results, ``#wrong``, the size sweep,
  the immediate encoding, bus factors (busbw / algbw).
* :mod:`.algorithms`: peers, derangement, chunk bounds, and per collective
  which chunk goes to whom, where it lands (receive-region layout and why a
  slot is never overwritten early) and what the receiver does with it.
* :mod:`.workload`: the per-rank state machine (:class:`Workload`,
  :class:`IterationResult`, :class:`CollectiveError`).
* :mod:`.memory`: :func:`run_in_memory`, Workloads joined in memory (tests).

Every name is re-exported here: import from ``agents.collectives``.
"""
from .algorithms import _ALGOS, Send, chunk_bounds, derangement, peers
from .data import (CHUNK_BITS, COLLECTIVES, COMPLETION_GATED, DATA_MAX_ABS, DATA_PERIOD, DTYPE, ELEMENT_BYTES,
                   MAX_WORLD_SIZE, SEQ_BITS, SEQ_MOD, STEP_BITS, bus_bandwidth, bus_factor, count_wrong,
                   decode_imm, encode_imm, expected_sum, rank_data, size_sweep)
from .memory import run_in_memory
from .workload import CollectiveError, IterationResult, Workload

__all__ = [
    "CHUNK_BITS", "COLLECTIVES", "COMPLETION_GATED", "CollectiveError", "DATA_MAX_ABS", "DATA_PERIOD", "DTYPE",
    "ELEMENT_BYTES", "IterationResult", "MAX_WORLD_SIZE", "SEQ_BITS", "SEQ_MOD", "STEP_BITS", "Send",
    "Workload", "bus_bandwidth", "bus_factor", "chunk_bounds", "count_wrong", "decode_imm",
    "derangement", "encode_imm", "expected_sum", "peers", "rank_data", "run_in_memory", "size_sweep",
    "_ALGOS",
]
