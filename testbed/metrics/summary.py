"""Per-transport analysis and the run summary: glues loading, series, recovery, collectives
and fidelity into :class:`TransportAnalysis` and the dict written as ``summary.json``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents.protocol import Synced
from testbed.metrics.collectives import _stats, completion, expected_measured_iterations, size_table
from testbed.metrics.definitions import BIN_S, DEFINITIONS, LINK_BIN_S
from testbed.metrics.fidelity import busiest_links, cpu_fidelity, emulation_validity
from testbed.metrics.nics import nic_bandwidth_bps
from testbed.metrics.kpis import boundary_warnings, ev_links, ev_retirements, false_retirements, fault_windows, faulted_iteration, faulted_iterations, flow_kpis, iteration_spans, open_span, p_nearest_rank, worst_recovery, worst_stall
from testbed.rundir.load import TransportRecords, job_names, load_transport
from testbed.rundir.read import load_manifest, scenario_name
from testbed.rundir.tables import FlowKey
from testbed.metrics.recovery import active_bins, ev_transitions, fault_instants, faults, iteration_gaps, longest_stall, recovery_time, time_to_detect
from testbed.metrics.series import FlowSeries, aggregate_goodput_bps, bin_edges, flow_samples, link_series
from testbed.metrics.steps import all_step_stats, host_links, is_command_job, job_summary

RESYNC_KEYS = tuple(f.name for f in dataclasses.fields(Synced))
"""What a restarted controller's resync reports (journaled ``controller`` phase ``resynced``)."""


def run_t0(tr: TransportRecords) -> float:
    """Wall-clock origin of a transport: its ``run`` start event, else its earliest record."""
    starts = [e["t"] for e in tr.events if e.get("kind") == "run" and e.get("phase") == "start"]
    if starts:
        return float(min(starts))
    ts = [r["t"] for recs in (tr.events, tr.cpu) for r in recs if "t" in r]
    ts += [float(table.t.min()) for table in (tr.samples, tr.links) if len(table.t)]
    return float(min(ts)) if ts else 0.0


def workload_window(tr: TransportRecords, t0_s: float, world_size: int | None = None) -> tuple[float, float]:
    """(start, end) relative s: first iteration start .. last iteration end; falls back on the
    run start/end events and the sample span (a crashed workload ends at its last sample)."""
    its = [e for e in tr.events if e.get("kind") == "iteration"]
    ends = [e["t"] - t0_s for e in tr.events if e.get("kind") == "run" and e.get("phase") == "end"]
    start = min(float(e["t_start"]) for e in its) - t0_s if its else 0.0
    if its and completion(tr.events, world_size)["complete"]:
        end = max(float(e["t_end"]) for e in its) - t0_s
    else:
        last_sample = [float((tr.samples.t - t0_s).max())] if len(tr.samples.t) else []
        end = max(last_sample + ends + [max((float(e["t_end"]) - t0_s for e in its), default=start)])
    return start, max(start, end)


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


