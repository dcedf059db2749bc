"""The runner's own samplers and records without a fabric: the tick, /proc/<pid>/schedstat, record shapes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agents.protocol import Iteration, LoopStats, Sample
from testbed.run.sampling import LINK_SAMPLE_S, SchedSampler, Ticker, read_schedstat
from testbed.rundir.names import SAMPLES, SAMPLES_DIR, SCHED, TRANSPORT_FILES
from testbed.rundir.write import TransportWriter, iteration_record, merge_samples, sample_record, samples_file


def test_ticker_keeps_its_period_when_on_time():
    tick = Ticker(0.1, 10.0)
    assert tick.due(10.0) and not tick.due(10.05)
    assert tick.due(10.13)                    # a little late: the phase is kept
    assert tick.next == pytest.approx(10.2) and tick.skipped == 0


def test_a_late_tick_fires_once_counts_what_it_missed_and_waits_a_full_period():
    tick = Ticker(0.1, 10.0)
    assert tick.due(10.0)
    assert tick.due(10.43)                    # 0.33 s late: ticks at 10.2, 10.3, 10.4 were missed
    assert tick.skipped == 3
    assert not tick.due(10.43) and not tick.due(10.52)   # no catch-up burst, no tick right after
    assert tick.due(10.53)


def test_schedstat_of_a_running_process_and_of_none():
    stat = read_schedstat(os.getpid())
    assert stat is not None and len(stat) == 3 and all(isinstance(v, int) and v >= 0 for v in stat)
    assert stat[0] > 0 and stat[2] > 0        # this process has run
    assert read_schedstat(2 ** 22 + 12345) is None


def test_sched_sampler_leaves_exited_agents_out():
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])   # a process that runs while sampled
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    try:
        rec = SchedSampler({0: running, 1: exited}).sample()
    finally:
        running.kill()
        running.wait()
    assert set(rec) == {"t", "ranks"} and list(rec["ranks"]) == ["0"]
    cpu_ns, wait_ns, slices = rec["ranks"]["0"]
    assert cpu_ns > 0 and wait_ns >= 0 and slices >= 1
    json.dumps(rec)


def test_records_of_agent_messages():
    s = Sample(2, 5.5, [{"peer": "h1"}], LoopStats(10, 0.25, 0.01))
    assert sample_record(s) == {"t": 5.5, "rank": 2, "flows": [{"peer": "h1"}],
                                        "loop": {"timers": 10, "late_sum_s": 0.25, "late_max_s": 0.01}}
    assert "loop" not in sample_record(Sample(2, 5.5, []))
    it = Iteration(1, size=8, iter=0, seq=1, warmup=True, t_start=1.0, t_end=2.0, seconds=1.0, wrong=0)
    assert iteration_record(it) == {"t": 2.0, "kind": "iteration", "rank": 1, "size": 8, "iter": 0,
                                            "seq": 1, "warmup": True, "t_start": 1.0, "t_end": 2.0,
                                            "seconds": 1.0, "wrong": 0}
    assert SCHED in TRANSPORT_FILES and LINK_SAMPLE_S == 0.1


def test_transport_records_create_every_file(tmp_path):
    recs = TransportWriter(tmp_path / "mrc")
    recs.sched.write({"t": 1.0, "ranks": {"0": [1, 2, 3]}})
    recs.close()
    assert sorted(p.name for p in (tmp_path / "mrc").glob("*.jsonl")) == sorted(TRANSPORT_FILES)
    assert json.loads((tmp_path / "mrc" / SCHED).read_text()) == {"t": 1.0, "ranks": {"0": [1, 2, 3]}}


def test_agents_samples_files_merge_into_samples_jsonl_in_time_order(tmp_path):
    d = tmp_path / "mrc"
    TransportWriter(d).close()
    (d / SAMPLES_DIR).mkdir()

    def line(t, rank):
        return json.dumps({"t": t, "rank": rank, "flows": [], "loop": {"timers": 1, "late_sum_s": 0.0,
                                                                       "late_max_s": 0.0}}) + "\n"
    samples_file(d, 0).write_text(line(1.0, 0) + line(3.0, 0) + line(5.0, 0))
    samples_file(d, 1).write_text(line(2.0, 1) + line(4.0, 1) + line(6.0, 9) + '{"t": 7.0, "ra')
    got = merge_samples(d, world=2)
    assert got == {"files": 2, "samples": 5, "skipped": 2}      # rank 9 is no agent; a torn line
    recs = [json.loads(x) for x in (d / SAMPLES).read_text().splitlines()]
    assert [(r["t"], r["rank"]) for r in recs] == [(1.0, 0), (2.0, 1), (3.0, 0), (4.0, 1), (5.0, 0)]
    assert not (d / SAMPLES_DIR).exists()
    assert merge_samples(d, world=2) == {"files": 0, "samples": 0, "skipped": 0}


def test_sched_sampler_reads_a_runtime_once_for_all_its_ranks(monkeypatch):
    from testbed.run import sampling

    class Proc:
        def __init__(self, pid):
            self.pid = pid

        def poll(self):
            return None
    reads = []

    def read(pid):                      # a running process's figures change from read to read
        reads.append(pid)
        return [len(reads), 0, 1]
    monkeypatch.setattr(sampling, "read_schedstat", read)
    a, b = Proc(100), Proc(200)
    rec = SchedSampler({0: a, 1: b, 2: a, 3: b}).sample()
    assert sorted(reads) == [100, 200]
    assert rec["ranks"]["0"] == rec["ranks"]["2"] != rec["ranks"]["1"] == rec["ranks"]["3"]


def test_records_are_json_lines_with_numpy_scalars_as_numbers_and_nan_as_null(tmp_path):
    import numpy as np
    d = tmp_path / "mrc"
    w = TransportWriter(d)
    w.links.write({"t": 1.5, "tx_bytes": np.int64(7), "util": np.float64(0.25), "x": float("nan"), 3: "k"})
    w.links.write({"t": 1.6, "node": "e0_0"})
    w.close()
    lines = (d / "links.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [{"t": 1.5, "tx_bytes": 7, "util": 0.25, "x": None, "3": "k"},
                                             {"t": 1.6, "node": "e0_0"}]
