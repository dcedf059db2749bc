"""YAML spec files -> validated frozen dataclasses (topologies and scenarios).

Strict, in the containerlab way: raw YAML -> strict parse (unknown keys
rejected) -> validate, collecting *every* problem -> resolved objects. Each
problem names file, line and key path::

    topologies/x.yaml:12: links[3].rate: '10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)

Loaders raise :class:`SpecError` (all problems) and have no side effects;
units are parsed here (:mod:`testbed.units`), nothing downstream sees strings.

Topology file
-------------
Common keys: ``name`` (optional, default: the file stem), ``kind``
(``fat-tree`` | ``leaf-spine`` | ``explicit``), ``link_classes`` (required,
with at least ``host`` and ``fabric``; explicit files may add more classes).
A class is ``{rate: 20Mbit, queue: 64, delay: 50us, loss: 0.1%, mtu: 9000}``:
``rate`` required, ``queue`` in packets (default 100), ``delay``/``loss``
optional and only where the kernel has sch_netem, ``mtu`` bytes (default 1500).

* ``kind: fat-tree``: ``k`` (even, >= 2).
* ``kind: leaf-spine``: ``leaves``, ``spines``, ``hosts_per_leaf`` (>= 1),
  ``planes`` (optional, default 1).
* ``kind: explicit``: ``nodes`` (name -> ``{role, plane?, pod?}``; roles host
  edge aggregation core leaf spine; names are letters, digits and ``_``, short
  enough that ``<node>-eth<n>`` fits 15 characters) and ``links`` (a list of
  ``{endpoints, class?, rate?, queue?, delay?, loss?}``; ``endpoints`` is
  ``[h0, l0]`` or the full form ``["h0:h0-eth0", "l0:l0-eth1"]``; ``class``
  defaults to ``host`` when an endpoint is a host, else ``fabric``; the other
  keys override the class for that link).

Scenario file
-------------
``name``?, ``description``?, ``topology`` (path, relative to the scenario's
directory first, then the current directory), ``transports`` (non-empty,
unique, from ``mrc rc tcp``), ``seed`` (int >= 0), ``timeout`` (duration),
``reconverge_after``? (duration), ``trials``? (int >= 1: seeds seed, seed+1, ..., each on
fresh fabrics), ``workload`` (``collective: all_reduce``,
``hosts: all`` or a list of >= 2 hosts, ``min_bytes``, ``max_bytes``,
``factor`` (int >= 2), ``iterations`` (>= 1), ``warmup`` (>= 0), ``evs``?,
``mtu``?) and ``timeline``? (a list; each item has exactly one trigger, ``at:
<duration>`` or ``at_iteration: N`` with optional ``after: <duration>``, and
exactly one action: ``link_down: LINK``, ``link_up: LINK``, ``flap: {link,
period, count}``, ``loss: {link, percent, duration?}``, ``rate: {link, rate,
duration?}``, ``blackhole: {link, duration?}``). LINK is a link name
(``a0_0-c0_0``, either direction), a selector ``random <role>-<role>``,
resolved with ``random.Random(seed)`` in timeline order at load time, or a flow
target ``{crossed_by: "rc 3->4" | [rc, tcp], hop?: core-aggregation | unrepaired}``
(:mod:`testbed.targets`), checked here and resolved by the runner on the fabric.

Bounds
------
Every value is checked against what the kernel and this machine accept, by key
and line: rates <= 10Tbit (:mod:`testbed.units`), ``queue`` a u32, ``delay``
<= 4294s (netem's u32 microseconds), durations <= 24h, ``plane`` <= 65535 (16
bits of the address), interface names <= 15 bytes of UTF-8, workload sizes
whole float32 elements and <= 1GiB, ``flap`` count <= 10,000 and period >=
10ms, at most 1,000 timeline events. A scenario ``name`` (default: the file
stem) names its run directory, so it is 1-64 of ``[A-Za-z0-9._-]`` without
``..``. A fabric whose estimated memory (:func:`testbed.topology.footprint`)
exceeds 75% of this machine's is refused from its counts, before it is built;
explicit fabrics must let every pair of hosts meet on a plane within 5
switches (an EV's 6 uSIDs). Suspicious but valid timelines give
:attr:`Scenario.warnings` (see :func:`timeline_warnings`).
"""

from __future__ import annotations

import difflib
import os
import random
import re
from dataclasses import dataclass, field as dataclass_field, replace
from pathlib import Path

