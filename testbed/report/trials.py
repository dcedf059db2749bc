"""The trials table: each KPI of :mod:`testbed.metrics.trials` as "median [min-max] (n)" per transport."""

from __future__ import annotations

from testbed.report.fmt import fmt_count, fmt_sig
from testbed.report.layout import Grid


def _count(x: float | None) -> str:
    """A count, or the median of counts (which may end in .5)."""
    return fmt_count(x) if x is None or float(x).is_integer() else f"{x:.1f}"


def _scaled(scale: float):
    return lambda x: fmt_sig(None if x is None else x * scale)


# KPI -> (table label with its unit, value formatter): bare numbers (3 significant figures,
# counts whole), so "median [min-max] (n)" stays short.
LABELS: dict[str, tuple[str, object]] = {
    "busbw_mbit_per_s": ("busbw (Mbit/s)", fmt_sig),
    "busbw_fraction_of_host": ("busbw / host (%)", _scaled(100)),
    "busbw_fraction_of_nics": ("busbw / NICs used (%)", _scaled(100)),
    "faulted_iteration.slowdown_pct": ("faulted iteration slowdown (%)", fmt_sig),
    "faulted_iterations.worst_slowdown_pct": ("worst faulted iteration slowdown (%)", fmt_sig),
    "detect_s": ("time to detect (ms)", _scaled(1e3)),
    "detect_median_s": ("time to detect, median over crossing QPs (ms)", _scaled(1e3)),
    "detect_worst_s": ("time to detect, worst crossing QP (ms)", _scaled(1e3)),
    "false_retirements.count": ("false retirements", _count),
    "worst_stall.s": ("worst flow stall (ms)", _scaled(1e3)),
    "worst_recovery.s": ("worst flow recovery (ms)", _scaled(1e3)),
    "healthy_gap_p99_s": ("healthy gap p99 (ms)", _scaled(1e3)),
    "base_rtt_s": ("base RTT (ms)", _scaled(1e3)),
    "retransmits_after_fault": ("retransmits after fault (pkts)", _count),
    "iteration_s.p50": ("iteration p50 (s)", fmt_sig),
    "wrong": ("#wrong", _count),
    "qp_errors": ("QP errors", _count),
    "balance.fabric.max_over_mean": ("fabric utilisation max/mean", fmt_sig),
    "balance.collisions.max_load": ("max load on a fabric link (flows)", fmt_sig),
    "job.step_s.p50": ("healthy step p50 (ms)", _scaled(1e3)),
    "job.faulted_step.slowdown_pct": ("faulted step slowdown (%)", fmt_sig),
    "job.worst_step.slowdown_pct": ("worst step slowdown (%)", fmt_sig),
    "job.longest_host_link_stall_s": ("longest host-link stall (ms)", _scaled(1e3)),
}
JOB_LABELS: dict[str, tuple[str, object]] = {"busbw_fraction_of_host": ("busbw / host (%)", _scaled(100))}
def fmt_stats(st: dict, fmt=fmt_sig) -> str:
    """"median [min-max] (n)"; "- (0)" when no trial gave a value."""
    if not st.get("n"):
        return f"- ({st.get('n', 0)})"
    return f"{fmt(st['median'])} [{fmt(st['min'])}-{fmt(st['max'])}] ({st['n']})"


def _recovery_cell(st: dict, fmt) -> str:
    text = fmt_stats(st, fmt)
    extra = [f"{st[k]} {k.replace('_', ' ')}" for k in ("no_dip", "not_recovered") if st.get(k)]
    return text + ("; " + ", ".join(extra) if extra else "")


def _job_rows(t: dict) -> dict[str, tuple[str, object]]:
    out = {}
    for kpi in t:
        if kpi.startswith("jobs."):
            _, name, key = kpi.split(".", 2)
            label, fmt = JOB_LABELS[key]
            out[kpi] = (f"{name}: {label}", fmt)
    return out


def trials_table(agg: dict) -> Grid:
    """KPIs (rows) per transport (columns) as "median [min-max] (n)"; a renderable that fits the
    console width like the report's tables (:class:`testbed.report.layout.Grid`)."""
    names = list(agg["transports"])
    rows = []
    per_job = {k: v for n in names for k, v in _job_rows(agg["transports"][n]).items()}
    for kpi, (label, fmt) in {**LABELS, **per_job}.items():
        if kpi.startswith("job.") and not any((agg["transports"][n].get(kpi) or {}).get("n") for n in names):
            continue   # a command job's KPIs: rows only where one ran
        cells = [_recovery_cell(agg["transports"][n][kpi], fmt) if kpi == "worst_recovery.s"
                 else fmt_stats(agg["transports"][n].get(kpi) or {}, fmt) for n in names]
        rows.append([label, *cells])
    rows.append(["faulted link (trials)", *(", ".join(f"{k}: {v}" for k, v in agg["transports"][n]["faulted_link"]
                                                      .items()) or "-" for n in names)])
    seeds = f", seeds {', '.join(map(str, agg['seeds']))}" if agg.get("seeds") else ""
    title = f"{agg.get('scenario')}: {agg['trials']} trials{seeds}: median [min-max] (n)"
    return Grid(title, ["KPI", *names], rows, split="columns", shrink_first=(0,))
