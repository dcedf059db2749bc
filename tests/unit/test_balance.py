"""Load balance (testbed.metrics.balance): utilisation per link direction over the measured
window, its spread over the fabric links only, colliding links from traced paths, the paths
MRC EVs cover, and the report's tables; on synthetic records with known answers."""

import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from testbed.metrics import balance
from testbed.metrics.synthetic import write_run
from testbed.report.balance import balance_table, collisions_table
from testbed.model.generators import leaf_spine
from testbed.model.topology import LinkParams
from testbed.rundir.load import load_transport
from testbed.rundir.upgrade import upgrade

T0 = 1000.0
RATE_BPS = 10_000_000
LINK_S = 0.1
WARMUP = (0.0, 0.9)         # relative s: every direction at line rate (must not count)
MEASURED = (1.0, 3.0)       # relative s: the measured iterations
END_S = 4.0                 # link samples until then; idle after MEASURED
FABRIC_U = {("l0_0-s0_0", "a"): 0.8, ("l0_1-s0_1", "b"): 0.4}   # the other 6 fabric directions idle
HOST_U = 0.95               # every host-link direction


def topo():
    """Hosts h0..h3, leaves l0_0 (h0, h1) and l0_1 (h2, h3), spines s0_0 and s0_1: 4 host links and
    4 fabric links, 10 Mbit/s each, so 8 host and 8 fabric directions."""
    lp = LinkParams(RATE_BPS)
    return leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, host_link=lp, fabric_link=lp)


def counter(u: float, t: float) -> float:
    """Cumulative tx bytes at relative ``t`` of a direction at utilisation ``u`` while measured."""
    full = RATE_BPS / 8
    warm = full * (min(t, WARMUP[1]) - WARMUP[0])
    meas = u * full * max(0.0, min(t, MEASURED[1]) - MEASURED[0])
    return 4096 + warm + meas


def link_records(tp, skip=()) -> list[dict]:
    out = []
    for j in range(int(round(END_S / LINK_S)) + 1):
        t = j * LINK_S
        for link in tp.links:
            for end in ("a", "b"):
                if (link.name, end) in skip:
                    continue
                u = HOST_U if link.cls == "host" else FABRIC_U.get((link.name, end), 0.0)
                out.append({"t": T0 + t, "link": link.name, "end": end, "tx_bytes": round(counter(u, t)),
                            "drops": 0, "rate_bps": RATE_BPS})
    return out


def iteration_events() -> list[dict]:
    ev = [{"t": T0, "kind": "run", "phase": "start"}]
    spans = [(WARMUP, True), ((MEASURED[0], 2.0), False), ((2.0, MEASURED[1]), False)]
    for k, ((a, b), warm) in enumerate(spans):
        for rank in range(4):
            ev.append({"t": T0 + b, "kind": "iteration", "rank": rank, "size": 1 << 20, "iter": k, "warmup": warm,
                       "t_start": T0 + a, "t_end": T0 + b, "seconds": b - a})
    return ev


def hop_path(label: str, nodes: list[str], kind: str = "data") -> dict:
    """A paths.json flow through ``nodes`` (host, switches..., host) of :func:`topo`."""
    tp = topo()
    names = {frozenset((ln.a.node, ln.b.node)): ln.name for ln in tp.links}
    hops = [[a, names[frozenset((a, b))], b] for a, b in zip(nodes, nodes[1:])]
    src, dst = (int(x) for x in label.split()[1].split("->"))
    return {"label": label, "src_rank": src, "dst_rank": dst, "kind": kind, "src_host": nodes[0], "dst_host": nodes[-1],
            "links": [h[1] for h in hops], "hops": hops, "outcome": "delivered"}