from yaml.nodes import MappingNode, Node, ScalarNode

from . import units
from agents.protocol import TRANSPORTS

from .kernel import KernelFeatures, features as probe_features
from .targets import HOPS, UNREPAIRED, FlowTarget, check_hop, parse_selector
from .topology import (IFNAME_MAX, MAX_PLANE, LinkDecl, LinkParams, NodeDecl, Role, Topology, TopologyError,
                       fat_tree, footprint, from_explicit, ifname_problem, leaf_spine)
from .units import show
from .yamlread import Problem, Reader, SpecError, join, line_of

__all__ = ["Problem", "SpecError", "Scenario", "Workload", "TimelineEvent", "load_topology",
           "load_scenario", "load_file", "is_scenario", "TRANSPORTS", "ACTIONS"]

KINDS = ("fat-tree", "leaf-spine", "explicit")
_KIND_KEYS = {"fat-tree": (["k"], []), "leaf-spine": (["leaves", "spines", "hosts_per_leaf"], ["planes"]),
              "explicit": (["nodes", "links"], [])}
_CLASS_KEYS = ["rate", "queue", "delay", "loss", "mtu"]
#: Host NIC uSIDs 0x1000.. are limited to 0x8000 NICs (topology.py's plan).
MAX_HOST_NICS = 0x8000
ACTIONS = ("link_down", "link_up", "flap", "loss", "rate", "blackhole")
SCENARIO_KEYS = ("transports", "timeline", "workload")
_ACTION_KEYS = {"flap": (["link", "period", "count"], []), "loss": (["link", "percent"], ["duration"]),
                "rate": (["link", "rate"], ["duration"]), "blackhole": (["link"], ["duration"])}
_WORKLOAD_REQUIRED = ["collective", "hosts", "min_bytes", "max_bytes", "factor", "iterations", "warmup"]

#: A scenario name names its run directory: no '/', no '..', nothing a shell would trip on.
SCENARIO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: Kernel limits: a qdisc queue limit is a u32; netem takes its delay in microseconds as a u32.
MAX_QUEUE_PKTS = 2**32 - 1
MAX_DELAY_S = (2**32 - 1) / 1e6
#: Workload elements are float32: sizes are whole multiples of this.
ELEMENT_BYTES = 4
#: Largest buffer per rank: every host's agent holds a few copies in memory.
MAX_WORKLOAD_BYTES = 1 << 30
MAX_ITERATIONS = 100_000
MAX_EVS = 4096
#: Timeline bounds: more events than this is a generated file gone wrong; a flap
#: toggles a link through tc/ip (~ms each), so a period below 10ms is not a flap.
MAX_TIMELINE_EVENTS = 1000
MAX_FLAP_COUNT = 10_000
MIN_FLAP_PERIOD_S = 0.01
#: Fabric size bounds checked before anything is built (a k beyond this cannot fit
#: MAX_HOST_NICS anyway), and the share of this machine's memory a fabric may use.
MAX_COUNT = 4096
MEMORY_SHARE = 0.75
#: Problems shown from a scenario's topology file (a wrong file gives one per line).
MAX_REFERRED_PROBLEMS = 20


# -- topology -----------------------------------------------------------------

def load_topology(path: str | os.PathLike, *, features: KernelFeatures | None = None) -> Topology:
    """Load and validate a topology file. Raises SpecError listing every problem."""
    reader = Reader(str(path))
    root = reader.compose(Path(path))
    topo = _topology(reader, root, Path(path).stem, features or probe_features()) if root else None
    if reader.problems or topo is None:
        raise SpecError(_sorted(reader))
    return topo


def _sorted(r: Reader) -> list[Problem]:
    """This file's problems by line, then those of files it refers to."""
    return sorted(r.problems, key=lambda p: (p.file != r.file, p.file, p.line))


def _not_a_mapping(r: Reader, root: Node, taken_for: str) -> bool:
    """Record that the document is not a mapping, saying what it was taken for; True if so."""
    if isinstance(root, MappingNode):
        return False
    r.error(root, "", f"expected a mapping ({taken_for} document), got {r.describe(root)}")
    return True


