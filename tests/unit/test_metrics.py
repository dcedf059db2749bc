"""Metrics on synthetic records with known answers: goodput, stall, recovery, detection,
nccl-tests bandwidths, completion and the CPU-saturation validity rule."""

import json

import numpy as np
import pytest

from testbed import metrics
from testbed.rundir.upgrade import upgrade

T0 = 1000.0           # wall-clock run start, s
BIN = metrics.BIN_S
RATE_BYTES = 1e7      # one rx flow at full rate: 10 MB/s = 80 Mbit/s
SIZE = 1 << 20
FAULT_T, STALL_END, RECOVER_T, END_T = 1.0, 1.2, 1.5, 3.0


def rx_rate(t: float) -> float:
    """Bytes/s of each rx flow: full, stalled 200 ms after the fault, half, full from 1.5 s."""
    if t < FAULT_T or t >= RECOVER_T:
        return RATE_BYTES
    return 0.0 if t < STALL_END else RATE_BYTES / 2


def make_run(tmp_path, *, cpu_busy=0.5, transports=("mrc", "tcp"), world_size=2):
    """Write a synthetic run directory; returns its path. mrc has EVs, tcp has none and rank 1 fails."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"scenario": {"name": "synthetic"}, "transports": list(transports),
                                                   "world_size": world_size, "host_link_rate_bps": 100e6}))
    for name in transports:
        d = run / name
        d.mkdir()
        ev = [{"t": T0, "kind": "run", "phase": "start"},
              {"t": T0 + FAULT_T, "kind": "fault", "action": "link_down", "link": "a0_0-c0_0", "phase": "apply"},
              {"t": T0 + 2.0, "kind": "fault", "action": "link_down", "link": "a0_0-c0_0", "phase": "revert"}]
        if name == "mrc":
            ev += [{"t": T0 + FAULT_T + 0.01, "kind": "ev_state", "rank": 0, "peer": "h1", "dir": "tx", "ev_id": 2,
                    "old": "GOOD", "new": "SKIP", "cause": "congestion"},
                   {"t": T0 + FAULT_T + 0.05, "kind": "ev_state", "rank": 0, "peer": "h1", "dir": "tx",
                    "ev_id": 3, "old": "GOOD", "new": "ASSUMED_BAD", "cause": "loss"},
                   {"t": T0 + 1.6, "kind": "ev_state", "rank": 0, "peer": "h1", "dir": "tx",
                    "ev_id": 3, "old": "ASSUMED_BAD", "new": "GOOD", "cause": "probes_ok"}]
        for k in range(15):
            for rank in range(world_size):
                sec = 0.3 if (k == 5 and rank == 1) else 0.2
                ev.append({"t": T0 + 0.2 * (k + 1), "kind": "iteration", "rank": rank, "size": SIZE, "iter": k,
                           "warmup": k == 0, "t_start": T0 + 0.2 * k, "t_end": T0 + 0.2 * (k + 1), "seconds": sec,
                           "wrong": 2 if (k == 3 and rank == 1) else 0})
        for rank in range(world_size):
            failed = name == "tcp" and rank == 1
            ev.append({"t": T0 + END_T, "kind": "agent", "rank": rank, "status": "failed" if failed else "done",
                       "reason": "peer reset" if failed else None})
        if name == "tcp":
            ev.append({"t": T0 + 1.3, "kind": "reconverge"})
        ev.append({"t": T0 + END_T + 0.01, "kind": "run", "phase": "end", "status": "ok"})
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))
        samples, total = [], 0.0
        for i in range(int(END_T / BIN) + 1):
            t = i * BIN
            if i:
                total += rx_rate(t - BIN) * BIN
            for rank in range(world_size):
                evs = [{"ev_id": e, "state": "GOOD", "sent": 10 * i, "lost": 1 if e == 3 and t > 1.05 else 0}
                       for e in range(4)] if name == "mrc" else []
                samples.append({"t": T0 + t, "rank": rank, "flows": [
                    {"peer": (rank - 1) % world_size, "dir": "rx", "bytes": total, "retransmits": 0,
                     "rtt_s": None, "cwnd_bytes": None, "evs": []},
                    {"peer": (rank + 1) % world_size, "dir": "tx", "bytes": total,
                     "retransmits": min(i, 7 if rank == 0 else 3), "rtt_s": 0.001 + 0.0001 * rank,
                     "cwnd_bytes": 65536, "evs": evs}]})
        (d / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
        links = [{"t": T0 + 0.1 * j, "link": "a0_0-c0_0", "end": end, "tx_bytes": 50e6 / 8 * 0.1 * j,
                  "tx_packets": j * 10, "drops": min(j, 5), "rate_bps": 100e6}
                 for j in range(31) for end in ("a", "b")]
        (d / "links.jsonl").write_text("".join(json.dumps(x) + "\n" for x in links))
        cpu = [{"t": T0 + 0.1 * j, "busy_fraction": cpu_busy} for j in range(31)]
        (d / "cpu.jsonl").write_text("".join(json.dumps(x) + "\n" for x in cpu))
    return run


@pytest.fixture
def summary(tmp_path):
    return metrics.analyze_run(make_run(tmp_path))[0]


def test_binned_increments_interpolates_and_clips_resets():
    edges = np.array([0.0, 0.5, 1.0, 1.5])
    inc = metrics.binned_increments(np.array([0.0, 1.0, 1.5]), np.array([0.0, 100.0, 50.0]), edges)
    assert inc.tolist() == [50.0, 50.0, 0.0]
    assert metrics.binned_increments(np.array([]), np.array([]), edges).tolist() == [0.0, 0.0, 0.0]


def test_goodput_stall_recovery_and_detection(summary):
    mrc = summary["transports"]["mrc"]
    assert mrc["baseline_goodput_bps"] == pytest.approx(2 * RATE_BYTES * 8)
    assert mrc["longest_stall_s"] == pytest.approx(STALL_END - FAULT_T, abs=BIN)
    assert mrc["longest_stall_at_s"] == pytest.approx(FAULT_T, abs=BIN)
    assert mrc["recovery_s"] == pytest.approx(RECOVER_T - FAULT_T, abs=BIN)
    assert mrc["detect_s"] == pytest.approx(0.05, abs=BIN)  # the SKIP at +10 ms is not a detection
    assert [f["action"] for f in mrc["per_fault"]] == ["link_down"]
    assert mrc["workload_window_s"] == pytest.approx([0.0, END_T])


@pytest.mark.parametrize("planned, detect", [((1.0, 1.0), 0.05), ((1.0, 1.1), None)])
def test_links_the_timeline_planned_for_one_instant_are_one_fault(tmp_path, planned, detect):
    """Two link_down applies 1 ms apart; only the second link's EV (rank 0's EV 3) retires, 50 ms
    after the first apply. Planned for one instant (equal ``planned_s``) they are one fault,
    detected by that retirement; planned apart, the first fault's own EVs never retire."""
    tr = metrics.load_transport(make_run(tmp_path), "mrc")
    tr.events = [e for e in tr.events if e["kind"] != "fault"] + [
        {"t": T0 + FAULT_T + 0.001 * i, "kind": "fault", "action": "link_down", "link": link, "phase": "apply",
         "index": i, "planned_s": at} for i, (link, at) in enumerate(zip(("e0_0-a0_1", "a0_0-c0_0"), planned))]
    evs = [{"ev_id": 2, "links": ["h0-e0_0", "e0_0-a0_1"]}, {"ev_id": 3, "links": ["h0-e0_0", "a0_0-c0_0"]}]
    tr.jobs = [{"rank": 0, "world": ["h0", "h1"], "send_to": [{"host": "h1", "evs": evs}]},
               {"rank": 1, "world": ["h0", "h1"], "recv_from": [{"host": "h0", "evs": []}]}]
    s = metrics.analyze_transport(tr, 2).summary
    assert [len(f["links"]) for f in s["per_fault"]] == ([2] if detect else [1, 1])
    assert s["detect_s"] == (pytest.approx(detect, abs=1e-6) if detect else None)


