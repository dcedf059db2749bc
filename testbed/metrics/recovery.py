"""Faults, EV state transitions and what they do to goodput: time to detect, iteration gaps,
recovery time and the longest stall (definitions in :mod:`testbed.metrics`)."""

from __future__ import annotations

import math

import numpy as np

from testbed.metrics.definitions import DETECTED_STATES, DIP_HORIZON_S, DISRUPTIVE, MIN_DIP_BINS, RECOVERY_FRACTION
from testbed.metrics.series import rolling_median


def faults(events: list[dict], t0_s: float) -> list[dict]:
    """Fault events (apply and revert) as ``{t_s, action, link, phase, disruptive, index,
    planned_s}``, by time (``index``, ``planned_s``: None in runs journaled without them)."""
    out = [{"t_s": e["t"] - t0_s, "action": e.get("action"), "link": e.get("link"), "phase": e.get("phase"),
            "disruptive": e.get("action") in DISRUPTIVE and e.get("phase") == "apply",
            "index": e.get("index"), "planned_s": e.get("planned_s")}
           for e in events if e.get("kind") == "fault"]
    return sorted(out, key=lambda f: f["t_s"])


def fault_instants(faults_: list[dict]) -> list[dict]:
    """The disruptive applies of :func:`faults` grouped into the faults a user scheduled: those
    planned for one instant (equal ``planned_s``: a plane's 16 ``link_down`` entries with one
    trigger and offset) are one fault, as are a ``switch_down``'s links in runs journaled
    without ``planned_s`` (one ``index``). Each: the first apply's keys (``t_s``: when the
    first link went) plus ``links``, all of the group's links in apply order; by time."""
    groups: dict[tuple, dict] = {}
    for n, f in enumerate(x for x in faults_ if x["disruptive"]):
        key = (("planned", f["planned_s"]) if f.get("planned_s") is not None
               else ("switch", f.get("index"), f["action"]) if f["action"] == "switch_down" and f.get("index") is not None
               else ("one", n))
        g = groups.get(key)
        if g is None:
            groups[key] = {**f, "links": [f["link"]]}
        else:
            g["links"].append(f["link"])
    return sorted(groups.values(), key=lambda g: g["t_s"])


def ev_transitions(events: list[dict], t0_s: float) -> list[dict]:
    """``ev_state`` events as ``{t_s, rank, peer, dir, ev_id, old, new, cause, loss_cause}`` sorted
    by time (``dir``: "tx" for the EVs of the rank's requester, "rx" for its responder's;
    ``loss_cause``: for a retirement on losses, how the loss that retired it was found:
    "timeout", "ev_threshold" or "ooo" (:class:`agents.mrc.loss.LossCause`); None otherwise or
    from an agent that does not report it)."""
    out = [{"t_s": e["t"] - t0_s, **{k: e.get(k) for k in ("rank", "peer", "dir", "ev_id", "old", "new", "cause",
                                                           "loss_cause")}}
           for e in events if e.get("kind") == "ev_state"]
    return sorted(out, key=lambda e: e["t_s"])


def time_to_detect(transitions: list[dict], t_fault_s: float) -> float | None:
    """Seconds from ``t_fault_s`` to the first GOOD/SKIP -> ASSUMED_BAD/DENIED/UNKNOWN at or after it."""
    for e in transitions:
        if e["t_s"] >= t_fault_s and e["old"] in ("GOOD", "SKIP") and e["new"] in DETECTED_STATES:
            return e["t_s"] - t_fault_s
    return None


def iteration_gaps(events: list[dict], t0_s: float) -> list[tuple[float, float]]:
    """Intervals (relative s) between one iteration's end (its last rank) and the next one's
    start (its first rank), when no rank runs a collective (buffer set-up and checks)."""
    its: dict[tuple, list] = {}
    for e in events:
        if e.get("kind") == "iteration":
            it = its.setdefault((e.get("size"), e.get("iter"), bool(e.get("warmup"))), [math.inf, -math.inf])
            it[0], it[1] = min(it[0], float(e["t_start"]) - t0_s), max(it[1], float(e["t_end"]) - t0_s)
    spans = sorted(its.values())
    return [(a[1], b[0]) for a, b in zip(spans, spans[1:]) if b[0] > a[1]]


