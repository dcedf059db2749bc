"""``testbed run SCENARIO``: run a scenario on fresh fabrics, one per transport, and report.

The scenario file is validated first (every problem with file, line and key path;
exit 2, nothing built). Then each transport runs (:mod:`testbed.run`) with live
progress, and the report (side-by-side comparison, per-size tables, fidelity,
plots) is rendered from the run directory, as ``testbed report RUN_DIR`` would.

``--trials N`` (or ``trials: N`` in the scenario) runs N seeds and prints every KPI as
median [min-max] (n) per transport (``trials.json``). A scenario with a ``sweep:`` block
runs every point of the sweep (each with its trials) under ``runs/<scenario>-sweep-<ts>/``
and writes ``sweep.json``, a table per KPI and ``sweep-<kpi>.png``. ``--set KEY=VALUE``
overrides one value of the scenario (the key paths and checks of ``sweep:``), ``--seed N``
its seed. Results files: :mod:`testbed.metrics.results`.

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
from dataclasses import replace
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
from testbed.rundir.write import make_dir
from testbed.report import print_damage, render
from testbed.run import run_scenario
from testbed.spec import TRANSPORTS, SpecError, load_scenario, servers_problem, transport_variant
from testbed.spec.yamlread import Problem


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
                        "part, VXLAN tunnels carry the links between servers (docs/servers.md: Across servers)")
    p.add_argument("--placer", default="pods", choices=sorted(PLACERS),
                   help="placement algorithm with --servers (default: pods)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="override one value of the scenario: KEY is a key path (workload.evs, "
                        "timeline[0].loss.percent), VALUE is YAML; repeatable; checked as the file is")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="use this seed instead of the scenario's (trials: N, N+1, ...)")
    p.set_defaults(func=run)


def _load(args, seed: int | None = None, point=(), check_sweep: bool = True):
    """The scenario with a sweep point, ``args.fixed_overrides`` (Override objects: a reproduce
    control's ``set:``, when present), ``--set`` overrides and a seed applied."""
    from testbed.spec.overrides import KeyError_, parse_set
    try:
        sets = [parse_set(item) for item in args.overrides]
    except KeyError_ as exc:
        raise SpecError([Problem(args.scenario, 0, "--set", str(exc))]) from None
    fixed = tuple(getattr(args, "fixed_overrides", None) or ())
    try:
        return load_scenario(args.scenario, features=features(), seed=seed if seed is not None else args.seed,
                             overrides=(*point, *fixed, *sets), check_sweep=check_sweep)
    except SpecError as exc:   # a --set value has no line: say it came from --set
        keys = {o.path for o in sets}
        raise SpecError([replace(p, key_path=f"--set {p.key_path}")
                         if not p.line and p.key_path in keys else p for p in exc.problems]) from None


def run(args: argparse.Namespace) -> int:
    console = Console()
    err = Console(stderr=True, highlight=False)
    from testbed.spec.overrides import sweep_of
    args.overrides = getattr(args, "overrides", None) or []
    args.seed = getattr(args, "seed", None)
    try:
        scenario = _load(args)
        sweep = sweep_of(args.scenario)
        points = sweep.points() if sweep else []
        scenarios = [_load(args, point=p, check_sweep=False) for p in points]   # every point, before any run
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
        refused = [p for s in (scenario, *scenarios) if (p := servers_problem(s, args.scenario, transports))]
        if refused:   # before any server is contacted
            print(refused[0], file=sys.stderr)
            return 2
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
    if sweep:
        return _run_sweep(args, scenario, sweep, scenarios, transports, trials, console, err)
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
    console.print(f"the report again: testbed report {result.run_dir}")
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
    fabric, under ``runs/<scenario>-trials-<stamp>/seed-<s>/``; then ``trials.json`` (a results
    document of one point: :mod:`testbed.metrics.results`) and its table. Exit status as for one
    run, the worst over the trials."""
    import time

    parent = _parent(args.runs_dir / f"{scenario.name}-trials-{time.strftime('%Y%m%d-%H%M%S')}")
    doc, status = run_many(args, scenario, None, [], transports, trials, parent, console, err)
    _print_results(args, parent, doc, console)
    console.print(f"trials directory: {parent}")
    return status


def _run_sweep(args, scenario, sweep, scenarios, transports: list[str], trials: int, console: Console,
               err: Console) -> int:
    """Every point of ``sweep`` (each with ``trials`` seeds) under
    ``runs/<scenario>-sweep-<stamp>/p<NN>_<key>-<value>.../seed-<s>/``: see :func:`run_many`;
    then a table per KPI and ``sweep-<kpi>.png``."""
    import time

    parent = _parent(args.runs_dir / f"{scenario.name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    doc, status = run_many(args, scenario, sweep, scenarios, transports, trials, parent, console, err)
    _print_results(args, parent, doc, console)
    console.print(f"sweep directory: {parent}")
    return status


def _print_results(args, parent: Path, doc: dict | None, console: Console) -> None:
    from testbed.report.results import results_tables
    from testbed.report.sweepplot import plot_sweep

    if doc is None:
        return
    for table in results_tables(doc):
        console.print(table)
    if doc.get("kind") == "sweep" and args.plots:
        paths = plot_sweep(parent, doc)
        console.print(f"plots in {parent}: " + ", ".join(p.name for p in paths))


def run_many(args, scenario, sweep, scenarios, transports: list[str], trials: int, parent: Path,
             console: Console, err: Console, before_trial=None) -> tuple[dict | None, int]:
    """The "many runs" of one scenario under ``parent`` (made by the caller), shared by ``testbed
    run`` (trials, sweeps) and ``testbed reproduce``: without a sweep, ``trials`` seeds under
    ``parent/seed-<s>/`` and ``parent/trials.json``; with one, every point (``scenarios``: each
    point's scenario, loaded beforehand) under ``parent/p<NN>_<key>-<value>.../seed-<s>/`` with its
    ``trials.json``, and ``parent/sweep.json`` rewritten after each point (an interrupted sweep
    keeps what it ran). ``before_trial(point_index, points, trial_index, trials)`` is called
    before each trial (0-based indices). Returns (the results document or None if no trial gave
    a summary, exit status: as for one run, the worst over the trials)."""
    from testbed.metrics import results
    from testbed.spec.overrides import point_dir, point_label

    if not sweep:
        summaries, status, _ = _trials(args, scenario, (), parent, transports, trials, console, err,
                                       before=lambda i: before_trial and before_trial(0, 1, i, trials))
        doc = results.from_trials(summaries) if summaries else None
        if doc is not None:
            results.write(parent / results.TRIALS_FILE, doc)
        return doc, status
    points, status, doc = [], 0, None
    all_points = sweep.points()
    for n, (point, sc) in enumerate(zip(all_points, scenarios), 1):
        label = point_label(point)
        console.print(f"[bold]sweep point {n}/{len(all_points)}[/]: {escape(label)}")
        sub = f"p{n:02d}_{point_dir(point)}"
        summaries, st, interrupted = _trials(
            args, sc, point, _parent(parent / sub), transports, trials, console, err,
            before=lambda i, n=n: before_trial and before_trial(n - 1, len(all_points), i, trials))
        status = st if interrupted else (status or st)
        if summaries:
            one = results.from_trials(summaries)
            results.write(parent / sub / results.TRIALS_FILE, one)
            values = {o.path: _plain(o.node) for o in point}
            points.append(results.point({**one["points"][0]}, values, label, sub))
            doc = results.document("sweep", scenario.name, points, list(sweep.keys))
            results.write(parent / results.SWEEP_FILE, doc)
        if interrupted:
            break
    return doc, status


def _parent(path: Path) -> Path:
    """A new trials or sweep directory (0700); RunDirWriteError if it cannot be made."""
    return make_dir(path, "the trials or sweep directory")


def _trials(args, scenario, point, parent: Path, transports, trials: int, console: Console, err: Console,
            before=None):
    """Run the trials of one scenario (a sweep point: ``point``'s overrides) under ``parent``:
    (summaries, exit status, interrupted). ``before(i)`` is called before trial ``i`` (0-based)."""
    from testbed.report import load_summary

    summaries, status = [], 0
    for i in range(trials):
        seed = scenario.seed + i
        sc = _load(args, seed=seed, point=point, check_sweep=False)
        if before is not None:
            before(i)
        console.print(f"[bold]trial {i + 1}/{trials}[/]: seed {seed}")
        try:
            result = run_scenario(sc, runs_root=parent / f"seed-{seed}", console=console, transports=transports,
                                  fabric_factory=args.fabric_factory, agent_processes=args.agent_processes)
        except RunDirWriteError as exc:
            return summaries, write_failed(exc, err), True
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
            return summaries, interrupted_status(result.signal), True
    return summaries, status, False


def _plain(node):
    """A YAML value node as the JSON value it reads as (a scalar as YAML types it)."""
    import yaml

    from testbed.spec.yamlsafe import StrictLoader
    loader = StrictLoader("")
    try:
        return loader.construct_document(node)
    except (yaml.YAMLError, ValueError):
        return getattr(node, "value", None)
