"""The report of a command job (a real training script per host; summary ``job``,
:mod:`testbed.metrics.steps`): the "Real job" table, which replaces the side-by-side table of
busbw and iterations for such a run, and ``step-times.png``, every step's time per transport.

Cells come from a transport summary ``s = summary["transports"][name]``; a missing key renders
as "-" (a summary written by an older version)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.ticker

from rich.text import Text

from testbed.report.fmt import fmt_s, fmt_sig
from testbed.report.layout import Grid
from testbed.report.plots import APPLY, plt, save_plot
from testbed.report.tables import _host, cell_detect, cell_valid, cell_worst_stall, has_fault


def is_command_run(summary: dict) -> bool:
    """True if a transport of the run ran a command job (its summary has ``job``)."""
    return any(isinstance(s.get("job"), dict) and s["job"].get("kind") == "command"
               for s in (summary.get("transports") or {}).values())


def _job(s: dict) -> dict:
    return s.get("job") if isinstance(s.get("job"), dict) else {}


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.0f}%"


def cell_completed(s: dict) -> Text | str:
    """"yes", or "no: <why>" in red (summary ``job.completion``)."""
    j = _job(s)
    if "complete" not in j:
        return "-"
    return "yes" if j["complete"] else Text(f"no: {j.get('completion') or 'unknown'}", style="red")


def cell_steps(s: dict) -> str:
    """"20 / 20": steps every rank reported (the fewest of any rank) / the scenario's ("?": unknown)."""
    j = _job(s)
    if "steps_done" not in j:
        return "-"
    exp = j.get("steps_expected")
    return f"{j['steps_done']} / {'?' if exp is None else exp}"


def cell_step(key: str):
    """A healthy-step statistic: "100 ms (n=15)" for p50, the value alone otherwise."""
    def cell(s: dict) -> str:
        st = _job(s).get("step_s") or {}
        if st.get(key) is None:
            return "-"
        return fmt_s(st[key]) + (f" (n={st.get('n')})" if key == "p50" else "")
    return cell


def cell_worst_step(s: dict) -> str:
    """"2.000 s (+1900%) step 10"."""
    w = _job(s).get("worst_step")
    if not w:
        return "-"
    return f"{fmt_s(w.get('seconds'))} ({_pct(w.get('slowdown_pct'))}) step {w.get('step')}"


def cell_faulted_step(s: dict) -> str:
    """"step 10: +1900% (2.000 s vs 100 ms)"; "not finished" when some rank never ended it."""
    j = _job(s)
    f = j.get("faulted_step")
    if f is None:
        return "-" if "faulted_step" not in j else ("no step in progress" if has_fault(s) else "no fault")
    if f.get("seconds") is None:
        return f"step {f.get('step')}: not finished"
    return (f"step {f.get('step')}: {_pct(f.get('slowdown_pct'))} ({fmt_s(f.get('seconds'))} vs "
            f"{fmt_s(f.get('healthy_median_s'))})")


def cell_host_stall(s: dict) -> str:
    """"2.100 s h0 (h0-e0)": the longest host-link stall and whose link it was."""
    stalls = _job(s).get("host_link_stalls")
    if not stalls:
        return "-" if stalls is None else "no host link counters"
    worst = max(stalls, key=lambda x: x.get("longest_stall_s") or 0.0)
    if not worst.get("longest_stall_s"):
        return "none"
    return f"{fmt_s(worst['longest_stall_s'])} {worst.get('host')} ({worst.get('link')})"


def cell_flow_stall(s: dict) -> str:
    """The worst flow stall where the transport has flow samples (mrc's backend), else "n/a"."""
    if not s.get("flow_kpis") and not s.get("has_evs"):
        return "n/a (no flow samples)"
    return cell_worst_stall(s)


def cell_exit_codes(s: dict) -> str:
    """"all 0", or "rank 1: 1, rank 3: -" (- no exit code recorded)."""
    codes = _job(s).get("exit_codes")
    if not codes:
        return "-"
    if all(c == 0 for c in codes.values()):
        return "all 0"
    return ", ".join(f"rank {r}: {'-' if c is None else c}" for r, c in codes.items() if c != 0)


