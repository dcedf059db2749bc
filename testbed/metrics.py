"""Metrics of one scenario run: raw agent/runner records -> binned series and a summary.

Inputs, per transport, in ``runs/<scenario>-<timestamp>/<transport>/`` (written by the
runner, :mod:`testbed.scenario`): ``events.jsonl``, ``samples.jsonl`` (agent flow
samples, cumulative counters), ``links.jsonl`` (kernel link counters, cumulative),
``cpu.jsonl`` (host CPU busy fraction); top level ``manifest.json`` (``scenario``,
``transports``, ``world_size``, ``host_link_rate_bps``).

Everything here is a pure function on parsed records (lists of dicts, numpy arrays)
except the small ``load_*`` helpers. :mod:`testbed.report` writes the files.

Conventions: times ``t_s`` are seconds relative to the transport's run start (the
``run`` ``start`` event, else its earliest record); rates are bits/s (``*_bps``)
unless the name says bytes (``*_bytes_per_s``); sizes in bytes.

Metric definitions (also in :data:`DEFINITIONS`, copied into ``summary.json``):

- goodput: per rx flow, increments of the agent's cumulative received-byte counter
  over 10 ms bins (counter linearly interpolated at bin edges), in bits/s;
  aggregate goodput is the sum over all rx flows.
- iteration gaps: bins lying entirely between one iteration's end (last rank) and the
  next one's start (first rank), when no collective runs (set-up, result check). They
  are left out of the baseline, dips, recovery and stalls.
- recovery time: for a disruptive fault applied at ``t_f``, the baseline is the
  median raw aggregate goodput over the workload bins before the first fault; the
  aggregate is smoothed with a centred 50 ms rolling median (5 bins: it drops
  single-bin spikes and keeps a step's position exact). The dip is the first run of
  >= 3 smoothed bins (30 ms) below 90 % of the baseline starting within 1 s after
  ``t_f`` (shorter runs are noise); recovery is the start of the first bin after the
  dip back at >= 90 %, minus ``t_f``. No dip -> 0.0. Never back before the workload
  ends -> None.
- time to detect: first EV transition from a usable state (GOOD, or SKIP: the
  congestion back-off, agents/mrc/ev.py) into ASSUMED_BAD/DENIED/UNKNOWN at or after
  ``t_f``, minus ``t_f``; GOOD -> SKIP is congestion, not detection. None for a
  transport without EVs (tcp).
- longest stall: longest run of consecutive 10 ms bins with zero aggregate goodput
  inside the workload window (first iteration start .. last iteration end), iteration
  gaps excluded.
- iteration time: per (size, iteration) the slowest rank's ``seconds`` (a collective
  is done when every rank is), i.e. nccl-tests ``-a 3`` (MAX); its default ``-a 1``
  averages ranks, which hides a rank stalled by a failure.
- algbw = size_bytes / time_s; busbw = algbw * 2(n-1)/n for all-reduce
  (nccl-tests doc/PERFORMANCE.md); time_s is the mean over measured iterations,
  as nccl-tests reports. Given in bytes/s and Mbit/s.
- CPU fidelity: mean and p95 of host busy fraction (all cores) in the workload
  window; p95 >= 0.95 marks the run ``valid: false`` (an emulator starved of CPU
  measures itself, not the network).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

BIN_S = 0.010               # goodput bin width, s
SMOOTH_BINS = 5             # rolling-median window for recovery, bins (50 ms)
RECOVERY_FRACTION = 0.9     # "recovered" = smoothed aggregate goodput >= 90 % of baseline
DIP_HORIZON_S = 1.0         # a fault's dip must start within this long after it, s
MIN_DIP_BINS = 3            # a dip is at least this many consecutive smoothed bins below threshold
LINK_BIN_S = 0.100          # link throughput bin width, s
BUSIEST_LINKS = 5           # link ends reported in the fidelity section
CPU_SATURATED_P95 = 0.95    # p95 busy fraction at or above which a run is invalid
DISRUPTIVE = ("link_down", "flap", "loss", "rate", "blackhole")
DETECTED_STATES = ("ASSUMED_BAD", "DENIED", "UNKNOWN")

DEFINITIONS = {
    "goodput_bps": "received payload bytes per 10 ms bin (agent rx counters) * 8 / bin width; bits/s",
    "iteration_s": "per (size, iteration) the slowest rank's collective time (nccl-tests -a 3); p50/p99/max "
                   "over measured (non-warm-up) iterations of the largest size; s",
    "time_s": "mean iteration_s over measured iterations of one size (nccl-tests 'time'); s",
    "algbw": "size_bytes / time_s (nccl-tests PERFORMANCE.md); bytes/s and Mbit/s",
    "busbw": "algbw * 2(n-1)/n for all-reduce, n = world size (nccl-tests PERFORMANCE.md); bytes/s and Mbit/s",
    "wrong": "elements differing from the expected sum, summed over ranks and all iterations (warm-up too)",
    "qp_errors": "qp_error events (retries exhausted: the job would crash); count",
    "detect_s": "first fault apply -> first EV going from GOOD (or SKIP) to ASSUMED_BAD/DENIED/UNKNOWN; s; "
                "null without EVs",
    "recovery_s": "fault apply -> smoothed (centred 50 ms rolling median) aggregate goodput back to >= 90% of "
                  "the pre-fault median, after a dip below it of >= 30 ms starting within 1 s; 0 if no dip; s; "
                  "null if not recovered before the workload ended; iteration gaps excluded",
    "longest_stall_s": "longest run of consecutive 10 ms bins with zero aggregate goodput while a collective "
                       "runs (iteration gaps excluded); s",
    "retransmits": "sum of the transports' cumulative retransmission counters over tx flows; packets "
                   "(segments for tcp)",
    "retransmitted_bytes": "sum of flows' retransmitted_bytes counters when agents report them, else null; bytes",
    "cpu_busy": "host CPU busy fraction (all cores) in the workload window, mean and p95; 0..1; "
                f"p95 >= {CPU_SATURATED_P95} marks the run invalid",
    "links": f"per link end: tx bytes and drops per {LINK_BIN_S * 1000:.0f} ms bin from kernel counters; "
             "achieved_bps = peak bin throughput, compared with the configured rate_bps",
}


class MetricsError(ValueError):
    """Records that cannot be parsed or lack a required field (message names file and line)."""


class RunDirError(MetricsError):
    """The path is not a scenario run directory (no manifest.json, no transport data)."""


# -- loading ---------------------------------------------------------------------
def load_jsonl(path: Path) -> list[dict]:
    """Records of a JSONL file; a missing file is empty. A truncated last line (crashed
    writer) is skipped with a warning; any other bad line raises :class:`MetricsError`."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines):
                log.warning("%s:%d: truncated last line skipped", path, i)
                break
            raise MetricsError(f"{path}:{i}: not JSON: {exc.msg}") from exc
    return out