def _topology(r: Reader, root: Node, stem: str, feats: KernelFeatures) -> Topology | None:
    if _not_a_mapping(r, root, "a topology or scenario"):
        return None
    kind_node = next((v for k, v in root.value if isinstance(k, ScalarNode) and k.value == "kind"), None)
    kind = r.choice(kind_node, "kind", KINDS)
    every_key = sorted({k for v in _KIND_KEYS.values() for k in v[0] + v[1]})
    required, optional = _KIND_KEYS.get(kind, ([], every_key))
    m = r.mapping(root, "", ["kind", "link_classes", *required], ["name", *optional])
    if m is None:
        return None
    if kind_node is None:
        why = f"read as a topology because it has no top-level {', '.join(SCENARIO_KEYS)} key"
        if any(isinstance(k, ScalarNode) and k.value == "topology" for k, _ in root.value):
            why += "; its 'topology' key is a scenario's, so is it a scenario missing them?"
        _explain_missing(r, why)
    name = r.text(m.get("name"), "name") or stem
    classes = _link_classes(r, m.get("link_classes"), feats, explicit=kind == "explicit")
    if kind == "explicit":
        return _explicit(r, name, m, classes, feats)
    ints = {key: r.integer(m[key], key, minimum=1 if key != "k" else None, maximum=MAX_COUNT)
            for key in required + optional if key in m}
    if kind is None or not set(required) <= ints.keys() or None in ints.values():
        return None
    if kind == "fat-tree" and (ints["k"] < 2 or ints["k"] % 2):
        r.error(m["k"], "k", f"fat-tree k must be even and >= 2, got {ints['k']}")
        return None
    if kind == "fat-tree":
        k = ints["k"]
        hosts, switches, nlinks = k**3 // 4, 5 * k * k // 4, 3 * k**3 // 4
    else:
        planes = ints.get("planes", 1)
        hosts = ints["leaves"] * ints["hosts_per_leaf"]
        switches = planes * (ints["leaves"] + ints["spines"])
        nlinks = planes * (hosts + ints["leaves"] * ints["spines"])
    if hosts * ints.get("planes", 1) > MAX_HOST_NICS:
        r.error(r.line_for("kind"), "", f"{hosts * ints.get('planes', 1)} host NICs exceed the uSID plan's "
                                        f"{MAX_HOST_NICS}")
        return None
    if not _fits_machine(r, r.line_for("kind"), hosts + switches, hosts, nlinks):
        return None
    placeholder = LinkParams(rate_bps=1)  # bad classes are reported; still check the shape
    links = {"host_link": (classes or {}).get("host", placeholder),
             "fabric_link": (classes or {}).get("fabric", placeholder), "name": name}
    topo = _build(r, lambda: fat_tree(ints["k"], **links) if kind == "fat-tree" else leaf_spine(**ints, **links))
    return None if r.problems else topo


def machine_memory_bytes() -> int:
    """MemTotal of this machine (/proc/meminfo), 0 if unknown. Not load: the same on every call."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _fits_machine(r: Reader, line: int, nodes: int, hosts: int, links: int) -> bool:
    """False (problem recorded) if the fabric's estimated memory (:func:`topology.footprint`)
    exceeds MEMORY_SHARE of this machine's; decided from counts, before anything is built."""
    need, have = footprint(nodes=nodes, hosts=hosts, links=links), machine_memory_bytes()
    if have and need > have * MEMORY_SHARE:
        r.error(line, "", f"too large for this machine: {nodes} namespaces ({hosts} hosts), {links} links, "
                          f"~{need / 2**30:.1f} GiB estimated (4 MiB per namespace, 1 MiB per link, 48 MiB "
                          f"per host agent) against {MEMORY_SHARE:.0%} of {have / 2**30:.1f} GiB")
        return False
    return True


def _build(r: Reader, build) -> Topology | None:
    try:
        return build()
    except TopologyError as exc:
        for key_path, message in exc.problems:
            line = r.lines.get(join(key_path, "endpoints")) or r.line_for(key_path, r.line_for("kind"))
            r.error(line, key_path, message)
        return None


