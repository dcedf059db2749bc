"""Path tracing: the links a flow crosses, as the kernel routes it.

A flow of a run is one connection ``r -> s`` of one transport (s one of rank r's
``send_to`` peers: r+1 on a ring), in one direction:

* ``rc``: a QP's UDP datagrams from rank r's ECMP address, source port = the QP's
  entropy port (job spec ``send_to[i].evs[q].src_port``), to s's ECMP address, port
  4791 (``data``); its SACKs come back from s with the same source port (``ack``).
* ``tcp``: rank r's connection to s's port 5201 from its seeded source port (job spec
  ``send_to[i].src_port``; :mod:`agents.channels.tcp` binds it); ACKs come back with the ports swapped.
* ``mrc``: one flow per EV: the SRv6 uSID path is the EV's destination address, so its
  links are those of the job spec (``send_to[i].evs[k].links``, from
  :meth:`testbed.model.topology.Topology.evs`); nothing hashes it. (tests/netns proves that a
  failed link black-holes exactly the EVs whose links contain it.)

An ECMP flow is traced by the packets themselves: on the quiet fabric (before the agents
start), :data:`PROBES` packets with the flow's exact addresses, protocol and ports (a
zero-checksum L4 header from a raw socket, which the destination drops silently) are sent
from its source host, and the kernel link counters say which link ends sent them; chained
from the source host, those are the hops (``delivered`` at the destination host,
``dropped`` where the chain stops, ``loop`` if a link end sent them twice). The routers forward
in softirq, which a busy machine runs late: probes that have not crossed yet are not lost, so a
chain that stops short is read again until it completes, and is ``dropped`` only once the
fabric's counters have stood still for :data:`QUIET_S` (or after :data:`SETTLE_S`).

Why not ask the FIB (``RTM_GETROUTE`` with ``RTA_IP_PROTO``/``RTA_SPORT``/``RTA_DPORT``, as
``ip route get ... ipproto udp sport N dport M`` does)? With the custom multipath hash
(``fib_multipath_hash_policy=3``, which the fabric needs: routing.py) the kernel hashes a
route query's flowi6 with ``rt6_multipath_custom_hash_fl6`` but a forwarded packet with
``rt6_multipath_custom_hash_skb`` = ``jhash_2words(outer, inner, 0)`` (net/ipv6/route.c):
the two disagree, so ``ip route get`` names the wrong uplink for some flows (the link
counters show where they really go).

:func:`job_flows` derives every flow of a transport from its job specs (pure);
:func:`trace_flows` traces them on a running fabric; :mod:`testbed.faults.targets` resolves
flow-aimed fault targets against the traced paths.
"""

from __future__ import annotations

import functools
import socket
import struct
import time
from dataclasses import asdict, dataclass

from testbed.model.topology import Topology
from testbed.model.errors import TestbedFailure

MAX_HOPS = 16
PROBES = 16          # probe packets per traced flow
QUIET_S = 0.5
"""A flow whose probes stop short is dropped once no link end of the fabric has sent a packet for
this long, s (probes still on their way move some counter; a loaded machine's softirq lags by
milliseconds to tens of them)."""
SETTLE_S = 5.0
"""The longest a flow's probes are waited for before it reads as dropped (a fabric never quiet), s."""
ROUNDS = 2
"""Probe rounds before a flow reads as dropped (traceroute's several probes per hop): beside a busy
core (make test, 2026-11-29) the first flow traced on a fresh k4 fabric once stopped short with
the counters standing still, and every other flow crossed; a path that is really cut stops the
second round's probes at the same place."""
POLL_S = 0.005       # the first wait between reads of the counters (doubling to 50 ms)
PROTOS = {"udp": socket.IPPROTO_UDP, "tcp": socket.IPPROTO_TCP}


class TraceError(TestbedFailure):
    """The probes of a flow could not be sent."""


@dataclass(frozen=True)
class FiveTuple:
    """What an ECMP router hashes: addresses, protocol ("udp"/"tcp"), ports."""

    src: str
    dst: str
    proto: str
    sport: int
    dport: int


@dataclass(frozen=True)
class Flow:
    """One direction of one ring hop of a transport.

    ``label``: ``"<transport> <src_rank>-><dst_rank>"`` (plus ``" ev<k>"`` for an MRC EV,
    ``" qp<q>"`` for one of an RC connection's QPs, ``" ack"`` for the acknowledgement
    direction; ``"<job>: "`` in front when the run has several jobs). ``job``: the job's name. ``kind``: "data" or "ack".
    ``src_host``/``dst_host``: where the packets of this direction start and end.
    ``tuple``: the ECMP flow (None for SRv6 EVs, whose ``links`` are known up front)."""

    label: str
    transport: str
    src_rank: int
    dst_rank: int
    kind: str
    src_host: str
    dst_host: str
    tuple: FiveTuple | None = None
    ev_id: int | None = None
    links: tuple[str, ...] = ()
    job: str = "job0"


