"""Topology generators: three-tier fat-tree, (multi-plane) leaf-spine and the explicit form
(declared nodes and links), all through one builder that allocates uSIDs by role
(:data:`testbed.model.addressing.USID_BASE`) and numbers interface names.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from testbed.model.addressing import USID_BASE, USID_SPAN
from testbed.model.topology import Link, LinkParams, Node, Port, Role, Topology, TopologyError

class _Builder:
    """Accumulates nodes and links, allocating uSIDs and interface names."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.links: list[Link] = []
        self._role_count: dict[str, int] = defaultdict(int)
        self._port_count: dict[str, int] = defaultdict(int)

    def node(self, name: str, role: Role, *, plane: int | None = None, pod: int | None = None) -> str:
        usid = None
        if role.is_switch:
            n = self._role_count[role.value]
            if n >= USID_SPAN[role.value]:
                raise TopologyError([(f"nodes.{name}", f"more than {USID_SPAN[role.value]} {role.value} switches")])
            usid = USID_BASE[role.value] + n
            self._role_count[role.value] += 1
            plane = plane or 0
        self.nodes[name] = Node(name, role, plane, pod, usid)
        return name

    def ifname(self, node: str) -> str:
        n = self._port_count[node]
        self._port_count[node] += 1
        return f"{node}-eth{n}"

    def link(self, a: str, b: str, cls: str, params: LinkParams, *,
             a_if: str | None = None, b_if: str | None = None) -> None:
        a_port = Port(a, a_if or self.ifname(a))
        b_port = Port(b, b_if or self.ifname(b))
        self.links.append(Link(f"{a}-{b}", a_port, b_port, cls, params, len(self.links)))

    def build(self, name: str, kind: str, params: Mapping[str, int]) -> Topology:
        counts = Counter(l.name for l in self.links)
        dup = {n for n, c in counts.items() if c > 1}
        links = tuple(l if l.name not in dup else
                      Link(f"{l.name}.{l.index}", l.a, l.b, l.cls, l.params, l.index) for l in self.links)
        return Topology(name, dict(self.nodes), links, kind, dict(params))


def fat_tree(k: int, *, host_link: LinkParams, fabric_link: LinkParams, name: str | None = None) -> Topology:
    """Three-tier k-ary fat-tree (Al-Fares et al., SIGCOMM 2008).

    k pods, each with k/2 edge and k/2 aggregation switches; (k/2)^2 cores;
    k/2 hosts per edge: k^3/4 hosts, 5k^2/4 switches, 3k^3/4 links.
    Names: hosts ``h<pod>_<edge>_<i>``, edges ``e<pod>_<i>``, aggregations
    ``a<pod>_<i>``, cores ``c<i>_<j>`` (core group i attaches to aggregation i
    of every pod). Raises TopologyError for odd k or k < 2.
    """
    if k < 2 or k % 2:
        raise TopologyError([("k", f"fat-tree k must be even and >= 2, got {k}")])
    half = k // 2
    b = _Builder()
    for pod in range(k):
        for e in range(half):
            edge = b.node(f"e{pod}_{e}", Role.EDGE, pod=pod)
            for h in range(half):
                host = b.node(f"h{pod}_{e}_{h}", Role.HOST, pod=pod)
                b.link(host, edge, "host", host_link)
    for pod in range(k):
        for a in range(half):
            agg = b.node(f"a{pod}_{a}", Role.AGGREGATION, pod=pod)
            for e in range(half):
                b.link(f"e{pod}_{e}", agg, "fabric", fabric_link)
    for i in range(half):
        for j in range(half):
            core = b.node(f"c{i}_{j}", Role.CORE)
            for pod in range(k):
                b.link(f"a{pod}_{i}", core, "fabric", fabric_link)
    return b.build(name or f"fat-tree-k{k}", "fat-tree", {"k": k})


def leaf_spine(*, leaves: int, spines: int, hosts_per_leaf: int, planes: int = 1,
               host_link: LinkParams, fabric_link: LinkParams, name: str | None = None) -> Topology:
    """Two-tier leaf-spine, optionally multi-plane.

    Each plane ``p`` is its own leaf-spine (leaves ``l<p>_<i>``, spines
    ``s<p>_<j>``, every leaf to every spine); host ``h<n>`` has one NIC per
    plane, attached to leaf ``n // hosts_per_leaf`` of that plane (docs/mrc-spec.md,
    "Multi-plane"). Raises TopologyError for counts below 1.
    """
    problems = [(key, f"must be >= 1, got {val}") for key, val in
                (("leaves", leaves), ("spines", spines), ("hosts_per_leaf", hosts_per_leaf),
                 ("planes", planes)) if val < 1]
    if problems:
        raise TopologyError(problems)
    b = _Builder()
    hosts = [b.node(f"h{n}", Role.HOST) for n in range(leaves * hosts_per_leaf)]
    for p in range(planes):
        for i in range(leaves):
            b.node(f"l{p}_{i}", Role.LEAF, plane=p)
        for j in range(spines):
            b.node(f"s{p}_{j}", Role.SPINE, plane=p)
    for p in range(planes):
        for n, host in enumerate(hosts):
            b.link(host, f"l{p}_{n // hosts_per_leaf}", "host", host_link)
    for p in range(planes):
        for i in range(leaves):
            for j in range(spines):
                b.link(f"l{p}_{i}", f"s{p}_{j}", "fabric", fabric_link)
    kind = "leaf-spine"
    return b.build(name or f"leaf-spine-{planes}plane", kind,
                   {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf, "planes": planes})


@dataclass(frozen=True)
class NodeDecl:
    """Explicit-form node: name, role, optional plane and pod."""

    name: str
    role: Role
    plane: int | None = None
    pod: int | None = None


@dataclass(frozen=True)
class LinkDecl:
    """Explicit-form link: endpoints as (node, ifname or None), class, params."""

    a: tuple[str, str | None]
    b: tuple[str, str | None]
    cls: str
    params: LinkParams


def from_explicit(name: str, nodes: Sequence[NodeDecl], links: Sequence[LinkDecl]) -> Topology:
    """Topology from declared nodes and links (containerlab-like explicit form).

    Interface names not given are numbered ``<node>-eth<n>`` in link order
    after the given ones. Raises TopologyError naming ``nodes.X``/``links[i]``.
    """
    b = _Builder()
    problems: list[tuple[str, str]] = []
    for decl in nodes:
        b.node(decl.name, decl.role, plane=decl.plane, pod=decl.pod)
    taken: dict[str, set[str]] = defaultdict(set)
    for decl in links:
        for node, ifname in (decl.a, decl.b):
            if ifname:
                taken[node].add(ifname)
    for i, decl in enumerate(links):
        ifs = []
        for node, ifname in (decl.a, decl.b):
            if node not in b.nodes:
                problems.append((f"links[{i}]", f"endpoint {node!r} is not a declared node"))
            if not ifname:
                ifname = b.ifname(node)
                while ifname in taken[node]:
                    ifname = b.ifname(node)
            ifs.append(ifname)
        b.link(decl.a[0], decl.b[0], decl.cls, decl.params, a_if=ifs[0], b_if=ifs[1])
    if problems:
        raise TopologyError(problems)
    return b.build(name, "explicit", {})
