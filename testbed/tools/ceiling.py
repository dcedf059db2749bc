"""``make bench``'s fabric ceiling and the kernel fabric's own limit beside it.

Kernel limit: fat-tree k=4's ring (16 flows at once) driven by iperf3 with no agents, TCP and UDP
(datagrams of the data packets' payload, offered at the link rate), at a list of link rates.
Fabric ceiling: ``scenarios/baseline.yaml``'s all-reduce (16 ranks, k=4) on fresh fabrics at a
sweep of link rates (the topology's link classes with only the rate changed; sizes scaled so
an iteration takes ~1 s), one run per transport and rate; a rate passes when the run is valid
(agents not starved, see ``testbed.metrics.fidelity``) and its busbw is at least
:data:`CEILING_BUSBW` of the host link. The ceiling is the highest rate that passes; each run's
CPU per delivered data packet (:func:`testbed.tools.cost.packet_cost`) is beside it, and the
ceilings are set against the kernel's best UDP figure. Profiles: py-spy on a ceiling run's
agents (:class:`testbed.tools.cost.Profiler`). Needs root.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from testbed.fabric.kernel import features
from testbed.fabric.local import Fabric
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams
from testbed.tools.cost import packet_cost

CEILING_RATES_MBIT = (5, 10, 20, 50, 100, 200)
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


def bench_ceiling(rates_mbit=CEILING_RATES_MBIT, transports=CEILING_TRANSPORTS, *,
                  scenario_path: Path = CEILING_SCENARIO, progress=None,
                  agent_models: tuple = (None,), payload: int | None = None, realtime: bool = False,
                  engines: tuple = CEILING_ENGINES) -> dict:
    """The fabric ceiling sweep (module docstring): ``{"rates": [...], "runs": {row:
    {rate: {"busbw_fraction", "valid", "cpu_p95", "runner_cpu", "reasons"}}}, "ceiling":
    {row: rate | None}}`` (rates in Mbit/s), a row per transport and agent model
    (``agent_models``: ``"per-host"`` one process per agent, N host runtimes, None the
    default; a row is named ``"mrc"`` for the default alone, else ``"mrc, <model>"``).
    ``payload`` (bytes per data packet, ``workload.payload``) and ``realtime``
    (``agent_realtime``) apply to every run and are named in the rows; mrc and rc get a row per
    MRC engine of ``engines`` (``"mrc, native engine"``), kernel tcp one."""
    import dataclasses
    import io
    import shutil

    from testbed.report.files import load_summary
    from testbed.run import run_scenario
    from testbed.spec import load_file

    base = load_file(scenario_path, features=features())
    quiet = Console(file=io.StringIO(), width=120)
    out = {"rates": list(rates_mbit), "runs": {}, "ceiling": {}}
    root = Path(tempfile.mkdtemp(prefix="mrc-ceiling-"))
    try:
        plan = [(t, m, e) for t in transports for e in (("kernel",) if t == "tcp" else engines)
                for m in agent_models]
        for transport, model, engine in plan:
            row = transport if tuple(agent_models) == (None,) else f"{transport}, {agent_model_name(model)}"
            row += (f", payload {payload}" if payload else "") + (", SCHED_RR" if realtime else "")
            row += "" if engine == "kernel" else f", {engine} engine"
            runs, fails, best = {}, 0, None
            for rate in rates_mbit:
                sc = _at_rate(base, rate * 1_000_000, dataclasses)
                if payload:
                    sc = dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, payload=payload))
                sc = dataclasses.replace(sc, agent_realtime=realtime,
                                         engine=sc.engine if engine == "kernel" else engine)
                result = run_scenario(sc, runs_root=root, console=quiet, transports=[transport], live=False,
                                      agent_processes=model)
                s = load_summary(result.run_dir)["transports"][transport]
                v = s.get("validity") or {}
                ok = bool(s.get("valid")) and (s.get("busbw_fraction_of_host") or 0) >= CEILING_BUSBW
                try:
                    cost = packet_cost(result.run_dir / transport)
                except (OSError, ValueError, KeyError):
                    cost = {}
                runs[rate] = {"busbw_fraction": s.get("busbw_fraction_of_host"), "valid": bool(s.get("valid")),
                              "cpu_p95": v.get("cpu_p95"), "status": result.status.get(transport),
                              "runner_cpu": ((s.get("fidelity") or {}).get("runner_cpu") or {}).get("fraction"),
                              "reasons": s.get("invalid_reasons") or [],
                              "agent_us_per_packet": cost.get("agent_us_per_packet"),
                              "machine_us_per_packet": cost.get("machine_us_per_packet"),
                              "packets_per_s": cost.get("packets_per_s")}
                if progress is not None:
                    progress(row, rate, runs[rate])
                shutil.rmtree(result.run_dir, ignore_errors=True)
                if ok:
                    best, fails = rate, 0
                else:
                    fails += 1
                    if fails >= 2:
                        break
            out["runs"][row], out["ceiling"][row] = runs, best
    finally:
        shutil.rmtree(root, ignore_errors=True)
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


LIMIT_SECONDS = 8.0
"""Seconds each iperf3 client of the kernel-limit ring runs."""
MRC_DATAGRAM_BYTES = 4096
"""UDP payload of the kernel-limit ring's datagrams: MRC's default payload (packets, not bits, cost)."""


def ring_pairs(hosts: list[str]) -> list[tuple[str, str]]:
    """The ring of the baseline all-reduce: host i sends to host i+1 (the last to the first)."""
    return [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]


def iperf3_totals(reports: list[dict], seconds: float, datagram: int = MRC_DATAGRAM_BYTES) -> dict:
    """Per-host and total delivered rate of iperf3 ``-J`` client reports (one per ring flow):
    ``{"flows", "mbit_per_host", "mbit_total", "pps_total", "lost_pct"}``; TCP reports have no
    packet counts (pps None). Raises KeyError for a report without ``end``."""
    bits, pkts, lost, sent = 0.0, 0, 0, 0
    udp = False
    for r in reports:
        end = r["end"]
        if "sum" in end and "packets" in end["sum"]:       # UDP: what the receiver got
            udp = True
            s = end["sum"]
            got = s["packets"] - s.get("lost_packets", 0)
            pkts += got
            sent += s["packets"]
            lost += s.get("lost_packets", 0)
            bits += got * datagram * 8 / seconds
        else:
            bits += end["sum_received"]["bits_per_second"]
    n = len(reports)
    return {"flows": n, "mbit_per_host": bits / n / 1e6 if n else 0.0, "mbit_total": bits / 1e6,
            "pps_total": pkts / seconds if udp else None, "lost_pct": 100.0 * lost / sent if udp and sent else None}


def bench_kernel_limit(rate_mbit: int, *, seconds: float = LIMIT_SECONDS,
                       datagram: int = MRC_DATAGRAM_BYTES) -> dict:
    """The kernel fabric's own ring capacity, no agents: fat-tree k=4 at ``rate_mbit`` on every
    link (queue 32, MTU 9000, as topologies/fat-tree-k4.yaml), the baseline's 16-flow ring (host i -> i+1 over the ECMP addresses) driven at once by
    iperf3, TCP, then UDP with MRC's datagram size offered at the link rate. Returns
    ``{"rate_mbit", "datagram", "tcp": totals, "udp": totals}`` (:func:`iperf3_totals`);
    ``datagram``: the UDP payload bytes. Needs root."""
    lp = LinkParams(rate_mbit * 1_000_000, 32, mtu=9000)   # topologies/fat-tree-k4.yaml's classes
    topo = fat_tree(4, host_link=lp, fabric_link=lp)
    out = {"rate_mbit": rate_mbit, "datagram": datagram}
    with Fabric(topo) as fabric:
        pairs = ring_pairs([h.name for h in topo.hosts])
        for proto in ("tcp", "udp"):
            servers = [fabric.popen(dst, ["iperf3", "-s", "-1", "-p", str(5301 + i)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                       for i, (_, dst) in enumerate(pairs)]
            time.sleep(0.5)   # iperf3 -s has no readiness signal; its socket is bound within ms
            extra = ["-u", "-b", f"{rate_mbit}M", "-l", str(datagram)] if proto == "udp" else []
            clients = [fabric.popen(src, ["iperf3", "-c", str(topo.nics[dst][0].address), "-p", str(5301 + i),
                                          "-t", str(seconds), "-J", *extra],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                       for i, (src, dst) in enumerate(pairs)]
            reports = [json.loads(c.communicate(timeout=seconds + 30)[0]) for c in clients]
            for srv in servers:
                srv.wait(timeout=10)
            out[proto] = iperf3_totals(reports, seconds, datagram)
    return out


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


def kernel_udp_limit(limits: list[dict]) -> tuple[float, int]:
    """(Mbit/s per host, link Mbit/s) of the best UDP ring of :func:`bench_kernel_limit` runs."""
    best = max(limits, key=lambda r: r["udp"]["mbit_per_host"])
    return best["udp"]["mbit_per_host"], best["rate_mbit"]


def versus_table(limits: list[dict], c: dict) -> Table:
    limit, at = kernel_udp_limit(limits)
    t = Table(title=f"ceilings against the kernel fabric's own limit: UDP ring with {limits[0]['datagram']}-byte "
                    f"datagrams, {limit:.1f} Mbit/s per host (best, at {at} Mbit/s links); CPU per delivered "
                    "data packet at the ceiling (agents' processes / whole machine)")
    for col in ("transport, agents", "ceiling", "busbw Mbit/s per host", "of the kernel limit",
                "data packets/s", "agents us/packet", "machine us/packet"):
        t.add_column(col, justify="right")
    for row, best in c["ceiling"].items():
        r = c["runs"][row].get(best) if best else None
        if r is None:
            t.add_row(row, "below the sweep", "-", "-", "-", "-", "-")
            continue
        mbit = (r["busbw_fraction"] or 0) * best

        def us(v):
            return f"{v:.0f}" if v else "-"
        t.add_row(row, f"{best} Mbit/s", f"{mbit:.1f}", f"{mbit / limit:.0%}",
                  f"{r['packets_per_s']:,.0f}" if r.get("packets_per_s") else "-",
                  us(r.get("agent_us_per_packet")), us(r.get("machine_us_per_packet")))
    return t


def limit_table(limits: list[dict]) -> Table:
    table = Table(title=f"kernel fabric limit: fat-tree k=4 ring (16 flows at once), iperf3, no agents, "
                        f"{LIMIT_SECONDS:g} s; UDP with {limits[0]['datagram']}-byte datagrams (the data packets' "
                        "payload) at the link rate")
    for col in ("link Mbit/s", "TCP Mbit/s per host", "TCP total", "UDP Mbit/s per host", "UDP total",
                "UDP packets/s (all)", "UDP lost"):
        table.add_column(col, justify="right")
    for r in limits:
        t, u = r["tcp"], r["udp"]
        table.add_row(str(r["rate_mbit"]), f"{t['mbit_per_host']:.1f}", f"{t['mbit_total']:.0f}",
                      f"{u['mbit_per_host']:.1f}", f"{u['mbit_total']:.0f}", f"{u['pps_total']:.0f}",
                      f"{u['lost_pct']:.2f}%")
    return table


def ceiling_table(c: dict) -> Table:
    t = Table(title=f"fabric ceiling: fat-tree k=4 all-reduce, busbw / host link per rate (pass: valid and "
                    f">= {CEILING_BUSBW:.0%})")
    t.add_column("transport, agents")
    for rate in c["rates"]:
        t.add_column(f"{rate} Mbit/s", justify="right")
    t.add_column("ceiling", justify="right")
    for transport, runs in c["runs"].items():
        cells = []
        for rate in c["rates"]:
            r = runs.get(rate)
            if r is None:
                cells.append("-")
                continue
            mark = "" if r["valid"] else " (invalid)"
            cost = f", {r['machine_us_per_packet']:.0f} us/pkt" if r.get("machine_us_per_packet") else ""
            cells.append(f"{(r['busbw_fraction'] or 0) * 100:.1f}%{mark}{cost}")
        best = c["ceiling"].get(transport)
        t.add_row(transport, *cells, f"{best} Mbit/s" if best else "below the sweep")
    return t
