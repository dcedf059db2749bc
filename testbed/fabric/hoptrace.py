"""Tracing the kernel TCP flows of a running job on a busy fabric: the job's connections read from
the hosts' sockets, their paths from hop-limited probes (Paris traceroute).

A command job's TCP connections (Gloo's full mesh, the TCPStore's) exist only once the job runs,
so :mod:`testbed.fabric.paths`' probes on a quiet fabric cannot trace them, and its link
counters are useless while the job's traffic flows. Here each probe carries the flow's exact
5-tuple (so every router hashes it onto the flow's own ECMP path: Augustin et al., "Avoiding
traceroute anomalies with Paris traceroute", IMC 2006) and a hop limit h; the h-th router
answers with an ICMPv6 Time Exceeded (RFC 4443 3.3) from one of its own addresses, which names
it, whatever else the fabric carries. The probe is a TCP header with a zero checksum (as
:func:`testbed.fabric.paths.probe_packet`): the destination host drops it silently; its
sequence number identifies (flow, hop) in the error's quoted packet.

Routers rate-limit ICMPv6 errors (``net.ipv6.icmp.ratelimit``, per destination, for the types
of ``net.ipv6.icmp.ratemask``): :func:`unlimit_time_exceeded` takes type 3 (Time Exceeded) out of
the mask in every switch, where the kernel has the sysctl (Linux >= 4.19); the fabric's own
packets never run out of hop limit, so nothing else changes. Probes lost in the job's queues,
or answers lost on the way back, are sent again in up to :data:`ROUNDS` rounds.
"""

from __future__ import annotations

import errno
import select
import socket
import struct
import time
from pyroute2 import DiagSocket

from testbed.fabric.paths import FiveTuple, Flow, Hop, TracedFlow, probe_packet
from testbed.model.topology import Role, Topology

MAX_HOPS = 8          # longer than any generated fabric's path (fat-tree: 5 switches)
ROUNDS = 4            # send rounds for unanswered hops
REFUSED = (errno.ENOBUFS, errno.EAGAIN, errno.ENETUNREACH, errno.EHOSTUNREACH)
"""A probe send the kernel refuses for now: a lost probe (:mod:`testbed.fabric.verify` does the same)."""
ROUND_WAIT_S = 0.4    # how long a round waits for answers, s (queues of 32 jumbo frames at 10 Mbit/s: ~0.23 s)
ICMP6_TIME_EXCEEDED = 3
ICMP6_FILTER = 1      # <netinet/icmp6.h>: setsockopt(IPPROTO_ICMPV6, ICMP6_FILTER, 256-bit block mask)
TCP_ESTABLISHED = 1
INET_DIAG_INFO = 1 << (2 - 1)   # inet_diag extension bit: struct tcp_info
BUSY_SHARE = 0.1
RATEMASK = "net/ipv6/icmp/ratemask"
RATEMASK_NO_TIME_EXCEEDED = "0-1,4-127"   # the kernel's default ("0-1,3-127") less type 3


def tcp_connections(fabric, host: str) -> list[tuple[FiveTuple, int]]:
    """The established IPv6 TCP connections of ``host``'s namespace, from its side (sock_diag,
    :class:`pyroute2.DiagSocket`): ``(FiveTuple(local, remote, "tcp", lport, rport), bytes)``,
    ``bytes`` what the local end has sent and had acknowledged (``tcpi_bytes_acked``)."""
    with fabric.inside(host):
        ds = DiagSocket()
    with ds:
        ds.bind()
        msgs = ds.get_sock_stats(family=socket.AF_INET6, states=1 << TCP_ESTABLISHED, extensions=INET_DIAG_INFO)
    out = []
    for m in msgs:
        info = m.get_attr("INET_DIAG_INFO")
        sent = int(info.get("tcpi_bytes_acked") or 0) if info else 0
        out.append((FiveTuple(m.get("idiag_src"), m.get("idiag_dst"), "tcp", m.get("idiag_sport"),
                              m.get("idiag_dport")), sent))
    return out


def job_tcp_bytes(fabric, hosts: list[str]) -> dict[FiveTuple, int]:
    """Bytes sent and acknowledged so far per TCP connection end of the hosts (:func:`tcp_connections`)."""
    return {t: sent for host in hosts for t, sent in tcp_connections(fabric, host)}