def analyze_transport(tr: TransportRecords, world_size: int, expected_measured: int | None = None, *,
                      nics: dict | None = None) -> TransportAnalysis:
    """Series and summary of one transport (keys documented in :data:`DEFINITIONS`);
    ``expected_measured``: see :func:`expected_measured_iterations`. A command job
    (:func:`testbed.metrics.steps.is_command_job`) also gets ``job``
    (:func:`testbed.metrics.steps.job_summary`; its host links from ``nics``, the topology's
    ``{host: [Nic]}``, else by link name), its ``completion`` and ``iteration_s`` are its steps',
    its flow KPIs come from its mrc backend's job specs (``tr.mrc_jobs``), and it has no sizes,
    busbw or iteration-boundary warnings."""
    command = is_command_job(tr.jobs)
    agent_jobs = tr.mrc_jobs if command else tr.jobs   # the specs of the agents (or backend) with flows
    t0 = run_t0(tr)
    window = workload_window(tr, t0, world_size)
    flows = flow_samples(tr.samples, t0)
    t_last = max([window[1]] + [float(fs.t_s[-1]) for fs in flows.values() if len(fs.t_s)])
    resolution = kpi_bin_s(agent_jobs)
    edges = flow_edges = bin_edges(0.0, t_last, resolution)
    goodput = aggregate_goodput_bps(flows, edges)
    by_link: dict[str, str] = {}
    if command:   # no flows of its own on gloo-tcp: what the host links delivered, on both backends
        by_link = host_links([j.get("host") for j in tr.jobs if isinstance(j.get("host"), str)],
                             [link for link, _ in tr.links.ends], nics)
        edges = bin_edges(0.0, t_last, LINK_BIN_S)
        goodput = delivered_to_hosts_bps(link_series(tr.links, t0, edges), by_link, edges)
    fl, trans = faults(tr.events, t0), ev_transitions(tr.events, t0)
    has_evs = bool(trans) or any(fs.evs for fs in flows.values())
    disruptive = fault_instants(fl)
    t_first = disruptive[0]["t_s"] if disruptive else window[1]
    active = active_bins(edges, iteration_gaps(tr.events, t0))
    pre = (edges[:-1] >= window[0] - 1e-9) & (edges[1:] <= t_first + 1e-9) & active
    baseline = float(np.median(goodput[pre])) if pre.any() else 0.0
    fk = _fault_kpis(tr, t0, window, fl, disruptive, trans, flows, flow_edges, agent_jobs)
    if command:   # a training step is no ring draining at an iteration's end
        fk["warnings"] = []
    per_fault = [{**f, "detect_s": fk["detect"][i] if has_evs else None,
                  **((fk["detect_qps"][i] if has_evs else None) or dict.fromkeys(DETECT_QP_KEYS)),
                  "recovery_s": recovery_time(edges, goodput, f["t_s"], baseline, window[1], active)}
                 for i, f in enumerate(disruptive)]
    stall_s, stall_at = longest_stall(edges, goodput, window, active)
    collective = "command" if command else (tr.jobs[0].get("collective") if tr.jobs else None) or "all_reduce"
    sizes = [] if command else size_table(tr.events, world_size, collective)
    largest = sizes[-1] if sizes else None
    tx = [fs for k, fs in flows.items() if k[2] == "tx"] or list(flows.values())
    rtx_bytes = [fs.retransmitted_bytes for fs in tx if fs.retransmitted_bytes is not None]
    qp_errors = [{"t_s": e["t"] - t0, "rank": e.get("rank"), "reason": e.get("reason")}
                 for e in tr.events if e.get("kind") == "qp_error"]
    link_edges = bin_edges(0.0, t_last, LINK_BIN_S)
    links = link_series(tr.links, t0, link_edges)
    cpu = cpu_fidelity(tr.cpu, t0, window)
    rx_hold = (agent_jobs[0].get("rx_hold_s") if agent_jobs else None) or 0.0
    validity = emulation_validity(tr.sched, tr.samples.loop, tr.links.t, cpu, t0, window, fk["base_rtt_s"], rx_hold)
    invalid = validity["reasons"]
    summary = {
        "transport": tr.name, "collective": collective, "t0_wall_s": t0, "workload_window_s": list(window),
        "world_size": world_size, "completion": completion(tr.events, world_size, expected_measured),
        "kpi_resolution_s": resolution,
        "sizes": sizes, "size_bytes": largest["size_bytes"] if largest else None,
        "iteration_s": largest["iteration_s"] if largest else _stats([]),
        "busbw_bytes_per_s": largest["busbw_bytes_per_s"] if largest else None,
        "busbw_mbit_per_s": largest["busbw_mbit_per_s"] if largest else None,
        "avg_busbw_mbit_per_s": (float(np.mean([r["busbw_mbit_per_s"] for r in sizes if r["iterations"]]))
                                 if any(r["iterations"] for r in sizes) else None),
        "wrong": sum(r["wrong"] for r in sizes), "qp_errors": len(qp_errors), "qp_error_list": qp_errors,
        "has_evs": has_evs, "faults": fl, "per_fault": per_fault,
        "reconverge_s": sorted(e["t"] - t0 for e in tr.events if e.get("kind") == "reconverge"),
        "controller_lost": [{"t_s": e["t"] - t0, "reason": e.get("reason"), "exit": e.get("exit")}
                            for e in tr.events if e.get("kind") == "controller_lost"],
        "controller_restarts": [{"t_s": e["t"] - t0, "attempt": e.get("attempt"), "pid": e.get("pid"),
                                 "after": e.get("after")}
                                for e in tr.events if e.get("kind") == "controller" and e.get("phase") == "restart"],
        "controller_resyncs": [{"t_s": e["t"] - t0, **{k: e.get(k) for k in RESYNC_KEYS}}
                               for e in tr.events if e.get("kind") == "controller" and e.get("phase") == "resynced"],
        "detect_s": per_fault[0]["detect_s"] if per_fault else None,
        **{k: per_fault[0][k] if per_fault else None for k in DETECT_QP_KEYS},
        "recovery_s": per_fault[0]["recovery_s"] if per_fault else None,
        "baseline_goodput_bps": baseline,
        "longest_stall_s": stall_s, "longest_stall_at_s": stall_at,
        "retransmits": float(sum(fs.retransmits[-1] for fs in tx if len(fs.retransmits))),
        "retransmits_startup": _counter_at(tx, t_first),
        "retransmits_after_fault": (float(sum(fs.retransmits[-1] for fs in tx if len(fs.retransmits)))
                                    - _counter_at(tx, t_first)) if disruptive else 0.0,
        "retransmitted_bytes": float(sum(a[-1] for a in rtx_bytes if len(a))) if rtx_bytes else None,
        "ev_transitions": len(trans),
        "flows": [_flow_summary(k, fs, window) for k, fs in sorted(flows.items(), key=lambda kv: str(kv[0]))],
        "fidelity": {"cpu_busy": cpu, "runner_cpu": runner_cpu(tr.events),
                     "busiest_links": busiest_links(links, link_edges, window),
                     "link_drops": float(sum(s["drops"].sum() for s in links.values())),
                     **switch_totals(tr.links, window, t0)},
        "valid": not invalid, "invalid_reasons": invalid, "validity": validity,
        "warnings": ([] if cpu else ["no CPU samples in the workload window: fidelity unknown"]) + fk["warnings"],
        **{k: fk[k] for k in ("base_rtt_s", "path_delay_s", "flow_kpis", "worst_stall", "worst_recovery", "healthy_gap_p99_s",
                              "faulted_iteration", "faulted_iterations", "false_retirements", "fault_flows", "evs_crossing_fault",
                              "retirements")},
    }
    if command:
        summary["job"], summary["completion"] = job_summary(tr, t0, world_size, fl, by_link)
        summary["iteration_s"] = all_step_stats(tr.events, t0, world_size)
    return TransportAnalysis(tr.name, t0, summary, edges, goodput, flows, link_edges, links)


