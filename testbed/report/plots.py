"""PNG plots of a run, from its output files (goodput.csv, flows.csv, summary.json) and
events.jsonl: aggregate goodput with a zoom on each fault, the goodput of the flows crossing
the faulted link, and the distribution of iteration times. EV state timelines are in
:mod:`testbed.report.evplot`.

Goodput: grey = bins of one agent sample interval (summary ``kpi_resolution_s``), black = their
5-bin rolling median. Markers: red dashed = a
disruptive fault applied; blue dashed = a link restored (link_up, or a fault reverted);
green dash-dot = emulated routing reconvergence; orange = the fault detected (first EV
retired); brown = the slowest flow recovered.
"""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from testbed import metrics  # noqa: E402
from testbed.report.fmt import fmt_s  # noqa: E402
from testbed.rundir.write import atomic_file  # noqa: E402

APPLY, RESTORE, RECONVERGE = "tab:red", "tab:blue", "tab:green"
CONTROLLER_LOST = "black"
DETECT, FLOW_RECOVERED = "tab:orange", "tab:brown"
RAW, SMOOTH = "#b8b8b8", "black"            # goodput curves: grey sample-interval bins, black rolling median
ZOOM_BEFORE_S, ZOOM_AFTER_S = 0.5, 2.0     # a fault's window: 0.5 s before .. recovery or 2 s after
MAX_ZOOMS = 3                               # zoom panels per transport (first fault windows)
DPI = 110