def is_run_dir(run_dir: Path) -> bool:
    """True if ``run_dir`` has a manifest.json or a transport subdirectory with events.jsonl."""
    run_dir = Path(run_dir)
    return run_dir.is_dir() and ((run_dir / "manifest.json").is_file()
                                 or any(run_dir.glob("*/events.jsonl")))


def load_manifest(run_dir: Path) -> dict:
    """manifest.json of a run (``{}`` if absent but the directory holds transport data);
    ``transports`` filled from the subdirectories when missing. Raises :class:`RunDirError`."""
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):
        raise RunDirError(f"{run_dir}: not a run directory (no manifest.json and no <transport>/events.jsonl)")
    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not JSON: {exc.msg}") from exc
    if not manifest.get("transports"):
        manifest["transports"] = sorted(p.parent.name for p in run_dir.glob("*/events.jsonl"))
    return manifest


@dataclass
class TransportRecords:
    """Parsed records of one transport: lists of dicts as in the files."""
    name: str
    events: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    links: list[dict] = field(default_factory=list)
    cpu: list[dict] = field(default_factory=list)


def load_transport(run_dir: Path, name: str) -> TransportRecords:
    d = Path(run_dir) / name
    return TransportRecords(name, *(load_jsonl(d / f) for f in
                                     ("events.jsonl", "samples.jsonl", "links.jsonl", "cpu.jsonl")))


def scenario_name(manifest: dict) -> str:
    s = manifest.get("scenario")
    return s.get("name", "?") if isinstance(s, dict) else str(s or "?")