VIA0 = ["l0_0", "s0_0", "l0_1"]
VIA1 = ["l0_0", "s0_1", "l0_1"]
RC_PATHS = [
    hop_path("rc 0->2", ["h0", *VIA0, "h2"]),
    hop_path("rc 1->3", ["h1", *VIA0, "h3"]),              # collides with rc 0->2 on l0_0->s0_0, s0_0->l0_1
    hop_path("rc 0->3", ["h0", *VIA1, "h3"]),              # shares only host directions (h0->l0_0, l0_1->h3)
    hop_path("rc 2->0", ["h2", *VIA1[::-1], "h0"]),        # the other direction of VIA1's links
    hop_path("rc 0->2 ack", ["h2", *VIA0[::-1], "h0"], "ack"),
    hop_path("rc 1->3 ack", ["h3", *VIA0[::-1], "h1"], "ack"),   # two ACKs share l0_1->s0_0: ACKs do not count
]
MRC_PATHS = [hop_path(f"mrc {s}->{d} ev{e}", [f"h{s}", *(VIA0 if e % 2 == 0 else VIA1), f"h{d}"])
             for s, d in ((0, 2), (1, 3)) for e in range(4)]   # 4 EVs per QP on 2 paths, both QPs on both


def write_transport_dir(run: Path, name: str, paths: list[dict], skip=()) -> None:
    d = run / name
    d.mkdir(parents=True)
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in iteration_events()))
    (d / "links.jsonl").write_text("".join(json.dumps(r) + "\n" for r in link_records(topo(), skip)))
    (d / "paths.json").write_text(json.dumps({"transport": name, "flows": paths}))


@pytest.fixture
def run(tmp_path):
    r = tmp_path / "run"
    r.mkdir()
    (r / "manifest.json").write_text(json.dumps({"scenario": {"name": "balance"}, "transports": ["rc", "mrc"],
                                                 "world_size": 4}))
    write_transport_dir(r, "rc", RC_PATHS)
    write_transport_dir(r, "mrc", MRC_PATHS)
    return r


def summary_of(run: Path, name: str, tp=None) -> dict:
    tr = load_transport(run, name)
    return balance.balance_summary(tr, topo() if tp is None else tp, T0)


# -- utilisation and spread ---------------------------------------------------------------
def test_utilisation_over_the_measured_window_only(run):
    tr = load_transport(run, "rc")
    lo, hi, source = balance.measured_window(tr.events, tr.links.t)
    assert (lo - T0, hi - T0, source) == (pytest.approx(1.0), pytest.approx(3.0), "measured_iterations")
    rows = balance.link_utilisation(tr.links, balance.directions(topo()), (lo, hi))
    by = {(r["link"], r["end"]): r for r in rows}
    assert len(rows) == 16 and sum(r["fabric"] for r in rows) == 8
    assert by["l0_0-s0_0", "a"]["direction"] == "l0_0->s0_0" and by["l0_0-s0_0", "b"]["direction"] == "s0_0->l0_0"
    assert by["l0_0-s0_0", "a"]["utilisation"] == pytest.approx(0.8, abs=1e-4)     # warm-up's line rate left out
    assert by["l0_0-s0_0", "a"]["tx_bytes"] == pytest.approx(0.8 * RATE_BPS / 8 * 2.0, rel=1e-4)
    assert by["l0_1-s0_1", "b"]["utilisation"] == pytest.approx(0.4, abs=1e-4)
    assert by["l0_0-s0_0", "b"]["utilisation"] == pytest.approx(0.0, abs=1e-4)
    assert by["h0-l0_0", "a"]["utilisation"] == pytest.approx(HOST_U, abs=1e-4)
    assert not by["h0-l0_0", "a"]["fabric"]


