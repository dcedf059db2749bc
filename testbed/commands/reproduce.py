"""``testbed reproduce``: run the MRC paper's claims, scaled, and say which hold.

Each claim of ``scenarios/paper/claims.yaml`` (:mod:`testbed.spec.claimsfile`) is a shipped
scenario plus rules written before the run. The claims file, every claim's scenario (and its
sweep points) and every rule's transports, KPIs and points are checked first (exit 2, nothing
built). Then each claim's scenario runs through the same machinery as ``testbed run --trials``
and sweeps (:func:`testbed.commands.run.run_many`): ``--quick`` 1 trial per claim, else the
claims' ``trials`` (or ``--trials N``), with a live display of the suite (claim i of n, sweep
point, trial, ETA from the claims' estimates scaled by the finished claims' real times) above
each run's own.

Under ``--out`` (default ``runs/reproduce`` or ``runs/reproduce-quick``) each claim has a
directory: ``<id>/runs-<stamp>/`` (its trials or sweep directory) and ``<id>/results.json`` (the
results document, :mod:`testbed.metrics.results`), written when the claim's runs finished. A
claim whose ``results.json`` exists is not run again: an interrupted suite resumes where it
stopped (delete the file to rerun a claim). The file records what it was made from (``inputs``:
digests of every point's resolved scenario and topology file, and of the agents' and testbed's
sources; the transports, trials and the control's overrides); when any of them changed since,
the claim runs again and the old file is kept beside it as ``results.stale-<stamp>.json``, so
that one table never mixes code or scenario versions. A claim's ``control:`` (its scenario with the
mechanism under test removed: overrides and transports) runs after it, with the same trials,
under ``<id>/control-runs-<stamp>/`` into ``<id>/control-results.json`` (resumed the same way).
Then ``reproduce.json`` and ``reproduce.md``: one row per claim, "holds?" yes (the rules hold
and the control, run complete and valid, fails them) / unproven (fewer trials counted than
asked: "n of N"; or the rules hold, but the control passes or there is none) / holds on its
rules; control unproven (the control crashed, timed out, had a QP in ERR or was invalid) / no
(a rule fails, or wrong results) / not runnable (why) / invalid (a run failed the fidelity
check: a claim never holds on starved runs), and the control's outcome
(:mod:`testbed.metrics.claims`); each judged on the trials asked for (``--trials``, ``--quick``
or the claim's).

``--plan`` checks everything (the controls' key paths and values too, at their lines of the
claims file) and prints the claims, their transports, points, trials, controls and estimated time, and each claim's regime (paper / here), and runs nothing (no fabric).

Pre-registration: every claim's rules, scenario (its file, its topology and every file they
name), control and regime have a digest (:mod:`testbed.spec.claimdigests`), kept per claim in
``reproduce.json`` and shown in ``reproduce.md``. ``--plan`` says per claim which of them changed
since the last full suite (``reproduce.json`` of a non-quick run in ``--out``, else
``runs/reproduce``; or ``--since FILE``), a changed rule flagged; ``--digests`` prints the
current claims' digests and runs nothing (no scenario is loaded).

Exit status: 0 the suite ran (whatever the verdicts); 1 a run failed (a crash, wrong results);
2 bad input (the claims file, a scenario, a rule); 130 / 143 interrupted (what ran is kept;
run the same command again to resume).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from testbed.metrics import results
from testbed.metrics.claims import judge
from testbed.metrics.trials import JOB_KPIS, RULE_KPIS
from testbed.report.reproduce import claim_entry, claim_regime, document, markdown, regime_table, reproduce_table
from testbed.spec import SpecError
from testbed.spec.claimdigests import (PARTS, changed_files, changed_parts, claim_digests, entry_digests,
                                       unrecorded_parts)
from testbed.spec.claimsfile import Claim, control_problems, load_claims, rule_problems
from testbed.spec.yamlread import Problem

CLAIMS_FILE = Path("scenarios/paper/claims.yaml")
RESULTS_NAME = "results.json"
CONTROL_RESULTS_NAME = "control-results.json"
JSON_NAME, MD_NAME = "reproduce.json", "reproduce.md"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="run the MRC paper's claims, scaled, and say which hold",
                       description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 trial per claim (the suite of `make reproduce`)")
    p.add_argument("--claims", default=None, metavar="ID,ID",
                   help="run only these claims (comma-separated ids; default: all)")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="trials per claim (default: 1 with --quick, else each claim's trials)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="results directory (default: runs/reproduce, runs/reproduce-quick with --quick); "
                        "claims with results there are not run again")
    p.add_argument("--claims-file", type=Path, default=CLAIMS_FILE, metavar="YAML",
                   help=f"the claims (default: {CLAIMS_FILE})")
    p.add_argument("--plan", action="store_true", help="check everything, print the plan (with what changed "
                                                        "since the last full suite), run nothing")
    p.add_argument("--digests", action="store_true",
                   help="print each claim's pre-registration digests (rules, scenario, control, regime), run nothing")
    p.add_argument("--since", type=Path, default=None, metavar="REPRODUCE_JSON",
                   help="the full suite --plan compares with (default: reproduce.json in --out, else in "
                        "runs/reproduce)")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="do not write PNG plots")
    p.set_defaults(func=run)


@dataclass
class Prepared:
    """A claim with its scenario loaded (or why it cannot run here), and its control's."""

    claim: Claim
    scenario: object = None
    sweep: object = None
    scenarios: list = field(default_factory=list)
    not_runnable: str | None = None
    control_scenario: object = None
    control_scenarios: list = field(default_factory=list)
    #: :func:`testbed.spec.claimdigests.claim_digests` (computed whether or not the scenario loads)
    digests: dict = field(default_factory=dict)

    @property
    def points(self) -> int:
        return len(self.scenarios) if self.sweep else 1

    def control_transports(self) -> list[str]:
        """The transports the control runs: its own list, else the scenario's, each replaced by
        its stand-in."""
        c = self.claim.control
        return c.runs(self.scenario.transports) if c is not None else list(self.scenario.transports)