def delivered_to_hosts_bps(series: dict[tuple, dict], by_link: dict[str, str], edges: np.ndarray) -> np.ndarray:
    """Bits/s the host links carried into their hosts per bin of ``edges`` (the switch end's
    ``tx_bytes``, :func:`testbed.metrics.series.link_series`; ``by_link``: ``{link: host}``, the
    host's end is the link name's first when it starts ``<host>-``): a command job's goodput as
    the fabric sees it, headers and retransmissions included. Shape (len(edges) - 1,)."""
    total = np.zeros(len(edges) - 1)
    for link, host in by_link.items():
        switch_end = "b" if link.startswith(f"{host}-") else "a"
        if (link, switch_end) in series:
            total += series[(link, switch_end)]["tx_bytes"]
    return total * 8 / np.diff(edges)


def kpi_bin_s(jobs: list[dict]) -> float:
    """The KPIs' bin width, s: the agents' sample interval (the job specs' ``sample_interval_s``;
    the largest, should jobs differ), :data:`BIN_S` for a run without job specs. Bins finer than
    the samples would only interpolate between them."""
    given = [float(j["sample_interval_s"]) for j in jobs if isinstance(j.get("sample_interval_s"), (int, float))
             and j["sample_interval_s"] > 0]
    return max(given) if given else BIN_S


