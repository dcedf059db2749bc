"""The regime, paper beside here (no root): the numbers of a hand-computed fat-tree-k4 scenario, the
paper's values from a claims file (their problems at file:line), and the tables that print both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from testbed.model.kernel import KernelFeatures
from testbed.model.regime import Inputs, Span, from_json, hull, regime, to_json
from testbed.report.regime import regime_table, rows
from testbed.spec import SpecError, load_scenario
from testbed.spec.claimsfile import load_claims
from testbed.spec.regime import paper_regime, scenario_inputs, scenario_regime

FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True, bpf_egress=True)
PAPER = Path(__file__).resolve().parents[2] / "scenarios" / "paper"

TOPOLOGY = """\
name: k4
kind: fat-tree
k: 4
link_classes:
  host:   {rate: 10Mbit, queue: 32, mtu: 9000}
  fabric: {rate: 10Mbit, queue: 32, mtu: 9000}
"""
SCENARIO = """\
name: k4-regime
topology: k4.yaml
transports: [mrc, rc]
reconverge_after: 2s
workload: {collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB, iterations: 2, evs: 8}
"""


def _k4(tmp_path: Path):
    (tmp_path / "k4.yaml").write_text(TOPOLOGY)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    return load_scenario(tmp_path / "s.yaml", features=FEATURES)


def test_k4_by_hand(tmp_path):
    # A data packet: 4096 B payload + MRC 44 + UDP/IPv6 48 = MTU 4188, + Ethernet 14 = 4202 B on the
    # wire. The ring's longest path crosses pods: 6 links, each serialising the packet and a 120 B
    # SACK at 10 Mbit/s, plus 2 ms of agent time: 6 x (4202 + 120) x 8 / 1e7 + 0.002 = 22.746 ms.
    rtt = 6 * (4202 + 120) * 8 / 1e7 + 0.002
    bdp = 1e7 * rtt / (8 * 4202)                                   # 6.77 packets
    r = scenario_regime(_k4(tmp_path))
    assert r["base_rtt_s"] == pytest.approx(rtt, rel=1e-4)
    assert r["bdp_pkts"] == pytest.approx(6.766, rel=1e-3) == pytest.approx(bdp, rel=1e-4)
    # the ring's hops: same edge switch (1 path), same pod (2), across pods (4; evs: 8 caps none)
    assert r["evs_per_qp"] == [1.0, 4.0]
    assert r["evs_per_bdp"] == pytest.approx([1 / bdp, 4 / bdp], rel=1e-4)
    assert r["buffer_bdps"] == pytest.approx(32 / bdp, rel=1e-4)                 # 4.7
    # timeout 19: 1.024 us x 2^19 = 537 ms, the exponent nearest the paper's 33 base RTTs (751 ms)
    assert r["rto_s"] == pytest.approx(1.024e-6 * 2 ** 19) and r["rto_rtts"] == pytest.approx(0.536870912 / rtt, rel=1e-4)
    assert r["reconverge_rtts"] == pytest.approx(2 / rtt, rel=1e-4)              # 88
    assert r["message_bdps"] == pytest.approx(2 ** 20 / (bdp * 4096), rel=1e-4)  # 37.8
    assert (r["ranks"], r["planes"], r["payload_bytes"], r["rate_bps"]) == (16, 1, 4096, 1e7)
    assert r["detect_rtts"] is None                  # measured, not a property of the scenario
    assert r["sample_s"] <= r["base_rtt_s"] and r["sample_rtts"] <= 1


def test_propagation_delay_counts_through_the_base_rtt(tmp_path):
    # delay: 1 ms a link, held by the agents' endpoints: 2 x 6 links x 1 ms more round trip
    (tmp_path / "k4.yaml").write_text(TOPOLOGY.replace("mtu: 9000}", "mtu: 9000, delay: 1ms}"))
    (tmp_path / "s.yaml").write_text(SCENARIO)
    r = scenario_regime(load_scenario(tmp_path / "s.yaml", features=FEATURES))
    rtt = 6 * (4202 + 120) * 8 / 1e7 + 0.002 + 0.012
    assert r["base_rtt_s"] == pytest.approx(rtt, rel=1e-4)
    assert r["bdp_pkts"] == pytest.approx(1e7 * rtt / (8 * 4202), rel=1e-4)     # 10.3


def test_no_mrc_no_evs_and_no_reconvergence(tmp_path):
    (tmp_path / "k4.yaml").write_text(TOPOLOGY)
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("[mrc, rc]", "[rc, tcp]").replace("reconverge_after: 2s\n", ""))
    inp = scenario_inputs(load_scenario(tmp_path / "s.yaml", features=FEATURES))
    assert inp.evs_per_qp is None and inp.reconverge_s is None
    assert regime(inp)["evs_per_bdp"] is None and regime(inp)["reconverge_rtts"] is None


def test_spans_divide_to_their_widest():
    r = regime(Inputs(rate_bps=8e11, base_rtt_s=8e-6, frame_bytes=4000, payload_bytes=4000, evs_per_qp=(100, 200),
                      detect_s=(1e-5, 9e-5)))
    assert r["bdp_pkts"] == Span(200.0, 200.0)
    assert r["evs_per_bdp"] == Span(0.5, 1.0) and r["detect_rtts"].to_json() == pytest.approx([1.25, 11.25])
    assert r["buffer_bdps"] is None and r["message_bdps"] is None       # unknown inputs stay unknown
    assert from_json(to_json(r)) == {k: r.get(k) for k in from_json(to_json(r))}
    assert hull([Span(1, 2), None, Span(0.5, 1.5)]) == Span(0.5, 2) and hull([None]) is None
    with pytest.raises(ValueError):
        Span.of((3, 1))


# -- the paper's values ---------------------------------------------------------------------------------
CLAIMS = """\
regime:
  rate: {{value: 800Gbit, source: "evaluation: bandwidth"}}
  base_rtt: {{value: 8us, source: "assumption: a few us"}}
  payload: {{value: 4096, source: "assumption: 4 KiB"}}
{extra}claims:
  - id: bw
    section: "s"
    figure: "f"
    scenario: {scenario}
    rules: [mrc busbw_fraction_of_host >= 0.9]
    scaling: "x"
    estimate: {{quick: 1m, full: 3m}}
{claim_extra}"""


def _claims_file(tmp_path: Path, extra: str = "", claim_extra: str = "") -> Path:
    p = tmp_path / "claims.yaml"
    p.write_text(CLAIMS.format(extra=extra, claim_extra=claim_extra, scenario=PAPER / "p2p-bandwidth.yaml"))
    return p


def test_paper_values_and_a_claims_own():
    c = load_claims(_claims_file_path := PAPER / "claims.yaml")
    assert c.regime["base_rtt"].source.startswith("assumption") and c.regime["base_rtt"].line > 1
    p = paper_regime(c.regime)
    # 800 Gb/s x 8 us / (4202 B x 8) = 190 packets of 4 KiB (~200, docs/mrc-spec.md, "Published figures")
    assert p["bdp_pkts"] == pytest.approx(8e11 * 8e-6 / (8 * 4202))
    assert p["rto_rtts"] == pytest.approx(262e-6 / 8e-6)
    lb = next(x for x in c.claims if x.id == "load-balance")
    assert (paper_regime(lb.regime)["ranks"], paper_regime(lb.regime)["planes"]) == (64, 4)
    assert paper_regime(next(x for x in c.claims if x.id == "failover").regime)["planes"] == 8   # the common value
    assert _claims_file_path.is_file()


def test_a_bad_paper_value_is_a_file_line_error(tmp_path):
    extra = ('  evs_per_qp: {value: [256, 128], source: "x"}\n'
             '  rto: {value: 8 furlongs, source: "x"}\n'
             '  planes: {value: 8, source: ""}\n'
             '  bdp: {value: 200, source: "x"}\n'
             '  ranks: {value: 0, source: "x"}\n')
    claim_extra = '    regime:\n      message: {value: 1GiB}\n'
    path = _claims_file(tmp_path, extra, claim_extra)
    with pytest.raises(SpecError) as exc:
        load_claims(path)
    got = {(p.line, p.key_path): p.message for p in exc.value.problems}
    assert "0 < low <= high" in got[(5, "regime.evs_per_qp.value")]
    assert "not a duration" in got[(6, "regime.rto.value")]
    assert "must not be empty" in got[(7, "regime.planes.source")]
    assert "unknown key" in got[(8, "regime.bdp")]
    assert "not a positive number" in got[(9, "regime.ranks.value")]
    assert "missing required key 'source'" in got[(19, "claims[0].regime.message")]
    assert all(str(p).startswith(f"{path}:") for p in exc.value.problems)


# -- printed paper beside here --------------------------------------------------------------------------
def test_rows_put_the_paper_beside_here_and_unknowns_as_dashes(tmp_path):
    here = scenario_regime(_k4(tmp_path))
    paper = paper_regime(load_claims(PAPER / "claims.yaml").regime)
    got = {label: (p, h) for label, p, h in rows(paper, here, Span(2.0, 3.5))}
    assert got["BDP (data packets)"] == ("190", "6.8")
    assert got["EVs per QP"] == ("128-256", "1-4")
    assert got["detection (base RTTs, measured)"] == ("1.3-11", "2-3.5")   # 10-90 us over 8 us
    assert got["rate (host NIC)"] == ("800 Gbit/s", "10.0 Mbit/s")
    assert got["KPI resolution"][0] == "-" and got["KPI resolution"][1].endswith("RTT")
    assert all(h == "-" for _, _, h in rows(paper, None))      # a run older than the regime


def test_a_runs_report_prints_its_regime_and_an_old_runs_dashes(tmp_path):
    here = scenario_regime(_k4(tmp_path))
    summary = {"scenario": "k4-regime", "scenario_path": str(PAPER / "failover.yaml"), "base_rtt_s": 0.0227,
               "regime": here, "transports": {"mrc": {"has_evs": True, "detect_s": 0.0454}, "tcp": {}}}
    console = Console(record=True, width=120)
    console.print(regime_table(summary))
    out = console.export_text()
    assert "paper: claim failover" in out and "6.8" in out and "190" in out
    (detect,) = [line for line in out.splitlines() if "detection" in line]
    assert [c.strip() for c in detect.split("│")[2:4]] == ["1.3-11", "2"]   # measured: 45.4 ms / 22.7 ms
    old = {"scenario": "old", "transports": {"mrc": {}}}
    console = Console(record=True, width=120)
    console.print(regime_table(json.loads(json.dumps(old))))
    text = console.export_text()
    assert "paper: its common regime" in " ".join(text.split())
    assert all(line.split("│")[3].strip() == "-" for line in text.splitlines() if line.count("│") == 4)


def test_reproduce_prints_each_claims_regime_paper_slash_here(tmp_path):
    from testbed.metrics import results
    from testbed.metrics.claims import judge
    from testbed.report.reproduce import claim_entry, document, markdown, regime_table as claims_regime_table
    claim = load_claims(PAPER / "claims.yaml").claims[1]                 # failover
    doc = results.from_trials([{"scenario": "s", "seed": s, "transports": {"mrc": {
        "detect_s": d, "base_rtt_s": 0.02, "worst_stall": {"s": 0.1}, "valid": True}, "rc": {
        "worst_stall": {"s": 3.0}, "valid": True}, "tcp": {"worst_stall": {"s": 3.0}, "valid": True}}}
        for s, d in ((1, 0.04), (2, 0.05), (3, 0.07))])
    entry = claim_entry(claim, "r.json", [_k4(tmp_path)], doc)
    assert entry["regime"]["detect_rtts"] == pytest.approx(2.5)        # median 50 ms over 20 ms
    rep = document([entry], [judge(claim, doc)], quick=True, trials=1)
    md = markdown(json.loads(json.dumps(rep)))
    (row,) = [line for line in md.splitlines() if line.startswith("| failover |")]
    assert row.split(" | ")[1:5] == ["190 / 6.8", "128-256 / 1-4", "0.67-1.3 / 0.15-0.59", "1-3 / 4.7"]
    assert "1.3-11 / 2.5" in row
    console = Console(record=True, width=200)
    console.print(claims_regime_table(rep))
    assert "190 / 6.8" in console.export_text()
    old = {**rep, "claims": [{k: v for k, v in rep["claims"][0].items() if k != "regime"}]}
    assert "| failover | - / - |" in markdown(old)                   # a reproduce.json older than it
