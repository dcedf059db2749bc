"""UDP over IPv6 for QPs of the native engine: :class:`NativeEndpoint`, the twin of
:class:`agents.net.udp.Endpoint` with the per-packet work in C.

Python creates, binds and owns every socket (in the agent's network namespace, with the
same options as :class:`agents.net.udp.Endpoint`: zero UDP checksum, ECT(0) and
IPV6_RECVTCLASS with ``ecn``) and registers them with the agent's
:class:`agents.net.loop.EventLoop`; the C endpoint (``agents/mrc/core/mrcn_endpoint.h``)
does the rest per wake-up: one ``recvmmsg`` of up to :data:`agents.net.udp.RECV_BATCH`
datagrams, the CE mark of each, demultiplexing by QPN, the QPs' receive, send and timer
calls, and ``sendmmsg`` per socket. Python is called once per readable socket and once per
due deadline (one loop timer for the whole endpoint, at the earliest QP deadline), not per
datagram; QP timers that come due while a receive batch runs are run by C right after it, and
every QP timer's lateness counts in the loop's (:meth:`EventLoop.add_timer_source`); the QPs'
events (completions, EV events, errors) stay in the QPs until their owner drains them with
``next_event()``. The endpoint's loop callbacks return whether any QP has events waiting, so
that a host runtime gives its agent a turn only then (:class:`agents.runtime.LoopView`): most
wake-ups (a SACK, a data packet mid-message) have nothing for Python.

Sending: SRv6 routes go out of the one receive socket with per-datagram addresses
(``connected_send=False``, the default here), so that a burst sprayed over many uSID
destinations is one ``sendmmsg``; connected per-destination sockets (udp.py's default)
would make it one system call per datagram. ECMP routes (``src_port``) use one socket
per source port, as udp.py.

Routes with a propagation delay (``Route.delay_s``) hold their datagrams in the C endpoint's
delay lines (one per distinct delay, ``agents/mrc/core/mrcn_delay.h``), released at the
endpoint's one loop timer or after a receive batch: the delay line of udp.py.
"""
from __future__ import annotations

import socket
import time
from typing import Mapping

from ..mrc import native
from ..protocol import UDP_PORT as ROCEV2_PORT
from .loop import EventLoop, TimerHandle, rearmed
from .udp import ECT0, RECV_BATCH, Route, _udp6_socket, connected, control_cmsg

MAX_DATAGRAM_BYTES = 65535


def _counter(name: str) -> property:
    """A read-only attribute: the C endpoint's counter ``name``."""
    return property(lambda self: self._ep.counters()[name], doc=f"The C endpoint's {name} counter.")