def save_plot(fig, path: Path) -> Path:
    """Write ``fig`` as the PNG ``path`` through the run directory's writer (atomic; an OS
    error is a :class:`testbed.rundir.errors.RunDirWriteError`), then close it."""
    try:
        with atomic_file(path, f"the plot {Path(path).name}", binary=True) as f:
            fig.savefig(f, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path


def read_goodput(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    """goodput.csv as columns per transport: ``t_s``, ``goodput_bps``, ``smoothed_bps``."""
    cols: dict[str, dict[str, list]] = {}
    with open(Path(run_dir) / "goodput.csv", newline="") as f:
        for row in csv.DictReader(f):
            c = cols.setdefault(row["transport"], {"t_s": [], "goodput_bps": [], "smoothed_bps": []})
            for k in c:
                c[k].append(float(row[k] or "nan"))
    return {name: {k: np.array(v) for k, v in c.items()} for name, c in cols.items()}


def read_flow_rates(run_dir: Path, flows: set[tuple[str, str, str, str]]) -> dict[tuple, tuple]:
    """From flows.csv, in one pass: (t_s, rate_bps) arrays of each of ``flows`` =
    {(transport, rank, peer, dir)}, all strings as in the file."""
    out: dict[tuple, tuple[list, list]] = {}
    with open(Path(run_dir) / "flows.csv", newline="") as f:
        for row in csv.reader(f):
            if (key := (row[0], row[1], row[2], row[3])) in flows:
                ts, rate = out.setdefault(key, ([], []))
                ts.append(float(row[4]))
                rate.append(float(row[6] or "nan"))
    return {k: (np.array(t), np.array(r)) for k, (t, r) in out.items()}


def fault_label(f: dict) -> str:
    """"link_down a0_0-c0_0", "flap revert a0_0-c0_0", "end revert" (no link: the action alone)."""
    return " ".join(p for p in (f.get("action"), "revert" if f.get("phase") == "revert" else None, f.get("link"))
                    if p)


def fault_colour(f: dict) -> str:
    return APPLY if f.get("disruptive") else RESTORE


LABEL_BOX = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}


def _label(ax, t: float, text: str, colour: str, *, top: bool = True, ha: str = "right") -> None:
    """A rotated label beside the vertical line at ``t``, drawn only while ``t`` is in view."""
    ax.annotate(text, (t, 0.98 if top else 0.03), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                va="top" if top else "bottom", ha=ha, color=colour, bbox=LABEL_BOX, annotation_clip=True)


def fault_lines(ax, faults: list[dict], *, label: bool, min_gap: float = 0.0) -> None:
    """Fault markers on ``ax``; with ``label``, each distinct label once (a flap repeats its
    markers), at least ``min_gap`` (data units) after the previous labelled marker."""
    last, shown = -np.inf, set()
    for f in faults:
        ax.axvline(f["t_s"], color=fault_colour(f), linestyle="--", linewidth=1)
        text = fault_label(f)
        if label and text not in shown and f["t_s"] - last >= min_gap:
            _label(ax, f["t_s"], text, fault_colour(f))
            last = f["t_s"]
            shown.add(text)


def _reconverge_lines(ax, times, *, label: bool) -> None:
    for t in times:
        ax.axvline(t, color=RECONVERGE, linestyle="-.", linewidth=1)
        if label:
            _label(ax, t, "reconverge", RECONVERGE, ha="left")


def controller_lost_lines(ax, s: dict, *, label: bool) -> None:
    """The moments the controller was lost (summary ``controller_lost``): the data path goes on;
    and when a restarted one had resynchronised (``controller_resyncs``)."""
    for lost in s.get("controller_lost") or ():
        ax.axvline(lost["t_s"], color=CONTROLLER_LOST, linestyle=":", linewidth=1.2)
        if label:
            _label(ax, lost["t_s"], "controller lost", CONTROLLER_LOST, top=False, ha="left")
    for sync in s.get("controller_resyncs") or ():
        ax.axvline(sync["t_s"], color=CONTROLLER_LOST, linestyle="--", linewidth=1.2)
        if label:
            _label(ax, sync["t_s"], "controller resynced", CONTROLLER_LOST, top=False, ha="left")


def recovered_flow(s: dict) -> dict | None:
    """``worst_recovery`` if its flow recovered after a dip (then ``s`` is seconds after the fault)."""
    r = s.get("worst_recovery")
    return r if r and r.get("dip") and r.get("recovered") and r.get("s") is not None else None


def fault_windows(s: dict) -> list[dict]:
    """Zoom windows of a transport's disruptive faults: ``{t0, t1, faults: [index in per_fault]}``,
    from 0.5 s before a fault to its recovery (aggregate, or the slowest flow's for the first
    fault) or 2 s after, whichever is later; overlapping windows merged; at most MAX_ZOOMS."""
    wins: list[dict] = []
    worst = recovered_flow(s)
    for i, f in enumerate(s.get("per_fault") or ()):
        ends = [ZOOM_AFTER_S, f.get("recovery_s") or 0.0, worst["s"] if worst and i == 0 else 0.0]
        t0, t1 = f["t_s"] - ZOOM_BEFORE_S, f["t_s"] + max(ends) + 0.1
        if wins and t0 <= wins[-1]["t1"]:
            wins[-1]["t1"] = max(wins[-1]["t1"], t1)
            wins[-1]["faults"].append(i)
        else:
            wins.append({"t0": max(0.0, t0), "t1": t1, "faults": [i]})
    return wins[:MAX_ZOOMS]


def _mark(ax, t: float, colour: str, text: str):
    """A solid vertical line at ``t``, to be named in a legend (labels this close would overlap)."""
    return ax.axvline(t, color=colour, linestyle="-", linewidth=1.4, alpha=0.9, label=text)


def mark_detection_recovery(ax, s: dict, faults: list[int]) -> list:
    """Lines at detection (per_fault ``detect_s``) and the slowest flow's recovery
    (``worst_recovery``, first fault) of the faults ``faults`` (indexes in ``per_fault``);
    returns those to name in a legend: the first of each kind. (The aggregate recovery is not
    drawn: a ring drains before its aggregate dips, so it marks a black-holed flow as
    recovered within 100 ms.)"""
    worst, out, named = recovered_flow(s), [], set()

    def mark(t: float, colour: str, text: str) -> None:
        line = _mark(ax, t, colour, text if colour not in named else "_" + text)
        if colour not in named:
            out.append(line)
            named.add(colour)

    for i in faults:
        f = s["per_fault"][i]
        if f.get("detect_s") is not None:
            mark(f["t_s"] + f["detect_s"], DETECT, f"detected +{fmt_s(f['detect_s'])}")
        if worst and i == 0:
            mark(f["t_s"] + worst["s"], FLOW_RECOVERED,
                 f"slowest flow {worst.get('flow') or ''} recovered +{fmt_s(worst['s'])}")
    return out


def _goodput_axes(ax, series, tr: dict, *, zoom: dict | None) -> list:
    """Goodput, threshold and markers on ``ax``; in a ``zoom`` window also detection and
    recovery, whose lines are returned."""
    if series is not None:
        t = series["t_s"]
        keep = slice(None) if zoom is None else (t >= zoom["t0"] - 0.05) & (t <= zoom["t1"] + 0.05)
        bin_s = float(np.median(np.diff(t))) if len(t) > 1 else tr.get("kpi_resolution_s")
        width = fmt_s(bin_s) + " " if bin_s else ""
        what = " into the hosts" if tr.get("job") else ""   # a command job's: the host links' counters
        ax.plot(t[keep], series["goodput_bps"][keep] / 1e6, linewidth=0.6, color=RAW, label=f"{width}bins{what}")
        ax.plot(t[keep], series["smoothed_bps"][keep] / 1e6, linewidth=1.2, color=SMOOTH,
                label="5-bin rolling median")
    if tr.get("baseline_goodput_bps"):
        ax.axhline(metrics.RECOVERY_FRACTION * tr["baseline_goodput_bps"] / 1e6, color="tab:olive",
                   linestyle=":", linewidth=1.2, label=f"{metrics.RECOVERY_FRACTION:.0%} of pre-fault median")
    if zoom is not None:
        span = zoom["t1"] - zoom["t0"]
    else:
        span = float(series["t_s"][-1]) if series is not None and len(series["t_s"]) else 1.0
    fault_lines(ax, tr.get("faults") or [], label=True, min_gap=span / 40)
    _reconverge_lines(ax, tr.get("reconverge_s") or (), label=True)
    controller_lost_lines(ax, tr, label=True)
    marks = []
    if zoom is not None:
        marks = mark_detection_recovery(ax, tr, zoom["faults"])
        ax.set_xlim(zoom["t0"], zoom["t1"])
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.25)
    return marks