def job_tcp_flows(fabric, hosts: list[str], transport: str, job: str = "job0",
                  since: dict[FiveTuple, int] | None = None) -> list[Flow]:
    """The job's TCP flows, one per connection and direction: a connection of rank a's address to
    rank b's seen from a's socket is the flow ``"<transport> a->b"`` (``" c<k>"`` appended for
    the k-th of several between the same ranks, in port order); connections to anything but
    another rank's fabric address are left out. Kind ``data`` for a direction that has sent at
    least :data:`BUSY_SHARE` of the busiest one's bytes so far (the collective's connections;
    both directions of a TCP connection carry its bytes), ``idle`` for the others (a full mesh
    is connected, but a ring uses few of its connections): fault targets aim at data flows.
    ``since``: :func:`job_tcp_bytes` at an earlier time; the bytes counted are those sent after
    it (the steady state, not a start-up broadcast)."""
    topo = fabric.topo
    rank_of = {str(nic.address): r for r, h in enumerate(hosts) for nic in topo.nics[h]}
    seen: dict[tuple[int, int], dict[FiveTuple, int]] = {}
    for r, host in enumerate(hosts):
        for t, sent in tcp_connections(fabric, host):
            if rank_of.get(t.src) == r and t.dst in rank_of and rank_of[t.dst] != r:
                seen.setdefault((r, rank_of[t.dst]), {})[t] = sent - (since or {}).get(t, 0)
    busiest = max((b for conns in seen.values() for b in conns.values()), default=0)
    flows = []
    for (a, b), conns in sorted(seen.items()):
        for k, t in enumerate(sorted(conns, key=lambda t: (t.sport, t.dport))):
            label = f"{transport} {a}->{b}" + (f" c{k}" if len(conns) > 1 else "")
            kind = "data" if busiest and conns[t] >= BUSY_SHARE * busiest else "idle"
            flows.append(Flow(label, transport, a, b, kind, hosts[a], hosts[b], t, job=job))
    return flows


def unlimit_time_exceeded(fabric) -> int:
    """Take Time Exceeded out of every switch's ICMPv6 rate-limit mask; the number of switches
    whose kernel has the sysctl (the others answer at their rate limit)."""
    done = 0
    for node in fabric.topo.nodes.values():
        if node.role is Role.HOST:
            continue
        with fabric.inside(node.name):
            try:
                with open(f"/proc/sys/{RATEMASK}", "w") as f:
                    f.write(RATEMASK_NO_TIME_EXCEEDED + "\n")
                done += 1
            except FileNotFoundError:
                pass
    return done


def router_addresses(topo: Topology) -> dict[str, str]:
    """Every link address of a switch -> the switch (what names a Time Exceeded's sender)."""
    return {str(link.addr_of(end.node)): end.node for link in topo.links for end in (link.a, link.b)
            if topo.nodes[end.node].role is not Role.HOST}


def parse_time_exceeded(packet: bytes) -> tuple[FiveTuple, int] | None:
    """(the quoted probe's 5-tuple, its TCP sequence number) of an ICMPv6 Time Exceeded as a raw
    ICMPv6 socket delivers it (from the ICMPv6 header on), None for anything else."""
    if len(packet) < 8 + 40 + 8 or packet[0] != ICMP6_TIME_EXCEEDED:
        return None
    ip = packet[8:48]
    if ip[6] != socket.IPPROTO_TCP:
        return None
    src, dst = socket.inet_ntop(socket.AF_INET6, ip[8:24]), socket.inet_ntop(socket.AF_INET6, ip[24:40])
    sport, dport, seq = struct.unpack("!HHI", packet[48:56])
    return FiveTuple(src, dst, "tcp", sport, dport), seq


def _probe(t: FiveTuple, seq: int) -> bytes:
    return struct.pack("!HHI", t.sport, t.dport, seq) + probe_packet(t)[8:]


