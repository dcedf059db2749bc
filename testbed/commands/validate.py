"""``testbed validate FILE...``: check topology and scenario files, build nothing.

Each file is told apart by content (a top-level ``transports``, ``timeline``
or ``workload`` key makes it a scenario). Prints ``ok: FILE (summary)`` per
valid file on stdout and every problem (``file:line: key.path: message``) on
stderr; ``--format json`` prints one JSON document on stdout instead.
Warnings (``file:line: key.path: warning: ...``, e.g. overlapping faults) go
to stderr too and do not change the exit status: 0 if every file is valid, 2
otherwise. Anything that came from a file is printed escaped (rich markup and
``:emoji:`` codes shown as written; characters the terminal's encoding cannot
show as ``\\uXXXX``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from testbed.fabric.kernel import features
from testbed.spec import Scenario, SpecError, load_file
from testbed.spec.yamlread import Problem
from testbed.model.topology import Topology


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check topology and scenario files (exit 2 on problems)",
                       description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", metavar="FILE", help="topology or scenario YAML files")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for people (default), json for machines")
    p.add_argument("--servers", metavar="SERVERS_YAML",
                   help="also place each fabric on these servers (testbed/cluster): the cut, per-server "
                        "load, and links the VXLAN underlay cannot carry")
    from testbed.cluster.placement import PLACERS
    p.add_argument("--placer", default="pods", choices=sorted(PLACERS),
                   help="placement algorithm with --servers (default: pods)")
    p.add_argument("--needs", action="store_true",
                   help="print only what the valid files need installed beyond the testbed, one a line "
                        "(torch: a command job run by the testbed's python); make run reads it")
    p.set_defaults(func=run)


def needs(obj: Topology | Scenario) -> list[str]:
    """What running ``obj`` needs beyond the testbed's own packages: ``torch`` for a command job
    whose program is the testbed's interpreter (a PyTorch script, :mod:`testbed.spec.commandfile`)."""
    from testbed.spec.commandfile import PYTHON_NAMES
    if isinstance(obj, Scenario) and obj.workload.is_command and obj.workload.command[0] in PYTHON_NAMES:
        return ["torch"]
    return []


def summarize(obj: Topology | Scenario) -> dict:
    """Counts for the ``ok`` line: kind, nodes/links/hosts; for scenarios transports and timeline."""
    topo = obj.topology if isinstance(obj, Scenario) else obj
    out = {"type": "scenario" if isinstance(obj, Scenario) else "topology", "name": obj.name,
           "nodes": len(topo.nodes), "links": len(topo.links), "hosts": len(topo.hosts)}
    if isinstance(obj, Scenario):
        out.update(needs=needs(obj), topology=topo.name, transports=list(obj.transports), timeline=len(obj.timeline),
                   actions=[f"{e.action} {e.switch or e.link or e.selector or e.target}" for e in obj.timeline],
                   jobs=[f"{j.name} ({j.collective}, {len(j.hosts)} ranks)" for j in obj.all_jobs])
    return out


def _summary_text(s: dict) -> str:
    if s["type"] == "claims":
        est = s["estimate_s"]
        return (f"claims: {len(s['claims'])} ({', '.join(s['claims'])}); estimated "
                f"{est['quick'] / 60:.0f} min quick, {est['full'] / 60:.0f} min full")
    text = f"{s['type']} {s['name']}: {s['nodes']} nodes, {s['links']} links, {s['hosts']} hosts"
    if s["type"] == "scenario":
        text += (f" (topology {s['topology']}); "
                 + (f"jobs {', '.join(s['jobs'])}; " if len(s.get("jobs") or ()) > 1 else "")
                 + f"transports {', '.join(s['transports'])}; timeline {s['timeline']} events")
    if "placement" in s:
        pl = s["placement"]
        per = "; ".join(f"{name} {v['nodes']} nodes, {v['hosts']} hosts, {v['tunnels']} tunnels"
                        for name, v in pl["per_server"].items())
        text += f"; placed ({pl['placer']}) cutting {pl['cut_links']} of {pl['links']} links: {per}"
    return text


