"""The files of a run directory: CSV series and ``summary.json`` (see :mod:`testbed.report`).

Every output is written atomically (a temporary file in the run directory, then renamed), so a
crash never leaves half a file. ``summary.json`` carries ``checksum`` (SHA-256 of its canonical
JSON without that key): a summary that does not match it was damaged or edited and is
recomputed from the raw records when they are there. ``damage`` lists the problems met in the
raw records (:class:`testbed.rundir.damage.Damage`) when there were any.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
from pathlib import Path

import numpy as np

from testbed import metrics
from testbed.metrics import rolling_median
from testbed.rundir.damage import Damage, collecting, current_damage, problem
from testbed.rundir.names import SAMPLES, SAMPLES_DIR, SUMMARY
from testbed.rundir.read import MAX_JSONL_BYTES, read_json, regular_file
from testbed.rundir.schemas import SUMMARY_DOC
from testbed.rundir.errors import RunDirWriteError
from testbed.rundir.write import atomic_file, merge_samples, write_atomic

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
    (csv.writer's dialect: comma, minimal quoting, CRLF); written atomically."""
    with atomic_file(path, f"the report's {Path(path).name}", newline="") as f:
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
    """Analyse a run and write flows.csv, goodput.csv, links.csv, summary.json into ``run_dir``
    (each atomically). Returns the summary dict. Damaged records are skipped and listed in
    ``damage`` (and in the :func:`testbed.rundir.damage.collecting` block around the call,
    if any). Raises metrics.RunDirError if ``run_dir`` is no run directory."""
    run_dir = Path(run_dir)
    with collecting(current_damage()) as damage:
        summary, analyses = metrics.analyze_run(run_dir)
    return _write(run_dir, summary, analyses, damage)


def _write(run_dir: Path, summary: dict, analyses: list, damage: "Damage") -> dict:
    return _write_all(run_dir, summary, analyses, damage)[0]


def _write_all(run_dir: Path, summary: dict, analyses: list, damage: "Damage") -> tuple[dict, bool]:
    """Write the CSV files and summary.json; (summary as written, all written?). A file that
    cannot be written (e.g. a directory in its place) is a problem, the others are written."""
    ok = True
    csvs = [("flows.csv", ["transport", "rank", "peer", "dir", "t_s", "bytes", "rate_bps", "retransmits", "rtt_s",
                           "cwnd_bytes"], _flow_blocks),
            ("goodput.csv", ["transport", "t_s", "goodput_bps", "smoothed_bps"], _goodput_blocks),
            ("links.csv", ["transport", "link", "end", "t_s", "tx_bytes", "throughput_bps", "drops", "rate_bps"],
             _link_blocks)]
    for name, header, blocks in csvs:
        ok &= _try_write(run_dir / name, lambda p: _write_csv(p, header, (b for a in analyses for b in blocks(a))))
    if damage:
        summary["damage"] = damage.lines()
    summary = _finite(json.loads(json.dumps(summary, default=_json_default)))
    summary["checksum"] = _checksum(summary)
    text = json.dumps(summary, indent=2, allow_nan=False) + "\n"
    ok &= _try_write(run_dir / SUMMARY, lambda p: write_atomic(p, text))
    log.info("wrote %s/{flows,goodput,links}.csv and summary.json", run_dir)
    return summary, ok


def _try_write(path: Path, write) -> bool:
    try:
        write(path)
        return True
    except RunDirWriteError as exc:
        problem(path, None, f"cannot write: {exc.strerror}")
        return False


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


