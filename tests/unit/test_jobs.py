"""Scenario -> agent job specs: ring neighbours, mirrored EVs, ECMP entropy, valid specs."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agents.jobspec import parse_job
from testbed.jobs import QP_DEFAULTS, build_jobs, mirrored_evs
from testbed.kernel import KernelFeatures
from testbed.spec import load_scenario

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def scenario():
    feats = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
    return load_scenario(DATA / "scenario-ok.yaml", features=feats)


@pytest.mark.parametrize("transport", ["mrc", "rc", "tcp"])
def test_every_job_parses_and_forms_a_ring(scenario, transport):
    jobs = build_jobs(scenario, transport, run_id="r", control_socket="/tmp/c.sock")
    hosts = list(scenario.workload.hosts)
    assert [j["host"] for j in jobs] == hosts
    for r, job in enumerate(jobs):
        spec = parse_job(job, f"rank {r}")
        assert spec.next.host == hosts[(r + 1) % len(hosts)]
        assert spec.prev.host == hosts[(r - 1) % len(hosts)]
        assert spec.sizes == scenario.workload.sizes_bytes
        assert job["qp"]["timeout"] == QP_DEFAULTS["timeout"]


def test_mrc_evs_reach_the_next_rank_and_sacks_mirror_the_previous_ranks_paths(scenario):
    topo = scenario.topology
    jobs = build_jobs(scenario, "mrc", run_id="r", control_socket="/tmp/c.sock")
    n = len(jobs)
    for r, job in enumerate(jobs):
        prev = jobs[(r - 1) % n]
        fwd = {e["ev_id"]: e for e in prev["next"]["evs"]}        # prev -> us
        back = {e["ev_id"]: e for e in job["prev"]["evs"]}         # us -> prev, same ids
        assert fwd.keys() == back.keys()
        assert len(fwd) == min(len(topo.evs(prev["host"], job["host"])), scenario.workload.evs)
        for ev_id, e in fwd.items():
            assert back[ev_id]["links"] == list(reversed(e["links"]))


def test_mirror_ends_at_the_source(scenario):
    topo = scenario.topology
    src, dst = "h0_0_0", "h3_1_1"
    src_usid = format(topo.nics[src][0].usid, "x")
    fwd_evs = topo.evs(src, dst)
    backs = mirrored_evs(topo, src, dst, None)
    assert len(backs) == len(fwd_evs) == 4
    for fwd, back in zip(fwd_evs, backs):
        assert back["ev_id"] == fwd.ev_id
        assert back["links"] == list(reversed(fwd.links))
        assert src_usid in back["address"].split(":")           # the uSID path ends at src's NIC


def test_rc_uses_one_ecmp_ev_with_distinct_source_ports(scenario):
    jobs = build_jobs(scenario, "rc", run_id="r", control_socket="/tmp/c.sock")
    ports = [j["next"]["evs"][0]["src_port"] for j in jobs]
    assert all(len(j["next"]["evs"]) == 1 for j in jobs)
    assert len(set(ports)) == len(ports) and all(49152 <= p <= 65535 for p in ports)
    topo = scenario.topology
    for j in jobs:
        assert j["next"]["evs"][0]["address"] == str(topo.nics[j["next"]["host"]][0].address)
    again = build_jobs(scenario, "rc", run_id="r", control_socket="/tmp/c.sock")
    assert [j["next"]["evs"][0]["src_port"] for j in again] == ports      # seeded


def test_qp_overrides_and_unknown_transport(scenario):
    jobs = build_jobs(scenario, "mrc", run_id="r", control_socket="/tmp/c.sock", qp_overrides={"timeout": 12})
    assert jobs[0]["qp"]["timeout"] == 12
    with pytest.raises(ValueError, match="unknown transport"):
        build_jobs(scenario, "ib", run_id="r", control_socket="/tmp/c.sock")
    smaller = replace(scenario, workload=replace(scenario.workload, evs=2))
    assert all(len(j["next"]["evs"]) <= 2 for j in build_jobs(smaller, "mrc", run_id="r", control_socket="x"))


def test_multi_plane_hosts_have_one_nic_per_plane_and_mrc_sizes_nscc_to_all(tmp_path):
    """leaf-spine-2plane: a host has 2 x 20 Mbit/s NICs. MRC sprays over both planes, so its NSCC
    rate is 40 Mbit/s; rc and tcp use one NIC (20 Mbit/s). busbw is compared with 40."""
    from testbed.jobs import host_bandwidth_bps, host_link_rate_bps
    feats = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
    repo = Path(__file__).resolve().parents[2]
    path = tmp_path / "s.yaml"
    path.write_text(f"topology: {repo}/topologies/leaf-spine-2plane.yaml\ntransports: [mrc, rc]\nseed: 1\n"
                    "timeout: 30s\nworkload: {collective: all_reduce, hosts: all, min_bytes: 1MiB, "
                    "max_bytes: 1MiB, factor: 2, iterations: 1, warmup: 0}\n")
    sc = load_scenario(path, features=feats)
    assert (host_link_rate_bps(sc), host_bandwidth_bps(sc)) == (20_000_000, 40_000_000)
    mrc = build_jobs(sc, "mrc", run_id="r", control_socket="x")
    rc = build_jobs(sc, "rc", run_id="r", control_socket="x")
    assert mrc[0]["qp"]["cc_params"]["rate_bps"] == 40_000_000
    assert rc[0]["qp"]["cc_params"]["rate_bps"] == 20_000_000
    first_links = {ev["links"][0] for ev in mrc[0]["next"]["evs"]}       # the NIC's host link
    assert first_links == {nic.link for nic in sc.topology.nics[mrc[0]["host"]]}  # both planes used
