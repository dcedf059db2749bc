"""Why a topology cannot be built: the problems :class:`testbed.model.topology.Topology` refuses
itself with, as ``(key_path, message)`` pairs (the explicit form's ``nodes.X`` / ``links[i]``).

Functions take the topology as ``topo`` (its ``nodes``, ``links``, ``hosts``, ``switches``,
``links_of`` and ``kind``), so the model imports this module without a cycle.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from testbed.model.addressing import MAX_EV_SWITCHES, MAX_PLANE, ifname_problem
from testbed.model.graph import switch_distances


def check(topo) -> list[tuple[str, str]]:
    """Every problem of ``topo``: links, endpoints, interface names, NICs per plane, uSIDs,
    planes; then, for an explicit fabric only, reachability (:func:`check_reach`)."""
    problems: list[tuple[str, str]] = []
    endpoints: dict[tuple[str, str], int] = {}
    for i, link in enumerate(topo.links):
        for side, port in (("a", link.a), ("b", link.b)):
            where = f"links[{i}]"
            if port.node not in topo.nodes:
                problems.append((where, f"endpoint {port.node!r} is not a declared node"))
                continue
            why = ifname_problem(port.ifname)
            if why:
                problems.append((where, why))
            if (port.node, port.ifname) in endpoints:
                problems.append((where, f"endpoint {port.node}:{port.ifname} is already used "
                                        f"by links[{endpoints[(port.node, port.ifname)]}]"))
            endpoints[(port.node, port.ifname)] = i
        if link.a.node == link.b.node:
            problems.append((f"links[{i}]", f"link {link.name} connects {link.a.node} to itself"))
        roles = [topo.nodes[p.node].role for p in (link.a, link.b) if p.node in topo.nodes]
        if not any(r.is_switch for r in roles) and len(roles) == 2:
            problems.append((f"links[{i}]", f"link {link.name} joins two hosts; hosts attach to switches"))
        planes = {topo.nodes[p.node].plane or 0 for p in (link.a, link.b)
                  if p.node in topo.nodes and topo.nodes[p.node].role.is_switch}
        if len(planes) > 1:
            problems.append((f"links[{i}]", f"link {link.name} joins planes {sorted(planes)}"))
    if problems:
        return problems
    for host in topo.hosts:
        if not topo.links_of[host.name]:
            problems.append((f"nodes.{host.name}", "host has no link"))
        planes = [topo.nodes[l.peer_of(host.name).node].plane or 0 for l in topo.links_of[host.name]]
        if len(planes) != len(set(planes)):
            problems.append((f"nodes.{host.name}", "host has more than one NIC on a plane"))
    usids: dict[int, str] = {}
    for node in topo.switches:
        if node.usid in usids:
            problems.append((f"nodes.{node.name}", f"uSID {node.usid:#06x} already used by {usids[node.usid]}"))
        usids[node.usid or 0] = node.name
        if (node.plane or 0) > MAX_PLANE:
            problems.append((f"nodes.{node.name}", f"plane {node.plane} does not fit the 16 bits of the "
                                                   f"address fd00:0:<plane>:: (0..{MAX_PLANE})"))
    if problems or topo.kind != "explicit":
        return problems  # generated fabrics are connected and shallow by construction
    return check_reach(topo)


def check_reach(topo) -> list[tuple[str, str]]:
    """Hosts that cannot reach each other: no common plane, a plane split into islands,
    or switch paths longer than an EV can carry (MAX_EV_SWITCHES switches).

    Cost: one BFS per host-attached switch over its plane (explicit fabrics only).
    """
    problems: list[tuple[str, str]] = []
    attached: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))  # plane -> sw -> hosts
    plane_sets: dict[frozenset[int], str] = {}
    for host in topo.hosts:
        planes = set()
        for link in topo.links_of[host.name]:
            sw = topo.nodes[link.peer_of(host.name).node]
            attached[sw.plane or 0][sw.name].append(host.name)
            planes.add(sw.plane or 0)
        if planes:
            plane_sets.setdefault(frozenset(planes), host.name)
    for (pa, ha), (pb, hb) in itertools.combinations(plane_sets.items(), 2):
        if not pa & pb:
            problems.append((f"nodes.{hb}", f"hosts {ha} (planes {sorted(pa)}) and {hb} (planes {sorted(pb)}) "
                                            "share no plane"))
    for plane, switches in sorted(attached.items()):
        first = next(iter(switches))
        for src in switches:
            dist = switch_distances(topo, src)
            for dst, hosts in switches.items():
                if dst not in dist:
                    problems.append((f"nodes.{hosts[0]}", f"host {hosts[0]} cannot reach host "
                                                          f"{switches[first][0]} on plane {plane}: "
                                                          "the fabric is split into islands"))
                elif dist[dst] + 1 > MAX_EV_SWITCHES:
                    problems.append((f"nodes.{hosts[0]}", f"the path from {switches[src][0]} to {hosts[0]} "
                                                          f"crosses {dist[dst] + 1} switches; an EV holds "
                                                          f"at most {MAX_EV_SWITCHES} switch uSIDs + the NIC's"))
            if problems:
                return problems
    return problems
