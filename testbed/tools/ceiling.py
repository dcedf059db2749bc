"""``make bench``'s fabric ceiling, set against the kernel fabric's own limits
(:mod:`testbed.tools.kernel_limit`).

Fabric ceiling: ``scenarios/baseline.yaml``'s all-reduce (16 ranks, k=4) on fresh fabrics at a
sweep of link rates (the topology's link classes with only the rate changed; sizes scaled so
an iteration takes ~1 s), :data:`CEILING_REPEAT` interleaved runs per transport and rate; a
run passes when it is valid (agents not starved, see ``testbed.metrics.fidelity``) and its
busbw is at least :data:`CEILING_BUSBW` of the host link, and a rate passes when every run
does. The ceiling is the highest rate that passes; each run's CPU per delivered data packet
(:func:`testbed.tools.cost.packet_cost`) and its control datagrams per data datagram
(:func:`control_mix`) are beside it.

R (:func:`ratio_table`): a row's ceiling in data packets a second over what the kernel ring
carries when it also carries that row's control datagrams (the mixed ring); the data-only
ratio beside it. Profiles: py-spy on a ceiling run's agents
(:class:`testbed.tools.cost.Profiler`). Needs root.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agents.mrc.packet import CRC, SACK_HDR
from testbed.fabric.kernel import features
from testbed.model.generators import fat_tree
from testbed.tools.cost import packet_cost
from testbed.tools.kernel_limit import best_udp, median_range

CEILING_RATES_MBIT = (10, 20, 30, 40, 50, 70, 100)
"""Link rates of the default sweep, Mbit/s: the native engine's ceilings fell between 20 and 70 (docs/engine.md)."""
CEILING_TRANSPORTS = ("mrc", "rc", "tcp")
CEILING_ENGINES = ("native", "python")
"""The MRC engines of the sweep's mrc and rc rows (scenario ``engine``); kernel tcp has one row."""
CEILING_BUSBW = 0.90
CEILING_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "baseline.yaml"


def agent_model_name(processes: int | str | None) -> str:
    """How a sweep row's agents run: ``per-host``, ``N runtimes`` (:mod:`agents.runtime`) or
    ``default`` (the runner's: one runtime per core)."""
    if processes is None or processes == "per-host":
        return "default" if processes is None else "per-host"
    return f"{processes} runtime{'s' if processes > 1 else ''}"


def control_mix(transport_dir: Path) -> dict:
    """What an mrc or rc run sent besides data, from each rank's ``done`` summary in
    ``events.jsonl``: ``{"data_datagrams", "datagrams", "control_per_data"}``, data datagrams
    (every QP's ``tx_packets``, retransmissions included), every UDP datagram the endpoints
    sent (``udp.tx_datagrams``), and the control datagrams (SACKs, NACKs, probes, CNPs) per data
    datagram. Raises ValueError when no rank left a summary with both counts (tcp, a run that
    never finished)."""
    from testbed.rundir.read import iter_jsonl

    data = dgrams = 0
    for rec in iter_jsonl(Path(transport_dir) / "events.jsonl"):
        channel = ((rec.get("summary") or {}).get("channel") or {}) if rec.get("status") == "done" else {}
        if "udp" in channel and "tx_qp" in channel:
            data += channel["tx_qp"]["tx_packets"]
            dgrams += channel["udp"]["tx_datagrams"]
    if data == 0:
        raise ValueError(f"{transport_dir}: no done summary with the endpoints' datagram counts")
    return {"data_datagrams": data, "datagrams": dgrams, "control_per_data": (dgrams - data) / data}


CONTROL_DATAGRAM_BYTES = SACK_HDR.size + CRC.size
"""UDP payload of the mixed ring's control datagrams: a SACK's (``agents.mrc.packet``), which
nearly all of MRC's control datagrams are at a ceiling (a NACK is smaller, a probe close)."""
CEILING_REPEAT = 3
"""Runs per transport and rate; a rate passes only when every one of them does."""