def _claim_args(claim: Claim, plots: bool = False, fixed=()) -> argparse.Namespace:
    """What :func:`testbed.commands.run.run_many` reads of a ``testbed run`` command line
    (``fixed``: overrides applied to every run: the control's ``set:``)."""
    return argparse.Namespace(scenario=str(claim.scenario), overrides=[], seed=None, fabric_factory=None,
                              agent_processes=None, plots=plots, runs_dir=None, fixed_overrides=tuple(fixed))


def _load_points(claim: Claim, sweep, fixed=()) -> tuple[object, list]:
    """(the scenario, every sweep point's) with ``fixed`` overrides. Raises SpecError."""
    from testbed.commands.run import _load
    args = _claim_args(claim, fixed=fixed)
    scenario = _load(args, check_sweep=not fixed)
    return scenario, [_load(args, point=pt, check_sweep=False) for pt in sweep.points()] if sweep else []


def prepare(claims_file: Path, claims: list[Claim]) -> tuple[list[Prepared], list[Problem]]:
    """Load every claim's scenario and sweep points and check its rules against them, and its
    control's (:func:`testbed.spec.claimsfile.control_problems`). A scenario that does not load
    is "not runnable" (its first problem; its control is not checked); a rule or a control
    naming what the scenario lacks or refuses is a problem (exit 2)."""
    from testbed.spec.overrides import sweep_of

    out, problems = [], []
    for c in claims:
        p = Prepared(c, digests=claim_digests(c))
        try:
            p.sweep = sweep_of(c.scenario)
            p.scenario, p.scenarios = _load_points(c, p.sweep)
        except SpecError as exc:
            p.not_runnable = f"{c.scenario.name} does not load here: {exc.problems[0]}"
            out.append(p)
            continue
        texts = [",".join(o.text for o in pt) for pt in p.sweep.points()] if p.sweep else None
        jobs = [j.name for j in p.scenario.all_jobs]
        problems += rule_problems(claims_file, c, list(p.scenario.transports), list(RULE_KPIS), jobs,
                                  list(JOB_KPIS), texts)
        if c.control is not None:
            bad = control_problems(claims_file, c, list(p.scenario.transports),
                                   lambda fixed, c=c, p=p: _load_points(c, p.sweep, fixed))
            problems += bad
            if not bad:
                p.control_scenario, p.control_scenarios = _load_points(c, p.sweep, c.control.overrides)
        out.append(p)
    return out, problems


