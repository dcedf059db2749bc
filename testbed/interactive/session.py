"""The interactive fabric's commands, without Mininet: arguments, output, and :class:`Session`
(pingall, evs, path, faults through the scenario runner's :class:`testbed.faults.FaultInjector`).

Pure functions parse arguments (raising :class:`CommandError` with the fix) and format
output; :class:`Session` runs the commands on a started fabric and returns lines to print.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.model import units
from testbed.faults import Blackhole, FaultInjector, LinkState, Loss, Rate, Reconverge
from testbed.fabric.paths import FiveTuple, Flow, TraceError, TracedFlow, trace_flows
from testbed.model.topology import Topology
from testbed.model.errors import InputError

DEFAULT_SPORT, DEFAULT_DPORT = 49152, 4791
PING_TIMEOUT_S = 1
PINGS_IN_FLIGHT = 512        # concurrent ping processes at most (k8: 16k pairs)
_PING_SCRIPT = ('w=$1; shift; for d in "$@"; do n=${d%%=*}; '
                '(ping -6 -n -q -c1 -W"$w" "${d#*=}" >/dev/null 2>&1 && echo "$n ok" || echo "$n x") & '
                'done; wait')
"""Run in a source host as ``bash -c SCRIPT pingall TIMEOUT_S NAME=ADDR...``: one line
``NAME ok|x`` per destination."""


class CommandError(InputError):
    """A CLI command's arguments are wrong; the message says what and how to fix it."""


# -- arguments (pure) -----------------------------------------------------------------------
def host(topo: Topology, name: str) -> str:
    """``name`` if it is a host of ``topo``; CommandError otherwise."""
    if name in topo.nics:
        return name
    what = f"{name!r} is a switch, not a host" if name in topo.nodes else f"{name!r} is not a host of {topo.name}"
    raise CommandError(f"{what} (hosts: {_some(sorted(topo.nics))})")


def host_pair(topo: Topology, args: list[str], usage: str) -> tuple[str, str]:
    if len(args) < 2:
        raise CommandError(f"usage: {usage}")
    src, dst = host(topo, args[0]), host(topo, args[1])
    if src == dst:
        raise CommandError(f"{src} -> {dst}: source and destination are the same host")
    return src, dst


def link_name(topo: Topology, words: list[str]) -> str:
    """A link given by name (``a0_0-c0_0``) or by its two nodes (``a0_0 c0_0``, either order)."""
    if len(words) == 1 and words[0] in topo.link_by_name:
        return words[0]
    if len(words) == 2 and all(w in topo.nodes for w in words):
        found = [l.name for l in topo.links_of[words[0]] if l.peer_of(words[0]).node == words[1]]
        if len(found) == 1:
            return found[0]
        if not found:
            raise CommandError(f"no link between {words[0]} and {words[1]}")
        raise CommandError(f"{len(found)} links between {words[0]} and {words[1]}: name one ({', '.join(found)})")
    given = " ".join(words) or "nothing"
    near = [l.name for l in topo.links if words and words[0] in l.name][:6]
    hint = f" (did you mean {', '.join(near)}?)" if near else " (`links` lists them)"
    raise CommandError(f"unknown link {given!r}{hint}")


def host_flow(topo: Topology, src: str, dst: str, proto: str = "udp", sport: object = DEFAULT_SPORT,
              dport: object = DEFAULT_DPORT) -> Flow:
    """The ECMP flow ``src`` -> ``dst`` (first NICs' addresses) with protocol and ports, as a
    :class:`testbed.fabric.paths.Flow` to trace. ValueError naming what is wrong."""
    for name in (src, dst):
        if name not in topo.nics:
            raise ValueError(f"{name!r} is not a host of {topo.name}")
    if proto not in ("udp", "tcp"):
        raise ValueError(f"protocol must be udp or tcp, got {proto!r}")
    try:
        sport, dport = int(sport), int(dport)
    except ValueError:
        raise ValueError("ports are integers") from None
    if not (0 < sport < 65536 and 0 < dport < 65536):
        raise ValueError("ports are 1..65535")
    t = FiveTuple(str(topo.nics[src][0].address), str(topo.nics[dst][0].address), proto, sport, dport)
    return Flow(f"{src}->{dst} {proto} {sport}->{dport}", "path", 0, 0, "data", src, dst, t)


def _some(names: list[str], n: int = 8) -> str:
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


# -- output (pure) ----------------------------------------------------------------------------
def net_lines(topo: Topology) -> list[str]:
    """Mininet's ``net``: every node with ``ifname:peer-ifname`` per link (the peer's node is
    added in parentheses when its interface name does not start with it)."""
    out = []
    for name in topo.nodes:
        ends = []
        for link in topo.links_of[name]:
            mine, peer = link.port_of(name), link.peer_of(name)
            shown = peer.ifname if peer.ifname.startswith(f"{peer.node}-") else f"{peer.ifname}({peer.node})"
            ends.append(f"{mine.ifname}:{shown}")
        out.append(" ".join([name, *ends]))
    return out


