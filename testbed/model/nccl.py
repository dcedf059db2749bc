"""nccl-tests bandwidth conventions (doc/PERFORMANCE.md): algbw and busbw of a collective."""

from __future__ import annotations


def bus_factor(world_size: int, collective: str = "all_reduce") -> float:
    """Bus bandwidth factor of ``collective`` over ``world_size`` ranks (nccl-tests
    doc/PERFORMANCE.md: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
    permutation 1, as nccl-tests' sendrecv). ValueError if n < 1 or the collective is unknown."""
    from agents.collectives import bus_factor as factor
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return factor(collective, world_size)


def bandwidths(size_bytes: int, time_s: float, world_size: int, collective: str = "all_reduce") -> dict:
    """algbw and busbw of a ``collective`` of ``size_bytes`` (nccl-tests' size: see
    :mod:`agents.collectives`) taking ``time_s``: bytes/s and Mbit/s."""
    algbw = size_bytes / time_s if time_s > 0 else float("nan")
    busbw = algbw * bus_factor(world_size, collective)
    return {"algbw_bytes_per_s": algbw, "algbw_mbit_per_s": algbw * 8e-6,
            "busbw_bytes_per_s": busbw, "busbw_mbit_per_s": busbw * 8e-6}