def active_bins(edges: np.ndarray, gaps: list[tuple[float, float]]) -> np.ndarray:
    """Bool per bin: False for bins lying entirely inside an iteration gap; shape (nbins,).
    (Bin starts and ends are sorted, so each gap masks one contiguous range of bins.)"""
    nbins = len(edges) - 1
    if not gaps or nbins <= 0:
        return np.ones(max(nbins, 0), bool)
    g = np.asarray(gaps, float)
    first = np.searchsorted(edges[:-1], g[:, 0] - 1e-9, side="left")   # start >= g0 - eps
    stop = np.searchsorted(edges[1:], g[:, 1] + 1e-9, side="right")     # end <= g1 + eps
    keep = stop > first
    cover = np.zeros(nbins + 1, int)
    np.add.at(cover, first[keep], 1)
    np.add.at(cover, stop[keep], -1)
    return np.cumsum(cover[:-1]) == 0


def recovery_time(edges: np.ndarray, goodput_bps: np.ndarray, t_fault_s: float, baseline_bps: float,
                  t_end_s: float, active: np.ndarray | None = None) -> float | None:
    """Seconds from ``t_fault_s`` until aggregate goodput is back (bins ``edges``, relative s;
    ``goodput_bps`` shape (nbins,), bits/s; ``active`` masks iteration gaps, see :func:`active_bins`).

    The goodput is smoothed with a centred rolling median of SMOOTH_BINS (50 ms: drops
    single-bin spikes and keeps a step's position exact). The dip is the first run of at
    least MIN_DIP_BINS active smoothed bins below RECOVERY_FRACTION * ``baseline_bps``
    starting within DIP_HORIZON_S after the fault (shorter runs are sampling noise);
    recovery is the start of the first active bin after it back at or above the threshold.
    Returns 0.0 if there is no dip, None if the baseline is 0 or goodput is not back before
    ``t_end_s``."""
    if baseline_bps <= 0:
        return None
    active = np.ones(len(goodput_bps), bool) if active is None else active
    smooth, start = rolling_median(goodput_bps), edges[:-1]
    thr = RECOVERY_FRACTION * baseline_bps
    below = ((smooth < thr) & active).astype(int)
    runs = np.convolve(below, np.ones(MIN_DIP_BINS, int), "valid") == MIN_DIP_BINS
    first = np.nonzero(runs & (start[:len(runs)] >= t_fault_s - 1e-9)
                       & (start[:len(runs)] < t_fault_s + DIP_HORIZON_S))[0]
    if len(first) == 0:
        return 0.0
    j = int(first[0])
    back = np.nonzero((smooth[j:] >= thr) & active[j:] & (start[j:] < t_end_s))[0]
    return None if len(back) == 0 else float(start[j + back[0]] - t_fault_s)


def longest_stall(edges: np.ndarray, goodput_bps: np.ndarray, window: tuple[float, float],
                  active: np.ndarray | None = None) -> tuple[float, float | None]:
    """(duration_s, start_t_s) of the longest run of zero-goodput bins fully inside ``window``
    and ``active`` (not in an iteration gap); (0.0, None) if there is none."""
    start, end = edges[:-1], edges[1:]
    inside = (start >= window[0] - 1e-9) & (end <= window[1] + 1e-9)
    if active is not None:
        inside &= active
    zero = np.concatenate([[False], inside & (goodput_bps <= 0.0), [False]])
    d = np.diff(zero.astype(int))
    runs_start, runs_end = np.nonzero(d == 1)[0], np.nonzero(d == -1)[0]
    if len(runs_start) == 0:
        return 0.0, None
    k = int(np.argmax(runs_end - runs_start))
    return float(end[runs_end[k] - 1] - start[runs_start[k]]), float(start[runs_start[k]])
