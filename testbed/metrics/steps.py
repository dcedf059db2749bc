"""KPIs of a command job: a user's training script (PyTorch DDP under torchrun's contract) run
unchanged on every host, under a torch.distributed backend (``gloo-tcp``: Gloo over kernel TCP
on ECMP routes; ``mrc``: our backend over the MRC engine).

Inputs, per transport (:class:`testbed.rundir.load.TransportRecords`): the launcher's job specs
(``jobs/rank<r>.json``, ``"kind": "command"``, with ``steps`` expected and ``host``), the step
reports as ``iteration`` events (``iter`` = step, 0-based; ``rank``; ``t_start``/``t_end``
wall-clock s; ``seconds``), the agents' ``agent`` status events (``done`` with ``summary.exit``),
the fault events, the host-link counters (``links.jsonl``) and rank 0's step file
(``job/steps-rank0.jsonl``, for its ``loss``).

A step's time is the slowest rank's ``seconds`` for that step: DDP steps are synchronous (every
rank's backward waits for the gradients' all-reduce), so the job goes as fast as its slowest
rank, as nccl-tests' ``-a 3`` times a collective. Only steps every rank reported are timed. A
step is *healthy* when its span (first rank's start .. last rank's end) overlaps no fault window
(a disruptive fault's apply .. its revert or ``link_up``, else the end of the run).

Pure functions on parsed records; times relative to the transport's ``t0_s`` (its run start).
"""

from __future__ import annotations

import math
import re

import numpy as np

from testbed.metrics.collectives import _stats
from testbed.metrics.definitions import HOST_LINK_IDLE_FRACTION
from testbed.metrics.kpis import fault_windows, iteration_spans, sample_stalls
from testbed.rundir.tables import LinkTable

MAX_LISTED_STEPS = 100_000
"""``step_times_s`` and ``losses`` list the steps below this (the KPIs count every step)."""


def is_command_job(jobs: list[dict]) -> bool:
    """True if a transport's job specs are a command job's launcher specs (``"kind": "command"``)."""
    return any(j.get("kind") == "command" for j in jobs)


def steps_expected(jobs: list[dict]) -> int | None:
    """The steps the scenario expects (the launcher specs' ``steps``; None: unknown)."""
    given = [j["steps"] for j in jobs if isinstance(j.get("steps"), int) and not isinstance(j["steps"], bool)]
    return max(given) if given else None


def step_spans(events: list[dict], t0_s: float, world_size: int) -> list[dict]:
    """Per step reported by every rank (0..world_size-1), by step: ``{step, start_s (first rank),
    end_s (last rank), seconds (slowest rank), by_rank: {rank: (start_s, end_s)}}``, relative s."""
    ranks = set(range(world_size))
    return sorted(({**it, "step": int(it["iter"])} for it in iteration_spans(events, t0_s)
                   if ranks <= set(it["by_rank"])), key=lambda it: it["step"])


def rank_steps(events: list[dict], t0_s: float) -> dict:
    """Per rank, its steps ``{step: (start_s, end_s)}`` (relative s) from the iteration events."""
    out: dict = {}
    for e in events:
        if e.get("kind") == "iteration":
            out.setdefault(e["rank"], {})[int(e["iter"])] = (float(e["t_start"]) - t0_s, float(e["t_end"]) - t0_s)
    return out


def _overlaps(span: dict, windows: list[dict]) -> bool:
    return any(span["start_s"] <= w["until_s"] and w["t_s"] <= span["end_s"] for w in windows)


def _slowdown(seconds: float | None, median: float | None) -> float | None:
    return (seconds / median - 1) * 100 if seconds is not None and median else None