def plot_goodput(run_dir: Path, summary: dict) -> Path:
    """goodput.png: aggregate goodput (Mbit/s) over time, one row per transport: the whole run
    (zoom windows shaded), then a zoom on each fault window with detection and recovery."""
    series = read_goodput(run_dir)
    names = list(summary["transports"])
    wins = {n: fault_windows(summary["transports"][n]) for n in names}
    nz = max((len(w) for w in wins.values()), default=0)
    fig = plt.figure(figsize=(10 + 4.2 * nz, 3.0 * len(names) + 1.0))
    gs = fig.add_gridspec(len(names), 1 + nz, width_ratios=[2.4] + [1] * nz)
    first = None
    for row, name in enumerate(names):
        tr = summary["transports"][name]
        ax = fig.add_subplot(gs[row, 0], sharex=first)
        first = first or ax
        _goodput_axes(ax, series.get(name), tr, zoom=None)
        for w in wins[name]:
            ax.axvspan(w["t0"], w["t1"], color="gold", alpha=0.15, linewidth=0)
        ax.set_ylabel("goodput (Mbit/s)")
        ax.set_title(name, loc="left", fontsize=10, fontweight="bold")
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
        if row == len(names) - 1:
            ax.set_xlabel("time since run start (s)")
        for k, w in enumerate(wins[name]):
            z = fig.add_subplot(gs[row, 1 + k], sharey=ax)
            z.set_facecolor("#fffbea")
            if marks := _goodput_axes(z, series.get(name), tr, zoom=w):
                z.legend(handles=marks, fontsize=7, loc="lower right", framealpha=0.9)
            many = f" ({len(w['faults'])} faults; legend: the first)" if len(w["faults"]) > 1 else ""
            z.set_title(f"{name}: fault window {w['t0']:.2f}-{w['t1']:.2f} s{many}", fontsize=9)
            if row == len(names) - 1:
                z.set_xlabel("time since run start (s)")
    fig.suptitle(f"{summary.get('scenario', '?')}: aggregate goodput")
    fig.tight_layout()
    return save_plot(fig, Path(run_dir) / "goodput.png")


