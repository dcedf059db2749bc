"""The agent's side of the control channel: newline-delimited JSON over a Unix stream socket.

The socket is a filesystem path, so it works across network namespaces.
Outgoing messages are queued and flushed without blocking (the data path
must not wait for the runner); :meth:`ControlClient.flush_blocking` is used
only for the last messages before exit. Incoming messages are parsed on
:meth:`ControlClient.on_readable` (registered with the event loop).
"""
from __future__ import annotations

import json
import logging
import select
import socket
import time
from collections import deque

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 1 << 20


class ControlError(RuntimeError):
    """The control socket could not be reached, was closed, or sent a bad message."""


class ControlClient:
    """Connect to ``path`` (Unix stream socket); raise ControlError if that fails."""

    def __init__(self, path: str, *, timeout_s: float = 5.0):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        try:
            self.sock.connect(path)
        except OSError as exc:
            self.sock.close()
            raise ControlError(f"cannot connect to control socket {path}: "
                               f"{exc.strerror or exc}") from None
        self.sock.setblocking(False)
        self._out = bytearray()
        self._in = bytearray()
        self.inbox: deque[dict] = deque()
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: dict) -> None:
        """Queue one message (a JSON object) and try to write it without blocking."""
        self._out += json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        self.flush()

    @property
    def pending_bytes(self) -> int:
        return len(self._out)

    def flush(self) -> None:
        """Write as much of the queue as the socket takes now; ControlError if the peer is gone."""
        while self._out and not self.closed:
            try:
                sent = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.closed = True
                raise ControlError(f"control socket {self.path}: {exc.strerror or exc}") from None
            del self._out[:sent]

    def flush_blocking(self, timeout_s: float = 2.0) -> None:
        """Write the whole queue, waiting at most ``timeout_s``; ControlError on failure."""
        deadline = time.monotonic() + timeout_s
        while self._out and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ControlError(f"control socket {self.path}: runner not reading")
            select.select([], [self.sock], [], left)
            self.flush()

    def on_readable(self) -> None:
        """Read what arrived; queue parsed messages in ``inbox``; EOF sets ``closed``."""
        while True:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                log.warning("control socket: %s", exc)
                data = b""
            if not data:
                self.closed = True
                break
            self._in += data
            if len(self._in) > MAX_LINE_BYTES and b"\n" not in self._in:
                raise ControlError("control message longer than 1 MiB")
        while b"\n" in self._in:
            line, _, rest = bytes(self._in).partition(b"\n")
            self._in = bytearray(rest)
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ControlError(f"bad control message {line[:80]!r}: {exc}") from None
            if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
                raise ControlError(f"control message without a type: {line[:80]!r}")
            self.inbox.append(msg)

    def close(self) -> None:
        self.closed = True
        self.sock.close()