def faulted_step(spans: list[dict], per_rank: dict, ranks, done: set, t_fault_s: float,
                 healthy_median_s: float | None, until_s: float | None = None) -> dict | None:
    """The step a fault hit at ``t_fault_s``: the slowest of the step in progress on the slowest
    rank at the fault (per rank, its first step that ends at or after the fault; a rank that
    reported no such step and is not ``done`` is in the step after its last; the lowest of them
    over ``ranks``) and the steps that start before the fault's window ends at ``until_s``
    (a connection idle at the fault instant meets the dead link at its next step). ``spans``:
    :func:`step_spans`, ``per_rank``: :func:`rank_steps`. ``{step, seconds (None: not
    finished by every rank), healthy_median_s, slowdown_pct, fault_t_s}``; None when every rank
    had finished."""
    candidates = []
    for rank in ranks:
        steps = per_rank.get(rank, {})
        later = [k for k, (_, end) in steps.items() if end >= t_fault_s - 1e-9]
        if later:
            candidates.append(min(later))
        elif rank not in done:
            candidates.append(max(steps, default=-1) + 1)
    if not candidates:
        return None
    k = min(candidates)
    span = next((s for s in spans if s["step"] == k), None)
    if span is not None and until_s is not None:
        during = [s for s in spans if s["step"] > k and s["start_s"] < until_s]
        span = max([span, *during], key=lambda s: s["seconds"])
        k = span["step"]
    seconds = span["seconds"] if span else None
    return {"step": k, "seconds": seconds, "healthy_median_s": healthy_median_s,
            "slowdown_pct": _slowdown(seconds, healthy_median_s), "fault_t_s": t_fault_s}


def host_links(hosts: list[str], link_names, nics: dict | None = None) -> dict[str, str]:
    """``{link: host}`` of the host links of ``hosts``: from ``nics`` (a topology's
    ``{host: [Nic]}``, :attr:`testbed.model.topology.Topology.nics`) when given, else by name
    among ``link_names`` (a generated link is named ``<a>-<b>``, ``.<index>`` added to a parallel
    one: :mod:`testbed.model.generators`)."""
    if nics is not None:
        return {n.link: h for h in hosts for n in nics.get(h, ())}
    out = {}
    for h in hosts:
        pat = re.compile(rf"{re.escape(h)}-.+|.+-{re.escape(h)}(?:\.\d+)?")
        out.update({ln: h for ln in link_names if pat.fullmatch(ln)})
    return out


def link_stall(ends: list[dict], t0_s: float, window: tuple[float, float],
               idle_fraction: float = HOST_LINK_IDLE_FRACTION) -> tuple[float, float | None]:
    """(longest_s, at_s) of one link: the longest stretch of ``window`` (relative s) between two
    counter samples that saw it busy, both directions together (``ends``: its ends' columns of
    :class:`LinkTable`, ``t`` wall-clock s, cumulative ``tx_bytes``). An interval between two
    samples is busy when it carried more than ``idle_fraction`` of what the link's configured rate
    (``rate_bps``; else its busiest interval's) carries in that time. Resolution: the counters'
    sample period (:func:`testbed.metrics.kpis.sample_stalls`: within one period above the true
    stall). (0.0, None) without samples."""
    ends = [c for c in ends if len(c["t"])]
    if not ends:
        return 0.0, None
    base = max(ends, key=lambda c: len(c["t"]))
    t = base["t"]
    total = sum(np.interp(t, c["t"], c["tx_bytes"]) for c in ends)
    inc = np.clip(np.diff(total, prepend=total[0]), 0.0, None)
    dt = np.diff(t, prepend=t[0])
    rates = np.concatenate([c["rate_bps"] for c in ends])
    rate_bps = float(np.nanmedian(rates)) if np.isfinite(rates).any() else math.nan
    if not (rate_bps > 0):
        with np.errstate(divide="ignore", invalid="ignore"):
            per_s = np.where(dt > 0, inc / dt, 0.0)
        rate_bps = float(per_s.max()) * 8 if len(per_s) else 0.0
    busy = (dt > 0) & (inc > idle_fraction * rate_bps / 8 * dt)
    stalls = sample_stalls(t - t0_s, np.cumsum(busy), [window])
    if not stalls:
        return 0.0, None
    at, longest = max(stalls, key=lambda s: s[1])
    return float(longest), float(at)


def host_link_stalls(links: LinkTable, by_link: dict[str, str], t0_s: float,
                     window: tuple[float, float]) -> list[dict]:
    """Per host link with counters (``by_link``: ``{link: host}``), sorted by host and link:
    ``{host, link, longest_stall_s, at_s}`` (:func:`link_stall` over ``window``, relative s)."""
    ends: dict[str, list[dict]] = {}
    for (link, _end), cols in links.ends.items():
        if link in by_link:
            ends.setdefault(link, []).append(cols)
    out = []
    for link in sorted(ends, key=lambda ln: (by_link[ln], ln)):
        s, at = link_stall(ends[link], t0_s, window)
        out.append({"host": by_link[link], "link": link, "longest_stall_s": s, "at_s": at})
    return out