def check(path: str, feats, cluster=None, placer: str = "pods") -> dict:
    """One file's result: ``ok``, ``summary`` or ``problems``, and ``warnings`` (as dicts).
    With ``cluster`` (a :class:`testbed.cluster.servers.Cluster`) the summary gains the
    placement, and links its tunnels cannot carry are problems (named in the servers file).
    A claims file (``testbed reproduce``: a top-level ``claims`` key) is checked with its
    scenarios and rules (:func:`check_claims`)."""
    from testbed.spec.claimsfile import is_claims_file
    if is_claims_file(path):
        return check_claims(path)
    try:
        obj = load_file(path, features=feats)
    except SpecError as exc:
        return {"file": path, "ok": False, "problems": [p.to_dict() for p in exc.problems],
                "warnings": [], "text": [str(p) for p in exc.problems]}
    warnings = obj.warnings if isinstance(obj, Scenario) else ()
    summary = summarize(obj)
    problems: list[Problem] = []
    if cluster is not None:
        from testbed.cluster.vxlan import checked_placement
        topo = obj.topology if isinstance(obj, Scenario) else obj
        placement, problems = checked_placement(topo, cluster, placer, path)
        if placement is not None:
            summary["placement"] = {"placer": placer, **placement.summary(topo)}
    if problems:
        return {"file": path, "ok": False, "problems": [p.to_dict() for p in problems],
                "warnings": [w.to_dict() for w in warnings], "text": [str(p) for p in problems]}
    return {"file": path, "ok": True, "summary": summary, "problems": [],
            "warnings": [w.to_dict() for w in warnings], "text": [str(w) for w in warnings]}


def check_claims(path: str) -> dict:
    """A claims file's result, as :func:`check`'s: its shape and rules, each claim's scenario
    (a scenario that does not load is a problem here, "not runnable" for ``reproduce``) and
    what each rule names (transports, KPIs, sweep points), and each control's key paths, values
    and transports against the scenario (:func:`testbed.spec.claimsfile.control_problems`)."""
    from pathlib import Path

    from testbed.commands.reproduce import prepare
    from testbed.spec.claimsfile import load_claims

    def failed(problems) -> dict:
        return {"file": path, "ok": False, "problems": [p.to_dict() for p in problems], "warnings": [],
                "text": [str(p) for p in problems]}
    try:
        claims = load_claims(path)
    except SpecError as exc:
        return failed(exc.problems)
    prepared, problems = prepare(Path(path), list(claims.claims))
    problems += [Problem(path, p.claim.line, f"claims.{p.claim.id}.scenario", p.not_runnable)
                 for p in prepared if p.not_runnable]
    if problems:
        return failed(problems)
    summary = {"type": "claims", "name": Path(path).name, "claims": [c.id for c in claims.claims],
               "estimate_s": {"quick": sum(c.estimate_quick_s for c in claims.claims),
                              "full": sum(c.estimate_full_s for c in claims.claims)}}
    return {"file": path, "ok": True, "summary": summary, "problems": [], "warnings": [], "text": []}


def safe(text: str, stream: TextIO) -> str:
    """``text`` as ``stream`` can encode it (lone surrogates, characters outside a C
    locale's ASCII as backslash escapes), with rich markup escaped."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text = text.encode(encoding, "backslashreplace").decode(encoding)
    except LookupError:
        text = text.encode("ascii", "backslashreplace").decode("ascii")
    return escape(text)


def run(args: argparse.Namespace) -> int:
    feats = features()
    cluster, results = None, []
    if args.servers:
        from testbed.cluster.servers import load_servers
        try:
            cluster = load_servers(args.servers)
        except SpecError as exc:
            results.append({"file": args.servers, "ok": False, "problems": [p.to_dict() for p in exc.problems],
                            "warnings": [], "text": [str(p) for p in exc.problems]})
    if not results:
        results = [check(path, feats, cluster, args.placer) for path in args.files]
    failed = any(not r["ok"] for r in results)
    if getattr(args, "needs", False) and not failed:
        for item in sorted({n for r in results for n in r["summary"].get("needs", ())}):
            print(item)
        return 0
    if args.format == "json":
        for r in results:
            r.pop("text", None)
            r["file"] = r["file"].encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        sys.stdout.write(json.dumps({"ok": not failed, "kernel": feats.to_dict(), "files": results}, indent=2))
        sys.stdout.write("\n")
        return 2 if failed else 0
    out = Console(highlight=False, emoji=False)
    err = Console(stderr=True, highlight=False, emoji=False)
    for r in results:
        for line in r["text"]:
            err.print(safe(line, err.file), soft_wrap=True)
        if r["ok"]:
            out.print(f"[green]ok[/]: {safe(r['file'], out.file)} "
                      f"({safe(_summary_text(r['summary']), out.file)})", soft_wrap=True)
        else:
            count = len(r["problems"])
            err.print(f"[red]invalid[/]: {safe(r['file'], err.file)} "
                      f"({count} problem{'' if count == 1 else 's'})", soft_wrap=True)
    return 2 if failed else 0