def plot_fault_flows(run_dir: Path, summary: dict) -> Path | None:
    """fault-flows.png: goodput (Mbit/s, 5-bin rolling median of flows.csv's bins) of each
    flow crossing the faulted link (summary ``fault_flows``), in each fault window; one row per
    transport that has such flows. None when no transport lists any."""
    names = [n for n, s in summary["transports"].items() if s.get("fault_flows") and fault_windows(s)]
    if not names or not (Path(run_dir) / "flows.csv").is_file():
        return None
    nz = max(len(fault_windows(summary["transports"][n])) for n in names)
    rates = read_flow_rates(run_dir, {(n, str(f["rank"]), str(f["peer"]), f["dir"])
                                      for n in names for f in summary["transports"][n]["fault_flows"]})
    fig, axes = plt.subplots(len(names), nz, squeeze=False, figsize=(3.5 + 6 * nz, 2.9 * len(names) + 0.7))
    for row, name in enumerate(names):
        s = summary["transports"][name]
        wanted = {(name, str(f["rank"]), str(f["peer"]), f["dir"]): f for f in s["fault_flows"]}
        wins = fault_windows(s)
        for k in range(nz):
            ax = axes[row, k]
            if k >= len(wins):
                ax.set_visible(False)
                continue
            w = wins[k]
            # flows in viridis blues and greens, apart from the markers' reds, oranges and purples
            colours = plt.cm.viridis(np.linspace(0.2, 0.85, max(1, len(wanted))))
            for (key, f), colour in zip(wanted.items(), colours):
                if key in rates:
                    t, r = rates[key]
                    keep = (t >= w["t0"] - 0.05) & (t <= w["t1"] + 0.05)
                    ax.plot(t[keep], metrics.rolling_median(r)[keep] / 1e6, linewidth=1.1, color=colour,
                            label=f"{f.get('label') or key[1]} {f['dir']}")
            fault_lines(ax, s.get("faults") or [], label=True, min_gap=(w["t1"] - w["t0"]) / 40)
            mark_detection_recovery(ax, s, w["faults"])
            ax.set_xlim(w["t0"], w["t1"])
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.25)
            ax.set_title(f"{name}: flows crossing the faulted link", loc="left", fontsize=9)
            ax.set_ylabel("goodput (Mbit/s)")
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            if row == len(names) - 1:
                ax.set_xlabel("time since run start (s)")
    fig.suptitle(f"{summary.get('scenario', '?')}: per-flow goodput around the fault")
    fig.tight_layout()
    return save_plot(fig, Path(run_dir) / "fault-flows.png")


def iteration_times(events: list[dict], world_size: int | None) -> dict[int, list[tuple[int, float]]]:
    """Per size, ``(iter, seconds)`` of each measured iteration all ranks finished, seconds being
    the slowest rank's (as :func:`testbed.metrics.size_table`), by iteration."""
    per: dict[tuple, tuple[set, list]] = {}
    for e in events:
        if e.get("kind") == "iteration" and not e.get("warmup"):
            ranks, secs = per.setdefault((int(e["size"]), e["iter"]), (set(), []))
            ranks.add(e.get("rank"))
            secs.append(float(e["seconds"]))
    out: dict[int, list] = {}
    for (size, it), (ranks, secs) in sorted(per.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if not world_size or len(ranks) >= world_size:
            out.setdefault(size, []).append((it, max(secs)))
    return out


def plot_iteration_cdf(run_dir: Path, summary: dict) -> Path | None:
    """iteration-cdf.png: per message size, the empirical CDF of iteration times (slowest rank)
    of each transport, from <transport>/events.jsonl; the faulted iteration (summary
    ``faulted_iteration``) marked with an x. None when no transport finished an iteration."""
    times: dict[str, dict[int, list]] = {}
    for name, s in summary["transports"].items():
        path = Path(run_dir) / name / "events.jsonl"
        if path.is_file():
            times[name] = iteration_times(metrics.load_jsonl(path), s.get("world_size"))
    sizes = sorted({size for t in times.values() for size in t})
    if not sizes:
        return None
    ncol = min(len(sizes), 3)
    nrow = -(-len(sizes) // ncol)
    slowest = max(sec for t in times.values() for its in t.values() for _, sec in its)
    scale, unit = (1e3, "ms") if slowest < 1 else (1.0, "s")
    fig, axes = plt.subplots(nrow, ncol, squeeze=False, figsize=(1 + 4.3 * ncol, 3.2 * nrow + 0.6))
    for ax in axes.flat[len(sizes):]:
        ax.set_visible(False)
    for ax, size in zip(axes.flat, sizes):
        for k, (name, per) in enumerate(times.items()):
            v = np.sort([sec * scale for _, sec in per.get(size) or ()])
            if not len(v):
                continue
            ax.ecdf(v, color=f"C{k}", label=f"{name} (n={len(v)})")
            fi = summary["transports"][name].get("faulted_iteration")
            if fi and fi.get("size") == size and fi.get("seconds") is not None:
                x = fi["seconds"] * scale
                ax.plot([x], [np.searchsorted(v, x, side="right") / len(v)], marker="x", markersize=9, mew=2,
                        color=f"C{k}", linestyle="none", label=f"{name}: faulted iteration {fi.get('iter')}")
        ax.set_title(f"size {size} B", fontsize=9)
        ax.set_xlabel(f"iteration time, slowest rank ({unit})")
        ax.set_ylabel("fraction of iterations")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
        ax.ticklabel_format(axis="x", useOffset=False, style="plain")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.25)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{summary.get('scenario', '?')}: iteration time CDF")
    fig.tight_layout()
    return save_plot(fig, Path(run_dir) / "iteration-cdf.png")
