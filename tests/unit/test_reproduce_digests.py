"""Pre-registration (issue 45, item 4): each claim's rules, scenario (with its topology), control
and regime have a digest, stable across runs and key order, changed by a change to its part;
reproduce.json and reproduce.md keep them; --plan says what changed since the last full suite
and flags changed rules; --digests prints them. No fabric."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from testbed.commands import reproduce as cmd
from testbed.metrics import results
from testbed.spec.claimdigests import PARTS, claim_digests, entry_digests
from testbed.spec.claimsfile import load_claims
from .test_reproduce import GOOD   # the command's claims file, as test_reproduce writes it

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "scenarios" / "paper"
TOPOLOGY = ROOT / "topologies" / "fat-tree-k4-bdp64.yaml"

CLAIMS = """\
trials: 2
regime:
  rate: {{value: 800Gbit, source: "testbed bandwidth"}}
  base_rtt: {{value: 8us, source: "assumption"}}
claims:
  - id: bw
    section: "evaluation: bandwidth"
    figure: "~96% of peak"
    scenario: {scenario}
    rules:
      - mrc busbw_fraction_of_host >= 0.90
      - mrc busbw_fraction_of_host <= 1.5
    scaling: "10 Mbit/s"
    estimate: {{quick: 1m, full: 3m}}
    control:
      removes: "spraying"
      set: {{workload.evs_per_qp: 1, workload.iterations: 2}}
      transports: [mrc]
