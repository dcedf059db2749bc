"""UDP over IPv6 for sans-I/O MRC QPs, driven by an :class:`agents.net.loop.EventLoop`.

* :class:`Endpoint` — one UDP/IPv6 socket (RoCEv2's port 4791 by default)
  shared by any number of QPs: incoming datagrams are demultiplexed by the
  destination QPN (bytes 4..8 of every MRC packet) and handed over in
  per-QP runs (``QP.receive_datagrams``); each QP gets an EV ->
  :class:`Route` map for sending.

Sending on routes without a ``src_port`` (the SRv6 mode) goes through one
*connected* UDP socket per destination (bound to ``bind_addr`` and an
ephemeral source port; ``connected_send=False`` turns this off): Linux then
skips the per-datagram route lookup and address parsing of ``sendto``
(measured on loopback: ~1 us of ~5 us per datagram). Replies are not
affected: a peer answers on its own route table, to the receive socket.
A connected socket reports an ICMP error (e.g. port unreachable while the
peer is not up yet) on the next send as ECONNREFUSED; that datagram is
counted in ``tx_errors`` and dropped, as a lossy link would.

ECN (``Endpoint(ecn=True)``, the job spec's ``qp.ecn``): every socket the
endpoint sends from carries IPV6_TCLASS = ECT(0) (RFC 3168 §5: the two low
bits of the traffic class), so a marking switch may set CE instead of
dropping; the receive sockets set IPV6_RECVTCLASS and read the traffic class
of every datagram from its ancillary data (``recvmsg``; RFC 3542 §6.5), and a
CE datagram goes to ``QP.receive_datagram(data, now, ecn=True)`` (the
responder then echoes it in its SACK). Every MRC packet of an ECN endpoint is
ECT(0): DATA, and also SACK, NACK and probe packets, because the marking is
per socket (one setsockopt, nothing per datagram; a per-packet traffic class
would need ``sendmsg`` with a control message on every send) and because an
ECN-marking queue that would drop a Not-ECT SACK marks an ECT one instead: a
lost SACK costs an RTO and an EV penalty, and CE on a SACK or probe is
harmless, since the QP reads ``ecn`` on DATA only (the ECN++ argument for
marking control packets: RFC 8311 §4.3, draft-ietf-tcpm-generalized-ecn).
With ``ecn=False`` (the default) no traffic-class option is set: packets and
the ``recv`` receive path are exactly as without ECN support.

Zero UDP checksum, as RoCEv2 does (the SRv6 uSID destination address is
rewritten in flight, which would break the pseudo-header checksum; MRC's own
CRC-32 covers the payload): ``UDP_NO_CHECK6_TX`` (101) and
``UDP_NO_CHECK6_RX`` (102) at level ``SOL_UDP`` (linux/udp.h).

The delay line: the fabric's kernel has no netem, so a link's one-way propagation delay
(topology key ``delay``) is emulated here. A route with ``delay_s`` > 0 (the sum of the
delays of the links its path crosses) holds each datagram that long before it goes on the
wire; the peer's replies are held by the peer's own endpoint on their way back, so a path's
RTT gains both directions' propagation while the fabric's queues see the same packets,
later. One :class:`DelayLine` per distinct delay and one loop timer at the earliest release;
a release that runs late counts in the loop's timer lateness like any timer. The native
endpoint (``agents/mrc/core/mrcn_delay.h``) does the same.

Control priority (``Endpoint(control_priority=P)``, the job spec's ``qp.control_priority``):
every control packet (SACK, NACK, probe, CNP: any type but DATA) is sent with ``SO_PRIORITY``
P as a control message, so that the host NIC's HTB (a link with ``control_priority``,
:mod:`testbed.fabric.shaping`) puts it in its strict-priority class ahead of the data it has
queued, as a RoCE or UET NIC schedules its ACKs. A kernel that refuses the message
(:func:`priority_cmsg`) gets none (``control_priority`` reads 0 and a warning is logged).

Route modes (``enum mrc_ctl_ev_fmt_mode``):

* SRv6: ``Route(addr=<uSID address>, port=4791)`` per EV — the destination
  address carries the path;
* UDP/ECMP: ``Route(addr=<peer>, port=4791, src_port=<EV port>)`` — the UDP
  source port carries the entropy; the endpoint binds one extra socket per
  source port.
"""
from __future__ import annotations

