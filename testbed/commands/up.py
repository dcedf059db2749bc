"""``testbed up TOPO``: build a fabric, verify it, open the Mininet CLI, tear down.

Prints a summary (nodes per role, links, EVs per host pair, seconds per build
phase, reachability over every EV and ECMP pair), then opens Mininet's CLI with
commands for this fabric (:mod:`testbed.interactive`: ``pingall`` over IPv6, ``net``,
``links``, ``evs``, ``path``, ``down``/``up``/``rate``/``loss``; faults are reverted
when it exits). ``--no-cli`` waits for Ctrl-C instead of opening the CLI; ``--once``
tears down right after the verification (exit 1 if anything was unreachable). ``--path
SRC:DST[:udp|tcp[:SPORT[:DPORT]]]`` (repeatable) prints the links an ECMP flow with
that 5-tuple crosses, traced on the fabric (:mod:`testbed.fabric.paths`), before the CLI opens.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from testbed.fabric.local import Fabric
from testbed.fabric.kernel import features
from testbed.spec import SpecError, load_topology
from testbed.model.topology import Topology
from testbed.fabric.verify import Reachability, probe


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="build a topology, verify it, open the Mininet CLI, tear down",
                       description=__doc__.splitlines()[0])
    p.add_argument("topology", metavar="TOPO", help="topology YAML file")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--no-cli", action="store_true", help="wait for Ctrl-C instead of the Mininet CLI")
    mode.add_argument("--once", action="store_true", help="build, verify and tear down at once")
    p.add_argument("--no-verify", action="store_true", help="skip the reachability probes")
    p.add_argument("--path", action="append", default=[], metavar="SRC:DST[:PROTO[:SPORT[:DPORT]]]",
                   help="print the traced path of an ECMP flow between two hosts (proto udp or tcp, "
                        "default udp:49152:4791; repeatable)")
    p.set_defaults(func=run)


def parse_path(text: str, topo: Topology):
    """``SRC:DST[:PROTO[:SPORT[:DPORT]]]`` -> a :class:`testbed.fabric.paths.Flow`; ValueError naming
    what is wrong."""
    from testbed.interactive import host_flow
    parts = text.split(":")
    if not 2 <= len(parts) <= 5:
        raise ValueError(f"--path {text!r}: expected SRC:DST[:PROTO[:SPORT[:DPORT]]]")
    try:
        return host_flow(topo, *parts)
    except ValueError as exc:
        raise ValueError(f"--path {text!r}: {exc}") from None


def summary_table(topo: Topology) -> Table:
    """Nodes per role, links per class, EVs per host pair (count -> pairs)."""
    table = Table(title=f"fabric {topo.name}", show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    for role, n in sorted(Counter(node.role.value for node in topo.nodes.values()).items()):
        table.add_row(f"nodes: {role}", str(n))
    for cls, n in sorted(Counter(link.cls for link in topo.links).items()):
        rate = {l.params.rate_bps for l in topo.links if l.cls == cls}
        table.add_row(f"links: {cls} ({', '.join(f'{r / 1e6:g} Mbit/s' for r in sorted(rate))})", str(n))
    hosts = [h.name for h in topo.hosts]
    per_pair = Counter(len(topo.evs(a, b)) for a in hosts for b in hosts if a != b)
    for evs, pairs in sorted(per_pair.items()):
        table.add_row(f"host pairs with {evs} EV(s)", str(pairs))
    return table


def timing_table(timings: dict[str, float]) -> Table:
    table = Table(title="build phases")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    for phase, secs in timings.items():
        table.add_row(phase, f"{secs:.3f}")
    table.add_row("total", f"{sum(v for k, v in timings.items() if k != 'teardown'):.3f}", style="bold")
    return table


def reachability_line(r: Reachability) -> str:
    s = r.summary()
    ok = not r.lost
    mark = "[green]verified[/]" if ok else "[red]UNREACHABLE[/]"
    return (f"{mark}: {s['evs_ok']}/{s['evs_probed']} EVs (SRv6 uSID), "
            f"{s['ecmp_pairs_ok']}/{s['ecmp_pairs_probed']} host pairs (ECMP) in {r.seconds:.2f}s")


def run(args: argparse.Namespace) -> int:
    console = Console()
    try:
        topo = load_topology(args.topology, features=features())
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        flows = [parse_path(text, topo) for text in args.path]
    except ValueError as exc:
        print(f"testbed up: {exc}", file=sys.stderr)
        return 2
    console.print(summary_table(topo))
    status = 0
    signal.signal(signal.SIGTERM, _raise_interrupt)
    fabric = Fabric(topo, have_netem=features().netem)
    try:
        with console.status(f"building {topo.name}"):
            fabric.start()
        console.print(timing_table(fabric.timings))
        if not args.no_verify:
            result = probe(fabric)
            console.print(reachability_line(result))
            for src, dst, ev_id in sorted(result.lost)[:10]:
                console.print(f"  lost: {src} -> {dst} " + (f"EV {ev_id}" if ev_id >= 0 else "ECMP"))
            status = 1 if result.lost else 0
        if flows:
            from testbed.fabric.paths import trace_flows
            for tf in trace_flows(fabric, flows):
                hops = " ".join([tf.flow.src_host] + [h.next for h in tf.hops])
                console.print(f"path {escape(tf.flow.label)}: {escape(hops)} ({tf.outcome})", highlight=False)
        if args.once:
            return status
        if args.no_cli:
            console.print("fabric is up; Ctrl-C tears it down")
            signal.pause()
        else:
            from testbed.interactive import open_cli
            open_cli(fabric)
    except KeyboardInterrupt:
        console.print("interrupted")
    finally:
        seconds = fabric.stop()
        console.print(f"torn down in {seconds:.3f}s")
    return status


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
