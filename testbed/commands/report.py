"""``testbed report RUN_DIR``: render a run's tables and plots again from its files.

Prints the side-by-side comparison, the nccl-tests-style per-size tables and the
fidelity table, and rewrites the PNG plots in RUN_DIR. ``summary.json`` and the CSV
files are computed from the raw records when missing (or with ``--recompute``).
``--format json`` prints summary.json on stdout instead of tables.

A damaged run directory (a record or file that is not what the runner writes) is rendered
as far as it can be; every problem is listed on stderr as ``file:line: what is wrong``.
summary.json and the CSV files are never replaced with results from damaged or missing
raw records when intact ones exist.

RUN_DIR may also be a trials or sweep directory (or its trials.json / sweep.json: one results
format, :mod:`testbed.metrics.results`): its tables (a sweep: one per KPI) and, for a sweep,
its plots again.

Exit status: 0 ok; 2 RUN_DIR is not a run directory, or nothing in it could be rendered;
3 rendered, but the run directory is damaged (problems on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape

from testbed.metrics import MetricsError
from testbed.rundir.damage import collecting
from testbed.rundir.errors import RunDirWriteError
from testbed.report import load_summary, print_damage, render

EXIT_DAMAGED = 3
"""``testbed report`` rendered a run directory with damaged records."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render a run directory's tables and plots again",
                       description=__doc__.splitlines()[0])
    p.add_argument("run_dir", metavar="RUN_DIR", help="runs/<scenario>-<timestamp>/")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text tables and PNGs (default), or summary.json on stdout")
    p.add_argument("--recompute", action="store_true",
                   help="recompute summary.json and the CSV files from the raw JSONL records")
    p.add_argument("--rank", type=int, default=None,
                   help="rank whose EVs the EV timeline plot shows (default: most EV transitions)")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="do not write PNG plots")
    p.set_defaults(func=run)


def _results(args: argparse.Namespace, err: Console) -> int | None:
    """Render a trials or sweep directory or results file; None if RUN_DIR is not one."""
    from pathlib import Path

    from testbed.metrics import results
    from testbed.report.results import results_tables
    path = Path(args.run_dir)
    if not (path.is_file() or (path / results.SWEEP_FILE).is_file() or (path / results.TRIALS_FILE).is_file()):
        return None
    try:
        doc = results.load(path)
    except results.ResultsError as exc:
        err.print(f"[red]testbed report[/]: {escape(str(exc))}", soft_wrap=True)
        return 2
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    out = Console()
    for table in results_tables(doc):
        out.print(table)
    if args.plots and doc["kind"] == "sweep":
        from testbed.report.sweepplot import plot_sweep
        where = path if path.is_dir() else path.parent
        paths = plot_sweep(where, doc)
        out.print(f"plots in {where}: " + ", ".join(p.name for p in paths))
    return 0


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    status = _results(args, err)
    if status is not None:
        return status
    with collecting() as damage:
        try:
            if args.format == "json":
                json.dump(load_summary(args.run_dir, recompute=args.recompute), sys.stdout, indent=2)
                sys.stdout.write("\n")
            else:
                render(args.run_dir, Console(), recompute=args.recompute, rank=args.rank, plots=args.plots)
        except RunDirWriteError as exc:   # a plot or output the run directory cannot take
            err.print(f"[red]testbed report[/]: {escape(str(exc))}", soft_wrap=True)
            return exc.exit_code
        except MetricsError as exc:  # RunDirError included
            if damage:
                print_damage(damage, err)
            err.print(f"[red]testbed report[/]: {escape(str(exc))}", soft_wrap=True)
            return 2
    if damage:
        print_damage(damage, err)
        return EXIT_DAMAGED
    return 0
