"""Failover KPIs measured on each flow's own progress (definitions in :mod:`testbed.metrics`).

A ring all-reduce is a chain: when one ring hop stops, every rank soon waits for it, so the
aggregate goodput dips only once the ring has drained, and an idle flow at the end of an
iteration looks like a stall. Here every KPI is computed per rx flow (``rank <- peer``,
labelled ``"<src rank>-><dst rank>"``) inside the flow's *active* time: per iteration, from its
sender's start to its receiver's end (when the receiver has everything, the flow is done, not
stalled). Then the scenario figure is the worst flow, named.

Resolution: the agents sample their counters every ``sample_interval_s`` (at most one base RTT,
:func:`testbed.spec.jobs.sample_interval_s`). Stalls are read off the samples themselves
(:func:`sample_stalls`: the gaps between the samples that saw the rx counter rise), so a stall
reads within one sample interval of the true one; recovery runs on progress bins of one sample
interval (never finer than the samples: a finer bin only interpolates between them).
"""

from __future__ import annotations

import math

import numpy as np

from testbed.metrics.definitions import DETECTED_STATES, FLOW_DIP_HORIZON_S, FLOW_RECOVERY_FRACTION, RECOVERY_WINDOW_MIN_S, RECOVERY_WINDOW_RTTS, RESTORING, SLOWING
from testbed.metrics.series import binned_increments


def p_nearest_rank(values, p: float) -> float | None:
    """The p-th percentile by nearest rank: the ceil(p/100 * n)-th smallest of n values
    (NIST/Hyndman-Fan definition 1; no interpolation), None for no values."""
    v = sorted(values)
    if not v:
        return None
    return float(v[max(1, math.ceil(p / 100 * len(v))) - 1])


def iteration_spans(events: list[dict], t0_s: float) -> list[dict]:
    """Per iteration (warm-ups included), in sweep order: ``{seq, size, iter, warmup, start_s
    (first rank), end_s (last rank), seconds (slowest rank: nccl-tests -a 3), by_rank: {rank:
    (start_s, end_s)}}``, times relative to ``t0_s``."""
    its: dict[tuple, dict] = {}
    for e in events:
        if e.get("kind") != "iteration":
            continue
        key = (int(e["size"]), e["iter"], bool(e.get("warmup")))
        it = its.setdefault(key, {"seq": e.get("seq"), "size": key[0], "iter": key[1], "warmup": key[2],
                                  "by_rank": {}, "seconds": 0.0})
        it["by_rank"][e["rank"]] = (float(e["t_start"]) - t0_s, float(e["t_end"]) - t0_s)
        it["seconds"] = max(it["seconds"], float(e["seconds"]))
    out = []
    for it in its.values():
        it["start_s"] = min(a for a, _ in it["by_rank"].values())
        it["end_s"] = max(b for _, b in it["by_rank"].values())
        out.append(it)
    return sorted(out, key=lambda it: it["start_s"])


def open_span(spans: list[dict], events: list[dict], world_size: int, end_s: float) -> dict:
    """The unfinished rest of an incomplete run as one more span of :func:`iteration_spans`'s
    shape (``open: True``): for every rank that did not report ``done``, from the end of its
    last iteration (or the first iteration's start, or 0) to ``end_s``; a done rank has nothing
    left (a zero-length span at ``end_s``). Without it a stall that never ends, in the iteration
    that never finished, is in no span and reads as no stall at all. Times relative, as in ``spans``."""
    done = {e["rank"] for e in events if e.get("kind") == "agent" and e.get("status") == "done" and "rank" in e}
    first = min((it["start_s"] for it in spans), default=0.0)
    by_rank = {}
    for r in range(world_size):
        if r in done:
            by_rank[r] = (end_s, end_s)
            continue
        last = max((it["by_rank"][r][1] for it in spans if r in it["by_rank"]), default=first)
        by_rank[r] = (min(last, end_s), end_s)
    start = min((a for a, _ in by_rank.values()), default=end_s)
    return {"seq": None, "size": None, "iter": None, "warmup": False, "open": True, "by_rank": by_rank,
            "seconds": None, "start_s": start, "end_s": end_s}