def runner_cpu(events: list[dict]) -> dict | None:
    """The runner's own CPU over the run (its ``runner`` event): ``{"cpu_s", "wall_s", "fraction"}``
    (fraction of one core); None for runs recorded before it was journaled."""
    rec = next((e for e in events if e.get("kind") == "runner"), None)
    if rec is None or not rec.get("wall_s"):
        return None
    return {"cpu_s": rec["cpu_s"], "wall_s": rec["wall_s"], "fraction": rec["cpu_s"] / rec["wall_s"]}


def _counter_at(flows: list[FlowSeries], t_s: float) -> float:
    """Sum over flows of the cumulative retransmission counter's last sample at or before ``t_s``."""
    total = 0.0
    for fs in flows:
        i = int(np.searchsorted(fs.t_s, t_s, side="right")) - 1
        total += float(fs.retransmits[i]) if i >= 0 else 0.0
    return total


def path_delay_s(jobs: list[dict]) -> float | None:
    """The longest one-way propagation delay (s) of any route of the transport's jobs: what the
    agents' endpoints hold a datagram for (job spec EV ``delay_s``); 0 when no route has one
    (kernel tcp never does), None without job specs."""
    if not jobs:
        return None
    return max((ev.get("delay_s", 0.0) for job in jobs for side in ("send_to", "recv_from")
                for peer in job.get(side, ()) for ev in peer.get("evs", ())), default=0.0)


def _fault_kpis(tr: TransportRecords, t0: float, window: tuple[float, float], fl: list[dict], instants: list[dict],
                trans: list[dict], flows: dict, edges: np.ndarray, jobs: list[dict]) -> dict:
    """Per-flow and per-EV failover KPIs (:mod:`testbed.metrics.kpis`) of one transport whose
    flows run on the agent job specs ``jobs``; ``detect``: one per fault of ``instants``
    (:func:`fault_instants`), the first retirement of an EV crossing any of its links;
    ``detect_qps``: one per fault, :func:`detect_over_qps` (None without job specs; each tx QP's
    samples from ``flows``)."""
    hosts = list(jobs[0].get("world", [])) if jobs else []
    base_rtt = (jobs[0].get("qp", {}).get("cc_params", {}).get("base_rtt_s") if jobs else None)
    spans = iteration_spans(tr.events, t0)
    windows = fault_windows(fl, window[1])
    faulted = {w["link"] for w in windows}
    crossing = {(p["src_rank"], p["dst_rank"]) for p in tr.paths
                if p.get("kind") == "data" and faulted & set(p.get("links", ()))}
    evl = ev_links(jobs)
    if not tr.paths:   # no paths.json (a synthetic run): an MRC flow crosses where its EVs do
        rank_of = {h: r for r, h in enumerate(hosts)}
        crossing = {(r, rank_of.get(peer)) for (r, d, peer, _), links in evl.items()
                    if d == "tx" and faulted & set(links)}
    # an incomplete run's unfinished rest is active time too: a stall that never ends counts
    kspans = spans if completion(tr.events, len(hosts) or None)["complete"] else \
        [*spans, open_span(spans, tr.events, len(hosts), window[1])]
    kp = flow_kpis(flows, hosts, kspans, edges, windows, crossing, base_rtt)
    crossing_evs = {k for k, links in evl.items() if faulted & set(links)}
    rets = ev_retirements(trans, crossing_evs, window[1])
    detect = []
    for f in instants:
        if not evl:   # no job specs (a synthetic run): EV paths unknown, any EV counts
            detect.append(time_to_detect(trans, f["t_s"]))
            continue
        down = set(f["links"])
        mine = {k for k, links in evl.items() if down & set(links)}
        detect.append(next((r["t_s"] - f["t_s"] for r in rets if r["t_s"] >= f["t_s"] - 1e-9
                            and (r["rank"], r["dir"], r["peer"], r["ev_id"]) in mine), None))
    spread = [detect_over_qps(trans, evl, f, windows, flows) if evl else None for f in instants]
    false = false_retirements(rets, windows, evl) if evl else []
    gaps = [g for k in kp for g in k["healthy_gaps_s"]]
    return {
        "base_rtt_s": base_rtt, "detect": detect, "detect_qps": spread, "path_delay_s": path_delay_s(jobs),
        "flow_kpis": [{k: v for k, v in f.items() if k != "healthy_gaps_s"} for f in kp],
        "worst_stall": worst_stall(kp, base_rtt), "worst_recovery": worst_recovery(kp, base_rtt) if windows else None,
        "healthy_gap_p99_s": p_nearest_rank(gaps, 99),
        "faulted_iteration": faulted_iteration(spans, windows),
        "faulted_iterations": faulted_iterations(spans, windows),
        "false_retirements": {"count": len(false), "total_s": float(sum(r["duration_s"] for r in false)),
                              "evs": sorted({(r["rank"], r["dir"], r["peer"], r["ev_id"]) for r in false})},
        "retirements": rets,
        "fault_flows": [{"rank": f["dst"], "peer": f["peer"], "dir": "rx", "label": f["flow"]}
                        for f in kp if f["crosses_fault"]],
        "evs_crossing_fault": [{"rank": r, "dir": d, "peer": p, "ev_id": e} for r, d, p, e in sorted(crossing_evs)],
        "warnings": boundary_warnings(spans, windows),
    }


