"""The regime, paper beside here: one set of cells for a run's report (:func:`regime_table`) and
for the reproduction (:func:`claim_regime_cells`, :mod:`testbed.report.reproduce`).

Both sides are :func:`testbed.model.regime.regime` dicts as JSON (numbers, ``[low, high]`` ranges,
null): the run's from its summary (``regime``, written at run time from the scenario; absent in
runs older than it, shown as "-"), the paper's from the claims file (:data:`PAPER_CLAIMS_FILE`:
the claim whose scenario the run ran, else the paper's common values). Detection is measured:
per transport with EVs, ``detect_s`` over the base RTT.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from testbed.model.regime import Span, from_json
from testbed.report.fmt import fmt_s, fmt_sig
from testbed.report.layout import Grid

PAPER_CLAIMS_FILE = Path(__file__).resolve().parents[2] / "scenarios" / "paper" / "claims.yaml"
"""The claims file whose ``regime:`` the run reports set beside their own (the repository's)."""

ROWS = (("bdp_pkts", "BDP (data packets)"), ("evs_per_qp", "EVs per QP"), ("evs_per_bdp", "EVs per BDP"),
        ("buffer_bdps", "switch buffer (BDPs)"), ("rto_rtts", "RTO (base RTTs)"),
        ("detect_rtts", "detection (base RTTs, measured)"), ("reconverge_rtts", "reconvergence (base RTTs)"),
        ("message_bdps", "message (BDPs)"), ("ranks", "ranks"), ("planes", "planes"),
        ("rate_bps", "rate (host NIC)"), ("base_rtt_s", "base RTT"), ("sample_rtts", "KPI resolution"))
"""(regime key, label), in the order printed."""
SHORT = {"bdp_pkts": "BDP pkts", "evs_per_qp": "EVs/QP", "evs_per_bdp": "EVs/BDP", "buffer_bdps": "buffer BDPs",
         "rto_rtts": "RTO RTTs", "detect_rtts": "detect RTTs", "reconverge_rtts": "reconv. RTTs",
         "message_bdps": "msg BDPs", "ranks": "ranks", "planes": "planes"}
"""The reproduction table's column heads (the dimensionless numbers only)."""


def _num(x: float) -> str:
    """Counts whole (128, 42000), other numbers to 2 significant figures (6.8, 0.15) below 100
    and 3 from there (190, 1380), in powers of ten from 10^5 up (1.2e5 RTTs)."""
    if x == int(x) and x < 1e5:
        return f"{x:.0f}"
    if x >= 1e5:
        return f"{x:.1e}".replace("e+0", "e").replace("e+", "e")
    return fmt_sig(x, 2 if x < 100 else 3)


def _rate(x: float) -> str:
    for unit, k in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if x >= k:
            return f"{fmt_sig(x / k, 3)} {unit}"
    return f"{fmt_sig(x, 3)} bit/s"


def _duration(x: float) -> str:
    return f"{fmt_sig(x * 1e6, 3)} us" if x < 1e-3 else fmt_s(x)


def fmt_span(span: Span | None, fmt=_num) -> str:
    """"190", "128-256", "-" (unknown)."""
    if span is None or not all(math.isfinite(v) for v in (span.lo, span.hi)):
        return "-"
    lo, hi = fmt(span.lo), fmt(span.hi)
    return lo if lo == hi else f"{lo}-{hi}"


def cell(numbers: dict[str, Span | None], key: str) -> str:
    """One regime value as printed: the rate in bit/s, the base RTT in s, the KPI resolution as
    "20.0 ms = 0.88 RTT", every other number to 2 significant figures."""
    if key == "rate_bps":
        return fmt_span(numbers.get(key), _rate)
    if key == "base_rtt_s":
        return fmt_span(numbers.get(key), _duration)
    if key == "sample_rtts":
        rtts, s = numbers.get("sample_rtts"), numbers.get("sample_s")
        return "-" if rtts is None or s is None else f"{fmt_span(s, _duration)} = {fmt_span(rtts)} RTT"
    return fmt_span(numbers.get(key))


def detect_rtts(transports: dict[str, dict | None]) -> Span | None:
    """Detection in base RTTs over the transports that have EVs and detected (``detect_s`` and
    ``base_rtt_s`` of each, as a run summary or a results document's medians give them): the
    span of their values; None if none has one."""
    vals = [t["detect_s"] / t["base_rtt_s"] for t in transports.values()
            if t and t.get("detect_s") is not None and t.get("base_rtt_s")]
    return Span(min(vals), max(vals)) if vals else None


def rows(paper: dict | None, here: dict | None, detect: Span | None = None) -> list[list[str]]:
    """``[label, paper, here]`` per :data:`ROWS`; ``paper``/``here``: regime JSON (None: unknown);
    ``detect``: the measured detection in base RTTs (here)."""
    p, h = from_json(paper), from_json(here)
    h["detect_rtts"] = detect
    return [[label, cell(p, key), cell(h, key)] for key, label in ROWS]


def short_cells(paper: dict | None, here: dict | None, detect: Span | None = None) -> list[str]:
    """"paper / here" per key of :data:`SHORT` (the reproduction table's regime columns)."""
    p, h = from_json(paper), from_json(here)
    h["detect_rtts"] = detect
    return [f"{cell(p, key)} / {cell(h, key)}" for key in SHORT]


# -- a run's report ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _claims(path: str, mtime: float):
    from testbed.spec.claimsfile import load_claims
    return load_claims(path)


def paper_for(summary: dict, claims_file: Path = PAPER_CLAIMS_FILE) -> tuple[dict | None, str]:
    """(the paper's regime JSON, where it comes from) for a run: the claim whose scenario the run
    ran, else the claims file's common values; (None, why) when the file does not load."""
    from testbed.spec.claimsfile import SpecError
    from testbed.spec.regime import paper_regime
    try:
        claims = _claims(str(claims_file), claims_file.stat().st_mtime)
    except (OSError, SpecError) as exc:
        return None, f"no paper values ({claims_file}: {str(exc).splitlines()[0]})"
    ran = summary.get("scenario_path")
    for c in claims.claims:
        if ran and _same_file(c.scenario, Path(ran)):
            return paper_regime(c.regime), f"paper: claim {c.id}"
    return paper_regime(claims.regime), "paper: its common regime"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or a.parts[-2:] == b.parts[-2:]
    except OSError:
        return False


def regime_table(summary: dict, paper: dict | None = None, source: str = "") -> Grid:
    """The run's regime beside the paper's (``paper``: regime JSON, None: :func:`paper_for`)."""
    if paper is None:
        paper, source = paper_for(summary)
    detect = detect_rtts({n: {"base_rtt_s": summary.get("base_rtt_s"), **s} if s.get("has_evs") else None
                          for n, s in summary["transports"].items()})
    return Grid(f"regime, paper beside here ({source})",
                ["", "paper", "here"], rows(paper, summary.get("regime"), detect), split="rows")
