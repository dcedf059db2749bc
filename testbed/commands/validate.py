"""``testbed validate FILE...``: check topology and scenario files, build nothing.

Each file is told apart by content (a top-level ``transports``, ``timeline``
or ``workload`` key makes it a scenario). Prints ``ok: FILE (summary)`` per
valid file on stdout and every problem (``file:line: key.path: message``) on
stderr; ``--format json`` prints one JSON document on stdout instead.
Exit status 0 if every file is valid, 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape

from ..kernel import features
from ..spec import Scenario, SpecError, load_file
from ..topology import Topology


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check topology and scenario files (exit 2 on problems)",
                       description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", metavar="FILE", help="topology or scenario YAML files")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for people (default), json for machines")
    p.set_defaults(func=run)


def summarize(obj: Topology | Scenario) -> dict:
    """Counts for the ``ok`` line: kind, nodes/links/hosts; for scenarios transports and timeline."""
    topo = obj.topology if isinstance(obj, Scenario) else obj
    out = {"type": "scenario" if isinstance(obj, Scenario) else "topology", "name": obj.name,
           "nodes": len(topo.nodes), "links": len(topo.links), "hosts": len(topo.hosts)}
    if isinstance(obj, Scenario):
        out.update(topology=topo.name, transports=list(obj.transports), timeline=len(obj.timeline),
                   actions=[f"{e.action} {e.link}" for e in obj.timeline])
    return out


def _summary_text(s: dict) -> str:
    text = f"{s['type']} {s['name']}: {s['nodes']} nodes, {s['links']} links, {s['hosts']} hosts"
    if s["type"] == "scenario":
        text += (f" (topology {s['topology']}); transports {', '.join(s['transports'])}; "
                 f"timeline {s['timeline']} events")
    return text


def run(args: argparse.Namespace) -> int:
    feats = features()
    results = []
    for path in args.files:
        try:
            results.append({"file": path, "ok": True, "summary": summarize(load_file(path, features=feats)),
                            "problems": []})
        except SpecError as exc:
            results.append({"file": path, "ok": False, "problems": [p.to_dict() for p in exc.problems],
                            "text": [str(p) for p in exc.problems]})
    failed = any(not r["ok"] for r in results)
    if args.format == "json":
        for r in results:
            r.pop("text", None)
        json.dump({"ok": not failed, "kernel": feats.to_dict(), "files": results}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 2 if failed else 0
    out, err = Console(highlight=False), Console(stderr=True, highlight=False)
    for r in results:
        if r["ok"]:
            out.print(f"[green]ok[/]: {escape(r['file'])} ({escape(_summary_text(r['summary']))})",
                      soft_wrap=True)
        else:
            for line in r["text"]:
                err.print(escape(line), soft_wrap=True)
            err.print(f"[red]invalid[/]: {escape(r['file'])} ({len(r['problems'])} problems)")
    return 2 if failed else 0