import errno
import functools
import logging
import socket
import struct
import sys
from collections import deque
from dataclasses import dataclass
from typing import Mapping

from ..mrc.packet import PacketType
from ..protocol import UDP_PORT as ROCEV2_PORT
from .loop import EventLoop, TimerHandle, rearmed

log = logging.getLogger(__name__)

UDP_NO_CHECK6_TX = 101
UDP_NO_CHECK6_RX = 102
RECV_BATCH = 32
"""Datagrams one readable callback takes before the loop runs due timers and the other
sockets (it comes back at once while the socket stays readable). 256 let one burst hold
every timer of a host runtime for up to ~10 ms; with 32, mrc's timer lateness p99 at
20 Mbit/s on k4 was 3.02-3.15 ms over 3 runs (3.16-3.91 ms with 256)."""
SOCKET_BUFFER_BYTES = 4 << 20
ECN_MASK = 0b11
"""The ECN field: the two low bits of the IPv6 traffic class (RFC 3168 §5)."""
ECT0 = 0b10
"""ECN-Capable Transport, codepoint ECT(0) (RFC 3168 §5)."""
CE = 0b11
"""Congestion Experienced: set by a marking switch on an ECT packet (RFC 3168 §5)."""
_TCLASS_CMSG_BYTES = socket.CMSG_SPACE(4)   # one IPV6_TCLASS control message: an int
_TCLASS_LOW_BYTE = 0 if sys.byteorder == "little" else 3   # the byte holding the ECN bits


MAX_ROUTE_DELAY_S = 10.0
"""The longest propagation delay a route may have, s (the native endpoint's
``MRCN_EP_MAX_DELAY_S``: minutes of held data would be a unit error, not an experiment)."""


@dataclass(frozen=True)
class Route:
    """Where a datagram on one EV goes: IPv6 ``addr``, UDP ``port``, optional ``src_port``,
    and ``delay_s``: the one-way propagation delay of the EV's path (s, 0..
    :data:`MAX_ROUTE_DELAY_S`), for which the endpoint holds each datagram before it sends
    it (module docstring: the delay line)."""

    addr: str
    port: int = ROCEV2_PORT
    src_port: int | None = None
    delay_s: float = 0.0

    def __post_init__(self):
        if not 0.0 <= self.delay_s <= MAX_ROUTE_DELAY_S:
            raise ValueError(f"route delay {self.delay_s!r} s is outside 0..{MAX_ROUTE_DELAY_S} s")


class DelayLine:
    """Datagrams held for one propagation delay, oldest first (one line per distinct delay,
    so arrival order is due order): ``held`` is a deque of (due, send, data, addr)."""

    __slots__ = ("delay_s", "held")

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.held: deque = deque()


