"""Cross-server links as kernel VXLAN tunnels: MTU checks, tunnel ends and their netlink requests.

A link cut by the placement is one VXLAN device on each server: VNI ``vni_base + link index``
(its own VNI per link, RFC 7348), unicast remote = the peer server's underlay address, UDP
port ``underlay.port``, no learning. Each end is created by a request sent from the server's
own namespace (the one holding the underlay address) with ``IFLA_NET_NS_FD`` naming the node's
namespace, so the device appears in the node with the link end's interface name, pinned ifindex
and MAC, exactly where a veth end would be (containerlab builds its multi-node VXLAN links the
same way). MTU: the inner MTU is the underlay MTU minus the encapsulation (:data:`ENCAP_BYTES`);
a cut link whose class MTU is larger is refused before anything is built (:func:`mtu_problems`).
A tunnel has no carrier: a link fault must take both ends down, on both servers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from testbed.fabric import routing
from testbed.fabric.netlink import Batch
from testbed.model.cluster import VNI_MAX, Cluster, Placement
from testbed.model.topology import Topology


ENCAP_BYTES = {4: 20 + 8 + 8 + 14, 6: 40 + 8 + 8 + 14}
"""VXLAN overhead on the underlay's MTU by its IP version, bytes: outer IP, UDP, VXLAN
header and the inner Ethernet header (RFC 7348 §5)."""


def inner_mtu(underlay_mtu: int, version: int) -> int:
    """Largest inner IP MTU a VXLAN device over an underlay of ``underlay_mtu`` bytes (IP
    ``version`` 4 or 6) carries without fragmenting; ValueError for another version."""
    if version not in ENCAP_BYTES:
        raise ValueError(f"IP version {version} is not 4 or 6")
    return underlay_mtu - ENCAP_BYTES[version]


@dataclass(frozen=True)
class TunnelEnd:
    """One server's end of a cut link: the device ``ifname`` (ifindex, MAC, MTU: the link
    end's) in node ``node``, VNI ``vni``, from underlay ``local`` to ``remote`` on UDP ``port``."""

    link: str
    node: str
    ifname: str
    ifindex: int
    mac: str
    mtu: int
    vni: int
    local: ipaddress.IPv4Address | ipaddress.IPv6Address
    remote: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int

    def info_data(self) -> list:
        """IFLA_INFO_DATA of the VXLAN device (``ip link add type vxlan id V local L remote R
        dstport P nolearning``)."""
        v6 = self.local.version == 6
        return [("IFLA_VXLAN_ID", self.vni),
                ("IFLA_VXLAN_LOCAL6" if v6 else "IFLA_VXLAN_LOCAL", str(self.local)),
                ("IFLA_VXLAN_GROUP6" if v6 else "IFLA_VXLAN_GROUP", str(self.remote)),
                ("IFLA_VXLAN_PORT", self.port),
                ("IFLA_VXLAN_LEARNING", 0),
                ("IFLA_VXLAN_TTL", 64)]


def mtu_problems(topo: Topology, placement: Placement, cluster: Cluster) -> list[str]:
    """One message per link class whose MTU the tunnels of its cut links cannot carry, and per
    link whose VNI passes 24 bits."""
    out = []
    version = cluster.servers[0].underlay.version
    limit = inner_mtu(cluster.underlay_mtu, version)
    too_big: dict[str, list] = {}
    for link in placement.cut:
        if link.params.mtu > limit:
            too_big.setdefault(link.cls, []).append(link)
        if cluster.vni_base + link.index > VNI_MAX:
            out.append(f"link {link.name}: VNI {cluster.vni_base + link.index} exceeds 24 bits; lower underlay.vni_base")
    for cls, links in too_big.items():
        mtu = max(l.params.mtu for l in links)
        out.insert(0, f"class {cls}: mtu {mtu} exceeds the VXLAN inner MTU {limit} (underlay mtu "
                      f"{cluster.underlay_mtu} - {ENCAP_BYTES[version]} bytes on IPv{version}) on {len(links)} "
                      f"link(s) between servers, e.g. {links[0].name} ({placement.where[links[0].a.node]} - "
                      f"{placement.where[links[0].b.node]}); lower the class's mtu or raise underlay.mtu to "
                      f"{mtu + ENCAP_BYTES[version]}")
    return out


def tunnel_ends(topo: Topology, placement: Placement, cluster: Cluster, server: str) -> list[TunnelEnd]:
    """The ends of cut links that ``server`` builds, in link order."""
    out = []
    for link in placement.cut:
        for port, peer in ((link.a, link.b), (link.b, link.a)):
            if placement.where[port.node] != server:
                continue
            out.append(TunnelEnd(
                link=link.name, node=port.node, ifname=port.ifname,
                ifindex=routing.port_ifindex(topo, port.node, link), mac=routing.mac_of(link, port.node),
                mtu=link.params.mtu, vni=cluster.vni_base + link.index,
                local=cluster.server(server).underlay, remote=cluster.server(placement.where[peer.node]).underlay,
                port=cluster.vxlan_port))
    return out


def add_tunnel(batch: Batch, end: TunnelEnd, node_nsfd: int) -> None:
    """Append the request creating ``end`` in the node namespace ``node_nsfd``; send the batch
    from the server's underlay namespace (the device's socket is opened there)."""
    batch.link_add(ifname=end.ifname, index=end.ifindex, kind="vxlan", nsfd=node_nsfd, mac=end.mac,
                   mtu=end.mtu, gso_max_segs=1, info_data=end.info_data(),
                   desc=f"vxlan {end.link} ({end.node}:{end.ifname}, VNI {end.vni}, {end.local} -> {end.remote})")
