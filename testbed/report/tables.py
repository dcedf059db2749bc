"""The report's tables (as :class:`~testbed.report.layout.Grid`, which fit any width) and the
nccl-tests-format text block of each transport.

Cells come from a transport summary ``s = summary["transports"][name]``; any key may be
missing in a summary written by an older version, and then renders as "-".
"""

from __future__ import annotations

from rich.text import Text

from testbed.report.fmt import fmt_count, fmt_pct, fmt_rtts, fmt_s, fmt_sig, gb_per_s, usec
from testbed.report.layout import Grid

MISSING = object()


def has_fault(s: dict) -> bool:
    """True if a disruptive fault was applied during the transport's run."""
    return bool(s.get("per_fault")) or any(f.get("disruptive") for f in s.get("faults") or ())


def _no(text: str) -> Text:
    return Text(text, style="red")


# -- cells of the comparison table, one function per row ------------------------------------
def cell_faulted_iteration(s: dict) -> str:
    """"+57% (3.310 s vs 2.110 s)": the iteration the fault hit vs the healthy median."""
    fi = s.get("faulted_iteration", MISSING)
    if fi is MISSING:
        return "-"
    if fi is None:
        return "-" if has_fault(s) else "no fault"
    pct = fi.get("slowdown_pct")
    head = "-" if pct is None else f"{pct:+.0f}%"
    return f"{head} ({fmt_s(fi.get('seconds'))} vs {fmt_s(fi.get('healthy_median_s'))})"


def cell_detect(s: dict) -> str:
    if not s.get("has_evs"):
        return "n/a (no EVs)"
    if not has_fault(s):
        return "no fault"
    d = s.get("detect_s")
    return ("not detected" if d is None else fmt_s(d)) + detect_cause_note(s.get("detect_causes"))


def detect_cause_note(causes: dict | None) -> str:
    """`` (inference 3 of 3 QPs)``: how the crossing QPs' first retirements found their loss
    (summary ``detect_causes``), empty when no QP detected or the agents do not report it."""
    if not causes or not (n := sum(causes.values())) or causes.get("other") == n:
        return ""
    parts = [f"{k} {causes[k]}" for k in ("inference", "timeout", "other") if causes.get(k)]
    return f" ({', '.join(parts)} of {n} QPs)"


def cell_false_retirements(s: dict) -> str:
    fr = s.get("false_retirements")
    if fr is None:
        return "-"
    if not s.get("has_evs"):
        return "n/a (no EVs)"
    n = fr.get("count") or 0
    return "0" if n == 0 else f"{n} ({fmt_s(fr.get('total_s'))})"


def _with_flow(seconds, rtts, flow) -> str:
    parts = [fmt_s(seconds)]
    if rtts is not None:
        parts.append(f"({fmt_rtts(rtts)})")
    if flow:
        parts.append(str(flow))
    return " ".join(parts)


def cell_worst_stall(s: dict) -> str:
    """"103 ms (2.4 RTT) 4->5": the longest zero-progress run of one flow."""
    st = s.get("worst_stall", MISSING)
    if st is MISSING:
        return "-"
    if st is None:
        return "no stall"
    return _with_flow(st.get("s"), st.get("rtts"), st.get("flow"))


def cell_resolution(s: dict) -> str:
    """"20.0 ms = 0.88 RTT": the stalls' resolution (the agents' sample interval, the bins' width)."""
    res, rtt = s.get("kpi_resolution_s"), s.get("base_rtt_s")
    if res is None:
        return "-"
    return fmt_s(res) + (f" = {fmt_rtts(res / rtt)}" if rtt else "")


def cell_worst_recovery(s: dict) -> str:
    """The slowest flow's recovery: "no dip", "not recovered" or "55.0 ms (1.3 RTT) 3->4"."""
    r = s.get("worst_recovery", MISSING)
    if r is MISSING:
        return "-"
    if r is None:
        return "-" if has_fault(s) else "no fault"
    if not r.get("dip"):
        return "no dip"
    if not r.get("recovered"):
        return "not recovered"
    return _with_flow(r.get("s"), r.get("rtts"), r.get("flow"))


def cell_recovery(s: dict) -> str:
    """Aggregate goodput recovery (``recovery_s``: 0.0 means no dip, None not recovered)."""
    if not has_fault(s):
        return "no fault"
    r = s.get("recovery_s")
    return "not recovered" if r is None else "no dip" if r == 0 else fmt_s(r)


