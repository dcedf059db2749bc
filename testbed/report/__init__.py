"""Run reports: the files of a run directory, tables and PNG plots.

:func:`write_outputs` turns the raw records (see :mod:`testbed.metrics`) into, in the
run directory (one row per bin; ``t_s`` = bin start, seconds from the transport's run start):

- ``flows.csv``: ``transport,rank,peer,dir,t_s,bytes,rate_bps,retransmits,rtt_s,cwnd_bytes``;
  per flow and bin (one agent sample interval: summary ``kpi_resolution_s``): bytes counted in
  the bin (rx: goodput; tx: sent), its rate in bits/s, retransmissions in the bin (packets),
  last RTT (s) and cwnd (bytes) sampled in the bin (empty if none).
- ``goodput.csv``: ``transport,t_s,goodput_bps,smoothed_bps``; aggregate goodput per bin
  (bits/s) and its 5-bin rolling median (the series recovery time is measured on).
- ``links.csv``: ``transport,link,end,t_s,tx_bytes,throughput_bps,drops,rate_bps``; per link
  end and 100 ms bin, from kernel counters; ``rate_bps`` is the configured rate.
- ``summary.json``: :func:`testbed.metrics.analyze_run` (per transport, side by side in
  ``comparison``, metric definitions in ``definitions``).

:func:`render` prints the tables and re-writes the plots from those files only (and
``<transport>/events.jsonl``): ``goodput.png`` (with a zoom on each fault),
``fault-flows.png``, ``iteration-cdf.png``, ``ev-timeline-<transport>[-rank<r>].png``; for a
command job (a real training script: summary ``job``) ``step-times.png`` instead of the
iteration CDF, and the "Real job" table (:mod:`.realjob`) instead of the busbw and nccl-tests ones.
Tables fit the console's width, also at 80 columns and when piped (:mod:`.layout`); each
transport's per-size results are also printed as plain nccl-tests text for its parsers.

Modules: :mod:`.files` (CSV and summary.json), :mod:`.fmt` (number formats), :mod:`.layout`
(width-fitting tables), :mod:`.tables`, :mod:`.plots`, :mod:`.evplot`, :mod:`.realjob`.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from testbed.report.evplot import STATE_COLOURS, ev_segments, plot_ev_timelines
from testbed.report.files import _cell, _float_cells, _load, _time_cells, _write_csv, load_summary, render_guard, write_outputs
from testbed.report.fmt import fmt_count, fmt_num, fmt_pct, fmt_s, fmt_sig
from testbed.report.layout import Grid
from testbed.report.plots import fault_windows, plot_fault_flows, plot_goodput, plot_iteration_cdf
from testbed.report.balance import balance_table, collisions_table
from testbed.report.realjob import is_command_run, plot_step_times, real_job_table
from testbed.report.regime import regime_table
from testbed.report.tables import busbw_by_size_table, comparison_table, jobs_table, links_table, nccl_tests_block, validity_table
from testbed.rundir.damage import Damage, collecting, current_damage

__all__ = [
    "STATE_COLOURS", "Grid", "busbw_by_size_table", "comparison_table", "jobs_table", "ev_segments", "fault_windows",
    "fmt_count", "fmt_num", "fmt_pct", "fmt_s", "fmt_sig", "links_table", "load_summary", "nccl_tests_block",
    "plot_ev_timelines", "defaults_line", "regime_table", "plot_fault_flows", "plot_goodput", "plot_iteration_cdf", "print_damage", "render",
    "render_tables", "is_command_run", "plot_step_times", "real_job_table",
    "validity_table", "write_outputs", "write_plots",
]
_ = (_cell, _float_cells, _time_cells, _write_csv)   # CSV internals, tested through this package


def write_plots(run_dir: Path, summary: dict, rank: int | None = None) -> list[Path]:
    """All PNGs of a run (see the module docstring); returns their paths. ``rank``: the rank
    whose EVs the EV timelines show (default: the ranks with EVs crossing the fault)."""
    run_dir = Path(run_dir)
    paths = [plot_goodput(run_dir, summary)]
    steps = plot_step_times if is_command_run(summary) else plot_iteration_cdf
    paths += [p for p in (plot_fault_flows(run_dir, summary), steps(run_dir, summary)) if p]
    for name in summary["transports"]:
        paths += plot_ev_timelines(run_dir, summary, name, rank)
    return paths


def render_tables(summary: dict, console: Console) -> None:
    """Print a summary's tables: side by side, busbw by size, nccl-tests text per transport,
    fidelity (host, links), warnings and kernel fallbacks; nothing wider than the console, nothing cut. A command
    job's run (:func:`is_command_run`) has the "Real job" table instead of the first three."""
    command = is_command_run(summary)
    console.print(real_job_table(summary) if command else comparison_table(summary))
    if defaults := defaults_line(summary):
        console.print(Text(defaults), soft_wrap=True)
    if (jobs := jobs_table(summary)) is not None:
        console.print(jobs)
    if not command:
        console.print(busbw_by_size_table(summary))
        for s in summary["transports"].values():
            # Plain text, never wrapped or cropped: nccl-tests parsers read it line by line.
            console.print(Text(nccl_tests_block(s)), soft_wrap=True)
    console.print(validity_table(summary))
    console.print(regime_table(summary))
    console.print(links_table(summary))
    if any(s.get("balance") for s in summary["transports"].values()):
        console.print(balance_table(summary))
        console.print(collisions_table(summary))
    for name, s in summary["transports"].items():
        for line in controller_timeline(s):   # the run went on without it: say when, and what came back
            console.print(line)
        for w in s.get("warnings") or ():
            console.print(Text.assemble(("warning", "yellow"), f" {name}: {w}"))
    for line in summary.get("kernel_fallbacks") or ():   # the fabric did without a kernel feature
        console.print(Text.assemble(("kernel fallback", "yellow"), f": {line}"))