#: The keys :func:`detect_over_qps` gives a fault (and the summary its first fault's).
DETECT_QP_KEYS = ("detect_median_s", "detect_worst_s", "detect_median_from_fault_s", "detect_worst_from_fault_s",
                  "detect_qps", "detect_causes", "detect_per_qp")

#: How a QP's first retirement of a crossing EV found its loss (``loss_cause`` of the transition):
#: inference from later packets' SACKs (the per-EV reordering rule and the cross-EV out-of-order
#: rule), the retransmission timer, or something else (a controller's DENY, an agent that does not
#: report the cause).
DETECT_CAUSES = {"ev_threshold": "inference", "ooo": "inference", "timeout": "timeout"}

#: Where a detecting QP's detection is timed from (``detect_per_qp`` ``start``, :func:`send_start`):
#: ``idle``, its first transmission on a crossing EV after the fault (it sent none on them
#: before); every other from the fault itself: ``sending`` (it sent on one within a sample interval
#: of the fault), ``awaiting_acks`` (it sent none for a while but had a write outstanding at every
#: sample until then: the loss it found may be of a packet sent before the fault), ``no_send`` (no
#: transmission on one between the fault and its retirement), ``no_samples`` (no samples of its
#: crossing EVs' counters).
DETECT_STARTS = ("idle", "sending", "awaiting_acks", "no_send", "no_samples")


def send_start(fs: FlowSeries | None, evs: list, t_f: float, t_det: float) -> tuple[float, str]:
    """When a tx QP began sending into a fault at ``t_f`` that it detected at ``t_det`` (both
    relative s): ``(start_s, why)``, ``why`` one of :data:`DETECT_STARTS`. ``fs``: the QP's tx
    flow samples (:class:`FlowSeries`; its ``ev_sent`` counters and ``busy``); ``evs``: the ids
    of its EVs crossing the fault. The start is the last sample before the first one in which any
    of those EVs' ``sent`` exceeds its value at the fault's sample (its last at or before
    ``t_f``): within one sample interval before the true first transmission, never after it; it
    is ``t_f`` unless that sample lies after the fault and before ``t_det`` and the QP was idle
    (``busy`` false) at one sample from the fault's sample to it (or ``busy`` is not recorded)."""
    sent = {ev: fs.ev_sent[ev] for ev in evs if fs is not None and ev in fs.ev_sent}
    moved, seen = float("inf"), False
    for ts, counts in sent.values():
        i = int(np.searchsorted(ts, t_f + 1e-9, side="right")) - 1
        if i < 0:   # not listed before the fault: no count to compare with
            continue
        seen = True
        up = np.flatnonzero(counts[i + 1:] > counts[i])
        if len(up):
            moved = min(moved, float(ts[i + 1 + up[0]]))
    if not seen:
        return t_f, "no_samples"
    if not np.isfinite(moved):
        return t_f, "no_send"
    j = int(np.searchsorted(fs.t_s, moved, side="left")) - 1
    before = float(fs.t_s[j]) if j >= 0 else -float("inf")
    if before <= t_f + 1e-9:
        return t_f, "sending"
    if before >= t_det - 1e-9:
        return t_f, "no_send"
    if fs.busy is not None:
        i0 = max(int(np.searchsorted(fs.t_s, t_f + 1e-9, side="right")) - 1, 0)
        if fs.busy[i0:j + 1].all():   # a write outstanding throughout: its lost packets may predate the idle
            return t_f, "awaiting_acks"
    return before, "idle"


