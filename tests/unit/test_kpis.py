"""Per-flow failover KPIs (pure): active time, stalls, recovery, faulted iteration, EV retirements."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.metrics import bin_edges
from testbed.metrics.kpis import (ev_retirements, false_retirements, fault_windows, faulted_iteration, flow_active,
                                  flow_recovery, iteration_spans, p_nearest_rank, zero_runs)

T0 = 1000.0


def _its(spans):
    """iteration events: spans = [(start, {rank: end})...], two ranks, measured after the first."""
    out = []
    for k, (start, ends) in enumerate(spans):
        for rank, end in ends.items():
            out.append({"kind": "iteration", "rank": rank, "size": 4096, "iter": k, "seq": k, "warmup": k == 0,
                        "t_start": T0 + start, "t_end": T0 + end, "seconds": end - start})
    return out


def test_nearest_rank_percentile():
    assert p_nearest_rank([], 99) is None
    assert p_nearest_rank([3, 1, 2], 50) == 2
    assert p_nearest_rank(list(range(1, 101)), 99) == 99
    assert p_nearest_rank([5.0], 99) == 5.0


def test_a_flow_is_not_stalled_after_its_receiver_finished():
    spans = iteration_spans(_its([(0.0, {0: 1.0, 1: 0.6}), (1.2, {0: 2.0, 1: 2.0})]), T0)
    edges = bin_edges(0.0, 2.0)
    active = flow_active(edges, spans, 0, 1)          # flow 0 -> 1: receiver 1 ends at 0.6 in iteration 0
    progress = np.where((edges[:-1] < 0.6) | (edges[:-1] >= 1.2), 1000.0, 0.0)
    assert zero_runs(progress, active, edges) == []   # 0.6 .. 1.2 idles outside the flow's active time
    progress[150:170] = 0.0                           # 1.5 .. 1.7: a real stall
    (run,) = zero_runs(progress, active, edges)
    assert run == pytest.approx((1.5, 0.2))


def test_flow_recovery():
    edges = bin_edges(0.0, 6.0)
    active = np.ones(len(edges) - 1, bool)
    flat = np.full(len(edges) - 1, 1000.0)
    assert flow_recovery(edges, flat, active, 3.0, 0.1)["dip"] is False
    dip = flat.copy()
    dip[300:350] = 0.0                                # 3.0 .. 3.5 dead
    rec = flow_recovery(edges, dip, active, 3.0, 0.1)
    # back when a whole window is at >= 75%: up to a quarter of a window (25 ms) before the last dead bin
    assert rec["dip"] and rec["recovered"] and 0.47 <= rec["s"] <= 0.5
    dead = flat.copy()
    dead[300:] = 0.0
    rec = flow_recovery(edges, dead, active, 3.0, 0.1)
    assert rec["dip"] and not rec["recovered"] and rec["s"] is None
    late = flat.copy()
    late[300:320] = 0.0
    late[450:500] = 0.0                               # a second, longer dip 1.5 s later: the ring draining
    assert 1.97 <= flow_recovery(edges, late, active, 3.0, 0.1)["s"] <= 2.0
    late[550:600] = 0.0                               # beyond the 2 s horizon: not this fault's
    assert 1.97 <= flow_recovery(edges, late, active, 3.0, 0.1)["s"] <= 2.0
    short = flat.copy()
    short[310:314] = 0.0                              # 40 ms dead after the fault: under a window long
    assert flow_recovery(edges, short, active, 3.0, 0.1)["dip"] is False


def test_faulted_iteration_slowdown_against_healthy_median():
    spans = iteration_spans(_its([(0, {0: 1, 1: 1}), (1, {0: 2, 1: 2}), (2, {0: 3, 1: 3}),
                                  (3, {0: 5, 1: 5}), (5, {0: 6, 1: 6}), (6, {0: 7.2, 1: 7})]), T0)
    faults = [{"t_s": 3.5, "link": "x", "action": "link_down", "phase": "apply", "disruptive": True},
              {"t_s": 4.5, "link": "x", "action": "link_up", "phase": "apply", "disruptive": False}]
    windows = fault_windows(faults, 8.0)
    assert windows == [{"t_s": 3.5, "link": "x", "action": "link_down", "until_s": 4.5}]
    fi = faulted_iteration(spans, windows)
    assert fi["iter"] == 3 and fi["seconds"] == 2.0 and fi["healthy_n"] == 4
    assert fi["healthy_median_s"] == pytest.approx(1.0) and fi["slowdown_pct"] == pytest.approx(100.0)
    assert faulted_iteration(spans, []) is None


def test_false_retirements_are_evs_off_the_faulted_path():
    tr = [{"t_s": 1.0, "rank": 0, "dir": "tx", "peer": "b", "ev_id": 1, "old": "GOOD", "new": "ASSUMED_BAD"},
          {"t_s": 1.1, "rank": 0, "dir": "tx", "peer": "b", "ev_id": 2, "old": "SKIP", "new": "ASSUMED_BAD"},
          {"t_s": 1.2, "rank": 0, "dir": "tx", "peer": "b", "ev_id": 2, "old": "ASSUMED_BAD", "new": "GOOD"},
          {"t_s": 1.3, "rank": 0, "dir": "tx", "peer": "b", "ev_id": 3, "old": "GOOD", "new": "SKIP"},
          # the same EV id towards another peer (all_to_all): a different EV, on its own path
          {"t_s": 1.4, "rank": 0, "dir": "tx", "peer": "c", "ev_id": 1, "old": "GOOD", "new": "ASSUMED_BAD"}]
    rets = ev_retirements(tr, {(0, "tx", "b", 1)}, 5.0)
    assert [(r["peer"], r["ev_id"], r["crosses_fault"], round(r["duration_s"], 3)) for r in rets] == [
        ("b", 1, True, 4.0), ("b", 2, False, 0.1), ("c", 1, False, 3.6)]


def test_false_retirements_are_all_but_evs_through_a_link_down_at_that_moment():
    evl = {(0, "tx", "b", 1): ("h-e", "e-a", "a-c"), (0, "tx", "b", 2): ("h-e", "e-a2", "a2-c2")}
    windows = [{"t_s": 10.0, "link": "a-c", "action": "link_down", "until_s": 20.0}]

    def ret(t, ev):
        return {"t_s": t, "rank": 0, "dir": "tx", "peer": "b", "ev_id": ev, "duration_s": 0.1}
    rets = [ret(5.0, 1),     # through a-c, but before it failed: congestion
            ret(10.1, 1),    # through a-c while down: a true detection
            ret(12.0, 2),    # off the failed path while it is down
            ret(25.0, 1)]    # after link_up
    assert [(r["t_s"], r["ev_id"]) for r in false_retirements(rets, windows, evl)] == [
        (5.0, 1), (12.0, 2), (25.0, 1)]
    assert false_retirements(rets, [], evl) == rets          # no fault: every retirement is false
    slowed = [{**windows[0], "action": "rate"}]              # a slow link is alive: no excuse
    assert false_retirements(rets, slowed, evl) == rets


def test_samplers_that_miss_their_period_invalidate_the_run():
    from testbed.metrics.fidelity import emulation_validity, sampler_coverage
    every = np.arange(0.0, 25.0, 0.1) + T0
    assert sampler_coverage(every, T0, (0.0, 25.0))["coverage"] == pytest.approx(1.0, abs=0.01)
    sparse = np.array([0.0, 6.0, 12.0, 18.0]) + T0          # 4 samples in 25 s (seen on k8)
    v = emulation_validity([], [], sparse, None, T0, (0.0, 25.0), 0.04)
    assert v["valid"] is False and "samplers missed their period" in v["reasons"][0]
    assert v["sampler_max_gap_s"] == pytest.approx(7.0)
    late = [(T0 + t, 0, 0.02) for t in np.arange(0.0, 25.0, 0.02)]   # timers 20 ms late, RTT 40 ms
    v = emulation_validity([], late, every, None, T0, (0.0, 25.0), 0.04)
    assert v["valid"] is False and "timers late" in v["reasons"][0]


# -- the stalls' resolution: one sample interval ------------------------------------------------------
def _raw_longest_gap(records: list[dict], rank: int, peer: str) -> float:
    """The longest time between two samples that saw the rx counter rise, read off the records
    directly (as a reviewer would from samples.jsonl), no testbed code."""
    pts = sorted((r["t"], f["bytes"]) for r in records if r["rank"] == rank
                 for f in r["flows"] if f["dir"] == "rx" and f["peer"] == peer)
    rises = [t for (t, b), (_, b0) in zip(pts[1:], pts) if b > b0]
    return max(b - a for a, b in zip(rises, rises[1:]))


@pytest.mark.parametrize("interval", [0.02, 0.005])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_worst_stall_is_within_one_sample_interval_of_the_records(interval, seed):
    import random

    from testbed.metrics import flow_samples
    from testbed.metrics.kpis import flow_kpis, worst_stall
    rng = random.Random(seed)
    stall = (1.0 + rng.uniform(0, 0.05), 1.0 + rng.uniform(0.06, 0.2))    # nothing arrives in between
    arrivals = [t / 1000 for t in range(0, 2500) if not stall[0] <= t / 1000 < stall[1]]   # a packet per ms
    records, t = [], 0.0
    while t < 2.5:   # an agent's samples: one interval plus its loop's lateness apart
        t += interval + rng.uniform(0, interval / 4)
        got = sum(1 for a in arrivals if a <= t) * 4096
        records.append({"t": T0 + t, "rank": 1, "flows": [{"peer": "h0", "dir": "rx", "bytes": got}]})
    spans = iteration_spans(_its([(0.0, {0: 2.5, 1: 2.5})]), T0)
    flows = flow_samples(records, T0)
    kpis = flow_kpis(flows, ["h0", "h1"], spans, bin_edges(0.0, 2.5, interval), [], set(), 0.02)
    got = worst_stall(kpis, 0.02)
    truth = stall[1] - stall[0] + 0.001            # from the last arrival to the next
    assert got["flow"] == "0->1"
    assert abs(got["s"] - _raw_longest_gap(records, 1, "h0")) <= interval
    assert abs(got["s"] - truth) <= interval * 1.25 + 1e-9   # one interval, and its lateness
    # it starts at the first sample after the last arrival: within one interval (and lateness) of it
    assert stall[0] - 0.001 <= got["at_s"] <= stall[0] + interval * 1.25


def test_bins_are_never_finer_than_the_samples():
    from testbed.metrics.summary import kpi_bin_s
    from testbed.spec.jobs import MIN_SAMPLE_INTERVAL_S, SAMPLE_INTERVAL_S, sample_interval_s
    assert kpi_bin_s([{"sample_interval_s": 0.02}, {"sample_interval_s": 0.005}]) == 0.02
    assert kpi_bin_s([]) == 0.01                                   # a run without job specs
    for rtt in (0.0031, 0.0227, 0.0435, 1.0):
        s = sample_interval_s(rtt)
        assert MIN_SAMPLE_INTERVAL_S <= s <= SAMPLE_INTERVAL_S and (s <= rtt or s == MIN_SAMPLE_INTERVAL_S)
    assert sample_interval_s(0.0123) == pytest.approx(0.0123) and sample_interval_s(0.0435) == SAMPLE_INTERVAL_S


def test_an_incomplete_runs_unfinished_rest_is_active_time_so_a_stall_that_never_ends_counts():
    """Two iterations end at 2 s; the flow 0->1 then moves until 3 s and never again (a QP in
    ERR) while the run goes on to 10 s. Over the finished iterations alone no stall shows; with
    the open span the 7 s stall does. A rank that reported done has nothing left."""
    from testbed.metrics.kpis import flow_spans, open_span, sample_stalls
    spans = [{"start_s": 0.0, "end_s": 1.0, "by_rank": {0: (0.0, 1.0), 1: (0.0, 1.0)}},
             {"start_s": 1.0, "end_s": 2.0, "by_rank": {0: (1.0, 2.0), 1: (1.0, 2.0)}}]
    t = np.arange(0.0, 10.01, 0.02)
    counter = np.minimum(t, 3.0) * 1000
    closed = sample_stalls(t, counter, flow_spans(spans, 0, 1))
    assert max(d for _, d in closed) < 0.05
    rest = open_span(spans, [], 2, 10.0)
    assert rest["by_rank"] == {0: (2.0, 10.0), 1: (2.0, 10.0)} and rest["open"]
    opened = sample_stalls(t, counter, flow_spans([*spans, rest], 0, 1))
    start, longest = max(opened, key=lambda g: g[1])
    assert longest == pytest.approx(7.0, abs=0.03) and start == pytest.approx(3.0, abs=0.03)
    done = open_span(spans, [{"kind": "agent", "status": "done", "rank": 0}], 2, 10.0)
    assert done["by_rank"][0] == (10.0, 10.0)


def test_a_switch_up_ends_the_fault_windows_of_its_links():
    faults = [{"t_s": 1.0, "link": l, "action": "switch_down", "phase": "apply", "disruptive": True}
              for l in ("a-b", "a-c")] + \
             [{"t_s": 3.0, "link": l, "action": "switch_up", "phase": "apply", "disruptive": False}
              for l in ("a-b", "a-c")]
    assert fault_windows(faults, 8.0) == [{"t_s": 1.0, "link": l, "action": "switch_down", "until_s": 3.0}
                                          for l in ("a-b", "a-c")]
    from testbed.metrics.recovery import faults as fault_records
    recs = fault_records([{"kind": "fault", "t": 101.0, "action": "switch_down", "link": "a-b", "phase": "apply"},
                          {"kind": "fault", "t": 103.0, "action": "switch_up", "link": "a-b", "phase": "apply"}], 100.0)
    assert [r["disruptive"] for r in recs] == [True, False]


def _ring_step_records(idle_flag: bool | None):
    """Flow 0->1 over 3 s, sampled every 20 ms: data arrives 0-1 s and 1.5-3 s. From 1.0 to
    1.5 s rank 0 waits for its upstream (nothing posted: busy False), except from 2.0 to
    2.3 s, when its write is posted and nothing arrives (busy True: a real stall)."""
    records, t = [], 0.0
    got = 0
    while t < 3.0:
        t = round(t + 0.02, 4)
        waiting, stuck = 1.0 <= t < 1.5, 2.0 <= t < 2.3
        if not (waiting or stuck):
            got += 4096
        tx = {"peer": "h1", "dir": "tx", "bytes": got}
        if idle_flag is not None:
            tx["busy"] = not waiting if idle_flag else True
        records.append({"t": T0 + t, "rank": 0, "flows": [tx]})
        records.append({"t": T0 + t, "rank": 1, "flows": [{"peer": "h0", "dir": "rx", "bytes": got}]})
    return records


@pytest.mark.parametrize("idle_flag, longest", [(True, 0.3), (None, 0.5)])
def test_a_ring_step_waiting_for_its_upstream_is_not_a_stall(idle_flag, longest):
    """With the sender's busy flag, its 0.5 s wait for input is cut out and the 0.3 s stall with
    a write outstanding is the worst; without the flag (older runs) the wait counts, as before."""
    from testbed.metrics import flow_samples
    from testbed.metrics.kpis import flow_kpis, worst_stall
    flows = flow_samples(_ring_step_records(idle_flag), T0)
    spans = iteration_spans(_its([(0.0, {0: 3.0, 1: 3.0})]), T0)
    got = worst_stall(flow_kpis(flows, ["h0", "h1"], spans, bin_edges(0.0, 3.0, 0.02), [], set(), 0.02), 0.02)
    assert got["flow"] == "0->1" and got["s"] == pytest.approx(longest, abs=0.021)


def test_busy_spans_widen_each_run_of_busy_samples_by_a_sample_each_side():
    from testbed.metrics.kpis import busy_spans, intersect_spans
    t = np.arange(10.0)
    b = np.array([0, 1, 1, 0, 0, 1, 0, 0, 0, 1], bool)
    assert busy_spans(t, b) == [(0.0, 3.0), (4.0, 6.0), (8.0, 9.0)]
    assert busy_spans(t, np.zeros(10, bool)) == []
    assert intersect_spans([(0.0, 5.0), (6.0, 10.0)], busy_spans(t, b)) == [(0.0, 3.0), (4.0, 5.0), (8.0, 9.0)]
