"""Fidelity of the emulation: was it starved (agents' scheduling delay and timer lateness,
the runner's sampler coverage: a starved emulator measures itself), host CPU beside it, and
achieved vs configured rate of the busiest link ends."""

from __future__ import annotations

import numpy as np

from testbed.metrics.definitions import ACHIEVED_WINDOW_S, BUSIEST_LINKS, CPU_SATURATED_P95, LINK_BIN_S, SAMPLER_COVERAGE_MIN, SCHED_DELAY_MAX_RTT, TIMER_LATE_MAX_RTT


def cpu_fidelity(cpu: list[dict], t0_s: float, window: tuple[float, float]) -> dict | None:
    """``{mean, p95, samples, saturated}`` of busy_fraction inside ``window``; None without samples.

    Records of several machines (a fabric over servers: each record's ``server``, none for
    the runner's) are taken per machine and the busiest one (highest p95) is reported, with
    its ``server`` (None: the runner's) and ``machines`` (how many were sampled)."""
    by_machine: dict = {}
    for c in cpu:
        if window[0] <= c["t"] - t0_s <= window[1]:
            by_machine.setdefault(c.get("server"), []).append(float(c["busy_fraction"]))
    if not by_machine:
        return None
    p95s = {m: float(np.percentile(v, 95)) for m, v in by_machine.items()}
    machine = max(p95s, key=lambda m: (p95s[m], m is None, str(m)))
    v = np.array(by_machine[machine])
    out = {"mean": float(v.mean()), "p95": p95s[machine], "samples": int(len(v)),
           "saturated": p95s[machine] >= CPU_SATURATED_P95}
    if len(by_machine) > 1:
        out.update(server=machine, machines=len(by_machine))
    return out


def busiest_links(series: dict[tuple, dict], edges: np.ndarray, window: tuple[float, float],
                  top: int = BUSIEST_LINKS) -> list[dict]:
    """The ``top`` link ends by bytes sent in ``window``: ``achieved_bps``, ``peak_bin_bps``,
    ``mean_bps``, configured ``rate_bps`` (median of samples), ``achieved_fraction`` and ``drops``.

    ``achieved_bps`` is the best mean over ``ACHIEVED_WINDOW_S`` of consecutive bins (the whole
    window's mean if shorter): one 100 ms bin is too short to judge a shaper, since HTB lets a
    burst of frames through (at 5 Mbit/s one 9000-byte frame is 14 ms, 14% of a bin) and the
    counters are read a few ms apart. ``peak_bin_bps`` keeps the single-bin peak."""
    inside = (edges[:-1] >= window[0] - 1e-9) & (edges[1:] <= window[1] + LINK_BIN_S)
    rows = []
    for (link, end), s in series.items():
        thr = s["throughput_bps"][inside]
        rate = s["rate_bps"][~np.isnan(s["rate_bps"])]
        rate_bps = float(np.median(rate)) if len(rate) else None
        k = max(1, round(ACHIEVED_WINDOW_S / LINK_BIN_S))
        if len(thr) > k:
            achieved = float(np.convolve(thr, np.full(k, 1.0 / k), mode="valid").max())
        else:
            achieved = float(thr.mean()) if len(thr) else 0.0
        rows.append({"link": link, "end": end, "tx_bytes": float(s["tx_bytes"][inside].sum()),
                     "achieved_bps": achieved, "peak_bin_bps": float(thr.max()) if len(thr) else 0.0,
                     "mean_bps": float(thr.mean()) if len(thr) else 0.0, "rate_bps": rate_bps,
                     "achieved_fraction": achieved / rate_bps if rate_bps else None,
                     "drops": float(s["drops"].sum())})
    return sorted(rows, key=lambda r: -r["tx_bytes"])[:top]


def sched_delays(sched: list[dict], t0_s: float, window: tuple[float, float]) -> list[float]:
    """Per agent and sampling interval inside ``window``: run-queue wait per timeslice, s
    (/proc/PID/schedstat deltas: wait_ns / slices, Documentation/scheduler/sched-stats.rst),
    i.e. how long a woken agent waited for a CPU on average."""
    out, last = [], {}
    for rec in sorted(sched, key=lambda r: r["t"]):
        inside = window[0] <= rec["t"] - t0_s <= window[1]
        for rank, (cpu_ns, wait_ns, slices) in rec.get("ranks", {}).items():
            prev = last.get(rank)
            last[rank] = (wait_ns, slices)
            if prev is not None and inside and slices > prev[1]:
                out.append((wait_ns - prev[0]) / (slices - prev[1]) * 1e-9)
    return out