class NativeEndpoint:
    """UDP/IPv6 sockets for a set of native QPs (``agents.mrc._core.QP``).

    Same constructor and interface as :class:`agents.net.udp.Endpoint` (``attach``,
    ``detach``, ``kick``, ``close`` and the counters ``rx_datagrams``, ``tx_datagrams``,
    ``rx_unknown_qpn``, ``tx_errors``, ``tx_no_route``, ``rx_ce``), plus ``counters()``
    with the C endpoint's system-call counts. Raises
    :class:`agents.mrc.native.NativeEngineMissing` without the native engine, OSError if
    a socket cannot be bound, ValueError for a traffic class outside 0..255 or a
    ``max_datagram`` (the largest datagram read, as the Python endpoint's) outside 64..65535.
    """

    def __init__(self, loop: EventLoop, *, bind_addr: str = "::", port: int = ROCEV2_PORT,
                 zero_checksum: bool = True, connected_send: bool = False, ecn: bool = False,
                 send_tclass: int | None = None, control_priority: int = 0,
                 max_datagram: int = MAX_DATAGRAM_BYTES):
        if send_tclass is not None and not 0 <= send_tclass <= 255:
            raise ValueError(f"send_tclass {send_tclass!r} is not an IPv6 traffic class (0..255)")
        if not 64 <= max_datagram <= MAX_DATAGRAM_BYTES:
            raise ValueError(f"max_datagram {max_datagram!r}: expected 64..{MAX_DATAGRAM_BYTES} bytes")
        core = native.load(require=True)
        self.loop = loop
        self.bind_addr = bind_addr
        self.zero_checksum = zero_checksum
        self.connected_send = connected_send
        self.ecn = ecn
        self.send_tclass = send_tclass if send_tclass is not None else (ECT0 if ecn else None)
        # the receive slab holds RECV_BATCH datagrams of max_datagram: at the path's largest, not
        # 64 KiB, its slots do not all fall in the same cache sets (64 KiB apart) and it stays small
        self._ep = core.Endpoint(RECV_BATCH, max_datagram)
        # the QP timers it runs after a receive batch read the loop's own clock
        self._ep.use_monotonic_clock(loop.time is time.monotonic)
        self.control_priority = control_priority if control_cmsg(control_priority) else 0
        self._ep.set_control_priority(self.control_priority)
        loop.add_timer_source(self)
        # a native loop serves the sockets and timers in C (agents.net.loop, mrcn_poller.h)
        self._tag = (loop.add_native_endpoint(self._ep, self._on_events)
                     if getattr(loop, "native_poller", False) else None)
        self._readers: list[socket.socket] = []
        self._dest_socks: dict[tuple, socket.socket] = {}
        self._src_socks: dict[int, socket.socket] = {}
        self._route_ids: dict[tuple, int] = {}
        self._qps: dict[int, object] = {}
        self._timer: TimerHandle | None = None
        self.sock = self._socket(port, receive=True)
        self.port = self.sock.getsockname()[1]
        self._read(self.sock)

    # ---- sockets (Python owns them; C gets their descriptors) -------------------------
    def _socket(self, port: int, *, receive: bool) -> socket.socket:
        return _udp6_socket(self.bind_addr, port, self.zero_checksum, tclass=self.send_tclass,
                            recv_tclass=receive and self.ecn)

    def _read(self, sock: socket.socket) -> None:
        self._readers.append(sock)
        if self._tag is not None:
            self.loop.add_native_socket(sock, self._tag, self.ecn)
            return
        fd, ep, ecn, loop = sock.fileno(), self._ep, self.ecn, self.loop

        def readable() -> bool:
            ep.on_readable(fd, ecn, loop.time())
            self._rearm()
            return ep.eventful > 0
        loop.add_reader(sock, readable)

    def _route_id(self, route: Route) -> int:
        addr, delay = (route.addr, route.port), route.delay_s
        if route.src_port is not None:
            sock = self._src_socks.get(route.src_port)
            if sock is None:
                sock = self._src_socks[route.src_port] = self._socket(route.src_port, receive=True)
                self._read(sock)
            key = ("src", route.src_port, addr, delay)
        elif self.connected_send:
            sock = self._dest_socks.get(addr)
            if sock is None:
                sock = self._dest_socks[addr] = connected(self._socket(0, receive=False), addr)
            key, addr = ("conn", addr, delay), None
        else:
            sock, key = self.sock, ("main", addr, delay)
        rid = self._route_ids.get(key)
        if rid is None:
            rid = self._route_ids[key] = self._ep.add_route(sock.fileno(), addr, delay)
        return rid

    # ---- QPs -------------------------------------------------------------------------
    def attach(self, qp, routes: Mapping[int, Route]) -> None:
        """Serve native ``qp`` and send its EV ``ev`` along ``routes[ev]`` (call it in the
        endpoint's network namespace: new sockets belong to the namespace they are made in)."""
        ids = {ev: self._route_id(route) for ev, route in routes.items()}
        self._ep.attach(qp)
        for ev, rid in ids.items():
            self._ep.set_route(qp.qpn, ev, rid)
        self._qps[qp.qpn] = qp
        self.kick(qp)

    def detach(self, qp) -> None:
        self._qps.pop(qp.qpn, None)
        self._ep.detach(qp.qpn)
        self._rearm()

    def kick(self, qp=None) -> None:
        """Send what ``qp`` (default: every QP) has to send now and re-arm the deadline."""
        now = self.loop.time()
        for q in ([qp] if qp is not None else list(self._qps.values())):
            if q.qpn in self._qps:   # a detached QP has no routes: nothing to send, as udp.py
                self._ep.kick(q.qpn, now)
        self._rearm()

    def _on_events(self) -> bool:
        """A native loop's call: QPs of this endpoint have events for their owner."""
        return self._ep.release_eventful() > 0

    # ---- the one loop timer ------------------------------------------------------------
    def _rearm(self) -> None:
        if self._tag is not None:   # the native loop reads every deadline itself
            return
        self._timer = rearmed(self.loop, self._timer, self._ep.next_deadline(), self._on_timer)

    def _on_timer(self) -> bool:
        self._timer = None
        self._ep.on_timer(self.loop.time())
        self._rearm()
        return self._ep.eventful > 0

    # ---- counters ----------------------------------------------------------------------
    @property
    def timers_fired(self) -> int:
        """QP timers the C endpoint ran (an :class:`EventLoop` timer source)."""
        return self._ep.timer_fires

    @property
    def timer_late_sum_s(self) -> float:
        return self._ep.timer_late_sum_s

    def take_timer_late_max_s(self) -> float:
        return self._ep.take_timer_late_max_s()

    def counters(self) -> dict:
        """The C endpoint's counters (datagrams, drops, recvmmsg/sendmmsg calls, timers)."""
        return self._ep.counters()

    # udp.py's counters, read off the C endpoint's (tx_released: taken out of a delay line)
    rx_datagrams = _counter("rx_datagrams")
    tx_datagrams = _counter("tx_datagrams")
    rx_unknown_qpn = _counter("rx_unknown_qpn")
    tx_errors = _counter("tx_errors")
    tx_no_route = _counter("tx_no_route")
    tx_released = _counter("tx_released")
    rx_ce = _counter("rx_ce")

    def close(self) -> None:
        """Detach every QP and close every socket this endpoint opened."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.loop.remove_timer_source(self)
        for qpn in list(self._qps):
            self._ep.detach(qpn)
        self._qps.clear()
        if self._tag is not None:   # its sockets leave the native wait with it
            self.loop.remove_native_endpoint(self._tag)
        else:
            for sock in self._readers:
                try:
                    self.loop.remove_reader(sock)
                except (KeyError, ValueError):
                    pass
        for sock in {*self._readers, *self._dest_socks.values()}:
            sock.close()
        self._readers.clear()
        self._src_socks.clear()
        self._dest_socks.clear()
