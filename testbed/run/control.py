"""The runner's end of the agents' control channel (the agent's end is :mod:`agents.net.control`).

A Unix stream listener in the run directory (a filesystem path works across network
namespaces); the messages and their framing are :mod:`agents.protocol`'s, one
:class:`agents.protocol.LineFramer` per connection. Ranks are learned from the messages
their agents send. A connection that sends anything but an agent's messages is logged
and dropped (the messages before the bad input still count); the run goes on, and the
agent's exit is noticed by its process.

Only the runner's own agents may talk to it: the socket is created mode 0600 (in a 0700
run directory), and every connection's peer credentials (``SO_PEERCRED``: the kernel's, not
the peer's word) must show the runner's effective uid and, when the runner says which
processes it started (``allowed_pids``), one of those PIDs or a descendant of one. The uid
keeps other local users out even where the file mode would not (a socket in a shared
directory); the PID keeps out the user's other processes, e.g. a second run's agents
connecting to the wrong socket. A refused connection is logged and closed before it is read.

Sending never blocks: each connection has a bounded :class:`testbed.run.sendq.SendQueue`, written
when the socket is writable (by :meth:`ControlServer.send` at once as far as it goes, then by
:meth:`ControlServer.poll`). Above the bound ``ev_stats`` telemetry is dropped and counted
(:attr:`ControlServer.dropped`); events, commands and results never are.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import struct
import time
from pathlib import Path
from typing import Callable, Iterable

from agents.protocol import (CONTROLLER_MESSAGES, RUNNER_INBOUND, ControlProtocolError, Event, Hello, LineFramer, Message,
                             encode)
from testbed.run.sendq import LIMIT_BYTES, SendQueue

log = logging.getLogger(__name__)

SUN_PATH_MAX = 107          # sockaddr_un.sun_path without the NUL (unix(7))
SOCKET_MODE = 0o600
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (unix(7), SO_PEERCRED)
MAX_ANCESTRY = 16           # parent links followed from a peer towards an allowed PID
CONTROLLER = -1             # by_rank key of the controller's connection (its Hello names it)


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected ``conn`` (SO_PEERCRED, set by the kernel)."""
    return _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def descends_from(pid: int, ancestors: set[int]) -> bool:
    """True if ``pid`` is in ``ancestors`` or a descendant of one (within MAX_ANCESTRY links)."""
    for _ in range(MAX_ANCESTRY):
        if pid in ancestors:
            return True
        parent = _parent(pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


class ControlServer:
    """Listen on ``path`` (Unix stream socket, mode 0600); :meth:`poll` returns what the agents
    sent. ``allowed_pids``: returns the PIDs of the agents started so far; a connection from
    another process (or another uid) is refused (see the module docstring)."""

    def __init__(self, path: str, allowed_pids: Callable[[], Iterable[int]] | None = None, *,
                 limit_bytes: int = LIMIT_BYTES, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.limit_bytes, self.clock = limit_bytes, clock
        self.allowed_pids = allowed_pids
        self.refused = 0
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)        # the socket file is created 0600: no window at another mode
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, SOCKET_MODE)
        self.listener.listen(256)
        self.listener.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()   # wakeup() from another thread
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ)
        self.framers: dict[socket.socket, LineFramer] = {}
        self.queues: dict[socket.socket, SendQueue] = {}
        self.by_rank: dict[int, socket.socket] = {}
        #: droppable messages (ev_stats) dropped for back-pressure, on connections since closed
        self._dropped_closed = 0

    def poll(self, timeout_s: float) -> list[Message]:
        """Messages that arrive within ``timeout_s`` (after the first readiness, no waiting)."""
        out: list[Message] = []
        for key, mask in self.sel.select(max(timeout_s, 0.0)):
            if key.fileobj is self._wake_r:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, InterruptedError):
                    pass
                continue
            if key.fileobj is self.listener:
                try:
                    conn, _ = self.listener.accept()
                except BlockingIOError:
                    continue
                why = self._refusal(conn)
                if why is not None:
                    self.refused += 1
                    log.warning("control: refused a connection: %s", why)
                    conn.close()
                    continue
                conn.setblocking(False)
                self.framers[conn] = LineFramer(RUNNER_INBOUND)
                self.queues[conn] = SendQueue(self.limit_bytes)
                self.sel.register(conn, selectors.EVENT_READ)
                continue
            if mask & selectors.EVENT_WRITE:
                self._flush(key.fileobj)
            if mask & selectors.EVENT_READ and key.fileobj in self.framers:
                self._read(key.fileobj, out)
        return out

    def wakeup(self) -> None:
        """Make a :meth:`poll` waiting in another thread return now (thread-safe)."""
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, InterruptedError):
            pass   # a wakeup is already pending

    def _refusal(self, conn: socket.socket) -> str | None:
        """Why ``conn`` is refused (None: it is one of our agents)."""
        try:
            pid, uid, _ = peer_credentials(conn)
        except OSError as exc:
            return f"no peer credentials ({exc.strerror})"
        if uid != os.geteuid():
            return f"peer pid {pid} runs as uid {uid}, not {os.geteuid()}"
        if self.allowed_pids is not None and not descends_from(pid, set(self.allowed_pids())):
            return f"peer pid {pid} is not an agent this runner started"
        return None

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
        except ControlProtocolError as exc:
            ranks = sorted({r for r, c in self.by_rank.items() if c is conn}
                           | {m.rank for m in exc.messages if not isinstance(m, CONTROLLER_MESSAGES)})
            log.warning("control: dropping the connection of rank(s) %s: %s", ranks or "?", exc)
            self._accept(conn, exc.messages, out)
            self._drop(conn)
            return
        self._accept(conn, msgs, out)

    def _accept(self, conn: socket.socket, msgs: list[Message], out: list[Message]) -> None:
        for msg in msgs:
            if isinstance(msg, Hello):
                self.by_rank.setdefault(CONTROLLER, conn)
            elif isinstance(msg, CONTROLLER_MESSAGES):   # command, query, synced: the controller's only
                if self.by_rank.get(CONTROLLER) is not conn:
                    log.warning("control: a %s from a connection that is not the controller's: dropped", msg.TYPE)
                    continue
            else:
                self.by_rank.setdefault(msg.rank, conn)
            out.append(msg)

    def _drop(self, conn: socket.socket) -> None:
        self.sel.unregister(conn)
        self.framers.pop(conn, None)
        q = self.queues.pop(conn, None)
        if q is not None:
            self._dropped_closed += q.dropped
        for r in [r for r, c in self.by_rank.items() if c is conn]:
            del self.by_rank[r]
        conn.close()

    def send(self, rank: int, msg: Message) -> bool:
        """Queue ``msg`` for ``rank`` and write what the socket takes now (never blocks); False if
        it has no connection or the message was dropped for back-pressure (only ``ev_stats``)."""
        conn = self.by_rank.get(rank)
        if conn is None:
            return False
        droppable = isinstance(msg, Event) and msg.kind == "ev_stats"
        if not self.queues[conn].push(encode(msg), self.clock(), droppable=droppable):
            return False
        self._flush(conn)
        return True

    def _flush(self, conn: socket.socket) -> None:
        """Write ``conn``'s queue until the socket would block; watch for writability while
        something is left."""
        q = self.queues.get(conn)
        if q is None:
            return
        while len(q):
            try:
                n = conn.send(q.pending())
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:   # the peer is gone: its reader sees EOF and drops it
                log.debug("control: send failed: %s", exc)
                break
            q.sent(n, self.clock())
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if len(q) else 0)
        if self.sel.get_key(conn).events != events:
            self.sel.modify(conn, events)

    def stalled_s(self, rank: int) -> float:
        """Seconds ``rank``'s queue has waited without a byte taken (0: empty or no connection)."""
        conn = self.by_rank.get(rank)
        return self.queues[conn].stalled_s(self.clock()) if conn is not None else 0.0

    @property
    def dropped(self) -> int:
        """``ev_stats`` messages dropped for back-pressure so far, every connection."""
        return self._dropped_closed + sum(q.dropped for q in self.queues.values())

    def disconnect(self, rank: int) -> None:
        """Close ``rank``'s connection (e.g. a controller declared lost), its queue with it."""
        conn = self.by_rank.get(rank)
        if conn is not None:
            self._drop(conn)

    def broadcast(self, msg: Message) -> None:
        """``msg`` to every agent (not the controller)."""
        for rank in list(self.by_rank):
            if rank != CONTROLLER:
                self.send(rank, msg)

    @property
    def has_controller(self) -> bool:
        return CONTROLLER in self.by_rank

    def to_controller(self, msg: Message) -> bool:
        """``msg`` to the controller; False if it is not connected."""
        return self.send(CONTROLLER, msg)

    def close(self) -> None:
        for conn in list(self.framers):
            self._flush(conn)      # what the socket takes now (a last stop); never waits
            self._drop(conn)
        self.sel.close()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()
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
    short.parent.mkdir(0o700, parents=True, exist_ok=True)
    return str(short)
