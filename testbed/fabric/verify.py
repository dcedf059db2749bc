"""Reachability probes on a running fabric: one UDP datagram per EV and per ECMP pair.

Sockets are opened inside each host's namespace from the orchestrator
process (no agent needed). Datagrams use a zero UDP checksum
(``UDP_NO_CHECK6_TX``/``_RX``, as RoCEv2 does: the destination address is
rewritten in flight by every uSID hop), and carry (source, destination,
EV id) so every arrival is attributed exactly.
"""

from __future__ import annotations

import errno
import json
import select
import socket
import time
from dataclasses import dataclass, field
from typing import Iterable

from testbed.fabric.backend import FabricBackend
from testbed.model.topology import EV

UDP_NO_CHECK6_TX = 101
UDP_NO_CHECK6_RX = 102
PROBE_PORT = 4790
# A send the kernel refuses is a lost datagram (sent again in the retry round): no usable route
# (a NIC without carrier, or one the routes do not yet see up just after bring-up), a full queue.
REFUSED = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENOBUFS, errno.EAGAIN)


@dataclass
class Reachability:
    """Outcome of a probe round. Keys are (src, dst, ev_id); ev_id -1 means ECMP."""

    sent: set[tuple[str, str, int]] = field(default_factory=set)
    received: set[tuple[str, str, int]] = field(default_factory=set)
    evs: dict[tuple[str, str, int], EV] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def lost(self) -> set[tuple[str, str, int]]:
        return self.sent - self.received

    @property
    def unexpected(self) -> set[tuple[str, str, int]]:
        return self.received - self.sent

    def lost_evs(self) -> set[tuple[str, str, int]]:
        return {k for k in self.lost if k[2] >= 0}

    def summary(self) -> dict[str, int]:
        ev_sent = sum(1 for k in self.sent if k[2] >= 0)
        ev_ok = sum(1 for k in self.received if k[2] >= 0 and k in self.sent)
        ecmp_sent = len(self.sent) - ev_sent
        return {"evs_probed": ev_sent, "evs_ok": ev_ok, "ecmp_pairs_probed": ecmp_sent,
                "ecmp_pairs_ok": len(self.received & self.sent) - ev_ok}


def _udp_socket(fabric: FabricBackend, host: str, *, bind_port: int | None) -> socket.socket:
    with fabric.inside(host):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_TX, 1)
    sock.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_RX, 1)
    sock.setblocking(False)
    if bind_port is not None:
        sock.bind(("::", bind_port))
    return sock


def probe(fabric: FabricBackend, pairs: Iterable[tuple[str, str]] | None = None, *,
          ecmp: bool = True, srv6: bool = True, timeout_s: float = 2.0,
          quiet_s: float = 0.15, retries: int = 2) -> Reachability:
    """Send one datagram per EV (SRv6) and one per NIC pair (ECMP) for each host pair.

    ``pairs`` defaults to every ordered pair of distinct hosts. Pairs go in
    rounds in which every host sends to at most one host and receives from at
    most one (no incast on the shaped links' short queues). A round ends when
    all its datagrams arrived, or after ``quiet_s`` without an arrival, or
    after ``timeout_s``. A datagram still missing after the rounds is sent again up to
    ``retries`` times and waited for ``timeout_s`` (a probe that arrived after its round's
    quiet window, on a loaded machine, is not a lost path: a late one still counts in any later
    round, so a pair is unreachable only after ``retries`` x ``timeout_s`` without its probes);
    a send the kernel refuses (``REFUSED``) counts as missing.
    """
    topo = fabric.topo
    hosts = [h.name for h in topo.hosts]
    pairs = list(pairs) if pairs is not None else [(a, b) for a in hosts for b in hosts if a != b]
    involved = sorted({h for p in pairs for h in p})
    rx = {h: _udp_socket(fabric, h, bind_port=PROBE_PORT) for h in involved}
    tx = {h: _udp_socket(fabric, h, bind_port=None) for h in involved}
    result = Reachability()
    addr: dict[tuple, str] = {}
    t0 = time.perf_counter()
    try:
        for round_pairs in _rounds(pairs):
            for src, dst in round_pairs:
                if srv6:
                    for ev in topo.evs(src, dst):
                        key = (src, dst, ev.ev_id)
                        result.evs[key] = ev
                        addr[key] = str(ev.address)
                        _send(tx[src], key, addr[key])
                        result.sent.add(key)
                if ecmp:
                    for s_nic in topo.nics[src]:
                        for d_nic in topo.nics[dst]:
                            if s_nic.plane == d_nic.plane:
                                key = (src, dst, -1 - s_nic.plane)
                                addr[key] = str(d_nic.address)
                                _send(tx[src], key, addr[key])
                                result.sent.add(key)
            _collect(rx, result, timeout_s, quiet_s)
        for _ in range(retries):
            if not result.lost:
                break
            for key in sorted(result.lost):
                _send(tx[key[0]], key, addr[key])
            _collect(rx, result, timeout_s, timeout_s)
    finally:
        for sock in [*rx.values(), *tx.values()]:
            sock.close()
    result.seconds = time.perf_counter() - t0
    return result


def _rounds(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Split pairs into rounds where no host sends twice or receives twice."""
    rounds: list[tuple[set, set, list]] = []
    for src, dst in pairs:
        for senders, receivers, items in rounds:
            if src not in senders and dst not in receivers:
                break
        else:
            senders, receivers, items = set(), set(), []
            rounds.append((senders, receivers, items))
        senders.add(src)
        receivers.add(dst)
        items.append((src, dst))
    return [items for _, _, items in rounds]


def _send(sock: socket.socket, key: tuple[str, str, int], address: str) -> None:
    try:
        sock.sendto(json.dumps(key).encode(), (address, PROBE_PORT))
    except OSError as exc:
        if exc.errno not in REFUSED:
            raise


def _collect(rx: dict[str, socket.socket], result: Reachability, timeout_s: float, quiet_s: float) -> None:
    result.received |= collect(rx, expect=len(result.sent - result.received), timeout_s=timeout_s,
                               quiet_s=quiet_s)


def collect(rx: dict[str, socket.socket], *, expect: int | None, timeout_s: float,
            quiet_s: float) -> set[tuple[str, str, int]]:
    """The probe keys that arrive on ``rx`` (host -> bound socket, non-blocking) addressed to
    their host, until ``expect`` of them came (None: no count), ``quiet_s`` passed without an
    arrival, or ``timeout_s`` passed."""
    poller = select.poll()
    by_fd = {s.fileno(): (h, s) for h, s in rx.items()}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    got: set[tuple[str, str, int]] = set()
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    while expect is None or len(got) < expect:
        now = time.monotonic()
        if now > deadline or now - last > quiet_s:
            break
        for fd, _ in poller.poll(20):
            last = time.monotonic()
            host, sock = by_fd[fd]
            while True:
                try:
                    data, _ = sock.recvfrom(2048)
                except BlockingIOError:
                    break
                src, dst, ev_id = json.loads(data)
                if dst == host:
                    got.add((src, dst, ev_id))
    return got