def bench_ceiling(rates_mbit=CEILING_RATES_MBIT, transports=CEILING_TRANSPORTS, *,
                  scenario_path: Path = CEILING_SCENARIO, progress=None,
                  agent_models: tuple = (None,), payload: int | None = None, realtime: bool = False,
                  engines: tuple = CEILING_ENGINES, repeat: int = CEILING_REPEAT) -> dict:
    """The fabric ceiling sweep (module docstring): ``{"rates": [...], "repeat": N, "runs": {row:
    {rate: [run, ...]}}, "ceiling": {row: rate | None}}`` (rates in Mbit/s; a run is
    ``{"busbw_fraction", "valid", "passed", "cpu_p95", "runner_cpu", "reasons", "status",
    "agent_us_per_packet", "machine_us_per_packet", "packets_per_s", "control_per_data"}``), a
    row per transport and agent model (``agent_models``: ``"per-host"`` one process per agent,
    N host runtimes, None the default; a row is named ``"mrc"`` for the default alone, else
    ``"mrc, <model>"``). Each rate runs ``repeat`` times, interleaved: every row once, then
    every row again; a rate passes when all its runs do, and a row stops after two rates in a
    row that did not pass. ``payload`` (bytes per data packet, ``workload.payload``) and
    ``realtime`` (``agent_realtime``) apply to every run and are named in the rows; mrc and rc
    get a row per MRC engine of ``engines`` (``"mrc, native engine"``), kernel tcp one."""
    import dataclasses
    import io
    import shutil

    from testbed.report.files import load_summary
    from testbed.run import run_scenario
    from testbed.spec import load_file

    if repeat < 1:
        raise ValueError(f"repeat={repeat}: at least one run per rate")
    base = load_file(scenario_path, features=features())
    quiet = Console(file=io.StringIO(), width=120)
    out = {"rates": list(rates_mbit), "repeat": repeat, "runs": {}, "ceiling": {}}
    root = Path(tempfile.mkdtemp(prefix="mrc-ceiling-"))
    plan = {}
    for transport in transports:
        for engine in ("kernel",) if transport == "tcp" else engines:
            for model in agent_models:
                row = transport if tuple(agent_models) == (None,) else f"{transport}, {agent_model_name(model)}"
                row += (f", payload {payload}" if payload else "") + (", SCHED_RR" if realtime else "")
                row += "" if engine == "kernel" else f", {engine} engine"
                plan[row] = (transport, model, engine)
                out["runs"][row], out["ceiling"][row] = {}, None
    fails = dict.fromkeys(plan, 0)
    try:
        for rate in rates_mbit:
            active = [row for row in plan if fails[row] < 2]
            if not active:
                break
            for _ in range(repeat):
                for row in active:
                    transport, model, engine = plan[row]
                    sc = _at_rate(base, rate * 1_000_000, dataclasses)
                    if payload:
                        sc = dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, payload=payload))
                    sc = dataclasses.replace(sc, agent_realtime=realtime,
                                             engine=sc.engine if engine == "kernel" else engine)
                    result = run_scenario(sc, runs_root=root, console=quiet, transports=[transport], live=False,
                                          agent_processes=model)
                    run = _ceiling_run(result, transport, load_summary)
                    out["runs"][row].setdefault(rate, []).append(run)
                    if progress is not None:
                        progress(row, rate, run)
                    shutil.rmtree(result.run_dir, ignore_errors=True)
            for row in active:
                if all(r["passed"] for r in out["runs"][row][rate]):
                    out["ceiling"][row], fails[row] = rate, 0
                else:
                    fails[row] += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def _ceiling_run(result, transport: str, load_summary) -> dict:
    """One ceiling run's record (:func:`bench_ceiling`) from its run directory."""
    s = load_summary(result.run_dir)["transports"][transport]
    v = s.get("validity") or {}
    tdir = result.run_dir / transport
    try:
        cost = packet_cost(tdir)
    except (OSError, ValueError, KeyError):
        cost = {}
    try:
        mix = control_mix(tdir)["control_per_data"]
    except (OSError, ValueError, KeyError):
        mix = None
    fraction = s.get("busbw_fraction_of_host")
    return {"busbw_fraction": fraction, "valid": bool(s.get("valid")),
            "passed": bool(s.get("valid")) and (fraction or 0) >= CEILING_BUSBW,
            "cpu_p95": v.get("cpu_p95"), "status": result.status.get(transport),
            "runner_cpu": ((s.get("fidelity") or {}).get("runner_cpu") or {}).get("fraction"),
            "reasons": s.get("invalid_reasons") or [],
            "agent_us_per_packet": cost.get("agent_us_per_packet"),
            "machine_us_per_packet": cost.get("machine_us_per_packet"),
            "packets_per_s": cost.get("packets_per_s"), "control_per_data": mix}


def median_of(runs: list[dict], key: str) -> tuple[float, float, float] | None:
    """(median, min, max) of ``key`` over the runs that have it, None if none does."""
    return median_range([r.get(key) for r in runs])


def ceiling_data_pps(busbw_fraction: float, rate_mbit: float, hosts: int, payload: int) -> float:
    """Data packets a second of all hosts at a ceiling, the rate a ring carries: busbw is the
    bytes each host's ring link moves a second in the all-reduce (nccl-tests' definition), so
    ``busbw_fraction`` x the link rate / (``payload`` x 8) per host, times ``hosts``."""
    return busbw_fraction * rate_mbit * 1e6 / (payload * 8) * hosts


