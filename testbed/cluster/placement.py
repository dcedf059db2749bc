"""Which server builds which node (pure).

A placer maps every node of a :class:`~testbed.model.topology.Topology` to a server name.
Links whose two ends land on different servers are *cut*: each becomes a VXLAN tunnel
(:mod:`testbed.cluster.vxlan`), which costs CPU per packet on both servers and carries the
underlay's latency, so placers keep the cut small and the hosts (the agents' CPU) even.

``pods`` (default): the top tier (cores; spines) is taken away, and what stays connected
(a fat-tree pod: its hosts, edges and aggregations; a leaf-spine leaf group: the leaves
of one index in every plane and their hosts) goes whole to one server, largest group first
onto the server with the fewest hosts so far (greedy LPT). Top-tier switches then go one
by one to the server holding most of their neighbours, ties to the one with fewest nodes.
On fat-tree-k4 over 2 servers this puts 2 pods and 2 cores on each: only aggregation-core
links are cut, 8 of the 48 links. As in MaxiNet's and Mininet Cluster Edition's placers
(METIS partitions; SwitchBinPlacer bins) the aim is a small cut at even load; grouping by
pod is what a fat-tree's structure gives for free.

``round-robin``: node ``i`` (topology order) on server ``i mod n``; a worst case for the
cut, useful to test tunnels.

Placers are registered in :data:`PLACERS`; a placer is ``(topo, server_names) -> {node:
server}``.
"""

from __future__ import annotations

from typing import Callable, Sequence

from testbed.model.topology import Role, Topology
from testbed.model.cluster import Placement, PlacementError

TOP_TIER = (Role.CORE, Role.SPINE)






def _groups(topo: Topology) -> tuple[list[list[str]], list[str]]:
    """Connected groups of the topology without its top tier, and the top-tier nodes."""
    top = [n.name for n in topo.nodes.values() if n.role in TOP_TIER]
    if not top:   # no core/spine: the highest switch tier present is the top
        for role in (Role.AGGREGATION, Role.LEAF, Role.EDGE):
            top = [n.name for n in topo.nodes.values() if n.role is role]
            if top:
                break
    top_set = set(top)
    adj: dict[str, list[str]] = {n: [] for n in topo.nodes if n not in top_set}
    for link in topo.links:
        a, b = link.a.node, link.b.node
        if a in adj and b in adj:
            adj[a].append(b)
            adj[b].append(a)
    seen: set[str] = set()
    groups = []
    for start in adj:                    # topology order: deterministic
        if start in seen:
            continue
        group, stack = [], [start]
        seen.add(start)
        while stack:
            n = stack.pop()
            group.append(n)
            for m in adj[n]:
                if m not in seen:
                    seen.add(m)
                    stack.append(m)
        order = {name: i for i, name in enumerate(topo.nodes)}
        groups.append(sorted(group, key=order.__getitem__))
    return groups, top


def place_pods(topo: Topology, servers: Sequence[str]) -> dict[str, str]:
    groups, top = _groups(topo)
    hosts = {s: 0 for s in servers}
    nodes = {s: 0 for s in servers}
    where: dict[str, str] = {}

    def n_hosts(group):
        return sum(topo.nodes[n].role is Role.HOST for n in group)

    for group in sorted(groups, key=lambda g: (-n_hosts(g), -len(g))):   # stable: topology order on ties
        s = min(servers, key=lambda s: (hosts[s], nodes[s], servers.index(s)))
        for n in group:
            where[n] = s
        hosts[s] += n_hosts(group)
        nodes[s] += len(group)
    neighbours: dict[str, list[str]] = {n: [] for n in top}
    for link in topo.links:
        for a, b in ((link.a.node, link.b.node), (link.b.node, link.a.node)):
            if a in neighbours:
                neighbours[a].append(b)
    for n in top:
        votes = {s: 0 for s in servers}
        for m in neighbours[n]:
            if m in where:
                votes[where[m]] += 1
        s = min(servers, key=lambda s: (-votes[s], nodes[s], servers.index(s)))
        where[n] = s
        nodes[s] += 1
    return where


def place_round_robin(topo: Topology, servers: Sequence[str]) -> dict[str, str]:
    return {name: servers[i % len(servers)] for i, name in enumerate(topo.nodes)}


PLACERS: dict[str, Callable[[Topology, Sequence[str]], dict[str, str]]] = {
    "pods": place_pods, "round-robin": place_round_robin}


def place(topo: Topology, servers: Sequence[str], placer: str = "pods") -> Placement:
    """Place every node of ``topo`` on one of ``servers`` (names, at least one) with the placer
    named ``placer``. Raises PlacementError for an unknown placer, no servers, or a server
    left without nodes (more servers than the topology has groups)."""
    servers = list(servers)
    if not servers:
        raise PlacementError("no servers to place the fabric on")
    if len(set(servers)) != len(servers):
        raise PlacementError(f"server names repeat: {servers}")
    try:
        fn = PLACERS[placer]
    except KeyError:
        raise PlacementError(f"unknown placer {placer!r}; known: {', '.join(sorted(PLACERS))}") from None
    where = fn(topo, servers)
    missing = set(topo.nodes) - set(where)
    if missing:
        raise PlacementError(f"placer {placer!r} left nodes unplaced: {', '.join(sorted(missing)[:5])}")
    idle = [s for s in servers if s not in set(where.values())]
    if idle:
        raise PlacementError(f"placer {placer!r} gave no node to {', '.join(idle)}: "
                             f"{topo.name} has too few groups for {len(servers)} servers")
    cut = tuple(link for link in topo.links if where[link.a.node] != where[link.b.node])
    return Placement(tuple(servers), dict(where), cut)
