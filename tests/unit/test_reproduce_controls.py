"""Controls of the paper's claims without a fabric: the ``control:`` block's checks (file:line),
verdicts (a claim holds only when its control fails), the merge of the control's transports
with the claim's, and the rule fixes of issue 31 item 4 that are code: busbw over the NICs a
transport uses (load-balance) and every flap's iteration (link-flap)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from testbed.commands import reproduce as cmd
from testbed.metrics import claims as verdicts
from testbed.metrics import results
from testbed.metrics.kpis import faulted_iteration, faulted_iterations
from testbed.metrics.nics import nic_bandwidth_bps, planes_used
from testbed.spec import SpecError
from testbed.spec.claimsfile import load_claims

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "scenarios" / "paper"

CLAIM = """\
claims:
  - id: fo
    section: "evaluation: failover"
    figure: "a few RTTs"
    scenario: {scenario}
    rules:
      - mrc worst_stall.s <= 0.25 * rc worst_stall.s
    scaling: "10 Mbit/s"
    estimate: {{quick: 1m, full: 3m}}
    control:
      removes: "failover"
      set:
{set}
      transports: {transports}
"""


def _file(tmp_path: Path, set_lines: str = "        workload.evs_per_qp: 1", transports: str = "[mrc]",
          scenario: Path = PAPER / "failover.yaml") -> Path:
    p = tmp_path / "claims.yaml"
    p.write_text(CLAIM.format(scenario=scenario, set=set_lines, transports=transports))
    return p


def _doc(per_seed: list[dict], scenario: str = "s") -> dict:
    return results.from_trials([{"scenario": scenario, "seed": i + 1, "transports": t}
                                for i, t in enumerate(per_seed)])


def _stall(mrc: float, rc: float | None = None) -> dict:
    out = {"mrc": {"worst_stall": {"s": mrc}, "valid": True}}
    if rc is not None:
        out["rc"] = {"worst_stall": {"s": rc}, "valid": True}
    return out


# -- the control block: parsed, checked at its lines ------------------------------------------------

def test_control_is_parsed(tmp_path):
    c = load_claims(_file(tmp_path)).claims[0]
    assert c.control.removes == "failover" and c.control.transports == ("mrc",)
    assert c.control.set_texts() == {"workload.evs_per_qp": "1"} and c.control.line == 11
    assert c.control.overrides[0].key == ("workload", "evs_per_qp") and c.control.overrides[0].line == 13


def test_bad_key_path_syntax_is_a_file_line_error(tmp_path):
    with pytest.raises(SpecError) as exc:
        load_claims(_file(tmp_path, "        workload..evs: 1", "[mrc, nonsense]"))
    text = {(p.line, p.key_path): p.message for p in exc.value.problems}
    assert "bad key path" in text[(13, "claims[0].control.set.workload..evs")]
    assert "is not a transport" in text[(14, "claims[0].control.transports[1]")]


def _plan_problems(path: Path) -> list[str]:
    claims = load_claims(path)
    _, problems = cmd.prepare(path, list(claims.claims))
    return [str(p) for p in problems]


def test_key_path_naming_no_place_and_refused_value_are_file_line_errors(tmp_path):
    path = _file(tmp_path, "        workload.evs_per_qp: 1\n        workload.nothing.here: 3\n        timeline[0].after: soon")
    probs = _plan_problems(path)
    assert any(p.startswith(f"{path}:14: claims.fo.control.set.workload.nothing.here: failover.yaml refuses it: ")
               and "workload.nothing: unknown key" in p for p in probs), probs
    assert any(p.startswith(f"{path}:15: claims.fo.control.set.timeline[0].after: ") and "'soon'" in p
               for p in probs), probs
    assert not any(":13:" in p for p in probs)          # workload.evs_per_qp: 1 is fine
    refused = _plan_problems(_file(tmp_path, "        workload.evs_per_qp: 0"))
    assert len(refused) == 1 and refused[0].startswith(f"{path}:13: claims.fo.control.set.workload.evs_per_qp: ")
    both = _plan_problems(_file(tmp_path, "        workload.evs: 1"))     # the scenario gives evs_per_qp
    assert len(both) == 1 and both[0].startswith(f"{path}:13: claims.fo.control.set.workload.evs: ")
    assert "not both" in both[0]
    wrong = _plan_problems(_file(tmp_path, transports="[mrc, rc-x16]"))
    assert wrong == [f"{path}:11: claims.fo.control.transports: transport rc-x16 is not in failover.yaml's list "
                     "(mrc, rc, tcp)"]


def test_bad_control_stops_reproduce_before_any_run(tmp_path, capsys, monkeypatch):
    def no_runs(*a, **k):
        raise AssertionError("ran with a bad control")
    monkeypatch.setattr("testbed.commands.run.run_many", no_runs)
    path = _file(tmp_path, "        workload.evz: 1")
    args = argparse.Namespace(quick=True, claims=None, trials=None, out=tmp_path / "out", claims_file=path,
                              plan=True, plots=False)
    assert cmd.run(args) == 2
    assert f"{path}:13: claims.fo.control.set.workload.evz: failover.yaml refuses it" in capsys.readouterr().err


# -- verdicts: a claim holds only with a failing control ---------------------------------------------

def test_holds_only_when_the_control_fails(tmp_path):
    claim = load_claims(_file(tmp_path)).claims[0]
    doc = _doc([_stall(0.1, 2.5)])
    v = verdicts.judge(claim, doc, None, _doc([_stall(3.0)]))      # one EV: mrc stalls as rc does
    assert v["verdict"] == "yes" and v["rules_verdict"] == "yes"
    assert v["control"]["outcome"] == "fails as it should" and v["control"]["rules"][0]["holds"] is False
    # the control's mrc replaced the claim's, rc came from the claim's runs
    assert v["control"]["rules"][0]["left"]["median"] == 3.0 and v["control"]["rules"][0]["bound"] == 0.625

    v = verdicts.judge(claim, doc, None, _doc([_stall(0.12)]))    # the control passes too
    assert v["verdict"] == "unproven" and v["rules_verdict"] == "yes"
    assert v["control"]["outcome"] == "passes: claim does not discriminate"
    assert "control passes: claim does not discriminate" in v["reason"]

    v = verdicts.judge(claim, doc, None, None, "no run gave a summary (exit status 1)")
    assert v["verdict"] == "holds on its rules; control unproven"
    assert v["control"]["outcome"] == "could not run: unproven" and "exit status 1" in v["reason"]

    bad = _doc([{"mrc": {"worst_stall": {"s": 3.0}, "valid": False, "invalid_reasons": ["starved"]}}])
    v = verdicts.judge(claim, doc, None, bad)       # an invalid control could not run
    assert v["verdict"] == "holds on its rules; control unproven"
    assert v["control"]["outcome"] == "could not run: unproven" and "invalid in 1 of 1 trials (starved)" in v["reason"]

    v = verdicts.judge(claim, _doc([_stall(1.0, 2.5)]), None, _doc([_stall(3.0)]))   # the rules fail: no
    assert v["verdict"] == "no" and v["control"]["outcome"] == "fails as it should"


def test_a_claim_without_control_is_unproven(tmp_path):
    text = _file(tmp_path).read_text().split("    control:")[0]
    p = tmp_path / "c2.yaml"
    p.write_text(text)
    claim = load_claims(p).claims[0]
    v = verdicts.judge(claim, _doc([_stall(0.1, 2.5)]))
    assert claim.control is None and v["verdict"] == "unproven" and v["control"] is None
    assert "no control" in v["reason"]


def test_control_points_merge_by_label():
    def sweep(points: dict[str, dict]) -> dict:
        key = "timeline[0].loss.percent"
        pts = [results.point(_doc([t])["points"][0], {key: v}, f"{key}={v}", f"p{i}")
               for i, (v, t) in enumerate(points.items())]
        return results.document("sweep", "s", pts, [key])
    claim_doc = sweep({"0%": {"mrc": {"busbw_fraction_of_host": 1}, "rc": {"busbw_fraction_of_host": 2}}, "1%": {"mrc": {"busbw_fraction_of_host": 3}, "rc": {"busbw_fraction_of_host": 4}}})
    ctl_doc = sweep({"1%": {"mrc": {"busbw_fraction_of_host": 30}}, "0%": {"mrc": {"busbw_fraction_of_host": 10}}})
    merged = verdicts.merge_control(claim_doc, ctl_doc, ["mrc"])
    got = {p["label"]: {t: v["busbw_fraction_of_host"]["median"] for t, v in p["transports"].items()} for p in merged["points"]}
    assert got == {"timeline[0].loss.percent=0%": {"rc": 2, "mrc": 10},
                   "timeline[0].loss.percent=1%": {"rc": 4, "mrc": 30}}
    assert claim_doc["points"][0]["transports"]["mrc"]["busbw_fraction_of_host"]["median"] == 1     # not modified
    # a transport the control should have run but did not: removed, so its rules are not judged
    assert "rc" not in verdicts.merge_control(claim_doc, ctl_doc, ["mrc", "rc"])["points"][0]["transports"]


def test_every_shipped_claim_names_a_control():
    claims = load_claims(PAPER / "claims.yaml").claims
    assert all(c.control is not None and c.control.removes for c in claims)
    by_id = {c.id: c.control for c in claims}
    assert by_id["ev-gray-failure"].set_texts() == {"controller.policy": "none"}
    assert by_id["load-balance"].set_texts() == {"workload.ev_paths": "oblivious", "workload.iterations": "2"}
    # issue 45: no control pins one EV to one path any more
    assert not any(k in ("workload.evs", "workload.evs_per_qp") and v == "1"
                   for c in claims for k, v in c.control.set_texts().items())


# -- load-balance: busbw over the NICs a transport uses ----------------------------------------------

def _lb_claim():
    return next(c for c in load_claims(PAPER / "claims.yaml").claims if c.id == "load-balance")


def _lb(mrc: float, rc: float, x16: float, planes_rc: int = 4) -> dict:
    """KPIs of one trial: busbw over the NICs used; over the host's 4 NICs rc's is a quarter of it."""
    def t(frac_nics: float, nics_of_4: int) -> dict:
        return {"busbw_fraction_of_nics": frac_nics, "busbw_fraction_of_host": frac_nics * nics_of_4 / 4,
                "valid": True}
    return {"mrc": t(mrc, 4), "rc": t(rc, 1), "rc-x16": t(x16, 1), "tcp": t(rc, 1)}


def test_load_balance_compares_collisions_not_the_plane_count():
    claim = _lb_claim()
    # no ECMP collisions at all: rc as efficient per NIC as mrc. Over the host's 4 NICs rc reads
    # a quarter of mrc, which the old rule (rc < 0.6 x mrc, per host) took for "about half".
    same = verdicts.judge_rules(claim, _doc([_lb(0.9, 0.9, 0.85)]))
    assert same["verdict"] == "no"
    assert [r["holds"] for r in same["rules"]] == [True, True, False]
    half = verdicts.judge_rules(claim, _doc([_lb(0.9, 0.45, 0.7)]))
    assert half["verdict"] == "yes"
    tenth = verdicts.judge_rules(claim, _doc([_lb(0.9, 0.09, 0.7)]))     # two-sided: far below half fails
    assert tenth["verdict"] == "no" and [r["holds"] for r in tenth["rules"]] == [True, False, True]
    beaten = verdicts.judge_rules(claim, _doc([_lb(0.9, 0.45, 0.95)]))   # 16 RoCE QPs beat one MRC QP
    assert beaten["verdict"] == "no" and beaten["rules"][0]["holds"] is False


def _jobs(transport: str, evs: int | None = None) -> tuple[list[dict], object]:
    from testbed.commands.run import _load
    from testbed.spec.jobs import build_jobs
    args = argparse.Namespace(scenario=str(PAPER / "load-balance.yaml"), overrides=[] if evs is None
                              else [f"workload.evs={evs}"], seed=None)
    sc = _load(args, check_sweep=False)
    return build_jobs(sc, transport, run_id="t", control_socket="-"), sc.topology


def test_nic_bandwidth_is_that_of_the_nics_a_transport_uses():
    rc, topo = _jobs("rc")
    mrc, _ = _jobs("mrc")
    one, _ = _jobs("mrc", evs=1)
    link = 2_000_000                      # leaf-spine-4plane-32: 2 Mbit/s host links, 4 planes
    assert all(planes_used(j) == {0} for j in rc) and all(planes_used(j) == {0, 1, 2, 3} for j in mrc)
    assert nic_bandwidth_bps(rc, topo) == link and nic_bandwidth_bps(mrc, topo) == 4 * link
    assert nic_bandwidth_bps(one, topo) == link                      # one EV: one plane's NIC
    assert nic_bandwidth_bps(mrc, None, link) == 4 * link             # without the topology file
    assert nic_bandwidth_bps([], topo) is None


# -- link-flap: every flap counts ---------------------------------------------------------------------

def _spans(seconds: list[float]) -> list[dict]:
    t, out = 0.0, []
    for i, s in enumerate(seconds):
        out.append({"size": 1 << 20, "iter": i, "warmup": i == 0, "start_s": t, "end_s": t + s, "seconds": s})
        t += s
    return out


def test_every_flap_counts():
    # 1 warm-up + 10 measured iterations of 1.7 s; three flaps, down 2.15 s of every 4.3 s from 2.0 s;
    # the first flap's iteration is as fast as a healthy one, the third's is 30% slower
    secs = [1.7] * 11
    spans = _spans(secs)
    windows = [{"t_s": t, "until_s": t + 2.15, "link": "e0_0-a0_0", "action": "flap"} for t in (3.6, 7.9, 12.2)]
    hit = [it["iter"] for it in spans if not it["warmup"]
           and any(it["start_s"] <= w["until_s"] and w["t_s"] <= it["end_s"] for w in windows)]
    third = max(hit)
    secs[third] = 1.7 * 1.3
    spans = _spans(secs)
    old = faulted_iteration(spans, windows)
    new = faulted_iterations(spans, windows)
    assert abs(old["slowdown_pct"]) < 1e-9                  # the first flap's iteration only
    assert new["worst_slowdown_pct"] == pytest.approx(30.0) and new["n"] == len(hit)
    assert [r["iter"] for r in new["iters"]] == hit
    assert faulted_iterations(spans, []) is None
    assert faulted_iterations(spans[:1], windows) is None    # no measured iteration

    claim = next(c for c in load_claims(PAPER / "claims.yaml").claims if c.id == "link-flap")
    doc = _doc([{"mrc": {"faulted_iteration": old, "faulted_iterations": new, "valid": True}}])
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "no" and "30 vs 5" in v["reason"]


def test_an_incomplete_run_fails_the_rules_it_feeds(tmp_path):
    """Measured (failover's control, one EV per QP): the QP whose only path died went to ERR
    39 s later and the ring never finished; the stall KPI, computed on finished iterations,
    read 110 ms. Such a run is not a value for a rule: in the claim's runs the rule fails; a
    control that ended so could not run (issue 45: it shows a QP in ERR, not that the rules
    can fail on a run that finished)."""
    claim = load_claims(_file(tmp_path)).claims[0]
    dead = {"mrc": {"worst_stall": {"s": 0.11}, "valid": True,
                    "completion": {"complete": False, "reason": "rank 11 failed: QPChannelError: retry exhausted"}}}
    doc = _doc([dead])
    done = doc["points"][0]["transports"]["mrc"]["completion"]
    assert {k: done[k] for k in ("complete", "incomplete", "reasons")} == {
        "complete": 0, "incomplete": 1, "reasons": ["rank 11 failed: QPChannelError: retry exhausted"]}
    ok = _doc([{**_stall(0.1, 2.5), "rc": {"worst_stall": {"s": 2.5}, "valid": True, "completion": {"complete": True}}}])
    v = verdicts.judge(claim, ok, None, doc)
    assert v["verdict"] == "holds on its rules; control unproven"
    assert v["control"]["outcome"] == "could not run: unproven"
    assert "mrc: did not complete 1 of 1 trials (rank 11 failed" in v["control"]["rules"][0]["reason"]
    assert "mrc: did not complete 1 of 1 trials (rank 11 failed" in v["control"]["reason"]
    dead_claim = _doc([{**dead, "rc": {"worst_stall": {"s": 2.5}, "valid": True}}])
    assert verdicts.judge_rules(claim, dead_claim)["verdict"] == "no"       # the claim's own run: the rule fails
    assert verdicts.judge_rules(claim, doc)["verdict"] == "unproven"        # rc is not in it: 0 of 1 trials


def _stand_in_file(tmp_path: Path, stand_in: str, transports: str = "[mrc]") -> Path:
    p = tmp_path / "claims.yaml"
    p.write_text(CLAIM.format(scenario=PAPER / "failover.yaml", set="        workload.evs_per_qp: 1",
                              transports=transports) + f"      stand_in: {stand_in}\n")
    return p


def test_a_stand_in_runs_another_transport_and_is_judged_as_the_one_it_replaces(tmp_path):
    """A mechanism only another transport lacks (selective repeat: rc's go-back-N) is removed by
    running that transport in the claim transport's place; its results stand for it."""
    claim = load_claims(_stand_in_file(tmp_path, "{mrc: rc}")).claims[0]
    assert claim.control.stand_in == (("mrc", "rc"),) and claim.control.runs(["mrc", "rc", "tcp"]) == ["rc"]
    v = verdicts.judge(claim, _doc([_stall(0.1, 2.5)]), None, _doc([{"rc": {"worst_stall": {"s": 3.0},
                                                                           "valid": True}}]))
    assert v["verdict"] == "yes" and v["control"]["outcome"] == "fails as it should"
    assert v["control"]["rules"][0]["left"]["median"] == 3.0 and v["control"]["rules"][0]["bound"] == 0.625
    assert v["control"]["stand_in"] == {"mrc": "rc"}
    passes = verdicts.judge(claim, _doc([_stall(0.1, 2.5)]), None, _doc([{"rc": {"worst_stall": {"s": 0.1},
                                                                               "valid": True}}]))
    assert passes["control"]["outcome"] == "passes: claim does not discriminate"
    alone = verdicts.merge_control(None, _doc([{"rc": {"worst_stall": {"s": 3.0}, "valid": True}}]), ["mrc"],
                                   claim.control.stand_in)     # the claim's runs missing: the control's renamed
    assert list(alone["points"][0]["transports"]) == ["mrc"]


def test_a_stand_in_names_transports_the_control_runs(tmp_path):
    with pytest.raises(SpecError) as exc:
        load_claims(_stand_in_file(tmp_path, "{mrc: roce}"))
    assert "'roce' is not a transport" in str(exc.value.problems[0])
    with pytest.raises(SpecError) as exc:
        load_claims(_stand_in_file(tmp_path, "{mrc: mrc}"))
    assert "mrc cannot stand in for itself" in str(exc.value.problems[0])
    path = _stand_in_file(tmp_path, "{rc: rc-dcqcn}")
    assert _plan_problems(path) == [f"{path}:11: claims.fo.control.stand_in.rc: transport rc is not one the "
                                    "control runs (mrc)"]
