"""Host runtimes (root): ``agent_processes: 2`` serves every rank of every transport from two
processes (:mod:`agents.runtime`), each agent's sockets in its own host's namespace. The
ranks report as with one process per agent (bit-exact, every flow traced and delivered on
its host's EVs or ECMP paths), the runner sees two processes, and each rank's log is its
runtime's; the per-host run of the same scenario is the reference."""

from __future__ import annotations

import json
import os

from tests.e2e.conftest import run_small

SCENARIO = """
name: e2e-runtimes
topology: @REPO@/topologies/fat-tree-k4.yaml
transports: [mrc, rc, tcp]
seed: 3
timeout: 60s
agent_processes: 2
workload:
  collective: all_reduce
  hosts: [h0_0_0, h1_0_1, h2_1_0, h3_1_1, h0_1_1, h2_0_0]
  min_bytes: 256KiB
  max_bytes: 256KiB
  factor: 2
  iterations: 3
  warmup: 1
"""


def test_two_host_runtimes_serve_every_rank_of_every_transport(tmp_path):
    result, summary, ns_left, if_left = run_small(tmp_path, SCENARIO)
    assert result.status == {"mrc": "done", "rc": "done", "tcp": "done"}, result.reasons
    assert not ns_left and not if_left
    for t in ("mrc", "rc", "tcp"):
        s = summary["transports"][t]
        assert s["wrong"] == 0 and s["completion"]["complete"], (t, s["completion"])
        # correctness only: the rate two runtimes reach is make bench's (--ceiling-agents 2)
        assert s["busbw_fraction_of_host"] > 0, (t, s["busbw_fraction_of_host"])
        tdir = result.run_dir / t
        events = [json.loads(line) for line in (tdir / "events.jsonl").read_text().splitlines()]
        spawned = next(e for e in events if e["kind"] == "agents" and e.get("phase") == "spawned")
        assert len(set(spawned["pids"].values())) == 2                    # 6 ranks, 2 processes
        assert sorted(sum(spawned["runtimes"], [])) == list(range(6))
        end = next(e for e in events if e["kind"] == "run" and e.get("phase") == "end")
        assert set(end["exit_codes"].values()) == {0}
        assert end["samples"]["files"] == 6 and end["samples"]["skipped"] == 0
        for rank in range(6):                                              # each rank's log: its runtime's
            log = tdir / "agents" / f"rank{rank}.log"
            assert log.is_symlink() and os.readlink(log).startswith("runtime")
        paths = json.loads((tdir / "paths.json").read_text())["flows"]
        assert paths and all(f["outcome"] == "delivered" for f in paths)
        done = [e for e in events if e["kind"] == "agent" and e.get("status") == "done"]
        hosts = {e["summary"]["host"] for e in done}                      # every rank on its own host
        assert len(done) == 6 and hosts == {"h0_0_0", "h1_0_1", "h2_1_0", "h3_1_1", "h0_1_1", "h2_0_0"}
    assert json.loads((result.run_dir / "manifest.json").read_text())["scenario"]["agent_processes"] == 2
