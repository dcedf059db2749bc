"""Units, parsed once at spec time: rates, durations, sizes, percentages.

Nothing downstream of :mod:`testbed.spec` sees a unit string; it sees
``rate_bps`` (int, bits/s), ``*_s`` (float, seconds), ``*_bytes`` (int) and
``*_pct`` (float, percent 0..100).

Accepted forms (no space between number and unit; numbers are decimal,
optionally with a fractional part, never negative):

* rate: tc(8)'s bit-rate units, decimal and case-insensitive: ``bit``,
  ``kbit``, ``mbit``, ``gbit``, ``tbit`` (``20Mbit`` = 20_000_000 bit/s).
  tc's byte-rate forms (``bps``, ``Mbps`` = megabytes/s in tc!) are rejected
  because they are read as bits by almost everyone; so is a bare number.
* duration: ``ns``, ``us``, ``ms``, ``s``, ``m``, ``h`` (``2.5s``, ``50us``, ``1m``).
* size: a bare non-negative integer (bytes), or ``B``, decimal ``kB``/``KB``,
  ``MB``, ``GB``, ``TB``, binary ``KiB``, ``MiB``, ``GiB``, ``TiB``.
* percent: ``0.1%`` or a plain number, 0..100.

Every parser takes the raw value from YAML (``str``, ``int``, ``float``...)
and either returns the parsed value or raises :class:`UnitError` whose
message names the value and gives examples, e.g.
``'10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from testbed.model.errors import InputError

__all__ = ["UnitError", "show", "parse_rate", "parse_duration", "parse_size", "parse_percent",
           "format_rate", "format_duration", "format_size"]


class UnitError(InputError):
    """A value that is not a valid quantity of the expected kind."""


#: Bounds on what a spec may ask for. HTB takes a rate in bytes/s as a u64
#: (2^64-1 B/s = 1.5e20 bit/s); far below that, a veth pair on one machine moves
#: a few tens of Gbit/s, so 10Tbit is already absurd.
MAX_RATE_BPS = 10 * 10**12
#: Durations: a day. A timeout, a fault time or a netem delay beyond that is a typo.
MAX_DURATION_S = 86400
#: Sizes: 1 TiB (the workload bounds its own sizes much lower).
MAX_SIZE_BYTES = 2**40


def show(value: object, limit: int = 60) -> str:
    """``value`` as YAML would write it, for messages: ``null``, ``true``, ``3``, ``'text'``.

    Strings are quoted with every non-printable character (control, lone surrogate)
    escaped, so the result prints in any locale; anything longer than ``limit``
    characters is elided with its length.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (int, float)):
        text = str(value) if not isinstance(value, int) or value.bit_length() < 10000 else "a huge number"
    elif isinstance(value, str):
        text = repr(value)  # escapes control characters and lone surrogates
    else:
        text = f"a {type(value).__name__}"
    if len(text) > limit:
        keep = max(limit - 20, 10)
        text = f"{text[:keep]}... ({len(text)} characters)"
    return text


_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]+)?)"

_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_RATE_RE = re.compile(_NUMBER + r"(?P<unit>[A-Za-z]+)")
_RATE_EXAMPLES = "examples: 10Mbit, 1Gbit"

