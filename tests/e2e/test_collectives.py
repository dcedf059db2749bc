"""Every collective on the real fabric, four jobs at once on disjoint hosts (issue 12): each
completes bit-exact on mrc, rc with 2 QPs per connection and tcp; each job is analysed on its
own agents; every connection (and every QP) is traced; nothing is left behind."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import run_small

# One host per pod in each job, so every connection crosses the core; one job per host.
JOBS = """
name: e2e-collectives
topology: @REPO@/topologies/fat-tree-k4.yaml
transports: [mrc, rc-x2, tcp]
seed: 3
timeout: 60s
jobs:
  - name: a2a
    collective: all_to_all
    hosts: [h0_0_0, h1_0_0, h2_0_0, h3_0_0]
    min_bytes: 256KiB
    max_bytes: 256KiB
    factor: 2
    iterations: 2
    warmup: 1
  - name: perm
    collective: permutation
    hosts: [h0_0_1, h1_0_1, h2_0_1, h3_0_1]
    min_bytes: 128KiB
    max_bytes: 128KiB
    factor: 2
    iterations: 3
    warmup: 1
  - name: ag
    collective: all_gather
    hosts: [h0_1_0, h1_1_0, h2_1_0, h3_1_0]
    order: random
    min_bytes: 256KiB
    max_bytes: 256KiB
    factor: 2
    iterations: 2
    warmup: 1
    evs_per_qp: 6
  - name: rs
    collective: reduce_scatter
    hosts: [h0_1_1, h1_1_1, h2_1_1, h3_1_1]
    order: rail
    min_bytes: 256KiB
    max_bytes: 256KiB
    factor: 2
    iterations: 2
    warmup: 1
"""
COLLECTIVE = {"a2a": "all_to_all", "perm": "permutation", "ag": "all_gather", "rs": "reduce_scatter"}


@pytest.fixture(scope="module")
def jobs_run(tmp_path_factory):
    return run_small(tmp_path_factory.mktemp("e2e-collectives"), JOBS)


def test_every_job_completes_bit_exact_on_every_transport(jobs_run):
    result, summary, ns_left, if_left = jobs_run
    assert result.status == {"mrc": "done", "rc-x2": "done", "tcp": "done"}, result.reasons
    for name, s in summary["transports"].items():
        rows = {j["job"]: j for j in s["jobs"]}
        assert set(rows) == set(COLLECTIVE), name
        for job, row in rows.items():
            assert row["collective"] == COLLECTIVE[job] and row["world_size"] == 4
            assert row["complete"] and row["wrong"] == 0, (name, row)
            assert 0 < row["busbw_fraction_of_host"] <= 1.05, (name, row)   # nothing beats its link
        assert s["collective"] == "all_to_all"       # the headline is the first job's
    assert not ns_left and not if_left


def test_every_connection_and_qp_is_traced_and_delivered(jobs_run):
    result, summary, _, _ = jobs_run
    for name in ("rc-x2", "tcp", "mrc"):
        flows = json.loads((result.run_dir / name / "paths.json").read_text())["flows"]
        assert {f["job"] for f in flows} == set(COLLECTIVE)
        assert all(f["outcome"] == "delivered" for f in flows), name
        data = [f for f in flows if f["kind"] == "data"]
        connections = {(f["job"], f["src_rank"], f["dst_rank"]) for f in data}
        # all_to_all: 12 connections; permutation, all_gather, reduce_scatter: 4 each
        assert len(connections) == 24, name
        if name == "rc-x2":
            assert len(data) == 48 and len({f["tuple"]["sport"] for f in data}) == 48
        if name == "mrc":   # evs_per_qp 6 over the 4 inter-pod paths: paths repeat
            ag = [f for f in data if f["job"] == "ag"]
            assert len(ag) == 4 * 6 and len({tuple(f["links"]) for f in ag}) == 4 * 4


def test_rc_stripes_every_connection_over_both_qps(jobs_run):
    result, _, _, _ = jobs_run
    for path in sorted((result.run_dir / "rc-x2" / "jobs").glob("rank*.json")):
        job = json.loads(path.read_text())
        assert job["qps"] == 2 and all(len(p["evs"]) == 2 for p in job["send_to"])
    done = [e for e in (json.loads(line) for line in (result.run_dir / "rc-x2" / "events.jsonl").open())
            if e.get("kind") == "agent" and e.get("status") == "done"]
    assert len(done) == 16
    for e in done:
        for peer in e["summary"]["channel"]["peers"]:
            if peer["dir"] == "tx":
                assert len(peer["qps"]) == 2
                assert all(q["acked_bytes"] > 0 for q in peer["qps"]), peer