def ping_lines(topo: Topology, ok: dict[tuple[str, str], bool]) -> list[str]:
    """Mininet's ``pingall`` report from ``{(src, dst): replied}``."""
    hosts = [h.name for h in topo.hosts if any(h.name in pair for pair in ok)]
    lines = ["*** Ping: testing ping6 reachability (ECMP addresses)"]
    for src in hosts:
        marks = [dst if ok[(src, dst)] else "X" for dst in hosts if (src, dst) in ok]
        lines.append(f"{src} -> {' '.join(marks)}")
    received = sum(ok.values())
    lost = len(ok) - received
    pct = 100.0 * lost / len(ok) if ok else 0.0
    lines.append(f"*** Results: {pct:.0f}% dropped ({received}/{len(ok)} received)")
    return lines


def ev_lines(topo: Topology, src: str, dst: str, down: frozenset[str] = frozenset()) -> list[str]:
    """The EVs ``src`` -> ``dst`` (:meth:`Topology.evs`): id, plane, uSID address, switches,
    links; an EV crossing a link in ``down`` is marked."""
    evs = topo.evs(src, dst)
    lines = [f"{src} -> {dst}: {len(evs)} EV(s) (SRv6 uSID paths)"]
    for ev in evs:
        dead = [l for l in ev.links if l in down]
        mark = f"  DOWN: {' '.join(dead)}" if dead else ""
        lines.append(f"  ev {ev.ev_id:<3} plane {ev.plane}  {ev.address}  via {' '.join(ev.switches)}"
                     f"  links {' '.join(ev.links)}{mark}")
    return lines


def path_lines(tf: TracedFlow) -> list[str]:
    t = tf.flow.tuple
    head = f"{tf.flow.src_host} -> {tf.flow.dst_host} {t.proto} {t.src} {t.sport} -> {t.dst} {t.dport}"
    nodes = " -> ".join([tf.flow.src_host] + [h.next for h in tf.hops])
    where = f" at {tf.dropped_at}" if tf.outcome == "dropped" and tf.dropped_at else ""
    return [head, f"  hops  {nodes or tf.flow.src_host} ({tf.outcome}{where})",
            f"  links {' '.join(tf.links) or '-'}"]


@dataclass(frozen=True)
class LinkView:
    name: str
    a: str
    b: str
    rate_bps: int
    state: str


