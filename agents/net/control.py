"""The agent's side of the control channel: newline-delimited JSON over a Unix stream socket.

The messages and their framing are in :mod:`agents.protocol` (the runner's side is
:mod:`testbed.run.control`). The socket is a filesystem path, so it works across network
namespaces.

Outgoing messages are queued and flushed without blocking (the data path
must not wait for the runner); :meth:`ControlClient.flush_blocking` is used
only for the last messages before exit. Incoming messages are parsed on
:meth:`ControlClient.on_readable` (registered with the event loop); anything that is not
a runner's message raises :class:`ControlError`. The listener must run as the agent's own
uid (``SO_PEERCRED``, checked on connect): an agent takes orders only from its runner.
"""
from __future__ import annotations

import logging
import os
import select
import socket
import struct
import time
from collections import deque

from ..protocol import RUNNER_MESSAGES, LineFramer, Message, ControlProtocolError

log = logging.getLogger(__name__)


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
        _, uid, _ = struct.unpack("3i", self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.geteuid():
            self.sock.close()
            raise ControlError(f"control socket {path}: its listener runs as uid {uid}, not {os.geteuid()}")
        self.sock.setblocking(False)
        self._out = bytearray()
        self._framer = LineFramer(RUNNER_MESSAGES)
        self.inbox: deque[Message] = deque()
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: Message) -> None:
        """Queue one message and try to write it without blocking."""
        self._out += self._framer.encode(msg)
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
        """Read what arrived; queue the runner's messages in ``inbox``; EOF sets ``closed``.

        Raises ControlError if the runner sent something else (the messages before it are
        queued)."""
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
            try:
                self.inbox.extend(self._framer.feed(data))
            except ControlProtocolError as exc:
                self.inbox.extend(exc.messages)
                raise ControlError(str(exc)) from None

    def close(self) -> None:
        self.closed = True
        self.sock.close()
