"""Scenario -> agent job specs: peers per collective, mirrored EVs, ECMP entropy, RC QPs per
connection, EVs beyond paths, rank orders, valid specs."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agents.jobspec import parse_job
from testbed.spec.jobs import QP_DEFAULTS, build_jobs, mirrored_evs, qp_timeout
from testbed.model.kernel import KernelFeatures
from testbed.spec import load_scenario
from testbed.fabric.kernel import features

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]


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
        assert [p.host for p in spec.send_to] == [hosts[(r + 1) % len(hosts)]]
        assert [p.host for p in spec.recv_from] == [hosts[(r - 1) % len(hosts)]]
        assert spec.sizes == scenario.workload.sizes_bytes
        assert job["qp"]["timeout"] == qp_timeout(job["qp"]["cc_params"]["base_rtt_s"])
        assert {k: job["qp"][k] for k in QP_DEFAULTS} == QP_DEFAULTS


def test_mrc_evs_reach_the_next_rank_and_sacks_mirror_the_previous_ranks_paths(scenario):
    topo = scenario.topology
    jobs = build_jobs(scenario, "mrc", run_id="r", control_socket="/tmp/c.sock")
    n = len(jobs)
    for r, job in enumerate(jobs):
        prev = jobs[(r - 1) % n]
        fwd = {e["ev_id"]: e for e in prev["send_to"][0]["evs"]}        # prev -> us
        back = {e["ev_id"]: e for e in job["recv_from"][0]["evs"]}       # us -> prev, same ids
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
    ports = [j["send_to"][0]["evs"][0]["src_port"] for j in jobs]
    assert all(len(j["send_to"][0]["evs"]) == 1 for j in jobs)
    assert len(set(ports)) == len(ports) and all(49152 <= p <= 65535 for p in ports)
    topo = scenario.topology
    for j in jobs:
        assert j["send_to"][0]["evs"][0]["address"] == str(topo.nics[j["send_to"][0]["host"]][0].address)
    again = build_jobs(scenario, "rc", run_id="r", control_socket="/tmp/c.sock")
    assert [j["send_to"][0]["evs"][0]["src_port"] for j in again] == ports      # seeded
    # a ring keeps the ports it always had: random.sample's draws of n ports, in rank order
    import random
    assert ports == [49152 + j for j in random.Random(f"{scenario.seed}:ecmp").sample(range(65535 - 49152),
                                                                                       len(jobs))]


def test_qp_overrides_and_unknown_transport(scenario):
    jobs = build_jobs(scenario, "mrc", run_id="r", control_socket="/tmp/c.sock", qp_overrides={"timeout": 12})
    assert jobs[0]["qp"]["timeout"] == 12
    with pytest.raises(ValueError, match="not a transport"):
        build_jobs(scenario, "ib", run_id="r", control_socket="/tmp/c.sock")
    smaller = replace(scenario, workload=replace(scenario.workload, evs=2))
    assert all(len(j["send_to"][0]["evs"]) <= 2 for j in build_jobs(smaller, "mrc", run_id="r", control_socket="x"))


def test_multi_plane_hosts_have_one_nic_per_plane_and_mrc_sizes_nscc_to_all(tmp_path):
    """leaf-spine-2plane: a host has 2 x 20 Mbit/s NICs. MRC sprays over both planes, so its NSCC
    rate is 40 Mbit/s; rc and tcp use one NIC (20 Mbit/s). busbw is compared with 40."""
    from testbed.spec.jobs import host_bandwidth_bps, host_link_rate_bps
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
    first_links = {ev["links"][0] for ev in mrc[0]["send_to"][0]["evs"]}       # the NIC's host link
    assert first_links == {nic.link for nic in sc.topology.nics[mrc[0]["host"]]}  # both planes used


def _with(scenario, **workload):
    wl = replace(scenario.workload, **workload)
    if wl.collective == "permutation" and wl.targets is None:
        from agents.collectives import derangement
        wl = replace(wl, targets=tuple(derangement(scenario.seed, len(wl.hosts))))
    return replace(scenario, workload=wl)


@pytest.mark.parametrize("transport", ["mrc", "rc", "rc-x4", "tcp"])
@pytest.mark.parametrize("collective", ["all_to_all", "permutation", "all_gather"])
def test_peers_follow_the_collective_and_every_job_parses(scenario, transport, collective):
    from agents.collectives import peers
    sc = _with(scenario, collective=collective)
    jobs = build_jobs(sc, transport, run_id="r", control_socket="/tmp/c.sock")
    n = len(jobs)
    for r, job in enumerate(jobs):
        spec = parse_job(job, f"rank {r}")
        send_to, recv_from = peers(collective, r, n, sc.workload.targets)
        assert [p.rank for p in spec.send_to] == list(send_to)
        assert [p.rank for p in spec.recv_from] == list(recv_from)
        assert spec.collective == collective
    if transport.startswith("rc"):   # every QP of the whole collective has its own entropy port
        ports = [ev["src_port"] for j in jobs for p in j["send_to"] for ev in p["evs"]]
        assert len(set(ports)) == len(ports) == sum(len(j["send_to"]) for j in jobs) * (4 if "x4" in transport else 1)
        # the receiver's view of each QP's port is the sender's
        by_conn = {(j["rank"], p["rank"]): [e["src_port"] for e in p["evs"]] for j in jobs for p in j["send_to"]}
        for j in jobs:
            for p in j["recv_from"]:
                assert [e["src_port"] for e in p["evs"]] == by_conn[(p["rank"], j["rank"])]


def test_rc_variant_stripes_over_n_qps(scenario):
    jobs = build_jobs(scenario, "rc-x8", run_id="r", control_socket="/tmp/c.sock")
    assert all(j["transport"] == "rc" and j["qps"] == 8 for j in jobs)
    assert all([e["ev_id"] for e in j["send_to"][0]["evs"]] == list(range(8)) for j in jobs)
    # QP 0 keeps rc x1's port: rc-x8 adds QPs, it does not move the first one
    x1 = build_jobs(scenario, "rc", run_id="r", control_socket="/tmp/c.sock")
    assert [j["send_to"][0]["evs"][0]["src_port"] for j in jobs] == [j["send_to"][0]["evs"][0]["src_port"] for j in x1]
    with pytest.raises(ValueError, match="rc-x<N>"):
        build_jobs(scenario, "rc-x0", run_id="r", control_socket="/tmp/c.sock")


def test_evs_per_qp_reuses_paths_round_robin(scenario):
    topo = scenario.topology
    sc = _with(scenario, evs=None, evs_per_qp=10)
    jobs = build_jobs(sc, "mrc", run_id="r", control_socket="/tmp/c.sock")
    n = len(jobs)
    for r, job in enumerate(jobs):
        evs = job["send_to"][0]["evs"]
        paths = topo.evs(job["host"], job["send_to"][0]["host"])
        assert [e["ev_id"] for e in evs] == list(range(10))
        assert [e["links"] for e in evs] == [list(paths[k % len(paths)].links) for k in range(10)]
        back = {e["ev_id"]: e for e in jobs[(r + 1) % n]["recv_from"][0]["evs"]}
        assert all(back[e["ev_id"]]["links"] == list(reversed(e["links"])) for e in evs)


def test_several_jobs_get_distinct_agents_ports_and_entropy(scenario):
    from testbed.spec.jobs import build_all_jobs
    ring = replace(scenario.workload, name="ring", hosts=scenario.workload.hosts[:8])
    perm = _with(scenario, name="perm", collective="permutation", hosts=scenario.workload.hosts[8:]).workload
    sc = replace(scenario, workload=ring, jobs=(ring, perm))
    jobs = build_all_jobs(sc, "rc", run_id="r", control_socket="/tmp/c.sock")
    assert [j["agent"] for j in jobs] == list(range(16))
    assert [j["job"] for j in jobs] == ["ring"] * 8 + ["perm"] * 8
    assert {j["port"] for j in jobs[:8]} == {4791} and {j["port"] for j in jobs[8:]} == {4792}
    assert [j["rank"] for j in jobs] == list(range(8)) * 2
    for j in jobs:
        parse_job(j, f"agent {j['agent']}")
    ports = [e["src_port"] for j in jobs for p in j["send_to"] for e in p["evs"]]
    assert len(set(ports)) == len(ports)   # salted per job: no two QPs share an entropy port
    from testbed.fabric.paths import job_flows
    labels = [f.label for f in job_flows(jobs, sc.topology)]
    assert "ring: rc 0->1" in labels and any(lab.startswith("perm: rc ") for lab in labels)


def test_the_qp_timeout_follows_the_fabrics_base_rtt():
    """At the paper's ratio (33 base RTTs): 20 (1.07 s) on fat-tree-k4 at 5 Mbit/s (43.5 ms base
    RTT), 19 (0.54 s) at 10; ``qp.rto_base_rtts: 1.5`` gives issue 11's 16 and 15; never below
    MIN_QP_TIMEOUT however fast the fabric; a qp override wins."""
    from testbed.spec.jobs import MIN_QP_TIMEOUT
    from testbed.model.generators import fat_tree
    from testbed.model.topology import LinkParams

    for rate, paper, short in ((5_000_000, 20, 16), (10_000_000, 19, 15), (1_000_000_000, 16, MIN_QP_TIMEOUT)):
        lp = LinkParams(rate, 32, mtu=9000)
        sc = replace(load_scenario(REPO / "scenarios/baseline.yaml", features=features()), topology=fat_tree(4, host_link=lp, fabric_link=lp))
        jobs = build_jobs(sc, "mrc", run_id="r", control_socket="/tmp/c.sock")
        assert {j["qp"]["timeout"] for j in jobs} == {paper}, rate
        jobs = build_jobs(replace(sc, qp=(("rto_base_rtts", 1.5),)), "mrc", run_id="r", control_socket="/tmp/c.sock")
        assert {j["qp"]["timeout"] for j in jobs} == {short}, rate
        assert all("rto_base_rtts" not in j["qp"] for j in jobs)   # a scenario key, not a QP attribute
    jobs = build_jobs(sc, "rc", run_id="r", control_socket="/tmp/c.sock", qp_overrides={"timeout": 12})
    assert {j["qp"]["timeout"] for j in jobs} == {12}


def test_the_sack_hold_coalesces_two_frames_within_a_quarter_of_the_rto_floor():
    """ack_coalesce_s: 1.5 data-frame times of the flow's rate (a full-rate flow's next packet
    shares the SACK), at most a quarter of the RTO floor; min_rto_s 0 leaves the floor to the
    mrc.h timeout; a QP brought up with every job's parameters accepts them, and one with a
    hold above the bound is refused."""
    import random

    from agents.mrc import QP, QPAttr, QPConfig, bring_up
    from agents.mrc.rto import mrc_timeout_s
    from testbed.spec.jobs import ack_coalesce_s, job_mtu
    from testbed.model.generators import fat_tree
    from testbed.model.topology import LinkParams

    assert ack_coalesce_s(4212, 10e6, mrc_timeout_s(15)) == pytest.approx(1.5 * 4212 * 8 / 10e6, abs=1e-6)
    assert ack_coalesce_s(9014, 1e6, mrc_timeout_s(16)) == pytest.approx(0.25 * mrc_timeout_s(16), abs=1e-6)
    for rate in (5_000_000, 10_000_000, 20_000_000):
        lp = LinkParams(rate, 32, mtu=9000)
        sc = replace(load_scenario(REPO / "scenarios/baseline.yaml", features=features()), topology=fat_tree(4, host_link=lp, fabric_link=lp))
        frame = job_mtu(sc) + 14
        for transport in ("mrc", "rc"):
            for r, job in enumerate(build_jobs(sc, transport, run_id="r", control_socket="/tmp/c.sock")):
                assert job["qp"]["min_rto_s"] == 0.0 and "ack_delay_s" not in job["qp"]
                assert job["qp"]["ack_coalesce_s"] == pytest.approx(1.5 * frame * 8 / rate, abs=1e-6)
            spec = parse_job(job, f"rank {r}")
            qp = QP(1, rng=random.Random(1), config=QPConfig(**spec.qp_config_kwargs()))
            bring_up(qp, 0.0, evs=[0], dest_qpn=2, attr=QPAttr(**spec.qp_attr_kwargs()))
    spec = parse_job({**job, "qp": {**job["qp"], "ack_coalesce_s": 0.3 * mrc_timeout_s(job["qp"]["timeout"])}})
    with pytest.raises(ValueError, match="ack_coalesce_s=.* exceeds 0.25"):
        bring_up(QP(1, rng=random.Random(1), config=QPConfig(**spec.qp_config_kwargs())), 0.0, evs=[0],
                 dest_qpn=2, attr=QPAttr(**spec.qp_attr_kwargs()))


@pytest.mark.parametrize("transport", ["mrc", "rc-x4", "tcp"])
@pytest.mark.parametrize("collective", ["all_reduce", "permutation"])
def test_job_specs_round_trip_through_their_dict(scenario, transport, collective):
    """The runner builds :class:`agents.jobspec.JobSpec` objects and writes their ``to_dict()``:
    what the agent parses is the object the runner built, and back."""
    from testbed.spec.jobs import build_all_jobs, build_job_specs
    sc = _with(scenario, collective=collective)
    specs = build_job_specs(sc, transport, run_id="r", control_socket="/tmp/c.sock")
    for spec in specs:
        assert parse_job(spec.to_dict()) == spec
        assert parse_job(spec.to_dict()).to_dict() == spec.to_dict()
    for job in build_all_jobs(sc, transport, run_id="r", control_socket="/tmp/c.sock"):
        assert parse_job(job).to_dict() == job
    assert ("targets" in specs[0].to_dict()) == (collective == "permutation")


def test_the_run_directory_schema_of_a_job_names_only_job_spec_fields():
    import dataclasses

    from agents.jobspec import JobSpec
    from testbed.rundir.schemas import JOB
    assert set(JOB.required) | set(JOB.optional) <= {f.name for f in dataclasses.fields(JobSpec)}
    assert not {"next", "prev"} & (set(JOB.required) | set(JOB.optional))


def test_ack_coalesce_hold_never_exceeds_the_rto_bound():
    """Rounded to whole microseconds after the clamp, the hold used to land above the bound that
    QPConfig.check_ack_delay enforces (an 8 KiB frame at 10 Mbit/s, timeout 15: 8389 us > 8388.608
    us), and the QP refused RTS."""
    from agents.mrc.rto import mrc_timeout_s
    from agents.mrc.types import MAX_ACK_DELAY_RTO_FRACTION, QPConfig
    from testbed.spec.jobs import ack_coalesce_s
    floor = mrc_timeout_s(15)
    hold = ack_coalesce_s(8192 + 200, 10e6, floor)
    assert hold <= MAX_ACK_DELAY_RTO_FRACTION * floor and hold == 0.008388
    QPConfig(ack_coalesce_s=hold).check_ack_delay(floor)
    # below the bound the hold is the frames' time, rounded to 1 us as before
    from testbed.spec.jobs import ACK_COALESCE_FRAMES
    assert ack_coalesce_s(1500, 10e6, floor) == round(ACK_COALESCE_FRAMES * 1500 * 8 / 10e6, 6)


@pytest.mark.parametrize("transport", ["mrc", "rc", "rc-dcqcn"])
def test_link_delays_reach_every_route_and_the_base_rtt(transport):
    """fat-tree-k4 with 1 ms host links and 3 ms fabric links: an EV's delay is the sum of its
    links' (2 ms within an edge switch, 2 + 2 x 3 = 8 ms within a pod, 2 + 4 x 3 = 14 ms across
    pods), its mirror's the same; RC's ECMP routes carry the same per host pair; the base RTT
    gains twice the longest path's."""
    from testbed.model.generators import fat_tree
    from testbed.model.topology import LinkParams
    from testbed.spec.jobs import base_rtt_s

    plain = LinkParams(10_000_000, 32, mtu=9000)
    host, fabric = replace(plain, delay_s=0.001), replace(plain, delay_s=0.003)
    base = load_scenario(REPO / "scenarios/baseline.yaml", features=features())
    sc = replace(base, topology=fat_tree(4, host_link=host, fabric_link=fabric))
    topo = sc.topology
    jobs = build_jobs(sc, transport, run_id="r", control_socket="/tmp/c.sock")
    want = {2: 0.002, 4: 0.008, 6: 0.014}   # links on the path -> one-way delay
    seen = set()
    for job in jobs:
        spec = parse_job(job, job["host"])
        for peer in (*spec.send_to, *spec.recv_from):
            hops = len(topo.evs(spec.host, peer.host)[0].links)
            for ev in (*peer.evs, *peer.backup_evs):
                assert ev.delay_s == pytest.approx(want[hops]), (spec.host, peer.host, ev)
                seen.add(hops)
    assert seen == {2, 4, 6}   # the ring crosses an edge switch, a pod and the core
    longest = max((ev.links for ev in topo.evs("h0_0_0", "h3_1_1")), key=len)
    rtt = jobs[0]["qp"]["cc_params"]["base_rtt_s"]
    assert rtt == pytest.approx(round(base_rtt_s(topo, longest, jobs[0]["mtu"]), 6))
    undelayed = build_jobs(base, transport, run_id="r", control_socket="/tmp/c.sock")
    assert rtt - undelayed[0]["qp"]["cc_params"]["base_rtt_s"] == pytest.approx(2 * 0.014, abs=2e-6)


