"""Several trials of one scenario (runs with different seeds) aggregated into medians and ranges.

Pure functions on summary.json dicts (:func:`testbed.metrics.analyze_run`); the runner loads
them and prints :func:`testbed.report.trials.trials_table`. A KPI missing from a trial's summary
(older versions, a transport that did not run) or None there counts as "no value": ``n`` says how
many trials gave one; each transport's ``completion.trials`` keeps per trial whether it ran the
transport, completed (every job), was valid, had a QP in ERR or wrong results
(:func:`trial_facts`), which :mod:`testbed.metrics.claims` judges missing data on.
"""

from __future__ import annotations

import statistics

#: KPIs, each a dotted path into a transport summary (labels and units: :mod:`testbed.report.trials`).
KPIS: tuple[str, ...] = (
    "busbw_mbit_per_s", "busbw_fraction_of_host", "busbw_fraction_of_nics", "faulted_iteration.slowdown_pct",
    "faulted_iterations.worst_slowdown_pct", "detect_s",
    "false_retirements.count", "worst_stall.s", "worst_recovery.s", "healthy_gap_p99_s",
    "retransmits_after_fault", "iteration_s.p50", "wrong", "qp_errors", "balance.fabric.max_over_mean",
    "balance.collisions.max_load", "base_rtt_s",
    # a command job's (testbed.metrics.steps)
    "job.step_s.p50", "job.faulted_step.slowdown_pct", "job.worst_step.slowdown_pct",
    "job.longest_host_link_stall_s", "detect_median_s", "detect_worst_s",
)
#: Detection over every crossing QP (:func:`testbed.metrics.summary.analyze_transport`'s
#: ``detect_median_s`` and ``detect_worst_s``), aggregated like :data:`KPIS` but not yet rows of
#: the trials table (:data:`testbed.report.trials.LABELS` labels every KPI of :data:`KPIS`).
DETECT_KPIS: tuple[str, ...] = ("detect_median_s", "detect_worst_s",   # in KPIS too: the trials table shows them
                                 "detect_median_from_fault_s", "detect_worst_from_fault_s",
                                 "detect_causes.inference", "detect_causes.timeout")
#: What a claim's rule may name (:func:`testbed.spec.claimsfile.rule_problems`).
RULE_KPIS: tuple[str, ...] = tuple(dict.fromkeys((*KPIS, *DETECT_KPIS)))
#: Per job of a run of several jobs (``jobs.<name>.<key>``: the transport summary's ``jobs`` row).
JOB_KPIS: tuple[str, ...] = ("busbw_fraction_of_host",)


def job_kpis(trials: list[dict | None]) -> list[str]:
    """``jobs.<name>.<key>`` KPIs of every job seen in the trials, in order."""
    names = list(dict.fromkeys(j["job"] for s in trials if s for j in s.get("jobs") or ()))
    return [f"jobs.{n}.{k}" for n in names for k in JOB_KPIS]


def kpi_value(s: dict, kpi: str) -> float | None:
    """The value of a dotted KPI path in a transport summary; None if any step is missing or None.
    ``worst_recovery.s`` only counts when the slowest flow dipped and recovered."""
    if kpi == "worst_recovery.s":
        r = s.get("worst_recovery")
        return r.get("s") if r and r.get("dip") and r.get("recovered") else None
    if kpi.startswith("jobs."):
        _, name, key = kpi.split(".", 2)
        row = next((j for j in s.get("jobs") or () if j.get("job") == name), None)
        v = row.get(key) if row else None
        return None if v is None or isinstance(v, bool) else float(v)
    v = s
    for part in kpi.split("."):
        if not isinstance(v, dict):
            return None
        v = v.get(part)
    return None if v is None or isinstance(v, bool) else float(v)


def stats(values: list) -> dict:
    """``{median, min, max, n}`` of the values that are not None (median of an even count: the
    mean of the middle two); all None when there is none."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def first_faulted_link(s: dict) -> str | None:
    """The link of a transport's first disruptive fault (by time), None without one."""
    hit = [f for f in s.get("faults") or () if f.get("disruptive") and f.get("link")]
    return min(hit, key=lambda f: f.get("t_s", 0.0))["link"] if hit else None


def _transport(trials: list[dict | None], seeds: list | None = None) -> dict:
    out = {}
    for kpi in (*RULE_KPIS, *job_kpis(trials)):
        values = [kpi_value(s, kpi) if s else None for s in trials]
        # trials that ran the transport and gave no value: a rule on the KPI fails on them
        out[kpi] = {**stats(values), "missing": sum(1 for s, v in zip(trials, values) if s and v is None)}
    rec = [s.get("worst_recovery") for s in trials if s and "worst_recovery" in s]
    out["worst_recovery.s"]["no_dip"] = sum(1 for r in rec if r is not None and not r.get("dip"))
    out["worst_recovery.s"]["not_recovered"] = sum(1 for r in rec if r and r.get("dip") and not r.get("recovered"))
    # no dip is a recovery of 0, not a missing value
    out["worst_recovery.s"]["missing"] -= out["worst_recovery.s"]["no_dip"]
    links: dict[str, int] = {}
    for s in trials:
        if s and (link := first_faulted_link(s)):
            links[link] = links.get(link, 0) + 1
    out["faulted_link"] = dict(sorted(links.items()))
    out["validity"] = validity(trials)
    out["completion"] = {**completion(trials), "ran": sum(1 for s in trials if s),
                         "trials": [trial_facts(s, seed) for s, seed in zip(trials, seeds or [None] * len(trials))]}
    return out