@dataclass(frozen=True)
class Hop:
    """One link crossed, in the direction ``node`` -> ``next``."""

    node: str
    link: str
    next: str


@dataclass(frozen=True)
class TracedFlow:
    """A flow and the hops its packets take (``outcome``: delivered, dropped, loop)."""

    flow: Flow
    hops: tuple[Hop, ...]
    outcome: str
    dropped_at: str | None = None

    @property
    def links(self) -> tuple[str, ...]:
        return tuple(h.link for h in self.hops)

    def to_dict(self) -> dict:
        out = asdict(self.flow)
        out.update(hops=[[h.node, h.link, h.next] for h in self.hops], links=list(self.links),
                   outcome=self.outcome, dropped_at=self.dropped_at)
        return out


def flow_label(transport: str, src_rank: int, dst_rank: int) -> str:
    return f"{transport} {src_rank}->{dst_rank}"


# -- flows of a transport (pure) ----------------------------------------------------------
def job_flows(jobs: list[dict], topo: Topology, name: str | None = None) -> list[Flow]:
    """Every flow (data and ack) of every connection in ``jobs`` (one job spec per rank,
    :func:`testbed.spec.jobs.build_jobs`): rank r to each of its ``send_to`` peers. RC with N QPs
    per connection gives one flow per QP (labels ``"rc-x8 3->4 qp<q>"``). ``name``: the
    transport's name in labels and ``Flow.transport`` (a variant such as ``rc-x8``; default the
    job's transport). Raises KeyError on a job spec without the fields its transport needs."""
    out: list[Flow] = []
    several = len({job.get("job", "job0") for job in jobs}) > 1
    for job in jobs:
        r, base = job["rank"], job["transport"]
        transport = name or base
        src_host = job["host"]
        jname = job.get("job", "job0")
        flow = functools.partial(Flow, job=jname)
        src_addr = str(topo.nics[src_host][0].address)
        for peer in job["send_to"]:
            s, dst_host, dst_addr = peer["rank"], peer["host"], peer["ecmp_addr"]
            label = (f"{jname}: " if several else "") + flow_label(transport, r, s)
            if base == "mrc":
                for ev in peer["evs"]:
                    links = tuple(ev["links"])
                    out.append(flow(f"{label} ev{ev['ev_id']}", transport, r, s, "data", src_host, dst_host,
                                    ev_id=ev["ev_id"], links=links))
                    out.append(flow(f"{label} ev{ev['ev_id']} ack", transport, r, s, "ack", dst_host,
                                    src_host, ev_id=ev["ev_id"], links=links[::-1]))
            elif base == "rc":
                port = peer.get("port", job["port"])
                for ev in peer["evs"]:
                    q, sport = ev["ev_id"], ev["src_port"]
                    qp_label = f"{label} qp{q}" if len(peer["evs"]) > 1 else label
                    out.append(flow(qp_label, transport, r, s, "data", src_host, dst_host,
                                    FiveTuple(src_addr, dst_addr, "udp", sport, port), ev_id=q))
                    out.append(flow(f"{qp_label} ack", transport, r, s, "ack", dst_host, src_host,
                                    FiveTuple(dst_addr, src_addr, "udp", sport, port), ev_id=q))
            elif base == "tcp":
                sport, port = peer["src_port"], peer.get("tcp_port", job["tcp_port"])
                out.append(flow(label, transport, r, s, "data", src_host, dst_host,
                                FiveTuple(src_addr, dst_addr, "tcp", sport, port)))
                out.append(flow(f"{label} ack", transport, r, s, "ack", dst_host, src_host,
                                FiveTuple(dst_addr, src_addr, "tcp", port, sport)))
            else:
                raise KeyError(f"job of rank {r}: unknown transport {base!r}")
    return out


def static_path(topo: Topology, flow: Flow) -> TracedFlow:
    """A flow whose ``links`` are known (an SRv6 EV), as hops from its source host."""
    hops, node = [], flow.src_host
    for name in flow.links:
        link = topo.link_by_name[name]
        nxt = link.peer_of(node).node
        hops.append(Hop(node, name, nxt))
        node = nxt
    return TracedFlow(flow, tuple(hops), "delivered" if node == flow.dst_host else "dropped")