@functools.cache
def priority_cmsg() -> bool:
    """Whether this kernel's UDPv6 ``sendmsg`` takes ``SO_PRIORITY`` as a control message
    (``__sock_cmsg_send``; Linux 6.x). Probed once per process: a refused message fails with
    EINVAL before any route lookup, so an unreachable probe address still answers."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        try:
            s.sendmsg([b""], [(socket.SOL_SOCKET, socket.SO_PRIORITY, struct.pack("i", 0))], 0,
                      ("::1", 9, 0, 0))
        except OSError as exc:
            return exc.errno != errno.EINVAL
    return True


def control_cmsg(priority: int) -> list | None:
    """The ancillary data that gives a datagram ``priority`` (u32), or None for 0 or on a
    kernel without :func:`priority_cmsg` (logged)."""
    if not priority:
        return None
    if not priority_cmsg():
        log.warning("this kernel refuses SO_PRIORITY control messages: control packets get no priority")
        return None
    return [(socket.SOL_SOCKET, socket.SO_PRIORITY, struct.pack("I", priority))]


def _udp6_socket(bind_addr: str, port: int, zero_checksum: bool, *, tclass: int | None = None,
                 recv_tclass: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if tclass is not None:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tclass)
        if recv_tclass:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
        for opt, size in ((socket.SO_RCVBUF, SOCKET_BUFFER_BYTES),
                          (socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)):
            sock.setsockopt(socket.SOL_SOCKET, opt, size)
        if zero_checksum:
            sock.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_TX, 1)
            sock.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_RX, 1)
        sock.bind((bind_addr, port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def connected(sock: socket.socket, addr: tuple) -> socket.socket:
    """``sock`` connected to ``addr``; closed, and the OSError raised, if it cannot be."""
    try:
        sock.connect(addr)
    except OSError:
        sock.close()
        raise
    return sock


class Endpoint:
    """UDP/IPv6 sockets for a set of QPs, driven by an :class:`EventLoop`.

    ``bind_addr``/``port``: the receive socket (port 0 picks a free one; see
    ``self.port``). ``zero_checksum``: set UDP_NO_CHECK6_TX/RX.
    ``connected_send``: one connected send socket per SRv6-mode destination
    (module docstring). ``ecn``: send ECT(0) and report CE to the QPs
    (module docstring); ``rx_ce`` counts the CE datagrams received.
    ``send_tclass``: the IPv6 traffic class (0..255) of every datagram sent,
    overriding ECT(0) (None: ECT(0) with ``ecn``, else the kernel's 0); tests
    send CE (3) with it, standing in for a marking switch. ``control_priority``: the
    SO_PRIORITY of every control packet (module docstring; 0: none). ``max_datagram``: the
    largest datagram read, bytes (64..65535; the path MTU less IPv6 and UDP: a longer one is
    truncated and fails its CRC). Raises OSError if a socket cannot be bound, ValueError for a
    traffic class outside 0..255 or a ``max_datagram`` outside its range.
    """

    def __init__(self, loop: EventLoop, *, bind_addr: str = "::", port: int = ROCEV2_PORT,
                 zero_checksum: bool = True, connected_send: bool = True, ecn: bool = False,
                 send_tclass: int | None = None, control_priority: int = 0,
                 max_datagram: int = 65535):
        if send_tclass is not None and not 0 <= send_tclass <= 255:
            raise ValueError(f"send_tclass {send_tclass!r} is not an IPv6 traffic class (0..255)")
        self.loop = loop
        self.bind_addr = bind_addr
        self.zero_checksum = zero_checksum
        self.connected_send = connected_send
        self.ecn = ecn
        self.send_tclass = send_tclass if send_tclass is not None else (ECT0 if ecn else None)
        if not 64 <= max_datagram <= 65535:
            raise ValueError(f"max_datagram {max_datagram!r}: expected 64..65535 bytes")
        self.max_datagram = max_datagram   # the largest datagram read; a longer one is truncated (CRC fails)
        self._ctl = control_cmsg(control_priority)
        self.control_priority = control_priority if self._ctl else 0
        self._dest_socks: dict[tuple, socket.socket] = {}
        self._rx: dict[bytes, object] = {}   # QPN as 4 network-order bytes -> QP
        self.sock = self._socket(port, receive=True)
        self.port = self.sock.getsockname()[1]
        self._src_socks: dict[int, socket.socket] = {}
        self._qps: dict[int, object] = {}
        self._routes: dict[int, dict[int, tuple]] = {}   # QPN -> EV -> (send, addr, line)
        self._timers: dict[int, TimerHandle] = {}
        self._timer_cbs: dict[int, object] = {}   # QPN -> its timer callback, made once per attach
        self._lines: dict[float, DelayLine] = {}
        self._release: TimerHandle | None = None
        self.rx_datagrams = 0
        self.tx_datagrams = 0
        self.rx_unknown_qpn = 0
        self.tx_errors = 0
        self.tx_no_route = 0
        self.tx_released = 0
        self.rx_ce = 0
        self._reader = reader = self._on_readable_ecn if ecn else self._on_readable
        sock = self.sock
        loop.add_reader(sock, lambda: reader(sock))

    def _socket(self, port: int, *, receive: bool) -> socket.socket:
        return _udp6_socket(self.bind_addr, port, self.zero_checksum, tclass=self.send_tclass,
                            recv_tclass=receive and self.ecn)

    def attach(self, qp, routes: Mapping[int, Route]) -> None:
        """Serve ``qp`` (datagrams to its QPN) and send its EV ``ev`` along ``routes[ev]``.

        Opens the send sockets of new destinations / source ports: call it in the
        endpoint's network namespace (sockets belong to the namespace they are made in)."""
        table = {}
        for ev, route in routes.items():
            addr = (route.addr, route.port, 0, 0)
            line = self._line(route.delay_s) if route.delay_s > 0 else None
            if route.src_port is not None:
                table[ev] = (self._src_sock(route.src_port).sendto, addr, line)
            elif self.connected_send:
                table[ev] = (self._dest_sock(addr).send, None, line)
            else:
                table[ev] = (self.sock.sendto, addr, line)
        self._qps[qp.qpn] = qp
        self._timer_cbs[qp.qpn] = lambda: self._on_timer(qp)
        self._rx[qp.qpn.to_bytes(4, "big")] = qp
        self._routes[qp.qpn] = table
        self.kick(qp)

    def detach(self, qp) -> None:
        self._qps.pop(qp.qpn, None)
        self._rx.pop(qp.qpn.to_bytes(4, "big"), None)
        self._routes.pop(qp.qpn, None)
        self._timer_cbs.pop(qp.qpn, None)
        handle = self._timers.pop(qp.qpn, None)
        if handle is not None:
            handle.cancel()

    def _line(self, delay_s: float) -> DelayLine:
        line = self._lines.get(delay_s)
        if line is None:
            line = self._lines[delay_s] = DelayLine(delay_s)
        return line

    def _dest_sock(self, addr: tuple) -> socket.socket:
        sock = self._dest_socks.get(addr)
        if sock is None:
            sock = self._dest_socks[addr] = connected(self._socket(0, receive=False), addr)
        return sock

    def _src_sock(self, src_port: int) -> socket.socket:
        sock = self._src_socks.get(src_port)
        if sock is None:
            sock = self._socket(src_port, receive=True)
            self._src_socks[src_port] = sock
            self.loop.add_reader(sock, lambda s=sock, r=self._reader: r(s))
        return sock

    def kick(self, qp=None) -> None:
        """Send what ``qp`` (default: every QP) has to send now and re-arm its timer.

        Call after ``post_write`` or a controller call.
        """
        now = self.loop.time()
        for q in ([qp] if qp is not None else list(self._qps.values())):
            self._flush(q, now)

    def _on_readable(self, sock: socket.socket) -> None:
        recv = sock.recv
        qps = self._rx
        now = self.loop.time()
        dirty = {}
        last, batch = None, []
        n = 0
        while n < RECV_BATCH:
            try:
                data = recv(self.max_datagram)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:   # e.g. ICMP port unreachable reported on the socket
                log.debug("recv on %s: %s", sock.getsockname(), exc)
                break
            n += 1
            qp = qps.get(data[4:8])           # demultiplex by destination QPN
            if qp is None:
                self.rx_unknown_qpn += 1
                continue
            if qp is not last:                # runs of one QP's datagrams, in arrival order
                if batch:
                    last.receive_datagrams(batch, now)
                dirty[qp.qpn] = last = qp
                batch = []
            batch.append(data)
        if batch:
            last.receive_datagrams(batch, now)
        self.rx_datagrams += n
        for qp in dirty.values():
            self._flush(qp, now)

    def _on_readable_ecn(self, sock: socket.socket) -> None:
        """:meth:`_on_readable` with the traffic class of each datagram (``ecn=True`` only).

        A CE datagram ends the current run and goes alone to
        ``QP.receive_datagram(data, now, ecn=True)``, so arrival order is kept."""
        recvmsg = sock.recvmsg
        qps = self._rx
        now = self.loop.time()
        dirty = {}
        last, batch = None, []
        n = ce = 0
        tclass_type, low = socket.IPV6_TCLASS, _TCLASS_LOW_BYTE
        while n < RECV_BATCH:
            try:
                data, anc, _, _ = recvmsg(self.max_datagram, _TCLASS_CMSG_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:   # e.g. ICMP port unreachable reported on the socket
                log.debug("recv on %s: %s", sock.getsockname(), exc)
                break
            n += 1
            qp = qps.get(data[4:8])           # demultiplex by destination QPN
            if qp is None:
                self.rx_unknown_qpn += 1
                continue
            if anc:
                _, ctype, cdata = anc[0]
                if ctype == tclass_type and cdata[low] & ECN_MASK == CE:
                    ce += 1
                    if batch:
                        last.receive_datagrams(batch, now)
                        batch = []
                    qp.receive_datagram(data, now, ecn=True)
                    dirty[qp.qpn] = last = qp
                    continue
            if qp is not last:                # runs of one QP's datagrams, in arrival order
                if batch:
                    last.receive_datagrams(batch, now)
                dirty[qp.qpn] = last = qp
                batch = []
            batch.append(data)
        if batch:
            last.receive_datagrams(batch, now)
        self.rx_datagrams += n
        self.rx_ce += ce
        for qp in dirty.values():
            self._flush(qp, now)

    def _flush(self, qp, now: float) -> None:
        table = self._routes.get(qp.qpn)
        if table is None:
            return
        burst = qp.config.max_burst
        get = table.get
        held = False
        while True:
            out = qp.datagrams_to_send(now)
            for data, ev in out:
                route = get(ev)
                if route is None:
                    self.tx_no_route += 1
                    continue
                send, addr, line = route
                if line is not None:
                    line.held.append((now + line.delay_s, send, data, addr))
                    held = True
                    continue
                self._send(send, data, addr)
            self.tx_datagrams += len(out)
            if len(out) < burst:
                break
        if held:
            self._arm_release()
        self._arm(qp)

    def _send(self, send, data, addr) -> None:
        try:
            if self._ctl is not None and data[1] != PacketType.DATA:   # byte 1: the type
                send.__self__.sendmsg((data,), self._ctl, 0, *(() if addr is None else (addr,)))
            elif addr is None:
                send(data)
            else:
                send(data, addr)
        except (BlockingIOError, InterruptedError):
            self.tx_errors += 1          # a full socket buffer is a drop, like a NIC
        except OSError as exc:
            if exc.errno not in (errno.ENOBUFS, errno.ENETUNREACH, errno.EHOSTUNREACH,
                                 errno.ECONNREFUSED):
                raise
            self.tx_errors += 1

    def _arm_release(self) -> None:
        """One loop timer at the earliest release of any delay line (none when all are empty)."""
        due = min((line.held[0][0] for line in self._lines.values() if line.held), default=None)
        self._release = rearmed(self.loop, self._release, due, self._on_release)

    def _on_release(self) -> None:
        self._release = None
        now = self.loop.time()
        for line in self._lines.values():
            held = line.held
            while held and held[0][0] <= now:
                _, send, data, addr = held.popleft()
                self._send(send, data, addr)
                self.tx_released += 1
        self._arm_release()

    def _arm(self, qp) -> None:
        handle = self._timers.get(qp.qpn)
        new = rearmed(self.loop, handle, qp.get_timer(), self._timer_cbs[qp.qpn])
        if new is None:
            self._timers.pop(qp.qpn, None)
        elif new is not handle:
            self._timers[qp.qpn] = new

    def _on_timer(self, qp) -> None:
        self._timers.pop(qp.qpn, None)
        now = self.loop.time()
        qp.handle_timer(now)
        self._flush(qp, now)

    def close(self) -> None:
        """Close every socket this endpoint opened (what the delay lines hold is dropped)."""
        for handle in self._timers.values():
            handle.cancel()
        if self._release is not None:
            self._release.cancel()
            self._release = None
        self._lines.clear()
        for sock in [self.sock, *self._src_socks.values()]:
            try:
                self.loop.remove_reader(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        for sock in self._dest_socks.values():
            sock.close()
        self._src_socks.clear()
        self._dest_socks.clear()
