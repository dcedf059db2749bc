"""A scenario on a fabric sharded over two stand-in servers (root): the runner, the fault
injector, path tracing and the counters drive a fabric whose aggregation-core links
between the servers are VXLAN tunnels; the failed link is one of them. The run reports the
same KPIs as on one machine and its busbw is within 5% of the single-machine run.

Two ways: shards built in this process (:class:`ShardedFabric`), and shards built by
``testbed worker`` over SSH (:class:`SshShardedFabric`: stand-in servers with their own
sshd), where the workers also start the agents and relay their control channel, and the
records come back at the end on the runner's clock."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import pytest

from rich.console import Console

from testbed.cluster.placement import place
from testbed.model.cluster import Cluster, Server
from testbed.cluster.sharded import ShardedFabric, standin_underlay
from testbed.fabric.kernel import features
from testbed.report import load_summary
from testbed.run import run_scenario
from testbed.rundir.write import agent_log
from testbed.spec import load_scenario
from tests.conftest import net_namespaces, root_interfaces
from tests.e2e.conftest import REPO
from tests.e2e.test_scenarios import FAILED, FAILURE
from tests.netns.conftest import wait_for
from tests.netns.test_ssh_workers import baseline

SCENARIO = FAILURE.replace("transports: [mrc, rc, tcp]", "transports: [mrc]")
# fat-tree-k4 runs MTU 9000: a jumbo underlay carries it (9000 + 70 <= 9100)
CLUSTER = Cluster(tuple(Server(f"s{i}", "localhost", ipaddress.ip_address(f"fd00:98::{i}")) for i in (1, 2)),
                  underlay_mtu=9100)


def run(tmp_path, fabric_factory=None, *, run_dir: list | None = None) -> dict:
    tmp_path.mkdir()
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO.replace("@REPO@", str(REPO)))
    scenario = load_scenario(path, features=features())
    console = Console(file=(tmp_path / "console.txt").open("w"), width=120)
    result = run_scenario(scenario, runs_root=tmp_path / "runs", console=console, live=False,
                          fabric_factory=fabric_factory)
    assert result.status == {"mrc": "done"}, result.reasons
    if run_dir is not None:
        run_dir.append(result.run_dir)
    return load_summary(result.run_dir, recompute=True)["transports"]["mrc"]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict:
    """The scenario's summary on one machine (the reference of both sharded runs)."""
    return run(tmp_path_factory.mktemp("one") / "single")


def test_core_link_failure_on_two_standin_servers(tmp_path, single):
    ns_before, if_before = net_namespaces(), root_interfaces()
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


def run_over_ssh(tmp_path, under, servers_path: str, scenario: str) -> list[str]:
    """The argv of ``testbed run SCENARIO --servers`` as a user on the underlay runs it: in the
    stand-ins' bridge namespace, each server reached at its underlay address."""
    text = open(servers_path).read()
    for i in (1, 2):
        text = text.replace(f"address: stand-in-{i}", f'address: "fd00:96::{i}"')
    servers = tmp_path / "servers.yaml"
    servers.write_text(text)
    scen = tmp_path / "scenario.yaml"
    scen.write_text(scenario.replace("@REPO@", str(REPO)))
    return ["ip", "netns", "exec", under.bridge_ns, sys.executable, "-m", "testbed", "run", str(scen),
            "--servers", str(servers), "--runs-dir", str(tmp_path / "runs"), "--no-plots"]


