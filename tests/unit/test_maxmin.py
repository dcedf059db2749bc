"""The max-min analysis of traced paths (testbed.tools.maxmin) on hand-built cases: no fabric."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from testbed.model.generators import leaf_spine
from testbed.model.topology import LinkParams
from testbed.tools.maxmin import (Subflow, analyze_run, as_fraction, completion_times, distribution, ideal_step,
                                  main, max_min_rates, placements, ring_paths)

RATE = 2_000_000
TOPO_YAML = """name: tiny
kind: leaf-spine
leaves: 2
spines: 2
hosts_per_leaf: 3
link_classes:
  host:   {rate: 2Mbit, queue: 32, mtu: 9000}
  fabric: {rate: 2Mbit, queue: 32, mtu: 9000}
"""
RING = ["h0", "h3", "h1", "h4", "h2", "h5"]   # every hop crosses from one leaf to the other


def _topo():
    lp = LinkParams(RATE, 32)
    return leaf_spine(leaves=2, spines=2, hosts_per_leaf=3, host_link=lp, fabric_link=lp, name="tiny")


def _flows(paths, share=1.0):
    return [Subflow(("job0", r, (r + 1) % len(paths)), f"{r}", p, share) for r, p in enumerate(paths)]


# -- the model ------------------------------------------------------------------------------
def test_two_flows_sharing_one_link_get_half_each():
    assert max_min_rates(np.ones((1, 2)), np.array([1.0])) == pytest.approx([0.5, 0.5])
    step = ideal_step(_flows([(("x", "a"),), (("x", "a"),)]), default_rate=RATE, unit=RATE)
    assert step.links == pytest.approx(0.5) and step.max_load is None   # one hop: a host link, no fabric


def test_max_min_is_not_proportional_sharing():
    # parking lot: a long flow on links 0 and 1, one short flow on each; link 1 is twice as fast
    a = np.array([[1, 1, 0], [1, 0, 1]])
    assert max_min_rates(a, np.array([1.0, 2.0])) == pytest.approx([0.5, 0.5, 1.5])
    # a link of capacity 0 holds its flows at 0 and the others still fill up
    assert max_min_rates(a, np.array([0.0, 2.0])) == pytest.approx([0.0, 0.0, 2.0])
    with pytest.raises(ValueError):
        max_min_rates(np.zeros((1, 1)), np.array([1.0]))   # a flow on no link


def test_ring_with_three_flows_on_one_link_gets_a_third():
    topo = _topo()
    paths = ring_paths(topo, RING, lambda n: 0)   # every leaf-crossing flow on spine s0_0
    step = ideal_step(_flows(paths), {(l.name, e.node): RATE for l in topo.links for e in (l.a, l.b)}, unit=RATE)
    assert as_fraction(step.links) == "1/3" and step.max_load == pytest.approx(3)
    assert step.nics == 1 and step.connections == 6
    spines = iter([0, 0, 1, 1, 0, 0])     # each direction's three flows: two on s0_0, one on s0_1
    spread = ring_paths(topo, RING, lambda n: next(spines))
    assert as_fraction(ideal_step(_flows(spread), default_rate=RATE, unit=RATE).links) == "1/2"   # 2 and 1 per spine


def test_resharing_after_a_flow_finishes_beats_the_static_bottleneck():
    # sizes 1 and 2 on one link: at rate 1/2 each the big one would take 4; once the small one
    # finishes (t = 2) it has the link alone and finishes at 3
    assert completion_times(np.ones((1, 2)), np.array([1.0]), np.array([1.0, 2.0])) == pytest.approx([2.0, 3.0])
    # connection A split over links X and Y (1/2 each), connection B alone on X: A's Y half is
    # done at 0.5, its X half at 1; B ran at 1/2 until then, then alone: 1.5 (its first rate said 2)
    flows = [Subflow(("j", 0, 1), "A ev0", (("hA", "h"), ("X", "s")), 0.5),
             Subflow(("j", 0, 1), "A ev1", (("hA", "h"), ("Y", "s")), 0.5),
             Subflow(("j", 2, 3), "B", (("hB", "h"), ("X", "s")), 1.0)]
    step = ideal_step(flows, {("hA", "h"): 2.0}, default_rate=1.0)
    assert step.per_connection == pytest.approx({("j", 0, 1): 1.0, ("j", 2, 3): 1.5})
    assert step.step == pytest.approx(1.5) and step.links == pytest.approx(2 / 3)


def test_a_link_at_capacity_zero_never_finishes():
    t = completion_times(np.array([[1, 0], [0, 1]]), np.array([0.0, 1.0]), np.array([1.0, 1.0]))
    assert t[0] == np.inf and t[1] == pytest.approx(1.0)


def test_monte_carlo_is_deterministic_for_a_seed():
    topo = _topo()
    hosts = [h.name for h in topo.hosts]
    a, b = placements(topo, hosts, 40, 7), placements(topo, hosts, 40, 7)
    assert np.array_equal(a, b) and a.shape == (40,)
    # 6 hosts on 2 leaves with 2 spines: at most 3 flows per uplink direction, at least 1
    assert {as_fraction(x) for x in a} <= {"1", "1/2", "1/3"}
    rows = distribution(a)
    assert sum(c for _, c, _ in rows) == 40 and sum(s for _, _, s in rows) == pytest.approx(1.0)
    values = [float(Fraction(k)) for k, _, _ in rows]
    assert values == sorted(values, reverse=True)
    with pytest.raises(ValueError):
        placements(topo, ["h0"], 1, 1)


# -- a fake run directory -------------------------------------------------------------------
def _flow(transport, r, s, path, topo, suffix="", kind="data"):
    hops = [[node, link, topo.link_by_name[link].peer_of(node).node] for link, node in path]
    src, dst = hops[0][0], hops[-1][2]
    if kind == "ack":
        hops = [[b, link, a] for a, link, b in reversed(hops)]
        src, dst = dst, src
    return {"label": f"{transport} {r}->{s}{suffix}{' ack' if kind == 'ack' else ''}", "transport": transport,
            "src_rank": r, "dst_rank": s, "kind": kind, "src_host": src, "dst_host": dst,
            "links": [h[1] for h in hops], "hops": hops, "outcome": "delivered", "dropped_at": None, "job": "job0"}


def _run_dir(tmp_path):
    topo = _topo()
    (tmp_path / "tiny.yaml").write_text(TOPO_YAML)
    run = tmp_path / "runs" / "r1"
    n = len(RING)
    rc = ring_paths(topo, RING, lambda k: 0)
    rc_flows = [_flow("rc", r, (r + 1) % n, p, topo) for r, p in enumerate(rc)]
    rc_flows += [_flow("rc", r, (r + 1) % n, p, topo, kind="ack") for r, p in enumerate(rc)]   # ignored
    rc_flows.append(dict(rc_flows[0], label="rc 9->10", src_rank=9, dst_rank=10, outcome="dropped"))   # skipped
    mrc_flows = [_flow("mrc", r, (r + 1) % n, p, topo, f" ev{k}")
                 for k in range(2) for r, p in enumerate(ring_paths(topo, RING, lambda m, k=k: k))]
    for name, flows in (("rc", rc_flows), ("mrc", mrc_flows)):
        (run / name).mkdir(parents=True)
        (run / name / "paths.json").write_text(json.dumps({"transport": name, "flows": flows}))
        (run / name / "events.jsonl").write_text("")
    manifest = {"format": 2, "transports": ["mrc", "rc"], "world_size": n, "host_link_rate_bps": RATE,
                "scenario": {"name": "fake", "topology": {"name": "tiny", "path": str(tmp_path / "tiny.yaml")}}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    summary = {"transports": {"rc": {"busbw_fraction_of_nics": 0.3, "nic_bandwidth_bps": RATE,
                                     "balance": {"collisions": {"max_load": 3.0}}}}}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_reads_a_run_directory(tmp_path):
    out = analyze_run(_run_dir(tmp_path))
    assert out["topology"] == "tiny" and out["unit_bps"] == RATE and out["problems"] == []
    assert out["hosts"] == ["h0", "h1", "h2", "h3", "h4", "h5"]
    rows = {r["transport"]: r for r in out["transports"]}
    rc, mrc = rows["rc"], rows["mrc"]
    assert (rc["connections"], rc["subflows"], len(rc["skipped"])) == (6, 6, 1)
    assert as_fraction(rc["links"]) == "1/3" and rc["max_load"] == pytest.approx(3) == rc["summary_max_load"]
    assert rc["measured_links"] == pytest.approx(0.3) and rc["of_ideal"] == pytest.approx(0.9)
    # mrc: two EVs per connection, one per spine: 3 half-connections per uplink direction
    assert (mrc["subflows"], as_fraction(mrc["links"]), mrc["max_load"]) == (12, "2/3", pytest.approx(1.5))
    assert mrc["summary_max_load"] is None and mrc["of_ideal"] is None
    (tmp_path / "b").mkdir()
    only = analyze_run(_run_dir(tmp_path / "b"), ["rc"])
    assert [r["transport"] for r in only["transports"]] == ["rc"]


def test_command_prints_the_table_and_the_placements(tmp_path, capsys):
    run = _run_dir(tmp_path)
    assert main([str(run), "--transport", "rc", "--placements", "20", "--seed", "3"]) == 0
    text = capsys.readouterr().out
    assert "1/3" in text and "median 1/2 of a link" in text and "rc 9->10: dropped" in text
    assert main([str(run), "--placements", "20", "--seed", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["placements"]["hosts"] == 6 and sum(d["count"] for d in doc["placements"]["distribution"]) == 20
    assert main(["--topology", str(tmp_path / "tiny.yaml"), "--placements", "20", "--seed", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["placements"] == doc["placements"]
    with pytest.raises(SystemExit):
        main([])


def test_command_reports_a_directory_that_is_no_run(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