def _link_params(r: Reader, m: dict[str, Node], path: str, base: LinkParams | None,
                 feats: KernelFeatures) -> LinkParams | None:
    fields = {}
    for key, field, parse in (("rate", "rate_bps", units.parse_rate), ("delay", "delay_s", units.parse_duration),
                              ("loss", "loss_pct", units.parse_percent)):
        if key in m:
            fields[field] = r.unit(m[key], join(path, key), parse)
    if "queue" in m:
        fields["queue_pkts"] = r.integer(m["queue"], join(path, "queue"), minimum=1, maximum=MAX_QUEUE_PKTS,
                                         why="a qdisc limit is a u32")
    if fields.get("delay_s") and fields["delay_s"] > MAX_DELAY_S:
        r.error(m["delay"], join(path, "delay"), f"{units.format_duration(fields['delay_s'])} is above netem's "
                                                 f"largest delay ({MAX_DELAY_S:.0f}s: u32 microseconds)")
        fields["delay_s"] = None
    if "mtu" in m:
        fields["mtu"] = r.integer(m["mtu"], join(path, "mtu"), minimum=1280, maximum=65535,
                                  why="the largest IPv6 MTU without jumbograms")
    for key, field in (("delay", "delay_s"), ("loss", "loss_pct")):
        if fields.get(field) and not feats.netem:
            r.error(m[key], join(path, key), feats.lacks(key, "sch_netem"))
            fields[field] = None
    if any(v is None for v in fields.values()):
        return None
    if base is None:
        return LinkParams(**fields) if "rate_bps" in fields else None
    return replace(base, **fields)


def _link_classes(r: Reader, node: Node | None, feats: KernelFeatures, *,
                  explicit: bool) -> dict[str, LinkParams] | None:
    entries = r.entries(node, "link_classes", "link class") if node is not None else None
    if entries is None:
        return None
    if feats.probed and not feats.has_qdisc("htb"):
        r.error(node, "link_classes", feats.lacks("link shaping", "sch_htb"))
    classes: dict[str, LinkParams | None] = {}
    for name, key_node, value in entries:
        path = join("link_classes", name)
        if name not in ("host", "fabric") and not explicit:
            r.error(key_node, path, "unknown link class (generated topologies use host and fabric)")
            continue
        r.name(key_node, path, "link class")
        m = r.mapping(value, path, ["rate"], _CLASS_KEYS[1:])
        classes[name] = _link_params(r, m, path, None, feats) if m is not None else None
    for name in ("host", "fabric"):
        if name not in classes:
            r.error(node, "link_classes", f"missing required link class {name!r}")
    if None in classes.values() or not {"host", "fabric"} <= classes.keys():
        return None
    return classes


def _explicit(r: Reader, name: str, m: dict[str, Node], classes: dict[str, LinkParams] | None,
              feats: KernelFeatures) -> Topology | None:
    """Nodes and links; graph checks (dangling, duplicate endpoints...) run even when
    link parameters are bad, so every problem is reported at once."""
    if "nodes" not in m or "links" not in m:
        return None
    nodes = _node_decls(r, m["nodes"])
    links = _link_decls(r, m["links"], nodes or {}, classes, feats)
    if nodes is None or links is None:
        return None
    hosts = sum(1 for n in nodes.values() if n.role is Role.HOST)
    if not _fits_machine(r, r.line_for("nodes"), len(nodes), hosts, len(links)):
        return None
    topo = _build(r, lambda: from_explicit(name, list(nodes.values()), links))
    return None if r.problems else topo


def _node_decls(r: Reader, node: Node) -> dict[str, NodeDecl] | None:
    entries = r.entries(node, "nodes", "node")
    if entries is None:
        return None
    decls, ok = {}, True
    roles = [role.value for role in Role]
    for name, key_node, value in entries:
        path = join("nodes", name)
        if r.name(key_node, path, "node name") is None:
            ok = False
        elif len(f"{name}-eth0") > IFNAME_MAX:
            r.error(key_node, path, f"node name {show(name)} is too long: interface {name}-eth0 would exceed "
                                    f"{IFNAME_MAX} characters (Linux IFNAMSIZ)")
            ok = False
        nm = r.mapping(value, path, ["role"], ["plane", "pod"])
        if nm is None:
            ok = False
            continue
        role = r.choice(nm.get("role"), join(path, "role"), roles)
        plane = r.integer(nm.get("plane"), join(path, "plane"), minimum=0, maximum=MAX_PLANE,
                          why="the plane is 16 bits of the address fd00:0:<plane>::")
        pod = r.integer(nm.get("pod"), join(path, "pod"), minimum=0, maximum=MAX_COUNT)
        if role == "host" and "plane" in nm:
            r.error(nm["plane"], join(path, "plane"), "hosts have no plane; a host gets one NIC per plane "
                                                      "from its links")
            ok = False
        if role is None or (plane is None and "plane" in nm) or (pod is None and "pod" in nm):
            ok = False
            continue
        decls[name] = NodeDecl(name, Role(role), plane, pod)
    return decls if ok else None


