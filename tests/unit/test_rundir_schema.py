"""The run directory's one schema (:mod:`testbed.rundir.schemas`): what the runner writes passes
it, what it rejects is named with file and line, and the readers skip and report instead of
crashing; outputs are written atomically and privately."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.protocol import Event, Iteration, LoopStats, Sample
from testbed import metrics, report
from testbed.metrics import synthetic
from testbed.rundir.damage import collecting
from testbed.rundir.names import TRANSPORT_FILES
from testbed.rundir.read import iter_jsonl
from testbed.rundir.schema import check_record
from testbed.rundir.schemas import EVENT, LINK, SAMPLE, SCHED_RECORD, event_schema
from testbed.rundir.write import TransportWriter, event_record, iteration_record, new_run_dir, sample_record, write_manifest

T0 = synthetic.T0


def small_run(tmp_path: Path) -> Path:
    return synthetic.write_run(tmp_path / "run", ("mrc", "tcp"), world_size=4, duration_s=2.0, extras=True)


# -- the writers' records pass the readers' schema --------------------------------------------
def test_the_runners_records_pass_the_schema():
    flows = [{"peer": "h1", "dir": "tx", "bytes": 10, "retransmits": 0, "retransmitted_bytes": 0, "rtt_s": None,
              "cwnd_bytes": 4e4, "evs": [{"ev_id": 0, "state": "GOOD", "sent": 3, "lost": 0}]},
             {"peer": "h3", "dir": "rx", "bytes": 0, "retransmits": 0, "rtt_s": None, "cwnd_bytes": None, "evs": [],
              "duplicates": 0}]
    sample = sample_record(Sample(0, T0, flows, LoopStats(3, 0.001, 0.0005)))
    it = iteration_record(Iteration(1, 1 << 20, 0, 3, False, T0, T0 + 0.2, 0.2, 0))
    ev = event_record(Event(2, T0, "ev_state", "h3", "tx", 17, 1, "GOOD", "ASSUMED_BAD", "loss"))
    err = event_record(Event(2, T0, "qp_error", reason="retry exceeded"))
    assert check_record(SAMPLE, sample) is None
    for e in (it, ev, err):
        assert check_record(event_schema(e), e) is None, e


def test_a_synthetic_run_reads_without_damage(tmp_path):
    run = small_run(tmp_path)
    with collecting() as damage:
        summary = report.write_outputs(run)
    assert not damage and "damage" not in summary
    assert summary["transports"]["mrc"]["flow_kpis"]        # job specs and paths were read


@pytest.mark.parametrize("schema,record,problem", [
    (SAMPLE, {"t": T0, "rank": 0, "flows": [{"peer": "h1", "bytes": "x"}]}, "flows[0].bytes: expected a counter"),
    (SAMPLE, {"t": T0, "rank": [0], "flows": []}, "rank: expected a rank"),
    (SAMPLE, {"t": float("nan"), "rank": 0, "flows": []}, "t: expected a wall-clock time"),
    (SAMPLE, {"t": T0, "rank": 0, "flows": [{"bytes": 10**400}]}, "flows[0].bytes"),
    (event_schema({"kind": "iteration"}), {"t": T0, "kind": "iteration"}, "rank: missing"),
    (SCHED_RECORD, {"t": T0, "ranks": {"0": [1, 2]}}, "ranks.0: 2 items, expected 3 to 3"),
    (LINK, {"t": T0, "link": None}, "link: expected a string"),
    (EVENT, 5, "record: expected an object, got 5"),
])
def test_what_the_schema_rejects_is_named(schema, record, problem):
    assert problem in check_record(schema, record)


# -- readers: skip, report with file and line, or raise outside a collecting block ------------
def test_a_bad_record_is_skipped_and_named_with_file_and_line(tmp_path):
    p = tmp_path / "samples.jsonl"
    good = {"t": T0, "rank": 0, "flows": []}
    p.write_text("\n".join(json.dumps(r) for r in (good, 5, dict(good, rank="x"), good)) + "\n")
    with collecting() as damage:
        assert len(list(iter_jsonl(p))) == 2
    assert damage.lines() == [f"{p}:2: record: expected an object, got 5",
                              f'{p}:3: rank: expected a rank in [0, 1048576], got "x"']
    with pytest.raises(metrics.MetricsError, match=r"samples.jsonl:2: record: expected an object"):
        list(iter_jsonl(p))


def test_a_record_dated_outside_the_run_does_not_size_the_bins(tmp_path):
    run = small_run(tmp_path)
    with open(run / "mrc" / "samples.jsonl", "a") as f:
        f.write(json.dumps({"t": T0 + 3.0e7, "rank": 0, "flows": [{"peer": "x", "dir": "rx", "bytes": 1}]}) + "\n")
    with collecting() as damage:
        summary = report.write_outputs(run)
    assert any("mrc/samples.jsonl: record dated" in p and "outside the run" in p for p in damage.lines())
    assert summary["transports"]["mrc"]["workload_window_s"][1] < 10
    assert summary["damage"] == damage.lines()


def test_a_bad_manifest_key_is_dropped_with_its_line(tmp_path):
    run = small_run(tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    m["world_size"] = 10**9
    m["scenario"]["workload"]["min_bytes"] = 0
    (run / "manifest.json").write_text(json.dumps(m, indent=1))
    with collecting() as damage:
        got = metrics.load_manifest(run)
    assert "world_size" not in got and "workload" not in got["scenario"] and got["transports"] == ["mrc", "tcp"]
    lines = (run / "manifest.json").read_text().splitlines()
    first = damage.lines()[0]
    n = int(first.split(":")[1])
    assert first.startswith(f"{run}/manifest.json:") and '"world_size"' in lines[n - 1]


def test_a_manifest_that_is_not_an_object_still_renders_the_transports(tmp_path):
    run = small_run(tmp_path)
    (run / "manifest.json").write_text("[1, 2]")
    with collecting() as damage:
        summary = report.write_outputs(run)
    assert sorted(summary["transports"]) == ["mrc", "tcp"]
    assert damage.lines() == [f"{run}/manifest.json:1: expected an object, got list"]


# -- outputs: atomic, private, never replaced by worse ----------------------------------------
def test_recompute_keeps_good_outputs_when_raw_records_are_missing(tmp_path):
    run = small_run(tmp_path)
    good = report.load_summary(run, recompute=True)
    before = {n: (run / n).read_bytes() for n in ("summary.json", "flows.csv", "goodput.csv", "links.csv")}
    for f in (run / "tcp").iterdir():
        f.unlink() if f.is_file() else None
    with collecting() as damage:
        kept = report.load_summary(run, recompute=True)
    assert kept == good and "no raw records of tcp" in damage.lines()[0]
    assert {n: (run / n).read_bytes() for n in before} == before
    with pytest.raises(metrics.MetricsError, match="no raw records of tcp"):   # no collecting block: raised
        report.load_summary(run, recompute=True)


def test_outputs_are_atomic_private_and_checksummed(tmp_path):
    run = small_run(tmp_path)
    summary = report.write_outputs(run)
    for name in ("summary.json", "flows.csv", "goodput.csv", "links.csv"):
        assert (run / name).stat().st_mode & 0o777 == 0o600
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    edited = dict(summary, scenario="edited by hand")
    (run / "summary.json").write_text(json.dumps(edited))
    assert report.load_summary(run)["scenario"] == "synthetic-k4"     # checksum mismatch: recomputed


def test_run_directories_are_private(tmp_path):
    d = new_run_dir(SimpleNamespace(name="s"), tmp_path / "runs")
    assert d.stat().st_mode & 0o777 == 0o700 and (tmp_path / "runs").stat().st_mode & 0o777 == 0o700
    write_manifest(d, {"transports": []})
    assert (d / "manifest.json").stat().st_mode & 0o777 == 0o600
    recs = TransportWriter(d / "mrc")
    recs.close()
    assert (d / "mrc").stat().st_mode & 0o777 == 0o700
    assert all((d / "mrc" / f).stat().st_mode & 0o777 == 0o600 for f in TRANSPORT_FILES)
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]
