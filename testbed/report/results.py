"""Tables of results documents (:mod:`testbed.metrics.results`): trials, sweeps, and two side by side.

- :func:`results_tables`: a sweep's table per KPI (rows: sweep points, columns: transports,
  cells "median [min-max] (n)"), or the trials table of a document of one point.
- :func:`compare_table`: two documents' KPIs per transport side by side with the difference
  of the medians, absolute and in percent of the first (``testbed compare``).
"""

from __future__ import annotations


from testbed.report.layout import Grid
from testbed.report.trials import LABELS, _job_rows, _recovery_cell, fmt_stats, trials_table


def transports_of(doc: dict) -> list[str]:
    """Every transport of a document's points, in order of first appearance."""
    return list(dict.fromkeys(n for p in doc["points"] for n in p["transports"]))


def kpi_labels(doc: dict) -> dict[str, tuple[str, object]]:
    """KPI -> (label, formatter) for the KPIs of :data:`LABELS` and the per-job KPIs present."""
    per_job = {k: v for p in doc["points"] for t in p["transports"].values() for k, v in _job_rows(t).items()}
    return {**LABELS, **per_job}


def _cell(t: dict | None, kpi: str, fmt) -> str:
    st = (t or {}).get(kpi) or {}
    return _recovery_cell(st, fmt) if kpi == "worst_recovery.s" and st else fmt_stats(st, fmt)


def point_title(doc: dict, p: dict) -> str:
    return p.get("label") or ", ".join(f"{k}={v}" for k, v in (p.get("values") or {}).items()) or "-"


def sweep_tables(doc: dict) -> list[Grid]:
    """One table per KPI: a row per sweep point, a column per transport."""
    names = transports_of(doc)
    out = []
    swept = ", ".join(doc.get("swept") or ()) or "point"
    for kpi, (label, fmt) in kpi_labels(doc).items():
        rows = [[point_title(doc, p), *(_cell(p["transports"].get(n), kpi, fmt) for n in names)]
                for p in doc["points"]]
        if all(not ((p["transports"].get(n) or {}).get(kpi) or {}).get("n") for p in doc["points"] for n in names):
            continue     # a KPI no run gave (e.g. time to detect without a fault)
        out.append(Grid(f"{doc.get('scenario')}: {label}: median [min-max] (n)", [swept, *names], rows,
                        split="rows", shrink_first=(0,)))
    return out


def results_tables(doc: dict) -> list[Grid]:
    """The tables of a results document: per KPI for a sweep, else the trials table."""
    if doc.get("kind") == "sweep":
        return sweep_tables(doc)
    p = doc["points"][0]
    return [trials_table({"scenario": doc.get("scenario"), **p})]


# -- compare -------------------------------------------------------------------------------------

def _value_cell(st: dict, fmt) -> str:
    """One run: its value; several: "median [min-max] (n)"."""
    if not st or not st.get("n"):
        return "-"
    return fmt(st["median"]) if st["n"] == 1 else fmt_stats(st, fmt)


def difference(a: dict | None, b: dict | None) -> tuple[float | None, float | None]:
    """(b - a, (b - a) / |a| in percent) of two stats' medians; None where undefined
    (a median missing; the percentage of a zero)."""
    ma, mb = (a or {}).get("median"), (b or {}).get("median")
    if ma is None or mb is None:
        return None, None
    d = mb - ma
    return d, (d / abs(ma) * 100 if ma else None)


def _signed(fmt, x: float | None) -> str:
    if x is None:
        return "-"
    text = fmt(abs(x))
    return text if text in ("0", "-") else ("+" if x > 0 else "-") + text


def matched_points(a: dict, b: dict) -> list[tuple[str, dict | None, dict | None]]:
    """Points of ``a`` and ``b`` paired by label (two single-point documents: their one point
    each, whatever the labels), in ``a``'s order then ``b``'s."""
    if len(a["points"]) == 1 and len(b["points"]) == 1:
        pa, pb = a["points"][0], b["points"][0]
        label = pa.get("label") if pa.get("label") == pb.get("label") else ""
        return [(label or "", pa, pb)]
    la = {point_title(a, p): p for p in a["points"]}
    lb = {point_title(b, p): p for p in b["points"]}
    return [(k, la.get(k), lb.get(k)) for k in dict.fromkeys([*la, *lb])]


def compare_rows(a: dict, b: dict, pa: dict | None, pb: dict | None) -> list[list[str]]:
    """Rows (KPI, transport, A, B, B-A, %) for the transports of either point, KPI by KPI."""
    names = list(dict.fromkeys([*((pa or {}).get("transports") or {}), *((pb or {}).get("transports") or {})]))
    labels = {**kpi_labels(a), **kpi_labels(b)}
    rows = []
    for kpi, (label, fmt) in labels.items():
        first = True
        for n in names:
            sa = (((pa or {}).get("transports") or {}).get(n) or {}).get(kpi) or {}
            sb = (((pb or {}).get("transports") or {}).get(n) or {}).get(kpi) or {}
            if not sa.get("n") and not sb.get("n"):
                continue
            d, pct = difference(sa, sb)
            rows.append([label if first else "", n, _value_cell(sa, fmt), _value_cell(sb, fmt),
                         _signed(fmt, d), "-" if pct is None else f"{pct:+.1f}%"])
            first = False
    return rows


def compare_table(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> list[Grid]:
    """A table per matched point (one for two runs or two trials): each KPI and transport, A's
    and B's value (median [min-max] (n) over trials), B - A and (B - A) / A."""
    out = []
    for label, pa, pb in matched_points(a, b):
        where = f" at {label}" if label else ""
        if pa is None or pb is None:
            missing = name_a if pa is None else name_b
            out.append(Grid(f"{label}: not in {missing}", ["KPI"], [], caption="nothing to compare"))
            continue
        title = f"{a.get('scenario')} vs {b.get('scenario')}{where}: A = {name_a}, B = {name_b}"
        rows = compare_rows(a, b, pa, pb)
        out.append(Grid(title, ["KPI", "transport", "A", "B", "B - A", "%"], rows, split="rows",
                        justify=["left", "left", "right", "right", "right", "right"], shrink_first=(0,),
                        caption=None if rows else "no KPI in either"))
    return out