def test_kernel_tcp_gets_no_delay_line_and_no_propagation_in_its_rtt():
    from testbed.model.generators import fat_tree
    from testbed.model.topology import LinkParams

    lp = LinkParams(10_000_000, 32, mtu=9000)
    base = load_scenario(REPO / "scenarios/baseline.yaml", features=features())
    delayed = replace(base, topology=fat_tree(4, host_link=replace(lp, delay_s=0.002),
                                              fabric_link=replace(lp, delay_s=0.002)))
    undelayed = replace(base, topology=fat_tree(4, host_link=lp, fabric_link=lp))
    jobs = build_jobs(delayed, "tcp", run_id="r", control_socket="/tmp/c.sock")
    plain = build_jobs(undelayed, "tcp", run_id="r", control_socket="/tmp/c.sock")
    assert jobs[0]["qp"]["cc_params"]["base_rtt_s"] == plain[0]["qp"]["cc_params"]["base_rtt_s"]
    assert all("delay_s" not in ev for j in jobs for p in j["send_to"] + j["recv_from"] for ev in p["evs"])


def test_ecmp_paths_of_unequal_delay_are_refused():
    from testbed.model.generators import fat_tree
    from testbed.model.topology import LinkParams
    from testbed.spec.jobs import ecmp_delay_s

    lp = LinkParams(10_000_000, 32, mtu=9000)
    topo = fat_tree(4, host_link=lp, fabric_link=lp)
    slow = next(link for link in topo.links if link.cls == "fabric")
    topo = replace(topo, links=tuple(replace(link, params=replace(lp, delay_s=0.01)) if link is slow else link
                                     for link in topo.links))
    src, dst = "h0_0_0", "h3_1_1"
    with pytest.raises(ValueError, match="differ in delay"):
        ecmp_delay_s(topo, src, dst)