def code_sha256(root: Path | None = None) -> str:
    """sha256 over the agents' and the testbed's sources (path and bytes of every ``.py``,
    ``.pyx``, ``.pxi``, ``.c`` and ``.h`` under ``agents/`` and ``testbed/``; Cython's generated
    ``_core.c`` left out): what a result depends on besides its scenario."""
    root = root or Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for top in ("agents", "testbed"):
        for f in sorted((root / top).rglob("*")):
            if (f.suffix in (".py", ".pyx", ".pxi", ".c", ".h") and "__pycache__" not in f.parts
                    and f.name != "_core.c" and f.is_file()):
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def unit_inputs(scenarios: list, transports: list[str], trials: int, fixed=(), code: str = "") -> dict:
    """What a claim's (or its control's) results are made from: ``scenario_sha256`` over every
    point's resolved scenario (:meth:`Scenario.to_dict`) and its topology file's bytes, the
    ``transports``, ``trials``, the control's overrides (``set``), and ``code_sha256``."""
    h = hashlib.sha256()
    for s in scenarios:
        h.update(json.dumps(s.to_dict(), sort_keys=True, default=str).encode())
        topo = Path(s.topology_path)
        h.update(topo.read_bytes() if topo.is_file() else b"")
    return {"scenario_sha256": h.hexdigest(), "transports": list(transports), "trials": trials,
            "set": {o.path: o.text for o in fixed}, "code_sha256": code}


_INPUT_NAMES = {"scenario_sha256": "the scenario or its topology", "transports": "the transports",
                "trials": "the trials", "set": "the control's overrides", "code_sha256": "the code"}


def changed_inputs(doc: dict, want: dict) -> list[str]:
    """What differs between a results document's ``inputs`` and ``want`` (names for a message;
    ``["its inputs (not recorded)"]`` for a file written before they were)."""
    have = doc.get("inputs")
    if not isinstance(have, dict):
        return ["its inputs (not recorded)"]
    return [_INPUT_NAMES[k] for k in want if have.get(k) != want[k]]


