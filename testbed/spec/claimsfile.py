"""The paper's claims as data (``scenarios/paper/claims.yaml``): each claim names a scenario and
the rules, written before any run, that decide whether the claim holds in scaled form.

A claims file is::

    trials: 3                        # the full suite's trials per claim (--quick: 1)
    regime:                          # the paper's regime: every value with its source
      rate: {value: 800Gbit, source: "evaluation: testbed bandwidth (800G NICs)"}
      evs_per_qp: {value: [128, 256], source: "..."}                # a range: [low, high]
    claims:
      - id: failover                 # letters, digits, '-' and '_'; unique
        section: "evaluation: failover"
        figure: "a failed path is bypassed in tens of microseconds; ..."   # the paper's figure, text
        scenario: failover.yaml      # relative to the claims file
        rules:                       # every rule must hold
          - mrc worst_stall.s <= 0.25 * rc worst_stall.s
        scaling: "10 Mbit/s links, ~2 ms base RTT, ..."   # what differs from the paper (a payload per
                                                          # data packet other than 4096 is appended)
        estimate: {quick: 3m, full: 9m}                   # wall time of the claim's runs
        trials: 3                    # optional: this claim's trials in the full suite
        regime:                      # optional: the paper's values for this claim (over the top level's)
          ranks: {value: 64, source: "load balancing: 64-GPU ring all-reduce"}

A rule compares medians over the trials: ``TERM OP NUMBER``, ``TERM OP [K *] TERM`` with
``OP`` one of ``>= <= > <``, where ``TERM`` is ``TRANSPORT KPI [@POINT]``: a transport of the
scenario, a KPI path of :data:`testbed.metrics.trials.RULE_KPIS` (or ``jobs.<job>.<key>``) and, for a
scenario with a ``sweep:``, the point: the swept value as written in the sweep block (several
keys: the values joined by ``,``). E.g. ``mrc busbw_fraction_of_host >= 0.90``, ``rc
busbw_fraction_of_host < 0.6 * mrc busbw_fraction_of_host``, ``mrc busbw_fraction_of_host @1%
>= 0.5 * mrc busbw_fraction_of_host @0.0001%``.

:func:`load_claims` checks the file's shape and each rule's grammar, every problem at its
file:line (:class:`testbed.spec.yamlread.SpecError`), the ``regime:`` blocks' keys, units, ranges
and sources among them (:func:`testbed.spec.regime.read_paper_regime`; the numbers made of them:
:mod:`testbed.model.regime`); that the transports, KPIs and points exist
in the scenarios is checked by the caller once it loaded them (:func:`rule_problems`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from yaml.nodes import MappingNode, SequenceNode

from testbed.model import units
from testbed.spec.common import parse_transport
from testbed.spec.overrides import KeyError_, Override, parse_key, text_of
from testbed.spec.regime import PaperValue, read_paper_regime
from testbed.spec.yamlread import Problem, Reader, SpecError, join

ID_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
OPS = (">=", "<=", ">", "<")
_NUM = r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"
_TERM = r"(?P<{p}t>[A-Za-z][A-Za-z0-9-]*)\s+(?P<{p}k>[A-Za-z_][A-Za-z0-9_.]*)(?:\s*@\s*(?P<{p}p>\S+))?"
RULE_RE = re.compile(
    rf"\s*{_TERM.format(p='l')}\s*(?P<op>>=|<=|>|<)\s*"
    rf"(?:(?P<num>{_NUM})(?:\s*\*\s*{_TERM.format(p='r')})?|{_TERM.format(p='s')})\s*")
RULE_FORMS = ("TRANSPORT KPI[@POINT] OP NUMBER, or TRANSPORT KPI[@POINT] OP [K *] TRANSPORT KPI[@POINT] "
              "(OP: >=, <=, >, <)")
_CLAIM_KEYS = (["id", "section", "figure", "scenario", "rules", "scaling", "estimate"],
               ["trials", "regime", "control"])
_CONTROL_KEYS = (["removes"], ["set", "transports", "stand_in"])


@dataclass(frozen=True)
class Term:
    """One KPI of one transport (at one sweep point, for a sweep)."""

    transport: str
    kpi: str
    point: str | None = None

    def __str__(self) -> str:
        return f"{self.transport} {self.kpi}" + (f" @{self.point}" if self.point else "")


@dataclass(frozen=True)
class Rule:
    """``left OP constant`` or ``left OP factor * right``."""

    text: str
    line: int
    left: Term
    op: str
    constant: float | None = None
    factor: float = 1.0
    right: Term | None = None

    def terms(self) -> tuple[Term, ...]:
        return (self.left,) if self.right is None else (self.left, self.right)


@dataclass(frozen=True)
class Control:
    """A claim's control: its scenario with the mechanism under test removed (``removes``, text),
    by key-path overrides (:class:`testbed.spec.overrides.Override`, each at its line of the
    claims file), run on ``transports`` (None: the scenario's own list)."""

    removes: str
    overrides: tuple[Override, ...]
    transports: tuple[str, ...] | None
    line: int
    #: ``stand_in: {mrc: rc}``: the control runs rc where it would run mrc, and rc's results
    #: stand for mrc's in the rules (a mechanism only another transport can remove)
    stand_in: tuple[tuple[str, str], ...] = ()

    def set_texts(self) -> dict[str, str]:
        """``{key path: value as written}``."""
        return {o.path: o.text for o in self.overrides}

    def runs(self, scenario_transports) -> list[str]:
        """The transports the control runs: its ``transports`` (else ``scenario_transports``),
        each replaced by its stand-in."""
        sub = dict(self.stand_in)
        return [sub.get(t, t) for t in (self.transports or scenario_transports)]


@dataclass(frozen=True)
class Claim:
    id: str
    section: str
    figure: str
    scenario: Path
    rules: tuple[Rule, ...]
    scaling: str
    estimate_quick_s: float
    estimate_full_s: float
    trials: int
    line: int
    #: the paper's regime for this claim: the file's top-level values, this claim's over them
    regime: dict[str, PaperValue] = field(default_factory=dict)
    #: the variant that must fail (None: the claim names none, and so never counts as holding)
    control: Control | None = None

    def transports(self) -> list[str]:
        return list(dict.fromkeys(t.transport for r in self.rules for t in r.terms()))


@dataclass(frozen=True)
class Claims:
    path: Path
    trials: int
    claims: tuple[Claim, ...]
    #: the paper's regime common to every claim (the top-level ``regime:``)
    regime: dict[str, PaperValue] = field(default_factory=dict)


def parse_rule(text: str) -> tuple[Term, str, float | None, float, Term | None]:
    """(left, op, constant, factor, right) of a rule's text; ValueError saying the forms."""
    m = RULE_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a rule: expected {RULE_FORMS}")
    left = Term(m["lt"], m["lk"], m["lp"])
    for t in ("l", "r", "s"):
        if m[f"{t}t"]:
            parse_transport(m[f"{t}t"])   # ValueError names the transport forms
    if m["num"] is not None and m["rt"] is None:
        return left, m["op"], float(m["num"]), 1.0, None
    right = Term(m["rt"], m["rk"], m["rp"]) if m["rt"] else Term(m["st"], m["sk"], m["sp"])
    factor = float(m["num"]) if m["num"] is not None else 1.0
    return left, m["op"], None, factor, right


def is_claims_file(path: Path | str) -> bool:
    """Whether a YAML file is a claims file (a top-level ``claims`` key), told apart by content
    as ``testbed validate`` tells topologies from scenarios; False if it does not compose."""
    from yaml.nodes import MappingNode
    r = Reader(str(path))
    root = r.compose(Path(path))
    return isinstance(root, MappingNode) and any(getattr(k, "value", None) == "claims" for k, _ in root.value)


def load_claims(path: Path | str) -> Claims:
    """Read and check a claims file. Raises SpecError with every problem (file:line: key path)."""
    path = Path(path)
    r = Reader(str(path))
    root = r.compose(path)
    claims: list[Claim] = []
    trials = 3
    regime: dict[str, PaperValue] = {}
    m = r.mapping(root, "", ["claims"], ["trials", "regime"]) if root is not None else None
    if m is not None:
        if "trials" in m:
            trials = r.integer(m["trials"], "trials", minimum=1, maximum=100) or trials
        if "regime" in m:
            regime = read_paper_regime(r, m["regime"], "regime")
        items = r.seq(m["claims"], "claims") or []
        if m.get("claims") is not None and not items and not r.problems:
            r.error(m["claims"], "claims", "expected at least one claim")
        seen: dict[str, int] = {}
        for i, node in enumerate(items):
            c = _claim(r, node, join("claims", i), path.parent, trials, regime)
            if c is None:
                continue
            if c.id in seen:
                r.error(node, join(join("claims", i), "id"), f"duplicate id {c.id!r} (first at line {seen[c.id]})")
                continue
            seen[c.id] = c.line
            claims.append(c)
    if r.problems:
        raise SpecError(r.problems)
    return Claims(path, trials, tuple(claims), regime)


def _claim(r: Reader, node, where: str, base: Path, default_trials: int,
           regime: dict[str, PaperValue]) -> Claim | None:
    m = r.mapping(node, where, *_CLAIM_KEYS)
    if m is None:
        return None
    before = len(r.problems)
    cid = r.text(m.get("id"), join(where, "id"))
    if cid is not None and not ID_RE.fullmatch(cid):
        r.error(m["id"], join(where, "id"), f"id {cid!r} must start with a letter and hold only letters, "
                                            "digits, '-' and '_' (at most 40)")
    texts = {k: r.text(m.get(k), join(where, k)) for k in ("section", "figure", "scaling", "scenario")}
    for k in ("section", "figure", "scaling"):
        if texts[k] is not None and not texts[k].strip():
            r.error(m[k], join(where, k), "must not be empty")
    scenario = None
    if texts["scenario"] is not None:
        scenario = base / texts["scenario"]
        if not scenario.is_file():
            r.error(m["scenario"], join(where, "scenario"), f"no such scenario file: {scenario}")
    rules = []
    for j, rn in enumerate((r.seq(m["rules"], join(where, "rules")) if "rules" in m else None) or []):
        rp = join(join(where, "rules"), j)
        text = r.text(rn, rp)
        if text is None:
            continue
        try:
            left, op, constant, factor, right = parse_rule(text)
        except ValueError as exc:
            r.error(rn, rp, str(exc))
            continue
        rules.append(Rule(text.strip(), rn.start_mark.line + 1, left, op, constant, factor, right))
    if "rules" in m and isinstance(m["rules"].value, list) and not m["rules"].value:
        r.error(m["rules"], join(where, "rules"), "expected at least one rule")
    est = r.mapping(m["estimate"], join(where, "estimate"), ["quick", "full"]) if "estimate" in m else None
    quick = full = None
    if est is not None and len(est) == 2:
        quick = r.unit(est["quick"], join(where, "estimate.quick"), units.parse_duration)
        full = r.unit(est["full"], join(where, "estimate.full"), units.parse_duration)
    trials = (r.integer(m["trials"], join(where, "trials"), minimum=1, maximum=100)
              if "trials" in m else default_trials)
    own = read_paper_regime(r, m["regime"], join(where, "regime")) if "regime" in m else {}
    control = _control(r, m["control"], join(where, "control")) if "control" in m else None
    if len(r.problems) > before or None in (cid, scenario, quick, full, trials) or not rules:
        return None
    return Claim(cid, texts["section"], texts["figure"], scenario, tuple(rules), texts["scaling"],
                 quick, full, trials, node.start_mark.line + 1, {**regime, **own}, control)


def _control(r: Reader, node, where: str) -> Control | None:
    """``control: {removes: TEXT, set: {KEY.PATH: VALUE, ...}, transports: [T, ...],
    stand_in: {T: T2, ...}}`` (``set`` or ``stand_in`` or both): the key paths' syntax and the
    transports' names are checked here; that the paths name places in the scenario and that it
    loads with the values, by :func:`control_problems`."""
    m = r.mapping(node, where, *_CONTROL_KEYS)
    if m is None:
        return None
    before = len(r.problems)
    removes = r.text(m["removes"], join(where, "removes"))
    if removes is not None and not removes.strip():
        r.error(m["removes"], join(where, "removes"), "must not be empty: say what the control removes")
    overrides = []
    if "set" not in m and "stand_in" not in m:
        r.error(node, where, "needs set: (key paths to change) or stand_in: (a transport to run in "
                             "another's place): a control changes the scenario")
    for key, key_node, value in (r.entries(m["set"], join(where, "set")) or ()) if "set" in m else ():
        try:
            overrides.append(Override(parse_key(key), value, text_of(value), key_node.start_mark.line + 1,
                                      origin=f"control.set.{key}"))
        except KeyError_ as exc:
            r.error(key_node, join(join(where, "set"), key), str(exc))
    if isinstance(m.get("set"), MappingNode) and not m["set"].value:
        r.error(m["set"], join(where, "set"), "expected at least one key path: a control changes the scenario")
    transports = None
    if "transports" in m:
        items = r.seq(m["transports"], join(where, "transports")) or []
        names = [r.text(t, join(join(where, "transports"), i)) for i, t in enumerate(items)]
        for i, (t, name) in enumerate(zip(items, names)):
            _check_transport(r, t, join(join(where, "transports"), i), name)
        if isinstance(m["transports"], SequenceNode) and not items:
            r.error(m["transports"], join(where, "transports"), "expected at least one transport (or no key: all)")
        transports = tuple(n for n in names if n is not None)
    stand_in = []
    for key, key_node, value in (r.entries(m["stand_in"], join(where, "stand_in")) or ()) if "stand_in" in m else ():
        run = r.text(value, join(join(where, "stand_in"), key))
        for name, at in ((key, key_node), (run, value)):
            _check_transport(r, at, join(join(where, "stand_in"), key), name)
        if run is not None and run == key:
            r.error(value, join(join(where, "stand_in"), key), f"{key} cannot stand in for itself")
        if run is not None:
            stand_in.append((key, run))
    if len(r.problems) > before:
        return None
    return Control(removes, tuple(overrides), transports, node.start_mark.line + 1, tuple(stand_in))


def _check_transport(r: Reader, node, path: str, name: str | None) -> None:
    """Record a problem at ``node`` if ``name`` (None: already reported) is not a transport."""
    if name is None:
        return
    try:
        parse_transport(name)
    except ValueError as exc:
        r.error(node, path, str(exc))


def rule_problems(claims_file: Path, claim: Claim, transports: list[str], kpis: list[str],
                  job_names: list[str], job_kpis: list[str], point_texts: list[str] | None) -> list[Problem]:
    """What a claim's rules name that its scenario does not have: a transport not in its list, a
    KPI not in ``kpis`` (nor ``jobs.<job>.<key>`` of its jobs), a point without a sweep, a sweep
    term without a point, a point not in the sweep (``point_texts``: each point's values as
    written, joined by ','; None without a sweep)."""
    out = []
    for rule in claim.rules:
        def bad(msg: str) -> None:
            out.append(Problem(str(claims_file), rule.line, f"claims.{claim.id}.rules", f"{rule.text!r}: {msg}"))
        for t in rule.terms():
            if t.transport not in transports:
                bad(f"transport {t.transport} is not in {claim.scenario.name}'s list ({', '.join(transports)})")
            if t.kpi.startswith("jobs."):
                parts = t.kpi.split(".", 2)
                if len(parts) != 3 or parts[1] not in job_names or parts[2] not in job_kpis:
                    bad(f"KPI {t.kpi}: expected jobs.<job>.<key> with a job of the scenario "
                        f"({', '.join(job_names) or 'none'}) and a key of {', '.join(job_kpis)}")
            elif t.kpi not in kpis:
                bad(f"unknown KPI {t.kpi} (one of {', '.join(kpis)}, or jobs.<job>.<key>)")
            if point_texts is None and t.point is not None:
                bad(f"@{t.point}: {claim.scenario.name} has no sweep")
            elif point_texts is not None and t.point is None:
                bad(f"{t}: {claim.scenario.name} has a sweep: name the point (@value; one of "
                    f"{', '.join(point_texts)})")
            elif point_texts is not None and t.point not in point_texts:
                bad(f"@{t.point}: no such sweep point (one of {', '.join(point_texts)})")
    return out


def control_problems(claims_file: Path, claim: Claim, transports: list[str], load) -> list[Problem]:
    """What a claim's control names that its scenario refuses, each at its line of the claims
    file: a transport not in the scenario's list (``transports``), a key path that names no
    place in the scenario, a value the scenario's loader refuses. ``load(overrides)`` loads the
    claim's scenario (every sweep point) with those overrides and raises
    :class:`testbed.spec.yamlread.SpecError`; each override is tried alone first, so a problem
    is pinned to the line of the value that caused it (one only the values together cause: the
    control's line). The scenario's own messages follow, with their file:line."""
    c = claim.control
    if c is None:
        return []
    where = f"claims.{claim.id}.control"
    out = [Problem(str(claims_file), c.line, f"{where}.transports",
                   f"transport {t} is not in {claim.scenario.name}'s list ({', '.join(transports)})")
           for t in c.transports or () if t not in transports]
    out += [Problem(str(claims_file), c.line, f"{where}.stand_in.{t}",
                    f"transport {t} is not one the control runs ({', '.join(c.transports or transports)})")
            for t, _ in c.stand_in if t not in (c.transports or transports)]

    def tried(overrides, line: int, key: str) -> bool:
        try:
            load(overrides)
        except SpecError as exc:
            out.extend(Problem(str(claims_file), line, key, f"{claim.scenario.name} refuses it: {_inner(p, claim)}")
                       for p in exc.problems)
            return False
        return True

    alone = [tried((o,), o.line, f"{where}.set.{o.path}") for o in c.overrides]
    if all(alone):
        tried(c.overrides, c.line, f"{where}.set")
    return out


def _inner(p: Problem, claim: Claim) -> str:
    """A scenario's problem under a control: its own file:line unless that is the scenario
    file, where the line would be the claims file's (the override's value carries it)."""
    if p.file == str(claim.scenario) or not p.line:   # a key path of the control itself is said already
        own = not p.key_path or p.key_path.startswith("control.set.")
        return p.message if own else f"{p.key_path}: {p.message}"
    return str(p)