def mixes_of(c: dict) -> dict[str, tuple[float, int]]:
    """The mixed rings to run after a sweep: ``{row: (control_per_data, CONTROL_DATAGRAM_BYTES)}``
    for every mrc/rc row with a ceiling, the median ratio of its runs at the ceiling."""
    out = {}
    for row, best in c["ceiling"].items():
        if best is None:
            continue
        m = median_of(c["runs"][row][best], "control_per_data")
        if m is not None:
            out[row] = (round(m[0], 4), CONTROL_DATAGRAM_BYTES)
    return out


def _at_rate(scenario, rate_bps: int, dataclasses):
    """``scenario`` on its topology with every link at ``rate_bps``, sizes scaled to ~1 s an
    iteration (a power of two, at least 64 KiB)."""
    topo = scenario.topology
    hosts = {h.name for h in topo.hosts}
    k = int(round((4 * len(hosts)) ** (1 / 3)))
    host_lp = next(lk.params for lk in topo.links if lk.a.node in hosts or lk.b.node in hosts)
    fabric_lp = next((lk.params for lk in topo.links if lk.a.node not in hosts and lk.b.node not in hosts),
                     host_lp)
    new_topo = fat_tree(k, host_link=dataclasses.replace(host_lp, rate_bps=rate_bps),
                        fabric_link=dataclasses.replace(fabric_lp, rate_bps=rate_bps), name=topo.name)
    size = 1 << max(16, (rate_bps // 8 // 2).bit_length() - 1)      # ~0.5 s of the link, 2(n-1)/n of it
    wl = dataclasses.replace(scenario.workload, min_bytes=size, max_bytes=size, iterations=6, warmup=1)
    return dataclasses.replace(scenario, topology=new_topo, workload=wl, jobs=(), timeline=(),
                               timeout_s=120.0, name=f"{scenario.name}-{rate_bps // 1_000_000}mbit")


def bench_profile(transport: str, rate_mbit: int, *, scenario_path: Path = CEILING_SCENARIO,
                  engine: str | None = None) -> dict:
    """One ceiling run (:func:`_at_rate`) of ``transport`` at ``rate_mbit`` (on MRC ``engine``;
    None: the scenario's) with py-spy on every agent process (:class:`testbed.tools.cost.Profiler`,
    100 Hz, native frames): ``{"transport", "engine", "rate_mbit", "valid", "busbw_fraction",
    "samples": {category: n}, **packet_cost}``. py-spy
    pauses a process for each sample, so the run's own CPU figures are a little high."""
    import dataclasses
    import io
    import shutil

    from testbed.report.files import load_summary
    from testbed.run import run_scenario
    from testbed.spec import load_file
    from testbed.tools.cost import Profiler

    sc = _at_rate(load_file(scenario_path, features=features()), rate_mbit * 1_000_000, dataclasses)
    if engine is not None:
        sc = dataclasses.replace(sc, engine=engine)
    root = Path(tempfile.mkdtemp(prefix="mrc-profile-"))
    try:
        with Profiler(str(root), root / "py-spy") as prof:
            result = run_scenario(sc, runs_root=root, console=Console(file=io.StringIO()),
                                  transports=[transport], live=False)
        s = load_summary(result.run_dir)["transports"][transport]
        return {"transport": transport, "engine": sc.engines()[transport], "rate_mbit": rate_mbit,
                "valid": bool(s.get("valid")),
                "busbw_fraction": s.get("busbw_fraction_of_host"), "samples": prof.categories(),
                **packet_cost(result.run_dir / transport)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def profile_table(profiles: list[dict]) -> Table:
    from testbed.tools.cost import CATEGORIES

    t = Table(title="where the agents' processes spend their busy time (py-spy samples, % of busy; "
                    "syscalls include the kernel forwarding a send runs in its caller's context)")
    t.add_column("category")
    for p in profiles:
        engine = f", {p['engine']} engine" if p.get("engine", "kernel") != "kernel" else ""
        t.add_column(f"{p['transport']}{engine} @ {p['rate_mbit']} Mbit/s", justify="right")
    busy = [sum(v for k, v in p["samples"].items() if k != "waiting") or 1 for p in profiles]
    for cat in CATEGORIES:
        t.add_row(cat, *(f"{p['samples'].get(cat, 0) / b:.0%}" for p, b in zip(profiles, busy)))
    t.add_row("busy samples", *(str(b) for b in busy))
    t.add_row("agents / machine us per data packet",
              *(f"{p['agent_us_per_packet']:.0f} / {p['machine_us_per_packet']:.0f}" for p in profiles))
    return t


def ceiling_table(c: dict) -> Table:
    n = c.get("repeat", 1)
    t = Table(title=f"fabric ceiling: fat-tree k=4 all-reduce, busbw / host link per rate, median \\[min-max] of {n} "
                    f"interleaved run(s), runs valid, machine us per data packet (a rate passes: every run valid and "
                    f">= {CEILING_BUSBW:.0%})")
    t.add_column("transport, agents")
    for rate in c["rates"]:
        t.add_column(f"{rate} Mbit/s", justify="right")
    t.add_column("ceiling", justify="right")
    for transport, runs in c["runs"].items():
        cells = []
        for rate in c["rates"]:
            rs = runs.get(rate)
            if not rs:
                cells.append("-")
                continue
            b = median_of([{**r, "pct": (r["busbw_fraction"] or 0) * 100} for r in rs], "pct")
            cost = median_of(rs, "machine_us_per_packet")
            valid = sum(r["valid"] for r in rs)
            cells.append(f"{b[0]:.1f}%" + (f" [{b[1]:.1f}-{b[2]:.1f}]" if len(rs) > 1 else "")
                         + f", {valid}/{len(rs)} valid" + (f", {cost[0]:.0f} us" if cost else ""))
        best = c["ceiling"].get(transport)
        t.add_row(transport, *cells, f"{best} Mbit/s" if best else "below the sweep")
    return t


def ratio_rows(limits: list[dict], c: dict, *, hosts: int = 16, payload: int = 4096) -> list[dict]:
    """R per row of a sweep (module docstring): ``{"row", "ceiling_mbit", "runs", "busbw" (median,
    min, max fraction), "data_pps", "control_per_data", "mixed": best mixed ring (:func:`best_udp`) or
    None, "r", "data_only": best data-only ring, "r_data_only", "machine_us"}``; R and the data-only
    ratio are over the rings' median packets/s; rows without a ceiling have None figures."""
    plain = best_udp(limits)
    out = []
    for row, best in c["ceiling"].items():
        rs = c["runs"][row].get(best) or [] if best else []
        busbw = median_of(rs, "busbw_fraction")
        pps = ceiling_data_pps(busbw[0], best, hosts, payload) if busbw else None
        mixed = best_udp(limits, row)
        mix = median_of(rs, "control_per_data")
        cost = median_of(rs, "machine_us_per_packet")
        out.append({"row": row, "ceiling_mbit": best, "runs": len(rs), "busbw": busbw, "data_pps": pps,
                    "control_per_data": mix[0] if mix else None, "mixed": mixed,
                    "r": pps / mixed["pps"][0] if pps and mixed else None, "data_only": plain,
                    "r_data_only": pps / plain["pps"][0] if pps and plain else None,
                    "machine_us": cost[0] if cost else None})
    return out


def ratio_table(limits: list[dict], c: dict, *, hosts: int = 16, payload: int = 4096) -> Table:
    """R per row against the mixed ring, and the data-only ratio beside it (:func:`ratio_rows`)."""
    plain = best_udp(limits)
    at = f"{plain['pps'][0]:,.0f} data packets/s at {plain['rate_mbit']} Mbit/s links" if plain else "not run"
    t = Table(title="R: the ceiling in data packets/s over the kernel ring's, the ring carrying the same control "
                    f"datagrams per data packet (mixed) or data only ({at}); busbw median \\[min-max] of the "
                    "ceiling's runs")
    for col in ("transport, agents", "ceiling", "busbw / host", "data packets/s", "control per data",
                "mixed ring data packets/s", "R", "data-only ratio", "machine us/packet (ceiling)",
                "ring us/datagram (mixed)"):
        t.add_column(col, justify="right")
    for r in ratio_rows(limits, c, hosts=hosts, payload=payload):
        if r["ceiling_mbit"] is None:
            t.add_row(r["row"], "below the sweep", *["-"] * 8)
            continue
        b, m = r["busbw"], r["mixed"]
        ring_us = (m or {}).get("us_per_datagram")
        t.add_row(r["row"], f"{r['ceiling_mbit']} Mbit/s ({r['runs']} runs)",
                  f"{b[0]:.1%} [{b[1]:.1%}-{b[2]:.1%}]", f"{r['data_pps']:,.0f}",
                  f"{r['control_per_data']:.3f}" if r["control_per_data"] is not None else "-",
                  f"{m['pps'][0]:,.0f} [{m['pps'][1]:,.0f}-{m['pps'][2]:,.0f}] at {m['rate_mbit']} Mbit/s"
                  if m else "-",
                  f"{r['r']:.2f}" if r["r"] is not None else "-",
                  f"{r['r_data_only']:.2f}" if r["r_data_only"] is not None else "-",
                  f"{r['machine_us']:.0f}" if r["machine_us"] else "-",
                  f"{ring_us[0]:.1f}" if ring_us else "-")
    return t