def _endpoint(r: Reader, node: Node, path: str) -> tuple[str, str | None] | None:
    text = r.text(node, path)
    if text is None:
        return None
    node_name, _, ifname = text.partition(":")
    if not node_name or (":" in text and not ifname):
        r.error(node, path, f"endpoint {show(text)} is not 'node' or 'node:interface'")
        return None
    why = ifname_problem(ifname) if ifname else None
    if why:
        r.error(node, path, why)
        return None
    return node_name, ifname or None


def _link_decls(r: Reader, node: Node, nodes: dict[str, NodeDecl], classes: dict[str, LinkParams] | None,
                feats: KernelFeatures) -> list[LinkDecl] | None:
    """Link declarations in file order (so ``links[i]`` problems keep their index);
    a link with bad parameters gets placeholder ones. None if any endpoint is unusable."""
    items = r.seq(node, "links")
    if items is None:
        return None
    decls: list[LinkDecl] | None = []
    for i, item in enumerate(items):
        path = join("links", i)
        m = r.mapping(item, path, ["endpoints"], ["class", *_CLASS_KEYS])
        ends = r.seq(m["endpoints"], join(path, "endpoints")) if m and "endpoints" in m else None
        if ends is not None and len(ends) != 2:
            r.error(m["endpoints"], join(path, "endpoints"), f"expected 2 endpoints, got {len(ends)}")
            ends = None
        ports = [_endpoint(r, e, join(join(path, "endpoints"), j)) for j, e in enumerate(ends or [])]
        if ends is None or None in ports:
            decls = None
            continue
        if "class" in m:
            cls = r.choice(m["class"], join(path, "class"), classes) if classes else None
        else:
            is_host = any(nodes.get(p[0]) and nodes[p[0]].role is Role.HOST for p in ports)
            cls = "host" if is_host else "fabric"
        base = classes.get(cls) if classes and cls else None
        params = _link_params(r, m, path, base, feats)
        if decls is not None:
            decls.append(LinkDecl(ports[0], ports[1], cls or "fabric", params or LinkParams(rate_bps=1)))
    return decls


# -- scenario -----------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """The collective to run: ``hosts`` resolved to names; sizes in bytes."""

    collective: str
    hosts: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    factor: int
    iterations: int
    warmup: int
    evs: int | None = None
    mtu: int | None = None

    @property
    def sizes_bytes(self) -> tuple[int, ...]:
        """nccl-tests sweep: min_bytes, min_bytes*factor, ... up to max_bytes."""
        sizes, size = [], self.min_bytes
        while size <= self.max_bytes:
            sizes.append(size)
            size *= self.factor
        return tuple(sizes)

    @property
    def measured_iterations(self) -> int:
        """Measured iterations over the whole sweep (``at_iteration`` counts these)."""
        return self.iterations * len(self.sizes_bytes)


@dataclass(frozen=True)
class TimelineEvent:
    """One fault: trigger (``at_s`` since workload start, or ``at_iteration``
    plus ``after_s``), ``action`` (one of ACTIONS), resolved ``link`` name and
    its ``selector`` text if it was chosen by one. Action parameters: flap
    ``period_s`` (one down+up cycle) and ``count``; loss ``loss_pct``; rate
    ``rate_bps``; loss/rate/blackhole optional ``duration_s`` (auto-revert).
    ``target``: a :class:`testbed.targets.FlowTarget` when the link is given by the
    flows crossing it; ``link`` is then None until the runner resolves it on the
    running fabric (:func:`testbed.targets.resolve`)."""

    action: str
    link: str | None
    at_s: float | None = None
    at_iteration: int | None = None
    after_s: float = 0.0
    selector: str | None = None
    period_s: float | None = None
    count: int | None = None
    loss_pct: float | None = None
    rate_bps: int | None = None
    duration_s: float | None = None
    target: "FlowTarget | None" = None