def cell_longest_stall(s: dict) -> str:
    st = s.get("longest_stall_s")
    return "-" if st is None else "none" if st == 0 else fmt_s(st)


def cell_retransmits_split(s: dict) -> str:
    """"2 / 11": retransmitted packets at start-up / after the fault."""
    if "retransmits_startup" not in s and "retransmits_after_fault" not in s:
        return "-"
    return f"{fmt_count(s.get('retransmits_startup'))} / {fmt_count(s.get('retransmits_after_fault'))}"


def cell_completed(s: dict) -> Text | str:
    c = s.get("completion") or {}
    if c.get("complete"):
        return "yes"
    return _no(f"no: {c.get('reason') or 'unknown'}") if c else "-"


def cell_valid(s: dict) -> Text | str:
    if s.get("valid", True):
        return "yes" if "valid" in s else "-"
    return _no("no: " + ("; ".join(s.get("invalid_reasons") or ()) or "unknown"))


def _iteration(key: str):
    return lambda s: fmt_s((s.get("iteration_s") or {}).get(key))


# The aggregate-goodput recovery and stall (summary keys recovery_s, longest_stall_s) are left
# out on purpose: a ring drains before its aggregate dips, so they misread a flow black-holed for
# seconds as a 60 ms blip; the per-flow rows below are the KPIs (cell_recovery and
# cell_longest_stall still format them for anyone who wants the aggregate view).
COMPARISON_ROWS = [
    ("size (B)", lambda s: fmt_count(s.get("size_bytes"))),
    ("busbw (Mbit/s)", lambda s: fmt_sig(s.get("busbw_mbit_per_s"))),
    ("busbw / host", lambda s: fmt_pct(s.get("busbw_fraction_of_host"), 3)),
    ("iteration p50", _iteration("p50")),
    ("iteration p99", _iteration("p99")),
    ("iteration max", _iteration("max")),
    ("faulted iteration", cell_faulted_iteration),
    ("#wrong", lambda s: fmt_count(s.get("wrong"))),
    ("QP errors", lambda s: fmt_count(s.get("qp_errors"))),
    ("time to detect", cell_detect),
    ("false retirements", cell_false_retirements),
    ("worst flow recovery", cell_worst_recovery),
    ("worst flow stall", cell_worst_stall),
    ("stall resolution", cell_resolution),
    ("healthy gap p99", lambda s: fmt_s(s.get("healthy_gap_p99_s"))),
    ("base RTT", lambda s: fmt_s(s.get("base_rtt_s"))),
    ("propagation (one-way)", lambda s: cell_propagation(s)),
    ("retransmits (pkts)", lambda s: fmt_count(s.get("retransmits"))),
    ("retransmits (start-up / after fault)", cell_retransmits_split),
    ("retransmitted bytes", lambda s: fmt_count(s.get("retransmitted_bytes"))),
    ("completed", cell_completed),
    ("valid", cell_valid),
]


def cell_propagation(s: dict) -> str:
    """The longest route's one-way delay line; kernel tcp has none (its packets are not the
    agents' to hold), and says so."""
    delay = s.get("path_delay_s")
    if delay is None:
        return "-"
    return fmt_s(delay) if delay else "none"


def _packet_transports(names) -> list[str]:
    """The names among ``names`` whose data packets the agents size (mrc, rc and its variants)."""
    from testbed.spec.common import parse_transport
    out = []
    for name in names:
        try:
            if parse_transport(name).base in ("mrc", "rc"):
                out.append(name)
        except ValueError:
            pass
    return out


def payload_text(summary: dict) -> str:
    """``payload 4096 bytes per data packet`` (``... (mrc, rc)`` when some transport, kernel tcp,
    is not sized by it); "" without ``payload_bytes`` (an older run) or an mrc/rc transport."""
    payload = summary.get("payload_bytes")
    names = list(summary.get("transports") or ())
    sized = _packet_transports(names)
    if not payload or not sized:
        return ""
    return f"payload {payload} bytes per data packet" + ("" if sized == names else f" ({', '.join(sized)})")


def _host(summary: dict) -> str:
    rate = summary.get("host_link_rate_bps")
    host_bw = summary.get("host_bandwidth_bps") or rate
    nics = summary.get("host_nics") or 1
    parts = []
    if rate:
        parts.append(f"host link {rate / 1e6:g} Mbit/s" if nics == 1 else
                     f"host: {nics} NICs, {host_bw / 1e6:g} Mbit/s")
    if payload := payload_text(summary):
        parts.append(payload)
    if engine := engine_text(summary):
        parts.append(engine)
    return f" ({', '.join(parts)})" if parts else ""


