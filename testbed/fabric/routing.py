"""Static routing plan (pure) and its compilation into netlink batches.

No routing protocol: MRC fabrics are static and the sender picks the path.

* **SRv6 uSID (MRC mode).** A switch holds ``seg6local End flavors next-csid
  lblen 32 nflen 16`` on its own locator (the route's dev is the node's
  internal veth ``sr0``: seg6local needs a real veth, not ``lo``, and no
  fabric link, so a failed link does not take the locator down), and routes
  only to its neighbours' locators and its attached host NICs' locators. A
  host owns each NIC's locator as a ``local`` route and routes its attached
  switch's locator to that switch.
* **ECMP (baselines).** Every switch routes every host prefix
  (``fd00:0:<plane>:<switch uSID>::/64``) over all shortest-path next hops,
  with no covering route (a failed link makes its destinations unreachable
  there, never loops them); hosts route their plane prefix to their switch.
  :func:`node_routes` takes ``failed`` links to emulate routing convergence
  around them.

Interface indexes are pinned (lo 1, ``sr0``/``sr1`` 2/3, ports from 10 in
``Topology.links_of`` order) so whole plans compile without lookups.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import zlib
from dataclasses import dataclass
from typing import Iterable

from testbed.fabric.netlink import IGNORE_MISSING, RT_TABLE_LOCAL, RTN_LOCAL, Batch
from testbed.model.addressing import host_prefix, plane_prefix
from testbed.model.kernel import HASH_FIELDS_SYSCTL, HASH_SEED_SYSCTL, KernelFeatures
from testbed.model.topology import Link, Role, Topology

SR_IFINDEX = 2
SR_PEER_IFINDEX = 3
FIRST_PORT_IFINDEX = 10
#: linux/seg6_local.h: SEG6_LOCAL_FLV_OP_NEXT_CSID = 4 (bit in SEG6_LOCAL_FLV_OPERATION).
SEG6_LOCAL_FLV_OP_NEXT_CSID = 4
LWTUNNEL_ENCAP_SEG6_LOCAL = 7
USID_BLOCK_BITS = 32
USID_BITS = 16
#: net.ipv6.fib_multipath_hash_fields: src IP 0x1 | dst IP 0x2 | proto 0x4 | src port 0x10 | dst port 0x20.
IP6_MULTIPATH_HASH_5TUPLE = 0x37


def port_ifindex(topo: Topology, node: str, link: Link) -> int:
    """Pinned ifindex of ``node``'s end of ``link``."""
    return FIRST_PORT_IFINDEX + topo.links_of[node].index(link)


def mac_of(link: Link, node: str) -> str:
    """Deterministic locally administered MAC: 02:00:<link index>:00:<side>."""
    side = 1 if link.port_of(node) is link.a else 2
    return f"02:00:{link.index >> 8 & 0xFF:02x}:{link.index & 0xFF:02x}:00:{side:02x}"


def hash_seed(node: str) -> int:
    """Per-router multipath hash seed (net.ipv4.fib_multipath_hash_seed, also used for IPv6).

    Distinct seeds avoid hash polarisation: with one shared seed every
    aggregation router sends all of an edge's flows to the same core.
    """
    return zlib.crc32(node.encode()) or 1


@dataclass(frozen=True)
class PlannedRoute:
    """One IPv6 route. ``nexthops`` are (gateway, ifindex); more than one = ECMP.

    ``kind``: ``unicast`` (via nexthops), ``end`` (seg6local End next-csid on
    ``oif``), ``local`` (deliver locally, table local).
    """

    dst: ipaddress.IPv6Network
    kind: str = "unicast"
    nexthops: tuple[tuple[ipaddress.IPv6Address, int], ...] = ()
    oif: int | None = None
    src: ipaddress.IPv6Address | None = None
    ecmp: bool = False  # a host-prefix route of the ECMP baseline (recomputed on reconvergence)

    def without_ports(self, ifindexes: frozenset[int]) -> "PlannedRoute | None":
        """This route minus next hops over ``ifindexes`` (admin-down ports); None if none remain."""
        if not ifindexes or self.kind != "unicast":
            return self
        hops = tuple(h for h in self.nexthops if h[1] not in ifindexes)
        if not hops:
            return None
        return self if len(hops) == len(self.nexthops) else dataclasses.replace(self, nexthops=hops)


@dataclass(frozen=True)
class Neighbour:
    ip: ipaddress.IPv6Address
    mac: str
    ifindex: int


