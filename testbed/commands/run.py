"""``testbed run SCENARIO``: run a scenario on fresh fabrics, one per transport, and report.

The scenario file is validated first (every problem with file, line and key path;
exit 2, nothing built). Then each transport runs (:mod:`testbed.run`) with live
progress, and the report (side-by-side comparison, per-size tables, fidelity,
plots) is rendered from the run directory, as ``testbed report RUN_DIR`` would.

Exit status: 0 every transport reached an outcome (done, or a reported failure such
as a QP in ERR, or the timeout: results, not testbed errors) and no element was
wrong; 1 the testbed failed (an agent crashed, a fault could not be applied) or an
all-reduce produced wrong elements; 2 bad input; 130 interrupted (the run directory
keeps what was gathered and is reported).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..kernel import features
from ..metrics import MetricsError
from ..report import render
from ..run import run_scenario
from ..spec import TRANSPORTS, SpecError, load_scenario


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a scenario (all-reduce over each transport, timed faults) and report",
                       description=__doc__.splitlines()[0])
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
    p.add_argument("--runs-dir", default="runs", type=Path, help="where run directories go (default: runs)")
    p.add_argument("--transport", action="append", choices=TRANSPORTS, dest="transports",
                   help="run only this transport (repeatable; default: the scenario's list)")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="do not write PNG plots")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    err = Console(stderr=True, highlight=False)
    try:
        scenario = load_scenario(args.scenario, features=features())
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    transports = args.transports or list(scenario.transports)
    unknown = [t for t in transports if t not in scenario.transports]
    if unknown:
        err.print(f"[red]testbed run[/]: {args.scenario}: transports: {', '.join(unknown)} not in the "
                  f"scenario's list ({', '.join(scenario.transports)})")
        return 2
    result = run_scenario(scenario, runs_root=args.runs_dir, console=console, transports=transports)
    status = 130 if result.interrupted else 0
    if any(s in ("crashed", "error") for s in result.status.values()):
        status = status or 1
    try:
        summary = render(result.run_dir, console, recompute=True, plots=args.plots)
    except MetricsError as exc:
        err.print(f"[red]report failed[/]: {escape(str(exc))}")
        return status or 1
    wrong = {t: s.get("wrong") for t, s in summary.get("transports", {}).items() if s.get("wrong")}
    if wrong:
        err.print(f"[red]wrong all-reduce results[/]: {wrong}")
        status = status or 1
    console.print(f"run directory: {result.run_dir}")
    return status