def loss_diff(a: list | None, b: list | None) -> tuple[float | None, int]:
    """(max |a[k] - b[k]|, n) over the steps k both losses report (finite values); (None, 0) if none."""
    pairs = [(x, y) for x, y in zip(a or (), b or ()) if isinstance(x, (int, float)) and isinstance(y, (int, float))
             and math.isfinite(x) and math.isfinite(y)]
    if not pairs:
        return None, 0
    return max(abs(x - y) for x, y in pairs), len(pairs)


def _final(losses: list | None) -> float | None:
    return next((x for x in reversed(losses or ()) if isinstance(x, (int, float))), None)


def loss_cells(summary: dict) -> list[str]:
    """Per transport: the first "final 0.2431" (the reference); the others "max |diff| 0 over 20
    steps, final 0.2431" against it (equal training reads 0)."""
    names = list(summary["transports"])
    ref = _job(summary["transports"][names[0]]).get("losses") if names else None
    out = []
    for i, n in enumerate(names):
        losses = _job(summary["transports"][n]).get("losses")
        if not losses:
            out.append("not reported")
            continue
        final = f"final {fmt_sig(_final(losses), 4)}"
        if i == 0:
            out.append(final)
            continue
        d, k = loss_diff(ref, losses)
        out.append(f"max |diff| {fmt_sig(d, 2)} over {k} steps, {final}" if k else f"no common step, {final}")
    return out


REAL_JOB_ROWS = [
    ("completed", cell_completed),
    ("steps done / expected", cell_steps),
    ("healthy step p50", cell_step("p50")),
    ("healthy step p99", cell_step("p99")),
    ("worst step", cell_worst_step),
    ("faulted step", cell_faulted_step),
    ("longest host-link stall", cell_host_stall),
    ("time to detect", cell_detect),
    ("worst flow stall", cell_flow_stall),
    ("exit codes", cell_exit_codes),
    ("valid", cell_valid),
]


def real_job_table(summary: dict) -> Grid:
    """Transports side by side (one column each) for a command job: completion, steps, healthy
    and worst step times, the faulted step, the longest host-link stall, the flow KPIs where there
    are flows (mrc), exit codes, validity and the losses against the first transport."""
    names = list(summary["transports"])
    per = {n: summary["transports"][n] for n in names}
    rows = [[label, *(f(per[n]) for n in names)] for label, f in REAL_JOB_ROWS]
    rows.insert(-1, ["losses (vs " + (names[0] if names else "-") + ")", *loss_cells(summary)])
    title = f"Real job: {summary.get('scenario', '?')}, transports side by side{_host(summary)}"
    return Grid(title, ["metric", *names], rows, split="columns", shrink_first=(0,))


def plot_step_times(run_dir: Path, summary: dict) -> Path | None:
    """step-times.png: every step's time (slowest rank, summary ``job.step_times_s``) per transport,
    the faulted step (``job.faulted_step``) marked; None for a run without a command job's steps."""
    series = {n: _job(s).get("step_times_s") for n, s in summary["transports"].items()}
    series = {n: v for n, v in series.items() if v and any(x is not None for x in v)}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for k, (name, times) in enumerate(series.items()):
        steps = [i for i, x in enumerate(times) if x is not None]
        ax.plot(steps, [times[i] for i in steps], marker=".", linewidth=1.1, color=f"C{k}", label=name)
        f = _job(summary["transports"][name]).get("faulted_step")
        if f and f.get("step") is not None:
            ax.axvline(f["step"], color=APPLY, linestyle="--", linewidth=1)
            text = f"{name}: fault at {f.get('fault_t_s', 0):.2f} s, step {f['step']}"
            if f.get("seconds") is not None:
                ax.plot([f["step"]], [f["seconds"]], marker="x", markersize=9, mew=2, color=f"C{k}",
                        linestyle="none", label=text)
            else:
                ax.plot([], [], color=APPLY, linestyle="--", label=text + " (not finished)")
    values = [x for v in series.values() for x in v if x]
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("step time, slowest rank (s)")
    ax.grid(alpha=0.25)
    ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"{summary.get('scenario', '?')}: training step times")
    fig.tight_layout()
    return save_plot(fig, Path(run_dir) / "step-times.png")
