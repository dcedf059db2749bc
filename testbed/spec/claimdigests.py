"""Pre-registration digests of a claim (issue 45, item 4): a short, stable hash of each part a
verdict rests on, so that a change to any of them after a run is visible (``testbed reproduce
--plan`` compares them with the last full suite's ``reproduce.json``; ``--digests`` prints them).

The parts (:data:`PARTS`), each :func:`digest` of a canonical JSON value:

- ``rules``: every rule parsed (:func:`testbed.spec.claimsfile.parse_rule`: transport, KPI,
  point, operator, constant or factor and right term), sorted: spacing, ``0.9`` vs ``0.90`` and
  the rules' order (all must hold) do not change it;
- ``scenario``: every file the claim's runs read (:func:`scenario_files`): the scenario file,
  the topology it names (and those its sweep or its control's ``set: {topology: ...}`` names),
  a command job's program or script; a YAML file by its parsed content (comments and key order
  do not count), any other by its bytes; a file by its role and the path as written, never the
  absolute path (the same digest in every checkout);
- ``control``: its ``removes``, ``set`` (key path: value as written), ``transports`` and
  ``stand_in`` (``none`` without a control);
- ``regime``: the paper's values for the claim (the top level's with its own over them): each
  key's span and source.

The rules and the control are recomputed from an older ``reproduce.json`` that kept their text
(:func:`entry_digests`), so a suite run before the digests still tells what changed since.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

PARTS = ("rules", "scenario", "control", "regime")
LENGTH = 12
MISSING = "missing"


def digest(value) -> str:
    """The first :data:`LENGTH` hex digits of sha256 over ``value`` as canonical JSON (keys
    sorted, no spaces; a value JSON cannot hold as its ``str``)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:LENGTH]


def rules_value(texts) -> list:
    """The rules' canonical form, sorted: ``[left, op, constant, factor, right]`` per rule, each
    term ``[transport, kpi, point]``; a text that does not parse (a hand-edited
    ``reproduce.json``) as its words joined by one space."""
    from testbed.spec.claimsfile import parse_rule
    out = []
    for text in texts:
        try:
            left, op, constant, factor, right = parse_rule(text)
        except ValueError:
            out.append(" ".join(str(text).split()))
            continue
        term = (lambda t: None if t is None else [t.transport, t.kpi, t.point])
        out.append([term(left), op, constant, factor, term(right)])
    return sorted(out, key=lambda v: json.dumps(v, sort_keys=True, default=str))


def control_value(removes: str | None, set_texts: dict | None, transports, stand_in: dict | None) -> dict | None:
    """A control's canonical form (None: no control); ``removes`` with its spacing collapsed,
    ``transports`` as a set (the runs, not their order)."""
    if removes is None and not set_texts and not stand_in:
        return None
    return {"removes": " ".join(str(removes or "").split()), "set": dict(set_texts or {}),
            "transports": sorted(transports) if transports else None, "stand_in": dict(stand_in or {})}


def regime_value(regime: dict) -> dict:
    """``{key: {"value": span as JSON, "source": text}}`` of a claim's paper values
    (:class:`testbed.spec.regime.PaperValue` by key)."""
    return {k: {"value": v.span.to_json(), "source": " ".join(v.source.split())} for k, v in regime.items()}


def _yaml(path: Path):
    """A YAML file's parsed content (the project's strict loader); ValueError if it does not parse."""
    import yaml

    from testbed.spec.yamlsafe import StrictLoader
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=StrictLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(str(exc)) from exc


def file_digest(path: Path | None) -> str:
    """:func:`digest` of a file: a ``.yaml``/``.yml`` by its parsed content, else (or if it
    does not parse) by its bytes; :data:`MISSING` for a file that is not there."""
    if path is None or not path.is_file():
        return MISSING
    if path.suffix in (".yaml", ".yml"):
        try:
            return digest({"yaml": _yaml(path)})
        except (ValueError, OSError):   # not YAML after all: its bytes still pin it
            pass
    try:
        return digest({"bytes": hashlib.sha256(path.read_bytes()).hexdigest()})
    except OSError:
        return MISSING


