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
Kernel limits (a data-only ring and one that carries MRC's packet mix, measured in the same
bench's ceiling run): :mod:`testbed.tools.kernel_limit`; fabric ceiling, R and agent profiles:
:mod:`testbed.tools.ceiling` (needs root).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from testbed.fabric.local import Fabric
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams, Topology
from testbed.tools.ceiling import (CEILING_ENGINES, CEILING_RATES_MBIT, CEILING_REPEAT, CEILING_TRANSPORTS,
                                   bench_ceiling, bench_profile, ceiling_table, mixes_of, profile_table, ratio_table)
from testbed.tools.kernel_limit import LIMIT_REPEAT, MRC_DATAGRAM_BYTES, bench_kernel_limit, limit_table, mixed_table

TARGET_UP_S = {8: 3.0}
TARGET_DOWN_S = {8: 2.0}
TARGET_METRICS_S = 2.0  # per transport, k=4 60 s run


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
    parser.add_argument("--limit-rates", type=int, nargs="+", default=[100, 200, 500], metavar="MBIT",
                        help="link rates of the kernel rings, Mbit/s (at 10 the machine idles, at 1000 the senders "
                             "overrun the receivers; the best median is the limit R is set against)")
    parser.add_argument("--limit-repeat", type=int, default=LIMIT_REPEAT, metavar="N",
                        help="interleaved runs of each UDP ring per link rate (medians are reported)")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the fabric ceiling sweep (needs root)")
    parser.add_argument("--ceiling-rates", type=int, nargs="+", default=list(CEILING_RATES_MBIT),
                        metavar="MBIT", help="link rates of the ceiling sweep, Mbit/s")
    parser.add_argument("--ceiling-repeat", type=int, default=CEILING_REPEAT, metavar="N",
                        help="interleaved runs per transport and rate of the ceiling sweep (a rate passes when "
                             "every one does)")
    parser.add_argument("--ceiling-transports", nargs="+", default=list(CEILING_TRANSPORTS),
                        help="transports of the ceiling sweep")
    parser.add_argument("--ceiling-agents", nargs="+", default=[str(os.cpu_count() or 1)],
                        metavar="MODEL", help="agent models of the ceiling sweep: per-host (one process per "
                                              "agent) and/or N (N host runtimes); default: one runtime per core")
    parser.add_argument("--ceiling-payload", type=int, default=None, metavar="BYTES",
                        help="payload bytes per mrc/rc data packet in the ceiling sweep (workload.payload; "
                             "default 4096)")
    parser.add_argument("--ceiling-engines", nargs="+", default=list(CEILING_ENGINES), choices=list(CEILING_ENGINES),
                        help="MRC engines of the ceiling sweep's mrc and rc rows")
    parser.add_argument("--ceiling-realtime", action="store_true",
                        help="run the ceiling sweep's agents at SCHED_RR (agent_realtime)")
    parser.add_argument("--profile", nargs="*", metavar="TRANSPORT@MBIT[:ENGINE]", default=None,
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
    profiles = []
    for item in [] if args.profile is None else (args.profile or ["mrc@20", "rc@20"]):
        transport_name, _, rest = item.partition("@")
        rate, _, engine = rest.partition(":")
        profiles.append(bench_profile(transport_name, int(rate or 20), engine=engine or None))
    ceiling = None
    if not args.no_ceiling:
        def note(transport, rate, r):
            mix = f", {r['control_per_data']:.3f} control per data" if r.get("control_per_data") is not None else ""
            Console(stderr=True).print(f"ceiling: {transport} at {rate} Mbit/s: busbw "
                                       f"{(r['busbw_fraction'] or 0) * 100:.1f}% of the host link, "
                                       f"{'valid' if r['valid'] else 'invalid'}{mix}")
        models = tuple(m if m == "per-host" else int(m) for m in args.ceiling_agents)
        ceiling = bench_ceiling(sorted(args.ceiling_rates), args.ceiling_transports, progress=note,
                                agent_models=models, payload=args.ceiling_payload, realtime=args.ceiling_realtime,
                                engines=tuple(args.ceiling_engines), repeat=args.ceiling_repeat)
    # after the ceiling: its runs' control datagrams per data packet make the mixed rings, run
    # interleaved with the data-only ring on the same fabric
    limits = [] if args.no_limit else [
        bench_kernel_limit(r, datagram=args.ceiling_payload or MRC_DATAGRAM_BYTES, repeat=args.limit_repeat,
                           mixes=mixes_of(ceiling) if ceiling is not None else None)
        for r in args.limit_rates]
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
        console.print(limit_table(limits))
    if any(any(r["mixed"].values()) for r in limits):
        console.print(mixed_table(limits))
    if ceiling is not None:
        console.print(ceiling_table(ceiling))
    if profiles:
        console.print(profile_table(profiles))
    if ceiling is not None and limits:
        console.print(ratio_table(limits, ceiling, payload=args.ceiling_payload or MRC_DATAGRAM_BYTES))
    return 0


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
