"""``make bench``: bring-up/teardown seconds of our fabric vs plain Mininet, and MRC packets/s.

Fabric: fat-tree k=4 and k=8 built by :class:`testbed.fabric.local.Fabric`, next to
the same graph built the plain Mininet way in the same run (routers as
``Node``, one ``Link`` per edge via ``Mininet.addLink``, ``net.stop()``),
with the ratio. Targets: k=8 up within 3 s and down within 2 s.
Transport: ``agents.net.bench.run()`` if present (MRC data path vs a plain
Python UDP loop, packets per CPU-second).
Metrics: seconds per transport to analyse a synthetic fat-tree k=4 run of 60 s
(:mod:`testbed.metrics.synthetic`: 16 ranks sampled every 10 ms, 48 links x 2
ends every 100 ms), parse + analyse (``metrics.analyze_run``) and the whole
``testbed report`` computation (``report.write_outputs``: + CSV files and
summary.json); target 2 s per transport.
Fabric ceiling: ``scenarios/baseline.yaml``'s all-reduce (16 ranks, k=4) on
fresh fabrics at a sweep of link rates (the topology's link classes with only the rate
changed; sizes scaled so an iteration takes ~1 s), one run per transport and rate; a rate
passes when the run is valid (agents not starved, see ``testbed.metrics.fidelity``) and its
busbw is at least :data:`CEILING_BUSBW` of the host link. The ceiling is the highest rate
that passes; kernel TCP is the yardstick. Target: mrc at 100 Mbit/s or more, and at least
half of tcp's. Needs root; a transport's sweep stops after two failing rates in a row.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from testbed.fabric.local import Fabric
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams, Topology
from testbed.fabric.kernel import features
from testbed.tools.cost import packet_cost

TARGET_UP_S = {8: 3.0}
TARGET_DOWN_S = {8: 2.0}
TARGET_METRICS_S = 2.0  # per transport, k=4 60 s run
CEILING_RATES_MBIT = (5, 10, 20, 50, 100, 200)
CEILING_TRANSPORTS = ("mrc", "rc", "tcp")
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
                  agent_models: tuple = (None,), payload: int | None = None, realtime: bool = False) -> dict:
    """The fabric ceiling sweep (module docstring): ``{"rates": [...], "runs": {row:
    {rate: {"busbw_fraction", "valid", "cpu_p95", "runner_cpu", "reasons"}}}, "ceiling":
    {row: rate | None}}`` (rates in Mbit/s), a row per transport and agent model
    (``agent_models``: ``"per-host"`` one process per agent, N host runtimes, None the
    default; a row is named ``"mrc"`` for the default alone, else ``"mrc, <model>"``).
    ``payload`` (bytes per data packet, ``workload.payload``) and ``realtime``
    (``agent_realtime``) apply to every run and are named in the rows."""
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
        for transport, model in [(t, m) for t in transports for m in agent_models]:
            row = transport if tuple(agent_models) == (None,) else f"{transport}, {agent_model_name(model)}"
            row += (f", payload {payload}" if payload else "") + (", SCHED_RR" if realtime else "")
            runs, fails, best = {}, 0, None
            for rate in rates_mbit:
                sc = _at_rate(base, rate * 1_000_000, dataclasses)
                if payload:
                    sc = dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, payload=payload))
                sc = dataclasses.replace(sc, agent_realtime=realtime)
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


def bench_fabric(topo: Topology) -> tuple[float, float, dict[str, float]]:
    """(up seconds, down seconds, phase timings) for our fabric; ``counters_read_ms``: the median
    of 20 :meth:`LinkCounters.read` on it (polled every 100 ms by the runner: target 30 ms)."""
    fabric = Fabric(topo)
    t0 = time.perf_counter()
    fabric.start()
    up = time.perf_counter() - t0
    try:
        counters = fabric.link_counters()
        reads = []
        for _ in range(20):
            t1 = time.perf_counter()
            counters.read()
            reads.append(time.perf_counter() - t1)
    finally:
        down = fabric.stop()
    return up, down, {**fabric.timings, "counters_read_ms": statistics.median(reads) * 1e3}


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


TARGET_SPEC_S = {"fat_tree(40) build": 10.0, "refuse a k=16 fat-tree": 1.0, "refuse a 4096x4096 leaf-spine": 1.0}
"""Bounds on the pure model and the spec checks (they run before anything is built)."""


def bench_spec(repeat: int = 3) -> dict[str, float]:
    """Median seconds of: building ``fat_tree(40)`` (48,000 links: linear in links), and
    refusing a k=16 fat-tree and a 4096 x 4096 leaf-spine as too large for a 24 GiB machine
    from their counts alone (nothing built)."""
    import statistics as st
    from unittest import mock

    from testbed.model.kernel import KernelFeatures
    from testbed.spec import SpecError, load_file, topofile

    feats = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
    classes = "link_classes: {host: {rate: 1Mbit}, fabric: {rate: 1Mbit}}\n"
    lp = LinkParams(10_000_000, 64)
    out: dict[str, list[float]] = {k: [] for k in TARGET_SPEC_S}
    with tempfile.TemporaryDirectory() as d, mock.patch.object(topofile, "machine_memory_bytes",
                                                               lambda: 24 * 2**30):
        files = {"refuse a k=16 fat-tree": "kind: fat-tree\nk: 16\n",
                 "refuse a 4096x4096 leaf-spine": "kind: leaf-spine\nleaves: 4096\nspines: 4096\nhosts_per_leaf: 1\n"}
        for _ in range(repeat):
            t0 = time.perf_counter()
            fat_tree(40, host_link=lp, fabric_link=lp)
            out["fat_tree(40) build"].append(time.perf_counter() - t0)
            for name, text in files.items():
                path = Path(d) / "t.yaml"
                path.write_text(text + classes)
                t0 = time.perf_counter()
                try:
                    load_file(path, features=feats)
                except SpecError:
                    pass
                out[name].append(time.perf_counter() - t0)
    return {k: st.median(v) for k, v in out.items()}


def bench_plain_mininet(topo: Topology) -> tuple[float, float]:
    """(up, down) seconds for the same graph built the plain Mininet way (no routes, no tc)."""
    from mininet.net import Mininet
    from mininet.node import Host, Node

    t0 = time.perf_counter()
    net = Mininet(build=False, controller=None, autoSetMacs=False, autoStaticArp=False)
    for node in topo.nodes.values():
        net.addHost(node.name, cls=Host if node.role.value == "host" else Node, ip=None)
    for link in topo.links:
        net.addLink(link.a.node, link.b.node, intfName1=link.a.ifname, intfName2=link.b.ifname)
    net.build()
    up = time.perf_counter() - t0
    t1 = time.perf_counter()
    net.stop()
    return up, time.perf_counter() - t1


def bench_metrics(repeat: int = 3, duration_s: float = 60.0) -> dict:
    """Seconds per transport (best of ``repeat``) to analyse a synthetic k=4 run: ``analyse_s``
    (parse + analyse) and ``report_s`` (the same plus writing the CSV files and summary.json)."""
    from testbed import metrics, report
    from testbed.metrics import synthetic

    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        run = synthetic.write_run(Path(tmp) / "run", duration_s=duration_s)
        transports = metrics.load_manifest(run)["transports"]
        lines = {f: sum(1 for _ in open(run / transports[0] / f)) for f in ("samples.jsonl", "links.jsonl")}

        def best(fn) -> float:
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn(run)
                times.append(time.perf_counter() - t0)
            return min(times) / len(transports)

        analyse, write = best(metrics.analyze_run), best(report.write_outputs)
    return {"transports": len(transports), "duration_s": duration_s, "lines_per_transport": lines,
            "analyse_s": analyse, "report_s": write, "target_s": TARGET_METRICS_S}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.tools.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8], help="fat-tree sizes")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is reported)")
    parser.add_argument("--no-mininet", action="store_true", help="skip the plain-Mininet baseline")
    parser.add_argument("--no-transport", action="store_true", help="skip the MRC data-path bench")
    parser.add_argument("--no-fabric", action="store_true", help="skip the fabric bring-up bench (needs root)")
    parser.add_argument("--no-metrics", action="store_true", help="skip the metrics/report bench")
    parser.add_argument("--no-spec", action="store_true", help="skip the model/spec-check bench")
    parser.add_argument("--no-limit", action="store_true", help="skip the kernel ring limit (iperf3, needs root)")
    parser.add_argument("--limit-rates", type=int, nargs="+", default=[10, 100, 200, 500, 1000], metavar="MBIT",
                        help="link rates of the kernel ring limit, Mbit/s (the best UDP figure is the limit "
                             "the ceilings are set against)")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the fabric ceiling sweep (needs root)")
    parser.add_argument("--ceiling-rates", type=int, nargs="+", default=list(CEILING_RATES_MBIT),
                        metavar="MBIT", help="link rates of the ceiling sweep, Mbit/s")
    parser.add_argument("--ceiling-transports", nargs="+", default=list(CEILING_TRANSPORTS),
                        help="transports of the ceiling sweep")
    parser.add_argument("--ceiling-agents", nargs="+", default=[str(os.cpu_count() or 1)],
                        metavar="MODEL", help="agent models of the ceiling sweep: per-host (one process per "
                                              "agent) and/or N (N host runtimes); default: one runtime per core")
    parser.add_argument("--ceiling-payload", type=int, default=None, metavar="BYTES",
                        help="payload bytes per mrc/rc data packet in the ceiling sweep (workload.payload; "
                             "default 4096)")
    parser.add_argument("--ceiling-realtime", action="store_true",
                        help="run the ceiling sweep's agents at SCHED_RR (agent_realtime)")
    parser.add_argument("--profile", nargs="*", metavar="TRANSPORT@MBIT", default=None,
                        help="py-spy profiles of the agents' processes on the ceiling's fabric, attributed per "
                             "category (default with no value: mrc@20 rc@20)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 150))
    lp = LinkParams(10_000_000, 64)
    rows = []
    for k in [] if args.no_fabric else args.k:
        topo = fat_tree(k, host_link=lp, fabric_link=lp)
        ours = [bench_fabric(topo) for _ in range(args.repeat)]
        up, down = min(r[0] for r in ours), min(r[1] for r in ours)
        phases = min(ours, key=lambda r: r[0])[2]
        row = {"k": k, "nodes": len(topo.nodes), "links": len(topo.links), "up_s": up, "down_s": down,
               "phases": phases, "target_up_s": TARGET_UP_S.get(k), "target_down_s": TARGET_DOWN_S.get(k)}
        if not args.no_mininet:
            plain = [bench_plain_mininet(topo) for _ in range(1 if k >= 8 else args.repeat)]
            row["mininet_up_s"] = min(p[0] for p in plain)
            row["mininet_down_s"] = min(p[1] for p in plain)
        rows.append(row)
    transport = None
    if not args.no_transport:
        try:
            transport = importlib.import_module("agents.net.bench").run()
        except ModuleNotFoundError:
            transport = None
    metrics_row = None if args.no_metrics else bench_metrics(args.repeat)
    spec_row = None if args.no_spec else bench_spec(args.repeat)
    limits = [] if args.no_limit else [bench_kernel_limit(r, datagram=args.ceiling_payload or MRC_DATAGRAM_BYTES)
                                       for r in args.limit_rates]
    profiles = []
    for item in [] if args.profile is None else (args.profile or ["mrc@20", "rc@20"]):
        transport_name, _, rate = item.partition("@")
        profiles.append(bench_profile(transport_name, int(rate or 20)))
    ceiling = None
    if not args.no_ceiling:
        def note(transport, rate, r):
            Console(stderr=True).print(f"ceiling: {transport} at {rate} Mbit/s: busbw "
                                       f"{(r['busbw_fraction'] or 0) * 100:.1f}% of the host link, "
                                       f"{'valid' if r['valid'] else 'invalid'}")
        models = tuple(m if m == "per-host" else int(m) for m in args.ceiling_agents)
        ceiling = bench_ceiling(sorted(args.ceiling_rates), args.ceiling_transports, progress=note,
                                agent_models=models, payload=args.ceiling_payload, realtime=args.ceiling_realtime)
    if args.json:
        print(json.dumps({"fabric": rows, "transport": transport, "metrics": metrics_row, "spec": spec_row,
                          "kernel_limit": limits, "ceiling": ceiling, "profiles": profiles}, indent=1))
        return 0
    if rows:
        console.print(_fabric_table(rows))
    if transport is not None:
        console.print(_transport_table(transport))
    if metrics_row is not None:
        console.print(_metrics_table(metrics_row))
    if spec_row is not None:
        table = Table(title="model and spec checks (median s)")
        for col in ("what", "seconds", "target"):
            table.add_column(col)
        for what, secs in spec_row.items():
            table.add_row(what, f"{secs:.3f}", f"< {TARGET_SPEC_S[what]:g}")
        console.print(table)
    if limits:
        console.print(_limit_table(limits))
    if ceiling is not None:
        console.print(_ceiling_table(ceiling))
    if profiles:
        console.print(_profile_table(profiles))
    if ceiling is not None and limits:
        console.print(_versus_table(limits, ceiling))
    return 0


def bench_profile(transport: str, rate_mbit: int, *, scenario_path: Path = CEILING_SCENARIO) -> dict:
    """One ceiling run (:func:`_at_rate`) of ``transport`` at ``rate_mbit`` with py-spy on every
    agent process (:class:`testbed.tools.cost.Profiler`, 100 Hz, native frames): ``{"transport",
    "rate_mbit", "valid", "busbw_fraction", "samples": {category: n}, **packet_cost}``. py-spy
    pauses a process for each sample, so the run's own CPU figures are a little high."""
    import dataclasses
    import io
    import shutil

    from testbed.report.files import load_summary
    from testbed.run import run_scenario
    from testbed.spec import load_file
    from testbed.tools.cost import Profiler

    sc = _at_rate(load_file(scenario_path, features=features()), rate_mbit * 1_000_000, dataclasses)
    root = Path(tempfile.mkdtemp(prefix="mrc-profile-"))
    try:
        with Profiler(str(root), root / "py-spy") as prof:
            result = run_scenario(sc, runs_root=root, console=Console(file=io.StringIO()),
                                  transports=[transport], live=False)
        s = load_summary(result.run_dir)["transports"][transport]
        return {"transport": transport, "rate_mbit": rate_mbit, "valid": bool(s.get("valid")),
                "busbw_fraction": s.get("busbw_fraction_of_host"), "samples": prof.categories(),
                **packet_cost(result.run_dir / transport)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _profile_table(profiles: list[dict]) -> Table:
    from testbed.tools.cost import CATEGORIES

    t = Table(title="where the agents' processes spend their busy time (py-spy samples, % of busy; "
                    "syscalls include the kernel forwarding a send runs in its caller's context)")
    t.add_column("category")
    for p in profiles:
        t.add_column(f"{p['transport']} @ {p['rate_mbit']} Mbit/s", justify="right")
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


def _versus_table(limits: list[dict], c: dict) -> Table:
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


def _limit_table(limits: list[dict]) -> Table:
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


def _ceiling_table(c: dict) -> Table:
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


def _fabric_table(rows: list[dict]) -> Table:
    table = Table(title="fabric bring-up / teardown (seconds, best of runs)", expand=False)
    for col in ("fat-tree", "nodes", "links", "up", "down", "phases (up)", "mininet up", "mininet down",
                "up ratio", "down ratio", "target"):
        table.add_column(col, justify="right")
    for r in rows:
        phases = " ".join(f"{k}={v:.2f}" for k, v in r["phases"].items() if k != "teardown")
        m_up, m_down = r.get("mininet_up_s"), r.get("mininet_down_s")
        target = ""
        if r["target_up_s"]:
            ok = r["up_s"] <= r["target_up_s"] and r["down_s"] <= r["target_down_s"]
            target = f"up<={r['target_up_s']:g} down<={r['target_down_s']:g} " + ("[green]met[/]" if ok else "[red]missed[/]")
        table.add_row(f"k={r['k']}", str(r["nodes"]), str(r["links"]), f"{r['up_s']:.2f}", f"{r['down_s']:.3f}",
                      phases, f"{m_up:.2f}" if m_up else "-", f"{m_down:.2f}" if m_down else "-",
                      f"{m_up / r['up_s']:.1f}x" if m_up else "-", f"{m_down / r['down_s']:.0f}x" if m_down else "-",
                      target)
    return table


def _transport_table(result: dict) -> Table:
    table = Table(title="MRC data path (packets per CPU-second)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    flat = {}
    for key, value in result.items():
        if isinstance(value, dict):
            flat.update({f"{key} {k}": v for k, v in value.items() if k in ("pps_per_core", "goodput_bps", "bit_exact")})
        else:
            flat[key] = value
    for key, value in flat.items():
        table.add_row(key, f"{value:,.0f}" if isinstance(value, (int, float)) and abs(value) >= 10
                      else (f"{value:.2f}" if isinstance(value, float) else str(value)))
    if "ratio" in result and "target_ratio" in result:
        ok = result["ratio"] >= result["target_ratio"]
        table.add_row("target", f"ratio >= {result['target_ratio']:g} " + ("[green]met[/]" if ok else "[red]missed[/]"))
    return table


def _metrics_table(r: dict) -> Table:
    table = Table(title="metrics (seconds per transport, best of runs)")
    for col in ("figure", "parse + analyse", "+ CSV/JSON files", "target"):
        table.add_column(col, justify="right")
    ok = max(r["analyse_s"], r["report_s"]) <= r["target_s"]
    table.add_row(f"metrics: analyse a k4-scale {r['duration_s']:g} s run ({r['transports']} transports, "
                  f"{r['lines_per_transport']['samples.jsonl']:,} sample lines each)",
                  f"{r['analyse_s']:.2f}", f"{r['report_s']:.2f}",
                  f"<={r['target_s']:g} " + ("[green]met[/]" if ok else "[red]missed[/]"))
    return table


if __name__ == "__main__":
    raise SystemExit(main())
