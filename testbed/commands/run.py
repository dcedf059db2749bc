"""``testbed run SCENARIO``: run a scenario on fresh fabrics, one per transport, and report.

The scenario file is validated first (every problem with file, line and key path;
exit 2, nothing built). Then each transport runs (:mod:`testbed.run`) with live
progress, and the report (side-by-side comparison, per-size tables, fidelity,
plots) is rendered from the run directory, as ``testbed report RUN_DIR`` would.

``--trials N`` (or ``trials: N`` in the scenario) runs N seeds and prints every KPI as
median [min-max] (n) per transport (``trials.json``).

Exit status: 0 every transport reached an outcome (done, or a reported failure such
as a QP in ERR, or the timeout: results, not testbed errors) and no element was
wrong; 1 the testbed failed (an agent crashed, a fault could not be applied) or an
all-reduce produced wrong elements; 2 bad input; 3 the run directory's records are damaged
(the report lists them); 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM (the
fabric is torn down and the run directory keeps what was gathered and is reported). SIGKILL
cannot be caught: the shell sees 137, only the cleanup ledger is left (``testbed clean``).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from testbed.cluster.placement import PLACERS
from testbed.fabric.kernel import features
from testbed.metrics import MetricsError
from testbed.rundir.damage import collecting
from testbed.rundir.errors import RunDirWriteError
from testbed.rundir.names import MANIFEST
from testbed.rundir.write import make_dir, write_atomic
from testbed.report import print_damage, render
from testbed.run import run_scenario
from testbed.spec import TRANSPORTS, SpecError, load_scenario, transport_variant


def _transport(text: str) -> str:
    try:
        transport_variant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _agent_processes(text: str) -> int | str:
    if text == "per-host":
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"expected per-host or 1..256, got {text!r}")
    return n


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a scenario (all-reduce over each transport, timed faults) and report",
                       description=__doc__.splitlines()[0])
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
    p.add_argument("--runs-dir", default="runs", type=Path, help="where run directories go (default: runs)")
    p.add_argument("--transport", action="append", type=_transport, dest="transports", metavar="TRANSPORT",
                   help=f"run only this transport ({', '.join(TRANSPORTS)}, rc-x<N>, rc-dcqcn or rc-dcqcn-x<N>; "
                        "repeatable; "
                        "default: the scenario's list)")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="do not write PNG plots")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="run N trials with seeds seed, seed+1, ... (default: the scenario's 'trials', else 1)")
    p.add_argument("--agent-processes", type=_agent_processes, default=None, metavar="N|per-host",
                   help="serve every agent from N host runtimes, each on one loop, or per-host: one process "
                        "per agent (default: the scenario's agent_processes, else one runtime per core)")
    p.add_argument("--servers", metavar="SERVERS_YAML",
                   help="spread each fabric over these servers: a worker per server over SSH builds its "
                        "part, VXLAN tunnels carry the links between servers (README: across servers)")
    p.add_argument("--placer", default="pods", choices=sorted(PLACERS),
                   help="placement algorithm with --servers (default: pods)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    err = Console(stderr=True, highlight=False)
    try:
        scenario = load_scenario(args.scenario, features=features())
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    for w in scenario.warnings:   # suspicious timelines (overlaps, link_up without link_down, ...)
        err.print(f"[yellow]warning[/] {escape(str(w))}")
    transports = args.transports or list(scenario.transports)
    unknown = [t for t in transports if t not in scenario.transports]
    if unknown:
        err.print(f"[red]testbed run[/]: {args.scenario}: transports: {', '.join(unknown)} not in the "
                  f"scenario's list ({', '.join(scenario.transports)})")
        return 2
    args.fabric_factory = None
    if args.servers:
        from testbed.cluster.ssh_fabric import ssh_fabric_factory
        args.fabric_factory, problems = ssh_fabric_factory(scenario.topology, scenario.topology_path,
                                                           args.servers, args.placer)
        if problems:
            for p in problems:
                print(p, file=sys.stderr)
            return 2
    trials = args.trials if args.trials is not None else scenario.trials
    if trials < 1:
        err.print(f"[red]testbed run[/]: --trials must be >= 1, got {trials}")
        return 2
    if trials > 1:
        return _run_trials(args, scenario, transports, trials, console, err)
    try:
        result = run_scenario(scenario, runs_root=args.runs_dir, console=console, transports=transports,
                              fabric_factory=args.fabric_factory, agent_processes=args.agent_processes)
    except RunDirWriteError as exc:
        return write_failed(exc, err)
    status = interrupted_status(result.signal) if result.interrupted else 0
    if any(s in ("crashed", "error") for s in result.status.values()):
        status = status or 1
    with collecting() as damage:
        try:
            summary = render(result.run_dir, console, recompute=True, plots=args.plots)
        except MetricsError as exc:
            err.print(f"[red]report failed[/]: {escape(str(exc))}")
            return status or 1
    if damage:
        print_damage(damage, err)
        status = status or 3
    wrong = {t: s.get("wrong") for t, s in summary.get("transports", {}).items() if s.get("wrong")}
    if wrong:
        err.print(f"[red]wrong all-reduce results[/]: {wrong}")
        status = status or 1
    console.print(f"run directory: {result.run_dir}")
    return status


def write_failed(exc: RunDirWriteError, err: Console) -> int:
    """Report a run directory that could not be written (one line, no traceback: the first
    write error of the chain, :meth:`RunDirWriteError.first`) and return its exit status. The
    run stopped there with its fabric torn down; what it wrote before is kept."""
    first = exc.first()
    run_dir = next((d for d in (first.path, *first.path.parents) if (d / MANIFEST).is_file()), None)
    err.print(f"[red]testbed run[/]: {escape(str(first))}; the run stopped early"
              + (f", what it wrote is kept ([bold]testbed report {escape(str(run_dir))}[/])" if run_dir else ""))
    return first.exit_code


def interrupted_status(signum: int | None) -> int:
    """Exit status of a run stopped by ``signum``: 128 + the signal number, as a shell reports a
    process killed by it (130 SIGINT, 143 SIGTERM); 130 when unknown."""
    return 128 + int(signum or signal.SIGINT)


def _run_trials(args, scenario, transports: list[str], trials: int, console: Console, err: Console) -> int:
    """``trials`` runs of the scenario with seeds seed .. seed+trials-1, each transport on a fresh
    fabric, under ``runs/<scenario>-trials-<stamp>/seed-<s>/``; then ``trials.json`` (medians,
    ranges, n: :func:`testbed.metrics.trials.aggregate`) and its table. Exit status as for one run,
    the worst over the trials."""
    import json
    import time

    from testbed.report import load_summary
    from testbed.metrics.trials import aggregate
    from testbed.report.trials import trials_table

    parent = args.runs_dir / f"{scenario.name}-trials-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        make_dir(parent, "the trials directory")
    except RunDirWriteError as exc:
        return write_failed(exc, err)
    summaries, status = [], 0
    for i in range(trials):
        seed = scenario.seed + i
        sc = load_scenario(args.scenario, features=features(), seed=seed)
        console.print(f"[bold]trial {i + 1}/{trials}[/]: seed {seed}")
        try:
            result = run_scenario(sc, runs_root=parent / f"seed-{seed}", console=console, transports=transports,
                                  fabric_factory=args.fabric_factory, agent_processes=args.agent_processes)
        except RunDirWriteError as exc:
            return write_failed(exc, err)
        if any(s in ("crashed", "error") for s in result.status.values()):
            status = status or 1
        try:
            summary = load_summary(result.run_dir, recompute=True)
        except MetricsError as exc:
            err.print(f"[red]report of seed {seed} failed[/]: {escape(str(exc))}")
            status = status or 1
            continue
        summary["seed"] = seed
        summaries.append(summary)
        if any(t.get("wrong") for t in summary.get("transports", {}).values()):
            err.print(f"[red]wrong all-reduce results[/] with seed {seed}")
            status = status or 1
        if result.interrupted:
            status = interrupted_status(result.signal)
            break
    if summaries:
        agg = aggregate(summaries)
        try:
            write_atomic(parent / "trials.json", json.dumps(agg, indent=1, default=str) + "\n", what="the trials summary")
        except RunDirWriteError as exc:
            return write_failed(exc, err)
        console.print(trials_table(agg))
    console.print(f"trials directory: {parent}")
    return status
