"""Kernel TCP ring channel: framed writes (offset, length, imm) over one stream per direction.

The baseline "a real peer that no one here wrote": the kernel's TCP (its
congestion control, retransmission and ECMP-hashed path on the hosts'
plain addresses). Rank ``r`` connects to ``next.ecmp_addr:tcp_port`` and
accepts one connection from ``prev``. Wire format (network order):

* hello, once per connection: ``b"MRCTB1\\0\\0"``, sender rank u32, world size u32;
* per write: offset u64, length u32, imm u32 (16 bytes), then ``length``
  payload bytes, placed at ``offset`` of the receive region; the arrival is
  announced (``on_arrival(imm)``) when the last byte is placed. TCP keeps
  the order, so completions are in order.

Counters come from ``TCP_INFO`` (linux/tcp.h ``struct tcp_info``): total
retransmissions, smoothed RTT, cwnd in segments times the send MSS,
bytes_acked / bytes_received.
"""
from __future__ import annotations

import errno
import logging
import select
import socket
import struct
from collections import deque
from typing import Callable

import numpy as np

from .collectives import Send

log = logging.getLogger(__name__)

HELLO = struct.Struct("!8sII")
HELLO_MAGIC = b"MRCTB1\0\0"
FRAME = struct.Struct("!QII")
_TCP_INFO_BYTES = 216   # through tcpi_bytes_retrans (offset 208)
SOCKET_BUFFER_BYTES = 4 << 20


class TCPChannelError(RuntimeError):
    """The peer could not be reached, or sent something that is not our framing."""