def detect_over_qps(trans: list[dict], evl: dict[tuple, tuple], fault: dict, windows: list[dict],
                    flows: dict | None = None) -> dict:
    """Detection of one fault (:func:`fault_instants`: ``t_s``, ``links``) by every tx QP that
    was sending over it: a crossing QP is a (rank, peer) whose requester has an EV (``evl``:
    :func:`ev_links`) over one of the fault's links that was not already retired when the fault
    came (its last transition of ``trans``, :func:`ev_transitions`, before it left it GOOD or
    SKIP); it detects the fault by its first GOOD/SKIP -> ASSUMED_BAD/DENIED/UNKNOWN of such an
    EV at or after the fault while that link was still down (``windows``: :func:`fault_windows`).
    Its detection time is timed from the later of the fault and its first transmission on such an
    EV after it (:func:`send_start`, from ``flows``: :func:`flow_samples`, keyed (rank, peer,
    "tx"); a QP idle at the fault cannot detect it before it sends into it); without its samples,
    from the fault.
    Returns ``{"detect_median_s", "detect_worst_s", "detect_median_from_fault_s",
    "detect_worst_from_fault_s", "detect_qps": {"detected", "crossing", "undetected": [{"rank",
    "peer"}]}, "detect_causes": {"inference", "timeout", "other"}, "detect_per_qp": [{"rank",
    "peer", "detect_s", "from_fault_s", "idle_before_s", "start"}]}``: median and worst (s) over
    the crossing QPs, from the start and from the fault, a QP that never detected it counting as
    infinitely late, so that the worst (and the median, when half or more never detected it) is
    None; both None without a crossing QP; ``detect_causes`` counts the detecting QPs by how
    their first retirement found its loss (:data:`DETECT_CAUSES`); ``detect_per_qp``, per crossing
    QP by (rank, peer), its detection from the start and from the fault, the difference
    (``idle_before_s``) and where it was timed from (:data:`DETECT_STARTS`), all None for one that
    never detected it."""
    from testbed.metrics.definitions import DETECTED_STATES

    t_f, down = fault["t_s"], set(fault["links"])
    until = {}
    for w in windows:
        if w["link"] in down and w["t_s"] >= t_f - 1e-9 and w["link"] not in until:
            until[w["link"]] = w["until_s"]

    def key(e: dict) -> tuple:
        return (e["rank"], e.get("dir") or "tx", e.get("peer"), e["ev_id"])

    state = {key(e): e["new"] for e in trans if e["t_s"] < t_f - 1e-9}    # sorted by time: the last wins
    over = {k: down & set(links) for k, links in evl.items()
            if k[1] == "tx" and down & set(links) and state.get(k, "GOOD") not in DETECTED_STATES}
    qps = sorted({(k[0], k[2]) for k in over}, key=lambda q: (q[0], str(q[1])))
    first: dict[tuple, float] = {}   # (rank, peer) -> time of its first retirement, relative s
    causes = dict.fromkeys(("inference", "timeout", "other"), 0)
    for e in trans:
        k = key(e)
        if (k in over and (k[0], k[2]) not in first and e["old"] in ("GOOD", "SKIP") and e["new"] in DETECTED_STATES
                and any(t_f - 1e-9 <= e["t_s"] <= until.get(link, float("inf")) for link in over[k])):
            first[(k[0], k[2])] = e["t_s"]
            causes[DETECT_CAUSES.get(e.get("loss_cause"), "other")] += 1
    per_qp = []
    for r, p in qps:
        row = {"rank": r, "peer": p, "detect_s": None, "from_fault_s": None, "idle_before_s": None, "start": None}
        if (r, p) in first:
            evs = [k[3] for k in over if (k[0], k[2]) == (r, p)]
            start, why = send_start((flows or {}).get((r, p, "tx")), evs, t_f, first[(r, p)])
            row.update(detect_s=first[(r, p)] - start, from_fault_s=first[(r, p)] - t_f,
                       idle_before_s=start - t_f, start=why)
        per_qp.append(row)

    def spread(name: str) -> tuple[float | None, float | None]:
        """(median, worst) of the QPs' ``name``, a QP that never detected counting as infinitely late."""
        times = [float("inf") if q[name] is None else q[name] for q in per_qp]
        if not times:
            return None, None
        median, worst = float(np.median(times)), max(times)
        return (median if np.isfinite(median) else None), (worst if np.isfinite(worst) else None)

    median, worst = spread("detect_s")
    median_ff, worst_ff = spread("from_fault_s")
    return {"detect_median_s": median, "detect_worst_s": worst,
            "detect_median_from_fault_s": median_ff, "detect_worst_from_fault_s": worst_ff,
            "detect_qps": {"detected": len(first), "crossing": len(qps),
                           "undetected": [{"rank": r, "peer": p} for r, p in qps if (r, p) not in first]},
            "detect_causes": causes, "detect_per_qp": per_qp}


