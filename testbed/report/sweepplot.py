"""Sweep plots: one PNG per KPI against the first swept key (``sweep-<kpi>.png``).

A line per transport through each point's median, with a band from min to max over the
point's trials. With more swept keys, a line per transport and combination of the other
keys' values (colour: the transport; line style and marker: the other keys' values, named in
the legend), all on one plot per KPI. The x axis is numeric when every value of the first
key is a number, else the values in sweep order, evenly spaced.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from testbed.report.plots import save_plot  # noqa: E402
from testbed.report.results import kpi_labels, transports_of  # noqa: E402

_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _scale(fmt) -> float:
    """The factor a KPI's table formatter applies (percent, milliseconds), read off 1.0."""
    try:
        return float(fmt(1.0))
    except (TypeError, ValueError):
        return 1.0


def plot_file(kpi: str) -> str:
    return "sweep-" + re.sub(r"[^A-Za-z0-9]+", "-", kpi).strip("-") + ".png"


def plot_sweep(out_dir: Path, doc: dict) -> list[Path]:
    """The PNGs of a sweep document into ``out_dir``; returns their paths ([] if not a sweep)."""
    swept = doc.get("swept") or []
    if doc.get("kind") != "sweep" or not swept:
        return []
    first, others = swept[0], swept[1:]
    xs_raw = list(dict.fromkeys(str(p["values"].get(first)) for p in doc["points"]))
    raw_of = {str(p["values"].get(first)): p["values"].get(first) for p in doc["points"]}
    numeric = all(_number(raw_of[x]) is not None for x in xs_raw)
    pos = {x: (_number(raw_of[x]) if numeric else i) for i, x in enumerate(xs_raw)}
    groups = list(dict.fromkeys(tuple(str(p["values"].get(k)) for k in others) for p in doc["points"]))
    names = transports_of(doc)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    paths = []
    for kpi, (label, fmt) in kpi_labels(doc).items():
        scale = _scale(fmt)
        fig, ax = plt.subplots(figsize=(7, 4.2))
        drawn = False
        for ti, name in enumerate(names):
            for gi, group in enumerate(groups):
                pts = []
                for p in doc["points"]:
                    if tuple(str(p["values"].get(k)) for k in others) != group:
                        continue
                    st = (p["transports"].get(name) or {}).get(kpi) or {}
                    if st.get("n"):
                        pts.append((pos[str(p["values"].get(first))], st["median"] * scale,
                                    st["min"] * scale, st["max"] * scale))
                if not pts:
                    continue
                pts.sort()
                x, med, lo, hi = zip(*pts)
                tag = name + (" (" + ", ".join(f"{k}={v}" for k, v in zip(others, group)) + ")" if others else "")
                colour = colours[ti % len(colours)]
                ax.plot(x, med, color=colour, linestyle=_STYLES[gi % len(_STYLES)],
                        marker=_MARKERS[gi % len(_MARKERS)], label=tag)
                ax.fill_between(x, lo, hi, color=colour, alpha=0.15, linewidth=0)
                drawn = True
        if not drawn:
            plt.close(fig)
            continue
        if not numeric:
            ax.set_xticks(list(range(len(xs_raw))), xs_raw)
        ax.set_xlabel(first)
        ax.set_ylabel(label)
        ax.set_title(f"{doc.get('scenario')}: {label} (median, band: min-max over trials)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(save_plot(fig, Path(out_dir) / plot_file(kpi)))
        plt.close(fig)
    return paths
