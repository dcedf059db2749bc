"""Scenario files -> :class:`testbed.spec.model.Scenario` (see :mod:`testbed.spec`)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from yaml.nodes import Node

from .. import units
from agents.protocol import TRANSPORTS

from ..kernel import KernelFeatures, features as probe_features
from ..topology import Topology
from ..units import show
from ..yamlread import Reader, SpecError, join, line_of
from .common import (SCENARIO_KEYS, _WORKLOAD_REQUIRED, SCENARIO_NAME_RE, ELEMENT_BYTES, MAX_WORKLOAD_BYTES,
                     MAX_ITERATIONS, MAX_EVS, MAX_REFERRED_PROBLEMS, _sorted, _not_a_mapping, _did_you_mean,
                     _explain_missing)
from .model import Scenario, Workload
from .timelinefile import _timeline, timeline_warnings
from .topofile import load_topology


def load_scenario(path: str | os.PathLike, *, features: KernelFeatures | None = None,
                  seed: int | None = None) -> Scenario:
    """Load and validate a scenario file and the topology it names; ``seed`` replaces the
    file's (a trial of ``trials: N``: seeded choices such as ``random`` links follow it).

    Raises SpecError listing every problem of both files.
    """
    reader = Reader(str(path))
    root = reader.compose(Path(path))
    scenario = _scenario(reader, root, Path(path), features or probe_features(), seed) if root else None
    if reader.problems or scenario is None:
        raise SpecError(_sorted(reader))
    return scenario


def _find_topology(ref: str, scenario_path: Path) -> Path | None:
    if not ref or "\0" in ref:
        return None
    candidates = [Path(ref)] if Path(ref).is_absolute() else [scenario_path.parent / ref, Path(ref)]
    for c in candidates:
        try:
            if c.exists():
                return c
        except (OSError, ValueError):
            continue
    return None


def _scenario(r: Reader, root: Node, path: Path, feats: KernelFeatures,
              seed_override: int | None = None) -> Scenario | None:
    if _not_a_mapping(r, root, "a scenario"):
        return None
    m = r.mapping(root, "", ["topology", "transports", "seed", "timeout", "workload"],
                  ["name", "description", "reconverge_after", "timeline", "trials"])
    if m is None:
        return None
    found = [k for k in SCENARIO_KEYS if k in m]
    _explain_missing(r, f"read as a scenario because it has a top-level {', '.join(found)} key")
    name = _scenario_name(r, m.get("name"), path.stem)
    description = r.text(m.get("description"), "description") or ""
    topo, topo_path = None, None
    ref = r.text(m.get("topology"), "topology")
    if ref is not None:
        found = _find_topology(ref, path)
        if found is not None and found.suffix not in (".yaml", ".yml"):
            r.error(m["topology"], "topology", f"topology file {show(ref)} is not a .yaml or .yml file")
        elif found is None:
            r.error(m["topology"], "topology", f"topology file {show(ref)} not found (looked in "
                                               f"{path.parent or '.'} and the current directory)")
        else:
            topo_path = os.path.relpath(found) if not os.path.relpath(found).startswith("..") else str(found)
            try:
                topo = load_topology(topo_path, features=feats)
            except SpecError as exc:
                if len(exc.problems) > MAX_REFERRED_PROBLEMS:  # a file that is not a topology at all
                    rest = len(exc.problems) - MAX_REFERRED_PROBLEMS
                    exc = SpecError([*exc.problems[:MAX_REFERRED_PROBLEMS],
                                     replace(exc.problems[MAX_REFERRED_PROBLEMS], key_path="",
                                             message=f"... and {rest} more problems in this file")])
                for p in exc.problems:  # an unreadable topology is this file's problem, at its line
                    r.problems.append(p if p.line else replace(p, file=r.file, line=line_of(m["topology"]),
                                                               key_path="topology",
                                                               message=f"{show(topo_path, 200)}: {p.message}"))
    transports = _transports(r, m.get("transports"))
    seed = r.integer(m.get("seed"), "seed", minimum=0, maximum=2**63 - 1)
    if seed_override is not None and seed is not None:
        seed = seed_override
    trials = r.integer(m["trials"], "trials", minimum=1, maximum=1000) if "trials" in m else 1
    timeout_s = r.unit(m.get("timeout"), "timeout", units.parse_duration)
    if timeout_s == 0:
        r.error(m["timeout"], "timeout", "must be > 0")
    reconverge = r.unit(m.get("reconverge_after"), "reconverge_after", units.parse_duration)
    workload = _workload(r, m.get("workload"), topo)
    timeline = _timeline(r, m.get("timeline"), topo, seed, timeout_s, workload, feats)
    if r.problems or None in (name, topo, transports, seed, timeout_s, workload, timeline, trials):
        return None
    warnings = timeline_warnings(r, timeline, timeout_s)
    return Scenario(name, str(path), description, topo, topo_path, transports, seed, timeout_s,
                    reconverge, workload, timeline, trials, warnings)


def _scenario_name(r: Reader, node: Node | None, stem: str) -> str | None:
    """The scenario's name (default: the file stem), which names its run directory."""
    name = r.text(node, "name") if node is not None else stem
    if name is None:
        return None
    if not SCENARIO_NAME_RE.fullmatch(name) or ".." in name:
        where = node if node is not None else 1
        r.error(where, "name", f"scenario name {show(name)} names the run directory: use 1-64 letters, "
                               "digits, '.', '_' or '-', starting with a letter or digit, without '..'"
                + ("" if node is not None else " (it defaults to the file name; add a 'name' key)"))
        return None
    return name


