"""No verdict over missing data (issue 45, item 5): a claim judged on fewer trials than asked for,
on a trial without one of its transports, on a job of several that did not finish, or on wrong
results never holds; a control that did not run complete and valid cannot show that the rules
can fail. Summaries and results documents built in memory, as in test_reproduce*.py."""

from __future__ import annotations

from pathlib import Path

from testbed.metrics import claims as verdicts
from testbed.metrics import results
from testbed.report.reproduce import claim_entry, document, markdown
from testbed.spec.claimsfile import load_claims

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "scenarios" / "paper"

CLAIM = """\
claims:
  - id: c
    section: "evaluation"
    figure: "a figure"
    scenario: {scenario}
    rules:
{rules}
    scaling: "10 Mbit/s"
    estimate: {{quick: 1m, full: 3m}}
    control:
      removes: "the mechanism"
      set: {{workload.evs_per_qp: 1}}
      transports: [mrc]
"""


def _claim(tmp_path: Path, rules: list[str], scenario: Path = PAPER / "failover.yaml"):
    p = tmp_path / "claims.yaml"
    p.write_text(CLAIM.format(scenario=scenario, rules="".join(f"      - {r}\n" for r in rules)))
    return load_claims(p).claims[0]


def _doc(per_seed: list[dict], scenario: str = "s") -> dict:
    """A trials document: per_seed[i] = {transport: summary fields} (the trials that gave a summary)."""
    return results.from_trials([{"scenario": scenario, "seed": i + 1, "transports": t}
                                for i, t in enumerate(per_seed)])


def ok(**kw) -> dict:
    """A transport summary of a run that finished, valid, with right results; ``kw`` over it."""
    return {"valid": True, "completion": {"complete": True, "reason": None}, "wrong": 0, "qp_errors": 0, **kw}


def stall(s: float, **kw) -> dict:
    return ok(worst_stall={"s": s}, **kw)


# -- 1. fewer trials than asked, a transport missing, a job unfinished, wrong results ------------

def test_fewer_trials_than_asked_is_unproven(tmp_path):
    """The third trial's summary raised (a MetricsError): the two left hold, but a median over 2
    of 3 trials is not the claim's."""
    claim = _claim(tmp_path, ["mrc busbw_fraction_of_host >= 0.90"])
    two = _doc([{"mrc": ok(busbw_fraction_of_host=0.95)}] * 2)
    v = verdicts.judge_rules(claim, two, trials=3)
    assert v["verdict"] == "unproven" and v["reason"].startswith("2 of 3 trials"), v
    assert "1 of 3 trials gave no summary" in v["reason"]
    assert v["trials"] == {"n": 2, "of": 3} and v["rules"][0]["holds"] is True   # the numbers alone would hold
    two["inputs"] = {"trials": 3}                    # reproduce records what it asked for
    assert verdicts.judge_rules(claim, two)["verdict"] == "unproven"
    three = _doc([{"mrc": ok(busbw_fraction_of_host=0.95)}] * 3)
    assert verdicts.judge_rules(claim, three, trials=3)["verdict"] == "yes"


def test_a_sweep_point_without_any_summary_is_unproven(tmp_path):
    claim = _claim(tmp_path, ["mrc busbw_fraction_of_host @1% >= 0.5 * mrc busbw_fraction_of_host @0%"],
                   PAPER / "random-loss.yaml")
    key = "timeline[0].loss.percent"
    pt = results.point(_doc([{"mrc": ok(busbw_fraction_of_host=0.9)}])["points"][0], {key: "0%"}, f"{key}=0%", "p01")
    doc = results.document("sweep", "s", [pt], [key])        # the 1% point: no trial gave a summary
    v = verdicts.judge_rules(claim, doc, trials=1)
    assert v["verdict"] == "unproven" and v["trials"] == {"n": 0, "of": 1}
    assert "mrc @1%: no trial gave a summary" in v["reason"]