def test_fault_instants_group_by_planned_time_else_by_switch():
    from testbed.metrics.recovery import fault_instants

    def f(t, link, action="link_down", **kw):
        return {"t_s": t, "link": link, "action": action, "phase": "apply", "disruptive": True, **kw}
    flaps = [f(1.0, "a-b", "flap", index=0, planned_s=1.0), f(1.5, "a-b", "flap", index=0, planned_s=1.5)]
    assert [g["links"] for g in fault_instants(flaps)] == [["a-b"], ["a-b"]]
    old_switch = [f(1.0, "a-c", "switch_down", index=3), f(1.001, "a-d", "switch_down", index=3),
                  f(1.002, "x-y", index=4), f(1.003, "x-z", index=5)]
    assert [g["links"] for g in fault_instants(old_switch)] == [["a-c", "a-d"], ["x-y"], ["x-z"]]
    plane = [f(2.0 + i / 1000, f"l{i}", index=i, planned_s=2.0) for i in range(16)]
    (g,) = fault_instants(plane + [{**plane[0], "disruptive": False, "phase": "revert"}])
    assert g["t_s"] == 2.0 and g["links"] == [f"l{i}" for i in range(16)]


def test_detection_counts_skip_to_bad_but_not_congestion_or_earlier_events():
    tr = [{"t_s": 0.5, "old": "GOOD", "new": "ASSUMED_BAD"}, {"t_s": 1.01, "old": "GOOD", "new": "SKIP"},
          {"t_s": 1.02, "old": "ASSUMED_BAD", "new": "GOOD"}, {"t_s": 1.03, "old": "SKIP", "new": "ASSUMED_BAD"}]
    assert metrics.time_to_detect(tr, 1.0) == pytest.approx(0.03)
    assert metrics.time_to_detect(tr, 2.0) is None