def test_spread_is_over_every_fabric_direction_and_nothing_else(run):
    """max/mean over the 8 fabric directions, idle ones included: 0.8 / (1.2 / 8) = 5.33. Over
    all 16 directions it would be 0.95 / 0.55 = 1.73; over the busy fabric ones only 1.33;
    over the host links 1.0."""
    s = summary_of(run, "rc")
    f, h = s["fabric"], s["host"]
    assert (s["window_s"], s["window_source"]) == (pytest.approx([1.0, 3.0]), "measured_iterations")
    assert f["directions"] == 8 and f["missing"] == 0
    assert f["mean"] == pytest.approx(1.2 / 8, abs=1e-4)
    assert f["max"] == pytest.approx(0.8, abs=1e-4)
    assert f["max_over_mean"] == pytest.approx(0.8 / 0.15, rel=1e-3)
    assert f["p50"] == pytest.approx(0.0, abs=1e-4)
    assert f["busy"] == 0 and f["busy_fraction"] == 0.9
    assert [b["direction"] for b in f["busiest"][:2]] == ["l0_0->s0_0", "s0_1->l0_1"]
    assert len(f["busiest"]) == balance.TOP_LINKS
    assert h["directions"] == 8 and h["busy"] == 8
    assert h["max_over_mean"] == pytest.approx(1.0, abs=1e-3)
    assert s["problems"] == []


def test_spread_of_nothing_and_of_idle_links():
    assert balance.spread([]) is None
    idle = [{"link": "x", "end": "a", "direction": "p->q", "utilisation": 0.0, "tx_bytes": 0.0},
            {"link": "x", "end": "b", "direction": "q->p", "utilisation": None, "tx_bytes": None}]
    s = balance.spread(idle)
    assert s["max_over_mean"] is None and s["directions"] == 1 and s["missing"] == 1


def test_direction_without_counters_is_missing_not_idle(tmp_path):
    r = tmp_path / "run"
    write_transport_dir(r, "rc", RC_PATHS, skip={("l0_1-s0_1", "a")})
    f = summary_of(r, "rc")["fabric"]
    assert f["directions"] == 7 and f["missing"] == 1
    assert f["mean"] == pytest.approx(1.2 / 7, abs=1e-4)


def test_window_falls_back_on_all_iterations_then_link_samples():
    its = [{"kind": "iteration", "t_start": 5.0, "t_end": 6.0, "warmup": True},
           {"kind": "iteration", "t_start": 6.0, "t_end": 7.5, "warmup": True}]
    assert balance.measured_window(its) == (5.0, 7.5, "iterations")
    assert balance.measured_window([], np.array([3.0, 1.0, 2.0])) == (1.0, 3.0, "link_samples")
    assert balance.measured_window([], np.array([])) is None


def test_bytes_in_window_interpolates_edges_and_ignores_resets():
    t = np.array([0.0, 1.0, 2.0, 3.0])
    c = np.array([0.0, 100.0, 50.0, 150.0])        # reset between 1 and 2: that step counts nothing
    assert balance.bytes_in_window(t, c, 0.5, 3.0) == (pytest.approx(50.0 + 100.0), 2.5)
    assert balance.bytes_in_window(t, c, -1.0, 0.5) == (pytest.approx(50.0), 0.5)    # clipped to the samples
    assert balance.bytes_in_window(t, c, 4.0, 5.0) == (0.0, 0.0)


# -- collisions from traced paths ---------------------------------------------------------
def test_rc_flows_sharing_a_fabric_direction_collide(run):
    c = summary_of(run, "rc")["collisions"]
    assert c["flows"] == 4 and c["qps"] == 4            # ACKs left out
    assert c["colliding"] == 2 and c["oversubscribed"] == 2 and c["max_load"] == 2.0
    assert [x["direction"] for x in c["links"]] == ["l0_0->s0_0", "s0_0->l0_1"]
    first = c["links"][0]
    assert first["flows"] == ["rc 0->2", "rc 1->3"] and first["qps"] == 2 and first["load"] == 2.0
    assert first["link"] == "l0_0-s0_0" and first["utilisation"] == pytest.approx(0.8, abs=1e-4)