def _checksum(summary: dict) -> str:
    """SHA-256 of ``summary``'s canonical JSON without its ``checksum`` key."""
    body = {k: v for k, v in summary.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _has_raw(run_dir: Path, name: str) -> bool:
    """True if transport ``name`` still has its raw agent samples (samples.jsonl)."""
    return (run_dir / name / SAMPLES).is_file()


def _stored(run_dir: Path) -> dict | None:
    """summary.json if it is intact (parses, has the keys the tables read, matches its
    checksum) and goodput.csv is there; None otherwise (nothing is reported: an output that
    cannot be used is recomputed)."""
    if not (run_dir / "goodput.csv").is_file():
        return None
    with collecting(Damage()):
        summary = read_json(run_dir / SUMMARY, None, SUMMARY_DOC)
    if summary is None or ("checksum" in summary and summary["checksum"] != _checksum(summary)):
        return None
    return summary


def load_summary(run_dir: Path, *, recompute: bool = False) -> dict:
    """summary.json of a run, computed (and all outputs written) when missing or damaged, when
    ``recompute``, or when it was written under other metric definitions than
    :data:`metrics.DEFINITIONS` and the raw records are still there (a run re-reported after an
    upgrade gets today's metrics). Good outputs are never replaced by worse ones: when raw records
    are missing or damaged and an intact summary.json (itself free of ``damage``) exists, it is
    kept and the problems are reported. The problems met (this time, or listed in summary.json's
    ``damage``) go to the :func:`testbed.rundir.damage.collecting` block around the call, or
    raise MetricsError without one. Raises metrics.RunDirError for a non-run directory."""
    run_dir = Path(run_dir)
    with collecting(current_damage()) as damage:
        summary, fresh = _load(run_dir, recompute, damage)
    if not current_damage() and damage:
        raise metrics.MetricsError("\n".join(damage.lines()))
    return summary


def _load(run_dir: Path, recompute: bool, damage: "Damage") -> tuple[dict, bool]:
    """(summary, fresh: computed now); see :func:`load_summary`."""
    manifest = metrics.load_manifest(run_dir)   # raises RunDirError for a non-run directory
    for t in manifest["transports"]:   # a runner killed before it merged the agents' samples
        if (run_dir / t / SAMPLES_DIR).is_dir():
            try:
                merge_samples(run_dir / t)
            except RunDirWriteError as exc:   # a full disk: the report reads what is merged
                problem(run_dir / t / SAMPLES_DIR, None, f"not merged: {exc}")
    stored = _stored(run_dir)
    raw = all(_has_raw(run_dir, t) for t in manifest["transports"])
    if stored is not None and not recompute and (stored.get("definitions") == metrics.DEFINITIONS or not raw):
        for line in stored.get("damage") or ():
            damage.note(line)
        return stored, False
    if stored is not None and not stored.get("damage"):
        if not raw:
            missing = [t for t in manifest["transports"] if not _has_raw(run_dir, t)]
            for t in missing:   # what is in samples.jsonl's place, if anything
                regular_file(run_dir / t / SAMPLES, MAX_JSONL_BYTES)
            problem(run_dir, None, f"no raw records of {', '.join(missing)}: summary.json and the CSV "
                                           f"files kept as they were (not recomputed)")
            return stored, False
        with collecting(Damage()) as trial:
            summary, analyses = metrics.analyze_run(run_dir)
        for line in trial.lines():
            damage.note(line)
        if trial:
            problem(run_dir / SUMMARY, None, "kept as it was: the raw records are damaged now")
            return stored, False
        return _write_all(run_dir, summary, analyses, trial)
    with collecting(current_damage()) as now:
        summary, analyses = metrics.analyze_run(run_dir)
    return _write_all(run_dir, summary, analyses, now)


def render_guard(run_dir: Path, fresh: bool):
    """Context for rendering a summary: one read from disk, or whose outputs could not all be
    written (not ``fresh``), may hold anything, so an error rendering it becomes a MetricsError
    naming the run directory."""
    return _Guard(Path(run_dir), fresh)


class _Guard:
    def __init__(self, run_dir: Path, fresh: bool):
        self.run_dir, self.fresh = run_dir, fresh

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if self.fresh or exc is None or not isinstance(exc, (KeyError, TypeError, ValueError, AttributeError,
                                                             IndexError, ZeroDivisionError, OSError, csv.Error)):
            return False
        if isinstance(exc, metrics.MetricsError):
            return False
        raise metrics.MetricsError(f"{self.run_dir}: the stored outputs (summary.json, *.csv) cannot be rendered "
                                   f"({type(exc).__name__}: {str(exc)[:120]}); try --recompute") from exc