class HopTracer:
    """Trace TCP flows (``Flow.tuple`` set) on a running fabric by hop-limited probes."""

    def __init__(self, fabric):
        self.fabric, self.topo = fabric, fabric.topo
        self.routers = router_addresses(self.topo)

    def trace(self, flows: list[Flow]) -> list[TracedFlow]:
        """One :class:`TracedFlow` per flow: ``delivered`` when every hop answered and the last
        router is the destination's neighbour; else ``dropped`` at the last router that
        answered. Raises OSError if a probe socket cannot be opened."""
        answers: dict[int, dict[int, str]] = {i: {} for i in range(len(flows))}
        socks = self._open({(f.src_host, f.tuple.src) for f in flows})
        try:
            for _ in range(ROUNDS):
                todo = [(i, h) for i, f in enumerate(flows) for h in range(1, MAX_HOPS + 1)
                        if h not in answers[i] and h <= self._horizon(f, answers[i])]
                if not todo:
                    break
                for i, h in todo:
                    raw, _ = socks[(flows[i].src_host, flows[i].tuple.src)]
                    raw.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, h)
                    try:
                        raw.sendto(_probe(flows[i].tuple, i << 8 | h), (flows[i].tuple.dst, 0))
                    except OSError as exc:   # the host's queue is full of the job's packets: lost, sent again
                        if exc.errno not in REFUSED:
                            raise
                self._collect(socks, flows, answers)
        finally:
            for raw, icmp in socks.values():
                raw.close()
                icmp.close()
        return [self._path(f, answers[i]) for i, f in enumerate(flows)]

    def _horizon(self, flow: Flow, got: dict[int, str]) -> int:
        """The last hop worth probing: the one after the destination's neighbour once it answered."""
        for h, node in sorted(got.items()):
            if any(link.peer_of(node).node == flow.dst_host for link in self.topo.links_of[node]):
                return h
        return MAX_HOPS

    def _open(self, sources) -> dict[tuple[str, str], tuple[socket.socket, socket.socket]]:
        """Per (host, source address): a raw TCP socket bound to the address (it sends, and is
        told to keep next to nothing of the job's segments it also receives) and a raw ICMPv6
        socket that passes only Time Exceeded (RFC 3542 ICMP6_FILTER)."""
        out = {}
        block_all_but_3 = struct.pack("=8I", 0xFFFFFFFF & ~(1 << ICMP6_TIME_EXCEEDED), *[0xFFFFFFFF] * 7)
        try:
            for host, src in sorted(sources):
                with self.fabric.inside(host):
                    raw = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_TCP)
                    icmp = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
                out[(host, src)] = (raw, icmp)
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
                raw.bind((src, 0))
                icmp.setsockopt(socket.IPPROTO_ICMPV6, ICMP6_FILTER, block_all_but_3)
                icmp.setblocking(False)
        except OSError:
            for raw, icmp in out.values():
                raw.close()
                icmp.close()
            raise
        return out

    def _collect(self, socks, flows: list[Flow], answers: dict[int, dict[int, str]]) -> None:
        deadline = time.monotonic() + ROUND_WAIT_S
        icmps = [icmp for _, icmp in socks.values()]
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(icmps, [], [], left)
            for sock in ready:
                while True:
                    try:
                        packet, addr = sock.recvfrom(2048)
                    except BlockingIOError:
                        break
                    got = parse_time_exceeded(packet)
                    router = self.routers.get(addr[0].split("%")[0])
                    if got is None or router is None:
                        continue
                    t, seq = got
                    i, h = seq >> 8, seq & 0xFF
                    if i < len(flows) and flows[i].tuple == t:
                        answers[i][h] = router

    def _path(self, flow: Flow, got: dict[int, str]) -> TracedFlow:
        nodes = [flow.src_host]
        for h in range(1, MAX_HOPS + 1):
            if h not in got:
                break
            nodes.append(got[h])
        hops = []
        for a, b in zip(nodes, nodes[1:]):
            link = next((lk for lk in self.topo.links_of[a] if lk.peer_of(a).node == b), None)
            if link is None:   # answers that do not chain (a lost or misattributed one)
                return TracedFlow(flow, tuple(hops), "dropped", a)
            hops.append(Hop(a, link.name, b))
        last = nodes[-1]
        final = next((lk for lk in self.topo.links_of[last] if lk.peer_of(last).node == flow.dst_host), None)
        if final is None or last == flow.src_host:
            return TracedFlow(flow, tuple(hops), "dropped", last)
        return TracedFlow(flow, (*hops, Hop(last, final.name, flow.dst_host)), "delivered")
