"""fat-tree-k4 built as two shards on two stand-in servers (root): namespaces holding
each server's IPv6 underlay address on one bridge; every aggregation-core link between
the servers is a VXLAN tunnel. Checks every EV and ECMP pair, a cut link's fault (both
tunnel ends down, exactly its EVs black-holed, back after), the fault injector and the
link counters on the sharded fabric, and that nothing is left behind."""
from __future__ import annotations

import ipaddress
import json
import subprocess
import time

import pytest

from testbed.fabric import verify
from testbed.cluster.placement import place
from testbed.model.cluster import Cluster, Server
from testbed.cluster.sharded import ShardedFabric, standin_underlay
from testbed.fabric.counters import LinkCounters
from testbed.fabric.backend import FabricError
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams

UNDERLAY_MTU = 9100     # jumbo: MTU 9000 links + 70 bytes of VXLAN over IPv6


def cluster() -> Cluster:
    return Cluster(tuple(Server(f"s{i}", "localhost", ipaddress.ip_address(f"fd00:99::{i}")) for i in (1, 2)),
                   underlay_mtu=UNDERLAY_MTU)


def k4(mtu: int = 9000):
    lp = LinkParams(20_000_000, 64, mtu=mtu)
    return fat_tree(4, host_link=lp, fabric_link=lp, name="fat-tree-k4")


def operstate(fabric, node: str, ifname: str) -> str:
    pid = fabric.nodes[node].pid
    out = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-j", "link", "show", "dev", ifname],
                         check=True, capture_output=True, text=True, timeout=10).stdout
    return json.loads(out)[0]["flags"]


def ping(fabric, src: str, dst: str, size: int) -> bool:
    """One ICMPv6 echo of ``size`` payload bytes, DF, from host ``src`` to ``dst``'s NIC."""
    pid = fabric.nodes[src].pid
    addr = str(fabric.topo.nics[dst][0].address)
    return subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "ping", "-6", "-n", "-q", "-c", "2", "-i", "0.2",
                           "-W", "1", "-M", "do", "-s", str(size), addr], capture_output=True, timeout=20).returncode == 0


def test_fat_tree_k4_on_two_standin_servers():
    topo, c = k4(), cluster()
    placement = place(topo, c.names)
    assert len(placement.cut) == 8
    under = standin_underlay(c)
    try:
        t0 = time.perf_counter()
        with ShardedFabric(topo, placement, c, under.netns) as fabric:
            bringup = time.perf_counter() - t0
            result = verify.probe(fabric)
            s = result.summary()
            assert result.lost == set() and s["evs_ok"] == s["evs_probed"] > 0
            assert s["ecmp_pairs_ok"] == s["ecmp_pairs_probed"] == 16 * 15
            remote = next(h.name for h in topo.hosts if placement.where[h.name] != placement.where["h0_0_0"])
            assert ping(fabric, "h0_0_0", remote, 9000 - 48)          # a full MTU-9000 packet crosses
            cut = placement.cut[0]
            fabric.set_link(cut.name, False)
            try:
                for port in (cut.a, cut.b):
                    assert "UP" not in operstate(fabric, port.node, port.ifname)
                down = verify.probe(fabric, ecmp=False)
                assert down.lost_evs() == {k for k, ev in down.evs.items() if cut.name in ev.links} != set()
            finally:
                fabric.set_link(cut.name, True)
            assert verify.probe(fabric).lost == set()
            counters = LinkCounters(fabric).read()
            assert len(counters) == 2 * len(topo.links)
            cut_ends = [r for r in counters if r["link"] in {l.name for l in placement.cut}]
            assert len(cut_ends) == 16 and all(r["tx_packets"] > 0 and r["rx_packets"] > 0 for r in cut_ends)
            print(f"bring-up on 2 stand-in servers: {bringup:.2f} s ({fabric.timings})")
    finally:
        under.close()


def test_a_link_mtu_the_tunnel_cannot_carry_is_refused_before_anything_is_built():
    topo, c = k4(mtu=9050), cluster()
    under = standin_underlay(c)
    try:
        with pytest.raises(FabricError, match="exceeds the VXLAN inner MTU 9030"):
            ShardedFabric(topo, place(topo, c.names), c, under.netns).start()
    finally:
        under.close()
