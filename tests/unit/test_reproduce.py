"""testbed reproduce without a fabric: the claims file, the rule forms, verdicts (invalid and
not runnable included), the table, resume, and the shipped claims."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from rich.console import Console

from testbed.commands import reproduce as cmd
from testbed.metrics import claims as verdicts
from testbed.metrics import results
from testbed.report.reproduce import claim_entry, document, markdown, reproduce_table
from testbed.spec import SpecError
from testbed.spec.claimsfile import Term, is_claims_file, load_claims, parse_rule, rule_problems

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "scenarios" / "paper"

GOOD = """\
trials: 2
claims:
  - id: bw
    section: "evaluation: bandwidth"
    figure: "~96% of peak"
    scenario: {scenario}
    rules:
      - mrc busbw_fraction_of_host >= 0.90
    scaling: "10 Mbit/s"
    estimate: {{quick: 1m, full: 3m}}
    control:
      removes: "spraying"
      set: {{workload.evs_per_qp: 1}}
"""


def _claims(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "claims.yaml"
    p.write_text(text)
    return p


def _doc(per_seed: list[dict], scenario: str = "s") -> dict:
    """A trials document: per_seed[i] = {transport: summary fields}."""
    return results.from_trials([{"scenario": scenario, "seed": i + 1, "transports": t}
                                for i, t in enumerate(per_seed)])


def _sweep(points: dict[str, list[dict]], key: str = "timeline[0].loss.percent") -> dict:
    pts = []
    for n, (value, per_seed) in enumerate(points.items(), 1):
        one = _doc(per_seed)
        pts.append(results.point(one["points"][0], {key: value}, f"{key}={value}", f"p{n:02d}"))
    return results.document("sweep", "s", pts, [key])


def _claim(tmp_path, rules: list[str], scenario: Path = PAPER / "p2p-bandwidth.yaml"):
    text = GOOD.format(scenario=scenario).replace("      - mrc busbw_fraction_of_host >= 0.90\n",
                                                  "".join(f"      - {r}\n" for r in rules))
    return load_claims(_claims(tmp_path, text)).claims[0]


# -- the claims file -------------------------------------------------------------------------------

def test_good_claims_file(tmp_path):
    c = load_claims(_claims(tmp_path, GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml")))
    assert c.trials == 2 and [x.id for x in c.claims] == ["bw"]
    claim = c.claims[0]
    assert claim.estimate_quick_s == 60 and claim.estimate_full_s == 180 and claim.trials == 2
    assert claim.rules[0].left == Term("mrc", "busbw_fraction_of_host") and claim.rules[0].constant == 0.9
    assert claim.rules[0].line == 8 and claim.line == 3


def test_claims_file_problems_have_lines(tmp_path):
    text = """\
claims:
  - id: 9bad
    section: "s"
    figure: "f"
    scenario: nowhere.yaml
    rules:
      - mrc busbw_fraction_of_host => 0.9
      - mrc busbw_fraction_of_host >= 0.9 * 
      - tcp4 busbw_fraction_of_host >= 1
    scaling: ""
    estimate: {quick: 1 fortnight, full: 3m}
    colour: red
  - id: ok
    section: "s"
    figure: "f"
    scenario: nowhere.yaml
    rules: []
    scaling: "x"
