"""Run reports: the files of a run directory, rich tables and PNG plots.

:func:`write_outputs` turns the raw records (see :mod:`testbed.metrics`) into, in the
run directory (one row per bin; ``t_s`` = bin start, seconds from the transport's run start):

- ``flows.csv``: ``transport,rank,peer,dir,t_s,bytes,rate_bps,retransmits,rtt_s,cwnd_bytes``;
  per flow and 10 ms bin: bytes counted in the bin (rx: goodput; tx: sent), its rate in
  bits/s, retransmissions in the bin (packets), last RTT (s) and cwnd (bytes) sampled in
  the bin (empty if none).
- ``goodput.csv``: ``transport,t_s,goodput_bps,smoothed_bps``; aggregate goodput per 10 ms
  bin (bits/s) and its 50 ms rolling median (the series recovery time is measured on).
- ``links.csv``: ``transport,link,end,t_s,tx_bytes,throughput_bps,drops,rate_bps``; per link
  end and 100 ms bin, from kernel counters; ``rate_bps`` is the configured rate.
- ``summary.json``: :func:`testbed.metrics.analyze_run` (per transport, side by side in
  ``comparison``, metric definitions in ``definitions``).

:func:`render` re-renders tables and plots from those files only (``goodput.png``,
``ev-timeline-<transport>.png``).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from . import metrics  # noqa: E402
from .metrics import load_jsonl, rolling_median  # noqa: E402

log = logging.getLogger(__name__)

STATE_COLOURS = {"GOOD": "tab:green", "ASSUMED_BAD": "tab:red", "DENIED": "black",
                 "UNKNOWN": "tab:gray", "SKIP": "tab:cyan"}


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


# -- tables --------------------------------------------------------------------------
def fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.1f} ms" if abs(x) < 1 else f"{x:.3f} s"


def fmt_num(x, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def comparison_table(summary: dict) -> Table:
    """Transports side by side (one column each), one metric per row."""
    rows = summary["comparison"]
    rate = summary.get("host_link_rate_bps")
    host_bw = summary.get("host_bandwidth_bps") or rate
    nics = summary.get("host_nics") or 1
    host = (f" (host link {rate / 1e6:g} Mbit/s)" if nics == 1 else
            f" (host: {nics} NICs, {host_bw / 1e6:g} Mbit/s)") if rate else ""
    t = Table(title=f"{summary['scenario']}: transports side by side" + host)
    t.add_column("metric")
    for r in rows:
        t.add_column(r["transport"], justify="right")
    full = summary["transports"]

    def line(label, f):
        t.add_row(label, *(f(r, full[r["transport"]]) for r in rows))

    line("size (bytes)", lambda r, s: fmt_num(r["size_bytes"], "d"))
    line("busbw (Mbit/s)", lambda r, s: fmt_num(r["busbw_mbit_per_s"]))
    line("busbw / host", lambda r, s: fmt_num(s.get("busbw_fraction_of_host"), ".0%"))
    line("iteration p50", lambda r, s: fmt_s(r["iteration_p50_s"]))
    line("iteration p99", lambda r, s: fmt_s(r["iteration_p99_s"]))
    line("#wrong", lambda r, s: str(r["wrong"]))
    line("QP errors", lambda r, s: str(r["qp_errors"]))
    line("time to detect", lambda r, s: fmt_s(r["detect_s"]) if s["has_evs"] else "n/a (no EVs)")
    line("recovery", lambda r, s: fmt_s(r["recovery_s"]) if s["per_fault"] else "no fault")
    line("longest stall", lambda r, s: fmt_s(r["longest_stall_s"]))
    line("retransmits (pkts)", lambda r, s: fmt_num(r["retransmits"], ".0f"))
    line("retransmitted bytes", lambda r, s: fmt_num(r["retransmitted_bytes"], ".0f"))
    line("completed", lambda r, s: ("yes" if r["complete"] else "[red]no[/]: " + r["completion"]))
    line("valid", lambda r, s: "yes" if r["valid"] else "[red]no[/]: " + "; ".join(s["invalid_reasons"]))
    return t


def size_table_view(transport: dict) -> Table:
    """nccl-tests-style per-size table of one transport summary."""
    t = Table(title=f"{transport['transport']}: all-reduce, n={transport['world_size']}")
    for col in ("size (B)", "count", "type", "redop", "iters", "time (ms)", "algbw (MB/s)", "algbw (Mbit/s)",
                "busbw (MB/s)", "busbw (Mbit/s)", "#wrong"):
        t.add_column(col, justify="right")
    if not transport["sizes"]:
        t.caption = "no iteration finished"
    for r in transport["sizes"]:
        t.add_row(str(r["size_bytes"]), str(r["count"]), r["type"], r["redop"], str(r["iterations"]),
                  fmt_num(r["time_s"] * 1e3 if r["time_s"] is not None else None, ".2f"),
                  fmt_num(r["algbw_bytes_per_s"] / 1e6 if r["algbw_bytes_per_s"] is not None else None, ".2f"),
                  fmt_num(r["algbw_mbit_per_s"], ".1f"),
                  fmt_num(r["busbw_bytes_per_s"] / 1e6 if r["busbw_bytes_per_s"] is not None else None, ".2f"),
                  fmt_num(r["busbw_mbit_per_s"], ".1f"), str(r["wrong"]))
    return t


def fidelity_table(summary: dict) -> Table:
    """CPU use and achieved vs configured rate of the busiest link ends, per transport."""
    t = Table(title="fidelity")
    for col in ("transport", "CPU mean", "CPU p95", "link end", "achieved (Mbit/s)", "configured (Mbit/s)",
                "achieved/configured", "drops"):
        t.add_column(col, justify="right")
    for name, s in summary["transports"].items():
        cpu = s["fidelity"]["cpu_busy"]
        links = s["fidelity"]["busiest_links"] or [None]
        for i, ln in enumerate(links):
            head = ((name, fmt_num(cpu["mean"], ".0%"), fmt_num(cpu["p95"], ".0%")) if cpu else (name, "-", "-")) \
                if i == 0 else ("", "", "")
            tail = (f"{ln['link']}:{ln['end']}", fmt_num(ln["achieved_bps"] / 1e6),
                    fmt_num(ln["rate_bps"] / 1e6 if ln["rate_bps"] else None),
                    fmt_num(ln["achieved_fraction"], ".0%"), fmt_num(ln["drops"], ".0f")) if ln else ("-",) * 5
            t.add_row(*head, *tail)
    return t


# -- plots ---------------------------------------------------------------------------
def _read_goodput(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    cols: dict[str, dict[str, list]] = {}
    with open(run_dir / "goodput.csv", newline="") as f:
        for row in csv.DictReader(f):
            c = cols.setdefault(row["transport"], {"t_s": [], "goodput_bps": [], "smoothed_bps": []})
            for k in c:
                c[k].append(float(row[k] or "nan"))
    return {name: {k: np.array(v) for k, v in c.items()} for name, c in cols.items()}


def _fault_lines(ax, faults: list[dict], label: bool) -> None:
    for f in faults:
        colour = "tab:red" if f["phase"] == "apply" else "tab:blue"
        ax.axvline(f["t_s"], color=colour, linestyle="--", linewidth=1)
        if label:
            ax.annotate(f"{f['action']} {f['phase']}\n{f['link']}", (f["t_s"], 1.0),
                        xycoords=("data", "axes fraction"), fontsize=7, rotation=90, va="top", ha="right")


def plot_goodput(run_dir: Path, summary: dict) -> Path:
    """goodput.png: aggregate goodput (Mbit/s) over time, one panel per transport; fault markers
    (red dashed: apply, blue dashed: revert, labelled "action phase / link"), green dash-dot:
    emulated routing reconvergence."""
    series = _read_goodput(run_dir)
    names = list(summary["transports"])
    fig, axes = plt.subplots(len(names), 1, sharex=True, squeeze=False, figsize=(10, 2.6 * len(names) + 0.6))
    for ax, name in zip(axes[:, 0], names):
        s, tr = series.get(name), summary["transports"][name]
        if s is not None:
            ax.plot(s["t_s"], s["goodput_bps"] / 1e6, linewidth=0.6, alpha=0.5, label="10 ms bins")
            ax.plot(s["t_s"], s["smoothed_bps"] / 1e6, linewidth=1.4, label="50 ms rolling median")
        if tr["baseline_goodput_bps"]:
            ax.axhline(metrics.RECOVERY_FRACTION * tr["baseline_goodput_bps"] / 1e6, color="gray",
                       linestyle=":", linewidth=1, label="90% of pre-fault median")
        _fault_lines(ax, tr["faults"], label=True)
        for t in tr.get("reconverge_s", ()):
            ax.axvline(t, color="tab:green", linestyle="-.", linewidth=1)
            ax.annotate("reconverge", (t, 1.0), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                        va="top", ha="right")
        ax.set_ylabel("goodput (Mbit/s)")
        ax.set_title(name, loc="left", fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    axes[-1, 0].set_xlabel("time since run start (s)")
    fig.suptitle(f"{summary['scenario']}: aggregate goodput")
    fig.tight_layout()
    path = Path(run_dir) / "goodput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ev_segments(transitions: list[dict], t_end: float) -> list[tuple[float, float, str]]:
    """(start, duration, state) segments of one EV from its sorted transitions."""
    state = transitions[0]["old"] if transitions and transitions[0]["old"] else "GOOD"
    t, out = 0.0, []
    for e in transitions:
        out.append((t, max(0.0, e["t_s"] - t), state))
        t, state = e["t_s"], e["new"]
    out.append((t, max(0.0, t_end - t), state))
    return out


def plot_ev_timeline(run_dir: Path, summary: dict, transport: str, rank: int | None = None) -> Path | None:
    """ev-timeline-<transport>.png: one row per EV (``dir``, ``ev_id``) of ``rank`` (default: the
    rank with the most EV transitions), coloured by state, with fault markers. EVs start in the
    ``old`` state of their first transition (GOOD without one). None for a transport without EVs."""
    s = summary["transports"][transport]
    if not s["has_evs"]:
        return None
    t0 = s["t0_wall_s"]
    trans = metrics.ev_transitions(load_jsonl(Path(run_dir) / transport / "events.jsonl"), t0)
    if rank is None:
        counts: dict = {}
        for e in trans:
            counts[e["rank"]] = counts.get(e["rank"], 0) + 1
        rank = max(sorted(counts), key=lambda r: counts[r]) if counts else 0
    evs = {(f["dir"], ev["ev_id"]) for f in s["flows"] if f["rank"] == rank for ev in f["evs"]}
    evs |= {(e["dir"] or "tx", e["ev_id"]) for e in trans if e["rank"] == rank}
    evs = sorted(evs, key=lambda v: (v[0] != "tx", v[0], str(type(v[1])), v[1]))
    t_end = max([s["workload_window_s"][1]] + [e["t_s"] for e in trans])
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.22 * max(1, len(evs))))
    for y, (direction, ev) in enumerate(evs):
        mine = [e for e in trans if e["rank"] == rank and (e["dir"] or "tx") == direction and e["ev_id"] == ev]
        for start, dur, state in _ev_segments(mine, t_end):
            ax.broken_barh([(start, dur)], (y - 0.4, 0.8), color=STATE_COLOURS.get(state, "tab:purple"))
    _fault_lines(ax, s["faults"], label=False)
    ax.set_yticks(range(len(evs)), [f"{d} {ev}" for d, ev in evs], fontsize=6)
    ax.set_ylabel("EV (tx: requester, rx: responder)")
    ax.set_xlabel("time since run start (s)")
    ax.set_xlim(0, t_end)
    handles = [matplotlib.patches.Patch(color=c, label=st) for st, c in STATE_COLOURS.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), title="state",
              title_fontsize=7)
    ax.set_title(f"{summary['scenario']} / {transport}: EV states of rank {rank}")
    fig.tight_layout()
    path = Path(run_dir) / f"ev-timeline-{transport}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(run_dir: Path, summary: dict, rank: int | None = None) -> list[Path]:
    """All PNGs of a run; returns their paths."""
    paths = [plot_goodput(run_dir, summary)]
    paths += [p for name in summary["transports"] if (p := plot_ev_timeline(run_dir, summary, name, rank))]
    return paths


def render(run_dir: Path, console: Console, *, recompute: bool = False, rank: int | None = None,
           plots: bool = True) -> dict:
    """Print the side-by-side, per-size and fidelity tables of a run and (re)write its PNGs,
    from the run directory's files only. Returns the summary. Raises metrics.RunDirError."""
    summary = load_summary(run_dir, recompute=recompute)
    console.print(comparison_table(summary))
    for s in summary["transports"].values():
        console.print(size_table_view(s))
    console.print(fidelity_table(summary))
    for s in summary["transports"].values():
        for w in s["warnings"]:
            console.print(f"[yellow]warning[/] {s['transport']}: {w}")
    if plots:
        for p in write_plots(Path(run_dir), summary, rank):
            console.print(f"plot: {p}")
    return summary