def test_a_transport_missing_from_a_trial_counts_as_missing(tmp_path):
    claim = _claim(tmp_path, ["mrc worst_stall.s <= 0.25 * rc worst_stall.s"])
    doc = _doc([{"mrc": stall(0.1), "rc": stall(2.5)}, {"mrc": stall(0.1)}, {"mrc": stall(0.1), "rc": stall(2.5)}])
    v = verdicts.judge_rules(claim, doc)             # asked for: the trials that gave a summary (3)
    assert v["verdict"] == "unproven" and v["trials"] == {"n": 2, "of": 3}, v
    assert "rc: not in 1 of 3 trials" in v["reason"]
    rc = next(t for t in v["terms"] if t["transport"] == "rc")
    assert rc["trials"] == {"n": 2, "of": 3}
    assert verdicts.judge_rules(claim, _doc([{"mrc": stall(0.1)}]))["verdict"] == "unproven"   # rc in none


def _incast(victim: float, *, complete: bool = True, valid: bool | None = None, wrong: int = 0) -> dict:
    """mrc's summary in a run of two jobs: job 0 (the incast) finished; the victim as given."""
    row = {"job": "victim", "busbw_fraction_of_host": victim, "complete": complete,
           "completion": None if complete else "timeout: 2 of 2 ranks unfinished", "wrong": wrong}
    if valid is not None:
        row["valid"] = valid
    return ok(busbw_fraction_of_host=0.9, jobs=[{"job": "incast", "busbw_fraction_of_host": 0.9, "complete": True,
                                                 "completion": None, "wrong": 0}, row])


def test_every_job_of_a_multi_job_claim_must_finish_valid(tmp_path):
    """Before: only job 0's completion and validity were read, so a victim that never finished
    (its busbw over the iterations it did finish) could hold the claim."""
    claim = _claim(tmp_path, ["mrc jobs.victim.busbw_fraction_of_host >= 0.85"], PAPER / "incast.yaml")
    assert verdicts.judge_rules(claim, _doc([{"mrc": _incast(0.95)}] * 3))["verdict"] == "yes"
    unfinished = _doc([{"mrc": _incast(0.95)}, {"mrc": _incast(0.96, complete=False)}, {"mrc": _incast(0.95)}])
    v = verdicts.judge_rules(claim, unfinished)
    assert v["verdict"] == "unproven" and v["trials"] == {"n": 2, "of": 3}, v
    assert "job victim did not complete in 1 of 3 trials (timeout: 2 of 2 ranks unfinished)" in v["reason"]
    starved = _doc([{"mrc": _incast(0.95)}, {"mrc": _incast(0.95, valid=False)}, {"mrc": _incast(0.95)}])
    v = verdicts.judge_rules(claim, starved)
    assert v["verdict"] == "unproven" and "job victim invalid in 1 of 3 trials" in v["reason"]


def test_wrong_results_fail_the_claim(tmp_path):
    claim = _claim(tmp_path, ["mrc busbw_fraction_of_host >= 0.90"])
    doc = _doc([{"mrc": ok(busbw_fraction_of_host=0.95)}, {"mrc": ok(busbw_fraction_of_host=0.95, wrong=12)},
                {"mrc": ok(busbw_fraction_of_host=0.95)}])
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "no" and "mrc: wrong results in 1 of 3 trials (12 elements)" in v["reason"], v
    victim = _claim(tmp_path, ["mrc jobs.victim.busbw_fraction_of_host >= 0.85"], PAPER / "incast.yaml")
    v = verdicts.judge_rules(victim, _doc([{"mrc": _incast(0.95, wrong=3)}]))
    assert v["verdict"] == "no" and "wrong results" in v["reason"]
    # wrong results decide even with a trial missing: a claim whose results are wrong does not hold
    assert verdicts.judge_rules(claim, doc, trials=4)["verdict"] == "no"


# -- 2. controls: only a control that ran complete and valid can fail as it should ----------------

CTL_CASES = {
    "a QP in ERR": stall(3.0, qp_errors=1, completion={"complete": False, "reason": "rank 11 failed: retry exhausted"}),
    "qp_errors alone": stall(3.0, qp_errors=2),
    "timed out": stall(3.0, completion={"complete": False, "reason": "timeout after 120 s"}),
    "invalid": stall(3.0, valid=False, invalid_reasons=["agents starved"]),
    "wrong results": stall(3.0, wrong=5),
}