def test_core_link_failure_over_ssh_workers(tmp_path, standins, single):
    """The same run from the command line, ``testbed run --servers``: each server's shard and
    agents in its own ``testbed worker`` over SSH. The runner runs where a user's would, on
    the underlay (the stand-ins' bridge namespace), and reaches each sshd at its address."""
    under, servers_path = standins
    ns_before, if_before = baseline(under), root_interfaces()
    cli = subprocess.run(run_over_ssh(tmp_path, under, servers_path, SCENARIO), cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    shard = load_summary(run_dir, recompute=True)["transports"]["mrc"]
    tdir = run_dir / "mrc"
    events = [json.loads(line) for line in (tdir / "events.jsonl").read_text().splitlines()]
    placed = next(e for e in events if e["kind"] == "fabric")["placement"]
    spawned = next(e for e in events if e["kind"] == "agents" and e.get("phase") == "spawned")
    assert set(spawned["servers"].values()) == {"s1", "s2"}          # agents ran on both servers
    clocks = next(e for e in events if e["kind"] == "clocks")["servers"]
    assert set(clocks) == {"s1", "s2"} and all(abs(c["offset_s"]) <= c["rtt_s"] / 2 + 1e-3 for c in clocks.values())
    got = next(e for e in events if e["kind"] == "records")["servers"]
    assert all(got[s]["cpu"] > 0 and got[s]["sched"] > 0 for s in ("s1", "s2")), got
    end = next(e for e in events if e["kind"] == "run" and e.get("phase") == "end")
    assert end["samples"]["files"] == 4 and end["samples"]["skipped"] == 0 and end["samples"]["samples"] > 0
    assert set(end["exit_codes"].values()) == {0}
    assert all(agent_log(tdir, r).stat().st_size > 0 for r in range(4))
    assert FAILED in placed["cut"]                                     # the fault hits a tunnel
    assert shard["wrong"] == 0 and shard["completion"]["complete"]
    assert set(shard) == set(single)
    assert shard["detect_s"] is not None and shard["false_retirements"]["count"] == 0
    assert {(e["rank"], e["peer"]) for e in shard["evs_crossing_fault"]}
    cpu = shard["fidelity"]["cpu_busy"]
    assert cpu["machines"] == 3 and "the busiest machine's CPU" in cli.stdout   # the runner's, both servers'
    ratio = shard["avg_busbw_mbit_per_s"] / single["avg_busbw_mbit_per_s"]
    print(f"busbw over SSH workers/single: {ratio:.3f}; detect {shard['detect_s']:.3f} s vs "
          f"{single['detect_s']:.3f} s; bring-up {next(e for e in events if e['kind'] == 'fabric')['timings']}")
    assert 0.95 <= ratio <= 1.05
    assert wait_for(lambda: net_namespaces() <= ns_before, 15)
    assert root_interfaces() <= if_before
    assert not any(os.path.exists(f"/proc/{pid}") for pid in spawned["pids"].values())


def test_a_runner_killed_mid_run_leaves_nothing_on_the_servers(tmp_path, standins):
    """SIGKILL of ``testbed run --servers`` while the agents run: every worker sees its SSH
    channel close and stops its agents, removes its work directory and tears its shard down."""
    import glob
    import signal
    import time
    under, servers_path = standins
    ns_before, workdirs_before = baseline(under), set(glob.glob("/tmp/mrc-worker-*"))
    proc = subprocess.Popen(run_over_ssh(tmp_path, under, servers_path,
                                         SCENARIO.replace("iterations: 5", "iterations: 40")), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen.append(line)
            if not line or "all ranks ready: start" in line:
                break
        assert "all ranks ready: start" in seen[-1], "".join(seen)[-3000:]
        time.sleep(1.0)                                   # the passage of time: the workload runs on both servers
    finally:
        os.kill(proc.pid, signal.SIGKILL)                 # `ip netns exec` execs the runner: this is it
        proc.wait()
    events = next((tmp_path / "runs").iterdir()) / "mrc" / "events.jsonl"
    spawned = next(json.loads(line) for line in events.read_text().splitlines() if '"spawned"' in line)
    pids = list(spawned["pids"].values())
    assert len(pids) == 4
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), 15), "agents left running"
    assert wait_for(lambda: net_namespaces() <= ns_before, 15), "shards left behind"
    assert wait_for(lambda: set(glob.glob("/tmp/mrc-worker-*")) <= workdirs_before, 15), \
        "work directories left behind"                    # removed after the shard