def _topology(ref, scenario: Path) -> Path | None:
    """The topology file ``ref`` names from ``scenario`` (as :mod:`testbed.spec.scenfile` finds it)."""
    from testbed.spec.scenfile import _find_topology
    return _find_topology(ref, scenario) if isinstance(ref, str) else None


def _commands(content: dict) -> list:
    """The ``command`` values of a scenario's workload or jobs."""
    jobs = [content.get("workload")] + list(content.get("jobs") or [])
    return [j["command"] for j in jobs if isinstance(j, dict) and j.get("command")]


def scenario_files(scenario: Path, control_set: dict | None = None) -> dict[str, Path | None]:
    """``{role: file}`` of what a claim's runs read: ``scenario`` itself (``scenario NAME``),
    its ``topology`` (``topology PATH`` as written), each topology its ``sweep`` names, a command
    job's program or script (``command PATH``), the topology of the control's ``set`` (its
    text); None for one not found. A scenario that does not parse names only itself."""
    from testbed.spec.commandfile import PYTHON_NAMES
    out: dict[str, Path | None] = {f"scenario {scenario.name}": scenario}
    try:
        content = _yaml(scenario)
    except (ValueError, OSError):
        content = None
    if not isinstance(content, dict):
        return out
    refs = [content.get("topology")]
    sweep = content.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("topology"), list):
        refs += sweep["topology"]
    refs.append((control_set or {}).get("topology"))
    for ref in refs:
        if isinstance(ref, str):
            out[f"topology {ref}"] = _topology(ref, scenario)
    for cmd in _commands(content):
        argv = cmd.split() if isinstance(cmd, str) else [str(a) for a in cmd] if isinstance(cmd, list) else []
        for arg in argv[:2]:        # the program, or python's script
            if arg in PYTHON_NAMES:
                continue
            if (scenario.parent / arg).is_file():
                out[f"command {arg}"] = scenario.parent / arg
            break
    return out


def claim_digests(claim) -> dict:
    """``{"rules", "scenario", "control", "regime": digest, "files": {role: digest}}`` of a
    :class:`testbed.spec.claimsfile.Claim` (``files``: each of :func:`scenario_files`, so a
    changed ``scenario`` digest can say which file changed). Reads the files; never raises for
    a missing one (its digest is :data:`MISSING`)."""
    ctl = claim.control
    set_texts = ctl.set_texts() if ctl is not None else {}
    files = {role: file_digest(p) for role, p in scenario_files(Path(claim.scenario), set_texts).items()}
    return {"rules": digest(rules_value(r.text for r in claim.rules)),
            "scenario": digest(files),
            "control": digest(None if ctl is None else control_value(
                ctl.removes, set_texts, ctl.transports, dict(ctl.stand_in))),
            "regime": digest(regime_value(claim.regime or {})),
            "files": files}


def entry_digests(entry: dict) -> dict:
    """A ``reproduce.json`` claim entry's digests: its own ``digests`` where recorded, else the
    rules' and the control's recomputed from their recorded text (the scenario's and the
    regime's: None, not recorded)."""
    have = entry.get("digests") if isinstance(entry.get("digests"), dict) else {}
    out = {k: have.get(k) for k in PARTS}
    out["files"] = have.get("files") if isinstance(have.get("files"), dict) else {}
    if out["rules"] is None and isinstance(entry.get("rules"), list):
        out["rules"] = digest(rules_value(entry["rules"]))
    if out["control"] is None and "control" in entry:
        c = entry["control"] if isinstance(entry["control"], dict) else {}
        out["control"] = digest(None if not c else control_value(
            c.get("removes"), c.get("set"), c.get("transports"), c.get("stand_in")))
    return out


def changed_parts(before: dict, now: dict) -> list[str]:
    """The parts (:data:`PARTS` order) whose digests differ; a part not recorded ``before``
    (None) is left out: :func:`unrecorded_parts` names those."""
    return [k for k in PARTS if before.get(k) is not None and before.get(k) != now.get(k)]


def unrecorded_parts(before: dict) -> list[str]:
    return [k for k in PARTS if before.get(k) is None]


def changed_files(before: dict, now: dict) -> list[str]:
    """The roles of :func:`scenario_files` whose digests differ or that one side lacks."""
    b, n = before.get("files") or {}, now.get("files") or {}
    return [role for role in dict.fromkeys([*n, *b]) if b.get(role) != n.get(role)]