def tcp_info(sock: socket.socket) -> dict:
    """Selected ``struct tcp_info`` fields (linux/tcp.h): retransmits (tcpi_total_retrans, segments),
    rtt_s, cwnd_bytes, bytes_acked/received and bytes_retrans (tcpi_bytes_retrans, RFC 4898
    tcpEStatsPerfOctetsRetrans; Linux >= 4.19, absent -> 0). {} if the socket is gone."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
    except OSError:
        return {}
    if len(raw) < _TCP_INFO_BYTES:
        raw = raw.ljust(_TCP_INFO_BYTES, b"\0")
    snd_mss, = struct.unpack_from("I", raw, 16)
    rtt_us, = struct.unpack_from("I", raw, 68)
    snd_cwnd, = struct.unpack_from("I", raw, 80)
    total_retrans, = struct.unpack_from("I", raw, 100)
    bytes_acked, bytes_received = struct.unpack_from("QQ", raw, 120)
    bytes_retrans, = struct.unpack_from("Q", raw, 208)
    return {"retransmits": total_retrans, "rtt_s": rtt_us / 1e6,
            "cwnd_bytes": snd_cwnd * snd_mss, "bytes_acked": bytes_acked,
            "bytes_received": bytes_received, "bytes_retrans": bytes_retrans}


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    sock.setblocking(False)


class TCPChannel:
    """Ring channel over kernel TCP for one rank (see module docstring).

    ``loop``: an :class:`agents.io.EventLoop`. ``recv_region``: uint8 array
    the previous rank writes into. Callbacks: ``on_arrival(imm)`` per landed
    write. Raises OSError if the listening socket cannot be bound;
    :class:`TCPChannelError` from :meth:`service` when the peer is unreachable
    after ``connect_timeout_s`` or misbehaves.
    """

    def __init__(self, loop, spec, recv_region: np.ndarray, *,
                 on_arrival: Callable[[int], None]):
        self.loop, self.spec = loop, spec
        self.region = memoryview(recv_region).cast("B")
        self.on_arrival = on_arrival
        n = spec.world_size
        self.prev_rank = (spec.rank - 1) % n
        self.next_addr = (spec.next.ecmp_addr, spec.next.tcp_port or spec.tcp_port)
        self.listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((spec.bind_addr, spec.tcp_port))
        self.listener.listen(4)
        self.listener.setblocking(False)
        loop.add_reader(self.listener, self._on_accept)
        self.tx: socket.socket | None = None
        self.tx_connected = False
        self.rx: socket.socket | None = None
        self._rx_hello = False
        self._connect_deadline = loop.time() + spec.connect_timeout_s
        self._retry_at = 0.0
        self._out: deque[memoryview] = deque()
        self._hdr = bytearray()
        self._payload: tuple[int, int, int] | None = None  # (offset, remaining, imm)
        self._pos = 0
        self.tx_bytes = 0
        self.rx_bytes = 0
        self.last_error = ""

    # ---- connection set-up -------------------------------------------------
    @property
    def connected(self) -> bool:
        return self.tx_connected and self._rx_hello

    def _start_connect(self) -> None:
        self.tx = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        _tune(self.tx)
        if self.spec.next.src_port is not None:
            # A fixed source port: the ECMP hash (and so the path) is a function of the seed.
            self.tx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.tx.bind((self.spec.bind_addr, self.spec.next.src_port))
            except OSError as exc:
                self._connect_failed(exc.errno or errno.EADDRINUSE)
                return
        err = self.tx.connect_ex(self.next_addr)
        if err not in (0, errno.EINPROGRESS):
            self._connect_failed(err)

    def _connect_failed(self, err: int) -> None:
        self.last_error = errno.errorcode.get(err, str(err))
        if self.tx is not None:
            self.tx.close()
        self.tx = None
        self._retry_at = self.loop.time() + 0.05

    def _poll_connect(self, now: float) -> None:
        if self.tx is None:
            if now >= self._connect_deadline:
                raise TCPChannelError(
                    f"peer {self.spec.next.host} unreachable at [{self.next_addr[0]}]:"
                    f"{self.next_addr[1]} after {self.spec.connect_timeout_s} s "
                    f"({self.last_error or 'no answer'})")
            if now >= self._retry_at:
                self._start_connect()
            return
        _, writable, _ = select.select([], [self.tx], [], 0)
        if not writable:
            if now >= self._connect_deadline:
                self._connect_failed(errno.ETIMEDOUT)
            return
        err = self.tx.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._connect_failed(err)
            return
        self.tx_connected = True
        self._out.appendleft(memoryview(HELLO.pack(HELLO_MAGIC, self.spec.rank,
                                                   self.spec.world_size)))

    def _on_accept(self) -> None:
        try:
            sock, addr = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if self.rx is not None:
            log.warning("rank %d: second TCP connection from %s refused", self.spec.rank, addr)
            sock.close()
            return
        _tune(sock)
        self.rx = sock
        self.loop.add_reader(sock, self._on_readable)

    # ---- data path -----------------------------------------------------------
    def post(self, send: Send) -> None:
        """Queue one framed write to the next rank (data already copied by the caller)."""
        self._out.append(memoryview(FRAME.pack(send.remote_offset, len(send.data), send.imm)))
        self._out.append(memoryview(send.data))
        self._flush()

    def _flush(self) -> None:
        if not self.tx_connected:
            return
        out, sock = self._out, self.tx
        while out:
            try:
                sent = sock.send(out[0])
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                raise TCPChannelError(f"send to {self.spec.next.host}: {exc.strerror}") from None
            self.tx_bytes += sent
            if sent == len(out[0]):
                out.popleft()
            else:
                out[0] = out[0][sent:]

    def _on_readable(self) -> None:
        sock = self.rx
        for _ in range(64):
            try:
                if self._payload is None:
                    want = (HELLO.size if not self._rx_hello else FRAME.size) - len(self._hdr)
                    data = sock.recv(want)
                    if not data:
                        return self._rx_closed()
                    self._hdr += data
                    if len(self._hdr) == (HELLO.size if not self._rx_hello else FRAME.size):
                        self._header_done()
                else:
                    offset, remaining, imm = self._payload
                    got = sock.recv_into(self.region[offset:offset + remaining])
                    if not got:
                        return self._rx_closed()
                    self.rx_bytes += got
                    remaining -= got
                    if remaining:
                        self._payload = (offset + got, remaining, imm)
                    else:
                        self._payload = None
                        self.on_arrival(imm)
            except (BlockingIOError, InterruptedError):
                return

    def _header_done(self) -> None:
        hdr, self._hdr = bytes(self._hdr), bytearray()
        if not self._rx_hello:
            magic, rank, world = HELLO.unpack(hdr)
            if magic != HELLO_MAGIC or rank != self.prev_rank or world != self.spec.world_size:
                raise TCPChannelError(f"unexpected TCP hello {hdr!r}: want rank "
                                      f"{self.prev_rank} of {self.spec.world_size}")
            self._rx_hello = True
            return
        offset, length, imm = FRAME.unpack(hdr)
        if offset + length > len(self.region):
            raise TCPChannelError(f"write [{offset}, +{length}) outside the receive region "
                                  f"of {len(self.region)} bytes")
        if length == 0:
            self.on_arrival(imm)
        else:
            self._payload = (offset, length, imm)

    def _rx_closed(self) -> None:
        self.loop.remove_reader(self.rx)
        self.rx.close()
        self.rx = None
        self.peer_closed = True

    def service(self, now: float) -> None:
        """Progress connection set-up and pending output; TCPChannelError on failure."""
        if not self.tx_connected:
            self._poll_connect(now)
        self._flush()

    @property
    def wants_poll(self) -> bool:
        """True while output waits for socket space (the loop polls; io.EventLoop has no writers)."""
        return bool(self._out) or not self.tx_connected

    @property
    def idle(self) -> bool:
        """Everything posted has been handed to the kernel."""
        return not self._out

    def flows(self) -> list[dict]:
        """Cumulative per-direction counters for a sample message."""
        tx = tcp_info(self.tx) if self.tx is not None else {}
        rx = tcp_info(self.rx) if self.rx is not None else {}
        return [
            {"peer": self.spec.next.host, "dir": "tx", "bytes": tx.get("bytes_acked", 0),
             "retransmits": tx.get("retransmits", 0), "rtt_s": tx.get("rtt_s"),
             "retransmitted_bytes": tx.get("bytes_retrans", 0),
             "cwnd_bytes": tx.get("cwnd_bytes"), "evs": []},
            {"peer": self.spec.prev.host, "dir": "rx", "bytes": self.rx_bytes,
             "retransmits": 0, "rtt_s": rx.get("rtt_s"), "cwnd_bytes": None, "evs": []},
        ]

    def summary(self) -> dict:
        return {"tx_bytes": self.tx_bytes, "rx_bytes": self.rx_bytes,
                **{f"tx_{k}": v for k, v in (tcp_info(self.tx) if self.tx else {}).items()}}

    def close(self) -> None:
        for sock in (self.rx, self.listener):
            if sock is not None:
                try:
                    self.loop.remove_reader(sock)
                except (KeyError, ValueError):
                    pass
                sock.close()
        if self.tx is not None:
            self.tx.close()