# -- series ------------------------------------------------------------------------
def bin_edges(t0_s: float, t1_s: float, bin_s: float = BIN_S) -> np.ndarray:
    """Edges ``t0, t0+bin, ...`` covering ``[t0, t1]``; shape (nbins+1,), at least one bin."""
    n = max(1, int(np.ceil((t1_s - t0_s) / bin_s - 1e-9)))
    return t0_s + bin_s * np.arange(n + 1)


def binned_increments(t_s: np.ndarray, counter: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per-bin increments of a cumulative counter sampled at ``t_s``: the counter is
    linearly interpolated at the edges (flat outside the samples); counter resets
    clip to 0. Shape (len(edges)-1,), the counter's unit per bin."""
    if len(t_s) == 0:
        return np.zeros(len(edges) - 1)
    order = np.argsort(t_s, kind="stable")
    at = np.interp(edges, np.asarray(t_s, float)[order], np.asarray(counter, float)[order])
    return np.clip(np.diff(at), 0.0, None)


def last_in_bin(t_s: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Value of the last sample inside each bin, NaN for bins without one; shape (nbins,)."""
    out = np.full(len(edges) - 1, np.nan)
    if len(t_s) == 0:
        return out
    idx = np.searchsorted(t_s, edges[1:], side="left") - 1
    ok = (idx >= 0) & (t_s[np.clip(idx, 0, None)] >= edges[:-1])
    out[ok] = np.asarray(values, float)[idx[ok]]
    return out


def rolling_median(values: np.ndarray, window_bins: int = SMOOTH_BINS) -> np.ndarray:
    """Centred rolling median (edges padded with the end values); same shape as ``values``."""
    half = window_bins // 2
    if len(values) == 0 or half == 0:
        return np.asarray(values, float)
    padded = np.pad(np.asarray(values, float), half, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1), axis=1)


FlowKey = tuple  # (rank, peer, dir)


@dataclass
class FlowSeries:
    """One flow's raw samples (t_s relative, sorted) as arrays of shape (nsamples,)."""
    t_s: np.ndarray
    bytes: np.ndarray
    retransmits: np.ndarray
    rtt_s: np.ndarray
    cwnd_bytes: np.ndarray
    retransmitted_bytes: np.ndarray | None
    evs: dict  # ev_id -> last seen {"state", "sent", "lost"}


def _num(v) -> float:
    return np.nan if v is None else float(v)


def flow_samples(samples: list[dict], t0_s: float) -> dict[FlowKey, FlowSeries]:
    """Group agent samples into flows keyed ``(rank, peer, dir)``. Raises MetricsError
    on a sample without ``t``/``rank``/``flows``."""
    raw: dict[FlowKey, list] = {}
    for n, s in enumerate(samples):
        try:
            t, rank, flows = float(s["t"]) - t0_s, s["rank"], s["flows"]
        except (KeyError, TypeError, ValueError) as exc:
            raise MetricsError(f"samples.jsonl record {n + 1}: needs t, rank, flows ({exc})") from exc
        for f in flows:
            raw.setdefault((rank, f.get("peer"), f.get("dir", "rx")), []).append((t, f))
    out = {}
    for key, rows in raw.items():
        rows.sort(key=lambda r: r[0])
        col = lambda name: np.array([_num(f.get(name)) for _, f in rows])  # noqa: E731
        evs: dict = {}
        for _, f in rows:
            for ev in f.get("evs") or ():
                evs[ev["ev_id"]] = {k: ev.get(k) for k in ("state", "sent", "lost")}
        rtx_bytes = col("retransmitted_bytes") if any("retransmitted_bytes" in f for _, f in rows) else None
        out[key] = FlowSeries(np.array([t for t, _ in rows]), np.nan_to_num(col("bytes")),
                              np.nan_to_num(col("retransmits")), col("rtt_s"), col("cwnd_bytes"),
                              rtx_bytes, evs)
    return out


def aggregate_goodput_bps(flows: dict[FlowKey, FlowSeries], edges: np.ndarray) -> np.ndarray:
    """Sum over rx flows of received bits per bin / bin width; shape (nbins,), bits/s."""
    total = np.zeros(len(edges) - 1)
    for (_, _, direction), fs in flows.items():
        if direction == "rx":
            total += binned_increments(fs.t_s, fs.bytes, edges)
    return total * 8 / np.diff(edges)


# -- events ------------------------------------------------------------------------
def run_t0(tr: TransportRecords) -> float:
    """Wall-clock origin of a transport: its ``run`` start event, else its earliest record."""
    starts = [e["t"] for e in tr.events if e.get("kind") == "run" and e.get("phase") == "start"]
    if starts:
        return float(min(starts))
    ts = [r["t"] for recs in (tr.events, tr.samples, tr.links, tr.cpu) for r in recs if "t" in r]
    return float(min(ts)) if ts else 0.0


def faults(events: list[dict], t0_s: float) -> list[dict]:
    """Fault events (apply and revert) as ``{t_s, action, link, phase, disruptive}``, by time."""
    out = [{"t_s": e["t"] - t0_s, "action": e.get("action"), "link": e.get("link"), "phase": e.get("phase"),
            "disruptive": e.get("action") in DISRUPTIVE and e.get("phase") == "apply"}
           for e in events if e.get("kind") == "fault"]
    return sorted(out, key=lambda f: f["t_s"])


def ev_transitions(events: list[dict], t0_s: float) -> list[dict]:
    """``ev_state`` events as ``{t_s, rank, peer, dir, ev_id, old, new, cause}`` sorted by time
    (``dir``: "tx" for the EVs of the rank's requester, "rx" for its responder's)."""
    out = [{"t_s": e["t"] - t0_s, **{k: e.get(k) for k in ("rank", "peer", "dir", "ev_id", "old", "new", "cause")}}
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
    """Bool per bin: False for bins lying entirely inside an iteration gap; shape (nbins,)."""
    active = np.ones(len(edges) - 1, bool)
    for g0, g1 in gaps:
        active &= ~((edges[:-1] >= g0 - 1e-9) & (edges[1:] <= g1 + 1e-9))
    return active


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


# -- collectives -------------------------------------------------------------------
def bus_factor(world_size: int) -> float:
    """All-reduce bus bandwidth factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md). ValueError if n < 1."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return 2 * (world_size - 1) / world_size


def bandwidths(size_bytes: int, time_s: float, world_size: int) -> dict:
    """algbw and busbw of an all-reduce of ``size_bytes`` taking ``time_s``: bytes/s and Mbit/s."""
    algbw = size_bytes / time_s if time_s > 0 else float("nan")
    busbw = algbw * bus_factor(world_size)
    return {"algbw_bytes_per_s": algbw, "algbw_mbit_per_s": algbw * 8e-6,
            "busbw_bytes_per_s": busbw, "busbw_mbit_per_s": busbw * 8e-6}


def _stats(values) -> dict:
    v = np.asarray(values, float)
    if len(v) == 0:
        return {"p50": None, "p99": None, "max": None, "mean": None}
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "max": float(v.max()), "mean": float(v.mean())}


def size_table(events: list[dict], world_size: int) -> list[dict]:
    """nccl-tests-style rows per size, ascending: ``size_bytes, count`` (float32 elements),
    ``iterations`` (measured, all ranks reported), ``warmup``, ``time_s`` (mean), ``iteration_s``
    stats, bandwidths (see :func:`bandwidths`) and ``wrong``."""
    per: dict[tuple, dict] = {}
    for e in events:
        if e.get("kind") == "iteration":
            it = per.setdefault((int(e["size"]), e["iter"], bool(e.get("warmup"))), {"ranks": set(), "s": [], "wrong": 0})
            it["ranks"].add(e.get("rank"))
            it["s"].append(float(e["seconds"]))
            it["wrong"] += int(e.get("wrong") or 0)
    rows = []
    for size in sorted({k[0] for k in per}):
        its = {k: v for k, v in per.items() if k[0] == size}
        done = [max(v["s"]) for k, v in its.items() if not k[2] and len(v["ranks"]) >= world_size]
        stats = _stats(done)
        row = {"size_bytes": size, "count": size // 4, "type": "float32", "redop": "sum",
               "iterations": len(done), "warmup": sum(1 for k in its if k[2]),
               "time_s": stats["mean"], "iteration_s": stats,
               "wrong": sum(v["wrong"] for v in its.values())}
        row.update(bandwidths(size, stats["mean"], world_size) if done else
                   dict.fromkeys(("algbw_bytes_per_s", "algbw_mbit_per_s", "busbw_bytes_per_s",
                                  "busbw_mbit_per_s")))
        rows.append(row)
    return rows


def workload_window(tr: TransportRecords, t0_s: float, world_size: int | None = None) -> tuple[float, float]:
    """(start, end) relative s: first iteration start .. last iteration end; falls back on the
    run start/end events and the sample span (a crashed workload ends at its last sample)."""
    its = [e for e in tr.events if e.get("kind") == "iteration"]
    ts = [float(s["t"]) - t0_s for s in tr.samples]
    ends = [e["t"] - t0_s for e in tr.events if e.get("kind") == "run" and e.get("phase") == "end"]
    start = min(float(e["t_start"]) for e in its) - t0_s if its else 0.0
    if its and completion(tr.events, world_size)["complete"]:
        end = max(float(e["t_end"]) for e in its) - t0_s
    else:
        end = max(ts + ends + [max((float(e["t_end"]) - t0_s for e in its), default=start)])
    return start, max(start, end)


def expected_measured_iterations(manifest: dict) -> int | None:
    """Measured iterations the workload asks for (iterations * number of sweep sizes), from the
    first ``workload`` mapping with min_bytes/max_bytes/factor/iterations found in the manifest
    (top level, or under ``scenario``/``spec``); None if there is none."""
    for where in (manifest, manifest.get("scenario"), manifest.get("spec")):
        w = where.get("workload") if isinstance(where, dict) else None
        if isinstance(w, dict) and {"min_bytes", "max_bytes", "factor", "iterations"} <= w.keys():
            n, size = 0, int(w["min_bytes"])
            while size <= int(w["max_bytes"]) and int(w["factor"]) > 1:
                n, size = n + 1, size * int(w["factor"])
            return int(w["iterations"]) * max(n, 1)
    return None


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


# -- fidelity ----------------------------------------------------------------------
def cpu_fidelity(cpu: list[dict], t0_s: float, window: tuple[float, float]) -> dict | None:
    """``{mean, p95, samples, saturated}`` of busy_fraction inside ``window``; None without samples."""
    v = np.array([float(c["busy_fraction"]) for c in cpu if window[0] <= c["t"] - t0_s <= window[1]])
    if len(v) == 0:
        return None
    p95 = float(np.percentile(v, 95))
    return {"mean": float(v.mean()), "p95": p95, "samples": int(len(v)), "saturated": p95 >= CPU_SATURATED_P95}


def link_series(links: list[dict], t0_s: float, edges: np.ndarray) -> dict[tuple, dict]:
    """Per ``(link, end)``: arrays over ``edges`` bins: ``tx_bytes``, ``drops`` (increments),
    ``throughput_bps``, ``rate_bps`` (configured, last sample in bin, NaN if none)."""
    groups: dict[tuple, list] = {}
    for r in links:
        groups.setdefault((r["link"], r.get("end", "a")), []).append(r)
    out = {}
    for key, rows in groups.items():
        rows.sort(key=lambda r: r["t"])
        t = np.array([r["t"] - t0_s for r in rows])
        tx = binned_increments(t, np.array([float(r.get("tx_bytes", 0)) for r in rows]), edges)
        out[key] = {"tx_bytes": tx, "throughput_bps": tx * 8 / np.diff(edges),
                    "drops": binned_increments(t, np.array([float(r.get("drops", 0)) for r in rows]), edges),
                    "rate_bps": last_in_bin(t, np.array([_num(r.get("rate_bps")) for r in rows]), edges)}
    return out


def busiest_links(series: dict[tuple, dict], edges: np.ndarray, window: tuple[float, float],
                  top: int = BUSIEST_LINKS) -> list[dict]:
    """The ``top`` link ends by bytes sent in ``window``: ``achieved_bps`` (peak bin), ``mean_bps``,
    configured ``rate_bps`` (median of samples), ``achieved_fraction`` and ``drops``."""
    inside = (edges[:-1] >= window[0] - 1e-9) & (edges[1:] <= window[1] + LINK_BIN_S)
    rows = []
    for (link, end), s in series.items():
        thr = s["throughput_bps"][inside]
        rate = s["rate_bps"][~np.isnan(s["rate_bps"])]
        rate_bps = float(np.median(rate)) if len(rate) else None
        peak = float(thr.max()) if len(thr) else 0.0
        rows.append({"link": link, "end": end, "tx_bytes": float(s["tx_bytes"][inside].sum()),
                     "achieved_bps": peak, "mean_bps": float(thr.mean()) if len(thr) else 0.0,
                     "rate_bps": rate_bps, "achieved_fraction": peak / rate_bps if rate_bps else None,
                     "drops": float(s["drops"].sum())})
    return sorted(rows, key=lambda r: -r["tx_bytes"])[:top]


# -- per transport -------------------------------------------------------------------
@dataclass
class TransportAnalysis:
    """Everything computed for one transport: ``summary`` (JSON-ready dict), goodput bins
    (``edges`` relative s, shape (nbins+1,); ``goodput_bps`` shape (nbins,)), flows, link series."""
    name: str
    t0_s: float
    summary: dict
    edges: np.ndarray
    goodput_bps: np.ndarray
    flows: dict[FlowKey, FlowSeries]
    link_edges: np.ndarray
    links: dict[tuple, dict]


def _flow_summary(key: FlowKey, fs: FlowSeries, window: tuple[float, float]) -> dict:
    span = window[1] - window[0]
    rtt = fs.rtt_s[~np.isnan(fs.rtt_s)]
    cwnd = fs.cwnd_bytes[~np.isnan(fs.cwnd_bytes)]
    return {"rank": key[0], "peer": key[1], "dir": key[2], "bytes": float(fs.bytes[-1]) if len(fs.bytes) else 0.0,
            "mean_rate_bps": float(fs.bytes[-1] * 8 / span) if len(fs.bytes) and span > 0 else None,
            "retransmits": float(fs.retransmits[-1]) if len(fs.retransmits) else 0.0,
            "rtt_s": {"p50": float(np.median(rtt)), "p99": float(np.percentile(rtt, 99))} if len(rtt) else None,
            "cwnd_bytes_median": float(np.median(cwnd)) if len(cwnd) else None,
            "evs": [{"ev_id": ev, **v} for ev, v in sorted(fs.evs.items(), key=lambda kv: str(kv[0]))]}


def analyze_transport(tr: TransportRecords, world_size: int, expected_measured: int | None = None) -> TransportAnalysis:
    """Series and summary of one transport (keys documented in :data:`DEFINITIONS`);
    ``expected_measured``: see :func:`expected_measured_iterations`."""
    t0 = run_t0(tr)
    window = workload_window(tr, t0, world_size)
    flows = flow_samples(tr.samples, t0)
    t_last = max([window[1]] + [float(fs.t_s[-1]) for fs in flows.values() if len(fs.t_s)])
    edges = bin_edges(0.0, t_last)
    goodput = aggregate_goodput_bps(flows, edges)
    fl, trans = faults(tr.events, t0), ev_transitions(tr.events, t0)
    has_evs = bool(trans) or any(fs.evs for fs in flows.values())
    disruptive = [f for f in fl if f["disruptive"]]
    t_first = disruptive[0]["t_s"] if disruptive else window[1]
    active = active_bins(edges, iteration_gaps(tr.events, t0))
    pre = (edges[:-1] >= window[0] - 1e-9) & (edges[1:] <= t_first + 1e-9) & active
    baseline = float(np.median(goodput[pre])) if pre.any() else 0.0
    per_fault = [{**f, "detect_s": time_to_detect(trans, f["t_s"]) if has_evs else None,
                  "recovery_s": recovery_time(edges, goodput, f["t_s"], baseline, window[1], active)}
                 for f in disruptive]
    stall_s, stall_at = longest_stall(edges, goodput, window, active)
    sizes = size_table(tr.events, world_size)
    largest = sizes[-1] if sizes else None
    tx = [fs for k, fs in flows.items() if k[2] == "tx"] or list(flows.values())
    rtx_bytes = [fs.retransmitted_bytes for fs in tx if fs.retransmitted_bytes is not None]
    qp_errors = [{"t_s": e["t"] - t0, "rank": e.get("rank"), "reason": e.get("reason")}
                 for e in tr.events if e.get("kind") == "qp_error"]
    link_edges = bin_edges(0.0, t_last, LINK_BIN_S)
    links = link_series(tr.links, t0, link_edges)
    cpu = cpu_fidelity(tr.cpu, t0, window)
    invalid = [f"CPU saturated: p95 busy {cpu['p95']:.2f} >= {CPU_SATURATED_P95}"] if cpu and cpu["saturated"] else []
    summary = {
        "transport": tr.name, "t0_wall_s": t0, "workload_window_s": list(window),
        "world_size": world_size, "completion": completion(tr.events, world_size, expected_measured),
        "sizes": sizes, "size_bytes": largest["size_bytes"] if largest else None,
        "iteration_s": largest["iteration_s"] if largest else _stats([]),
        "busbw_bytes_per_s": largest["busbw_bytes_per_s"] if largest else None,
        "busbw_mbit_per_s": largest["busbw_mbit_per_s"] if largest else None,
        "avg_busbw_mbit_per_s": (float(np.mean([r["busbw_mbit_per_s"] for r in sizes if r["iterations"]]))
                                 if any(r["iterations"] for r in sizes) else None),
        "wrong": sum(r["wrong"] for r in sizes), "qp_errors": len(qp_errors), "qp_error_list": qp_errors,
        "has_evs": has_evs, "faults": fl, "per_fault": per_fault,
        "reconverge_s": sorted(e["t"] - t0 for e in tr.events if e.get("kind") == "reconverge"),
        "detect_s": per_fault[0]["detect_s"] if per_fault else None,
        "recovery_s": per_fault[0]["recovery_s"] if per_fault else None,
        "baseline_goodput_bps": baseline,
        "longest_stall_s": stall_s, "longest_stall_at_s": stall_at,
        "retransmits": float(sum(fs.retransmits[-1] for fs in tx if len(fs.retransmits))),
        "retransmitted_bytes": float(sum(a[-1] for a in rtx_bytes if len(a))) if rtx_bytes else None,
        "ev_transitions": len(trans),
        "flows": [_flow_summary(k, fs, window) for k, fs in sorted(flows.items(), key=lambda kv: str(kv[0]))],
        "fidelity": {"cpu_busy": cpu, "busiest_links": busiest_links(links, link_edges, window),
                     "link_drops": float(sum(s["drops"].sum() for s in links.values()))},
        "valid": not invalid, "invalid_reasons": invalid,
        "warnings": [] if cpu else ["no CPU samples in the workload window: fidelity unknown"],
    }
    return TransportAnalysis(tr.name, t0, summary, edges, goodput, flows, link_edges, links)


def comparison_row(s: dict) -> dict:
    """Side-by-side row of one transport summary (the keys of the report's main table)."""
    keys = ("transport", "size_bytes", "busbw_mbit_per_s", "busbw_bytes_per_s", "wrong", "qp_errors",
            "detect_s", "recovery_s", "longest_stall_s", "retransmits", "retransmitted_bytes", "valid")
    row = {k: s.get(k) for k in keys}
    row.update(iteration_p50_s=s["iteration_s"]["p50"], iteration_p99_s=s["iteration_s"]["p99"],
               iteration_max_s=s["iteration_s"]["max"], complete=s["completion"]["complete"],
               completion=s["completion"]["reason"])
    return row


def analyze_run(run_dir: Path) -> tuple[dict, list[TransportAnalysis]]:
    """Summary of a whole run (``scenario``, ``world_size``, ``host_link_rate_bps``, ``definitions``,
    ``transports`` by name, ``comparison`` rows) and the per-transport analyses.
    Raises RunDirError / MetricsError."""
    manifest = load_manifest(run_dir)
    analyses = []
    for name in manifest["transports"]:
        tr = load_transport(run_dir, name)
        ws = int(manifest.get("world_size") or len({s["rank"] for s in tr.samples}) or 1)
        analyses.append(analyze_transport(tr, ws, expected_measured_iterations(manifest)))
    rate = manifest.get("host_link_rate_bps")
    for a in analyses:
        bb = a.summary["busbw_mbit_per_s"]
        a.summary["busbw_fraction_of_host_link"] = bb * 1e6 / rate if bb is not None and rate else None
    summary = {"scenario": scenario_name(manifest), "run_dir": str(run_dir),
               "world_size": manifest.get("world_size"), "host_link_rate_bps": rate,
               "definitions": DEFINITIONS, "transports": {a.name: a.summary for a in analyses},
               "comparison": [comparison_row(a.summary) for a in analyses]}
    return summary, analyses