def _select(claims, ids: str | None, claims_file: Path) -> tuple[list[Claim], list[str]]:
    if not ids:
        return list(claims), []
    wanted = [i.strip() for i in ids.split(",") if i.strip()]
    known = {c.id for c in claims}
    unknown = [i for i in wanted if i not in known]
    msgs = [f"{claims_file}: no claim {i!r} (claims: {', '.join(c.id for c in claims)})" for i in unknown]
    return [c for c in claims if c.id in wanted], msgs


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    s = max(0, int(round(s)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Suite:
    """The suite's state for the live display and the ETA: each claim's status, its estimate
    (the claims file's, for this mode), and the real time of those finished in this session."""

    def __init__(self, prepared: list[Prepared], quick: bool, trials: int | None):
        self.prepared = prepared
        self.quick = quick
        self.trials = trials
        self.status = {p.claim.id: "waiting" for p in prepared}
        self.where = {p.claim.id: "" for p in prepared}
        self.took: dict[str, float] = {}
        self.current: str | None = None
        self.progress = 0.0          # fraction of the current claim's runs started before this one
        self.t_claim = 0.0
        self.code = code_sha256()

    def inputs(self, p: Prepared, control: bool = False) -> dict | None:
        """:func:`unit_inputs` of a claim's runs or its control's (None: not runnable)."""
        if p.scenario is None:
            return None
        if control:
            return unit_inputs(p.control_scenarios or [p.control_scenario], p.control_transports(),
                               self.trials_of(p.claim), p.claim.control.overrides, self.code)
        return unit_inputs(p.scenarios or [p.scenario], list(p.scenario.transports), self.trials_of(p.claim),
                           (), self.code)

    def resume_state(self, path: Path, p: Prepared, control: bool = False) -> str | None:
        """"resumed" when ``path`` holds results of these inputs, "runs again: ... changed" when
        it holds others', None when there is none (or it does not load: it runs again)."""
        if not path.is_file():
            return None
        try:
            doc = results.load(path)
        except results.ResultsError:
            return None
        want = self.inputs(p, control)
        changed = changed_inputs(doc, want) if want is not None else []
        return f"runs again: {', '.join(changed)} changed" if changed else "resumed"

    def trials_of(self, c: Claim) -> int:
        return self.trials or (1 if self.quick else c.trials)

    def estimate(self, c: Claim) -> float:
        """The claims file's estimate for this mode, scaled to this many trials."""
        base, per = ((c.estimate_quick_s, 1) if self.quick else (c.estimate_full_s, c.trials))
        return base * self.trials_of(c) / per

    def eta_s(self) -> float:
        """Remaining estimates times (real / estimated) over the claims finished so far."""
        done = [p.claim for p in self.prepared if p.claim.id in self.took]
        est = sum(self.estimate(c) for c in done)
        factor = sum(self.took[c.id] for c in done) / est if est else 1.0
        left = 0.0
        for p in self.prepared:
            st = self.status[p.claim.id]
            if st == "waiting":
                left += self.estimate(p.claim)
            elif st.startswith("running"):
                left += max(0.0, self.estimate(p.claim) * factor - (time.monotonic() - self.t_claim)) / factor
        return left * factor

    def __rich__(self) -> Table:    # the live display redraws it every second
        return self.table()

    def table(self) -> Table:
        n = len(self.prepared)
        i = next((k for k, p in enumerate(self.prepared, 1) if p.claim.id == self.current), None)
        head = f"claim {i} of {n}" if i else f"{n} claims"
        t = Table(title=f"testbed reproduce{' --quick' if self.quick else ''}: {head}, ETA {_fmt_s(self.eta_s())}",
                  expand=False)
        for col in ("claim", "status", "running", "transports", "estimate", "took"):
            t.add_column(col)
        for p in self.prepared:
            c = p.claim
            took = self.took.get(c.id)
            if self.status[c.id].startswith("running"):
                took = time.monotonic() - self.t_claim
            t.add_row(c.id, self.status[c.id], self.where[c.id],
                      ", ".join(p.scenario.transports) if p.scenario else "-",
                      _fmt_s(self.estimate(c)), _fmt_s(took))
        return t


def run(args: argparse.Namespace) -> int:
    console = Console()
    err = Console(stderr=True, highlight=False)
    try:
        claims_doc = load_claims(args.claims_file)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    chosen, msgs = _select(claims_doc.claims, args.claims, args.claims_file)
    if args.trials is not None and args.trials < 1:
        msgs.append(f"--trials must be >= 1, got {args.trials}")
    if msgs:
        for m in msgs:
            err.print(f"[red]testbed reproduce[/]: {escape(m)}")
        return 2
    if getattr(args, "digests", False):
        return _print_digests(args.claims_file, chosen)
    prepared, problems = prepare(args.claims_file, chosen)
    if problems:
        print("\n".join(str(p) for p in problems), file=sys.stderr)
        return 2
    suite = Suite(prepared, args.quick, args.trials)
    out = args.out or Path("runs/reproduce-quick" if args.quick else "runs/reproduce")
    if args.plan:
        since = getattr(args, "since", None) or (args.out if args.out and not args.quick
                                                 else Path("runs/reproduce")) / JSON_NAME
        return _plan(suite, out, console, since)
    return _run_suite(args, suite, out, console, err)


def _print_digests(claims_file: Path, claims: list[Claim]) -> int:
    """``--digests``: a markdown table of the claims' digests (to paste into the docs' history),
    then each claim's files with theirs."""
    print(f"pre-registration digests of {claims_file} (sha256 of each part's canonical form, first 12 hex)")
    print()
    print("| claim | " + " | ".join(PARTS) + " |")
    print("|---|" + "---|" * len(PARTS))
    digests = {c.id: claim_digests(c) for c in claims}
    for c in claims:
        print(f"| {c.id} | " + " | ".join(f"`{digests[c.id][k]}`" for k in PARTS) + " |")
    print()
    for c in claims:
        print(f"{c.id}: " + "; ".join(f"{role} {d}" for role, d in digests[c.id]["files"].items()))
    return 0


def last_full_suite(path: Path) -> tuple[dict | None, str]:
    """(the last full suite's ``reproduce.json`` at ``path``, a line saying which it is), or
    (None, why there is none on record: no file, not a reproduce.json, a quick suite's)."""
    from testbed.report.reproduce import FORMAT
    if not path.is_file():
        return None, f"no full suite on record ({path} not found)"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"no full suite on record ({path} does not load: {exc})"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("claims"), list):
        return None, f"no full suite on record ({path}: not a reproduce.json, format {FORMAT!r} expected)"
    if doc.get("quick"):
        return None, f"no full suite on record ({path} is a quick suite's)"
    written = doc.get("written") or time.strftime("%Y-%m-%d %H:%M (file time)", time.localtime(path.stat().st_mtime))
    return doc, f"the last full suite: {path}, written {written}"


def since_full(entry: dict | None, digests: dict, on_record: bool = True) -> tuple[str, bool]:
    """(what changed in a claim since its entry in the last full suite's ``reproduce.json``,
    whether its rules did): ``unchanged (verdict there: yes)``, ``changed: scenario (topology
    X.yaml), control; ...``, ``not in the last full suite``; ``on_record`` False: no full suite."""
    if not on_record:
        return "no full suite on record", False
    if entry is None:
        return "not in the last full suite", False
    before = entry_digests(entry)
    changed = changed_parts(before, digests)
    verdict = (entry.get("verdict") or {}).get("verdict") or "not recorded"
    parts = []
    for k in changed:
        if k == "rules":
            parts.append(f"RULES CHANGED after its last full run (verdict there, on other rules: {verdict})")
        elif k == "scenario" and before.get("files"):
            parts.append(f"scenario ({', '.join(changed_files(before, digests))})")
        else:
            parts.append(k)
    text = f"changed: {', '.join(parts)}" if parts else f"unchanged (verdict there: {verdict})"
    if missing := unrecorded_parts(before):
        text += f"; {', '.join(missing)}: not recorded there"
    return text, "rules" in changed


def _plan(suite: Suite, out: Path, console: Console, since: Path | None = None) -> int:
    from rich.text import Text

    from testbed.report.layout import Grid

    total = sum(suite.estimate(p.claim) for p in suite.prepared)
    full, full_line = last_full_suite(since) if since is not None else (None, "no full suite on record")
    entries = {e.get("id"): e for e in (full or {}).get("claims") or () if isinstance(e, dict)}
    rows, flagged = [], []
    for p in suite.prepared:
        c = p.claim
        state = (suite.resume_state(out / c.id / RESULTS_NAME, p)
                 or (f"not runnable: {p.not_runnable}" if p.not_runnable else "to run"))
        ctl = "none: cannot count as holding"
        if c.control is not None:
            ctl = (f"{c.control.removes}; " + ", ".join([f"{k}: {v}" for k, v in c.control.set_texts().items()]
                                                        + [f"{b} in place of {a}" for a, b in c.control.stand_in])
                   + (f"; runs {', '.join(p.control_transports())}" if p.scenario else "")
                   + (f"; {st}" if (st := suite.resume_state(out / c.id / CONTROL_RESULTS_NAME, p, True)) else ""))
        changed, rules_changed = since_full(entries.get(c.id), p.digests, full is not None)
        if rules_changed:
            flagged.append(c.id)
        rows.append([c.id, c.scenario.name, ", ".join(p.scenario.transports) if p.scenario else "-",
                     str(p.points), str(suite.trials_of(c)), _fmt_s(suite.estimate(c)),
                     "; ".join(r.text for r in c.rules), ctl, state,
                     Text(changed, style="bold red") if rules_changed else changed])
    console.print(Grid(f"plan{' (quick)' if suite.quick else ''}: {len(rows)} claims, estimated {_fmt_s(total)} "
                       f"(controls included); results in {out}",
                       ["claim", "scenario", "transports", "points", "trials", "estimate", "rules", "control",
                        "state", "since the last full suite"], rows, split="rows", justify=["left"] * 10,
                       shrink_first=(6, 7, 8, 9)))
    console.print(Text(full_line), soft_wrap=True)   # a path is never folded
    if flagged:   # a verdict on record for rules that are no longer the claim's: say it outside the table too
        console.print(Text(f"rules changed since the last full suite: {', '.join(flagged)}: their verdicts "
                           "there were judged on other rules (run the full suite again)", style="bold red"),
                      soft_wrap=True)
    console.print(regime_table({"claims": [{"id": p.claim.id, "regime": claim_regime(
        p.claim, p.scenarios or ([p.scenario] if p.scenario else []))} for p in suite.prepared]}))
    return 0


def _run_suite(args, suite: Suite, out: Path, console: Console, err: Console) -> int:
    status = 0
    # id -> (doc, not_run reason, results path), for the claim and for its control
    docs: dict[str, tuple[dict | None, str | None, str | None]] = {}
    controls: dict[str, tuple[dict | None, str | None, str | None]] = {}
    live = Live(suite, console=console, refresh_per_second=1) if console.is_terminal else None
    if live is not None:
        live.start()
    try:
        for n, p in enumerate(suite.prepared, 1):
            c = p.claim
            suite.current, suite.t_claim = c.id, time.monotonic()
            units = [(docs, "claim", out / c.id / RESULTS_NAME, "runs", p.scenario, p.scenarios,
                      list(p.scenario.transports) if p.scenario else [], ())]
            if c.control is not None:
                units.append((controls, "control", out / c.id / CONTROL_RESULTS_NAME, "control-runs",
                              p.control_scenario, p.control_scenarios,
                              p.control_transports() if p.scenario else [], c.control.overrides))
            ran = False
            for store, what, res_path, runs, scenario, scenarios, transports, fixed in units:
                st, ran_unit = _run_unit(args, suite, p, n, what, res_path, out / c.id, runs, scenario, scenarios,
                                         transports, fixed, store, console, err, live)
                ran = ran or ran_unit
                if st >= 128:             # interrupted: keep what ran, stop the suite
                    suite.status[c.id] = "interrupted"
                    return _finish(suite, docs, controls, out, console, st, live)
                status = status or st
            if ran:                       # the ETA scales by claims that ran in this session
                suite.took[c.id] = time.monotonic() - suite.t_claim
            if live is not None:
                live.refresh()
    except BaseException:
        if live is not None:
            live.stop()
        raise
    return _finish(suite, docs, controls, out, console, status, live)


def _run_unit(args, suite: Suite, p: Prepared, n: int, what: str, res_path: Path, claim_dir: Path, runs: str,
              scenario, scenarios, transports: list[str], fixed, store: dict, console: Console, err: Console,
              live) -> tuple[int, bool]:
    """Run a claim's scenario, or its control, unless its results file exists (resumed), and
    keep (doc, why not, results path) in ``store``; (the exit status of its runs, whether any
    ran)."""
    from testbed.commands.run import _parent, run_many
    from testbed.rundir.errors import RunDirWriteError

    c = p.claim
    want = suite.inputs(p, control=what == "control")
    if res_path.is_file():
        try:
            old = results.load(res_path)
            changed = changed_inputs(old, want) if want is not None else []
            if not changed:
                store[c.id] = (old, None, str(res_path))
                suite.status[c.id] = f"{what} done (resumed)"
                return 0, False
            stale = res_path.with_name(f"{res_path.stem}.stale-{time.strftime('%Y%m%d-%H%M%S')}{res_path.suffix}")
            res_path.rename(stale)
            err.print(f"[yellow]warning[/] {escape(str(res_path))}: {', '.join(changed)} changed since it was "
                      f"made: running the {what} of {c.id} again (the old results kept as {escape(stale.name)})")
        except results.ResultsError as exc:
            err.print(f"[yellow]warning[/] {escape(str(exc))}: running the {what} of {c.id} again")
    if p.not_runnable:
        store[c.id] = (None, p.not_runnable, None)
        suite.status[c.id] = "not runnable"
        return 0, False
    suite.status[c.id] = f"running {what}"
    trials = suite.trials_of(c)

    def before(pi, points, ti, trials_):
        suite.where[c.id] = f"{what}: point {pi + 1}/{points}, trial {ti + 1}/{trials_}"
        console.print(f"[bold]claim {n} of {len(suite.prepared)}[/] {c.id} ({what}): point {pi + 1}/{points}, "
                      f"trial {ti + 1}/{trials_}, transports {', '.join(transports)}; ETA {_fmt_s(suite.eta_s())}")
        if live is not None:
            live.refresh()

    cargs = _claim_args(c, plots=args.plots, fixed=fixed)
    try:
        parent = _parent(claim_dir / f"{runs}-{time.strftime('%Y%m%d-%H%M%S')}")
        doc, st = run_many(cargs, scenario, p.sweep, scenarios, transports, trials, parent, console, err,
                           before_trial=before)
    except RunDirWriteError as exc:
        from testbed.commands.run import write_failed
        st, doc = write_failed(exc, err), None
    if st >= 128:
        store[c.id] = (None, "interrupted (run the command again to resume)", None)
        return st, True
    if doc is None:
        suite.status[c.id] = f"{what} failed"
        store[c.id] = (None, f"no run gave a summary (exit status {st})", None)
        return st, True
    for pt in doc["points"]:
        pt["dir"] = f"{parent.name}/{pt['dir']}" if pt.get("dir") else parent.name
    if fixed:
        doc["control"] = {"set": {o.path: o.text for o in fixed}, "transports": transports}
    doc["inputs"] = want
    results.write(res_path, doc)
    store[c.id] = (doc, None, str(res_path))
    suite.status[c.id] = f"{what} done"
    return st, True


def _finish(suite: Suite, docs: dict, controls: dict, out: Path, console: Console, status: int, live) -> int:
    """Judge every claim with its control, write reproduce.json and reproduce.md, print them."""
    if live is not None:
        live.refresh()
        live.stop()
    entries, verdicts = [], []
    for p in suite.prepared:
        doc, why, path = docs.get(p.claim.id, (None, "not run (the suite stopped before it)", None))
        cdoc, cwhy, cpath = controls.get(p.claim.id, (None, "not run (the suite stopped before it)", None))
        entries.append(claim_entry(p.claim, path, p.scenarios or ([p.scenario] if p.scenario else []), doc,
                                   control_results=cpath, digests=p.digests or None))
        verdicts.append(judge(p.claim, doc, why, cdoc, cwhy, trials=suite.trials_of(p.claim)))
    rep = document(entries, verdicts, quick=suite.quick, trials=suite.trials or (1 if suite.quick else None),
                   written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    from testbed.rundir.write import make_dir, write_atomic
    make_dir(out, "the reproduce directory")
    write_atomic(out / JSON_NAME, results.dumps(rep), what=JSON_NAME)
    write_atomic(out / MD_NAME, markdown(rep), what=MD_NAME)
    console.print(reproduce_table(rep))
    console.print(regime_table(rep))
    console.print(f"reproduce results: {out / JSON_NAME}, {out / MD_NAME}")
    return status