def test_transport_without_evs_has_no_detection(summary):
    tcp = summary["transports"]["tcp"]
    assert tcp["has_evs"] is False and tcp["detect_s"] is None
    assert tcp["reconverge_s"] == pytest.approx([1.3])
    assert tcp["recovery_s"] == pytest.approx(RECOVER_T - FAULT_T, abs=BIN)


def test_busbw_formula():
    bw = metrics.bandwidths(1_000_000, 0.5, 4)
    assert bw["algbw_bytes_per_s"] == pytest.approx(2e6)
    assert bw["busbw_bytes_per_s"] == pytest.approx(2e6 * 2 * 3 / 4)
    assert bw["busbw_mbit_per_s"] == pytest.approx(24.0)
    assert metrics.bus_factor(1) == 0.0
    with pytest.raises(ValueError):
        metrics.bus_factor(0)


def test_size_table_nccl_style(summary):
    (row,) = summary["transports"]["mrc"]["sizes"]
    mean = 14 * 0.2 / 14  # the measured loop's span (t_start/t_end) / iterations; warm-up excluded
    assert (row["size_bytes"], row["count"], row["iterations"], row["warmup"], row["wrong"]) == (SIZE, SIZE // 4, 14, 1, 2)
    assert row["time_s"] == pytest.approx(mean)
    assert row["algbw_bytes_per_s"] == pytest.approx(SIZE / mean)
    assert row["busbw_bytes_per_s"] == pytest.approx(SIZE / mean * 2 * 1 / 2)
    assert row["iteration_s"]["max"] == pytest.approx(0.3) and row["iteration_s"]["p50"] == pytest.approx(0.2)
    mrc = summary["transports"]["mrc"]
    assert mrc["busbw_fraction_of_host"] == pytest.approx(SIZE / mean * 8 / 100e6)   # old manifest: one link


def test_retransmits_evs_links_and_completion(summary):
    mrc, tcp = summary["transports"]["mrc"], summary["transports"]["tcp"]
    assert mrc["retransmits"] == 10 and mrc["retransmitted_bytes"] is None
    tx0 = next(f for f in mrc["flows"] if f["rank"] == 0 and f["dir"] == "tx")
    assert {e["ev_id"]: e["lost"] for e in tx0["evs"]} == {0: 0, 1: 0, 2: 0, 3: 1}
    assert tx0["rtt_s"]["p50"] == pytest.approx(0.001)
    (a, b) = mrc["fidelity"]["busiest_links"][:2]
    assert a["achieved_bps"] == pytest.approx(50e6, rel=0.01) and a["achieved_fraction"] == pytest.approx(0.5, rel=0.01)
    assert a["drops"] == 5 and mrc["fidelity"]["link_drops"] == 10
    assert mrc["completion"]["complete"] is True
    assert mrc["completion"]["reason"] == "all 2 ranks done; 14/? measured iterations"
    assert tcp["completion"] == {"complete": False, "reason": "rank 1 failed: peer reset; 14/? measured iterations",
                                 "ranks_done": 1, "ranks_failed": 1, "run_status": "ok", "iterations_done": 14,
                                 "iterations_expected": None}
    assert [r["transport"] for r in summary["comparison"]] == ["mrc", "tcp"]


def test_completion_against_the_workload_in_the_manifest():
    manifest = {"scenario": {"name": "x", "workload": {"min_bytes": 1024, "max_bytes": 4096, "factor": 2,
                                                        "iterations": 5, "warmup": 1}}}
    assert metrics.expected_measured_iterations(upgrade(manifest)[0]) == 15   # format 1: under scenario
    assert metrics.expected_measured_iterations({"scenario": "x"}) is None
    ev = [{"kind": "iteration", "rank": r, "size": 1024, "iter": i, "warmup": False} for i in range(5) for r in (0, 1)]
    ev += [{"kind": "agent", "rank": r, "status": "done"} for r in (0, 1)]
    c = metrics.completion(ev, 2, 15)
    assert c["complete"] is False and c["reason"] == "iterations missing (run ended: None); 5/15 measured iterations"
    assert metrics.completion(ev, 2, 5)["complete"] is True


def test_host_cpu_is_reported_but_starved_agents_mark_run_invalid(tmp_path, summary):
    mrc = summary["transports"]["mrc"]
    assert mrc["valid"] is True and mrc["fidelity"]["cpu_busy"]["p95"] == pytest.approx(0.5)
    (tmp_path / "saturated").mkdir()
    run = make_run(tmp_path / "saturated", cpu_busy=0.96)
    assert all(s["valid"] for s in metrics.analyze_run(run)[0]["transports"].values())   # a busy host alone
    for name in ("mrc", "tcp"):   # agents waiting 2 ms per timeslice on a 10 ms base RTT, timers 5 ms late
        d = run / name
        (d / "jobs").mkdir()
        for r in range(2):
            (d / "jobs" / f"rank{r}.json").write_text(json.dumps(
                {"rank": r, "world": ["h0", "h1"], "qp": {"cc_params": {"base_rtt_s": 0.01}}}))
        (d / "sched.jsonl").write_text("".join(json.dumps(
            {"t": T0 + 0.1 * i, "ranks": {"0": [i * 10**6, i * 2 * 10**6, i], "1": [0, 0, i]}}) + "\n"
            for i in range(int(END_T * 10))))
    bad = metrics.analyze_run(run)[0]
    for s in bad["transports"].values():
        assert s["valid"] is False and "agents starved" in s["invalid_reasons"][0]
        assert s["validity"]["sched_delay_p95_s"] == pytest.approx(0.002)
        assert s["validity"]["cpu_p95"] == pytest.approx(0.96)


def test_recovery_edge_cases():
    edges = metrics.bin_edges(0.0, 3.0)
    flat = np.full(len(edges) - 1, 8e6)
    assert metrics.recovery_time(edges, flat, 1.0, 8e6, 3.0) == 0.0  # no dip
    dead = flat.copy()
    dead[100:] = 0.0
    assert metrics.recovery_time(edges, dead, 1.0, 8e6, 3.0) is None  # never back
    spike = flat.copy()
    spike[120] = 0.0  # one empty bin is smoothed away
    assert metrics.recovery_time(edges, spike, 1.0, 8e6, 3.0) == 0.0
    assert metrics.recovery_time(edges, flat, 1.0, 0.0, 3.0) is None


def test_short_noise_dip_is_not_a_disruption():
    edges = metrics.bin_edges(0.0, 3.0)
    g = np.full(len(edges) - 1, 8e6)
    g[[150, 151, 153]] = 0.0  # the 50 ms median leaves 2 bins below: noise, not a dip
    assert (metrics.rolling_median(g) < 8e6).sum() == 2
    assert metrics.recovery_time(edges, g, 1.0, 8e6, 3.0) == 0.0
    g[150:160] = 0.0  # 100 ms: a dip
    assert metrics.recovery_time(edges, g, 1.0, 8e6, 3.0) == pytest.approx(0.6, abs=BIN)


def test_iteration_gaps_are_neither_stalls_nor_dips():
    ev = [{"kind": "iteration", "rank": r, "size": 64, "iter": i, "warmup": False,
           "t_start": 10.0 + i + 0.01 * r, "t_end": 10.0 + i + 0.7 + 0.01 * r} for i in range(3) for r in (0, 1)]
    assert metrics.iteration_gaps(ev, 10.0) == [pytest.approx((0.71, 1.0)), pytest.approx((1.71, 2.0))]
    edges = metrics.bin_edges(0.0, 2.7)
    g = np.full(len(edges) - 1, 8e6)
    g[72:100] = 0.0  # nothing flows between iterations
    active = metrics.active_bins(edges, metrics.iteration_gaps(ev, 10.0))
    assert metrics.longest_stall(edges, g, (0.0, 2.7), active) == (0.0, None)
    assert metrics.longest_stall(edges, g, (0.0, 2.7))[0] == pytest.approx(0.28)
    assert metrics.recovery_time(edges, g, 0.65, 8e6, 2.7, active) == 0.0
    assert metrics.recovery_time(edges, g, 0.65, 8e6, 2.7) == pytest.approx(0.35, abs=BIN)  # unmasked: a dip


def test_longest_stall_only_inside_window():
    edges = metrics.bin_edges(0.0, 1.0)
    g = np.ones(len(edges) - 1)
    g[:30] = 0.0   # before the workload starts
    g[50:55] = 0.0
    dur, at = metrics.longest_stall(edges, g, (0.4, 1.0))
    assert dur == pytest.approx(0.05) and at == pytest.approx(0.5)


def test_load_jsonl_tolerates_truncated_tail_only(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text('{"t": 1}\n{"t": 2}\n{"t": ')
    assert metrics.load_jsonl(p) == [{"t": 1}, {"t": 2}]
    p.write_text('{"t": 1}\nnope\n{"t": 2}\n')
    with pytest.raises(metrics.MetricsError, match=r"e.jsonl:2: not JSON"):
        metrics.load_jsonl(p)
    assert metrics.load_jsonl(tmp_path / "missing.jsonl") == []


def test_not_a_run_dir(tmp_path):
    with pytest.raises(metrics.RunDirError, match="not a run directory"):
        metrics.load_manifest(tmp_path)


# -- columnar loading and vectorised helpers: same results as the record-at-a-time definitions --
def reference_flow_samples(samples: list[dict], t0: float) -> dict:
    """The record-at-a-time definition of flow grouping (sorted by time, stable; EVs: last seen)."""
    raw: dict = {}
    for s in samples:
        for f in s["flows"]:
            raw.setdefault((s["rank"], f.get("peer"), f.get("dir", "rx")), []).append((float(s["t"]) - t0, f))
    out = {}
    for key, rows in raw.items():
        rows.sort(key=lambda r: r[0])
        evs: dict = {}
        for _, f in rows:
            for ev in f.get("evs") or ():
                evs[ev["ev_id"]] = {k: ev.get(k) for k in ("state", "sent", "lost")}
        col = lambda name: [np.nan if f.get(name) is None else float(f[name]) for _, f in rows]  # noqa: E731
        out[key] = {"t_s": [t for t, _ in rows], "bytes": np.nan_to_num(col("bytes")).tolist(),
                    "rtt_s": col("rtt_s"), "evs": evs,
                    "rtx_bytes": col("retransmitted_bytes") if any("retransmitted_bytes" in f for _, f in rows)
                    else None}
    return out


def test_flow_samples_out_of_order_and_changing_evs():
    rng = np.random.default_rng(7)
    samples = []
    for i in range(300):
        t = 100.0 + 0.01 * i + (0.05 if i % 17 == 0 else 0.0)  # some samples arrive late / out of order
        if i % 23 == 0:
            t = 100.0 + 0.01 * (i - 1)                           # time ties
        ids = [0, 1, 2, 3] if i < 100 else ([1, 2] if i < 200 else [3, 4, 1])  # EV set changes
        evs = [{"ev_id": e, "state": ["GOOD", "SKIP", "ASSUMED_BAD"][(i + e) % 3], "sent": i * 10 + e,
                "lost": int(rng.integers(0, 3))} for e in ids]
        flows = [{"peer": "h1", "dir": "tx", "bytes": i * 1000, "rtt_s": None if i % 5 else 0.001 * i,
                  "evs": evs if i % 7 else []},
                 {"peer": "h3", "bytes": i * 900, "evs": []}]
        if i % 50 == 3:
            flows[0]["retransmitted_bytes"] = i
        samples.append({"t": t, "rank": i % 2, "flows": flows})
    order = rng.permutation(len(samples))
    shuffled = [samples[j] for j in order]
    for recs in (samples, shuffled):
        got = metrics.flow_samples(recs, 100.0)
        want = reference_flow_samples(recs, 100.0)
        assert list(got) == list(want)
        for key, w in want.items():
            g = got[key]
            assert g.t_s.tolist() == w["t_s"] and g.bytes.tolist() == w["bytes"]
            np.testing.assert_array_equal(g.rtt_s, w["rtt_s"])
            assert g.evs == w["evs"] and list(g.evs) == list(w["evs"])
            if w["rtx_bytes"] is None:
                assert g.retransmitted_bytes is None
            else:
                np.testing.assert_array_equal(g.retransmitted_bytes, w["rtx_bytes"])


def test_active_bins_matches_per_gap_masks():
    rng = np.random.default_rng(3)
    edges = metrics.bin_edges(0.0, 5.0)
    starts = np.sort(rng.uniform(0, 5, 40))
    gaps = [(a, a + d) for a, d in zip(starts, rng.uniform(0, 0.08, 40))] + [(1.0, 1.02), (2.0, 2.005), (4.99, 6.0)]
    want = np.ones(len(edges) - 1, bool)
    for g0, g1 in gaps:
        want &= ~((edges[:-1] >= g0 - 1e-9) & (edges[1:] <= g1 + 1e-9))
    assert np.array_equal(metrics.active_bins(edges, gaps), want)
    assert metrics.active_bins(edges, []).all()


def test_iter_jsonl_blank_padded_and_bad_lines(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"t": 1}\n\n   \n  {"t": 2}  \n{"a": "é\\u00e9"}\n[1, 2]\n')
    assert metrics.load_jsonl(p) == [{"t": 1}, {"t": 2}, {"a": "éé"}, [1, 2]]
    p.write_text('{"t": 1} {"t": 2}\n{"t": 3}\n')
    with pytest.raises(metrics.MetricsError, match=r"x.jsonl:1: not JSON: Extra data"):
        metrics.load_jsonl(p)


def test_records_as_dicts_or_columns_give_the_same_analysis(tmp_path):
    run = make_run(tmp_path)
    for name in ("mrc", "tcp"):
        cols = metrics.load_transport(run, name)
        dicts = metrics.TransportRecords(name, *(metrics.load_jsonl(run / name / f) for f in
                                                 ("events.jsonl", "samples.jsonl", "links.jsonl", "cpu.jsonl")))
        assert metrics.analyze_transport(cols, 2).summary == metrics.analyze_transport(dicts, 2).summary


def test_synthetic_k4_run(tmp_path):
    from testbed.metrics import synthetic
    run = synthetic.write_run(tmp_path / "run", duration_s=3.0)
    summary, analyses = metrics.analyze_run(run)
    assert [a.name for a in analyses] == ["mrc", "rc", "tcp"] and summary["world_size"] == 16
    for a in analyses:
        s = a.summary
        assert s["completion"]["complete"] and len(s["flows"]) == 32 and len(a.links) == 96
        assert s["per_fault"][0]["recovery_s"] is not None and s["baseline_goodput_bps"] > 0
    mrc, tcp = summary["transports"]["mrc"], summary["transports"]["tcp"]
    assert mrc["detect_s"] == pytest.approx(0.03) and tcp["detect_s"] is None
    assert [len(f["evs"]) for f in mrc["flows"] if f["dir"] == "tx"] == [4] * 16


def test_bench_metrics_figure():
    from testbed.tools import bench
    r = bench.bench_metrics(repeat=1, duration_s=2.0)
    assert r["transports"] == 3 and 0 < r["analyse_s"] and 0 < r["report_s"]
    assert r["lines_per_transport"]["samples.jsonl"] == 16 * 201


def test_achieved_rate_is_a_one_second_window_not_one_bursty_bin():
    """A shaped link at 5 Mbit/s whose counters show one 100 ms bin at 6.5 Mbit/s (an HTB burst of
    a 9000-byte frame plus read jitter) achieved ~5.15 Mbit/s over its best second, not 130%."""
    from testbed.metrics.fidelity import busiest_links

    n = 30
    edges = np.arange(n + 1) * 0.1
    thr = np.full(n, 5e6)
    thr[12] = 6.5e6
    series = {("h0-e0", "a"): {"throughput_bps": thr, "rate_bps": np.full(n, 5e6),
                               "tx_bytes": thr * 0.1 / 8, "drops": np.zeros(n)}}
    (row,) = busiest_links(series, edges, (0.0, 3.0))
    assert row["peak_bin_bps"] == pytest.approx(6.5e6)
    assert row["achieved_bps"] == pytest.approx(5.15e6)
    assert row["achieved_fraction"] == pytest.approx(1.03)
    (short,) = busiest_links(series, edges, (1.0, 1.5))   # shorter than a second: its mean
    assert short["achieved_bps"] == pytest.approx(thr[10:16].mean())


def test_time_s_is_the_loop_span_over_iterations_not_the_mean_of_per_iteration_times():
    """A sender whose writes are acknowledged before its receiver takes them (tcp: the kernel's
    ACK) runs ahead: the data of the receiver's first measured iteration was sent before that
    iteration started. Each iteration's slowest rank then takes 1.0 s, but the measured loop
    spans 4.8 s for 4 iterations (an incast on tcp read 112% of the root's link the old way)."""
    from testbed.metrics.collectives import size_table
    events = []
    for i in range(4):
        for rank, (a, b) in ((0, (i, i + 1.0)), (1, (i - 0.8, i - 0.7))):   # rank 1 runs 0.8 s ahead
            events.append({"kind": "iteration", "rank": rank, "size": 1 << 20, "iter": i, "warmup": False,
                           "t_start": 100.0 + a, "t_end": 100.0 + b, "seconds": b - a, "wrong": 0})
    row, = size_table(events, 2, "permutation")
    assert row["iteration_s"]["max"] == pytest.approx(1.0)
    assert row["time_s"] == pytest.approx(4.8 / 4)        # 99.2 .. 104.0 over 4 iterations
    assert row["busbw_bytes_per_s"] == pytest.approx((1 << 20) / (4.8 / 4))
    for e in events:                                      # records without start/end: the old mean
        del e["t_start"], e["t_end"]
    row, = size_table(events, 2, "permutation")
    assert row["time_s"] == pytest.approx(1.0)


def test_cpu_fidelity_reports_the_busiest_machine_of_a_run_over_servers():
    from testbed.metrics import cpu_fidelity
    runner = [{"t": t, "busy_fraction": 0.3} for t in range(10)]
    s1 = [{"t": t, "busy_fraction": 0.97, "server": "s1"} for t in range(10)]
    s2 = [{"t": t, "busy_fraction": 0.5, "server": "s2"} for t in range(10)]
    one = cpu_fidelity(runner, 0.0, (0.0, 9.0))
    assert one == {"mean": pytest.approx(0.3), "p95": pytest.approx(0.3), "samples": 10,
                   "saturated": False}                                          # one machine: as before
    got = cpu_fidelity(runner + s1 + s2, 0.0, (0.0, 9.0))
    assert (got["server"], got["machines"], got["saturated"], got["samples"]) == ("s1", 3, True, 10)
    assert cpu_fidelity(runner + s2, 0.0, (0.0, 9.0))["server"] == "s2"
    assert cpu_fidelity(s1, 0.0, (20.0, 30.0)) is None


def test_the_summary_times_the_controllers_loss_restart_and_resync(tmp_path):
    run = make_run(tmp_path, transports=("mrc",))
    with open(run / "mrc" / "events.jsonl", "a") as f:
        for rec in ({"t": T0 + 1.2, "kind": "controller_lost", "reason": "exited with status -9", "exit": -9, "pid": 7},
                    {"t": T0 + 1.25, "kind": "controller", "phase": "restart", "pid": 8, "attempt": 1,
                     "after": "exited with status -9"},
                    {"t": T0 + 1.5, "kind": "controller", "phase": "resynced", "connections": 2, "answered": 2,
                     "replaced": 1, "denied": 0, "assumed_bad": 1}):
            f.write(json.dumps(rec) + "\n")
    mrc = metrics.analyze_run(run)[0]["transports"]["mrc"]
    assert [x["t_s"] for x in mrc["controller_lost"]] == pytest.approx([1.2])
    assert mrc["controller_restarts"] == [{"t_s": pytest.approx(1.25), "attempt": 1, "pid": 8,
                                           "after": "exited with status -9"}]
    assert mrc["controller_resyncs"] == [{"t_s": pytest.approx(1.5), "connections": 2, "answered": 2, "replaced": 1,
                                          "denied": 0, "assumed_bad": 1}]