@dataclass(frozen=True)
class Scenario:
    """A resolved scenario file; see the module docstring for the schema."""

    name: str
    path: str
    description: str
    topology: Topology
    topology_path: str
    transports: tuple[str, ...]
    seed: int
    timeout_s: float
    reconverge_after_s: float | None
    workload: Workload
    timeline: tuple[TimelineEvent, ...] = ()
    trials: int = 1
    #: Suspicious but valid timeline items (overlapping faults, a link_up with no
    #: link_down, faults outlasting the timeout), as Problems; not in ``to_dict``.
    warnings: tuple[Problem, ...] = dataclass_field(default=(), compare=False)

    def to_dict(self) -> dict:
        """JSON-able resolved spec for manifest.json (topology summarized, not inlined)."""
        topo = self.topology
        return {
            "name": self.name, "path": self.path, "description": self.description,
            "topology": {"name": topo.name, "path": self.topology_path, "kind": topo.kind,
                         "params": dict(topo.params), "nodes": len(topo.nodes), "links": len(topo.links),
                         "hosts": len(topo.hosts)},
            "transports": list(self.transports), "seed": self.seed, "trials": self.trials,
            "timeout_s": self.timeout_s,
            "reconverge_after_s": self.reconverge_after_s,
            "workload": {**vars(self.workload), "hosts": list(self.workload.hosts),
                         "sizes_bytes": list(self.workload.sizes_bytes)},
            "timeline": [{**vars(e), "target": str(e.target) if e.target else None} for e in self.timeline],
        }


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


def _explain_missing(r: Reader, why: str) -> None:
    """Append ``(why)`` to the document's "missing required key" problems."""
    r.problems[:] = [replace(p, message=f"{p.message} ({why})")
                     if p.file == r.file and not p.key_path and p.message.startswith("missing required key")
                     else p for p in r.problems]


def timeline_warnings(r: Reader, timeline: tuple[TimelineEvent, ...], timeout_s: float) -> tuple[Problem, ...]:
    """Suspicious timelines: two faults on one link at once, a ``link_up`` with no
    ``link_down`` before it, a fault lasting past the timeout.

    ``at`` times and ``at_iteration`` + ``after`` times are not comparable: a pair of one
    of each is never called suspicious; overlaps are checked within ``at`` events and
    within one iteration. Flow targets (resolved on the fabric) are skipped.
    Cost: O(n^2) in events, n <= MAX_TIMELINE_EVENTS.
    """
    out: list[Problem] = []
    spans = []  # (index, base, link, start, end)
    for i, e in enumerate(timeline):
        if e.link is None:
            continue
        base, start = _when(e)
        if e.action == "link_up":
            downs = [_when(d) for d in timeline if d.action == "link_down" and d.link == e.link]
            if all(b[0] == base[0] and (b, t) > (base, start) for b, t in downs):
                out.append(_warning(r, i, f"link_up {e.link} with no link_down of that link before it"))
            continue
        end = _fault_end(e, start, base, timeline)
        for j, other_base, link, o_start, o_end in spans:
            if link == e.link and other_base == base and None not in (end, o_end) and start < o_end \
                    and o_start < end:
                out.append(_warning(r, i, f"{e.action} on {e.link} overlaps timeline[{j}] "
                                          f"({timeline[j].action} on the same link)"))
        if base == ("at",) and end is not None and end != float("inf") and end > timeout_s:
            out.append(_warning(r, i, f"{e.action} on {e.link} lasts until {units.format_duration(end)}, "
                                      f"past the timeout ({units.format_duration(timeout_s)})"))
        spans.append((i, base, e.link, start, end))
    return tuple(out)


def _when(e: TimelineEvent) -> tuple[tuple, float]:
    """(time base, start in seconds within it) of an event: ``("at",)`` or ``("iteration", n)``."""
    if e.at_s is not None:
        return ("at",), e.at_s
    return ("iteration", e.at_iteration), e.after_s


def _fault_end(e: TimelineEvent, start: float, base: tuple, timeline: tuple[TimelineEvent, ...]) -> float | None:
    """When a fault ends: a flap after its cycles, a link_down at the next link_up of the
    link in the same time base (None, unknown, if the only link_up is in another), other
    faults after their duration; inf if never."""
    if e.action == "flap":
        return start + (e.count or 0) * (e.period_s or 0.0)
    if e.action == "link_down":
        ups = [_when(u) for u in timeline if u.action == "link_up" and u.link == e.link]
        same = [t for b, t in ups if b == base and t >= start]
        if same:
            return min(same)
        return None if any(b[0] != base[0] for b, _ in ups) else float("inf")
    return start + e.duration_s if e.duration_s else float("inf")


def _warning(r: Reader, i: int, message: str) -> Problem:
    path = join("timeline", i)
    return Problem(r.file, r.line_for(path), path, f"warning: {message}")


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


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {show(close[0])}?)" if close else ""


