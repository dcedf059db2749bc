"""A bounded send queue for one control connection, sans-I/O: the runner never blocks on a peer.

The runner relays every agent event to the controller (``ev_stats`` alone is four messages a
second per agent) and sends ``start``, ``stop`` and commands to the agents. A blocking
``sendall`` with a timeout stalls the runner's loop behind a slow reader, and a timeout in the
middle of a line leaves half a message on the stream: the peer's framer then sees garbage. Here
each message is queued whole as its encoded line; the socket's owner writes
:meth:`SendQueue.pending` when the socket is writable and reports how many bytes went with
:meth:`SendQueue.sent`. A message is only ever dropped whole and only before its first byte is
written, so the framing cannot be corrupted.

Back-pressure: above ``limit_bytes`` queued, droppable messages (``ev_stats`` telemetry, which
the next report supersedes) are dropped, oldest first, and counted (:attr:`SendQueue.dropped`);
other messages (EV events, commands, results, start/stop) are never dropped: they are queued
over the limit, and a peer that reads nothing for long is the owner's to declare lost
(:meth:`SendQueue.stalled_s`).
"""

from __future__ import annotations

from collections import deque

LIMIT_BYTES = 256 << 10
"""Bytes queued per connection before telemetry is dropped: ~1000 ev_stats lines of 16 agents,
several seconds of a controller that reads nothing."""


class SendQueue:
    """Whole encoded messages waiting for a socket; ``now`` is the owner's monotonic clock (s)."""

    def __init__(self, limit_bytes: int = LIMIT_BYTES):
        if limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be positive, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self._q: deque[tuple[bytes, bool]] = deque()
        self._head_off = 0          # bytes of the head message already written
        self._queued = 0            # bytes queued, the head's written part excluded
        self._since: float | None = None   # when the queue last became non-empty or moved
        self.dropped = 0            # droppable messages dropped for back-pressure
        self.over_limit = 0         # undroppable messages queued over the limit

    def __len__(self) -> int:
        return len(self._q)

    @property
    def queued_bytes(self) -> int:
        return self._queued

    def push(self, data: bytes, now: float, *, droppable: bool = False) -> bool:
        """Queue one encoded message; False if it was dropped (droppable, and no room)."""
        if self._queued + len(data) > self.limit_bytes:
            self._shed(len(data))
            if self._queued + len(data) > self.limit_bytes:
                if droppable:
                    self.dropped += 1
                    return False
                self.over_limit += 1
        if not self._q:
            self._since = now
        self._q.append((data, droppable))
        self._queued += len(data)
        return True

    def _shed(self, need: int) -> None:
        """Drop queued droppable messages, oldest first, never the partly written head, until
        ``need`` more bytes fit under the limit."""
        keep: deque[tuple[bytes, bool]] = deque()
        for i, (data, droppable) in enumerate(self._q):
            started = i == 0 and self._head_off > 0
            if droppable and not started and self._queued + need > self.limit_bytes:
                self._queued -= len(data)
                self.dropped += 1
            else:
                keep.append((data, droppable))
        self._q = keep

    def pending(self) -> memoryview:
        """The unwritten rest of the head message (empty when nothing is queued)."""
        if not self._q:
            return memoryview(b"")
        return memoryview(self._q[0][0])[self._head_off:]

    def sent(self, n: int, now: float) -> None:
        """``n`` bytes of :meth:`pending` were written (0 <= n <= len(pending()))."""
        if n < 0 or n > len(self.pending()):
            raise ValueError(f"sent {n} bytes of {len(self.pending())} pending")
        if n == 0:
            return
        self._head_off += n
        self._queued -= n
        self._since = now
        if self._head_off == len(self._q[0][0]):
            self._q.popleft()
            self._head_off = 0
            if not self._q:
                self._since = None

    def stalled_s(self, now: float) -> float:
        """Seconds the queue has waited without a byte written (0 when empty)."""
        return 0.0 if self._since is None else max(now - self._since, 0.0)