def comparison_row(s: dict) -> dict:
    """Side-by-side row of one transport summary (the keys of the report's main table)."""
    keys = ("transport", "size_bytes", "busbw_mbit_per_s", "busbw_bytes_per_s", "wrong", "qp_errors",
            "detect_s", "recovery_s", "longest_stall_s", "retransmits", "retransmitted_bytes", "valid")
    row = {k: s.get(k) for k in keys}
    row.update(iteration_p50_s=s["iteration_s"]["p50"], iteration_p99_s=s["iteration_s"]["p99"],
               iteration_max_s=s["iteration_s"]["max"], complete=s["completion"]["complete"],
               completion=s["completion"]["reason"])
    return row


def switch_totals(links, window: tuple[float, float], t0: float) -> dict:
    """Packets the switch programs marked CE, trimmed and dropped (header queue full) over the
    workload window, summed over link ends: ``{"ecn_marked", "trimmed", "switch_drops"}``;
    {} when no end ran the switch program (:mod:`testbed.fabric.switch`)."""
    out: dict[str, float] = {}
    lo, hi = window[0] + t0, window[1] + t0
    for cols in links.ends.values():
        if "ecn_marked" not in cols:
            continue
        t = cols["t"]
        for name in ("ecn_marked", "trimmed", "switch_drops"):
            c = cols[name]
            at = np.interp([lo, hi], t, c) if len(t) else (0.0, 0.0)
            out[name] = out.get(name, 0.0) + float(at[1] - at[0])
    return out


def job_row(job: str, s: dict, busbw_fraction: float | None) -> dict:
    """One job's headline figures in a run of several jobs (the keys of a transport summary)."""
    return {"job": job, "collective": s.get("collective"), "world_size": s.get("world_size"),
            "size_bytes": s.get("size_bytes"), "iteration_s": s.get("iteration_s"),
            "busbw_mbit_per_s": s.get("busbw_mbit_per_s"), "busbw_fraction_of_host": busbw_fraction,
            "wrong": s.get("wrong"), "complete": s["completion"]["complete"],
            "completion": s["completion"]["reason"], "valid": s.get("valid"),
            "invalid_reasons": s.get("invalid_reasons"), "qp_errors": s.get("qp_errors")}