def sampler_coverage(t_s: np.ndarray, t0_s: float, window: tuple[float, float], period_s: float = LINK_BIN_S) -> dict:
    """How well the runner's link sampler kept its period inside ``window``: ``{"coverage":
    samples taken / samples due (<= 1), "max_gap_s"}`` from the distinct record times."""
    t = np.unique(np.asarray(t_s, float) - t0_s)
    t = t[(t >= window[0]) & (t <= window[1])]
    span = window[1] - window[0]
    if span <= 0:
        return {"coverage": None, "max_gap_s": None}
    due = max(1, int(span / period_s))
    gaps = np.diff(np.concatenate([[window[0]], t, [window[1]]]))
    return {"coverage": min(1.0, len(t) / due), "max_gap_s": float(gaps.max())}


def emulation_validity(sched: list[dict], loop: list[tuple], link_t: np.ndarray, cpu: dict | None, t0_s: float,
                       window: tuple[float, float], base_rtt_s: float | None, rx_hold_s: float = 0.0) -> dict:
    """Was the emulation starved? ``{valid, reasons, sched_delay_p95_s, timer_late_p99_s,
    sampler_coverage, sampler_max_gap_s, cpu_p95}``; thresholds in base RTTs
    (:data:`testbed.metrics.definitions.DEFINITIONS` ``validity``); a measure with no
    records is None and not judged. ``loop``: (t, rank, late_max_s) from agent samples.
    ``rx_hold_s``: the agents' receive moderation (job ``rx_hold_s``), the longest a datagram
    waits for its agent beyond a wake-up: added to the scheduling delay that is judged."""
    from testbed.metrics.kpis import p_nearest_rank
    delays = sched_delays(sched, t0_s, window)
    late = [v for t, _, v in loop if window[0] <= t - t0_s <= window[1]]
    cov = sampler_coverage(link_t, t0_s, window)
    out = {"sched_delay_p95_s": p_nearest_rank(delays, 95), "timer_late_p99_s": p_nearest_rank(late, 99),
           "sampler_coverage": cov["coverage"], "sampler_max_gap_s": cov["max_gap_s"],
           "cpu_p95": cpu["p95"] if cpu else None, "cpu_mean": cpu["mean"] if cpu else None}
    reasons = []
    rtt = base_rtt_s or 0.0
    out["rx_hold_s"] = rx_hold_s
    if rtt and out["sched_delay_p95_s"] is not None and \
            out["sched_delay_p95_s"] + rx_hold_s >= SCHED_DELAY_MAX_RTT * rtt:
        hold = f" + receive hold {rx_hold_s * 1e3:.2f} ms" if rx_hold_s else ""
        reasons.append(f"agents starved: p95 scheduling delay {out['sched_delay_p95_s'] * 1e3:.2f} ms{hold} >= "
                       f"{SCHED_DELAY_MAX_RTT:g} base RTT ({SCHED_DELAY_MAX_RTT * rtt * 1e3:.2f} ms)")
    if rtt and out["timer_late_p99_s"] is not None and out["timer_late_p99_s"] >= TIMER_LATE_MAX_RTT * rtt:
        reasons.append(f"agents' timers late: p99 {out['timer_late_p99_s'] * 1e3:.2f} ms >= "
                       f"{TIMER_LATE_MAX_RTT:g} base RTT ({TIMER_LATE_MAX_RTT * rtt * 1e3:.2f} ms)")
    if out["sampler_coverage"] is not None and out["sampler_coverage"] < SAMPLER_COVERAGE_MIN:
        reasons.append(f"runner's samplers missed their period: {out['sampler_coverage']:.0%} of samples taken "
                       f"(longest gap {out['sampler_max_gap_s']:.2f} s)")
    out.update(valid=not reasons, reasons=reasons)
    return out