def switch_sysctls(node: str, features: KernelFeatures) -> dict[str, int]:
    """Sysctls of a switch namespace (set before any fault). ``features``: the kernel's
    (:func:`testbed.fabric.kernel.features`).

    Without ``multipath_hash_seed`` (Linux < 6.11) the seed is left out and every router
    hashes with the kernel's one boot-time key: ECMP polarises (:meth:`KernelFeatures.fallbacks`
    says so, and the run records it). The hash fields (Linux 5.14) are required: validation
    refuses a kernel without them (:meth:`KernelFeatures.refusals`)."""
    out = {**_common_sysctls(), "net.ipv6.conf.all.forwarding": 1,
           "net.ipv6.conf.all.seg6_enabled": 1, "net.ipv6.conf.default.seg6_enabled": 1,
           # L4 hash. Policy 3 (custom fields) with the 5-tuple, not policy 1: IPv6 policy 1
           # ignores fib_multipath_hash_seed, so every router hashes alike and an edge's flows
           # polarise onto few cores; policy 3 honours the per-router seed.
           "net.ipv6.fib_multipath_hash_policy": 3,
           HASH_FIELDS_SYSCTL: IP6_MULTIPATH_HASH_5TUPLE}
    if features.multipath_hash_seed:
        out[HASH_SEED_SYSCTL] = hash_seed(node)
    return out


def host_sysctls(ecn: bool = False) -> dict[str, int]:
    """A host's sysctls; ``ecn``: the fabric marks CE (a link class has ``ecn``), so kernel TCP
    requests ECN on the connections it opens (``net.ipv4.tcp_ecn`` 1, per namespace, IPv6
    included; Linux's default 2 only accepts it), as the agents' MRC and RC QPs send ECT(0):
    tcp then backs off on CE (RFC 3168) instead of only on loss."""
    out = {**_common_sysctls(), "net.ipv6.conf.all.forwarding": 0}
    if ecn:
        out["net.ipv4.tcp_ecn"] = 1
    return out


def _common_sysctls() -> dict[str, int]:
    # Written before links exist so every new interface inherits `default`.
    out = {}
    for scope in ("all", "default"):
        out.update({f"net.ipv6.conf.{scope}.accept_dad": 0, f"net.ipv6.conf.{scope}.dad_transmits": 0,
                    f"net.ipv6.conf.{scope}.accept_ra": 0, f"net.ipv6.conf.{scope}.router_solicitations": 0,
                    f"net.ipv6.conf.{scope}.keep_addr_on_down": 1,
                    f"net.ipv6.conf.{scope}.ignore_routes_with_linkdown": 1})
    return out


def node_addresses(topo: Topology, node: str) -> list[tuple[ipaddress.IPv6Address, int, int]]:
    """(address, prefixlen, ifindex) of every address ``node`` owns."""
    out = []
    for link in topo.links_of[node]:
        out.append((link.addr_of(node), link.subnet.prefixlen, port_ifindex(topo, node, link)))
    for nic in topo.nics.get(node, []):
        link = topo.link_by_name[nic.link]
        out.append((nic.address, 128, port_ifindex(topo, node, link)))
    return out


def node_neighbours(topo: Topology, node: str) -> list[Neighbour]:
    out = []
    for link in topo.links_of[node]:
        peer = link.peer_of(node).node
        out.append(Neighbour(link.addr_of(peer), mac_of(link, peer), port_ifindex(topo, node, link)))
    return out


def node_routes(topo: Topology, node: str, *, failed: Iterable[str] = (),
                ecmp: dict | None = None) -> list[PlannedRoute]:
    """Every static route of ``node``; ``failed`` links are routed around (ECMP only).

    ``ecmp`` is ``topo.ecmp_next_hops(failed)``, passed in to share it across nodes.
    """
    n = topo.nodes[node]
    if n.role is Role.HOST:
        return _host_routes(topo, node)
    failed = frozenset(failed)
    if ecmp is None:
        ecmp = topo.ecmp_next_hops(failed)
    routes = [PlannedRoute(n.locator, "end", oif=SR_IFINDEX)]
    for link in topo.links_of[node]:
        peer = topo.nodes[link.peer_of(node).node]
        hop = ((link.addr_of(peer.name), port_ifindex(topo, node, link)),)
        if peer.role is Role.HOST:
            nic = next(x for x in topo.nics[peer.name] if x.link == link.name)
            routes.append(PlannedRoute(nic.locator, nexthops=hop))
            routes.append(PlannedRoute(ipaddress.IPv6Network(f"{nic.address}/128"), nexthops=hop))
        else:
            routes.append(PlannedRoute(peer.locator, nexthops=hop))
    return routes + _ecmp_routes(topo, node, ecmp)


