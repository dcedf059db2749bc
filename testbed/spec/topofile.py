"""Topology files -> :class:`testbed.model.topology.Topology` (see :mod:`testbed.spec`)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from yaml.nodes import Node, ScalarNode

from testbed.model import units

from testbed.model.kernel import KernelFeatures
from testbed.model.addressing import IFNAME_MAX, MAX_PLANE, ifname_problem
from testbed.model.generators import LinkDecl, NodeDecl, fat_tree, from_explicit, leaf_spine
from testbed.model.topology import LinkParams, Role, Topology, TopologyError, footprint
from testbed.model.units import show
from testbed.spec.yamlread import Reader, SpecError, join
from testbed.spec.schema import TOPOLOGY
from testbed.spec.common import TRIM_HEADER_QUEUE_PKTS, KINDS, _KIND_KEYS, MAX_HOST_NICS, SCENARIO_KEYS, MAX_QUEUE_PKTS, MAX_DELAY_S, MAX_COUNT, MEMORY_SHARE, _sorted, _not_a_mapping, _explain_missing


# -- topology -----------------------------------------------------------------

def load_topology(path: str | os.PathLike, *, features: KernelFeatures) -> Topology:
    """Load and validate a topology file against ``features`` (the kernel's, from
    :func:`testbed.fabric.kernel.features`). Raises SpecError listing every problem."""
    reader = Reader(str(path))
    root = reader.compose(Path(path))
    topo = _topology(reader, root, Path(path).stem, features) if root else None
    if reader.problems or topo is None:
        raise SpecError(_sorted(reader))
    return topo



def _topology(r: Reader, root: Node, stem: str, feats: KernelFeatures) -> Topology | None:
    if _not_a_mapping(r, root, "a topology or scenario"):
        return None
    kind_node = next((v for k, v in root.value if isinstance(k, ScalarNode) and k.value == "kind"), None)
    kind = r.choice(kind_node, "kind", KINDS)
    every_key = sorted({k for v in _KIND_KEYS.values() for k in v[0] + v[1]})
    required, optional = TOPOLOGY.get(f"<kind {kind}>", ([], every_key))
    base_required, base_optional = TOPOLOGY[""]
    m = r.mapping(root, "", [*base_required, *required], [*base_optional, *optional])
    if m is None:
        return None
    if kind_node is None:
        why = f"read as a topology because it has no top-level {', '.join(SCENARIO_KEYS)} key"
        if any(isinstance(k, ScalarNode) and k.value == "topology" for k, _ in root.value):
            why += "; its 'topology' key is a scenario's, so is it a scenario missing them?"
        _explain_missing(r, why)
    for message in feats.refusals():   # what no fabric can do without (the switches' ECMP hash)
        r.error(r.line_for("kind"), "", message)
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


#: What a link class's ``loss`` is for without sch_netem: the scenario timeline's ``loss`` action.
_TIMELINE_LOSS = ("; a scenario's timeline 'loss' action drops packets without netem (with nftables): "
                  "e.g. '- {at: 0s, loss: {link: all, percent: 1%}}' (every link; 'link: all host-edge' for one "
                  "role pair's links)")


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
        r.error(m["delay"], join(path, "delay"), f"{units.format_duration(fields['delay_s'])} is above a link's "
                                                 f"largest delay ({units.format_duration(MAX_DELAY_S)}: the agents' endpoints "
                                                 f"hold a path's sum of them)")
        fields["delay_s"] = None
    if "mtu" in m:
        fields["mtu"] = r.integer(m["mtu"], join(path, "mtu"), minimum=1280, maximum=65535,
                                  why="the largest IPv6 MTU without jumbograms")
    if "control_priority" in m:
        fields["control_priority"] = r.boolean(m["control_priority"], join(path, "control_priority"))
    if fields.get("loss_pct") and not feats.netem:
        r.error(m["loss"], join(path, "loss"), feats.lacks("loss", "sch_netem") + _TIMELINE_LOSS)
        fields["loss_pct"] = None
    _switch_features(r, m, path, fields, base, feats)
    if any(v is None for v in fields.values()):
        return None
    if base is None:
        return LinkParams(**fields) if "rate_bps" in fields else None
    return replace(base, **fields)


def _switch_features(r: Reader, m: dict[str, Node], path: str, fields: dict, base: LinkParams | None,
                     feats: KernelFeatures) -> None:
    """``ecn: {threshold}`` and ``trim: {threshold, header_queue?}`` (packets) into ``fields``;
    thresholds must lie within the link's queue (drop-tail would act first), and the kernel
    must run the switch program (:mod:`testbed.fabric.switch`, kernel feature ``bpf_egress``)."""
    queue = fields.get("queue_pkts") or (base.queue_pkts if base else LinkParams.queue_pkts)
    pattern = "links[]" if path.startswith("links[") else "link_classes.<class>"
    for key in ("ecn", "trim"):
        if key not in m:
            continue
        where = join(path, key)
        sm = r.mapping(m[key], where, *TOPOLOGY[f"{pattern}.{key}"])
        if sm is None or "threshold" not in sm:
            fields[f"{key}_threshold_pkts"] = None
            continue
        threshold = r.integer(sm["threshold"], join(where, "threshold"), minimum=1, maximum=MAX_QUEUE_PKTS)
        if threshold is not None and queue and threshold >= queue:
            r.error(sm["threshold"], join(where, "threshold"), f"{threshold} packets is not below the link's "
                                                               f"queue ({queue} packets): drop-tail would act first")
            threshold = None
        fields[f"{key}_threshold_pkts"] = threshold
        if key == "trim":
            fields["trim_header_queue_pkts"] = (r.integer(sm["header_queue"], join(where, "header_queue"), minimum=1,
                                                          maximum=MAX_QUEUE_PKTS)
                                                if "header_queue" in sm else TRIM_HEADER_QUEUE_PKTS)
        if not getattr(feats, "bpf_egress", False):
            r.error(m[key], where, feats.lacks_switch_program(f"{key} marking" if key == "ecn" else "trimming"))
            fields[f"{key}_threshold_pkts"] = None


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
        m = r.mapping(value, path, *TOPOLOGY["link_classes.<class>"])
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
        nm = r.mapping(value, path, *TOPOLOGY["nodes.<node>"])
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
        m = r.mapping(item, path, *TOPOLOGY["links[]"])
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


