"""The static ECMP plan (pure): a failed link never makes a packet loop.

A forwarding walk over :func:`testbed.fabric.routing.node_routes` (longest prefix match; a route's
next hops over a failed link are dead, as ``ignore_routes_with_linkdown`` and an admin-down
port make them; a route with no live next hop is skipped, so the lookup falls through to a
shorter prefix, as the kernel's does) explores every ECMP branch from every host to every
other host with every single fabric link failed, before routing reconverges.
"""

from __future__ import annotations

import ipaddress

import pytest

from testbed.fabric import routing
from testbed.model.generators import fat_tree, leaf_spine
from testbed.model.topology import LinkParams, Role, Topology

LP = LinkParams(10_000_000, 32)


def _tables(topo: Topology) -> dict[str, list[routing.PlannedRoute]]:
    ecmp = topo.ecmp_next_hops()
    return {name: routing.node_routes(topo, name, ecmp=ecmp) for name in topo.nodes}


def _port_links(topo: Topology) -> dict[tuple[str, int], object]:
    return {(node, routing.port_ifindex(topo, node, link)): link
            for node in topo.nodes for link in topo.links_of[node]}


def _lookup(routes, addr, dead_ifindexes) -> list[int] | None:
    """Live next-hop ifindexes of the longest matching unicast route, None if none matches."""
    for r in sorted((r for r in routes if r.kind == "unicast" and addr in r.dst),
                    key=lambda r: -r.dst.prefixlen):
        live = [oif for _, oif in r.nexthops if oif not in dead_ifindexes]
        if live:
            return live
    return None


def walks(topo: Topology, src: str, dst: str, failed: str | None, tables=None, ports=None):
    """Every forwarding branch from host ``src`` to host ``dst``'s first NIC address:
    yields (outcome, links crossed), outcome "delivered", "dropped" or "loop".
    ``tables``/``ports``: :func:`_tables` and :func:`_port_links` of ``topo`` (computed if None)."""
    tables, ports = tables or _tables(topo), ports or _port_links(topo)
    addr = topo.nics[dst][0].address
    dead = {}
    if failed is not None:
        link = topo.link_by_name[failed]
        for port in (link.a, link.b):
            dead[port.node] = {routing.port_ifindex(topo, port.node, link)}

    def step(node, crossed):
        if node == dst:
            yield "delivered", crossed
            return
        hops = _lookup(tables[node], addr, dead.get(node, set()))
        if hops is None:
            yield "dropped", crossed
            return
        for oif in hops:
            link = ports[(node, oif)]
            if link.name in crossed:
                yield "loop", crossed + (link.name,)
                continue
            yield from step(link.peer_of(node).node, crossed + (link.name,))

    yield from step(src, ())


@pytest.mark.parametrize("topo", [fat_tree(4, host_link=LP, fabric_link=LP),
                                  leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, planes=2,
                                             host_link=LP, fabric_link=LP)],
                         ids=["fat-tree-k4", "leaf-spine-2plane"])
def test_no_loop_with_any_fabric_link_failed(topo):
    hosts = [h.name for h in topo.hosts]
    fabric_links = [l.name for l in topo.links if all(topo.nodes[p.node].role.is_switch for p in (l.a, l.b))]
    tables, ports = _tables(topo), _port_links(topo)
    for failed in [None, *fabric_links]:
        for src in hosts:
            for dst in hosts:
                if src == dst:
                    continue
                outcomes = {o for o, _ in walks(topo, src, dst, failed, tables, ports)}
                assert "loop" not in outcomes, (failed, src, dst)
                if failed is None:
                    assert outcomes == {"delivered"}, (src, dst)


def test_core_that_lost_its_pod_link_drops_instead_of_bouncing():
    """h1_0_0 -> h0_0_0 with a0_0-c0_0 down: the branches through c0_0 are dropped there
    (no route into pod 0), every other branch is delivered; none comes back down pod 1-3."""
    topo = fat_tree(4, host_link=LP, fabric_link=LP)
    seen = list(walks(topo, "h1_0_0", "h0_0_0", "a0_0-c0_0"))
    dropped = [c for o, c in seen if o == "dropped"]
    assert dropped and all(c[-1] == "a1_0-c0_0" for c in dropped)
    assert {o for o, _ in seen} == {"delivered", "dropped"}


def test_switches_hold_one_specific_route_per_remote_edge():
    topo = fat_tree(4, host_link=LP, fabric_link=LP)
    edges = [n for n in topo.switches if n.role is Role.EDGE]
    for sw in topo.switches:
        ecmp = [r for r in routing.node_routes(topo, sw.name) if r.ecmp]
        remote = [e for e in edges if e.name != sw.name]
        assert len(ecmp) == len(remote), sw.name
        assert all(r.dst.prefixlen == 64 for r in ecmp)
        assert not any(r.dst.supernet_of(ipaddress.IPv6Network("fd00::/48")) for r in ecmp)


def test_hosts_request_tcp_ecn_only_on_a_marking_fabric():
    assert "net.ipv4.tcp_ecn" not in routing.host_sysctls()
    assert routing.host_sysctls(ecn=True)["net.ipv4.tcp_ecn"] == 1
    assert routing.host_sysctls(ecn=True)["net.ipv6.conf.all.forwarding"] == 0
