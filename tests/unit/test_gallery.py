"""The scenario gallery (testbed/tools/gallery.py) on fake scenarios and run directories: which
scenarios run and which resume, the index kept after each one, what a run directory says, and
the page it writes (no root, no fabric: the runner is a fake, or a small python command)."""
from __future__ import annotations

import json
import sys

import pytest
from PIL import Image

from testbed.tools import gallery
from tests.unit.test_docs_links import anchors, fence_problems, links

SCENARIO = """\
# The first paragraph of what it shows,
# on two lines.
#
# Then runs/<run>/ and 2^timeout and `make run`.
name: {name}
description: "fat-tree-k4, 16 ranks: a core<->aggregation link down"
topology: ../topologies/fat-tree-k4.yaml
transports: [mrc, rc]
workload: {{collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB}}
"""


@pytest.fixture
def tree(tmp_path):
    """tmp/scenarios/{core-link-failure,baseline,link-flap}.yaml and scenarios/paper/x.yaml."""
    d = tmp_path / "scenarios"
    (d / "paper").mkdir(parents=True)
    for name in ("link-flap", "baseline", "core-link-failure"):
        (d / f"{name}.yaml").write_text(SCENARIO.format(name=name))
    (d / "paper" / "x.yaml").write_text(SCENARIO.format(name="x"))
    return tmp_path


