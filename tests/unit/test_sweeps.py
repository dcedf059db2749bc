"""Sweeps and overrides: key paths, applying values, file:line errors, the cartesian product;
the results format's round trip; ``testbed compare``'s table; --help without reST markup;
plots 0600; the oversubscribed line without a table; timeline lines wrapped between phrases."""

import io
import json
import os
import stat
from pathlib import Path

import pytest
from rich.console import Console

from testbed import cli
from testbed.commands import run as run_cmd
from testbed.commands import validate
from testbed.metrics import results
from testbed.model.kernel import KernelFeatures
from testbed.report.balance import collisions_table
from testbed.report.results import compare_rows, compare_table, difference, results_tables
from testbed.run.progress import phrase_lines
from testbed.spec import SpecError, load_scenario
from testbed.spec.overrides import (KeyError_, apply, format_key, parse_key, parse_set, point_dir, point_label,
                                    sweep_of, value_node)
from testbed.spec.yamlread import Reader

ROOT = Path(__file__).resolve().parents[2]
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True, bpf_egress=True)

BASE = f"""name: swp
topology: {ROOT}/topologies/fat-tree-k4.yaml
transports: [mrc, rc, tcp]
seed: 3
timeout: 120s
workload:
  collective: all_reduce
  hosts: all
  min_bytes: 2MiB
  max_bytes: 2MiB
  factor: 2
  iterations: 5
  warmup: 1
  evs: 8
timeline:
  - at_iteration: 1
    loss: {{link: e0_0-a0_0, percent: 1%, duration: 5s}}
"""


def scenario(tmp_path, sweep: str = "") -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(BASE + sweep)
    return p


def problems(path, **kw) -> list[str]:
    with pytest.raises(SpecError) as exc:
        load_scenario(path, features=FEATURES, **kw)
    return [str(p) for p in exc.value.problems]


# -- key paths -----------------------------------------------------------------------------------

def test_key_paths_parse_and_print_back():
    assert parse_key("timeline[0].loss.percent") == ("timeline", 0, "loss", "percent")
    assert parse_key("jobs[1].hosts[0]") == ("jobs", 1, "hosts", 0)
    assert parse_key("seed") == ("seed",)
    for key in ("timeline[0].loss.percent", "jobs[1].hosts[0]", "workload.evs"):
        assert format_key(parse_key(key)) == key
    for bad in ("", "[0]", "a..b", "a.", ".a", "a[x]", "a[0", "a b", "a.[0]"):
        with pytest.raises(KeyError_):
            parse_key(bad)


def test_apply_replaces_adds_and_copies_only_the_path(tmp_path):
    r = Reader("x")
    root = r.compose(scenario(tmp_path))
    new = apply(root, parse_key("timeline[0].loss.percent"), value_node("0.1%"))
    new = apply(new, parse_key("workload.evs_per_qp"), value_node("16"))
    def get(node, *key):
        for k in key:
            node = node.value[k] if isinstance(k, int) else next(v for kk, v in node.value if kk.value == k)
        return node.value
    assert get(new, "timeline", 0, "loss", "percent") == "0.1%" and get(root, "timeline", 0, "loss", "percent") == "1%"
    assert get(new, "workload", "evs_per_qp") == "16" and get(new, "workload", "evs") == "8"
    assert get(new, "topology") is get(root, "topology")       # untouched nodes shared
    with pytest.raises(KeyError_, match="the list has 1 item"):
        apply(root, parse_key("timeline[3].loss"), value_node("1"))
    with pytest.raises(KeyError_, match="no such key"):
        apply(root, parse_key("workloadx[0].evs"), value_node("1"))
    # a mapping the file lacks is made (qp.ecn on a file without qp); the validator judges its keys
    made = apply(root, parse_key("qp.ecn"), value_node("false"))
    assert get(made, "qp", "ecn") == "false"
    with pytest.raises(KeyError_, match="not a mapping"):
        apply(root, parse_key("seed.x"), value_node("1"))


