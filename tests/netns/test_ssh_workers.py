"""A fabric sharded over SSH (root): stand-in servers are namespaces, each running its own
sshd (openssh-server) on its underlay address with a key made for the test; the runner's
side (``SshShardedFabric``, fabric/paramiko) starts ``testbed worker`` on each over SSH and
builds fat-tree-k4 from the shipped files. Checks the build, a cut link's fault on both
servers, the counters, a refused request, and that nothing is left after a stop and after
the runner is killed with SIGKILL (the workers tear down on end of input)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from testbed.cluster.placement import place
from testbed.cluster.rpc import RemoteError, connect
from testbed.cluster.ssh_fabric import SshShardedFabric
from testbed.cluster.servers import load_servers
from testbed.faults import FaultInjector
from testbed.fabric.paths import FiveTuple, Flow, trace_flows
from testbed.spec import load_topology
from testbed.fabric.kernel import features
from tests.conftest import net_namespaces
from tests.netns.conftest import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPOLOGY = os.path.join(REPO, "topologies", "fat-tree-k4.yaml")

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"),
                                reason="/usr/sbin/sshd missing (make setup installs openssh-server)")


def sharded(under, servers_path: str) -> SshShardedFabric:
    cluster, topo = load_servers(servers_path), load_topology(TOPOLOGY, features=features())
    return SshShardedFabric(topo, TOPOLOGY, servers_path, cluster, place(topo, cluster.names),
                            connect_to=lambda s: connect(s, sock=under.socket_to(s)))


def baseline(under) -> set[int]:
    """Namespaces in use now, and the stand-in servers' own (their sshd may still be starting)."""
    return net_namespaces() | {os.stat(path).st_ino for path in under.netns.values()}


def test_k4_built_over_ssh_on_two_standin_servers(standins):
    under, servers_path = standins
    ns_before = baseline(under)
    fabric = sharded(under, servers_path)
    with fabric:
        assert {name: b["nodes"] for name, b in fabric.built.items()} == {"s1": 18, "s2": 18}
        assert len(net_namespaces() - ns_before) == 36
        reach = fabric.probe()
        summary = reach.summary()
        assert reach.lost == set() and summary["evs_ok"] == summary["evs_probed"] > 0
        assert summary["ecmp_pairs_ok"] == summary["ecmp_pairs_probed"] == 16 * 15
        cut = fabric.placement.cut[0].name
        fabric.set_link(cut, False)
        assert all("UP" not in flags for flags in fabric.link_flags(cut).values())
        down = fabric.probe(ecmp=False)
        assert down.lost_evs() == {k for k, ev in down.evs.items() if cut in ev.links} != set()
        fabric.set_link(cut, True)
        assert fabric.probe(ecmp=False).lost == set()
        # nftables and HTB faults: this side's FaultInjector owns them, each server's worker
        # changes its end
        faults = FaultInjector(fabric)
        faults.set_blackhole(cut, True)
        held = fabric.probe(ecmp=False)
        assert held.lost_evs() == {k for k, ev in held.evs.items() if cut in ev.links}
        assert faults.counters()[cut]["blackhole_dropped"] >= len(held.lost_evs())
        faults.set_blackhole(cut, False)
        faults.set_rate(cut, 2_000_000)
        assert {r["rate_bps"] for r in fabric.counters() if r["link"] == cut} == {2_000_000}
        faults.set_loss(cut, 100)
        assert fabric.probe(ecmp=False).lost_evs() == held.lost_evs()
        faults.revert_all()
        assert {r["rate_bps"] for r in fabric.counters() if r["link"] == cut} == {10_000_000}
        assert fabric.probe(ecmp=False).lost == set()
        with pytest.raises(RemoteError, match="unknown op"):
            fabric.shards["s1"].call("flood", link=cut)
        # path tracing: ECMP flows from pod 0 (s1) to pod 1 (s2), probes sent by s1's worker,
        # counters read on both servers
        src, dst = fabric.topo.nics["h0_0_0"][0].address, fabric.topo.nics["h1_0_0"][0].address
        flows = [Flow(f"udp {i}", "rc", 0, 1, "data", "h0_0_0", "h1_0_0",
                      FiveTuple(str(src), str(dst), "udp", 40000 + i, 4791)) for i in range(8)]
        traced = trace_flows(fabric, flows)
        cut_names = {link.name for link in fabric.placement.cut}
        for t in traced:
            assert t.outcome == "delivered" and t.hops[0].node == "h0_0_0" and t.hops[-1].next == "h1_0_0"
            assert len(t.hops) == 6 and len(set(t.links) & cut_names) == 1
        assert len({t.hops[2].next for t in traced}) > 1      # spread over more than one core
        for name, c in fabric.clock_offsets().items():   # one machine: one clock, within the round trip
            assert abs(c["offset_s"]) <= c["rtt_s"] / 2 + 1e-3, (name, c)
        assert all("UP" in flags for flags in fabric.link_flags(cut).values())
        assert len(fabric.link_flags(cut)) == 2
        records = fabric.counters()
        assert len(records) == 2 * len(fabric.topo.links)
        with pytest.raises(RemoteError, match="s1: set_link: KeyError"):
            fabric.shards["s1"].call("set_link", link="no-such-link", up=False)
        print(f"bring-up over SSH on 2 stand-in servers: {fabric.timings}")
    assert wait_for(lambda: net_namespaces() <= ns_before, 10)


def test_a_killed_runner_leaves_nothing_on_the_servers(standins, tmp_path):
    under, servers_path = standins
    ns_before = baseline(under)
    script = tmp_path / "runner.py"
    script.write_text(textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {REPO!r})
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from testbed.cluster.sharded import StandinUnderlay
        from test_ssh_workers import sharded
        under = StandinUnderlay({under.netns!r}, {under.bridge_ns!r}, None)
        fabric = sharded(under, {servers_path!r}).start()
        print("built", flush=True)
        time.sleep(600)   # the runner stays up until the test SIGKILLs it
        """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "built"
        assert len(net_namespaces() - ns_before) == 36
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert wait_for(lambda: net_namespaces() <= ns_before, 15), "the workers did not tear down"