_DURATION_UNITS = {"ns": Decimal("1e-9"), "us": Decimal("1e-6"), "ms": Decimal("1e-3"),
                   "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}
_DURATION_RE = re.compile(_NUMBER + r"(?P<unit>ns|us|ms|s|m|h)")
_DURATION_EXAMPLES = "examples: 50us, 10ms, 2.5s, 1m"

_SIZE_UNITS = {"": 1, "B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE_RE = re.compile(_NUMBER + r"(?P<unit>[A-Za-z]*)")
_SIZE_EXAMPLES = "examples: 4096, 64KiB, 1MiB, 1MB"

_PERCENT_RE = re.compile(_NUMBER + r"%?")
_PERCENT_EXAMPLES = "examples: 0.1%, 1%, 5"


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) else None


def parse_rate(value: object) -> int:
    """Parse a tc-style bit rate (``20Mbit``) into bits/s, an int > 0.

    Raises UnitError for anything else, including ``10 Mbps``, bare numbers,
    zero and rates that are not a whole number of bits/s.
    """
    text = _text(value)
    m = _RATE_RE.fullmatch(text) if text is not None else None
    if m is None or m["unit"].lower() not in _RATE_UNITS:
        raise UnitError(f"{show(value)} is not a rate ({_RATE_EXAMPLES})")
    bps = Decimal(m["num"]) * _RATE_UNITS[m["unit"].lower()]
    if bps > MAX_RATE_BPS:
        raise UnitError(f"{show(value)} is above the largest rate accepted ({format_rate(MAX_RATE_BPS)}; "
                        "HTB's own limit is 2^64-1 bytes/s)")
    if bps <= 0 or bps != bps.to_integral_value():
        raise UnitError(f"{show(value)} is not a positive whole number of bit/s ({_RATE_EXAMPLES})")
    return int(bps)


def parse_duration(value: object) -> float:
    """Parse a duration (``50us``, ``2.5s``, ``1m``) into seconds (float >= 0).

    A unit is required (a bare ``5`` is ambiguous). Raises UnitError.
    """
    text = _text(value)
    m = _DURATION_RE.fullmatch(text) if text is not None else None
    if m is None:
        raise UnitError(f"{show(value)} is not a duration ({_DURATION_EXAMPLES})")
    seconds = Decimal(m["num"]) * _DURATION_UNITS[m["unit"]]
    if seconds > MAX_DURATION_S:
        raise UnitError(f"{show(value)} is longer than the longest duration accepted (24h)")
    return float(seconds)


def parse_size(value: object) -> int:
    """Parse a size (``64MiB``, ``1MB``, ``4096``) into bytes (int >= 0).

    A YAML integer is taken as bytes. Raises UnitError for unknown units,
    negative values and sizes that are not a whole number of bytes.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise UnitError(f"{show(value)} is not a size: negative ({_SIZE_EXAMPLES})")
        size = Decimal(value)
    else:
        text = _text(value)
        m = _SIZE_RE.fullmatch(text) if text is not None else None
        if m is None or m["unit"] not in _SIZE_UNITS:
            raise UnitError(f"{show(value)} is not a size ({_SIZE_EXAMPLES})")
        size = Decimal(m["num"]) * _SIZE_UNITS[m["unit"]]
    if size > MAX_SIZE_BYTES:
        raise UnitError(f"{show(value)} is larger than the largest size accepted (1TiB)")
    if size != size.to_integral_value():
        raise UnitError(f"{show(value)} is not a whole number of bytes ({_SIZE_EXAMPLES})")
    return int(size)


def parse_percent(value: object) -> float:
    """Parse a percentage (``0.1%``, ``1``, ``2.5``) into a float in 0..100. Raises UnitError."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        pct = float(value)
    else:
        text = _text(value)
        m = _PERCENT_RE.fullmatch(text) if text is not None else None
        if m is None:
            raise UnitError(f"{show(value)} is not a percentage ({_PERCENT_EXAMPLES})")
        try:
            pct = float(Decimal(m["num"]))
        except InvalidOperation:  # pragma: no cover - the regex admits only decimals
            raise UnitError(f"{show(value)} is not a percentage ({_PERCENT_EXAMPLES})") from None
    if not 0.0 <= pct <= 100.0:
        raise UnitError(f"{show(value)} is not a percentage between 0 and 100")
    return pct


def format_rate(rate_bps: int) -> str:
    """Shortest exact tc form of a rate: 20_000_000 -> ``20Mbit``. Inverse of :func:`parse_rate`."""
    for unit, scale in (("Tbit", 10**12), ("Gbit", 10**9), ("Mbit", 10**6), ("kbit", 10**3)):
        if rate_bps % scale == 0:
            return f"{rate_bps // scale}{unit}"
    return f"{rate_bps}bit"


def format_duration(seconds: float) -> str:
    """Readable exact form of a duration in seconds: 0.05 -> ``50ms``. Inverse of :func:`parse_duration`."""
    if not math.isfinite(seconds):
        return show(float(seconds))
    exact = Decimal(repr(float(seconds)))
    if abs(exact) >= 10**15:
        return f"{float(seconds):g}s"
    for unit in ("s", "ms", "us", "ns"):
        scaled = exact / _DURATION_UNITS[unit]
        if scaled == scaled.to_integral_value() and float(scaled * _DURATION_UNITS[unit]) == seconds:
            return f"{int(scaled)}{unit}"
    return f"{format(exact, 'f')}s"


def format_size(size_bytes: int) -> str:
    """Shortest exact binary form of a size: 65536 -> ``64KiB``. Inverse of :func:`parse_size`."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if size_bytes and size_bytes % _SIZE_UNITS[unit] == 0:
            return f"{size_bytes // _SIZE_UNITS[unit]}{unit}"
    return str(size_bytes)