def analyze_run(run_dir: Path) -> tuple[dict, list[TransportAnalysis]]:
    """Summary of a whole run (``scenario``, ``world_size``, ``host_link_rate_bps``,
    ``host_bandwidth_bps`` and ``host_nics`` (an older run's: :func:`testbed.rundir.upgrade.upgrade`),
    ``payload_bytes`` (of an mrc/rc data packet; None for a run older than the key),
    ``scenario_path``, ``regime`` (the manifest's: :func:`testbed.spec.regime.scenario_regime`;
    None for a run older than the key),
    ``kernel_fallbacks`` (the manifest's: what the fabric did without on this kernel, one line each),
    ``definitions``,
    ``transports`` by name, ``comparison`` rows) and the per-transport analyses.
    Raises RunDirError / MetricsError."""
    manifest = load_manifest(run_dir)
    analyses = []
    rate = manifest.get("host_link_rate_bps")
    host_bw = manifest.get("host_bandwidth_bps")

    def fraction(s: dict) -> float | None:
        bb = s["busbw_mbit_per_s"]
        return bb * 1e6 / host_bw if bb is not None and host_bw else None

    from testbed.metrics.balance import balance_summary, load_run_topology
    topo, topo_problem = load_run_topology(run_dir, manifest)
    job_specs: dict[str, list[dict]] = {}   # transport -> its (first) job's specs
    for name in manifest["transports"]:
        tr = load_transport(run_dir, name)
        names = job_names(tr.jobs)
        if len(names) == 1:
            ws = int(manifest.get("world_size") or len(tr.samples.ranks) or 1)
            a = analyze_transport(tr, ws, expected_measured_iterations(manifest),
                                  nics=topo.nics if topo is not None else None)
            a.summary["balance"] = balance_summary(tr, topo, a.t0_s, topology_problem=topo_problem)
            analyses.append(a)
            job_specs[name] = tr.mrc_jobs or tr.jobs
            continue
        per_job = []   # several jobs: each analysed on its own agents; the first is the headline
        for i, job in enumerate(names):
            trj = load_transport(run_dir, name, job)
            per_job.append(analyze_transport(trj, len(trj.jobs) or 1, expected_measured_iterations(manifest, i)))
            job_specs.setdefault(name, trj.jobs)
        per_job[0].summary["jobs"] = [job_row(job, a.summary, fraction(a.summary)) for job, a in zip(names, per_job)]
        # every job's flows against each other, on the whole fabric's counters
        per_job[0].summary["balance"] = balance_summary(tr, topo, per_job[0].t0_s, topology_problem=topo_problem)
        analyses.append(per_job[0])
    engines = manifest.get("engines") or {}
    for a in analyses:
        a.summary["busbw_fraction_of_host"] = fraction(a.summary)
        # over the NICs this transport's (first) job uses: one for rc and tcp, every plane for mrc
        nic_bw = nic_bandwidth_bps(job_specs.get(a.name) or [], topo, rate)
        bb = a.summary["busbw_mbit_per_s"]
        a.summary["nic_bandwidth_bps"] = nic_bw
        a.summary["busbw_fraction_of_nics"] = bb * 1e6 / nic_bw if bb is not None and nic_bw else None
        if a.name in engines:
            a.summary["engine"] = engines[a.name]
    summary = {"scenario": scenario_name(manifest), "run_dir": str(run_dir),
               "world_size": manifest.get("world_size"), "host_link_rate_bps": rate,
               "host_bandwidth_bps": host_bw, "host_nics": manifest.get("host_nics"),
               "payload_bytes": manifest.get("payload_bytes"), "engines": engines,
               "scenario_path": (manifest.get("scenario") or {}).get("path")
               if isinstance(manifest.get("scenario"), dict) else None,
               "regime": manifest.get("regime"),
               "defaults": _defaults(manifest),
               "kernel_fallbacks": list(manifest.get("kernel_fallbacks") or ()),
               "definitions": DEFINITIONS, "transports": {a.name: a.summary for a in analyses},
               "comparison": [comparison_row(a.summary) for a in analyses]}
    return summary, analyses


def _defaults(manifest: dict) -> dict:
    """The manifest's ``scenario.defaults`` (absent keys' values), {} for a run that has none (older
    runs, format 1's string ``scenario``)."""
    scenario = manifest.get("scenario")
    return dict(scenario.get("defaults") or {}) if isinstance(scenario, dict) else {}