"""


def _copy_scenario(tmp_path: Path) -> Path:
    """p2p-bandwidth.yaml and its topology, copied beside each other in ``tmp_path``."""
    (tmp_path / "topo.yaml").write_text(TOPOLOGY.read_text())
    text = (PAPER / "p2p-bandwidth.yaml").read_text()
    ref = next(line for line in text.splitlines() if line.startswith("topology:"))
    (tmp_path / "scen.yaml").write_text(text.replace(ref, "topology: topo.yaml"))
    return tmp_path / "scen.yaml"


def _digests(tmp_path: Path, text: str | None = None, name: str = "claims.yaml") -> dict:
    scenario = tmp_path / "scen.yaml"
    if not scenario.is_file():
        _copy_scenario(tmp_path)
    p = tmp_path / name
    p.write_text(text if text is not None else CLAIMS.format(scenario=scenario))
    return claim_digests(load_claims(p).claims[0])


def _differ(a: dict, b: dict) -> list[str]:
    return [k for k in PARTS if a[k] != b[k]]


def test_digests_are_short_and_stable_across_runs(tmp_path):
    first = _digests(tmp_path)
    assert all(len(first[k]) == 12 and int(first[k], 16) >= 0 for k in PARTS)
    assert _digests(tmp_path) == first
    assert set(first["files"]) == {"scenario scen.yaml", "topology topo.yaml"}


def test_digests_ignore_key_order_comments_and_spacing(tmp_path):
    first = _digests(tmp_path)
    scenario = tmp_path / "scen.yaml"
    text = CLAIMS.format(scenario=scenario)
    reordered = (text.replace('  rate: {value: 800Gbit, source: "testbed bandwidth"}\n  base_rtt: {value: 8us, source: '
                              '"assumption"}\n',
                              '  base_rtt: {source: "assumption", value: 8us}\n  rate: {value: 800Gbit, source: '
                              '"testbed bandwidth"}\n')
                 .replace("set: {workload.evs_per_qp: 1, workload.iterations: 2}",
                          "set: {workload.iterations: 2, workload.evs_per_qp: 1}")
                 .replace("      - mrc busbw_fraction_of_host >= 0.90\n      - mrc busbw_fraction_of_host <= 1.5\n",
                          "      - mrc busbw_fraction_of_host <= 1.50   # two-sided\n"
                          "      - mrc   busbw_fraction_of_host >= 0.9\n"))
    assert reordered != text
    # the scenario's and the topology's keys in another order, a comment more
    lines = scenario.read_text().splitlines()
    top = [i for i, line in enumerate(lines) if line.startswith(("name:", "seed:"))]
    assert len(top) == 2
    lines[top[0]], lines[top[1]] = lines[top[1]], lines[top[0]]
    scenario.write_text("# a note\n" + "\n".join(lines) + "\n")
    assert _digests(tmp_path, reordered, "other.yaml") == first


def test_a_changed_rule_changes_only_the_rules_digest(tmp_path):
    first = _digests(tmp_path)
    text = CLAIMS.format(scenario=tmp_path / "scen.yaml").replace(">= 0.90", ">= 0.85")
    assert _differ(first, _digests(tmp_path, text)) == ["rules"]


def test_a_changed_scenario_changes_only_the_scenario_digest(tmp_path):
    first = _digests(tmp_path)
    scenario = tmp_path / "scen.yaml"
    assert "evs_per_qp: 16" in scenario.read_text()
    scenario.write_text(scenario.read_text().replace("evs_per_qp: 16", "evs_per_qp: 8"))
    now = _digests(tmp_path)
    assert _differ(first, now) == ["scenario"]
    assert now["files"]["scenario scen.yaml"] != first["files"]["scenario scen.yaml"]
    assert now["files"]["topology topo.yaml"] == first["files"]["topology topo.yaml"]


def test_a_changed_topology_changes_the_scenario_digest(tmp_path):
    first = _digests(tmp_path)
    topo = tmp_path / "topo.yaml"
    text = topo.read_text()
    assert "40Mbit" in text
    topo.write_text(text.replace("40Mbit", "20Mbit", 1))
    now = _digests(tmp_path)
    assert _differ(first, now) == ["scenario"]
    assert [r for r in now["files"] if now["files"][r] != first["files"][r]] == ["topology topo.yaml"]


def test_a_changed_control_changes_only_the_control_digest(tmp_path):
    first = _digests(tmp_path)
    base = CLAIMS.format(scenario=tmp_path / "scen.yaml")
    for changed in (base.replace("workload.evs_per_qp: 1,", "workload.evs_per_qp: 2,"),
                    base.replace('removes: "spraying"', 'removes: "path-aware spraying"'),
                    base.replace("transports: [mrc]", "transports: [mrc, rc]")):
        assert _differ(first, _digests(tmp_path, changed)) == ["control"]


def test_a_changed_regime_changes_only_the_regime_digest(tmp_path):
    first = _digests(tmp_path)
    base = CLAIMS.format(scenario=tmp_path / "scen.yaml")
    for changed in (base.replace("value: 8us", "value: 6us"),
                    base.replace('source: "assumption"', 'source: "assumption: a few us"'),
                    base.replace("    estimate:", "    regime:\n      ranks: {value: 64, source: \"x\"}\n"
                                                 "    estimate:")):
        assert _differ(first, _digests(tmp_path, changed)) == ["regime"]


def test_rules_and_control_recomputed_from_a_reproduce_json_without_digests(tmp_path):
    claim = load_claims(_claims_file(tmp_path)).claims[0]
    now = claim_digests(claim)
    entry = {"id": "bw", "rules": [r.text for r in claim.rules],
             "control": {"removes": "spraying", "set": {"workload.evs_per_qp": "1"}, "transports": None}}
    old = entry_digests(entry)
    assert old["rules"] == now["rules"] and old["control"] == now["control"]
    assert old["scenario"] is None and old["regime"] is None


# -- the command ------------------------------------------------------------------------------------



def _claims_file(tmp_path: Path, text: str | None = None) -> Path:
    p = tmp_path / "claims.yaml"
    p.write_text(text or GOOD.format(scenario=PAPER / "p2p-bandwidth.yaml"))
    return p


def _args(claims_file: Path, out: Path, **kw) -> argparse.Namespace:
    base = dict(quick=False, claims=None, trials=None, out=out, claims_file=claims_file, plan=False, plots=False,
                digests=False, since=None)
    return argparse.Namespace(**{**base, **kw})


def _doc(value: float, scenario: str = "paper-p2p-bandwidth") -> dict:
    return results.from_trials([{"scenario": scenario, "seed": 1,
                                 "transports": {"mrc": {"busbw_fraction_of_host": value, "valid": True}}}])


def _full_suite(tmp_path, monkeypatch, claims_file: Path) -> Path:
    """A full suite's out directory, run with fake runs (the claim holds: 0.94, control 0.3)."""
    out = tmp_path / "out"
    values = iter([0.94, 0.3, 0.94, 0.3])
    monkeypatch.setattr("testbed.commands.run.run_many", lambda *a, **k: (_doc(next(values)), 0))
    assert cmd.run(_args(claims_file, out, trials=1)) == 0
    return out


def _plan(capsys, claims_file: Path, out: Path, **kw) -> str:
    assert cmd.run(_args(claims_file, out, plan=True, **kw)) == 0
    return " ".join(capsys.readouterr().out.replace("│", " ").split())


def test_reproduce_json_and_md_keep_the_digests(tmp_path, monkeypatch):
    claims_file = _claims_file(tmp_path)
    out = _full_suite(tmp_path, monkeypatch, claims_file)
    rep = json.loads((out / "reproduce.json").read_text())
    entry = rep["claims"][0]
    assert entry["digests"] == claim_digests(load_claims(claims_file).claims[0])
    assert rep["quick"] is False and rep["written"].endswith("Z") and entry["verdict"]["verdict"] == "yes"
    md = (out / "reproduce.md").read_text()
    assert "## Pre-registration digests" in md
    assert f"| bw | `{entry['digests']['rules']}` | `{entry['digests']['scenario']}` |" in md