def _timeline(r: Reader, node: Node | None, topo: Topology | None, seed: int | None, timeout_s: float | None,
              workload: Workload | None, feats: KernelFeatures) -> tuple[TimelineEvent, ...] | None:
    if node is None:
        return ()
    items = r.seq(node, "timeline")
    if items is None:
        return None
    if len(items) > MAX_TIMELINE_EVENTS:
        r.error(node, "timeline", f"{len(items)} events; at most {MAX_TIMELINE_EVENTS} are accepted")
        return None
    rng = random.Random(seed)
    names = _link_names(topo) if topo is not None else {}
    events = [_event(r, item, join("timeline", i), topo, rng, timeout_s, workload, feats, names)
              for i, item in enumerate(items)]
    return tuple(events) if None not in events else None


def _link_names(topo: Topology) -> dict[str, str]:
    """Both spellings of every link name (``a-b`` and ``b-a``) -> the link's name."""
    names = {f"{l.b.node}-{l.a.node}": l.name for l in topo.links}
    names.update({l.name: l.name for l in topo.links})
    return names


def _event(r: Reader, node: Node, path: str, topo: Topology | None, rng: random.Random,
           timeout_s: float | None, workload: Workload | None, feats: KernelFeatures,
           names: dict[str, str]) -> TimelineEvent | None:
    m = r.mapping(node, path, [], ["at", "at_iteration", "after", *ACTIONS])
    if m is None:
        return None
    fields: dict = {}
    ok = _trigger(r, node, m, path, fields, timeout_s, workload)
    actions = [a for a in ACTIONS if a in m]
    if len(actions) != 1:
        r.error(node, path, f"needs exactly one action ({', '.join(ACTIONS)}), got "
                            f"{', '.join(actions) if actions else 'none'}")
        return None
    action = fields["action"] = actions[0]
    apath = join(path, action)
    if action in ("link_down", "link_up"):
        ref_node, ref_path = m[action], apath
    else:
        am = r.mapping(m[action], apath, *_ACTION_KEYS[action])
        if am is None or "link" not in am:
            return None
        ref_node, ref_path = am["link"], join(apath, "link")
        ok = _action_params(r, am, apath, action, fields) and ok
        if action == "loss" and not (feats.nftables or feats.netem):
            r.error(m[action], apath, feats.lacks("loss", "nftables (numgen) or sch_netem"))
            ok = False
    link = _link_ref(r, ref_node, ref_path, topo, rng, fields, workload, names)
    return TimelineEvent(link=link or None, **fields) if ok and link is not None else None


def _trigger(r: Reader, node: Node, m: dict[str, Node], path: str, fields: dict,
             timeout_s: float | None, workload: Workload | None) -> bool:
    if ("at" in m) == ("at_iteration" in m):
        r.error(node, path, "needs exactly one trigger: 'at' or 'at_iteration'")
        return False
    if "after" in m and "at" in m:
        r.error(m["after"], join(path, "after"), "'after' goes with 'at_iteration', not 'at'")
        return False
    if "at" in m:
        fields["at_s"] = at_s = r.unit(m["at"], join(path, "at"), units.parse_duration)
        if at_s is not None and timeout_s is not None and at_s >= timeout_s:
            r.error(m["at"], join(path, "at"), f"{units.format_duration(at_s)} is not before the timeout "
                                               f"({units.format_duration(timeout_s)})")
            return False
        return at_s is not None
    fields["at_iteration"] = it = r.integer(m["at_iteration"], join(path, "at_iteration"), minimum=0)
    if it is not None and workload is not None and it >= workload.measured_iterations:
        r.error(m["at_iteration"], join(path, "at_iteration"),
                f"iteration {it} never happens: the workload measures {workload.measured_iterations} "
                f"iterations (0..{workload.measured_iterations - 1})")
        return False
    if "after" in m:
        fields["after_s"] = r.unit(m["after"], join(path, "after"), units.parse_duration)
    return it is not None and fields.get("after_s", 0.0) is not None


def _action_params(r: Reader, am: dict[str, Node], path: str, action: str, fields: dict) -> bool:
    spec = {"period": ("period_s", units.parse_duration), "percent": ("loss_pct", units.parse_percent),
            "rate": ("rate_bps", units.parse_rate), "duration": ("duration_s", units.parse_duration)}
    ok = True
    for key, (field, parse) in spec.items():
        if key in am:
            fields[field] = value = r.unit(am[key], join(path, key), parse)
            if value == 0:
                r.error(am[key], join(path, key), "must be > 0")
            ok = ok and bool(value)
    if "count" in am:
        fields["count"] = r.integer(am["count"], join(path, "count"), minimum=1, maximum=MAX_FLAP_COUNT)
        ok = ok and fields["count"] is not None
    if fields.get("period_s") and fields["period_s"] < MIN_FLAP_PERIOD_S:
        r.error(am["period"], join(path, "period"), f"{units.format_duration(fields['period_s'])} is shorter "
                                                    f"than the shortest flap period "
                                                    f"({units.format_duration(MIN_FLAP_PERIOD_S)})")
        ok = False
    return ok


