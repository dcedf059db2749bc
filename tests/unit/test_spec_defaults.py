"""Scenario defaults (seed, timeout, factor, warmup, iterations) and "did you mean" for unknown keys."""

import textwrap
from pathlib import Path

import pytest

from testbed.model.kernel import KernelFeatures
from testbed.report import defaults_line
from testbed.spec import SpecError, load_scenario, load_topology

ROOT = Path(__file__).resolve().parents[2]
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
K4 = ROOT / "topologies" / "fat-tree-k4.yaml"   # 16 hosts, 10Mbit host links

MINIMAL = f"""
name: first
topology: {K4}
transports: [mrc, rc, tcp]
workload:
  collective: all_reduce
  hosts: all
  min_bytes: 1MiB
  max_bytes: 1MiB
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_scenario(path, features=FEATURES)
    return [str(p) for p in info.value.problems]


def test_minimal_scenario_takes_every_default(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL), features=FEATURES)
    wl = s.workload
    assert (s.seed, wl.factor, wl.iterations, wl.warmup) == (1, 2, 5, 1)
    # 30 s + 4 x the sweep at the host link's rate: 1 MiB x 2(n-1)/n (n = 16) per rank and
    # iteration, 5 + 1 iterations, 10 Mbit/s: 9.437 s -> 30 + 37.75 = 67.75, rounded up.
    assert s.timeout_s == 68.0
    assert dict(s.defaults) == {"seed": 1, "workload.factor": 2, "workload.iterations": 5, "workload.warmup": 1,
                                "engine": "native", "timeout": 68.0}
    assert s.engine == "native" and s.engines() == {"mrc": "native", "rc": "native", "tcp": "kernel"}
    assert s.to_dict()["defaults"] == dict(s.defaults)


def test_the_derived_timeout_follows_the_bytes(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL.replace("max_bytes: 1MiB", "max_bytes: 4MiB")
                            + "  iterations: 2\n  warmup: 0\n"), features=FEATURES)
    # sizes 1, 2, 4 MiB (factor 2): 7 MiB x 1.875 x 2 iterations x 8 / 10 Mbit/s = 22.02 s
    assert s.timeout_s == 119.0   # ceil(30 + 4 x 22.02)
    assert dict(s.defaults) == {"seed": 1, "workload.factor": 2, "engine": "native", "timeout": 119.0}


def test_given_values_are_kept_and_not_called_defaults(tmp_path):
    text = MINIMAL.replace("transports:", "seed: 9\ntimeout: 20s\nengine: python\ntransports:") + \
        "  factor: 4\n  iterations: 3\n  warmup: 0\n"
    s = load_scenario(write(tmp_path, text), features=FEATURES)
    assert (s.seed, s.timeout_s, s.workload.factor, s.workload.iterations, s.workload.warmup) == (9, 20.0, 4, 3, 0)
    assert s.defaults == () and s.engine == "python"


def test_each_job_takes_its_own_defaults(tmp_path):
    text = f"""
    topology: {K4}
    transports: [mrc]
    jobs:
      - {{name: a, collective: all_reduce, hosts: [h0_0_0, h1_0_0], min_bytes: 1MiB, max_bytes: 1MiB, iterations: 2}}
      - {{name: b, collective: permutation, hosts: [h2_0_0, h3_0_0], min_bytes: 1MiB, max_bytes: 1MiB}}
    """
    s = load_scenario(write(tmp_path, text), features=FEATURES)
    assert [(j.iterations, j.warmup, j.factor) for j in s.all_jobs] == [(2, 1, 2), (5, 1, 2)]
    d = dict(s.defaults)
    assert "jobs[0].iterations" not in d and d["jobs[1].iterations"] == 5 and d["jobs[0].warmup"] == 1
    # a: 1 MiB x 2(1)/2 x 3 iterations; b: 1 MiB x 1 x 6, one after the other: 9 MiB x 8 / 10 Mbit/s
    assert s.timeout_s == float(int(30 + 4 * 9 * 2**20 * 8 / 10e6) + 1)


def test_seed_option_replaces_the_default_seed(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL), features=FEATURES, seed=5)
    assert s.seed == 5


def test_a_first_scenario_with_a_typo_gets_one_problem_that_names_the_fix(tmp_path):
    """The issue's new user: ``iteration: 5``, no seed, timeout, factor or warmup."""
    path = write(tmp_path, MINIMAL + "  iteration: 5\n")
    [problem] = problems(path)
    assert problem.startswith(f"{path}:9: workload.iteration: unknown key; did you mean 'iterations'? (allowed: ")


def test_no_suggestion_when_nothing_is_close(tmp_path):
    path = write(tmp_path, MINIMAL + "colour: blue\n")
    [problem] = problems(path)
    assert problem.startswith(f"{path}:9: colour: unknown key (allowed: topology, transports, ")


def test_suggestions_in_timelines_and_topologies(tmp_path):
    path = write(tmp_path, MINIMAL + "timeline:\n  - at: 1s\n    link_dwn: a0_0-c0_0\n")
    assert any("timeline[0].link_dwn: unknown key; did you mean 'link_down'?" in p for p in problems(path))
    topo = tmp_path / "t.yaml"
    topo.write_text("kind: fat-tree\nk: 4\nlink_classes:\n  host: {rate: 10Mbit, queu: 32}\n"
                    "  fabric: {rate: 10Mbit}\n")
    with pytest.raises(SpecError) as info:
        load_topology(topo, features=FEATURES)
    assert [str(p) for p in info.value.problems] == [
        f"{topo}:4: link_classes.host.queu: unknown key; did you mean 'queue'? "
        "(allowed: rate, queue, delay, loss, mtu, ecn, trim, control_priority)"]


def test_the_report_prints_the_defaults_a_run_took():
    summary = {"defaults": {"seed": 1, "workload.iterations": 5, "timeout": 68.0}}
    assert defaults_line(summary) == ("defaults (keys the scenario left out): seed 1, workload.iterations 5, "
                                      "timeout 68 s")
    assert defaults_line({}) == "" and defaults_line({"defaults": "damaged"}) == ""


def test_a_run_prints_the_defaults_from_its_manifest(tmp_path):
    """manifest.json's ``scenario.defaults`` (Scenario.to_dict) -> summary -> the report's line."""
    import io
    import json
    from rich.console import Console
    from testbed import report
    from testbed.metrics.synthetic import write_run
    run = write_run(tmp_path / "k4", transports=("mrc",), duration_s=6.0)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["scenario"]["defaults"] = {"seed": 1, "timeout": 68.0}
    (run / "manifest.json").write_text(json.dumps(manifest))
    buf = io.StringIO()
    summary = report.render(run, Console(file=buf, width=120), recompute=True, plots=False)
    assert summary["defaults"] == {"seed": 1, "timeout": 68.0}
    assert "defaults (keys the scenario left out): seed 1, timeout 68 s" in buf.getvalue()


def test_engine_is_python_or_native(tmp_path):
    bad = problems(write(tmp_path, MINIMAL.replace("transports:", "engine: rust\ntransports:")))
    assert len(bad) == 1 and bad[0].endswith(".yaml:3: engine: expected one of python, native, got 'rust'")