def test_set_values_are_yaml():
    o = parse_set("workload.hosts=[h0_0_0, h1_0_0]")
    assert o.path == "workload.hosts" and [n.value for n in o.node.value] == ["h0_0_0", "h1_0_0"]
    import yaml
    from testbed.spec.overrides import text_of
    block = yaml.compose("crossed_by:\n  - mrc\n  - rc\nhop: core-aggregation\n")
    assert text_of(block) == "{crossed_by: [mrc, rc], hop: core-aggregation}"   # one line, in order
    assert text_of(o.node) == "[h0_0_0, h1_0_0]"
    with pytest.raises(KeyError_, match="KEY=VALUE"):
        parse_set("workload.evs")


# -- validation ----------------------------------------------------------------------------------

def test_a_valid_sweep_loads_and_expands_to_the_cartesian_product(tmp_path):
    path = scenario(tmp_path, "sweep:\n  workload.evs: [1, 2, 4, 8]\n  timeline[0].loss.percent: [0.1%, 1%]\n")
    assert load_scenario(path, features=FEATURES).workload.evs == 8
    sweep = sweep_of(path)
    points = sweep.points()
    assert sweep.keys == ("workload.evs", "timeline[0].loss.percent") and len(points) == 8
    assert [point_label(p) for p in points[:3]] == [
        "workload.evs=1, timeline[0].loss.percent=0.1%", "workload.evs=1, timeline[0].loss.percent=1%",
        "workload.evs=2, timeline[0].loss.percent=0.1%"]
    assert point_dir(points[0]) == "evs-1_percent-0.1pct"
    sc = load_scenario(path, features=FEATURES, overrides=points[5], check_sweep=False)
    assert sc.workload.evs == 4 and sc.timeline[0].loss_pct == pytest.approx(1.0)


def test_sweep_errors_point_at_the_key_in_the_sweep_block(tmp_path):
    path = scenario(tmp_path, "sweep:\n"
                              "  workload.evs: [1, 8000]\n"                  # line 19
                              "  timeline[0].loss.percent: [1%, 300%]\n"     # 20
                              "  timeline[3].loss: [1]\n"                    # 21
                              "  workload.evz: [1]\n"                        # 22
                              "  bad..path: [1]\n"                           # 23
                              "  workload.min_bytes:\n    - 4MiB\n")          # 24, value at 25
    out = problems(path)
    f = str(path)
    assert f"{f}:19: workload.evs: must be <= 4096, got 8000" in out
    assert any(p.startswith(f"{f}:20: timeline[0].loss.percent: '300%'") for p in out)
    assert f"{f}:21: sweep.timeline[3].loss: unknown key path: [3]: the list has 1 item" in out
    assert any(p.startswith(f"{f}:22: workload.evz: unknown key") for p in out)
    assert any(p.startswith(f"{f}:23: sweep.bad..path: bad key path") for p in out)
    assert (f"{f}:10: workload.max_bytes: 2MiB is below min_bytes (4MiB) (with workload.min_bytes: 4MiB "
            "from the sweep at line 25)") in out
    assert len(out) == 6


def test_sweep_block_shape_errors(tmp_path):
    assert problems(scenario(tmp_path, "sweep: [1]\n")) == [f"{tmp_path / 's.yaml'}:18: sweep: expected a mapping, got a list"]
    out = problems(scenario(tmp_path, "sweep: {workload.evs: 4}\n"))
    assert out == [f"{tmp_path / 's.yaml'}:18: sweep.workload.evs: expected a non-empty list of values, got 4"]