def test_plan_says_unchanged_since_the_last_full_suite(tmp_path, monkeypatch, capsys):
    claims_file = _claims_file(tmp_path)
    out = _full_suite(tmp_path, monkeypatch, claims_file)
    capsys.readouterr()
    plan = _plan(capsys, claims_file, out)
    assert f"the last full suite: {out / 'reproduce.json'}, written" in plan
    assert "unchanged (verdict there: yes)" in plan and "RULES CHANGED" not in plan


def test_plan_flags_changed_rules_against_an_earlier_full_suite(tmp_path, monkeypatch, capsys):
    claims_file = _claims_file(tmp_path)
    out = _full_suite(tmp_path, monkeypatch, claims_file)
    capsys.readouterr()
    claims_file.write_text(claims_file.read_text().replace(">= 0.90", ">= 0.85")
                           .replace('removes: "spraying"', 'removes: "spraying, all of it"'))
    plan = _plan(capsys, claims_file, out)
    assert "changed: RULES CHANGED after its last full run (verdict there, on other rules: yes), control" in plan
    assert "rules changed since the last full suite: bw" in plan
    # the quick suite's plan compares with the same full suite (runs/reproduce by default; here --since)
    plan = _plan(capsys, claims_file, tmp_path / "quick", quick=True, since=out / "reproduce.json")
    assert "RULES CHANGED" in plan


def test_plan_names_the_changed_scenario_file(tmp_path, monkeypatch, capsys):
    claims_file = _claims_file(tmp_path)
    out = _full_suite(tmp_path, monkeypatch, claims_file)
    capsys.readouterr()
    rep = json.loads((out / "reproduce.json").read_text())
    rep["claims"][0]["digests"]["files"]["topology ../../topologies/fat-tree-k4-bdp64.yaml"] = "0" * 12
    rep["claims"][0]["digests"]["scenario"] = "0" * 12
    (out / "reproduce.json").write_text(json.dumps(rep))
    plan = _plan(capsys, claims_file, out)
    assert "changed: scenario (topology ../../topologies/fat-tree-k4-bdp64.yaml)" in plan
    assert "RULES CHANGED" not in plan


def test_plan_against_a_full_suite_older_than_the_digests(tmp_path, capsys):
    """A reproduce.json written before the digests: the rules and control compared by their
    text, the scenario and regime said to be not recorded."""
    claims_file = _claims_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    old = {"format": "mrc-testbed-reproduce", "version": 1, "quick": False, "trials": None,
           "claims": [{"id": "bw", "rules": ["mrc busbw_fraction_of_host >= 0.95"],
                       "control": {"removes": "spraying", "set": {"workload.evs_per_qp": "1"}, "transports": None},
                       "verdict": {"verdict": "no"}}]}
    (out / "reproduce.json").write_text(json.dumps(old))
    plan = _plan(capsys, claims_file, out)
    assert "RULES CHANGED after its last full run (verdict there, on other rules: no)" in plan
    assert "scenario, regime: not recorded there" in plan


def test_plan_without_a_full_suite_on_record(tmp_path, monkeypatch, capsys):
    claims_file = _claims_file(tmp_path)
    plan = _plan(capsys, claims_file, tmp_path / "none")
    assert f"no full suite on record ({tmp_path / 'none' / 'reproduce.json'} not found)" in plan
    out = tmp_path / "out"
    out.mkdir()
    (out / "reproduce.json").write_text(json.dumps({"format": "mrc-testbed-reproduce", "quick": True, "claims": []}))
    assert "is a quick suite's" in _plan(capsys, claims_file, out)
    (out / "reproduce.json").write_text(json.dumps({"format": "mrc-testbed-reproduce", "quick": False,
                                                    "claims": [{"id": "other"}]}))
    assert "not in the last full suite" in _plan(capsys, claims_file, out)


def test_digests_command_prints_every_claim(tmp_path, capsys):
    claims_file = _claims_file(tmp_path)
    assert cmd.run(_args(claims_file, tmp_path / "out", digests=True)) == 0
    text = capsys.readouterr().out
    d = claim_digests(load_claims(claims_file).claims[0])
    assert f"| bw | `{d['rules']}` | `{d['scenario']}` | `{d['control']}` | `{d['regime']}` |" in text
    assert not (tmp_path / "out").exists()


def test_shipped_claims_have_digests():
    claims = load_claims(PAPER / "claims.yaml").claims
    for c in claims:
        d = claim_digests(c)
        assert all(d[k] and d[k] != "missing" for k in PARTS)
        assert "missing" not in d["files"].values(), (c.id, d["files"])
