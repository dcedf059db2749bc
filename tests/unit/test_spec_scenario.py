"""Scenario files: resolution (links, selectors, hosts, sizes) and a table of bad files."""

import json
import textwrap
from pathlib import Path

import pytest

from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, load_scenario

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
K4 = ROOT / "topologies" / "fat-tree-k4.yaml"

HEAD = f"""
    topology: {K4}
    transports: [mrc, rc]
    seed: 7
    timeout: 60s
    workload:
      collective: all_reduce
      hosts: all
      min_bytes: 1KiB
      max_bytes: 4KiB
      factor: 2
      iterations: 2
      warmup: 0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems(path: Path, features: KernelFeatures = FEATURES) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_scenario(path, features=features)
    return [str(p) for p in info.value.problems]


def test_fixture_resolves_every_action():
    s = load_scenario(DATA / "scenario-ok.yaml", features=FEATURES)
    assert (s.name, s.seed, s.timeout_s, s.reconverge_after_s) == ("core-link-failure-test", 1, 120.0, 2.0)
    assert s.transports == ("mrc", "rc", "tcp") and s.topology.name == "fat-tree-k4"
    assert len(s.workload.hosts) == 16 and s.workload.sizes_bytes == (2**20, 2**21, 2**22)
    assert (s.workload.evs, s.workload.mtu, s.workload.measured_iterations) == (8, 1500, 15)
    down, up, flap, loss, rate, blackhole = s.timeline
    assert (down.action, down.link, down.at_s) == ("link_down", "a0_0-c0_0", 2.5)
    assert (up.link, up.at_iteration, up.after_s, up.at_s) == ("a0_0-c0_0", 4, 0.05, None)  # reversed name
    assert flap.selector == "random aggregation-core" and (flap.period_s, flap.count) == (0.5, 4)
    assert {s.topology.nodes[n].role.value for n in (flap.link.split("-"))} == {"aggregation", "core"}
    assert (loss.loss_pct, loss.duration_s) == (1.0, 5.0)
    assert (rate.rate_bps, rate.duration_s) == (5_000_000, 2.0)
    assert (blackhole.link, blackhole.duration_s) == ("a0_0-c0_0", 1.0)
    json.dumps(s.to_dict())


def test_selector_is_deterministic_per_seed(tmp_path):
    text = HEAD + """
    timeline:
      - {at: 1s, link_down: random aggregation-core}
      - {at: 2s, link_down: random edge-aggregation}
      - {at: 3s, link_down: random host-edge}
    """
    first = load_scenario(write(tmp_path, text), features=FEATURES)
    again = load_scenario(write(tmp_path, text), features=FEATURES)
    assert [e.link for e in first.timeline] == [e.link for e in again.timeline]
    seeds = {tuple(e.link for e in load_scenario(write(tmp_path, text.replace("seed: 7", f"seed: {n}")),
                                                 features=FEATURES).timeline) for n in range(8)}
    assert len(seeds) > 1


def test_a_link_set_names_every_link_or_every_link_between_two_roles(tmp_path):
    text = HEAD + """
    timeline:
      - {at: 1s, loss: {link: all, percent: 1%}}
      - {at: 1s, loss: {link: all edge-aggregation, percent: 0.1%, duration: 2s}}
      - {at: 1s, rate: {link: all host-edge, rate: 1Mbit}}
    """
    s = load_scenario(write(tmp_path, text), features=FEATURES)
    every, edge_agg, hosts = s.timeline
    assert every.link is None and every.selector == "all" and len(every.links) == 48
    assert every.links == tuple(sorted(l.name for l in s.topology.links))
    roles = {tuple(sorted(s.topology.nodes[n].role.value for n in l.split("-"))) for l in edge_agg.links}
    assert roles == {("aggregation", "edge")} and len(edge_agg.links) == 16 and edge_agg.duration_s == 2.0
    assert len(hosts.links) == 16 and hosts.rate_bps == 1_000_000
    json.dumps(s.to_dict())


def test_a_link_set_is_refused_where_one_link_is_meant(tmp_path):
    text = HEAD + """
    timeline:
      - {at: 1s, link_down: all}
      - {at: 1s, loss: {link: all, percent: 1%, direction: "a0_0->c0_0"}}
      - {at: 1s, loss: {link: all edge-planet, percent: 1%}}
    """
    assert problems(write(tmp_path, text)) == [
        f"{tmp_path / 's.yaml'}:15: timeline[0].link_down: 'all': a link set is for loss, rate, blackhole; "
        "give one link",
        f"{tmp_path / 's.yaml'}:16: timeline[1].loss.direction: a one-way loss needs one link, not the link "
        "set 'all'",
        f"{tmp_path / 's.yaml'}:17: timeline[2].loss.link: selector 'all edge-planet' is not 'all <role>-<role>' "
        "(roles: host, edge, aggregation, core, leaf, spine)"]


def test_topology_relative_to_scenario_dir_then_cwd(tmp_path, monkeypatch):
    (tmp_path / "topos").mkdir()
    (tmp_path / "topos" / "t.yaml").write_text(K4.read_text())
    path = write(tmp_path, HEAD.replace(str(K4), "topos/t.yaml"))
    assert load_scenario(path, features=FEATURES).topology.name == "fat-tree-k4"
    monkeypatch.chdir(ROOT)
    other = tmp_path / "sub"
    other.mkdir()
    (other / "s.yaml").write_text(textwrap.dedent(HEAD.replace(str(K4), "topologies/tiny.yaml")))
    assert load_scenario(other / "s.yaml", features=FEATURES).topology.name == "tiny"


def test_explicit_hosts_list(tmp_path):
    path = write(tmp_path, HEAD.replace("hosts: all", "hosts: [h0_0_0, h1_0_0, h2_0_0]"))
    assert load_scenario(path, features=FEATURES).workload.hosts == ("h0_0_0", "h1_0_0", "h2_0_0")


BAD = [
    ("unknown keys", HEAD + """
    colour: blue
    """, ["14: colour: unknown key (allowed: topology, transports, name, description, seed, timeout, "
          "reconverge_after, timeline, trials, workload, jobs, agent_processes, agent_realtime, engine, controller, qp, sweep)"]),
    ("transports", HEAD.replace("[mrc, rc]", "[mrc, roce, mrc]"),
     ["2: transports[1]: 'roce' is not a transport (mrc, rc, tcp, or rc-x<N> for RC with N QPs per connection, "
      "rc-dcqcn[-x<N>] for RC with DCQCN, 1 <= N <= 64; a command job's: gloo-tcp, mrc)", "2: transports[2]: duplicate transport 'mrc'"]),
    ("no transports", HEAD.replace("[mrc, rc]", "[]"), ["2: transports: must name at least one of mrc, rc, tcp"]),
    ("units", HEAD.replace("60s", "60").replace("1KiB", "1 KiB"),
     ["4: timeout: 60 is not a duration (examples: 50us, 10ms, 2.5s, 1m)",
      "8: workload.min_bytes: '1 KiB' is not a size (examples: 4096, 64KiB, 1MiB, 1MB)"]),
    ("workload ranges", HEAD.replace("factor: 2", "factor: 1").replace("max_bytes: 4KiB", "max_bytes: 512")
     .replace("hosts: all", "hosts: [h0_0_0]").replace("warmup: 0", "warmup: -1\n      mtu: 9999999\n      gpus: 8"),
     ["7: workload.hosts: a collective needs >= 2 hosts, got 1",
      "9: workload.max_bytes: 512 is below min_bytes (1KiB)", "10: workload.factor: must be >= 2, got 1",
      "12: workload.warmup: must be >= 0, got -1",
      "13: workload.mtu: must be <= 65535, got 9999999",
      "14: workload.gpus: unknown key (allowed: hosts, collective, min_bytes, max_bytes, command, steps, env, "
      "factor, iterations, warmup, evs, evs_per_qp, ev_paths, mtu, payload, order)"]),
    ("qp and ev_paths", HEAD.replace("warmup: 0", "warmup: 0\n      ev_paths: hashed") + """
    qp: {loss_inference: no-way, rto_base_rtts: 0.5, ecn: 1, timeout: 8}
    """, ["13: workload.ev_paths: 'hashed' is not one of spread, oblivious",
          "15: qp.timeout: unknown key (allowed: loss_inference, ecn, rto_base_rtts, nscc_delay_filter, ev_select)",
          "15: qp.loss_inference: expected true or false, got 'no-way'",
          "15: qp.rto_base_rtts: expected a number of base RTTs from 1 to 1000 (the paper's ratio is ~33), got 0.5",
          "15: qp.ecn: expected true or false, got 1"]),
    ("unknown host", HEAD.replace("hosts: all", "hosts: [h0_0_0, h0_0_9, h0_0_0]"),
     ["7: workload.hosts[1]: unknown host 'h0_0_9' (did you mean 'h0_0_1' or 'h0_0_0'?); hosts here are h<pod>_<edge>_<i> "
      "(pod 0-3, edge 0-1, i 0-1)",
      "7: workload.hosts[2]: duplicate host 'h0_0_0'"]),
    ("missing keys", """
    topology: nowhere.yaml
    workload: {collective: reduce}
    """, ["1: missing required key 'transports' (read as a scenario because it has a top-level workload key)",
          "1: topology: topology file 'nowhere.yaml' not found (looked in {dir} and the current directory)",
          "2: workload: missing required key 'hosts'", "2: workload: missing required key 'min_bytes'",
          "2: workload: missing required key 'max_bytes'"]),
    ("unknown link", HEAD + """
    timeline:
      - at: 1s
        link_down: a0_0-c9_9
      - at: 2s
        flap: {link: random spine-core, period: 1s, count: 2}
      - at: 2s
        blackhole: {link: random leaf-spine}
    """, ["16: timeline[0].link_down: unknown link 'a0_0-c9_9' in topology 'fat-tree-k4' "
          "(did you mean 'a0_0-c0_1' or 'a0_0-c0_0'?); links here are h<pod>_<edge>_<i>-e<pod>_<edge> or e<pod>_<i>-a<pod>_<j> "
          "or a<pod>_<i>-c<i>_<j> (either end first)",
          "18: timeline[1].flap.link: no spine-core link in topology 'fat-tree-k4' "
          "(its links: host-edge, edge-aggregation, aggregation-core)",
          "20: timeline[2].blackhole.link: no leaf-spine link in topology 'fat-tree-k4' "
          "(its links: host-edge, edge-aggregation, aggregation-core)"]),
    ("bad selector", HEAD + """
    timeline:
      - {at: 1s, link_up: random pod-core}
    """, ["15: timeline[0].link_up: selector 'random pod-core' is not 'random <role>-<role>' "
          "(roles: host, edge, aggregation, core, leaf, spine)"]),
    ("triggers and actions", HEAD + """
    timeline:
      - {link_down: a0_0-c0_0}
      - {at: 1s, at_iteration: 2, link_down: a0_0-c0_0}
      - {at: 1s, after: 5ms, link_down: a0_0-c0_0}
      - {at: 1s}
      - {at: 1s, link_down: a0_0-c0_0, link_up: a0_0-c0_0}
      - {at: 90s, link_down: a0_0-c0_0}
      - {at_iteration: 6, link_down: a0_0-c0_0}
      - {at: 1s, crash: a0_0}
    """, ["15: timeline[0]: needs exactly one trigger: 'at' or 'at_iteration'",
          "16: timeline[1]: needs exactly one trigger: 'at' or 'at_iteration'",
          "17: timeline[2].after: 'after' goes with 'at_iteration', not 'at'",
          "18: timeline[3]: needs exactly one action (link_down, link_up, switch_down, switch_up, plane_down, plane_up, flap, loss, rate, blackhole, ev_deny, ev_allow, ev_replace), got none",
          "19: timeline[4]: needs exactly one action (link_down, link_up, switch_down, switch_up, plane_down, plane_up, flap, loss, rate, blackhole, ev_deny, ev_allow, ev_replace), "
          "got link_down, link_up",
          "20: timeline[5].at: 90s is not before the timeout (60s)",
          "21: timeline[6].at_iteration: iteration 6 never happens: the workload measures 6 iterations (0..5)",
          "22: timeline[7].crash: unknown key (allowed: at, at_iteration, after, link_down, link_up, switch_down, switch_up, plane_down, plane_up, flap, loss, "
          "rate, blackhole, ev_deny, ev_allow, ev_replace)",
          "22: timeline[7]: needs exactly one action (link_down, link_up, switch_down, switch_up, plane_down, plane_up, flap, loss, rate, blackhole, ev_deny, ev_allow, ev_replace), got none"]),
    ("action params", HEAD + """
    timeline:
      - at: 1s
        flap: {link: a0_0-c0_0, period: 0s, count: 0}
      - at: 1s
        loss: {link: a0_0-c0_0, percent: 120%}
      - at: 1s
        rate: {link: a0_0-c0_0, rate: 5 Mbps, duration: soon, burst: 1}
      - at: 1s
        loss: {percent: 1%}
    """, ["16: timeline[0].flap.period: must be > 0", "16: timeline[0].flap.count: must be >= 1, got 0",
          "18: timeline[1].loss.percent: '120%' is not a percentage between 0 and 100",
          "20: timeline[2].rate.burst: unknown key (allowed: link, rate, duration)",
          "20: timeline[2].rate.rate: '5 Mbps' is not a rate (examples: 10Mbit, 1Gbit)",
          "20: timeline[2].rate.duration: 'soon' is not a duration (examples: 50us, 10ms, 2.5s, 1m)",
          "22: timeline[3].loss: missing required key 'link'"]),
]


@pytest.mark.parametrize("text,expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_scenario_files(tmp_path, text, expected):
    path = write(tmp_path, text)
    assert problems(path) == [f"{path}:{e}".replace("{dir}", str(tmp_path)) for e in expected]


def test_loss_needs_nftables_or_netem(tmp_path):
    path = write(tmp_path, HEAD + """
    timeline:
      - {at: 1s, loss: {link: a0_0-c0_0, percent: 1%}}
    """)
    bare = KernelFeatures(frozenset({"htb"}))
    assert problems(path, bare) == [f"{path}:15: timeline[0].loss: loss needs nftables (numgen) or sch_netem, "
                                    "which this kernel lacks"]


def test_topology_problems_reported_with_their_own_file(tmp_path):
    topo = tmp_path / "bad-topo.yaml"
    topo.write_text("kind: fat-tree\nk: 3\nlink_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}\n")
    path = write(tmp_path, HEAD.replace(str(K4), "bad-topo.yaml").replace("seed: 7", "seed: x"))
    assert problems(path) == [f"{path}:3: seed: expected an integer, got 'x'",
                              f"{topo}:2: k: fat-tree k must be even and >= 2, got 3"]


def _workload(tmp_path: Path, extra: str, transports: str = "[mrc, rc]") -> Path:
    return write(tmp_path, HEAD.replace("transports: [mrc, rc]", f"transports: {transports}")
                 + "".join(f"      {line}\n" for line in extra.splitlines()))


def test_rank_orders(tmp_path):
    listed = load_scenario(_workload(tmp_path, ""), features=FEATURES).workload
    assert listed.order == "listed"
    rnd = load_scenario(_workload(tmp_path, "order: random"), features=FEATURES).workload
    assert sorted(rnd.hosts) == sorted(listed.hosts) and rnd.hosts != listed.hosts
    assert load_scenario(_workload(tmp_path, "order: random"), features=FEATURES).workload.hosts == rnd.hosts
    rail = load_scenario(_workload(tmp_path, "order: rail"), features=FEATURES)
    topo = rail.topology
    edge = [topo.nics[h][0].switch for h in rail.workload.hosts]
    assert all(a != b for a, b in zip(edge, edge[1:]))          # consecutive ranks: different edges
    assert sorted(rail.workload.hosts) == sorted(listed.hosts)
    assert "is not one of listed, random, rail" in " ".join(problems(_workload(tmp_path, "order: best")))


def test_collectives_variants_and_ev_counts(tmp_path):
    path = _workload(tmp_path, "evs_per_qp: 16", "[mrc, rc, rc-x8, tcp]")
    path.write_text(path.read_text().replace("all_reduce", "permutation"))
    s = load_scenario(path, features=FEATURES)
    wl = s.workload
    assert s.transports == ("mrc", "rc", "rc-x8", "tcp") and wl.evs_per_qp == 16
    assert sorted(wl.targets) == list(range(16)) and all(t != r for r, t in enumerate(wl.targets))
    assert wl.connections == [(r, wl.targets[r]) for r in range(16)]
    bad = problems(_workload(tmp_path, "evs: 4\nevs_per_qp: 8", "[mrc, rc-x0, rc-x65, ib]"))
    assert any("transports[1]" in p and "rc-x<N>" in p for p in bad)
    assert any("transports[2]" in p for p in bad) and any("transports[3]" in p for p in bad)
    assert any("workload.evs_per_qp" in p and "not both" in p for p in bad)
    assert "is not one of all_reduce" in " ".join(problems(write(tmp_path, HEAD.replace("all_reduce", "broadcast"))))


def test_flow_selector_must_name_a_connection_of_the_collective(tmp_path):
    timeline = '    timeline:\n      - at: 1s\n        link_down: {crossed_by: "rc %s"}\n'
    ring = HEAD + timeline % "3->5"
    assert any("rank 3 sends to rank 4" in p for p in problems(write(tmp_path, ring)))
    a2a = HEAD.replace("all_reduce", "all_to_all") + timeline % "3->5"
    s = load_scenario(write(tmp_path, a2a), features=FEATURES)
    assert str(s.timeline[0].target) == "crossed_by [rc 3->5] hop unrepaired"


JOBS = f"""
    topology: {K4}
    transports: [mrc, rc]
    seed: 7
    timeout: 60s
    jobs:
      - name: ring
        collective: all_reduce
        hosts: [h0_0_0, h1_0_0, h2_0_0, h3_0_0]
        order: random
        min_bytes: 1KiB
        max_bytes: 1KiB
        factor: 2
        iterations: 2
        warmup: 0
      - name: ring2
        collective: all_reduce
        hosts: [h0_0_0, h1_0_0, h2_0_0, h3_0_0]
        order: random
        min_bytes: 1KiB
        max_bytes: 1KiB
        factor: 2
        iterations: 2
        warmup: 0