def controller_timeline(s: dict) -> list[Text]:
    """One transport's controller losses, restarts and resyncs (summary ``controller_lost``,
    ``controller_restarts``, ``controller_resyncs``), one line each in time order."""
    name = s.get("transport", "")
    rows = [(x["t_s"], ("controller lost", "red"), f"{x['reason']}") for x in s.get("controller_lost") or ()]
    rows += [(x["t_s"], ("controller restarted", "yellow"), f"attempt {x['attempt']}, pid {x['pid']}")
             for x in s.get("controller_restarts") or ()]
    rows += [(x["t_s"], ("controller resynced", "green"),
              f"{x['answered']} of {x['connections']} connections answered; EVs found replaced {x['replaced']}, "
              f"denied {x['denied']}, ASSUMED_BAD {x['assumed_bad']}") for x in s.get("controller_resyncs") or ()]
    return [Text.assemble(head, f" {name}: at {t:.3f} s, {text}") for t, head, text in sorted(rows, key=lambda r: r[0])]


def defaults_line(summary: dict) -> str:
    """``defaults (keys the scenario left out): seed 1, workload.iterations 5, timeout 68 s``: the values the scenario's absent
    optional keys took (manifest ``scenario.defaults``), or "" when it gave every one."""
    defaults = summary.get("defaults")
    if not isinstance(defaults, dict) or not defaults:
        return ""
    return "defaults (keys the scenario left out): " + ", ".join(
        f"{k} {fmt_num(v, '.0f')} s" if k == "timeout" else f"{k} {v}" for k, v in defaults.items())


def render(run_dir: Path, console: Console, *, recompute: bool = False, rank: int | None = None,
           plots: bool = True) -> dict:
    """Print the tables of a run (:func:`render_tables`) and (re)write its PNGs
    (:func:`write_plots`), from the run directory's files only. Returns the summary.
    A damaged run directory renders what it can: the problems go to the enclosing
    :func:`testbed.rundir.damage.collecting` block, else are printed after the tables.
    Raises metrics.RunDirError for a non-run directory, metrics.MetricsError when a stored
    summary.json cannot be rendered."""
    outer = current_damage()
    with collecting(outer) as damage:
        summary, fresh = _load(Path(run_dir), recompute, damage)
        with render_guard(run_dir, fresh):
            render_tables(summary, console)
            if plots:
                paths = write_plots(Path(run_dir), summary, rank)
                console.print(Text(f"plots in {run_dir}: " + ", ".join(p.name for p in paths)))
    if outer is None and damage:
        print_damage(damage, console)
    return summary


def print_damage(damage: "Damage", console: Console) -> None:
    """The problems of a damaged run directory, one per line (as ``file:line: what``)."""
    lines = damage.lines()
    console.print(Text.assemble(("damaged run directory", "red"), f": {len(lines)} problem(s)"))
    for line in lines:
        console.print(Text(f"  {line}"), soft_wrap=True)
