"""Cross-server links as kernel VXLAN tunnels (pure plan + netlink requests).

A link cut by the placement (:mod:`testbed.cluster.placement`) is one VXLAN device on
each server: VNI ``vni_base + link index`` (its own VNI per link, RFC 7348), unicast
remote = the peer server's underlay address, UDP port ``underlay.port``, no learning.
Each end is created by a request sent from the server's own namespace (the one holding
the underlay address: the tunnel's socket lives there) with ``IFLA_NET_NS_FD`` naming the
node's namespace, so the device appears in the node with the link end's interface name,
pinned ifindex and MAC, exactly where a veth end would be (containerlab builds its
multi-node VXLAN links the same way: created in the host namespace, moved into the
node). Everything the single-machine builder does to a port afterwards (addresses,
permanent neighbours, HTB and its leaf queue, routes, the switch program, link faults)
then applies unchanged.

MTU: the inner MTU is the underlay MTU minus the encapsulation, 70 bytes on an IPv6
underlay (IPv6 40 + UDP 8 + VXLAN 8 + inner Ethernet 14) and 50 on IPv4 (RFC 7348 §4,
the figures of containerlab's and MaxiNet's MTU caveats); a cut link whose class MTU is
larger is refused before anything is built (:func:`mtu_problems`).

A tunnel has no carrier: a link fault must take both ends down, on both servers.
"""

from __future__ import annotations


from testbed.model.topology import Topology
from testbed.model.cluster import Cluster
from testbed.fabric.vxlan import mtu_problems













def checked_placement(topo: Topology, cluster: Cluster, placer: str, what: str):
    """Place ``topo`` (from file ``what``) on ``cluster`` and check that its tunnels carry
    every cut link: ``(placement or None, problems)``, each problem a
    :class:`testbed.spec.Problem` naming the servers file (and its ``underlay.mtu`` line)."""
    from testbed.spec import Problem
    from testbed.model.cluster import PlacementError
    from testbed.cluster.placement import place
    try:
        placement = place(topo, cluster.names, placer)
    except PlacementError as exc:
        return None, [Problem(cluster.source, 0, "", f"{what}: {exc}")]
    return placement, [Problem(cluster.source, cluster.line_for("underlay.mtu"), "underlay.mtu", f"{what}: {m}")
                       for m in mtu_problems(topo, placement, cluster)]