# -- the work (no Mininet) -------------------------------------------------------------------
class Session:
    """Commands on a started fabric. Faults go through one :class:`FaultInjector` (the scenario
    runner's), which :meth:`close` reverts. Methods return lines to print; bad arguments raise
    :class:`CommandError`, refused kernel changes :class:`testbed.faults.FaultError`."""

    def __init__(self, fabric, *, injector: FaultInjector | None = None):
        self.fabric = fabric
        self.topo: Topology = fabric.topo
        self.faults = injector or FaultInjector(fabric)

    # -- reachability and paths --
    def ping_all(self, hosts: list[str] | None = None, timeout_s: int = PING_TIMEOUT_S) -> dict:
        """``{(src, dst): replied}`` for every ordered pair of ``hosts`` (default all): one
        ``ping -6 -c1`` to the destination's first NIC, every source's pings in parallel."""
        hosts = hosts or [h.name for h in self.topo.hosts]
        addr = {h: str(self.topo.nics[h][0].address) for h in hosts}
        ok: dict[tuple[str, str], bool] = {}
        per_wave = max(1, PINGS_IN_FLIGHT // max(1, len(hosts) - 1))
        for i in range(0, len(hosts), per_wave):
            procs = {}
            for src in hosts[i:i + per_wave]:
                targets = [f"{d}={addr[d]}" for d in hosts if d != src]
                procs[src] = self.fabric.popen(src, ["bash", "-c", _PING_SCRIPT, "pingall", str(timeout_s), *targets],
                                               text=True)
            for src, proc in procs.items():
                out, _ = proc.communicate()
                got = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
                for dst in hosts:
                    if dst != src:
                        ok[(src, dst)] = got.get(dst) == "ok"
        return ok

    def pingall(self, args: list[str]) -> list[str]:
        hosts = [host(self.topo, a) for a in args] if args else None
        if hosts is not None and len(set(hosts)) < 2:
            raise CommandError("usage: pingall [HOST HOST ...] (at least two distinct hosts)")
        return ping_lines(self.topo, self.ping_all(hosts and list(dict.fromkeys(hosts))))

    def evs(self, args: list[str]) -> list[str]:
        src, dst = host_pair(self.topo, args, "evs SRC DST")
        if len(args) > 2:
            raise CommandError("usage: evs SRC DST")
        return ev_lines(self.topo, src, dst, self.fabric.links_down)

    def path(self, args: list[str]) -> list[str]:
        usage = f"path SRC DST [udp|tcp [SPORT [DPORT]]] (default udp {DEFAULT_SPORT} {DEFAULT_DPORT})"
        src, dst = host_pair(self.topo, args, usage)
        if len(args) > 5:
            raise CommandError(f"usage: {usage}")
        try:
            flow = host_flow(self.topo, src, dst, *args[2:])
        except ValueError as exc:
            raise CommandError(f"{exc}; usage: {usage}") from None
        try:
            (tf,) = trace_flows(self.fabric, [flow])
        except TraceError as exc:
            raise CommandError(str(exc)) from None
        return path_lines(tf)

    # -- faults (the scenario runner's injector) --
    def _link_and_rest(self, args: list[str], usage: str, n_values: int) -> tuple[str, list[str]]:
        """The link named first in ``args`` (a name, or two node names) and exactly ``n_values``
        words after it."""
        if not args:
            raise CommandError(f"usage: {usage}")
        two = len(args) >= 2 and args[0] in self.topo.nodes and args[1] in self.topo.nodes
        words, rest = (args[:2], args[2:]) if two else (args[:1], args[1:])
        name = link_name(self.topo, words)
        if len(rest) != n_values:
            got = " ".join(rest) or "nothing"
            raise CommandError(f"expected {n_values} value(s) after {name}, got {got!r}; usage: {usage}")
        return name, rest

    def set_link(self, args: list[str], up: bool) -> list[str]:
        verb = "up" if up else "down"
        usage = f"{verb} LINK [reconverge] (LINK: a name from `links`, or its two nodes)"
        reconverge = bool(args) and args[-1] == "reconverge"
        name, _ = self._link_and_rest(args[:-1] if reconverge else args, usage, 0)
        self.faults.apply(LinkState(name, up))
        lines = [f"{name}: {verb}"]
        if reconverge:
            lines += self.reconverge([])
        elif not up:
            lines.append("  (ECMP routes elsewhere still point at it: `reconverge` reroutes around it)")
        return lines

    def reconverge(self, args: list[str]) -> list[str]:
        if args:
            raise CommandError("usage: reconverge (recomputes ECMP routes around the links down now)")
        self.faults.apply(Reconverge())
        return [f"routing reconverged around {', '.join(sorted(self.fabric.links_down)) or 'no failed link'}"]

    def rate(self, args: list[str]) -> list[str]:
        name, (value,) = self._link_and_rest(args, "rate LINK RATE|default (RATE in tc units: 10Mbit, 1Gbit)", 1)
        rate_bps = None if value == "default" else _unit(units.parse_rate, value)
        self.faults.apply(Rate(name, rate_bps))
        return [f"{name}: rate {units.format_rate(self.faults.rate_bps(self.topo.link_by_name[name]))}"
                + (" (the topology's)" if rate_bps is None else "")]

    def loss(self, args: list[str]) -> list[str]:
        name, (value,) = self._link_and_rest(args, "loss LINK PERCENT (e.g. 1%, 0.1%; 0 removes it)", 1)
        pct = _unit(units.parse_percent, value)
        self.faults.apply(Loss(name, pct or None))
        return [f"{name}: loss {pct:g}% both ways" if pct else f"{name}: no loss"]

    def blackhole(self, args: list[str]) -> list[str]:
        name, (value,) = self._link_and_rest(args, "blackhole LINK on|off", 1)
        if value not in ("on", "off"):
            raise CommandError(f"blackhole: expected on or off, got {value!r}")
        self.faults.apply(Blackhole(name, value == "on"))
        return [f"{name}: blackhole {value}"]

    def links(self) -> list[LinkView]:
        out = []
        active = self.faults.active
        for link in self.topo.links:
            state = ["DOWN" if link.name in self.fabric.links_down else "up"]
            fs = active.get(link.name)
            if fs is not None and fs.loss_pct:
                state.append(f"loss {fs.loss_pct:g}%")
            if fs is not None and fs.blackhole:
                state.append("blackhole")
            out.append(LinkView(link.name, f"{link.a.node}:{link.a.ifname}", f"{link.b.node}:{link.b.ifname}",
                                self.faults.rate_bps(link), ", ".join(state)))
        return out

    def link_lines(self, only_faulty: bool = False) -> list[str]:
        views = [v for v in self.links()
                 if not only_faulty or v.state != "up"
                 or v.rate_bps != self.topo.link_by_name[v.name].params.rate_bps]
        width = max((len(v.name) for v in views), default=0)
        return [f"{v.name:<{width}}  {v.a}<->{v.b}  {units.format_rate(v.rate_bps)}  {v.state}" for v in views]

    def close(self) -> list[str]:
        """Revert every fault made in this session; lines saying what was reverted."""
        pending = self.link_lines(only_faulty=True)
        self.faults.revert_all()
        return [f"*** reverted {len(pending)} fault(s): " + "; ".join(l.split()[0] for l in pending)] if pending else []


def _unit(parse, value: str):
    try:
        return parse(value)
    except units.UnitError as exc:
        raise CommandError(str(exc)) from None


def substitute_hosts(topo: Topology, words: list[str]) -> list[str]:
    """Mininet's node-name substitution, IPv6: a host name becomes its first NIC's ECMP address."""
    return [str(topo.nics[w][0].address) if w in topo.nics else w for w in words]
