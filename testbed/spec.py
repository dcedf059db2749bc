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
"""

from __future__ import annotations

import difflib
import os
import random
from dataclasses import dataclass, replace
from pathlib import Path

from yaml.nodes import MappingNode, Node, ScalarNode

from . import units
from agents.protocol import TRANSPORTS

from .kernel import KernelFeatures, features as probe_features
from .targets import HOPS, UNREPAIRED, FlowTarget, check_hop, parse_selector
from .topology import (IFNAME_MAX, LinkDecl, LinkParams, NodeDecl, Role, Topology, TopologyError,
                       fat_tree, from_explicit, leaf_spine)
from .yamlread import Problem, Reader, SpecError, join

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


def _topology(r: Reader, root: Node, stem: str, feats: KernelFeatures) -> Topology | None:
    kind_node = next((v for k, v in root.value if k.value == "kind"), None) \
        if isinstance(root, MappingNode) else None
    kind = r.choice(kind_node, "kind", KINDS)
    every_key = sorted({k for v in _KIND_KEYS.values() for k in v[0] + v[1]})
    required, optional = _KIND_KEYS.get(kind, ([], every_key))
    m = r.mapping(root, "", ["kind", "link_classes", *required], ["name", *optional])
    if m is None:
        return None
    name = r.text(m.get("name"), "name") or stem
    classes = _link_classes(r, m.get("link_classes"), feats, explicit=kind == "explicit")
    if kind == "explicit":
        return _explicit(r, name, m, classes, feats)
    ints = {key: r.integer(m[key], key, minimum=1 if key != "k" else None) for key in required + optional
            if key in m}
    if kind is None or len(ints) < len(required) or None in ints.values():
        return None
    nics = ints["k"] ** 3 // 4 if kind == "fat-tree" else (
        ints["leaves"] * ints["hosts_per_leaf"] * ints.get("planes", 1))
    if nics > MAX_HOST_NICS:
        r.error(r.line_for("kind"), "", f"{nics} host NICs exceed the uSID plan's {MAX_HOST_NICS}")
        return None
    placeholder = LinkParams(rate_bps=1)  # bad classes are reported; still check the shape
    links = {"host_link": (classes or {}).get("host", placeholder),
             "fabric_link": (classes or {}).get("fabric", placeholder), "name": name}
    topo = _build(r, lambda: fat_tree(ints["k"], **links) if kind == "fat-tree" else leaf_spine(**ints, **links))
    return None if r.problems else topo


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
        fields["queue_pkts"] = r.integer(m["queue"], join(path, "queue"), minimum=1)
    if "mtu" in m:
        fields["mtu"] = r.integer(m["mtu"], join(path, "mtu"), minimum=1280)
        if fields["mtu"] is not None and fields["mtu"] > 65535:
            r.error(m["mtu"], join(path, "mtu"), f"{fields['mtu']} is above the largest MTU (65535)")
            fields["mtu"] = None
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
            r.error(key_node, path, f"node name {name!r} is too long: interface {name}-eth0 would exceed "
                                    f"{IFNAME_MAX} characters (Linux IFNAMSIZ)")
            ok = False
        nm = r.mapping(value, path, ["role"], ["plane", "pod"])
        if nm is None:
            ok = False
            continue
        role = r.choice(nm.get("role"), join(path, "role"), roles)
        plane = r.integer(nm.get("plane"), join(path, "plane"), minimum=0)
        pod = r.integer(nm.get("pod"), join(path, "pod"), minimum=0)
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
        r.error(node, path, f"endpoint {text!r} is not 'node' or 'node:interface'")
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
    candidates = [Path(ref)] if Path(ref).is_absolute() else [scenario_path.parent / ref, Path(ref)]
    return next((c for c in candidates if c.is_file()), None)


def _scenario(r: Reader, root: Node, path: Path, feats: KernelFeatures,
              seed_override: int | None = None) -> Scenario | None:
    m = r.mapping(root, "", ["topology", "transports", "seed", "timeout", "workload"],
                  ["name", "description", "reconverge_after", "timeline", "trials"])
    if m is None:
        return None
    name = r.text(m.get("name"), "name") or path.stem
    description = r.text(m.get("description"), "description") or ""
    topo, topo_path = None, None
    ref = r.text(m.get("topology"), "topology")
    if ref is not None:
        found = _find_topology(ref, path)
        if found is None:
            r.error(m["topology"], "topology", f"topology file {ref!r} not found (looked in "
                                               f"{path.parent or '.'} and the current directory)")
        else:
            topo_path = os.path.relpath(found) if not os.path.relpath(found).startswith("..") else str(found)
            try:
                topo = load_topology(topo_path, features=feats)
            except SpecError as exc:
                r.problems.extend(exc.problems)
    transports = _transports(r, m.get("transports"))
    seed = r.integer(m.get("seed"), "seed", minimum=0)
    if seed_override is not None and seed is not None:
        seed = seed_override
    trials = r.integer(m["trials"], "trials", minimum=1) if "trials" in m else 1
    timeout_s = r.unit(m.get("timeout"), "timeout", units.parse_duration)
    if timeout_s == 0:
        r.error(m["timeout"], "timeout", "must be > 0")
    reconverge = r.unit(m.get("reconverge_after"), "reconverge_after", units.parse_duration)
    workload = _workload(r, m.get("workload"), topo)
    timeline = _timeline(r, m.get("timeline"), topo, seed, timeout_s, workload, feats)
    if r.problems or None in (topo, transports, seed, timeout_s, workload, timeline, trials):
        return None
    return Scenario(name, str(path), description, topo, topo_path, transports, seed, timeout_s,
                    reconverge, workload, timeline, trials)


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
    if sizes[0] == 0:
        r.error(m["min_bytes"], "workload.min_bytes", "must be >= 1 byte")
    elif None not in sizes and sizes[1] < sizes[0]:
        r.error(m["max_bytes"], "workload.max_bytes",
                f"{units.format_size(sizes[1])} is below min_bytes ({units.format_size(sizes[0])})")
    counts = [r.integer(m[k], f"workload.{k}", minimum=low) for k, low in
              (("factor", 2), ("iterations", 1), ("warmup", 0))]
    evs = r.integer(m.get("evs"), "workload.evs", minimum=1)
    mtu = r.integer(m.get("mtu"), "workload.mtu", minimum=1280)
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
            r.error(items[i], path, f"unknown host {host!r}{_did_you_mean(host, known)}")
        elif host is not None and host in names[:i]:
            r.error(items[i], path, f"duplicate host {host!r}")
    if len(items) < 2:
        r.error(node, "workload.hosts", f"an all-reduce needs >= 2 hosts, got {len(items)}")
    return tuple(names)


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _timeline(r: Reader, node: Node | None, topo: Topology | None, seed: int | None, timeout_s: float | None,
              workload: Workload | None, feats: KernelFeatures) -> tuple[TimelineEvent, ...] | None:
    if node is None:
        return ()
    items = r.seq(node, "timeline")
    if items is None:
        return None
    rng = random.Random(seed)
    events = [_event(r, item, join("timeline", i), topo, rng, timeout_s, workload, feats)
              for i, item in enumerate(items)]
    return tuple(events) if None not in events else None


def _event(r: Reader, node: Node, path: str, topo: Topology | None, rng: random.Random,
           timeout_s: float | None, workload: Workload | None, feats: KernelFeatures) -> TimelineEvent | None:
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
    link = _link_ref(r, ref_node, ref_path, topo, rng, fields, workload)
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
        fields["count"] = r.integer(am["count"], join(path, "count"), minimum=1)
        ok = ok and fields["count"] is not None
    return ok


def _link_ref(r: Reader, node: Node, path: str, topo: Topology | None, rng: random.Random,
              fields: dict, workload: Workload | None = None) -> str | None:
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
            r.error(node, path, f"selector {ref!r} is not 'random <role>-<role>' (roles: {', '.join(valid)})")
            return None
        candidates = [l for l in topo.links if sorted(roles) == sorted(
            (topo.nodes[l.a.node].role.value, topo.nodes[l.b.node].role.value))]
        if not candidates:
            r.error(node, path, f"no {words[1]} link in topology {topo.name!r}")
            return None
        return rng.choice(candidates).name
    names = {f"{l.b.node}-{l.a.node}": l.name for l in topo.links}
    names.update({l.name: l.name for l in topo.links})
    if ref not in names:
        r.error(node, path, f"unknown link {ref!r} in topology {topo.name!r}"
                            f"{_did_you_mean(ref, list(names))}")
        return None
    return names[ref]


def _flow_target(r: Reader, node: Node, path: str, topo: Topology | None,
                 workload: Workload | None) -> FlowTarget | None:
    m = r.mapping(node, path, ["crossed_by"], ["hop", "repairable"])
    if m is None or "crossed_by" not in m or topo is None or workload is None:
        return None
    hop = r.text(m["hop"], join(path, "hop")) if "hop" in m else UNREPAIRED
    if hop is not None and hop not in HOPS:
        r.error(m["hop"], join(path, "hop"), f"unknown hop {hop!r} (one of: {', '.join(HOPS)})")
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