def test_oblivious_ev_paths_keep_the_ev_count_and_collide_as_hashing_would(scenario):
    """``ev_paths: oblivious``: every QP keeps the EV count ``spread`` gives, ids 0..n-1, but its
    EVs' paths are drawn by hash (some pairs then share a path), the same for the same seed and
    another for another seed; the SACK paths still mirror the sender's EV for EV."""
    sc = replace(scenario, workload=replace(scenario.workload, evs=None, evs_per_qp=8))
    hashed = replace(sc, workload=replace(sc.workload, ev_paths="oblivious"))

    def paths(s):
        return {(j["host"], p["host"]): [tuple(e["links"]) for e in p["evs"]]
                for j in build_jobs(s, "mrc", run_id="r", control_socket="/tmp/c.sock") for p in j["send_to"]}

    even, obl = paths(sc), paths(hashed)
    assert even.keys() == obl.keys()
    assert all(len(obl[k]) == len(even[k]) == 8 for k in even)
    # spread: 8 EVs over 4 cross-pod paths, each path twice; hashed: some paths 3+ times, some unused
    crossing = [k for k in even if len(set(even[k])) == 4]
    assert crossing and any(len(set(obl[k])) < 4 for k in crossing)
    assert obl == paths(hashed)
    assert obl != paths(replace(hashed, seed=hashed.seed + 1))
    jobs = build_jobs(hashed, "mrc", run_id="r", control_socket="/tmp/c.sock")
    by_host = {j["host"]: j for j in jobs}
    for j in jobs:
        for p in j["send_to"]:
            back = next(q for q in by_host[p["host"]]["recv_from"] if q["host"] == j["host"])
            assert [e["ev_id"] for e in back["evs"]] == [e["ev_id"] for e in p["evs"]]
            assert [list(reversed(e["links"])) for e in back["evs"]] == [e["links"] for e in p["evs"]]
            assert "backup_evs" not in p or not p["backup_evs"]