def flow_active(edges: np.ndarray, spans: list[dict], src_rank: int, dst_rank: int) -> np.ndarray:
    """Bool per bin: the bin lies inside an iteration's span for this flow, from the sender's
    start to the receiver's end (shape (nbins,))."""
    start, end = edges[:-1], edges[1:]
    out = np.zeros(len(start), bool)
    for it in spans:
        a = it["by_rank"].get(src_rank, (it["start_s"], None))[0]
        b = it["by_rank"].get(dst_rank, (None, it["end_s"]))[1]
        out |= (start >= a - 1e-9) & (end <= b + 1e-9)
    return out


def flow_spans(spans: list[dict], src_rank: int, dst_rank: int) -> list[tuple[float, float]]:
    """The flow's active time: per iteration (:func:`iteration_spans`), (its sender's start, its
    receiver's end), relative s (the iteration's first start / last end for a rank it lacks)."""
    return [(it["by_rank"].get(src_rank, (it["start_s"], None))[0], it["by_rank"].get(dst_rank, (None, it["end_s"]))[1])
            for it in spans]


def busy_spans(t_s: np.ndarray, busy: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) of the time a sender had a posted write unacknowledged, from its samples
    (``t_s`` relative s and ``busy`` bool, shapes (nsamples,), sorted by time): each run of busy
    samples widened to the samples either side of it, since the write was posted and the last
    one acknowledged somewhere within those intervals (never shorter than the true busy time)."""
    t, b = np.asarray(t_s, float), np.asarray(busy, bool)
    edge = np.diff(np.concatenate([[0], b.astype(int), [0]]))
    starts, stops = np.nonzero(edge == 1)[0], np.nonzero(edge == -1)[0]
    n = len(t)
    return [(float(t[max(i - 1, 0)]), float(t[min(j, n - 1)])) for i, j in zip(starts, stops)]


def intersect_spans(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-empty overlaps of two lists of (start, end) spans, each sorted and disjoint."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def sample_stalls(t_s: np.ndarray, counter: np.ndarray, active: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start_s, duration_s) of every stretch of active time between two rises of a cumulative
    counter, as its samples saw them: within each active span ``(a, b)``, the gaps between ``a``,
    every sample inside it whose value is above the previous sample's, and ``b``.

    Resolution: nothing arrived from some time in the sample interval before one rise to some
    time in the interval before the next, so a gap of ``g`` between two rises is within one
    sample interval of the true stall (a healthy flow's gaps are one interval each). ``t_s``
    relative s, shape (nsamples,) like ``counter``; ``active``: (start, end) spans, relative s."""
    t = np.asarray(t_s, float)
    order = np.argsort(t, kind="stable")
    t, c = t[order], np.asarray(counter, float)[order]
    rises = t[np.diff(c, prepend=0.0) > 0]
    out = []
    for a, b in active:
        if b <= a:
            continue
        pts = np.concatenate([[a], rises[(rises > a) & (rises < b)], [b]])
        out += [(float(s), float(d)) for s, d in zip(pts[:-1], np.diff(pts))]
    return out


def zero_runs(progress: np.ndarray, active: np.ndarray, edges: np.ndarray) -> list[tuple[float, float]]:
    """(start_s, duration_s) of every maximal run of active bins with no progress."""
    zero = np.concatenate([[False], active & (progress <= 0.0), [False]])
    d = np.diff(zero.astype(int))
    starts, stops = np.nonzero(d == 1)[0], np.nonzero(d == -1)[0]
    return [(float(edges[a]), float(edges[b] - edges[a])) for a, b in zip(starts, stops)]