def test_a_control_that_did_not_run_complete_and_valid_could_not_run(tmp_path):
    claim = _claim(tmp_path, ["mrc worst_stall.s <= 0.25 * rc worst_stall.s"])
    doc = _doc([{"mrc": stall(0.1), "rc": stall(2.5)}])
    good = verdicts.judge(claim, doc, None, _doc([{"mrc": stall(3.0)}]), trials=1)
    assert good["verdict"] == "yes" and good["control"]["outcome"] == "fails as it should"
    for case, mrc in CTL_CASES.items():
        v = verdicts.judge(claim, doc, None, _doc([{"mrc": mrc}]), trials=1)
        assert v["control"]["outcome"] == "could not run: unproven", (case, v["control"])
        assert v["verdict"] == "holds on its rules; control unproven" and v["rules_verdict"] == "yes", case
        assert "the control could not run" in v["reason"], case
    err = verdicts.judge(claim, doc, None, _doc([{"mrc": CTL_CASES["a QP in ERR"]}]), trials=1)
    assert "mrc: did not complete 1 of 1 trials (rank 11 failed" in err["control"]["reason"]
    assert "mrc: a QP in ERR in 1 of 1 trials" in err["control"]["reason"]
    # crashed: one of two trials gave no summary
    two = _doc([{"mrc": stall(0.1), "rc": stall(2.5)}] * 2)
    crashed = verdicts.judge(claim, two, None, _doc([{"mrc": stall(3.0)}]), trials=2)
    assert crashed["control"]["outcome"] == "could not run: unproven"
    assert "1 of 2 trials gave no summary" in crashed["control"]["reason"]
    gone = verdicts.judge(claim, doc, None, None, "no run gave a summary (exit status 1)", trials=1)
    assert gone["verdict"] == "holds on its rules; control unproven" and "exit status 1" in gone["reason"]


def test_a_control_that_passes_or_a_claim_that_fails_is_unchanged(tmp_path):
    claim = _claim(tmp_path, ["mrc worst_stall.s <= 0.25 * rc worst_stall.s"])
    doc = _doc([{"mrc": stall(0.1), "rc": stall(2.5)}])
    passes = verdicts.judge(claim, doc, None, _doc([{"mrc": stall(0.1)}]), trials=1)
    assert passes["verdict"] == "unproven" and passes["control"]["outcome"] == "passes: claim does not discriminate"
    fails = verdicts.judge(claim, _doc([{"mrc": stall(1.0), "rc": stall(2.5)}]), None,
                           _doc([{"mrc": CTL_CASES["a QP in ERR"]}]), trials=1)
    assert fails["verdict"] == "no"


# -- 5. the report: the new words and n of N ---------------------------------------------------------

def test_the_report_shows_n_of_n_and_the_new_verdicts(tmp_path):
    claim = _claim(tmp_path, ["mrc worst_stall.s <= 0.25 * rc worst_stall.s"])
    short = verdicts.judge(claim, _doc([{"mrc": stall(0.1), "rc": stall(2.5)}] * 2), None,
                           _doc([{"mrc": stall(3.0)}] * 2), trials=3)
    unproven_ctl = verdicts.judge(claim, _doc([{"mrc": stall(0.1), "rc": stall(2.5)}] * 3), None,
                                  _doc([{"mrc": CTL_CASES["a QP in ERR"]}] * 3), trials=3)
    md = markdown(document([claim_entry(claim, "r.json"), claim_entry(claim, "r.json")], [short, unproven_ctl],
                           quick=False, trials=3))
    assert "this testbed, median [min-max] (n of N)" in md
    assert "| unproven (2 of 3 trials: " in md and "(2 of 3)" in md
    assert "| holds on its rules; control unproven (the control could not run" in md
    assert "control could not run: unproven" in md and "(3 of 3)" in md
