"""Shortest paths over a topology's switches: distances, path enumeration and counting, the
EVs' paths per plane, and ECMP next hops (what :class:`testbed.model.topology.Topology`'s
path methods delegate to).

Functions take the topology as ``topo`` and read only ``topo.nodes``, ``topo.links_of``,
``topo.nics``, ``topo.switches`` and ``topo.switch_paths``, so this module needs nothing from
:mod:`testbed.model.topology` and the model imports it without a cycle.
"""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from typing import Iterable, Iterator


def switch_distances(topo, dst: str, failed: frozenset[str] = frozenset()) -> dict[str, int]:
    """Hop count from every switch to switch ``dst`` (switch-only graph, ``failed`` links removed)."""
    dist = {dst: 0}
    queue = deque([dst])
    while queue:
        node = queue.popleft()
        for link in topo.links_of[node]:
            if link.name in failed:
                continue
            peer = link.peer_of(node).node
            if topo.nodes[peer].role.is_switch and peer not in dist:
                dist[peer] = dist[node] + 1
                queue.append(peer)
    return dist


def iter_switch_paths(topo, src: str, dst: str) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Shortest switch paths from ``src`` to ``dst`` as (switch names, link names), lazily, in a
    deterministic order; parallel links give distinct paths."""
    dist = switch_distances(topo, dst)
    if src not in dist:
        return
    stack = [(src, (src,), ())]
    while stack:
        node, nodes, links = stack.pop()
        if node == dst:
            yield nodes, links
            continue
        nxt = [(link.peer_of(node).node, link) for link in topo.links_of[node]
               if dist.get(link.peer_of(node).node, -1) == dist[node] - 1]
        stack.extend((peer, nodes + (peer,), links + (link.name,)) for peer, link in reversed(nxt))


def count_switch_paths(topo, src: str, dst: str) -> int:
    """How many paths :func:`iter_switch_paths` yields, by dynamic programming over hop distances."""
    dist = switch_distances(topo, dst)
    if src not in dist:
        return 0
    ways = {dst: 1}
    for node in sorted((n for n in dist if dist[n] <= dist[src]), key=dist.__getitem__):
        if node == dst:
            continue
        ways[node] = sum(ways.get(l.peer_of(node).node, 0) for l in topo.links_of[node]
                         if dist.get(l.peer_of(node).node, -1) == dist[node] - 1)
    return ways[src]


def ev_paths(topo, src_host: str, dst_host: str, limit: int | None = None) -> list[tuple]:
    """``(src nic, dst nic, (switches, links))`` of every EV from ``src_host`` to ``dst_host``
    in EV id order: planes interleaved, so the first ``n`` spread evenly over planes."""
    per_plane = []
    for s_nic in topo.nics[src_host]:
        for d_nic in topo.nics[dst_host]:
            if s_nic.plane == d_nic.plane:
                paths = (topo.switch_paths(s_nic.switch, d_nic.switch) if limit is None else
                         itertools.islice(iter_switch_paths(topo, s_nic.switch, d_nic.switch), limit))
                per_plane.append([(s_nic, d_nic, p) for p in paths])
    ordered = [item for group in interleave(per_plane) for item in group]
    return ordered[:limit]


def count_evs(topo, src_host: str, dst_host: str) -> int:
    """``len(ev_paths(topo, src_host, dst_host))`` without enumerating them."""
    return sum(count_switch_paths(topo, s_nic.switch, d_nic.switch)
               for s_nic in topo.nics[src_host] for d_nic in topo.nics[dst_host]
               if s_nic.plane == d_nic.plane)


def ecmp_next_hops(topo, failed: Iterable[str] = ()) -> dict[str, dict]:
    """Shortest-path next hops: switch -> destination switch -> links (ECMP set), ``failed``
    link names removed first; unreachable destinations are left out."""
    failed = frozenset(failed)
    out: dict[str, dict] = defaultdict(dict)
    for dst in (s.name for s in topo.switches):
        dist = switch_distances(topo, dst, failed)
        for sw, d in dist.items():
            if sw == dst:
                continue
            hops = [l for l in topo.links_of[sw] if l.name not in failed
                    and dist.get(l.peer_of(sw).node, -1) == d - 1]
            out[sw][dst] = hops
    return dict(out)


def interleave(groups: list[list]) -> list[list]:
    """Round-robin over groups: [[a0, b0], [a1, b1], ...]."""
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.append([g[i] for g in groups if i < len(g)])
    return out