def _link_ref(r: Reader, node: Node, path: str, topo: Topology | None, rng: random.Random,
              fields: dict, workload: Workload | None = None, names: dict[str, str] | None = None) -> str | None:
    """A link name, a ``random <role>-<role>`` selector, or a flow target mapping
    (:mod:`testbed.targets`: sets ``fields["target"]`` and returns "" for "resolved later")."""
    if isinstance(node, MappingNode):
        target = _flow_target(r, node, path, topo, workload)
        if target is None:
            return None
        fields["target"] = target
        return ""
    ref = r.text(node, path)
    if ref is None or topo is None:
        return None
    words = ref.split()
    if words and words[0] == "random":
        fields["selector"] = ref
        roles = words[1].split("-") if len(words) == 2 else []
        valid = [role.value for role in Role]
        if len(roles) != 2 or not set(roles) <= set(valid):
            r.error(node, path, f"selector {show(ref)} is not 'random <role>-<role>' (roles: {', '.join(valid)})")
            return None
        candidates = [l for l in topo.links if sorted(roles) == sorted(
            (topo.nodes[l.a.node].role.value, topo.nodes[l.b.node].role.value))]
        if not candidates:
            r.error(node, path, f"no {words[1]} link in topology {show(topo.name)}")
            return None
        return rng.choice(candidates).name
    names = names if names is not None else _link_names(topo)
    if ref not in names:
        near = _did_you_mean(ref, list(names)) if len(ref) <= 64 and len(names) <= 5000 else ""
        r.error(node, path, f"unknown link {show(ref)} in topology {show(topo.name)}{near}")
        return None
    return names[ref]


def _flow_target(r: Reader, node: Node, path: str, topo: Topology | None,
                 workload: Workload | None) -> FlowTarget | None:
    m = r.mapping(node, path, ["crossed_by"], ["hop", "repairable"])
    if m is None or "crossed_by" not in m or topo is None or workload is None:
        return None
    hop = r.text(m["hop"], join(path, "hop")) if "hop" in m else UNREPAIRED
    if hop is not None and hop not in HOPS:
        r.error(m["hop"], join(path, "hop"), f"unknown hop {show(hop)} (one of: {', '.join(HOPS)})")
        return None
    cb = m["crossed_by"]
    items = r.seq(cb, join(path, "crossed_by")) if not isinstance(cb, ScalarNode) else [cb]
    if not items or hop is None:
        if items == []:
            r.error(cb, join(path, "crossed_by"), "needs at least one flow selector")
        return None
    hosts = list(workload.hosts)
    selectors = []
    for i, item in enumerate(items):
        where = join(path, "crossed_by") if isinstance(cb, ScalarNode) else join(join(path, "crossed_by"), i)
        text = r.text(item, where)
        if text is None:
            return None
        try:
            sel = parse_selector(text, len(hosts))
        except ValueError as exc:
            r.error(item, where, str(exc))
            return None
        if sel.src_rank is not None:
            why = check_hop(topo, hosts[sel.src_rank], hosts[sel.dst_rank], hop)
            if why:
                r.error(item, where, why)
                return None
        selectors.append(sel)
    repairable = r.boolean(m["repairable"], join(path, "repairable")) if "repairable" in m else False
    if repairable is None:
        return None
    return FlowTarget(tuple(selectors), hop, repairable)


# -- either -------------------------------------------------------------------

def is_scenario(path: str | os.PathLike) -> bool:
    """True if the file's top-level mapping has a scenario key (transports, timeline, workload)."""
    root = Reader(str(path)).compose(Path(path))
    return isinstance(root, MappingNode) and any(k.value in SCENARIO_KEYS for k, _ in root.value)


def load_file(path: str | os.PathLike, *, features: KernelFeatures | None = None) -> Topology | Scenario:
    """Load a topology or a scenario, told apart by content (:func:`is_scenario`). Raises SpecError."""
    loader = load_scenario if is_scenario(path) else load_topology
    return loader(path, features=features)