def engine_text(summary: dict) -> str:
    """``native engine`` (``... (mrc, rc)`` when some transport, kernel tcp, has none; each
    engine named when they differ); "" for a run that recorded none (older runs)."""
    engines = {n: e for n, e in (summary.get("engines") or {}).items() if e != "kernel"}
    if not engines:
        return ""
    names = list(summary.get("transports") or ())
    by_engine: dict[str, list[str]] = {}
    for name, engine in engines.items():
        by_engine.setdefault(engine, []).append(name)
    parts = [f"{engine} engine" + ("" if len(by_engine) == 1 and sorted(ns) == sorted(names)
                                    else f" ({', '.join(ns)})") for engine, ns in by_engine.items()]
    return ", ".join(parts)


def comparison_table(summary: dict) -> Grid:
    """Transports side by side (one column each), one metric per row."""
    names = list(summary["transports"])
    # base_rtt_s: per transport, or once for the run (top level)
    per = {n: {"base_rtt_s": summary.get("base_rtt_s"), **summary["transports"][n]} for n in names}
    switch = any("ecn_marked" in (per[n].get("fidelity") or {}) for n in names)
    delayed = any(per[n].get("path_delay_s") for n in names)
    rows = [[label, *(f(per[n]) for n in names)] for label, f in COMPARISON_ROWS
            if delayed or label != "propagation (one-way)"]
    if switch:   # the fabric ran the switch program (ECN marking, trimming)
        rows.append(["switch: CE marked / trimmed / header drops",
                     *("/".join(fmt_count((per[n].get("fidelity") or {}).get(k))
                                for k in ("ecn_marked", "trimmed", "switch_drops")) for n in names)])
    title = f"{summary.get('scenario', '?')}: transports side by side{_host(summary)}"
    return Grid(title, ["metric", *names], rows, split="columns", shrink_first=(0,))


def busbw_by_size_table(summary: dict) -> Grid:
    """busbw (Mbit/s, 3 s.f.) per message size, transports side by side."""
    names = list(summary["transports"])
    per = {n: {r["size_bytes"]: r for r in summary["transports"][n].get("sizes") or ()} for n in names}
    sizes = sorted({size for rows in per.values() for size in rows})
    rows = [[str(size), *(fmt_sig((per[n].get(size) or {}).get("busbw_mbit_per_s")) for n in names)]
            for size in sizes]
    return Grid("busbw (Mbit/s) by size", ["size (B)", *names], rows, split="columns",
                justify=["right"] * (1 + len(names)), caption=None if rows else "no iteration finished")


def jobs_table(summary: dict) -> Grid | None:
    """A run of several jobs: one row per (transport, job): the job (collective, ranks), busbw
    (Mbit/s and of the host's bandwidth), iteration p50 and #wrong ("-" marks a job that did not
    complete). None for a single job."""
    rows = []
    for name, s in summary["transports"].items():
        for i, j in enumerate(s.get("jobs") or ()):
            it = j.get("iteration_s") or {}
            rows.append([name if i == 0 else "", j["job"], j.get("collective") or "?", str(j.get("world_size") or "?"),
                         fmt_sig(j.get("busbw_mbit_per_s")), fmt_pct(j.get("busbw_fraction_of_host"), 3),
                         fmt_s(it.get("p50")), str(j.get("wrong", "?")) + ("" if j.get("complete") else " -")])
    if not rows:
        return None
    return Grid("jobs run at once (each on its own agents; the table above shows the first)",
                ["transport", "job", "collective", "n", "busbw Mbit/s", "of host", "iter p50", "#wrong"], rows,
                justify=["left", "left", "left", "right", "right", "right", "right", "right"])


