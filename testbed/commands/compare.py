"""``testbed compare A B``: two runs' KPIs side by side, with the difference per transport.

A and B are each a run directory (its summary.json, computed if missing), a trials or sweep
directory (its trials.json / sweep.json) or such a file: one results format
(:mod:`testbed.metrics.results`). For each KPI and transport: A's and B's value (the median
[min-max] (n) over trials), B - A and (B - A) / A in percent. Two sweeps are compared point
by point (points matched by their swept values).

Exit status: 0 ok; 2 A or B is not a run, trials or sweep directory or results file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from testbed.metrics import MetricsError
from testbed.metrics import results
from testbed.report import load_summary
from testbed.report.results import compare_table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="two runs (or trials, sweeps) side by side with the differences",
                       description=__doc__.splitlines()[0])
    p.add_argument("a", metavar="A", help="run directory, trials or sweep directory, or results file")
    p.add_argument("b", metavar="B", help="the same, compared with A")
    p.set_defaults(func=run)


def load(path: str) -> dict:
    """The results document of ``path``; a run directory without summary.json gets one computed.
    Raises results.ResultsError or MetricsError."""
    p = Path(path)
    if p.is_dir() and not any((p / f).is_file() for f in (results.SWEEP_FILE, results.TRIALS_FILE)):
        return results.from_summary(load_summary(p))   # a run: today's metrics, recomputed when outdated
    return results.load(p)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    docs = []
    for path in (args.a, args.b):
        try:
            docs.append(load(path))
        except (results.ResultsError, MetricsError) as exc:
            err.print(f"[red]testbed compare[/]: {escape(path)}: {escape(str(exc))}", soft_wrap=True)
            return 2
    out = Console()
    for table in compare_table(docs[0], docs[1], args.a, args.b):
        out.print(table)
    return 0