def test_the_scenario_qp_settings_reach_every_qp(scenario):
    """``qp: {loss_inference: false, ecn: false}`` lands in every mrc and rc job's ``qp`` (parsed
    by the agents: :func:`agents.jobspec.parse_job`), and ``ecn: false`` wins over the fabric's
    marking default."""
    sc = replace(scenario, qp=(("loss_inference", False), ("ecn", False)))
    for transport in ("mrc", "rc"):
        for job in build_jobs(sc, transport, run_id="r", control_socket="/tmp/c.sock"):
            assert job["qp"]["loss_inference"] is False and job["qp"]["ecn"] is False
            parse_job(job, "rank")


@pytest.mark.parametrize("transport", ["mrc", "rc-dcqcn"])
def test_a_done_agent_lingers_past_its_upstreams_whole_retry_ladder(transport):
    """random-loss at 1% on the BDP-64 fabric (2026-11-29, seed 3): rank 1 was done and left 2 s
    later, its last SACK lost; rank 0's retransmissions came one RTO (2.2 s) after and went
    unanswered until ERR. An agent must still answer until its upstream can retry no more."""
    from agents.mrc.rto import MAX_RTO_S, mrc_timeout_s
    from testbed.spec.jobs import build_all_jobs
    sc = load_scenario(REPO / "scenarios/paper/random-loss.yaml", features=features())
    for job in build_all_jobs(sc, transport, run_id="r", control_socket="-"):
        qp = job["qp"]
        floor = mrc_timeout_s(qp["timeout"])     # the RTO's least value (agents/mrc/rto.py)
        linear, exp = qp["retry_linear"], qp["retry_exp"]
        ladder = sum(floor if k <= linear else min(floor * 2 ** (k - linear), max(MAX_RTO_S, floor))
                     for k in range(linear + exp + 1))
        assert job["linger_s"] >= ladder > 2.0, (job["rank"], job["linger_s"], ladder)