def validity_table(summary: dict) -> Grid:
    """Whether the emulation kept up, one row per transport: host CPU (over servers: the
    busiest machine's, named), agents' scheduling delay and timer lateness, the sampler's
    coverage of the run."""
    rows, machines = [], False
    for name, s in summary["transports"].items():
        cpu = (s.get("fidelity") or {}).get("cpu_busy") or {}
        v = s.get("validity") or {}
        p95 = v.get("cpu_p95") if v.get("cpu_p95") is not None else cpu.get("p95")
        runner = ((s.get("fidelity") or {}).get("runner_cpu") or {}).get("fraction")
        machines = machines or bool(cpu.get("machines"))
        rows.append([name, f"{cpu.get('server') or 'runner'} of {cpu['machines']}" if cpu.get("machines") else "-",
                     fmt_pct(cpu.get("mean")), fmt_pct(p95), fmt_pct(runner),
                     fmt_s(v.get("sched_delay_p95_s")) + (f" + hold {fmt_s(v['rx_hold_s'])}" if v.get("rx_hold_s") else ""),
                     fmt_s(v.get("timer_late_p99_s")), fmt_pct(v.get("sampler_coverage"), 3)])
    head = ["transport", "machine", "CPU mean", "CPU p95", "runner CPU", "sched delay p95", "timer late p99",
            "sampler coverage"]
    if not machines:   # one machine: no machine column
        head = head[:1] + head[2:]
        rows = [r[:1] + r[2:] for r in rows]
    return Grid("fidelity: host" + (" (the busiest machine's CPU)" if machines else ""), head, rows)


def links_table(summary: dict) -> Grid:
    """Achieved vs configured rate of the busiest link ends, per transport."""
    rows = []
    for name, s in summary["transports"].items():
        links = (s.get("fidelity") or {}).get("busiest_links") or [None]
        for i, ln in enumerate(links):
            head = name if i == 0 else ""
            if ln is None:
                rows.append([head, "-", "-", "-", "-", "-"])
                continue
            rate = ln.get("rate_bps")
            rows.append([head, f"{ln['link']}:{ln['end']}", fmt_sig(ln.get("achieved_bps", 0) / 1e6),
                         fmt_sig(rate / 1e6) if rate else "-", fmt_pct(ln.get("achieved_fraction")),
                         fmt_count(ln.get("drops"))])
    return Grid("fidelity: busiest link ends (achieved: best 1 s)",
                ["transport", "link end", "achieved Mbit/s", "rate Mbit/s", "% of rate", "drops"],
                rows, justify=["left", "left", "right", "right", "right", "right"])


# -- nccl-tests text ---------------------------------------------------------------------------
# nccl-tests (src/util.cu: writeResultHeader, writeBenchmarkLinePreamble/Body, writeResultFooter)
# prints "%12li  %12li  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6g" (85 columns, plus in-place
# columns). Parsers split on white space and skip '#' lines, so the same columns are printed
# here narrower, to stay within 80 columns; only out-of-place (the agents have no in-place).
_ROW = "{:>12} {:>11} {:>6} {:>5} {:>5} {:>9} {:>9} {:>9} {:>6}"
_TYPES = {"float32": "float", "float64": "double", "float16": "half", "int32": "int32", "int64": "int64"}


def nccl_tests_block(s: dict) -> str:
    """nccl-tests <collective>_perf output of one transport summary, as plain text: time in
    microseconds (the measured iterations' wall-clock span over their number, as nccl-tests
    times its loop),
    algbw and busbw in GB/s (1e9 bytes/s) to 3 significant figures (emulated links make them
    tiny: 0.000590, where nccl-tests would print 0.00), #wrong elements; then nccl-tests'
    "Out of bounds values" and "Avg bus bandwidth" (GB/s, mean over sizes) lines."""
    name, n = s.get("transport", "?"), s.get("world_size")
    lines = [f"# {name}: {s.get('collective') or 'all_reduce'}, {n} ranks; time = loop span / iterations",
             "#" + " " * 43 + f"{'out-of-place':^30}".rstrip(),
             "# " + _ROW.format("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")[2:],
             "# " + _ROW.format("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")[2:]]
    busbw, wrong = [], 0
    for r in s.get("sizes") or ():
        wrong += int(r.get("wrong") or 0)
        if not r.get("iterations") or r.get("time_s") is None:
            lines.append(f"# {r['size_bytes']} B: no measured iteration finished")
            continue
        busbw.append(r["busbw_bytes_per_s"] / 1e9)
        lines.append(_ROW.format(r["size_bytes"], r["count"], _TYPES.get(r.get("type"), r.get("type") or "float"),
                                 r.get("redop", "sum"), -1, usec(r["time_s"]), gb_per_s(r["algbw_bytes_per_s"]),
                                 gb_per_s(r["busbw_bytes_per_s"]), r.get("wrong", 0)))
    lines.append(f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}")
    lines.append(f"# {'Avg bus bandwidth':<20} : {sum(busbw) / len(busbw) if busbw else 0:g}")
    lines.append("#")
    return "\n".join(line.rstrip() for line in lines)