"""


def test_several_jobs(tmp_path):
    s = load_scenario(write(tmp_path, JOBS), features=FEATURES)
    assert [j.name for j in s.all_jobs] == ["ring", "ring2"] and s.workload is s.jobs[0]
    assert s.jobs[0].hosts != s.jobs[1].hosts                 # each job's random order salted by its name
    assert [j["name"] for j in s.to_dict()["jobs"]] == ["ring", "ring2"]
    single = load_scenario(write(tmp_path, HEAD), features=FEATURES)
    assert single.all_jobs == (single.workload,) and single.workload.name == "job0"


def test_bad_jobs(tmp_path):
    both = problems(write(tmp_path, JOBS + HEAD[HEAD.index("    workload:"):]))
    assert any("give exactly one of 'workload'" in p for p in both)
    dup = JOBS.replace("name: ring2", "name: ring").replace("collective: all_reduce\n        hosts: [h0_0_0, h1_0_0,"
                                                               " h2_0_0, h3_0_0]\n        order: random\n        min_bytes: 1KiB",
                                                               "collective: all_reduce\n        hosts: [h0_0_0]\n"
                                                               "        order: random\n        min_bytes: 1KiB", 1)
    found = problems(write(tmp_path, dup))
    assert any(":15: jobs[1].name: duplicate job name 'ring'" in p for p in found), found
    assert any(":8: jobs[0].hosts: a collective needs >= 2 hosts" in p for p in found), found
    bad_name = problems(write(tmp_path, JOBS.replace("name: ring2", "name: Ring 2")))
    assert any("jobs[1].name: job name 'Ring 2'" in p for p in bad_name)


def test_agent_processes(tmp_path):
    assert load_scenario(write(tmp_path, HEAD), features=FEATURES).agent_processes is None
    sc = load_scenario(write(tmp_path, HEAD + "\n    agent_processes: 2\n"), features=FEATURES)
    assert sc.agent_processes == 2 and sc.to_dict()["agent_processes"] == 2
    sc = load_scenario(write(tmp_path, HEAD + "\n    agent_processes: per-host\n"), features=FEATURES)
    assert sc.agent_processes == "per-host"
    for bad in ("0", "257", "two", "true", "[2]"):
        with pytest.raises(SpecError, match="agent_processes"):
            load_scenario(write(tmp_path, HEAD + f"\n    agent_processes: {bad}\n"), features=FEATURES)


def test_agent_realtime_sets_the_jobs_rt_priority_and_is_checked(tmp_path):
    from testbed.spec.jobs import AGENT_RT_PRIORITY, build_job_specs
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(HEAD) + "agent_realtime: true\n")
    sc = load_scenario(path, features=FEATURES)
    assert sc.agent_realtime and sc.to_dict()["agent_realtime"] is True
    kw = dict(run_id="r", control_socket="/tmp/s")
    assert {j.rt_priority for j in build_job_specs(sc, "mrc", **kw)} == {AGENT_RT_PRIORITY}
    path.write_text(textwrap.dedent(HEAD))
    assert {j.rt_priority for j in build_job_specs(load_scenario(path, features=FEATURES), "mrc", **kw)} == {0}
    path.write_text(textwrap.dedent(HEAD) + "agent_realtime: yes please\n")
    with pytest.raises(SpecError) as err:
        load_scenario(path, features=FEATURES)
    line = len(textwrap.dedent(HEAD).splitlines()) + 1
    assert f"{path}:{line}: agent_realtime: expected true or false" in str(err.value)
