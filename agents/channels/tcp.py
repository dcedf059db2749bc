"""Kernel TCP channel: framed writes (offset, length, imm), one stream per peer and direction.

The baseline "a real peer that no one here wrote": the kernel's TCP (its
congestion control, retransmission and ECMP-hashed path on the hosts'
plain addresses). Rank ``r`` connects to every ``send_to`` peer at
``ecmp_addr:tcp_port`` (from that peer's ``src_port`` if given) and accepts
one connection from every ``recv_from`` peer, recognised by the rank in its
hello. Wire format (network order):

* hello, once per connection: ``b"MRCTB1\\0\\0"``, sender rank u32, world size u32;
* per write: offset u64, length u32, imm u32 (16 bytes), then ``length``
  payload bytes, placed at ``offset`` of the receive region; the arrival is
  announced (``on_arrival(src_rank, imm)``) when the last byte is placed.
  TCP keeps the order, so arrivals from one peer are in order.

Send completion (``on_send_complete(peer_rank, imm)``): the peer's kernel
has acknowledged the frame's last byte (``tcpi_bytes_acked``, polled while
completions are pending). That is as close to RDMA's "acknowledged by the
responder" as TCP gets, but it is still weaker: the bytes may sit in the
peer's socket buffer, not yet read by its agent.

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

from ..collectives import Send

log = logging.getLogger(__name__)

HELLO = struct.Struct("!8sII")
HELLO_MAGIC = b"MRCTB1\0\0"
FRAME = struct.Struct("!QII")
_TCP_INFO_BYTES = 216   # through tcpi_bytes_retrans (offset 208)
SOCKET_BUFFER_BYTES = 4 << 20
CONNECT_RETRY_S = 0.05


class TCPChannelError(RuntimeError):
    """The peer could not be reached, or sent something that is not our framing."""


def tcp_info(sock: socket.socket) -> dict:
    """Selected ``struct tcp_info`` fields (linux/tcp.h): retransmits (tcpi_total_retrans, segments),
    rtt_s, cwnd_bytes, bytes_acked/received and bytes_retrans (tcpi_bytes_retrans, RFC 4898
    tcpEStatsPerfOctetsRetrans; Linux >= 4.19, absent -> 0). ``bytes_acked`` counts the SYN
    (one more than the data bytes). {} if the socket is gone."""
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


def _bytes_acked(sock: socket.socket) -> int:
    """Data bytes the peer has acknowledged on ``sock`` (tcpi_bytes_acked minus the SYN)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 136)
    return max(struct.unpack_from("Q", raw, 120)[0] - 1, 0) if len(raw) >= 128 else 0


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    sock.setblocking(False)


class _TxConn:
    """Our connection to one ``send_to`` peer: connect with retries, queue, flush, completions."""

    def __init__(self, peer, spec, now: float):
        self.peer, self.spec = peer, spec
        self.addr = (peer.ecmp_addr, peer.tcp_port or spec.tcp_port)
        self.sock: socket.socket | None = None
        self.connected = False
        self.deadline = now + spec.connect_timeout_s
        self.retry_at = 0.0
        self.last_error = ""
        self.out: deque[list] = deque()     # [memoryview, imm or None at the end of a frame]
        self.written = 0                    # bytes handed to the kernel (hello included)
        self.unacked: deque[tuple[int, int]] = deque()   # (end offset, imm), in order

    def poll_connect(self, now: float) -> None:
        if self.sock is None:
            if now >= self.deadline:
                raise TCPChannelError(
                    f"peer {self.peer.host} unreachable at [{self.addr[0]}]:{self.addr[1]} "
                    f"after {self.spec.connect_timeout_s} s ({self.last_error or 'no answer'})")
            if now >= self.retry_at:
                self._start(now)
            return
        _, writable, _ = select.select([], [self.sock], [], 0)
        if not writable:
            if now >= self.deadline:
                self._failed(errno.ETIMEDOUT, now)
            return
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._failed(err, now)
            return
        self.connected = True
        hello = HELLO.pack(HELLO_MAGIC, self.spec.rank, self.spec.world_size)
        self.out.appendleft([memoryview(hello), None])

    def _start(self, now: float) -> None:
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        _tune(self.sock)
        if self.peer.src_port is not None:
            # A fixed source port: the ECMP hash (and so the path) is a function of the seed.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.sock.bind((self.spec.bind_addr, self.peer.src_port))
            except OSError as exc:
                self._failed(exc.errno or errno.EADDRINUSE, now)
                return
        err = self.sock.connect_ex(self.addr)
        if err not in (0, errno.EINPROGRESS):
            self._failed(err, now)

    def _failed(self, err: int, now: float) -> None:
        self.last_error = errno.errorcode.get(err, str(err))
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.retry_at = now + CONNECT_RETRY_S

    def queue(self, send: Send) -> None:
        frame = FRAME.pack(send.remote_offset, len(send.data), send.imm)
        if send.data:
            self.out.append([memoryview(frame), None])
            self.out.append([memoryview(send.data).cast("B"), send.imm])
        else:
            self.out.append([memoryview(frame), send.imm])

    def flush(self) -> None:
        if not self.connected:
            return
        out, sock = self.out, self.sock
        while out:
            item = out[0]
            try:
                sent = sock.send(item[0])
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                raise TCPChannelError(f"send to {self.peer.host}: {exc.strerror}") from None
            self.written += sent
            if sent == len(item[0]):
                out.popleft()
                if item[1] is not None:
                    self.unacked.append((self.written, item[1]))
            else:
                item[0] = item[0][sent:]

    def acked(self) -> list[int]:
        """Imms of the frames acknowledged since the last call, in order."""
        if not self.unacked:
            return []
        upto, done = _bytes_acked(self.sock), []
        while self.unacked and self.unacked[0][0] <= upto:
            done.append(self.unacked.popleft()[1])
        return done

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