def _transports(r: Reader, node: Node | None) -> tuple[str, ...] | None:
    items = r.seq(node, "transports") if node is not None else None
    if items is None:
        return None
    if not items:
        r.error(node, "transports", f"must name at least one of {', '.join(TRANSPORTS)}")
        return None
    out = [r.choice(item, join("transports", i), TRANSPORTS) for i, item in enumerate(items)]
    for i, t in enumerate(out):
        if t is not None and t in out[:i]:
            r.error(items[i], join("transports", i), f"duplicate transport {t!r}")
    return tuple(out) if None not in out and len(set(out)) == len(out) else None


def _workload(r: Reader, node: Node | None, topo: Topology | None) -> Workload | None:
    m = r.mapping(node, "workload", _WORKLOAD_REQUIRED, ["evs", "mtu"]) if node is not None else None
    if m is None or not set(_WORKLOAD_REQUIRED) <= m.keys():
        return None
    collective = r.choice(m["collective"], "workload.collective", ["all_reduce"])
    hosts = _hosts(r, m["hosts"], topo)
    sizes = [r.unit(m[k], f"workload.{k}", units.parse_size) for k in ("min_bytes", "max_bytes")]
    for i, key in enumerate(("min_bytes", "max_bytes")):
        if sizes[i] is not None and sizes[i] > MAX_WORKLOAD_BYTES:
            r.error(m[key], f"workload.{key}", f"{units.format_size(sizes[i])} is above the largest buffer a "
                                               f"rank may hold ({units.format_size(MAX_WORKLOAD_BYTES)})")
            sizes[i] = None
        elif sizes[i] and sizes[i] % ELEMENT_BYTES:
            r.error(m[key], f"workload.{key}", f"{sizes[i]} bytes is not a whole number of float32 "
                                               f"elements ({ELEMENT_BYTES} bytes each)")
            sizes[i] = None
    if sizes[0] == 0:
        r.error(m["min_bytes"], "workload.min_bytes", "must be >= 1 byte")
    elif None not in sizes and sizes[1] < sizes[0]:
        r.error(m["max_bytes"], "workload.max_bytes",
                f"{units.format_size(sizes[1])} is below min_bytes ({units.format_size(sizes[0])})")
    counts = [r.integer(m[k], f"workload.{k}", minimum=low, maximum=high) for k, low, high in
              (("factor", 2, MAX_WORKLOAD_BYTES), ("iterations", 1, MAX_ITERATIONS), ("warmup", 0, MAX_ITERATIONS))]
    evs = r.integer(m.get("evs"), "workload.evs", minimum=1, maximum=MAX_EVS)
    mtu = r.integer(m.get("mtu"), "workload.mtu", minimum=1280, maximum=65535)
    if mtu is not None and topo is not None and mtu > (low := min(l.params.mtu for l in topo.links)):
        r.error(m["mtu"], "workload.mtu", f"{mtu} is above the fabric's smallest link MTU ({low})")
    if r.problems or None in (collective, hosts, *sizes, *counts):
        return None
    return Workload(collective, hosts, sizes[0], sizes[1], *counts, evs=evs, mtu=mtu)


def _hosts(r: Reader, node: Node, topo: Topology | None) -> tuple[str, ...] | None:
    known = [h.name for h in topo.hosts] if topo else None
    if r.value(node) == "all":
        return tuple(known) if known is not None else None
    items = r.seq(node, "workload.hosts")
    if items is None:
        return None
    names = [r.text(item, join("workload.hosts", i)) for i, item in enumerate(items)]
    for i, host in enumerate(names):
        path = join("workload.hosts", i)
        if host is not None and known is not None and host not in known:
            r.error(items[i], path, f"unknown host {show(host)}{_did_you_mean(host, known)}")
        elif host is not None and host in names[:i]:
            r.error(items[i], path, f"duplicate host {show(host)}")
    if len(items) < 2:
        r.error(node, "workload.hosts", f"an all-reduce needs >= 2 hosts, got {len(items)}")
    return tuple(names)


