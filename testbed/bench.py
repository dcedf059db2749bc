"""``make bench``: bring-up/teardown seconds of our fabric vs plain Mininet, and MRC packets/s.

Fabric: fat-tree k=4 and k=8 built by :class:`testbed.fabric.Fabric`, next to
the same graph built the plain Mininet way in the same run (routers as
``Node``, one ``Link`` per edge via ``Mininet.addLink``, ``net.stop()``),
with the ratio. Targets (issue 2): k=8 up within 3 s and down within 2 s.
Transport: ``agents.mrc.bench.run()`` if present (MRC data path vs a plain
Python UDP loop, packets per CPU-second).
Metrics: seconds per transport to analyse a synthetic fat-tree k=4 run of 60 s
(:mod:`testbed.metrics.synthetic`: 16 ranks sampled every 10 ms, 48 links x 2
ends every 100 ms), parse + analyse (``metrics.analyze_run``) and the whole
``testbed report`` computation (``report.write_outputs``: + CSV files and
summary.json); target 2 s per transport.
"""

from __future__ import annotations

import argparse
import importlib
import json
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from testbed.fabric import Fabric
from testbed.topology import LinkParams, Topology, fat_tree

TARGET_UP_S = {8: 3.0}
TARGET_DOWN_S = {8: 2.0}
TARGET_METRICS_S = 2.0  # per transport, k=4 60 s run


def bench_fabric(topo: Topology) -> tuple[float, float, dict[str, float]]:
    """(up seconds, down seconds, phase timings) for our fabric."""
    fabric = Fabric(topo)
    t0 = time.perf_counter()
    fabric.start()
    up = time.perf_counter() - t0
    down = fabric.stop()
    return up, down, dict(fabric.timings)


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
    parser = argparse.ArgumentParser(prog="python -m testbed.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8], help="fat-tree sizes")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is reported)")
    parser.add_argument("--no-mininet", action="store_true", help="skip the plain-Mininet baseline")
    parser.add_argument("--no-transport", action="store_true", help="skip the MRC data-path bench")
    parser.add_argument("--no-fabric", action="store_true", help="skip the fabric bring-up bench (needs root)")
    parser.add_argument("--no-metrics", action="store_true", help="skip the metrics/report bench")
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
            transport = importlib.import_module("agents.mrc.bench").run()
        except ModuleNotFoundError:
            transport = None
    metrics_row = None if args.no_metrics else bench_metrics(args.repeat)
    if args.json:
        print(json.dumps({"fabric": rows, "transport": transport, "metrics": metrics_row}, indent=1))
        return 0
    if rows:
        console.print(_fabric_table(rows))
    if transport is not None:
        console.print(_transport_table(transport))
    if metrics_row is not None:
        console.print(_metrics_table(metrics_row))
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
