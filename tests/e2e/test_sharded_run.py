"""A scenario on a fabric sharded over two stand-in servers (root): the runner, the fault
injector, path tracing and the counters drive a ShardedFabric whose aggregation-core links
between the servers are VXLAN tunnels; the failed link is one of them. The run reports the
same KPIs as on one machine and its busbw is within 5% of the single-machine run."""

from __future__ import annotations

import ipaddress

from rich.console import Console

from testbed.cluster.placement import place
from testbed.cluster.servers import Cluster, Server
from testbed.cluster.sharded import ShardedFabric, standin_underlay
from testbed.kernel import features
from testbed.report import load_summary
from testbed.run import run_scenario
from testbed.spec import load_scenario
from tests.conftest import net_namespaces, root_interfaces
from tests.e2e.conftest import REPO
from tests.e2e.test_scenarios import FAILED, FAILURE
from tests.netns.conftest import wait_for

SCENARIO = FAILURE.replace("transports: [mrc, rc, tcp]", "transports: [mrc]")
# fat-tree-k4 runs MTU 9000: a jumbo underlay carries it (9000 + 70 <= 9100)
CLUSTER = Cluster(tuple(Server(f"s{i}", "localhost", ipaddress.ip_address(f"fd00:98::{i}")) for i in (1, 2)),
                  underlay_mtu=9100)


def run(tmp_path, fabric_factory=None) -> dict:
    tmp_path.mkdir()
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO.replace("@REPO@", str(REPO)))
    scenario = load_scenario(path, features=features())
    console = Console(file=(tmp_path / "console.txt").open("w"), width=120)
    result = run_scenario(scenario, runs_root=tmp_path / "runs", console=console, live=False,
                          fabric_factory=fabric_factory)
    assert result.status == {"mrc": "done"}, result.reasons
    return load_summary(result.run_dir, recompute=True)["transports"]["mrc"]


def test_core_link_failure_on_two_standin_servers(tmp_path):
    ns_before, if_before = net_namespaces(), root_interfaces()
    single = run(tmp_path / "single")
    under = standin_underlay(CLUSTER)
    placements = []

    def sharded(topo, netem):
        placement = place(topo, CLUSTER.names)
        placements.append(placement)
        return ShardedFabric(topo, placement, CLUSTER, under.netns, have_netem=netem)

    try:
        shard = run(tmp_path / "sharded", sharded)
    finally:
        under.close()
    assert FAILED in {link.name for link in placements[0].cut}     # the fault hits a tunnel
    assert shard["wrong"] == 0 and shard["completion"]["complete"]
    assert set(shard) == set(single)                              # the same KPIs
    assert shard["detect_s"] is not None and shard["false_retirements"]["count"] == 0
    assert {(e["rank"], e["peer"]) for e in shard["evs_crossing_fault"]}
    ratio = shard["avg_busbw_mbit_per_s"] / single["avg_busbw_mbit_per_s"]
    print(f"busbw sharded/single: {ratio:.3f} ({shard['avg_busbw_mbit_per_s']:.2f} / "
          f"{single['avg_busbw_mbit_per_s']:.2f} Mbit/s); detect {shard['detect_s']:.3f} s "
          f"vs {single['detect_s']:.3f} s")
    assert 0.95 <= ratio <= 1.05
    assert wait_for(lambda: net_namespaces() <= ns_before)
    assert root_interfaces() <= if_before