class _RxConn:
    """An accepted connection: hello (names the sender), then frames placed into the region."""

    def __init__(self, channel: "TCPChannel", sock: socket.socket):
        self.channel, self.sock = channel, sock
        self.peer = None          # the PeerSpec, once the hello named it
        self.hdr = bytearray()
        self.payload: tuple[int, int, int] | None = None  # (offset, remaining, imm)
        self.rx_bytes = 0

    def on_readable(self) -> None:
        sock, region = self.sock, self.channel.region
        for _ in range(64):
            try:
                if self.payload is None:
                    size = HELLO.size if self.peer is None else FRAME.size
                    data = sock.recv(size - len(self.hdr))
                    if not data:
                        return self.channel._rx_closed(self)
                    self.hdr += data
                    if len(self.hdr) == size:
                        self._header_done()
                else:
                    offset, remaining, imm = self.payload
                    got = sock.recv_into(region[offset:offset + remaining])
                    if not got:
                        return self.channel._rx_closed(self)
                    self.rx_bytes += got
                    remaining -= got
                    if remaining:
                        self.payload = (offset + got, remaining, imm)
                    else:
                        self.payload = None
                        self.channel.on_arrival(self.peer.rank, imm)
            except (BlockingIOError, InterruptedError):
                return

    def _header_done(self) -> None:
        hdr, self.hdr = bytes(self.hdr), bytearray()
        if self.peer is None:
            self.peer = self.channel._hello(self, hdr)
            return
        offset, length, imm = FRAME.unpack(hdr)
        if offset + length > len(self.channel.region):
            raise TCPChannelError(f"write [{offset}, +{length}) from {self.peer.host} outside "
                                  f"the receive region of {len(self.channel.region)} bytes")
        if length == 0:
            self.channel.on_arrival(self.peer.rank, imm)
        else:
            self.payload = (offset, length, imm)