def test_evs_of_one_qp_share_on_purpose_two_qps_collide():
    one = [f for f in MRC_PATHS if f["label"].startswith("mrc 0->2")]
    c1 = balance.collisions(one, topo())
    assert c1["colliding"] == 0 and c1["qps"] == 1 and c1["max_load"] == 0.5
    c2 = balance.collisions(MRC_PATHS, topo())
    assert c2["colliding"] == 4                          # both QPs on both spines, up and down
    assert all(x["qps"] == 2 and x["load"] == pytest.approx(1.0) for x in c2["links"])
    assert c2["oversubscribed"] == 0 and c2["max_load"] == pytest.approx(1.0)
    assert c2["links"][0]["flows"] == ["mrc 0->2 ev0", "mrc 0->2 ev2", "mrc 1->3 ev0", "mrc 1->3 ev2"]


def test_qps_of_one_rc_connection_collide_at_their_share_of_the_load():
    """rc with 2 QPs per connection: both QPs of 0->2 hashed onto one spine collide (they are not
    EVs of one MRC QP) but carry one connection's worth; 1->3's QP beside them oversubscribes."""
    paths = [hop_path("rc 0->2 qp0", ["h0", *VIA0, "h2"]), hop_path("rc 0->2 qp1", ["h0", *VIA0, "h2"])]
    c = balance.collisions(paths, topo())
    assert c["colliding"] == 2 and c["oversubscribed"] == 0 and c["max_load"] == pytest.approx(1.0)
    c = balance.collisions(paths + [hop_path("rc 1->3", ["h1", *VIA0, "h3"])], topo())
    assert c["oversubscribed"] == 2 and c["links"][0]["load"] == pytest.approx(2.0) and c["links"][0]["qps"] == 3


def test_flows_of_two_jobs_collide():
    """Two jobs (labels prefixed with the job, ranks per job): the same ring hop of each job
    is a connection of its own."""
    paths = [{**hop_path("rc 0->2", ["h0", *VIA0, "h2"]), "label": "job0: rc 0->2", "job": "job0"},
             {**hop_path("rc 0->2", ["h1", *VIA0, "h3"]), "label": "job1: rc 0->2", "job": "job1"}]
    c = balance.collisions(paths, topo())
    assert c["qps"] == 2 and c["oversubscribed"] == 2
    assert c["links"][0]["flows"] == ["job0: rc 0->2", "job1: rc 0->2"]


def test_ev_coverage_counts_distinct_paths(run):
    ev = summary_of(run, "mrc")["ev_paths"]
    assert ev["per_qp"] == [{"qp": "mrc 0->2", "evs": 4, "distinct_paths": 2},
                            {"qp": "mrc 1->3", "evs": 4, "distinct_paths": 2}]
    assert (ev["evs_min"], ev["distinct_paths_max"]) == (4, 2)
    assert summary_of(run, "rc")["ev_paths"] is None
    evs = [{"ev_id": e, "links": ["x", f"p{e % 3}"]} for e in range(6)]
    old_specs = [{"rank": r, "transport": "mrc", "next": {"evs": evs}} for r in range(2)]   # format 1
    assert balance.ev_coverage([], upgrade({}, old_specs)[1]) == [{"qp": "mrc 0->1", "evs": 6, "distinct_paths": 3},
                                                  {"qp": "mrc 1->0", "evs": 6, "distinct_paths": 3}]
    specs = [{"rank": 0, "agent": 0, "transport": "mrc", "job": "job1", "send_to": [{"rank": 2, "evs": evs[:2]}]}]
    assert balance.ev_coverage([], specs) == [{"qp": "job1: mrc 0->2", "evs": 2, "distinct_paths": 2}]


def test_paths_without_hops_walk_the_topology_or_go_by_position():
    bare = [{k: v for k, v in f.items() if k != "hops"} for f in RC_PATHS[:2]]
    with_topo = balance.collisions(bare, topo())
    assert [x["direction"] for x in with_topo["links"]] == ["l0_0->s0_0", "s0_0->l0_1"]
    anon = [{"label": f["label"], "links": f["links"], "kind": "data"} for f in RC_PATHS[:2]]
    no_topo = balance.collisions(anon)
    assert sorted(x["direction"] for x in no_topo["links"]) == ["l0_0-s0_0", "l0_1-s0_0"]   # host hops left out
    dropped = [{**f, "links": f["links"][:2], "hops": f["hops"][:2], "outcome": "dropped"} for f in RC_PATHS[:2]]
    assert [x["direction"] for x in balance.collisions(dropped)["links"]] == ["l0_0->s0_0"]