def _ecmp_routes(topo: Topology, node: str, ecmp: dict) -> list[PlannedRoute]:
    """Host-prefix routes of a switch: one specific route per destination switch with hosts,
    over its shortest-path next hops. No covering (summary) route: a route that dies with its
    link (admin down, or carrier lost under ``ignore_routes_with_linkdown``) must leave the
    destination unreachable, so the packet is dropped (ICMPv6 no route) until routing
    reconverges. A covering ``fd00:0:<plane>::/48`` caught such packets and sent them back
    down another pod's tree: a core whose link into pod p was down forwarded pod p's traffic
    to an aggregation router that hashed it back to the core (a loop filling both directions
    of a link until reconvergence)."""
    routes = []
    for dst, links in sorted(ecmp.get(node, {}).items()):
        if not any(topo.nodes[l.peer_of(dst).node].role is Role.HOST for l in topo.links_of[dst]):
            continue
        d = topo.nodes[dst]
        hops = tuple((l.addr_of(l.peer_of(node).node), port_ifindex(topo, node, l)) for l in links)
        routes.append(PlannedRoute(host_prefix(d.plane or 0, d.usid), nexthops=hops, ecmp=True))
    return routes


def _host_routes(topo: Topology, host: str) -> list[PlannedRoute]:
    routes = []
    for nic in topo.nics[host]:
        link = topo.link_by_name[nic.link]
        sw = topo.nodes[nic.switch]
        hop = ((link.addr_of(sw.name), port_ifindex(topo, host, link)),)
        routes.append(PlannedRoute(nic.locator, "local", oif=1))
        routes.append(PlannedRoute(sw.locator, nexthops=hop, src=nic.address))
        routes.append(PlannedRoute(plane_prefix(nic.plane), nexthops=hop, src=nic.address))
    return routes


def compile_routes(batch: Batch, routes: Iterable[PlannedRoute], *, verb: str = "add") -> None:
    """Add route requests to ``batch``; ``verb`` is add, replace (NLM_F_REPLACE) or del."""
    for r in routes:
        kw: dict = {"dst": str(r.dst.network_address), "dst_len": r.dst.prefixlen}
        if r.kind == "end":
            kw.update(oif=r.oif, encap_type=LWTUNNEL_ENCAP_SEG6_LOCAL, encap={"attrs": [
                ("SEG6_LOCAL_ACTION", "End"),
                ("SEG6_LOCAL_FLAVORS", {"attrs": [
                    ("SEG6_LOCAL_FLV_OPERATION", 1 << SEG6_LOCAL_FLV_OP_NEXT_CSID),
                    ("SEG6_LOCAL_FLV_LCBLOCK_BITS", USID_BLOCK_BITS),
                    ("SEG6_LOCAL_FLV_LCNODE_FN_BITS", USID_BITS)]})]})
        elif r.kind == "local":
            kw.update(oif=r.oif, rtype=RTN_LOCAL, table=RT_TABLE_LOCAL)
        elif len(r.nexthops) == 1:
            kw.update(gateway=str(r.nexthops[0][0]), oif=r.nexthops[0][1])
        else:
            kw["multipath"] = [(str(gw), oif) for gw, oif in r.nexthops]
        if r.src is not None:
            kw["prefsrc"] = str(r.src)
        batch.route(verb, desc=f"route {verb} {r.dst} ({r.kind})",
                    ignore=IGNORE_MISSING if verb == "del" else frozenset(), **kw)


def compile_neighbours(batch: Batch, neighbours: Iterable[Neighbour]) -> None:
    for nb in neighbours:
        batch.neigh_replace(ifindex=nb.ifindex, dst=str(nb.ip), lladdr=nb.mac)


def _install_seg6local_flavors() -> None:
    """Teach pyroute2 (0.9.x) the SEG6_LOCAL_FLAVORS attribute of linux/seg6_local.h.

    pyroute2's seg6local map stops at SEG6_LOCAL_VRFTABLE (9); the kernel adds
    SEG6_LOCAL_COUNTERS (10) and SEG6_LOCAL_FLAVORS (11, nested: operation
    bitmask u32, locator-block bits u8, node-function bits u8), which
    ``End flavors next-csid`` needs. Encoding checked byte for byte against
    iproute2's ``ip route add ... flavors next-csid lblen 32 nflen 16``.
    """
    from pyroute2.netlink import NLA_F_NESTED, nla
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    info = rtmsg.seg6local_encap_info
    if any(name == "SEG6_LOCAL_FLAVORS" for name, _ in info.nla_map):
        return

    class flavors(nla):
        __slots__ = ()
        nla_flags = NLA_F_NESTED
        nla_map = (("SEG6_LOCAL_FLV_UNSPEC", "none"), ("SEG6_LOCAL_FLV_OPERATION", "uint32"),
                   ("SEG6_LOCAL_FLV_LCBLOCK_BITS", "uint8"), ("SEG6_LOCAL_FLV_LCNODE_FN_BITS", "uint8"))

    info.flavors = flavors
    names = [name for name, _ in info.nla_map]
    extra = []
    if "SEG6_LOCAL_COUNTERS" not in names:
        extra.append(("SEG6_LOCAL_COUNTERS", "hex"))
    info.nla_map = tuple(info.nla_map) + tuple(extra) + (("SEG6_LOCAL_FLAVORS", "flavors"),)


_install_seg6local_flavors()