# -- the kernel's answer ------------------------------------------------------------------
def probe_packet(t: FiveTuple) -> bytes:
    """An L4 header with ``t``'s ports and a checksum of 0: the routers hash and forward it
    like the flow's packets (they read the ports, never the checksum); the destination host
    drops it silently (a zero checksum is invalid for UDP and TCP over IPv6), so it draws no
    reply. UDP: 8-byte header; TCP: 20-byte header with ACK set."""
    if t.proto == "udp":
        return struct.pack("!HHHH", t.sport, t.dport, 8, 0)
    return struct.pack("!HHIIBBHHH", t.sport, t.dport, 1, 1, 5 << 4, 0x10, 65535, 0, 0)


def send_probes(fabric, host: str, t: FiveTuple, probes: int) -> None:
    """``probes`` copies of :func:`probe_packet` for ``t`` from ``host`` of ``fabric`` (a raw
    socket opened in its namespace). Raises OSError."""
    with fabric.inside(host):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, PROTOS[t.proto])
    with sock:
        sock.bind((t.src, 0))
        packet = probe_packet(t)
        for _ in range(probes):
            sock.sendto(packet, (t.dst, 0))


@dataclass
class Tracer:
    """Traces flows on a running, quiet fabric (no agents yet) by sending each flow's probe
    packets and reading which link ends sent them (:class:`testbed.fabric.counters.LinkCounters`);
    a flow is ``dropped`` only after ``quiet_s`` without a packet anywhere (at most ``settle_s``)."""

    fabric: object
    probes: int = PROBES
    counters: object = None
    quiet_s: float = QUIET_S
    settle_s: float = SETTLE_S
    rounds: int = ROUNDS

    def __post_init__(self):
        self.counters = self.counters or self.fabric.link_counters()

    def __enter__(self) -> "Tracer":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def _tx(self) -> dict[tuple[str, str], int]:
        return {(r["link"], r["node"]): r["tx_packets"] for r in self.counters.read()}

    def _send(self, host: str, t: FiveTuple) -> None:
        self.fabric.send_trace_probes(host, t, self.probes)

    def trace(self, flow: Flow) -> TracedFlow:
        """Hops of ``flow`` (see the module docstring); a flow with known ``links`` (SRv6) is
        returned as :func:`static_path`. A link end that sent the probes twice or more means
        a loop. A chain that stops short is read again (the probes may be late, not lost) until
        it completes, or the counters stood still for ``quiet_s``, or ``settle_s`` passed; then
        the flow is probed again, ``rounds`` rounds in all, and is dropped only if each stops short.
        Raises TraceError if the probes cannot be sent."""
        if flow.tuple is None:
            return static_path(self.fabric.topo, flow)
        for _ in range(self.rounds):
            traced = self._round(flow)
            if traced.outcome != "dropped":
                break
        return traced

    def _round(self, flow: Flow) -> TracedFlow:
        """One round of probes of ``flow`` (:meth:`trace`)."""
        before = self._tx()
        try:
            self._send(flow.src_host, flow.tuple)
        except OSError as exc:
            raise TraceError(f"{flow.label}: probes from {flow.src_host}: {exc}") from exc
        start = still = time.monotonic()
        last, wait = None, POLL_S
        while True:
            after = self._tx()
            sent = {end: after[end] - before[end] for end in after if after[end] - before[end] >= self.probes}
            traced = _chain(self.fabric.topo, flow, sent, self.probes)
            now = time.monotonic()
            if after != last:
                last, still = after, now
            if traced.outcome != "dropped" or now - still >= self.quiet_s or now - start >= self.settle_s:
                return traced
            time.sleep(wait)
            wait = min(2 * wait, 0.05)


def _chain(topo: Topology, flow: Flow, sent: dict[tuple[str, str], int], probes: int) -> TracedFlow:
    """Order the link ends that sent a flow's probes into hops from its source host."""
    by_node: dict[str, list[str]] = {}
    for link, node in sent:
        by_node.setdefault(node, []).append(link)
    hops, node = [], flow.src_host
    looped = any(n >= 2 * probes for n in sent.values())
    for _ in range(MAX_HOPS):
        out = by_node.get(node, [])
        if len(out) != 1:   # none: dropped here; several: the probes split (should not happen)
            break
        link = topo.link_by_name[out[0]]
        nxt = link.peer_of(node).node
        hops.append(Hop(node, link.name, nxt))
        if nxt == flow.dst_host:
            return TracedFlow(flow, tuple(hops), "loop" if looped else "delivered")
        node = nxt
    return TracedFlow(flow, tuple(hops), "loop" if looped else "dropped", node)


def trace_flows(fabric, flows: list[Flow]) -> list[TracedFlow]:
    """Trace every flow on ``fabric`` (a started :class:`testbed.fabric.local.Fabric`)."""
    with Tracer(fabric) as tracer:
        return [tracer.trace(f) for f in flows]
