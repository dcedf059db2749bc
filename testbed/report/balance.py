"""The report's load-balance tables, from ``summary["transports"][name]["balance"]``
(:func:`testbed.metrics.balance.balance_summary`); a summary without it renders as "-"."""

from __future__ import annotations

import re

from rich.text import Text

from testbed.report.fmt import fmt_pct, fmt_sig
from testbed.report.layout import Grid

COLLIDING_SHOWN = 8     # colliding directions listed per transport


def _ev_paths(ev: dict | None) -> str:
    """"8 EVs, 4 paths" (ranges "4-8" when QPs differ); "-" without EVs."""
    if not ev:
        return "-"
    evs = f"{ev['evs_min']}" if ev["evs_min"] == ev["evs_max"] else f"{ev['evs_min']}-{ev['evs_max']}"
    lo, hi = ev["distinct_paths_min"], ev["distinct_paths_max"]
    return f"{evs} EVs, {lo if lo == hi else f'{lo}-{hi}'} paths"


def _cells(b: dict) -> list[str]:
    f, h, c = b.get("fabric") or {}, b.get("host") or {}, b.get("collisions") or {}
    top = (f.get("busiest") or [None])[0]
    mom = f.get("max_over_mean")
    return ["-" if mom is None else fmt_sig(mom), fmt_pct(f.get("max")), fmt_pct(f.get("mean")), fmt_pct(f.get("p50")),
            "-" if not f else f"{f['busy']} of {f['directions']}",
            "-" if top is None else f"{top['direction']} {fmt_pct(top['utilisation'])}",
            "-" if not c.get("directions_used") else f"{c['colliding']} of {c['directions_used']}",
            fmt_sig(c.get("max_load")) if c else "-", fmt_pct(h.get("mean")), _ev_paths(b.get("ev_paths"))]


ROWS = ["fabric max/mean", "fabric max", "fabric mean", "fabric p50", "fabric > 90%", "busiest fabric direction",
        "colliding directions", "max load (flows)", "host links mean", "EV paths"]


def balance_table(summary: dict) -> Grid:
    """Transports side by side (one column each): the fabric directions' utilisation max/mean,
    max, mean, p50 and how many are above 90%, the busiest one, the fabric directions that
    traced paths of two or more QPs cross (of those crossed at all) and the largest load
    (full-rate flows on one direction), the host links' mean utilisation, EVs per QP and the
    distinct paths they cover."""
    names = list(summary["transports"])
    per = {n: _cells(summary["transports"][n].get("balance") or {}) for n in names}
    rows = [[label, *(per[n][i] for n in names)] for i, label in enumerate(ROWS)]
    window = next((s.get("balance", {}).get("window_source") for s in summary["transports"].values()
                   if (s.get("balance") or {}).get("window_source")), None)
    title = "load balance: link utilisation" + (f" over the {window.replace('_', ' ')}" if window else "")
    return Grid(title, ["metric", *names], rows, split="columns", shrink_first=(0,),
                caption="utilisation = bytes sent / (rate x window), per link direction; colliding: crossed "
                        "by 2+ QPs' traced paths; load: full-rate flows on one direction")


_QP = re.compile(r"^(?P<conn>.*) qp\d+$")


def grouped_flows(labels: list[str]) -> str:
    """Flow labels with the QPs of one connection folded: ``"rc-x8 4->5 qp0", "rc-x8 4->5 qp3"``
    -> ``"rc-x8 4->5 (2 QPs)"``; other labels as they are, in order of first appearance."""
    groups: dict[str, int] = {}
    for label in labels:
        m = _QP.match(label)
        key = m.group("conn") if m else label
        groups[key] = groups.get(key, 0) + (1 if m else 0)
    return ", ".join(f"{k} ({n} QP{'s' if n != 1 else ''})" if n else k for k, n in groups.items())


def collisions_table(summary: dict, shown: int = COLLIDING_SHOWN) -> Grid | Text:
    """The oversubscribed fabric directions of each transport (load above 1: traced paths of
    more than one connection's worth of flows cross it), most loaded first, at most ``shown``:
    load, utilisation and the flows that cross it. Colliding directions at load 1 or less
    (an MRC QP's EVs beside another QP's) are counted in the caption, not listed. With no
    oversubscribed direction, just that line (a Text), no table."""
    rows, quiet = [], 0
    for name, s in summary["transports"].items():
        links = ((s.get("balance") or {}).get("collisions") or {}).get("links") or []
        over = [c for c in links if c["load"] > 1 + 1e-9]
        quiet += len(links) - len(over)
        for i, c in enumerate(over[:shown]):
            rows.append([name if i == 0 else "", c["direction"], fmt_sig(c["load"]), fmt_pct(c.get("utilisation")),
                         grouped_flows(c["flows"])])
        if len(over) > shown:
            rows.append(["", f"... {len(over) - shown} more", "", "", ""])
    caption = [] if rows else ["no fabric direction oversubscribed"]
    if quiet:
        caption.append(f"{quiet} colliding directions at load <= 1 not listed")
    if not rows:   # no empty table above the line that says there is nothing in it
        return Text("; ".join(caption))
    return Grid("oversubscribed fabric link directions (traced paths)",
                ["transport", "direction", "load", "utilisation", "flows"], rows,
                justify=["left", "left", "right", "right", "left"], caption="; ".join(caption) or None)