def exit_codes(events: list[dict], world_size: int) -> dict[int, int | None]:
    """Per rank, its command's exit code: the ``done`` summary's ``exit``, else a ``failed`` /
    ``crashed`` record's ``exit``, else the run's ``end`` record's ``exit_codes``; None if none."""
    out: dict[int, int | None] = dict.fromkeys(range(world_size))
    end = next((e for e in reversed(events) if e.get("kind") == "run" and e.get("phase") == "end"), {})
    for r, code in (end.get("exit_codes") or {}).items():
        if str(r).isdigit() and int(r) in out and isinstance(code, int):
            out[int(r)] = code
    for e in events:
        if e.get("kind") != "agent" or e.get("rank") not in out:
            continue
        summary = e.get("summary") if isinstance(e.get("summary"), dict) else {}
        code = summary.get("exit", e.get("exit"))
        if isinstance(code, int) and not isinstance(code, bool):
            out[e["rank"]] = code
    return out


def job_completion(events: list[dict], world_size: int, codes: dict, done_steps: int,
                   expected: int | None) -> dict:
    """The keys of :func:`testbed.metrics.collectives.completion` for a command job: complete iff
    every rank reported ``done`` with exit code 0 (the step count is reported, not required: a
    script need not report steps)."""
    done = {e["rank"] for e in events if e.get("kind") == "agent" and e.get("status") == "done"}
    failed = {e["rank"]: e.get("reason") for e in events if e.get("kind") == "agent"
              and e.get("status") in ("failed", "crashed")}
    status = next((e.get("status") for e in reversed(events) if e.get("kind") == "run" and e.get("phase") == "end"),
                  None)
    ranks = set(range(world_size))
    bad_exit = {r: c for r, c in codes.items() if c not in (0, None)}
    steps = f"{done_steps}/{expected if expected is not None else '?'} steps"
    if failed:
        r = min(failed)
        reason = f"rank {r} failed: {failed[r]}" + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else "")
    elif bad_exit:
        r = min(bad_exit)
        reason = f"rank {r} exited {bad_exit[r]}" + (f" (+{len(bad_exit) - 1} more)" if len(bad_exit) > 1 else "")
    elif ranks <= done:
        reason = f"all {len(ranks)} ranks done, exit 0"
    else:
        missing = sorted(ranks - done)
        reason = f"ranks {missing[:8]}{'...' if len(missing) > 8 else ''} not done (run ended: {status})"
    complete = bool(ranks) and ranks <= done and not failed and all(codes.get(r) == 0 for r in ranks)
    return {"complete": complete, "reason": f"{reason}; {steps}", "ranks_done": len(done & ranks),
            "ranks_failed": len(failed), "run_status": status, "iterations_done": done_steps,
            "iterations_expected": expected}


def losses(steps: list[dict]) -> list[float | None] | None:
    """Per step (index = step, below :data:`MAX_LISTED_STEPS`) the ``loss`` of one rank's step
    reports, None for a step without one; None when no report has a numeric loss."""
    by_step = {int(s["step"]): float(s["loss"]) for s in steps
               if isinstance(s.get("step"), int) and 0 <= s["step"] < MAX_LISTED_STEPS
               and isinstance(s.get("loss"), (int, float)) and not isinstance(s.get("loss"), bool)
               and math.isfinite(s["loss"])}
    if not by_step:
        return None
    return [by_step.get(k) for k in range(max(by_step) + 1)]


STARTUP_STEPS = 1
"""Steps left out of the step times and the stall window: step 0 runs from the script's start (the
import of ``testbed_job``: torch's import, the rendezvous, DDP's first broadcast) to its first
report, which is start-up, not a training step."""