def trial_facts(s: dict | None, seed=None) -> dict:
    """What one trial says of a transport beyond its KPIs, for judging whether it counts
    (:mod:`testbed.metrics.claims`): ``{"seed", "ran"}`` (False: the trial's summary has no such
    transport), and when it ran ``"complete"`` and ``"reason"`` (its ``completion``; None: not
    recorded), ``"valid"`` (the fidelity check; None: not recorded), ``"qp_errors"``, ``"wrong"``
    (the first job's) and, in a run of several jobs, ``"jobs"``: per job ``{"job", "complete",
    "reason", "wrong", "valid"}`` (its ``jobs`` row; ``valid`` None where the row has none)."""
    if not s:
        return {"seed": seed, "ran": False}
    done = s.get("completion") if isinstance(s.get("completion"), dict) else {}
    out = {"seed": seed, "ran": True, "complete": done.get("complete"), "reason": done.get("reason"),
           "valid": s.get("valid"), "qp_errors": _count(s.get("qp_errors")), "wrong": _count(s.get("wrong"))}
    rows = [j for j in s.get("jobs") or () if isinstance(j, dict)]
    if len(rows) > 1:
        out["jobs"] = [{"job": j.get("job"), "complete": j.get("complete"), "reason": j.get("completion"),
                        "wrong": _count(j.get("wrong")), "valid": j.get("valid")} for j in rows]
    return out


def _count(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def completion(trials: list[dict | None]) -> dict:
    """``{"complete", "incomplete", "reasons"}``: how many of the trials that ran this transport
    finished every rank's measured iterations (the summary's ``completion.complete``) and how
    many did not (a QP in ERR, a rank failed, the timeout), with the reasons (distinct, in
    order). An incomplete run's iteration KPIs cover only what finished (its flows' stalls
    run to its end: :func:`testbed.metrics.kpis.open_span`). A summary without ``completion``
    counts as neither."""
    ran = [s.get("completion") for s in trials if s and isinstance(s.get("completion"), dict)]
    bad = [c for c in ran if c.get("complete") is False]
    return {"complete": sum(1 for c in ran if c.get("complete") is True), "incomplete": len(bad),
            "reasons": list(dict.fromkeys(str(c.get("reason")) for c in bad))}


def validity(trials: list[dict | None]) -> dict:
    """``{"valid", "invalid", "reasons"}``: how many of the trials that ran this transport the
    fidelity check (:func:`testbed.metrics.fidelity.emulation_validity`, the summary's ``valid``)
    passed and failed, and the failed ones' reasons (distinct, in order). A summary without
    ``valid`` (an older version) counts as neither."""
    ran = [s for s in trials if s]
    bad = [s for s in ran if s.get("valid") is False]
    reasons = list(dict.fromkeys(r for s in bad for r in s.get("invalid_reasons") or ()))
    return {"valid": sum(1 for s in ran if s.get("valid") is True), "invalid": len(bad), "reasons": reasons}


def aggregate(summaries: list[dict]) -> dict:
    """Aggregate summary.json dicts of trials of one scenario.

    Returns ``{"scenario", "trials": n, "seeds": [...] (each summary's "seed", where present),
    "faulted_link": {link: trials},
    "transports": {name: {kpi: {"median", "min", "max", "n", "missing"}, ..., "faulted_link": {link: trials},
    "validity": {"valid", "invalid", "reasons"}, "completion": {"complete", "incomplete", "reasons", "ran",
    "trials"}}}}`` for the KPIs of :data:`RULE_KPIS` (``missing``: trials that ran the transport and gave no value;
    ``completion.ran``: trials whose summary has the transport, ``completion.trials``: one
    :func:`trial_facts` per summary, in order, so that a trial missing the transport, a job of
    several unfinished or wrong results are never lost in a count;
    ``worst_recovery.s`` over the trials whose slowest flow
    recovered, plus ``no_dip`` and ``not_recovered`` trial counts); ``faulted_link`` counts the
    link of each trial's first disruptive fault (top-level ``faulted_link``: that of the
    trial's first transport with one). Transports in order of first appearance.
    Raises ValueError for no summaries, or summaries of different scenarios."""
    if not summaries:
        raise ValueError("no trials to aggregate")
    scenarios = sorted({str(s.get("scenario")) for s in summaries})
    if len(scenarios) > 1:
        raise ValueError(f"trials of different scenarios: {', '.join(scenarios)}")
    names: list[str] = []
    for s in summaries:
        names += [n for n in s.get("transports") or {} if n not in names]
    links: dict[str, int] = {}
    for s in summaries:
        first = [f for t in (s.get("transports") or {}).values() if (f := first_faulted_link(t))]
        if first:
            links[first[0]] = links.get(first[0], 0) + 1
    return {"scenario": summaries[0].get("scenario"), "trials": len(summaries),
            "seeds": [s["seed"] for s in summaries if s.get("seed") is not None],
            "faulted_link": dict(sorted(links.items())),
            "transports": {n: _transport([(s.get("transports") or {}).get(n) for s in summaries],
                                         [s.get("seed") for s in summaries])
                           for n in names}}
