"""The collective itself: nccl-tests-style per-size rows (iteration time = slowest rank,
nccl-tests ``-a 3``; algbw and busbw from nccl-tests doc/PERFORMANCE.md) and whether the
workload completed."""

from __future__ import annotations

import numpy as np
from testbed.model.nccl import bandwidths






def _stats(values) -> dict:
    """``{p50, p99, max, mean, n}`` of iteration times: percentiles by nearest rank (the
    ceil(p/100 * n)-th smallest, no interpolation: with n = 6 iterations p99 is the slowest),
    mean as nccl-tests averages its iterations; None for no values."""
    from testbed.metrics.kpis import p_nearest_rank
    v = np.asarray(values, float)
    if len(v) == 0:
        return {"p50": None, "p99": None, "max": None, "mean": None, "n": 0}
    return {"p50": p_nearest_rank(v, 50), "p99": p_nearest_rank(v, 99),
            "max": float(v.max()), "mean": float(v.mean()), "n": int(len(v))}


def loop_time_s(iterations: list[dict]) -> float:
    """Seconds per iteration of a size's measured iterations, as nccl-tests times its loop: the
    wall-clock span from the first rank's start of the first to the last rank's end of the last,
    divided by their number. Ranks that run ahead into the next iteration (a permutation or
    incast sender whose write is acknowledged before its receiver took it) are not counted
    twice, as the mean of per-iteration slowest-rank times would (an incast on tcp read 112% of
    the root's link that way). Falls back to that mean for records without start/end times."""
    if all(it["start"] and it["end"] for it in iterations):
        span = max(iterations[-1]["end"]) - min(iterations[0]["start"])
        if span > 0:
            return span / len(iterations)
    return float(np.mean([max(it["s"]) for it in iterations]))


def size_table(events: list[dict], world_size: int, collective: str = "all_reduce") -> list[dict]:
    """nccl-tests-style rows per size, ascending: ``size_bytes, count`` (float32 elements),
    ``iterations`` (measured, all ranks reported), ``warmup``, ``time_s`` (:func:`loop_time_s`),
    ``iteration_s`` stats (each iteration's slowest rank), bandwidths (see :func:`bandwidths`,
    from ``time_s``) and ``wrong``."""
    per: dict[tuple, dict] = {}
    for e in events:
        if e.get("kind") == "iteration":
            it = per.setdefault((int(e["size"]), e["iter"], bool(e.get("warmup"))),
                                {"ranks": set(), "s": [], "wrong": 0, "start": [], "end": []})
            it["ranks"].add(e.get("rank"))
            it["s"].append(float(e["seconds"]))
            it["wrong"] += int(e.get("wrong") or 0)
            if isinstance(e.get("t_start"), (int, float)) and isinstance(e.get("t_end"), (int, float)):
                it["start"].append(float(e["t_start"]))
                it["end"].append(float(e["t_end"]))
    by_size: dict[int, dict] = {}
    for k, v in per.items():
        by_size.setdefault(k[0], {})[k] = v
    rows = []
    for size in sorted(by_size):
        its = by_size[size]
        complete = [v for k, v in sorted(its.items(), key=lambda kv: kv[0][1])
                    if not k[2] and len(v["ranks"]) >= world_size]
        done = [max(v["s"]) for v in complete]
        stats = _stats(done)
        time_s = loop_time_s(complete) if complete else None
        row = {"size_bytes": size, "count": size // 4, "type": "float32",
               "redop": "sum" if collective in ("all_reduce", "reduce_scatter") else "none",
               "iterations": len(done), "warmup": sum(1 for k in its if k[2]),
               "time_s": time_s, "iteration_s": stats,
               "wrong": sum(v["wrong"] for v in its.values())}
        row.update(bandwidths(size, time_s, world_size, collective) if done else
                   dict.fromkeys(("algbw_bytes_per_s", "algbw_mbit_per_s", "busbw_bytes_per_s",
                                  "busbw_mbit_per_s")))
        rows.append(row)
    return rows


def expected_measured_iterations(manifest: dict, job: int = 0) -> int | None:
    """Measured iterations the workload asks for (iterations * number of sweep sizes), from the
    manifest's ``workload`` (an older run's: :func:`testbed.rundir.upgrade.upgrade`); for ``job`` > 0
    from ``scenario.jobs[job]``. None if there is none."""
    if job:
        jobs = (manifest.get("scenario") or {}).get("jobs") if isinstance(manifest.get("scenario"), dict) else None
        w = jobs[job] if isinstance(jobs, list) and job < len(jobs) else None
        return _sweep_iterations(w)
    return _sweep_iterations(manifest.get("workload"))


def _sweep_iterations(w) -> int | None:
    if not (isinstance(w, dict) and {"min_bytes", "max_bytes", "factor", "iterations"} <= w.keys()):
        return None
    n, size = 0, int(w["min_bytes"])
    if size < 1 or int(w["factor"]) < 2:   # a damaged manifest: no sweep to count
        return None
    while size <= int(w["max_bytes"]) and int(w["factor"]) > 1:
        n, size = n + 1, size * int(w["factor"])
    return int(w["iterations"]) * max(n, 1)


def completion(events: list[dict], world_size: int | None, expected_measured: int | None = None) -> dict:
    """``{complete, reason, ranks_done, ranks_failed, run_status, iterations_done, iterations_expected}``
    from agent, iteration and run events: complete iff every rank (0..world_size-1, or every rank
    seen) reported ``done``, none failed and, when known, every measured iteration was done by all
    ranks."""
    done = {e["rank"] for e in events if e.get("kind") == "agent" and e.get("status") == "done"}
    failed = {e["rank"]: e.get("reason") for e in events if e.get("kind") == "agent" and e.get("status") == "failed"}
    seen = {e["rank"] for e in events if e.get("kind") == "agent" and "rank" in e}
    ranks = set(range(world_size)) if world_size else seen
    status = next((e.get("status") for e in reversed(events) if e.get("kind") == "run" and e.get("phase") == "end"), None)
    per_it: dict[tuple, set] = {}
    for e in events:
        if e.get("kind") == "iteration" and not e.get("warmup"):
            per_it.setdefault((e.get("size"), e.get("iter")), set()).add(e.get("rank"))
    its_done = sum(1 for rs in per_it.values() if ranks and ranks <= rs)
    short = expected_measured is not None and its_done < expected_measured
    its = f"{its_done}/{expected_measured if expected_measured is not None else '?'} measured iterations"
    if failed:
        r = min(failed)
        reason = f"rank {r} failed: {failed[r]}" + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else "")
    elif ranks and ranks <= done and not short:
        reason = f"all {len(ranks)} ranks done"
    else:
        missing = sorted(ranks - done)
        reason = (f"ranks {missing[:8]}{'...' if len(missing) > 8 else ''} not done" if missing
                  else "iterations missing") + f" (run ended: {status})"
    return {"complete": bool(ranks) and not failed and ranks <= done and not short, "reason": f"{reason}; {its}",
            "ranks_done": len(done), "ranks_failed": len(failed), "run_status": status,
            "iterations_done": its_done, "iterations_expected": expected_measured}
