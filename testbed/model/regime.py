"""The emulation regime: the dimensionless numbers that make a scaled result comparable with
the paper's (DESIGN.md, "Emulation regime"), computed from physical inputs. Pure arithmetic.

The same function serves both sides: the testbed's inputs come from a scenario
(:func:`testbed.spec.regime.scenario_inputs`: topology, workload, QP parameters), the paper's
from the claims file (``regime:`` in ``scenarios/paper/claims.yaml``,
:mod:`testbed.spec.claimsfile`). A paper value may be a range (``128-256 EVs per QP``), so every
quantity is a :class:`Span` ``lo..hi`` (a single value: ``lo == hi``), and a ratio of spans is
the widest it can be (all quantities are positive).

The numbers (:data:`NUMBERS`), with ``bdp_bytes = bdp_pkts * payload_bytes``:

* ``bdp_pkts = rate_bps * base_rtt_s / (8 * frame_bytes)``: the bandwidth-delay product in data
  frames (``frame_bytes``: a data packet on the wire, Ethernet header included);
* ``evs_per_qp``; ``evs_per_bdp = evs_per_qp / bdp_pkts``;
* ``buffer_bdps = queue_pkts / bdp_pkts`` (a switch port's queue in BDPs; the paper side gives
  ``buffer_bdps`` itself);
* ``rto_rtts = rto_s / base_rtt_s``, ``detect_rtts = detect_s / base_rtt_s``,
  ``reconverge_rtts = reconverge_s / base_rtt_s``: times in base RTTs;
* ``message_bdps = message_bytes / bdp_bytes``: the collective's largest size in BDPs;
* ``sample_rtts = sample_s / base_rtt_s``: the KPIs' time resolution (the agents' sample
  interval) in base RTTs;
* ``ranks``, ``planes``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A positive quantity known to lie in ``lo..hi`` (``lo == hi``: known exactly)."""

    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not 0 <= self.lo <= self.hi:
            raise ValueError(f"a span needs 0 <= lo <= hi, got {self.lo}..{self.hi}")

    @classmethod
    def of(cls, value: "Span | float | int | tuple | list | None") -> "Span | None":
        """A span from a number, a ``(lo, hi)`` pair or a span; None stays None. ValueError
        for a negative or reversed range."""
        if value is None or isinstance(value, Span):
            return value
        if isinstance(value, (tuple, list)):
            lo, hi = value
            return cls(float(lo), float(hi))
        return cls(float(value), float(value))

    def __mul__(self, other: "Span") -> "Span":
        return Span(self.lo * other.lo, self.hi * other.hi)

    def __truediv__(self, other: "Span") -> "Span":
        """The widest quotient; ZeroDivisionError when ``other`` reaches 0."""
        return Span(self.lo / other.hi, self.hi / other.lo)

    def scaled(self, k: float) -> "Span":
        return Span(self.lo * k, self.hi * k)

    def to_json(self) -> float | list[float]:
        """``lo`` when exact, else ``[lo, hi]`` (what ``summary.json`` and ``reproduce.json`` keep)."""
        return self.lo if self.lo == self.hi else [self.lo, self.hi]


def hull(spans: "list[Span | None]") -> Span | None:
    """The smallest span holding every given span (sweep points side by side); None if none is given."""
    given = [s for s in spans if s is not None]
    if not given:
        return None
    return Span(min(s.lo for s in given), max(s.hi for s in given))


@dataclass(frozen=True)
class Inputs:
    """The physical inputs of a regime; each a :class:`Span` (or a number, or ``(lo, hi)``) or None
    when unknown. Units: bits/s, s, bytes, packets; ``queue_pkts`` a port's queue limit in
    packets, ``buffer_bdps`` the buffer given in BDPs directly (used when ``queue_pkts`` is None);
    ``message_bytes`` the collective's largest size (nccl-tests' size); ``sample_s`` the KPIs'
    sample interval."""

    rate_bps: Span | None = None
    base_rtt_s: Span | None = None
    frame_bytes: Span | None = None
    payload_bytes: Span | None = None
    evs_per_qp: Span | None = None
    queue_pkts: Span | None = None
    buffer_bdps: Span | None = None
    rto_s: Span | None = None
    detect_s: Span | None = None
    reconverge_s: Span | None = None
    message_bytes: Span | None = None
    ranks: Span | None = None
    planes: Span | None = None
    sample_s: Span | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, Span.of(getattr(self, f.name)))


NUMBERS = ("bdp_pkts", "evs_per_qp", "evs_per_bdp", "buffer_bdps", "rto_rtts", "detect_rtts",
           "reconverge_rtts", "message_bdps", "sample_rtts", "ranks", "planes")
"""The dimensionless numbers of a regime, in the order reports print them."""
PHYSICAL = ("rate_bps", "base_rtt_s", "payload_bytes", "rto_s", "reconverge_s", "sample_s")
"""The inputs a regime also keeps, for the reader (the numbers above are made of them)."""


def _div(a: Span | None, b: Span | None) -> Span | None:
    return None if a is None or b is None or b.lo == 0 else a / b


def regime(inp: Inputs) -> dict[str, Span | None]:
    """Every key of :data:`NUMBERS` and :data:`PHYSICAL` from ``inp`` (formulas in the module
    docstring); a number whose inputs are unknown (or would divide by zero) is None."""
    bdp = None
    if None not in (inp.rate_bps, inp.base_rtt_s, inp.frame_bytes):
        bdp = _div(inp.rate_bps * inp.base_rtt_s, inp.frame_bytes.scaled(8))
    bdp_bytes = bdp * inp.payload_bytes if bdp is not None and inp.payload_bytes is not None else None
    rtt = inp.base_rtt_s
    out = {
        "bdp_pkts": bdp, "evs_per_qp": inp.evs_per_qp, "evs_per_bdp": _div(inp.evs_per_qp, bdp),
        "buffer_bdps": _div(inp.queue_pkts, bdp) if inp.queue_pkts is not None else inp.buffer_bdps,
        "rto_rtts": _div(inp.rto_s, rtt), "detect_rtts": _div(inp.detect_s, rtt),
        "reconverge_rtts": _div(inp.reconverge_s, rtt), "message_bdps": _div(inp.message_bytes, bdp_bytes),
        "sample_rtts": _div(inp.sample_s, rtt), "ranks": inp.ranks, "planes": inp.planes,
    }
    return {**out, **{k: getattr(inp, k) for k in PHYSICAL}}


def to_json(numbers: dict[str, Span | None]) -> dict[str, float | list[float] | None]:
    """A regime as JSON: each span as :meth:`Span.to_json`, None as null."""
    return {k: None if v is None else v.to_json() for k, v in numbers.items()}


def from_json(doc: dict | None) -> dict[str, Span | None]:
    """The inverse of :func:`to_json` for the keys it knows (:data:`NUMBERS`, :data:`PHYSICAL`);
    a key absent from ``doc`` (an older run) or not a number nor a ``[lo, hi]`` pair is None."""
    out: dict[str, Span | None] = {}
    for k in NUMBERS + PHYSICAL:
        try:
            out[k] = Span.of((doc or {}).get(k))
        except (TypeError, ValueError):
            out[k] = None
    return out