def test_validate_cli_checks_sweeps(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(validate, "features", lambda: FEATURES)
    good = scenario(tmp_path, "sweep: {workload.evs: [1, 2]}\n")
    assert cli.main(["validate", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE + "sweep: {workload.evs: [0]}\n")
    assert cli.main(["validate", str(bad)]) == 2
    assert f"{bad}:18: workload.evs: must be >= 1, got 0" in capsys.readouterr().err


def test_run_set_errors_name_the_file_and_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(run_cmd, "features", lambda: FEATURES)
    path = scenario(tmp_path)
    assert cli.main(["run", str(path), "--set", "workload.evs=9000", "--set", "timeline[0].loss.percent=200%"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: --set workload.evs: must be <= 4096, got 9000" in err
    assert f"{path}: --set timeline[0].loss.percent: '200%' is not a percentage" in err
    assert cli.main(["run", str(path), "--set", "workload.nope.x=1"]) == 2
    assert f"{path}: workload.nope: unknown key (allowed: " in capsys.readouterr().err
    assert cli.main(["run", str(path), "--set", "workload"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_set_and_seed_apply(tmp_path):
    path = scenario(tmp_path)
    sc = load_scenario(path, features=FEATURES, seed=11, overrides=[parse_set("workload.evs=2"),
                                                                    parse_set("timeline[0].loss.percent=0.5%")])
    assert sc.seed == 11 and sc.workload.evs == 2 and sc.timeline[0].loss_pct == pytest.approx(0.5)


# -- results format ------------------------------------------------------------------------------

def transport(busbw, **kw) -> dict:
    s = {"busbw_mbit_per_s": busbw, "busbw_fraction_of_host": busbw / 5, "detect_s": 0.1, "wrong": 0,
         "worst_recovery": {"s": 0.05, "dip": True, "recovered": True},
         "faults": [{"t_s": 2.0, "action": "link_down", "link": "a0_0-c0_0", "disruptive": True}]}
    s.update(kw)
    return s


def summary(seed, **transports) -> dict:
    return {"scenario": "swp", "seed": seed, "transports": transports, "comparison": {}}


def test_results_round_trip_and_old_trials_files(tmp_path):
    doc = results.from_trials([summary(1, mrc=transport(4.0), rc=transport(2.0)),
                               summary(2, mrc=transport(4.4), rc=transport(1.0))])
    assert doc["format"] == results.FORMAT and doc["kind"] == "trials" and doc["swept"] == []
    (p,) = doc["points"]
    assert p["seeds"] == [1, 2] and p["transports"]["mrc"]["busbw_mbit_per_s"]["median"] == pytest.approx(4.2)
    path = results.write(tmp_path / "trials.json", doc)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert results.load(tmp_path) == json.loads(json.dumps(doc))
    old = {k: v for k, v in p.items() if k not in ("label", "values", "dir")} | {"scenario": "swp"}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "trials.json").write_text(json.dumps(old))
    assert results.load(tmp_path / "old")["points"][0]["transports"] == p["transports"]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text(json.dumps(summary(7, tcp=transport(3.0))))
    one = results.load(tmp_path / "run")
    assert one["kind"] == "run" and one["points"][0]["transports"]["tcp"]["busbw_mbit_per_s"]["n"] == 1
    (tmp_path / "bad.json").write_text('{"format": "mrc-testbed-results", "version": 1, "kind": "x"}')
    with pytest.raises(results.ResultsError, match="kind"):
        results.load(tmp_path / "bad.json")


def sweep_doc() -> dict:
    points = []
    for evs in (1, 8):
        for pct in ("0.1%", "1%"):
            agg = results.from_trials([summary(1, mrc=transport(evs / 2), rc=transport(1.0))])["points"][0]
            label = f"workload.evs={evs}, timeline[0].loss.percent={pct}"
            points.append(results.point(agg, {"workload.evs": evs, "timeline[0].loss.percent": pct}, label,
                                        f"p_{evs}_{pct}"))
    return results.document("sweep", "swp", points, ["workload.evs", "timeline[0].loss.percent"])


def test_sweep_document_tables_and_plots(tmp_path):
    doc = results.loads(results.dumps(sweep_doc()))
    assert doc["points"][3]["label"] == "workload.evs=8, timeline[0].loss.percent=1%"
    assert doc["points"][3]["values"] == {"workload.evs": 8, "timeline[0].loss.percent": "1%"}
    tables = results_tables(doc)
    buf = io.StringIO()
    for t in tables:
        Console(file=buf, width=80, color_system=None).print(t)
    text = buf.getvalue()
    assert "swp: busbw (Mbit/s): median [min-max] (n)" in text and "4.00 [4.00-4.00] (1)" in text
    from testbed.report.sweepplot import plot_sweep
    paths = plot_sweep(tmp_path, doc)
    assert tmp_path / "sweep-busbw_mbit_per_s.png" not in paths and (tmp_path / "sweep-busbw-mbit-per-s.png") in paths
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in paths)


# -- compare -------------------------------------------------------------------------------------

def test_compare_values_and_differences(tmp_path):
    a = results.from_summary(summary(1, mrc=transport(4.0), rc=transport(2.0)))
    b = results.from_trials([summary(1, mrc=transport(5.0), rc=transport(1.0)),
                             summary(2, mrc=transport(4.0), rc=transport(1.0)),
                             summary(3, mrc=transport(5.0), rc=transport(1.5))])
    assert difference({"median": 4.0}, {"median": 5.0}) == (1.0, 25.0)
    assert difference({"median": 0.0}, {"median": 1.0}) == (1.0, None)
    assert difference(None, {"median": 1.0}) == (None, None)
    rows = compare_rows(a, b, a["points"][0], b["points"][0])
    assert rows[0] == ["busbw (Mbit/s)", "mrc", "4.00", "5.00 [4.00-5.00] (3)", "+1.00", "+25.0%"]
    assert rows[1] == ["", "rc", "2.00", "1.00 [1.00-1.50] (3)", "-1.00", "-50.0%"]
    buf = io.StringIO()
    for t in compare_table(a, b, "runA", "runB"):
        Console(file=buf, width=80, color_system=None).print(t)
    assert "A = runA, B = runB" in buf.getvalue() and "+25.0%" in buf.getvalue()


def test_compare_cli_reads_files_and_directories(tmp_path, capsys):
    results.write(tmp_path / "a.json", results.from_summary(summary(1, mrc=transport(4.0))))
    (tmp_path / "b").mkdir()
    results.write(tmp_path / "b" / "trials.json", results.from_trials([summary(1, mrc=transport(3.0))]))
    assert cli.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b")]) == 0
    assert "-25.0%" in capsys.readouterr().out
    assert cli.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "nothing")]) == 2


def test_compare_two_sweeps_point_by_point():
    a, b = sweep_doc(), sweep_doc()
    tables = compare_table(a, b)
    assert len(tables) == 4 and "at workload.evs=1, timeline[0].loss.percent=0.1%" in tables[0].title.plain


# -- small things --------------------------------------------------------------------------------

def test_help_texts_have_no_restructuredtext_markup(capsys):
    for argv in ([], ["run"], ["validate"], ["report"], ["compare"], ["clean"], ["up"]):
        with pytest.raises(SystemExit):
            cli.main([*argv, "--help"])
        out = capsys.readouterr().out
        assert "`" not in out and ":func:" not in out, argv
    assert cli.plain("``x`` and :func:`testbed.y` and :mod:`~z` and `w`") == "x and testbed.y and z and w"


def test_no_oversubscribed_table_only_the_line():
    quiet = {"transports": {"mrc": {"balance": {"collisions": {"links": [
        {"direction": "a->b", "load": 1.0, "utilisation": 0.5, "flows": ["mrc 0->1 ev0"]}]}}}}}
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(collisions_table(quiet))
    assert buf.getvalue().strip() == "no fabric direction oversubscribed; 1 colliding directions at load <= 1 not listed"


def test_timeline_lines_break_between_phrases():
    text = ("{crossed_by: [rc, tcp], hop: core-aggregation} -> c1_0-a2_0 (crossed by rc 3->4, tcp 3->4, "
            "rc 7->8, tcp 11->12)")
    lines = phrase_lines(text, 60)
    assert " ".join(lines) == text and all(len(line) <= 60 for line in lines) and len(lines) > 1
    for before, line in zip(lines, lines[1:]):    # every break between two phrases
        assert before.endswith((",", ";", ":")) or line.startswith(("(", "->")), (before, line)