def window_rate(progress: np.ndarray, active: np.ndarray, k: int, bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean rate (progress units per s) over ``k`` consecutive bins starting at each bin, and
    whether all ``k`` bins are active; shapes (nbins,) (the last k-1 bins are never valid)."""
    n = len(progress)
    csum = np.concatenate([[0.0], np.cumsum(progress)])
    acts = np.concatenate([[0], np.cumsum(active.astype(int))])
    rate = np.zeros(n)
    ok = np.zeros(n, bool)
    if n >= k:
        rate[: n - k + 1] = (csum[k:] - csum[:-k]) / (k * bin_s)
        ok[: n - k + 1] = (acts[k:] - acts[:-k]) == k
    return rate, ok


def flow_recovery(edges: np.ndarray, progress: np.ndarray, active: np.ndarray, t_fault_s: float,
                  window_s: float, t_until_s: float | None = None) -> dict:
    """Recovery of one flow from a fault at ``t_fault_s`` that lasts until ``t_until_s``: its
    rate over sliding windows of ``window_s`` (whole windows of active bins only) against the
    median window rate before the fault. A dip is a run of windows below
    FLOW_RECOVERY_FRACTION of it lasting at least one window (shorter, shallower dips are the
    healthy ring's own: see the constant's measurement); the dips that count start within
    FLOW_DIP_HORIZON_S of the fault
    (and before it ends, ``t_until_s``): in a ring the stall reaches a flow only once the
    ranks before it have drained (measured: 1.2 s round a 16-rank ring at 5 Mbit/s). Recovery
    is the start of the first valid window back at or above the threshold after the last such
    dip, minus ``t_fault_s``: how long until the flow ran normally again.

    Returns ``{"dip": bool, "recovered": bool, "s": float|None, "baseline_bytes_per_s"}``
    (``s`` None when there is no dip or no recovery before the data ends)."""
    bin_s = float(edges[1] - edges[0]) if len(edges) > 1 else 0.01
    k = max(1, round(window_s / bin_s))
    rate, ok = window_rate(progress, active, k, bin_s)
    start = edges[:-1]
    pre = ok & (start + k * bin_s <= t_fault_s + 1e-9)
    baseline = float(np.median(rate[pre])) if pre.any() else 0.0
    out = {"dip": False, "recovered": False, "s": None, "baseline_bytes_per_s": baseline}
    if baseline <= 0:
        return out
    thr = FLOW_RECOVERY_FRACTION * baseline
    horizon = min(t_fault_s + FLOW_DIP_HORIZON_S, t_until_s if t_until_s is not None else math.inf)
    below = (ok & (rate < thr)).astype(int)
    runs = np.convolve(below, np.ones(k, int), "valid") == k
    t = start[: len(runs)]
    dips = np.nonzero(runs & (t >= t_fault_s - 1e-9) & (t < horizon))[0]
    if len(dips) == 0:
        return out
    j = int(dips[-1])
    out["dip"] = True
    back = np.nonzero(ok[j:] & (rate[j:] >= thr))[0]
    if len(back):
        out.update(recovered=True, s=float(start[j + back[0]] - t_fault_s))
    return out


def recovery_window_s(base_rtt_s: float | None) -> float:
    """Sliding window of :func:`flow_recovery`: RECOVERY_WINDOW_RTTS base RTTs, at least
    RECOVERY_WINDOW_MIN_S (a handful of packets per window at the emulated rates)."""
    return max(RECOVERY_WINDOW_MIN_S, RECOVERY_WINDOW_RTTS * (base_rtt_s or 0.0))


def fault_windows(faults: list[dict], t_end_s: float) -> list[dict]:
    """Per disruptive fault: ``{t_s, link, action, until_s}``, ``until_s`` the next fault
    event on the same link that ends it (a revert phase, a ``link_up`` or a ``switch_up``), else
    ``t_end_s``."""
    out = []
    for i, f in enumerate(faults):
        if not f["disruptive"]:
            continue
        until = next((g["t_s"] for g in faults[i + 1:] if g["link"] == f["link"]
                      and (g["phase"] == "revert" or g["action"] in RESTORING)), t_end_s)
        out.append({"t_s": f["t_s"], "link": f["link"], "action": f["action"], "until_s": until})
    return out


def ev_links(jobs: list[dict]) -> dict[tuple, tuple[str, ...]]:
    """``(rank, dir, peer host, ev_id) -> links`` of every EV of the job specs: "tx" the
    requester's EVs towards each ``send_to`` peer, "rx" the responder's (SACK) EVs towards each
    ``recv_from`` peer."""
    out = {}
    for job in jobs:
        for direction, side in (("tx", "send_to"), ("rx", "recv_from")):
            for peer in job.get(side) or ():
                for ev in peer.get("evs", []):
                    out[(job["rank"], direction, peer.get("host"), ev["ev_id"])] = tuple(ev.get("links") or ())
    return out


def ev_retirements(transitions: list[dict], crossing: set[tuple], t_end_s: float) -> list[dict]:
    """Every GOOD/SKIP -> ASSUMED_BAD/DENIED/UNKNOWN transition: ``{t_s, rank, dir, peer, ev_id,
    crosses_fault, duration_s}`` (until the EV's next return to GOOD, else ``t_end_s``).
    ``crossing``: the (rank, dir, peer, ev_id) whose path crosses a faulted link."""
    def key_of(e: dict) -> tuple:
        return (e["rank"], e["dir"] or "tx", e.get("peer"), e["ev_id"])

    out = []
    for i, e in enumerate(transitions):
        if e["old"] in ("GOOD", "SKIP") and e["new"] in DETECTED_STATES:
            key = key_of(e)
            back = next((g["t_s"] for g in transitions[i + 1:] if key_of(g) == key and g["new"] == "GOOD"), t_end_s)
            out.append({"t_s": e["t_s"], "rank": e["rank"], "dir": key[1], "peer": key[2], "ev_id": e["ev_id"],
                        "crosses_fault": key in crossing, "duration_s": max(0.0, back - e["t_s"])})
    return out


def false_retirements(rets: list[dict], windows: list[dict], ev_links_: dict[tuple, tuple]) -> list[dict]:
    """The retirements (:func:`ev_retirements`) no fault explains: all but those of an EV whose
    path (``ev_links_``: (rank, dir, peer, ev_id) -> links) crosses a link that is faulted at
    that moment (a ``windows`` item, apply .. ``until_s``). Before, between and after faults,
    and in a run without faults, every retirement is false (congestion taken for failure); so
    is one on a link that is only slowed (a ``rate`` window): a slow path is alive."""
    down = [(w, {k for k, links in ev_links_.items() if w["link"] in links}) for w in windows
            if w["action"] not in SLOWING]
    return [r for r in rets if not any(w["t_s"] - 1e-9 <= r["t_s"] <= w["until_s"]
                                       and (r["rank"], r["dir"], r["peer"], r["ev_id"]) in mine
                                       for w, mine in down)]


def flow_kpis(flows: dict, hosts: list[str], spans: list[dict], edges: np.ndarray, windows: list[dict],
              crossing: set[tuple[int, int]], base_rtt_s: float | None) -> list[dict]:
    """Per rx flow: label, ranks, longest stall (s, start: :func:`sample_stalls`, counted only
    while its sender had a posted write unacknowledged where the samples say so: a ring step
    waiting for its upstream's data is idle, not stalled), recovery from
    the first disruptive fault (see :func:`flow_recovery`, on the bins ``edges``), whether its
    traced path crosses a faulted link (its ``(src, dst)`` ranks in ``crossing``), and its gaps
    between rises in fault-free time (``healthy_gaps_s``)."""
    rank_of = {h: r for r, h in enumerate(hosts)}
    t_first = windows[0]["t_s"] if windows else None
    win_s = recovery_window_s(base_rtt_s)
    out = []
    for (rank, peer, direction), fs in sorted(flows.items(), key=lambda kv: str(kv[0])):
        if direction != "rx" or peer not in rank_of:
            continue
        src = rank_of[peer]
        progress = binned_increments(fs.t_s, fs.bytes, edges)
        active = flow_active(edges, spans, src, rank)
        within = flow_spans(spans, src, rank)
        tx = flows.get((src, hosts[rank], "tx"))
        if tx is not None and tx.busy is not None:   # waiting for its own input is not a stall
            within = intersect_spans(sorted(within), busy_spans(tx.t_s, tx.busy))
        runs = np.array(sample_stalls(fs.t_s, fs.bytes, within)).reshape(-1, 2)
        longest = tuple(runs[int(np.argmax(runs[:, 1]))]) if len(runs) else (None, 0.0)
        faulted = np.zeros(len(runs), bool)
        for w in windows:   # a gap touching a fault window is not a healthy one
            faulted |= (runs[:, 0] + runs[:, 1] >= w["t_s"] - 1e-9) & (runs[:, 0] <= w["until_s"])
        healthy = runs[~faulted, 1].tolist()
        label = f"{src}->{rank}"
        rec = (flow_recovery(edges, progress, active, t_first, win_s, windows[0]["until_s"]) if t_first is not None
               else {"dip": False, "recovered": False, "s": None, "baseline_bytes_per_s": None})
        out.append({"flow": label, "src": src, "dst": rank, "peer": peer,
                    "crosses_fault": (src, rank) in crossing,
                    "longest_stall_s": float(longest[1]),
                    "stall_at_s": None if longest[0] is None else float(longest[0]), "recovery": rec,
                    "healthy_gaps_s": healthy})
    return out


def worst_stall(kpis: list[dict], base_rtt_s: float | None) -> dict | None:
    """The flow with the longest stall: ``{s, rtts, flow, at_s}``; None without flows."""
    if not kpis:
        return None
    k = max(kpis, key=lambda f: f["longest_stall_s"])
    return {"s": k["longest_stall_s"], "rtts": k["longest_stall_s"] / base_rtt_s if base_rtt_s else None,
            "flow": k["flow"], "at_s": k["stall_at_s"]}


def worst_recovery(kpis: list[dict], base_rtt_s: float | None) -> dict | None:
    """Over flows: a flow that dipped and never recovered is the worst; else the longest
    recovery; ``{"dip": False}`` when no flow dipped. None without flows."""
    if not kpis:
        return None
    dipped = [k for k in kpis if k["recovery"]["dip"]]
    if not dipped:
        return {"s": None, "rtts": None, "flow": None, "dip": False, "recovered": True}
    stuck = [k for k in dipped if not k["recovery"]["recovered"]]
    k = stuck[0] if stuck else max(dipped, key=lambda f: f["recovery"]["s"])
    s = k["recovery"]["s"]
    return {"s": s, "rtts": s / base_rtt_s if s is not None and base_rtt_s else None, "flow": k["flow"],
            "dip": True, "recovered": not stuck, "flows_dipped": len(dipped)}


def faulted_iteration(spans: list[dict], windows: list[dict]) -> dict | None:
    """The measured iteration in progress when the first disruptive fault hit, against the
    median of the healthy measured iterations of the same size (those overlapping no fault
    window): ``{slowdown_pct, seconds, healthy_median_s, size, iter, healthy_n}``; None
    without a fault, a faulted measured iteration or a healthy one."""
    if not windows:
        return None
    t = windows[0]["t_s"]
    measured = [it for it in spans if not it["warmup"]]
    hit = next((it for it in measured if it["start_s"] <= t <= it["end_s"]), None)
    if hit is None:
        return None
    healthy = [it["seconds"] for it in measured if it["size"] == hit["size"]
               and not any(it["start_s"] <= w["until_s"] and w["t_s"] <= it["end_s"] for w in windows)]
    if not healthy:
        return None
    med = float(np.median(healthy))
    return {"slowdown_pct": (hit["seconds"] / med - 1) * 100, "seconds": hit["seconds"], "healthy_median_s": med,
            "size": hit["size"], "iter": hit["iter"], "healthy_n": len(healthy)}


def faulted_iterations(spans: list[dict], windows: list[dict]) -> dict | None:
    """Every measured iteration overlapping a fault window (each flap's down phase, each
    fault until its revert or ``link_up``), each against the median of the healthy measured
    iterations of its size (those overlapping no window): ``{worst_slowdown_pct,
    mean_slowdown_pct, n, healthy_n, iters: [{iter, size, seconds, slowdown_pct}]}``; None
    without a fault window, a faulted measured iteration, or a healthy one of its size. Unlike
    :func:`faulted_iteration` (the first fault's iteration only), every flap counts."""
    if not windows:
        return None
    measured = [it for it in spans if not it["warmup"]]

    def hit(it: dict) -> bool:
        return any(it["start_s"] <= w["until_s"] and w["t_s"] <= it["end_s"] for w in windows)

    healthy: dict[int, list[float]] = {}
    for it in measured:
        if not hit(it):
            healthy.setdefault(it["size"], []).append(it["seconds"])
    rows = []
    for it in measured:
        if hit(it) and healthy.get(it["size"]):
            med = float(np.median(healthy[it["size"]]))
            rows.append({"iter": it["iter"], "size": it["size"], "seconds": it["seconds"],
                         "slowdown_pct": (it["seconds"] / med - 1) * 100})
    if not rows:
        return None
    slow = [r["slowdown_pct"] for r in rows]
    return {"worst_slowdown_pct": max(slow), "mean_slowdown_pct": float(np.mean(slow)), "n": len(rows),
            "healthy_n": sum(len(v) for v in healthy.values()), "iters": rows}


def boundary_warnings(spans: list[dict], windows: list[dict], margin_s: float = 1.0) -> list[str]:
    """A warning per fault that lands within ``margin_s`` of the end of the iteration it hits:
    the ring drains there anyway, so the fault's dip mixes with the boundary's."""
    out = []
    for w in windows:
        it = next((it for it in spans if it["start_s"] <= w["t_s"] <= it["end_s"]), None)
        if it is not None and it["end_s"] - w["t_s"] < margin_s:
            out.append(f"{w['action']} {w['link']} at {w['t_s']:.3f} s lands {it['end_s'] - w['t_s']:.3f} s before "
                       f"the end of iteration {it['iter']} (size {it['size']}): its effect mixes with the ring "
                       f"draining at the boundary")
    return out