"""
    with pytest.raises(SpecError) as exc:
        load_claims(_claims(tmp_path, text))
    text_of = {(p.line, p.key_path): p.message for p in exc.value.problems}
    assert "must start with a letter" in text_of[(2, "claims[0].id")]
    assert "no such scenario file" in text_of[(5, "claims[0].scenario")]
    assert "not a rule" in text_of[(7, "claims[0].rules[0]")]
    assert "not a rule" in text_of[(8, "claims[0].rules[1]")]
    assert "is not a transport" in text_of[(9, "claims[0].rules[2]")]
    assert "must not be empty" in text_of[(10, "claims[0].scaling")]
    assert (11, "claims[0].estimate.quick") in text_of
    assert "unknown key" in text_of[(12, "claims[0].colour")]
    assert "expected at least one rule" in text_of[(17, "claims[1].rules")]
    assert "missing required key 'estimate'" in text_of[(13, "claims[1]")]
    assert all(str(p).startswith(f"{tmp_path / 'claims.yaml'}:") for p in exc.value.problems)


def test_duplicate_ids_and_not_a_mapping(tmp_path):
    one = GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml")
    two = one + one.split("claims:\n", 1)[1]
    with pytest.raises(SpecError, match=r"claims.yaml:14: claims\[1\].id: duplicate id 'bw' \(first at line 3\)"):
        load_claims(_claims(tmp_path, two))
    with pytest.raises(SpecError, match=r"claims.yaml:1: expected a mapping"):
        load_claims(_claims(tmp_path, "- 1\n"))


def test_parse_rule_forms():
    assert parse_rule("mrc busbw_fraction_of_host >= 0.90") == (Term("mrc", "busbw_fraction_of_host"), ">=", 0.9,
                                                               1.0, None)
    left, op, const, k, right = parse_rule("rc busbw_fraction_of_host < 0.6 * mrc busbw_fraction_of_host")
    assert (left.transport, op, const, k, right.transport) == ("rc", "<", None, 0.6, "mrc")
    left, op, const, k, right = parse_rule("mrc worst_stall.s<=rc-x16 worst_stall.s")
    assert (op, k, right) == ("<=", 1.0, Term("rc-x16", "worst_stall.s"))
    left, op, const, k, right = parse_rule("mrc busbw_fraction_of_host @1% >= 0.5 * mrc busbw_fraction_of_host@0%")
    assert left.point == "1%" and right.point == "0%" and k == 0.5
    assert parse_rule("rc-dcqcn jobs.victim.busbw_fraction_of_host > 1e-1")[2] == 0.1
    for bad in ("mrc >= 1", "mrc busbw == 1", "busbw >= 1", "mrc busbw >= 0.5 *", "mrc busbw >= -1",
                "mrc busbw >= 2 * 3"):
        with pytest.raises(ValueError):
            parse_rule(bad)


def test_rule_problems_name_what_the_scenario_lacks(tmp_path):
    claim = _claim(tmp_path, ["rc busbw_fraction_of_host >= 1", "mrc nonsense >= 1",
                              "mrc jobs.victim.busbw_fraction_of_host >= 1", "mrc busbw_mbit_per_s @1% >= 1"])
    probs = rule_problems(Path("c.yaml"), claim, ["mrc"], ["busbw_fraction_of_host", "busbw_mbit_per_s"],
                          ["job0"], ["busbw_fraction_of_host"], None)
    text = "\n".join(str(p) for p in probs)
    assert "transport rc is not in" in text and "unknown KPI nonsense" in text
    assert "jobs.<job>.<key>" in text and "has no sweep" in text
    assert all(p.line in (8, 9, 10, 11) for p in probs)
    sweep = rule_problems(Path("c.yaml"), claim, ["mrc", "rc"], ["busbw_fraction_of_host", "busbw_mbit_per_s"],
                          ["victim"], ["busbw_fraction_of_host"], ["0.1%", "1%"])
    assert [p.line for p in sweep] == [8, 9, 9, 10]   # every term without a point, and the unknown KPI
    assert "name the point (@value; one of 0.1%, 1%)" in str(sweep[0])


# -- verdicts ----------------------------------------------------------------------------------------

def test_constant_form(tmp_path):
    claim = _claim(tmp_path, ["mrc busbw_fraction_of_host >= 0.90"])
    doc = _doc([{"mrc": {"busbw_fraction_of_host": v, "valid": True}} for v in (0.95, 0.93, 0.80)])
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "yes" and v["rules"][0]["left"]["median"] == 0.93
    v = verdicts.judge_rules(claim, _doc([{"mrc": {"busbw_fraction_of_host": 0.85, "valid": True}}]))
    assert v["verdict"] == "no" and "0.85 vs 0.9" in v["reason"]


def test_transport_vs_k_times_transport(tmp_path):
    claim = _claim(tmp_path, ["rc busbw_fraction_of_host < 0.6 * mrc busbw_fraction_of_host",
                              "mrc busbw_fraction_of_host > rc busbw_fraction_of_host"])
    doc = _doc([{"mrc": {"busbw_fraction_of_host": 0.9, "valid": True},
                 "rc": {"busbw_fraction_of_host": 0.5, "valid": True}}])
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "yes" and v["rules"][0]["bound"] == pytest.approx(0.54)
    doc = _doc([{"mrc": {"busbw_fraction_of_host": 0.9, "valid": True},
                 "rc": {"busbw_fraction_of_host": 0.55, "valid": True}}])
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "no" and [r["holds"] for r in v["rules"]] == [False, True]


def test_sweep_points(tmp_path):
    claim = _claim(tmp_path, ["mrc busbw_fraction_of_host @0.1% >= 0.9 * mrc busbw_fraction_of_host @0.0001%",
                              "rc busbw_fraction_of_host @1% < 0.3 * rc busbw_fraction_of_host @0.0001%"])
    doc = _sweep({"0.0001%": [{"mrc": {"busbw_fraction_of_host": 0.9, "valid": True},
                               "rc": {"busbw_fraction_of_host": 0.8, "valid": True}}],
                  "0.1%": [{"mrc": {"busbw_fraction_of_host": 0.85, "valid": True},
                            "rc": {"busbw_fraction_of_host": 0.5, "valid": True}}],
                  "1%": [{"mrc": {"busbw_fraction_of_host": 0.6, "valid": True},
                          "rc": {"busbw_fraction_of_host": 0.1, "valid": True}}]})
    assert verdicts.point_texts(doc) == ["0.0001%", "0.1%", "1%"]
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "yes", v
    assert [t["term"] for t in v["terms"]] == ["mrc busbw_fraction_of_host @0.1%",
                                               "mrc busbw_fraction_of_host @0.0001%",
                                               "rc busbw_fraction_of_host @1%", "rc busbw_fraction_of_host @0.0001%"]
    assert verdicts.find_point(doc, "timeline[0].loss.percent=1%")["dir"] == "p03"


def test_invalid_runs_never_hold(tmp_path):
    claim = _claim(tmp_path, ["mrc busbw_fraction_of_host >= 0.90"])
    doc = _doc([{"mrc": {"busbw_fraction_of_host": 0.95, "valid": True}},
                {"mrc": {"busbw_fraction_of_host": 0.97, "valid": False,
                         "invalid_reasons": ["agents starved: p95 scheduling delay 9 ms"]}}])
    assert doc["points"][0]["transports"]["mrc"]["validity"] == {
        "valid": 1, "invalid": 1, "reasons": ["agents starved: p95 scheduling delay 9 ms"]}
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "invalid" and "agents starved" in v["reason"]
    assert v["rules"][0]["holds"] is True   # the numbers alone would hold: the verdict does not


def test_not_runnable(tmp_path):
    claim = _claim(tmp_path, ["mrc detect_s <= 5 * mrc base_rtt_s"])
    v = verdicts.judge_rules(claim, None, "paper-incast does not load here: no BPF")
    assert v["verdict"] == "not runnable" and "no BPF" in v["reason"] and v["rules"] == []
    # results without the rules' transport: missing data (0 of 1 trials), not a scenario that cannot run
    v = verdicts.judge_rules(claim, _doc([{"rc": {"detect_s": 1.0, "valid": True}}]))
    assert v["verdict"] == "unproven" and "mrc: not in 1 of 1 trials" in v["reason"]


def test_a_missing_value_fails_the_rule(tmp_path):
    """A trial whose detect_s is null (no EV retired) fails a rule on detect_s: it does not drop
    out of the median (two trials detecting in 1 RTT used to hold the rule with the third's null)."""
    claim = _claim(tmp_path, ["mrc detect_s <= 5 * mrc base_rtt_s"])
    doc = _doc([{"mrc": {"detect_s": d, "base_rtt_s": 0.02, "valid": True}} for d in (0.02, None, 0.02)])
    assert doc["points"][0]["transports"]["mrc"]["detect_s"]["missing"] == 1
    v = verdicts.judge_rules(claim, doc)
    assert v["verdict"] == "no" and v["rules"][0]["holds"] is False
    assert "mrc detect_s: no value in 1 of 3 trials" in v["reason"]
    v = verdicts.judge_rules(claim, _doc([{"mrc": {"detect_s": None, "base_rtt_s": 0.02, "valid": True}}]))
    assert v["verdict"] == "no" and "no value in 1 of 1 trials" in v["reason"]
    doc = _doc([{"mrc": {"detect_s": 0.02, "base_rtt_s": 0.02, "valid": True}}] * 3)
    assert verdicts.judge_rules(claim, doc)["verdict"] == "yes"


# -- the table ---------------------------------------------------------------------------------------

def _report(tmp_path):
    c1 = _claim(tmp_path, ["mrc busbw_fraction_of_host >= 0.90"])
    v1 = verdicts.judge(c1, _doc([{"mrc": {"busbw_fraction_of_host": x, "valid": True}} for x in (0.93, 0.95, 0.9)]),
                        None, _doc([{"mrc": {"busbw_fraction_of_host": 0.4, "valid": True}}]))
    v2 = verdicts.judge(c1, None, "a | b", None, "a | b")
    return document([claim_entry(c1, "out/bw/results.json", control_results="out/bw/control-results.json"),
                     claim_entry(c1, None)], [v1, v2], quick=True, trials=1)


def test_table_rendering(tmp_path):
    doc = _report(tmp_path)
    md = markdown(doc)
    assert ("| claim (paper section) | paper's figure | this testbed, median [min-max] (n of N) | holds? | control | "
            "scaling |") in md
    assert ("| bw (evaluation: bandwidth) | ~96% of peak | mrc busbw / host (%): 93.0 [90.0-95.0] (3 of 3) | yes | "
            "spraying: control fails as it should (1 of 1 rules fail; mrc busbw_fraction_of_host >= 0.90: "
            "0.4 vs 0.9); "
            "mrc busbw / host (%): 40.0 [40.0-40.0] (1 of 1) | 10 Mbit/s |") in md
    assert "**fails as it should**" in md and "    - `mrc busbw_fraction_of_host >= 0.90`: fails: 0.4 vs 0.9" in md
    assert "not runnable (a \\| b)" in md
    assert "`mrc busbw_fraction_of_host >= 0.90`: holds: 0.93 vs 0.9" in md
    console = Console(record=True, width=200)
    console.print(reproduce_table(doc))
    out = console.export_text()
    assert "1 of 2 hold (their controls fail)" in out and "93.0 [90.0-95.0] (3 of 3)" in out
    json.dumps(doc)   # reproduce.json is plain JSON


# -- the command: resume, plan ------------------------------------------------------------------------

def _args(claims_file: Path, out: Path, **kw) -> argparse.Namespace:
    base = dict(quick=True, claims=None, trials=None, out=out, claims_file=claims_file, plan=False, plots=False)
    return argparse.Namespace(**{**base, **kw})


def test_resume_skips_claims_with_results(tmp_path, monkeypatch):
    claims_file = _claims(tmp_path, GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml"))
    out = tmp_path / "out"
    doc = _doc([{"mrc": {"busbw_fraction_of_host": 0.94, "valid": True}}], "paper-p2p-bandwidth")
    cdoc = _doc([{"mrc": {"busbw_fraction_of_host": 0.3, "valid": True}}], "paper-p2p-bandwidth")
    prepared, _ = cmd.prepare(claims_file, load_claims(claims_file).claims)
    suite = cmd.Suite(prepared, quick=True, trials=None)
    doc["inputs"], cdoc["inputs"] = suite.inputs(prepared[0]), suite.inputs(prepared[0], control=True)
    assert doc["inputs"]["set"] == {} and cdoc["inputs"]["set"] == {"workload.evs_per_qp": "1"}
    (out / "bw").mkdir(parents=True)
    results.write(out / "bw" / "results.json", doc)
    results.write(out / "bw" / "control-results.json", cdoc)

    def no_runs(*a, **k):
        raise AssertionError("a claim with results was run again")
    monkeypatch.setattr("testbed.commands.run.run_many", no_runs)
    assert cmd.run(_args(claims_file, out)) == 0
    rep = json.loads((out / "reproduce.json").read_text())
    assert rep["format"] == "mrc-testbed-reproduce" and rep["quick"] is True
    assert rep["claims"][0]["verdict"]["verdict"] == "yes"
    assert rep["claims"][0]["results"] == str(out / "bw" / "results.json")
    assert rep["claims"][0]["control"]["results"] == str(out / "bw" / "control-results.json")
    assert rep["claims"][0]["verdict"]["control"]["outcome"] == "fails as it should"
    assert "| yes |" in (out / "reproduce.md").read_text()


def test_runs_a_claim_without_results_and_keeps_them(tmp_path, monkeypatch):
    claims_file = _claims(tmp_path, GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml"))
    out = tmp_path / "out"
    calls = []

    def fake(args, scenario, sweep, scenarios, transports, trials, parent, console, err, before_trial=None):
        calls.append((scenario.name, transports, trials, parent.name.split("-2")[0], scenario.workload.evs_per_qp,
                      [o.path for o in args.fixed_overrides]))
        before_trial(0, 1, 0, trials)
        return _doc([{"mrc": {"busbw_fraction_of_host": 0.5, "valid": True}}], scenario.name), 0
    monkeypatch.setattr("testbed.commands.run.run_many", fake)
    assert cmd.run(_args(claims_file, out)) == 0
    # the claim, then its control: the scenario with the control's override, same trials
    assert calls == [("paper-p2p-bandwidth", ["mrc"], 1, "runs", 16, []),
                     ("paper-p2p-bandwidth", ["mrc"], 1, "control-runs", 1, ["workload.evs_per_qp"])]
    assert (out / "bw" / "results.json").is_file() and (out / "bw" / "control-results.json").is_file()
    assert results.load(out / "bw" / "control-results.json")["control"] == {"set": {"workload.evs_per_qp": "1"},
                                                                             "transports": ["mrc"]}
    assert json.loads((out / "reproduce.json").read_text())["claims"][0]["verdict"]["verdict"] == "no"
    assert cmd.run(_args(claims_file, out)) == 0   # resumed: not run again
    assert len(calls) == 2


def test_results_of_other_inputs_are_run_again_and_kept(tmp_path, monkeypatch, capsys):
    """A results file made from another scenario, other trials or other code is not resumed: the
    claim runs again, and the old file is kept beside the new one."""
    claims_file = _claims(tmp_path, GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml"))
    out = tmp_path / "out"
    calls = []

    def fake(args, scenario, sweep, scenarios, transports, trials, parent, console, err, before_trial=None):
        calls.append(trials)
        return _doc([{"mrc": {"busbw_fraction_of_host": 0.5, "valid": True}}] * trials, scenario.name), 0
    monkeypatch.setattr("testbed.commands.run.run_many", fake)
    assert cmd.run(_args(claims_file, out)) == 0 and calls == [1, 1]
    assert cmd.run(_args(claims_file, out, trials=2)) == 0 and calls == [1, 1, 2, 2]     # trials changed
    assert "the trials changed since it was made" in capsys.readouterr().err
    stale = sorted(p.name for p in (out / "bw").glob("*.stale-*.json"))
    assert len(stale) == 2 and stale[0].startswith("control-results.stale-") and stale[1].startswith("results.stale-")
    assert results.load(out / "bw" / "results.json")["inputs"]["trials"] == 2

    monkeypatch.setattr(cmd, "code_sha256", lambda root=None: "other code")
    assert cmd.run(_args(claims_file, out, plan=True, trials=2)) == 0
    plan = " ".join(capsys.readouterr().out.split())
    assert "runs again: the code changed" in plan.replace("│", "").replace("  ", " ")
    assert cmd.run(_args(claims_file, out, trials=2)) == 0 and calls == [1, 1, 2, 2, 2, 2]
    doc = results.load(out / "bw" / "results.json")
    del doc["inputs"]                                  # written before inputs were recorded
    results.write(out / "bw" / "results.json", doc)
    assert cmd.run(_args(claims_file, out, trials=2)) == 0 and calls == [1, 1, 2, 2, 2, 2, 2]
    assert "its inputs (not recorded) changed" in capsys.readouterr().err


def test_code_digest_follows_the_sources(tmp_path):
    (tmp_path / "agents" / "mrc" / "core").mkdir(parents=True)
    (tmp_path / "testbed").mkdir()
    (tmp_path / "agents" / "mrc" / "core" / "a.c").write_text("int a;")
    (tmp_path / "testbed" / "b.py").write_text("b = 1")
    first = cmd.code_sha256(tmp_path)
    (tmp_path / "agents" / "mrc" / "_core.c").write_text("generated")       # Cython's output is not a source
    (tmp_path / "testbed" / "notes.md").write_text("x")
    assert cmd.code_sha256(tmp_path) == first
    (tmp_path / "agents" / "mrc" / "core" / "a.c").write_text("int a = 1;")
    assert cmd.code_sha256(tmp_path) != first


def test_interrupted_claim_is_not_kept(tmp_path, monkeypatch):
    claims_file = _claims(tmp_path, GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml"))
    out = tmp_path / "out"
    monkeypatch.setattr("testbed.commands.run.run_many", lambda *a, **k: (None, 130))
    assert cmd.run(_args(claims_file, out)) == 130
    assert not (out / "bw" / "results.json").exists()
    rep = json.loads((out / "reproduce.json").read_text())
    assert rep["claims"][0]["verdict"]["verdict"] == "not runnable"
    assert "interrupted" in rep["claims"][0]["verdict"]["reason"]


def test_bad_rule_against_the_scenario_is_exit_2(tmp_path, capsys):
    text = GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml").replace(
        "mrc busbw_fraction_of_host >= 0.90", "rc busbw_fraction_of_host >= 0.90")
    assert cmd.run(_args(_claims(tmp_path, text), tmp_path / "out")) == 2
    assert "claims.yaml:8: claims.bw.rules: 'rc busbw_fraction_of_host >= 0.90': transport rc" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert cmd.run(_args(_claims(tmp_path, GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml")), tmp_path / "out",
                         claims="nope")) == 2


# -- the shipped claims ------------------------------------------------------------------------------

def test_shipped_claims_check_and_fit_the_quick_budget():
    claims = load_claims(PAPER / "claims.yaml")
    ids = [c.id for c in claims.claims]
    assert ids == ["p2p-bandwidth", "failover", "load-balance", "incast", "random-loss", "ev-gray-failure",
                   "link-flap", "plane-failure", "switch-restart", "degraded-link"]
    prepared, problems = cmd.prepare(PAPER / "claims.yaml", list(claims.claims))
    assert problems == []
    assert sum(c.estimate_quick_s for c in claims.claims) <= 40 * 60
    assert is_claims_file(PAPER / "claims.yaml") and not is_claims_file(PAPER / "failover.yaml")


def test_validate_reads_the_claims_file():
    from testbed.commands.validate import check
    r = check(str(PAPER / "claims.yaml"), None)
    assert r["ok"], r["text"]
    assert r["summary"]["type"] == "claims" and len(r["summary"]["claims"]) == 10