def job_window(events: list[dict], per_rank: dict, t0_s: float, links_t) -> tuple[float, float]:
    """(start, end) relative s of the job's training: the first end of a start-up step
    (:data:`STARTUP_STEPS`) .. the last step's end (any rank), else its first step's start, else
    the run's start .. end record (else the last link sample)."""
    bounds = [b for steps in per_rank.values() for b in steps.values()]
    if bounds:
        trained = [b for steps in per_rank.values() for k, (_, b) in steps.items() if k == STARTUP_STEPS - 1]
        start = min(trained) if trained and STARTUP_STEPS else min(a for a, _ in bounds)
        return start, max(start, max(b for _, b in bounds))
    ends = [e["t"] - t0_s for e in events if e.get("kind") == "run" and e.get("phase") == "end"]
    end = max(ends) if ends else (float(np.max(links_t)) - t0_s if len(links_t) else 0.0)
    return 0.0, max(0.0, end)


def job_summary(tr, t0_s: float, world_size: int, faults: list[dict], by_link: dict[str, str]) -> tuple[dict, dict]:
    """``(summary["job"], summary["completion"])`` of a command job's transport ``tr`` (see the
    module docstring and :data:`testbed.metrics.definitions.DEFINITIONS`). The first: ``kind``,
    ``ranks``, ``steps_expected``, ``steps_done`` (the fewest steps any rank reported), ``step_s``
    ({p50, p99, max, mean, n} of the healthy steps, s), ``step_times_s`` (per step any rank reported,
    its time, s; None when some rank did not report it), ``faulted_step`` (:func:`faulted_step`, first disruptive fault),
    ``worst_step`` ``{step, seconds, slowdown_pct}`` (vs the healthy median; steps from
    :data:`STARTUP_STEPS` on, as the healthy ones), ``host_link_stalls``
    (:func:`host_link_stalls` over the job's window; ``by_link``: ``{link: host}``),
    ``longest_host_link_stall_s``, ``complete``, ``completion`` (reason), ``exit_codes`` (per rank,
    keys strings as in JSON), ``losses`` (rank 0's, :func:`losses`), ``window_s``. The second:
    :func:`job_completion`. ``faults``: :func:`testbed.metrics.recovery.faults`."""
    events = tr.events
    expected = steps_expected(tr.jobs)
    per_rank = rank_steps(events, t0_s)
    spans = step_spans(events, t0_s, world_size)
    window = job_window(events, per_rank, t0_s, tr.links.t)
    windows = fault_windows(faults, window[1])
    timed = [s for s in spans if s["step"] >= STARTUP_STEPS]
    healthy = [s["seconds"] for s in timed if not _overlaps(s, windows)]
    median = float(np.median(healthy)) if healthy else None
    done = {e["rank"] for e in events if e.get("kind") == "agent" and e.get("status") == "done"}
    hit = (faulted_step(timed, per_rank, range(world_size), done, windows[0]["t_s"], median, windows[0]["until_s"])
           if windows else None)
    worst = max(timed, key=lambda s: s["seconds"], default=None)
    n_done = min((len(per_rank.get(r, {})) for r in range(world_size)), default=0)
    codes = exit_codes(events, world_size)
    comp = job_completion(events, world_size, codes, n_done, expected)
    stalls = host_link_stalls(tr.links, by_link, t0_s, window)
    last = max((k for steps in per_rank.values() for k in steps if k < MAX_LISTED_STEPS), default=-1)
    times: list[float | None] = [None] * (last + 1)
    for s in spans:
        if s["step"] <= last:
            times[s["step"]] = s["seconds"]
    job = {
        "kind": "command", "ranks": world_size, "steps_expected": expected, "steps_done": n_done,
        "step_s": _stats(healthy), "step_times_s": times, "faulted_step": hit,
        "worst_step": {"step": worst["step"], "seconds": worst["seconds"],
                       "slowdown_pct": _slowdown(worst["seconds"], median)} if worst else None,
        "host_link_stalls": stalls,
        "longest_host_link_stall_s": max((s["longest_stall_s"] for s in stalls), default=None),
        "complete": comp["complete"], "completion": comp["reason"],
        "exit_codes": {str(r): c for r, c in codes.items()}, "losses": losses(tr.steps.get(0, [])),
        "window_s": list(window),
    }
    return job, comp


def all_step_stats(events: list[dict], t0_s: float, world_size: int) -> dict:
    """``iteration_s`` of a command job: :func:`testbed.metrics.collectives._stats` over every step
    every rank reported (faulted ones too), each the slowest rank's time."""
    return _stats([s["seconds"] for s in step_spans(events, t0_s, world_size)])
