"""The files of a run directory: CSV series and ``summary.json`` (see :mod:`testbed.report`)."""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from pathlib import Path

import numpy as np

from .. import metrics
from ..metrics import rolling_median

log = logging.getLogger(__name__)

# -- files ---------------------------------------------------------------------------
# The CSV files are written a column at a time: every float of a column is formatted by one
# %-operation and each row is a join of those strings (a k=4, 60 s run has ~200k flow rows
# per transport). The text is what csv.writer would write for the cells of :func:`_cell`.
def _cell(x) -> str | int:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.9g}"
    return x


def _float_cells(values) -> list[str]:
    """``_cell`` of every float in ``values`` (``%.9g``; NaN -> empty)."""
    v = np.asarray(values, float).tolist()
    if not v:
        return []
    # A formatted float never contains "nan" but NaN itself (inf is "inf").
    return (("%.9g\n" * len(v)) % tuple(v)).replace("nan", "").split("\n")[:-1]


def _time_cells(edges: np.ndarray) -> list[str]:
    """``t_s`` cells of the bins of ``edges``: bin starts rounded to the microsecond."""
    return _float_cells([round(t, 6) for t in edges[:-1].tolist()])


def _csv_line(fields) -> str:
    """One CSV row of ``_cell``-formatted ``fields`` (csv quoting), without line terminator."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([_cell(x) for x in fields])
    return buf.getvalue()


def _write_rows(f, prefix: tuple, columns: list[list[str]]) -> None:
    """Rows of constant leading fields ``prefix`` followed by the string ``columns``."""
    if not columns or not columns[0]:
        return
    head = _csv_line((*prefix, ""))  # the quoted prefix fields, each followed by a comma
    f.write(head + ("\r\n" + head).join(map(",".join, zip(*columns))) + "\r\n")


def _write_csv(path: Path, header: list[str], blocks) -> None:
    """``header`` then per block ``(prefix, columns)`` the rows of :func:`_write_rows`
    (csv.writer's dialect: comma, minimal quoting, CRLF)."""
    with open(path, "w", newline="") as f:
        f.write(_csv_line(header) + "\r\n")
        for prefix, columns in blocks:
            _write_rows(f, prefix, columns)


def _flow_blocks(a: metrics.TransportAnalysis):
    edges = a.edges
    t_cells, width = _time_cells(edges), np.diff(edges)
    for (rank, peer, direction), fs in sorted(a.flows.items(), key=lambda kv: str(kv[0])):
        b = metrics.binned_increments(fs.t_s, fs.bytes, edges)
        rtx = metrics.binned_increments(fs.t_s, fs.retransmits, edges)
        rtt = metrics.last_in_bin(fs.t_s, fs.rtt_s, edges)
        cwnd = metrics.last_in_bin(fs.t_s, fs.cwnd_bytes, edges)
        yield ((a.name, rank, peer, direction),
               [t_cells] + [_float_cells(c) for c in (b, b * 8 / width, rtx, rtt, cwnd)])


def _link_blocks(a: metrics.TransportAnalysis):
    t_cells = _time_cells(a.link_edges)
    for (link, end), s in sorted(a.links.items()):
        yield ((a.name, link, end),
               [t_cells] + [_float_cells(s[k]) for k in ("tx_bytes", "throughput_bps", "drops", "rate_bps")])


def _goodput_blocks(a: metrics.TransportAnalysis):
    yield ((a.name,), [_time_cells(a.edges), _float_cells(a.goodput_bps),
                       _float_cells(rolling_median(a.goodput_bps))])


def write_outputs(run_dir: Path) -> dict:
    """Analyse a run and write flows.csv, goodput.csv, links.csv, summary.json into ``run_dir``.
    Returns the summary dict. Raises metrics.RunDirError / metrics.MetricsError."""
    run_dir = Path(run_dir)
    summary, analyses = metrics.analyze_run(run_dir)
    _write_csv(run_dir / "flows.csv", ["transport", "rank", "peer", "dir", "t_s", "bytes", "rate_bps",
                                       "retransmits", "rtt_s", "cwnd_bytes"],
               (b for a in analyses for b in _flow_blocks(a)))
    _write_csv(run_dir / "goodput.csv", ["transport", "t_s", "goodput_bps", "smoothed_bps"],
               (b for a in analyses for b in _goodput_blocks(a)))
    _write_csv(run_dir / "links.csv", ["transport", "link", "end", "t_s", "tx_bytes", "throughput_bps", "drops",
                                       "rate_bps"], (b for a in analyses for b in _link_blocks(a)))
    summary = _finite(summary)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False, default=_json_default)
                                          + "\n")
    log.info("wrote %s/{flows,goodput,links}.csv and summary.json", run_dir)
    return summary


def _finite(x):
    """Copy of a JSON-ready structure with NaN/inf floats as None (strict JSON has no NaN)."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def _json_default(x):
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, set):
        return sorted(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def load_summary(run_dir: Path, *, recompute: bool = False) -> dict:
    """summary.json of a run, computed (and all outputs written) when missing, when ``recompute``,
    or when it was written under other metric definitions than :data:`metrics.DEFINITIONS` and
    the raw records are still there (a run re-reported after an upgrade gets today's metrics)."""
    run_dir = Path(run_dir)
    manifest = metrics.load_manifest(run_dir)  # raises RunDirError for a non-run directory
    path = run_dir / "summary.json"
    if recompute or not path.is_file() or not (run_dir / "goodput.csv").is_file():
        return write_outputs(run_dir)
    summary = json.loads(path.read_text())
    raw = all((run_dir / t / "samples.jsonl").is_file() for t in manifest["transports"])
    if summary.get("definitions") != metrics.DEFINITIONS and raw:
        return write_outputs(run_dir)
    return summary
