"""Number and time formatting shared by the report tables and :mod:`testbed.metrics.trials`.

Every function takes None (and NaN/inf) and returns "-" for it, so a key missing from a
summary written by an older version renders as "-" instead of raising.
"""

from __future__ import annotations

import math


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def fmt_sig(x: float | None, sig: int = 3) -> str:
    """``x`` rounded to ``sig`` significant figures, never in scientific notation:
    4.73, 47.3, 473, 4730, 0.000473 (4.726 and 4.738 stay apart); "0" for zero."""
    if _missing(x):
        return "-"
    if x == 0:
        return "0"
    v = float(f"{x:.{sig}g}")
    decimals = max(0, sig - 1 - math.floor(math.log10(abs(v))))
    return f"{v:.{decimals}f}"


def fmt_s(x: float | None) -> str:
    """A duration in seconds: milliseconds to 3 significant figures below 1 s ("30.0 ms",
    "313 ms"), else seconds with 3 decimals ("3.310 s")."""
    if _missing(x):
        return "-"
    if abs(x) < 1:
        ms = fmt_sig(x * 1e3)
        return "1.000 s" if ms in ("1000", "-1000") else f"{ms} ms"
    return f"{x:.3f} s"


def fmt_num(x, spec: str = ".1f") -> str:
    """``format(x, spec)``; "-" for None/NaN."""
    return "-" if _missing(x) else format(x, spec)


def fmt_count(x) -> str:
    """A count (packets, bytes, elements) as a whole number: 12, 4096."""
    return "-" if _missing(x) else f"{x:.0f}"


def fmt_pct(fraction: float | None, sig: int | None = None) -> str:
    """A fraction (0..1) as a percentage: whole percent ("49%"), or ``sig`` significant
    figures ("94.3%")."""
    if _missing(fraction):
        return "-"
    return f"{fmt_sig(fraction * 100, sig)}%" if sig else f"{fraction * 100:.0f}%"


def fmt_rtts(x: float | None) -> str:
    """A duration in base RTTs to 2 significant figures: "2.4 RTT", "24 RTT"."""
    return "-" if _missing(x) else f"{fmt_sig(x, 2)} RTT"


def gb_per_s(bytes_per_s: float | None) -> str:
    """nccl-tests' GB/s (1e9 bytes/s) with at least 2 decimals, as nccl-tests prints, and at
    least 3 significant figures: emulated links run at Mbit/s, so a busbw of 590 kB/s must
    read 0.000590, not nccl-tests' 0.00."""
    if _missing(bytes_per_s):
        return "-"
    gb = bytes_per_s / 1e9
    if gb == 0:
        return "0.00"
    return f"{gb:.{max(2, 2 - math.floor(math.log10(abs(gb))))}f}"


def usec(seconds: float | None) -> str:
    """A time in microseconds as nccl-tests prints it (2 decimals below 10^4 us, 1 below
    10^5, else whole), without its exponent form for 8+ digits."""
    if _missing(seconds):
        return "-"
    us = seconds * 1e6
    return f"{us:.2f}" if us < 1e4 else f"{us:.1f}" if us < 1e5 else f"{us:.0f}"
