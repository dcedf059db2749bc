"""The runner's end of the agents' control channel (the agent's end is :mod:`agents.control`).

A Unix stream listener in the run directory (a filesystem path works across network
namespaces); the messages and their framing are :mod:`agents.protocol`'s, one
:class:`agents.protocol.LineFramer` per connection. Ranks are learned from the messages
their agents send. A connection that sends anything but an agent's messages is logged
and dropped (the messages before the bad input still count); the run goes on, and the
agent's exit is noticed by its process.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
from pathlib import Path

from agents.protocol import AGENT_MESSAGES, LineFramer, Message, ProtocolError, encode

log = logging.getLogger(__name__)

SUN_PATH_MAX = 107          # sockaddr_un.sun_path without the NUL (unix(7))


class ControlServer:
    """Listen on ``path`` (Unix stream socket); :meth:`poll` returns what the agents sent."""

    def __init__(self, path: str):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(256)
        self.listener.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.framers: dict[socket.socket, LineFramer] = {}
        self.by_rank: dict[int, socket.socket] = {}

    def poll(self, timeout_s: float) -> list[Message]:
        """Messages that arrive within ``timeout_s`` (after the first readiness, no waiting)."""
        out: list[Message] = []
        for key, _ in self.sel.select(max(timeout_s, 0.0)):
            if key.fileobj is self.listener:
                try:
                    conn, _ = self.listener.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                self.framers[conn] = LineFramer(AGENT_MESSAGES)
                self.sel.register(conn, selectors.EVENT_READ)
                continue
            self._read(key.fileobj, out)
        return out

    def _read(self, conn: socket.socket, out: list[Message]) -> None:
        try:
            data = conn.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        try:
            msgs = self.framers[conn].feed(data)
        except ProtocolError as exc:
            ranks = sorted({r for r, c in self.by_rank.items() if c is conn} | {m.rank for m in exc.messages})
            log.warning("control: dropping the connection of rank(s) %s: %s", ranks or "?", exc)
            self._accept(conn, exc.messages, out)
            self._drop(conn)
            return
        self._accept(conn, msgs, out)

    def _accept(self, conn: socket.socket, msgs: list[Message], out: list[Message]) -> None:
        for msg in msgs:
            self.by_rank.setdefault(msg.rank, conn)
            out.append(msg)

    def _drop(self, conn: socket.socket) -> None:
        self.sel.unregister(conn)
        self.framers.pop(conn, None)
        for r in [r for r, c in self.by_rank.items() if c is conn]:
            del self.by_rank[r]
        conn.close()

    def send(self, rank: int, msg: Message) -> bool:
        """Send ``msg`` to ``rank`` (blocking, at most 1 s); False if it has no connection or it failed."""
        conn = self.by_rank.get(rank)
        if conn is None:
            return False
        try:
            conn.setblocking(True)
            conn.settimeout(1.0)
            conn.sendall(encode(msg))
            conn.setblocking(False)
            return True
        except OSError:
            return False

    def broadcast(self, msg: Message) -> None:
        for rank in list(self.by_rank):
            self.send(rank, msg)

    def close(self) -> None:
        for conn in list(self.framers):
            self._drop(conn)
        self.sel.close()
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def control_socket_path(directory: Path, transport: str) -> str:
    """``directory/control.sock``, or a short path under /run when that exceeds sun_path."""
    path = str((directory / "control.sock").resolve())
    if len(path.encode()) <= SUN_PATH_MAX:
        return path
    short = Path("/run/mrc-testbed") / f"ctl-{os.getpid()}-{transport}.sock"
    short.parent.mkdir(parents=True, exist_ok=True)
    return str(short)