class TCPChannel:
    """Collective channel over kernel TCP for one rank (see module docstring).

    ``loop``: an :class:`agents.net.loop.EventLoop`. ``spec``: the
    :class:`agents.jobspec.JobSpec`. ``recv_region``: uint8 array every
    ``recv_from`` peer writes into. Callbacks: ``on_arrival(src_rank, imm)``
    per landed write, ``on_send_complete(peer_rank, imm)`` per write the peer's
    kernel acknowledged (called from :meth:`service`). Raises OSError if the
    listening socket cannot be bound; :class:`TCPChannelError` from
    :meth:`service` when a peer is unreachable after ``connect_timeout_s`` or
    misbehaves.
    """

    def __init__(self, loop, spec, recv_region: np.ndarray, *,
                 on_arrival: Callable[[int, int], None],
                 on_send_complete: Callable[[int, int], None]):
        self.loop, self.spec = loop, spec
        self.region = memoryview(recv_region).cast("B")
        self.on_arrival, self.on_send_complete = on_arrival, on_send_complete
        self.listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((spec.bind_addr, spec.tcp_port))
        self.listener.listen(max(4, len(spec.recv_from)))
        self.listener.setblocking(False)
        loop.add_reader(self.listener, self._on_accept)
        now = loop.time()
        self.tx = [_TxConn(p, spec, now) for p in spec.send_to]
        self._tx_by_rank = {c.peer.rank: c for c in self.tx}
        self._expected = {p.rank: p for p in spec.recv_from}
        self.rx: list[_RxConn] = []            # in accept order
        self._rx_by_rank: dict[int, _RxConn] = {}  # once the hello named the peer
        self.closed_rx = 0

    # ---- connection set-up -------------------------------------------------
    @property
    def connected(self) -> bool:
        """Every send_to connection is up and every recv_from peer said hello."""
        return all(c.connected for c in self.tx) and len(self._rx_by_rank) == len(self._expected)

    def _on_accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        _tune(sock)
        conn = _RxConn(self, sock)
        self.rx.append(conn)
        self.loop.add_reader(sock, conn.on_readable)

    def _hello(self, conn: _RxConn, hdr: bytes):
        magic, rank, world = HELLO.unpack(hdr)
        peer = self._expected.get(rank)
        if magic != HELLO_MAGIC or world != self.spec.world_size or peer is None:
            raise TCPChannelError(f"unexpected TCP hello {hdr!r}: want one of ranks "
                                  f"{sorted(self._expected)} of {self.spec.world_size}")
        if rank in self._rx_by_rank:
            raise TCPChannelError(f"second TCP connection from rank {rank} ({peer.host})")
        self._rx_by_rank[rank] = conn
        return peer

    def _rx_closed(self, conn: _RxConn) -> None:
        self.loop.remove_reader(conn.sock)
        conn.sock.close()
        self.closed_rx += 1

    # ---- data path -----------------------------------------------------------
    def post(self, send: Send) -> None:
        """Queue one framed write to rank ``send.peer`` (data referenced until written).
        KeyError: not a send_to peer."""
        conn = self._tx_by_rank[send.peer]
        conn.queue(send)
        conn.flush()

    def service(self, now: float) -> None:
        """Progress connection set-up, pending output and completions; TCPChannelError on
        failure."""
        for conn in self.tx:
            if not conn.connected:
                conn.poll_connect(now)
            conn.flush()
            for imm in conn.acked():
                self.on_send_complete(conn.peer.rank, imm)

    @property
    def wants_poll(self) -> bool:
        """True while output waits for socket space or acknowledgements, or a connection is
        being set up (the loop polls; io.EventLoop has no writers)."""
        return any(c.out or c.unacked or not c.connected for c in self.tx)

    def command(self, peer_host: str, op: str, ev_id: int, new_ev_id: int | None, now: float) -> str:
        """Refused: kernel TCP has no EVs (its paths are the routers' ECMP hash)."""
        return "kernel TCP has no EVs"

    def query(self, peer_host: str) -> tuple[list[dict], str]:
        """No EVs, and why: kernel TCP has no EV profile."""
        return [], "kernel TCP has no EVs"

    @property
    def idle(self) -> bool:
        """Everything posted has been acknowledged by the peers' kernels."""
        return not any(c.out or c.unacked for c in self.tx)

    def flows(self) -> list[dict]:
        """Cumulative counters per connection for a sample message: one "tx" entry per
        send_to peer, one "rx" entry per recv_from peer that has said hello."""
        out = []
        for c in self.tx:
            tx = tcp_info(c.sock) if c.sock is not None and c.connected else {}
            out.append({"peer": c.peer.host, "peer_rank": c.peer.rank, "dir": "tx",
                        "bytes": max(tx.get("bytes_acked", 1) - 1, 0), "busy": bool(c.out or c.unacked),
                        "retransmits": tx.get("retransmits", 0), "rtt_s": tx.get("rtt_s"),
                        "retransmitted_bytes": tx.get("bytes_retrans", 0),
                        "cwnd_bytes": tx.get("cwnd_bytes"), "evs": []})
        for c in self._rx_in_spec_order():
            rx = tcp_info(c.sock) if c.sock.fileno() >= 0 else {}
            out.append({"peer": c.peer.host, "peer_rank": c.peer.rank, "dir": "rx",
                        "bytes": c.rx_bytes, "retransmits": 0, "rtt_s": rx.get("rtt_s"),
                        "cwnd_bytes": None, "evs": []})
        return out

    def _rx_in_spec_order(self) -> list[_RxConn]:
        return [self._rx_by_rank[p.rank] for p in self.spec.recv_from if p.rank in self._rx_by_rank]

    def summary(self) -> dict:
        """``tx_bytes``/``rx_bytes`` (totals) and ``peers``: per connection, the peer, its rank,
        dir, bytes and (tx) the TCP_INFO fields as ``tx_*``."""
        peers = [{"peer": c.peer.host, "rank": c.peer.rank, "dir": "tx", "bytes": c.written,
                  **{f"tx_{k}": v for k, v in (tcp_info(c.sock) if c.sock else {}).items()}}
                 for c in self.tx]
        peers += [{"peer": c.peer.host, "rank": c.peer.rank, "dir": "rx", "bytes": c.rx_bytes}
                  for c in self._rx_in_spec_order()]
        return {"tx_bytes": sum(c.written for c in self.tx),
                "rx_bytes": sum(c.rx_bytes for c in self.rx), "peers": peers}

    def close(self) -> None:
        for conn in self.rx:
            if conn.sock.fileno() >= 0:
                try:
                    self.loop.remove_reader(conn.sock)
                except (KeyError, ValueError):
                    pass
                conn.sock.close()
        try:
            self.loop.remove_reader(self.listener)
        except (KeyError, ValueError):
            pass
        self.listener.close()
        for conn in self.tx:
            conn.close()