# -- without a topology, the report's tables, the synthetic run --------------------------
def test_without_topology_collisions_still_come_from_paths(run):
    tr = load_transport(run, "rc")
    s = balance.balance_summary(tr, None, T0, topology_problem="topologies/x.yaml: not found")
    assert s["fabric"] is None and s["host"] is None
    assert s["problems"] == ["no utilisation: topologies/x.yaml: not found"]
    assert s["collisions"]["colliding"] == 2 and s["collisions"]["links"][0]["utilisation"] is None


def test_load_run_topology_checks_the_file(tmp_path):
    src = Path(__file__).resolve().parents[2] / "topologies" / "fat-tree-k4.yaml"
    topo_file = tmp_path / "k4.yaml"
    shutil.copy(src, topo_file)
    manifest = {"scenario": {"topology": {"path": str(topo_file)}},
                "topology_sha256": hashlib.sha256(topo_file.read_bytes()).hexdigest()}
    tp, why = balance.load_run_topology(tmp_path / "runs" / "x", manifest)
    assert why is None and len(tp.links) == 48
    dirs = balance.directions(tp)
    assert sum(d.fabric for d in dirs.values()) == 64 and dirs["a0_0-c0_0", "a"].rate_bps == 10e6
    topo_file.write_text(topo_file.read_text() + "\n# edited\n")
    assert balance.load_run_topology(tmp_path, manifest) == (None, f"{topo_file}: changed since the run (sha256 differs)")
    assert balance.load_run_topology(tmp_path, {"scenario": "old"})[0] is None


def test_tables_render(run):
    summary = {"transports": {name: {"balance": summary_of(run, name)} for name in ("rc", "mrc")}}
    summary["transports"]["tcp"] = {}                    # an older summary: no balance key
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    console.print(balance_table(summary))
    console.print(collisions_table(summary, shown=1))
    text = buf.getvalue()
    assert "5.33" in text and "2 of 6" in text and "4 EVs, 2 paths" in text and "l0_0->s0_0 80%" in text
    assert "rc 0->2, rc 1->3" in text and "... 1 more" in text
    assert "mrc 0->2 ev0" not in text and "4 colliding directions at load <= 1 not listed" in text
    assert "over the measured iterations" in text


def test_synthetic_run_with_traced_paths(tmp_path):
    """The synthetic run's paths.json (labels and links, no hops or hosts) and counters."""
    run = write_run(tmp_path / "syn", ("mrc", "rc"), world_size=4, duration_s=2.0, extras=True)
    from testbed.model.generators import fat_tree
    tp = fat_tree(4, host_link=LinkParams(10_000_000), fabric_link=LinkParams(10_000_000))
    for name in ("mrc", "rc"):
        tr = load_transport(run, name)
        s = balance.balance_summary(tr, tp, 0.0)
        assert s["window_source"] == "measured_iterations"
        assert s["fabric"]["directions"] == 64 and 0 < s["fabric"]["mean"] < 1.5
        assert s["collisions"]["flows"] == 4


def test_collisions_table_folds_the_qps_of_one_connection():
    from testbed.report.balance import grouped_flows
    labels = ["perm: rc-x8 4->5 qp0", "ring: rc-x8 4->5 qp1", "perm: rc-x8 4->5 qp3", "rc 1->2", "mrc 0->1 ev2"]
    assert grouped_flows(labels) == "perm: rc-x8 4->5 (2 QPs), ring: rc-x8 4->5 (1 QP), rc 1->2, mrc 0->1 ev2"