def fake_run_dir(root, name, *, valid=(True, True), picture="fault-flows.png", width=2000):
    """runs/NAME-20261128-184609/ as testbed run leaves it: manifest (status), summary (valid), a plot."""
    d = root / "runs" / f"{name}-20261128-184609"
    n = 1
    while d.exists():   # a second run in the same second, as new_run_dir names it
        n += 1
        d = root / "runs" / f"{name}-20261128-184609-{n}"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"transports": ["mrc", "rc"], "status": {
        "mrc": {"status": "done", "reason": ""}, "rc": {"status": "timeout", "reason": "rank 3 | stuck"}}}))
    (d / "summary.json").write_text(json.dumps({"transports": {
        "mrc": {"valid": valid[0], "invalid_reasons": [] if valid[0] else ["agents starved: p95 3 ms"],
                "fault_flows": [{"rank": 7, "peer": 0}]},
        "rc": {"valid": valid[1], "invalid_reasons": [] if valid[1] else ["runner starved"],
               "fault_flows": [{"rank": 7, "peer": 0}]}}}))
    if picture:
        Image.new("RGB", (width, width // 4), "white").save(d / picture)
        Image.new("RGB", (100, 50), "white").save(d / "goodput.png")
    return d


class FakeRunner:
    """run_command's stand-in: per scenario stem, what the run does (ok, fail, interrupt, raise)."""

    def __init__(self, root, plan):
        self.root, self.plan, self.calls = root, plan, []

    def __call__(self, argv, *, cwd, env, out_path, err_path, timeout_s=None, echo=True):
        stem = argv[4].split("/")[-1].removesuffix(".yaml")
        self.calls.append((stem, argv, env))
        what = self.plan.get(stem, "ok")
        if what == "raise":
            raise RuntimeError("the machine fell over")
        if what == "fail":
            return gallery.Outcome(1, "building fat-tree-k4\n", "testbed run: agent crashed on h0_0_0\n", 3.0)
        d = fake_run_dir(self.root, stem, valid=(True, what != "invalid"))
        report = (f"run directory: runs/{d.name}\n┏━━━┓ side by side\n"
                  f"the report again: testbed report runs/{d.name}\n")
        if what == "interrupt":
            return gallery.Outcome(130, report, "", 5.0, signal=2)
        return gallery.Outcome(0, "\x1b[1m" + report + "\x1b[0m", "", 81.6)


def run_all(tree, plan, **kw):
    runner = FakeRunner(tree, plan)
    status = gallery.run_all(gallery.shipped(tree / "scenarios"), tree / "runs" / "gallery" / "index.json",
                             root=tree, python=sys.executable, runs_dir=tree / "runs",
                             log_dir=tree / "runs" / "gallery", runner=runner, echo=False,
                             check_needs=lambda *a: [], say=lambda *a: None, **kw)
    return status, runner, gallery.load_index(tree / "runs" / "gallery" / "index.json")


# -- which scenarios ------------------------------------------------------------------------

def test_shipped_is_the_top_level_with_the_default_first(tree):
    assert [p.stem for p in gallery.shipped(tree / "scenarios")] == ["core-link-failure", "baseline", "link-flap"]


def test_only_and_skip_choose_and_an_unknown_name_is_refused(tree):
    files = gallery.shipped(tree / "scenarios")
    assert [p.stem for p in gallery.select(files, ["link-flap.yaml", "baseline"], [])] == ["baseline", "link-flap"]
    assert [p.stem for p in gallery.select(files, [], ["baseline"])] == ["core-link-failure", "link-flap"]
    with pytest.raises(gallery.GalleryError, match="no shipped scenario x .*there are: core-link-failure"):
        gallery.select(files, ["x"], [])


def test_resume_skips_results_and_reruns_the_interrupted(tree):
    files = gallery.shipped(tree / "scenarios")
    index = {"format": 1, "scenarios": {"core-link-failure": {"status": "ok"}, "baseline": {"status": "failed"},
                                        "link-flap": {"status": "interrupted"}}}
    assert [p.stem for p in gallery.to_run(files, index)] == ["link-flap"]
    assert [p.stem for p in gallery.to_run(files, index, retry_failed=True)] == ["baseline", "link-flap"]
    assert gallery.to_run(files, index, again=True) == files


# -- the index ------------------------------------------------------------------------------

def test_the_index_round_trips_atomically_and_a_bad_one_is_refused(tmp_path):
    path = tmp_path / "g" / "index.json"
    assert gallery.load_index(path) == {"format": 1, "scenarios": {}}
    gallery.save_index(path, {"format": 1, "scenarios": {"a": {"status": "ok"}}})
    assert gallery.load_index(path)["scenarios"] == {"a": {"status": "ok"}}
    assert [p.name for p in path.parent.iterdir()] == ["index.json"]   # no temporary file left
    path.write_text("{")
    with pytest.raises(gallery.GalleryError, match="not a gallery index"):
        gallery.load_index(path)
    path.write_text('{"format": 9, "scenarios": {}}')
    with pytest.raises(gallery.GalleryError, match="format 1"):
        gallery.load_index(path)


def test_each_scenario_is_recorded_with_its_run_and_a_failure_keeps_the_rest(tree):
    status, runner, index = run_all(tree, {"baseline": "fail"})
    assert status == 1 and [c[0] for c in runner.calls] == ["core-link-failure", "baseline", "link-flap"]
    ok = index["scenarios"]["core-link-failure"]
    assert ok["status"] == "ok" and ok["exit_status"] == 0 and ok["wall_s"] == 81.6
    assert ok["run_dir"] == "runs/core-link-failure-20261128-184609"
    assert ok["picture"] == "runs/core-link-failure-20261128-184609/fault-flows.png"
    assert ok["command"] == ".venv/bin/testbed run scenarios/core-link-failure.yaml"
    assert ok["report"].startswith("run directory: runs/") and "\x1b" not in ok["report"]   # plain text
    assert ok["commit"] == "unknown"   # tmp is no git repository
    assert ok["machine"]["cores"] >= 1 and ok["started"][:2] == "20"
    assert ok["transports"]["rc"] == {"status": "timeout", "reason": "rank 3 | stuck", "valid": True,
                                      "invalid_reasons": []}
    failed = index["scenarios"]["baseline"]
    assert failed["status"] == "failed" and failed["run_dir"] is None
    assert failed["error"] == "exit status 1, no summary.json:\ntestbed run: agent crashed on h0_0_0"
    env = runner.calls[0][2]
    assert env["NO_COLOR"] == "1" and env["COLUMNS"] == "100"


def test_a_second_run_resumes_and_runs_nothing_done(tree):
    run_all(tree, {"baseline": "fail"})
    status, runner, _ = run_all(tree, {})
    assert status == 0 and runner.calls == []
    status, runner, index = run_all(tree, {}, retry_failed=True)
    assert [c[0] for c in runner.calls] == ["baseline"] and index["scenarios"]["baseline"]["status"] == "ok"


def test_the_index_is_written_after_each_scenario(tree):
    with pytest.raises(RuntimeError):
        run_all(tree, {"baseline": "raise"})
    index = gallery.load_index(tree / "runs" / "gallery" / "index.json")
    assert list(index["scenarios"]) == ["core-link-failure"]


def test_an_interrupted_run_stops_the_gallery_and_runs_again_next_time(tree):
    status, runner, index = run_all(tree, {"baseline": "interrupt"})
    assert status == 130 and [c[0] for c in runner.calls] == ["core-link-failure", "baseline"]
    assert index["scenarios"]["baseline"]["status"] == "interrupted"
    status, runner, _ = run_all(tree, {})
    assert status == 0 and [c[0] for c in runner.calls] == ["baseline", "link-flap"]


def test_a_scenario_needing_what_the_venv_lacks_is_failed_without_running(tree):
    runner = FakeRunner(tree, {})
    entry = gallery.run_one(tree / "scenarios" / "baseline.yaml", root=tree, python="py", runs_dir=tree / "runs",
                            log_dir=tree / "g", runner=runner, echo=False, check_needs=lambda *a: ["torch"])
    assert runner.calls == [] and entry["status"] == "failed" and "needs torch" in entry["error"]
    assert "`make torch`" in entry["error"]


def test_runs_dir_is_passed_only_when_not_the_default(tree):
    runner = FakeRunner(tree, {})
    gallery.run_one(tree / "scenarios" / "baseline.yaml", root=tree, python="py", runs_dir=tree / "runs",
                    log_dir=tree / "g", runner=runner, echo=False, check_needs=lambda *a: [])
    assert runner.calls[0][1] == ["py", "-m", "testbed", "run", "scenarios/baseline.yaml"]


# -- a run directory ------------------------------------------------------------------------

def test_the_run_directory_is_the_printed_one_else_the_newest_made(tree):
    d = fake_run_dir(tree, "baseline")
    out = f"run directory: runs/{d.name}\n"
    assert gallery.find_run_dir(out, tree / "runs", "baseline", 0, tree) == d
    assert gallery.find_run_dir("crashed\n", tree / "runs", "baseline", 0, tree) == d
    (tree / "runs" / "baseline-extra-20261128-184609").mkdir()   # another scenario's name prefix
    assert gallery.find_run_dir("", tree / "runs", "baseline", 0, tree) == d
    assert gallery.find_run_dir("", tree / "runs", "baseline", d.stat().st_mtime + 60, tree) is None


def test_run_facts_give_outcomes_verdicts_and_the_most_telling_plot(tree):
    d = fake_run_dir(tree, "baseline", valid=(False, True))
    facts = gallery.run_facts(d)
    assert facts["transports"]["mrc"] == {"status": "done", "reason": "", "valid": False,
                                          "invalid_reasons": ["agents starved: p95 3 ms"]}
    assert facts["picture"].endswith("fault-flows.png")
    summary = json.loads((d / "summary.json").read_text())
    summary["transports"]["rc"]["fault_flows"] = []   # as gloo-tcp's: its flows are not sampled
    (d / "summary.json").write_text(json.dumps(summary))
    assert gallery.run_facts(d)["picture"].endswith("goodput.png")   # the picture that shows both
    (d / "goodput.png").unlink()
    assert gallery.run_facts(d)["picture"].endswith("fault-flows.png")   # better than none
    (d / "fault-flows.png").unlink()
    assert gallery.run_facts(d)["picture"] is None
    Image.new("RGB", (10, 10)).save(d / "goodput.png")
    trials = tree / "runs" / "t"
    (trials / "seed-1").mkdir(parents=True)
    d.rename(trials / "seed-1" / d.name)
    assert gallery.run_facts(trials)["picture"].endswith("seed-1/baseline-20261128-184609/goodput.png")


# -- running a command ----------------------------------------------------------------------

def test_run_command_streams_and_keeps_both_outputs_and_stops_at_the_timeout(tmp_path):
    code = "import sys; print('\\x1b[31mreport\\x1b[0m'); print('warn', file=sys.stderr); sys.exit(3)"
    out = gallery.run_command([sys.executable, "-c", code], cwd=tmp_path, env=gallery.child_env(),
                              out_path=tmp_path / "a.out", err_path=tmp_path / "a.err", echo=False)
    assert (out.returncode, out.stderr, out.timed_out, out.signal) == (3, "warn\n", False, None)
    assert out.stdout == "\x1b[31mreport\x1b[0m\n" == (tmp_path / "a.out").read_text()   # as printed
    slow = gallery.run_command([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                               cwd=tmp_path, env=gallery.child_env(), out_path=tmp_path / "b.out",
                               err_path=tmp_path / "b.err", timeout_s=1.0, echo=False)
    assert slow.timed_out and slow.returncode == -15 and slow.stdout == "up\n" and slow.wall_s < 20


FAKE_TESTBED = """\
#!{python}
# "python -m testbed run SCENARIO": prints what testbed run prints, leaves a run directory
import json, os, sys
from pathlib import Path
assert sys.argv[1:4] == ["-m", "testbed", "run"] and os.environ["NO_COLOR"] == "1", sys.argv
d = Path("runs/baseline-20261128-184609")
d.mkdir(parents=True)
(d / "manifest.json").write_text(json.dumps({{"transports": ["mrc"], "status": {{"mrc": {{"status": "done"}}}}}}))
(d / "summary.json").write_text(json.dumps({{"transports": {{"mrc": {{"valid": True}}}}}}))
print(f"run directory: {{d}}")
print("report, " + os.environ["COLUMNS"] + " columns")
print("warning: a suspicious timeline", file=sys.stderr)
"""


def test_run_one_runs_the_command_from_the_root_and_logs_it(tree):
    fake = tree / "fakepython"
    fake.write_text(FAKE_TESTBED.format(python=sys.executable))
    fake.chmod(0o755)
    entry = gallery.run_one(tree / "scenarios" / "baseline.yaml", root=tree, python=str(fake), runs_dir=tree / "runs",
                            log_dir=tree / "logs", columns=90, echo=False, check_needs=lambda *a: [])
    assert entry["status"] == "ok", entry["error"]
    assert entry["report"] == "run directory: runs/baseline-20261128-184609\nreport, 90 columns\n"
    assert entry["stderr"] == "warning: a suspicious timeline\n"
    assert entry["transports"] == {"mrc": {"status": "done", "reason": "", "valid": True, "invalid_reasons": []}}
    assert (tree / "logs" / "baseline.out").read_text() == entry["report"]
    assert (tree / "logs" / "baseline.err").read_text() == entry["stderr"]


def test_the_child_gets_plain_output(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    env = gallery.child_env(120)
    assert "FORCE_COLOR" not in env and env["NO_COLOR"] == "1" and env["COLUMNS"] == "120"


# -- the page -------------------------------------------------------------------------------

def test_describe_reads_the_description_and_the_comment_header(tree):
    description, paragraphs = gallery.describe(tree / "scenarios" / "baseline.yaml")
    assert description == "fat-tree-k4, 16 ranks: a core<->aggregation link down"
    assert paragraphs == ["The first paragraph of what it shows, on two lines.",
                          "Then runs/<run>/ and 2^timeout and `make run`."]


def test_markdown_escapes_html_and_emphasis_outside_code():
    assert gallery.md("runs/<run>/ a*b `x<y*z`") == r"runs/&lt;run>/ a\*b `x<y*z`"
    assert gallery.cell("a | b\n c") == r"a \| b c"
    assert gallery.fence("a ```` b") == "`````text\na ```` b\n`````"


def write(tree, **kw):
    status, _, index = run_all(tree, {"baseline": "fail", "link-flap": "invalid"}, **kw)
    del index["scenarios"]["link-flap"]["started"]   # still a page
    index["scenarios"].pop("core-link-failure")      # not run yet
    out = tree / "docs" / "gallery.md"
    out.parent.mkdir(exist_ok=True)
    text = gallery.write_page(gallery.shipped(tree / "scenarios"), index, out=out, img_dir=tree / "docs" / "img" / "g",
                              root=tree, max_width=800)
    return out, text


def test_the_page_shows_every_scenario_with_its_run_or_why_not(tree):
    out, text = write(tree)
    assert text == out.read_text()
    for name in ("core-link-failure", "baseline", "link-flap"):
        assert f"\n## {name}\n" in text and f"| [{name}](#{name}) |" in text
        assert f"```sh\n.venv/bin/testbed run scenarios/{name}.yaml\n```" in text
    assert "x.yaml" not in text and "## x" not in text                    # scenarios/paper/ is reproduce's
    assert "\n*fat-tree-k4, 16 ranks: a core&lt;->aggregation link down*\n" in text   # "<" would open HTML
    assert "The first paragraph of what it shows, on two lines.\n" in text and r"runs/&lt;run>/ and 2^timeout" in text
    core = text.split("\n## core-link-failure\n")[1].split("\n## ")[0]
    assert "**Not run yet**" in core and "--only core-link-failure" in core
    base = text.split("\n## baseline\n")[1].split("\n## ")[0]
    assert "**The run failed**" in base and "testbed run: agent crashed on h0_0_0" in base
    assert "exit status 1" in base and "No picture: no run directory." in base
    flap = text.split("\n## link-flap\n")[1].split("\n## ")[0]
    assert "commit `unknown`" in flap and "wall time 1 min 22 s" in flap
    assert "**invalid**: rc (runner starved)" in flap                    # never hidden
    assert "| rc | timeout: rank 3 \\| stuck | invalid: runner starved |" in flap
    assert "![link-flap: fault-flows.png](img/g/link-flap.png)" in flap
    assert "```text\nrun directory: runs/link-flap-20261128-184609\n┏━━━┓ side by side\n" in flap
    assert ("| [link-flap](#link-flap) | fat-tree-k4, 16 ranks: a core&lt;->aggregation link down "
            "| - | 1 min 22 s | no |") in text
    assert "| [baseline](#baseline) |" in text and "| failed |" in text


def test_the_page_is_well_formed_and_its_pictures_modest(tree):
    out, text = write(tree)
    assert fence_problems(text) == []
    assert {a for _, _, a in links(out)} <= anchors(out)
    with Image.open(tree / "docs" / "img" / "g" / "link-flap.png") as im:
        assert im.width == 800 and im.height == 200
    assert not (tree / "docs" / "img" / "g" / "baseline.png").exists()
    stale = tree / "docs" / "img" / "g" / "core-link-failure.png"   # from an earlier run, not in the index now
    stale.write_bytes(b"old")
    write(tree)
    assert not stale.exists()


def test_main_writes_the_page_and_plans_without_running(tree, capsys, monkeypatch):
    run_all(tree, {})
    index = tree / "runs" / "gallery" / "index.json"
    args = ["--index", str(index), "--scenarios", str(tree / "scenarios")]
    out = tree / "page.md"
    assert gallery.main(["write", *args, "--out", str(out), "--img-dir", str(tree / "img")]) == 0
    assert out.read_text().startswith("# Gallery of the shipped scenarios\n")
    assert gallery.main(["run", *args, "--dry-run", "--again", "--skip", "baseline"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["core-link-failure: run", "link-flap: run"]
    assert gallery.main(["run", *args, "--only", "nope", "--dry-run"]) == 2
    monkeypatch.setattr(gallery.os, "geteuid", lambda: 1000)
    assert gallery.main(["run", *args]) == 2
    assert "needs root" in capsys.readouterr().err
