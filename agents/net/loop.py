"""The event loop of an agent or a host runtime: a plain ``selectors`` loop with
file-descriptor readers and timers (``add_reader``, ``call_at``/``call_later``).

Chosen by measurement: on this machine a plain non-blocking socket loop moves about
200k datagrams/s per core, asyncio's datagram receive path about 40k
(``python -m agents.net.bench`` reports the plain figure in the same run). Callers
register their own descriptors too (the agent's Unix socket to its orchestrator, the
UDP endpoint's sockets, TCP connections) and their own timers.

``EventLoop(native=True)`` (agents and host runtimes of the native engine) waits in C
instead of ``selectors`` (``agents/mrc/core/mrcn_poller.h``): one epoll over every
descriptor, the native endpoints' sockets read, their QP timers and delay lines served
without a return to Python, which is called only for its own descriptors, its own timers,
and endpoints whose QPs have events for their owner (:meth:`add_native_endpoint`). The wait
has nanosecond resolution where ``selectors`` rounds up to a millisecond.
"""
from __future__ import annotations

import heapq
import selectors
import time
from typing import Callable


class TimerHandle:
    """A scheduled callback; ``cancel()`` stops it from running."""

    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]):
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def rearmed(loop, handle: TimerHandle | None, when: float | None,
            callback: Callable[[], None]) -> TimerHandle | None:
    """The timer for one deadline of a caller that keeps a single timer: ``handle`` itself if
    it is still armed for ``when``, else ``handle`` cancelled and a new one for ``when``
    (None when ``when`` is None: no deadline)."""
    if handle is not None:
        if when is not None and handle.when == when and not handle.cancelled:
            return handle
        handle.cancel()
    return loop.call_at(when, callback) if when is not None else None


class EventLoop:
    """A single-threaded ``selectors`` loop: fd readers plus timers on ``clock`` (seconds).

    Timer lateness (how starved the emulation is): when a timer's callback runs, its
    lateness is ``clock() - deadline`` (>= 0). ``timers_fired`` and ``timer_late_sum_s``
    count every timer since the loop was made; :meth:`take_timer_late_max_s` gives the
    largest lateness since its previous call.

    Timer sources: an object that runs timers of its own behind one loop timer (the native
    endpoint runs every QP's) is registered with :meth:`add_timer_source`, and its
    ``timers_fired``, ``timer_late_sum_s`` and ``take_timer_late_max_s()`` count in the loop's,
    so that the lateness the fidelity check judges covers every timer, wherever it runs. The
    sources are read at most once per wake-up of the loop (:meth:`run_once`): a host runtime's
    agents each read the loop's figures for every sample, and with one source per agent a
    read of them all per sample grew with the square of the agents (64 agents a runtime at
    k=8: 64 x 3 reads 3,200 times a second). A source's timers that fire after the first read
    of a wake-up count at the next wake-up's.

    Receive moderation (a NIC's ``rx-usecs``): with ``hold_s`` > 0 the loop does not wake
    for I/O sooner than ``hold_s`` after its previous I/O wake-up; it sleeps the rest first
    (never past a due timer or ``max_wait_s``), so that the datagrams of several sockets
    that arrive meanwhile are served in one pass. ``holds`` and ``hold_sum_s`` count those
    sleeps (s). A datagram waits at most ``hold_s`` longer for its agent.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, *,
                 sleep: Callable[[float], None] = time.sleep, native: bool = False):
        self.time = clock
        self._sleep = sleep
        self._poller = None
        if native:
            if clock is not time.monotonic:
                raise ValueError("a native loop waits on CLOCK_MONOTONIC: its clock must be time.monotonic")
            from ..mrc import native as native_engine
            self._poller = native_engine.load(require=True).Poller()
            self._foreign: dict[int, Callable] = {}   # descriptor -> callback
            self._native: dict[int, Callable] = {}    # endpoint tag -> callback
            self._next_tag = 0
            self._sel = None
        else:
            self._sel = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, TimerHandle]] = []
        self._seq = 0
        self._stopped = False
        self._timers_fired = 0
        self._timer_late_sum_s = 0.0
        self._timer_late_max_s = 0.0
        self._timer_sources: list = []
        self._wakes = 0                        # run_once calls: the sources' figures are read once per wake-up
        self._sources_read = (-1, 0, 0.0)      # (wake-up, their timers_fired, their timer_late_sum_s)
        self._sources_max_taken = -1           # the wake-up whose take_timer_late_max_s read them
        self.hold_s = 0.0
        self._holds = 0
        self._hold_sum_s = 0.0
        self._last_wake = -1e18

    @property
    def native_poller(self) -> bool:
        """True when this loop waits in C and serves native endpoints there (module docstring)."""
        return self._poller is not None

    @property
    def holds(self) -> int:
        """Receive-moderation sleeps so far."""
        if self._poller is not None:
            return self._poller.counters()["holds"]
        return self._holds

    @property
    def hold_sum_s(self) -> float:
        """Their length, summed (s)."""
        if self._poller is not None:
            return self._poller.counters()["hold_sum_s"]
        return self._hold_sum_s

    def _sources(self) -> tuple[int, int, float]:
        read = self._sources_read
        if read[0] != self._wakes:
            srcs = self._timer_sources
            read = self._sources_read = (self._wakes, sum(src.timers_fired for src in srcs),
                                         sum(src.timer_late_sum_s for src in srcs))
        return read

    @property
    def timers_fired(self) -> int:
        return self._timers_fired + self._sources()[1]

    @property
    def timer_late_sum_s(self) -> float:
        return self._timer_late_sum_s + self._sources()[2]

    def take_timer_late_max_s(self) -> float:
        """The largest timer lateness (s) since the previous call (or the start), this loop's
        own timers and its timer sources' (read once per wake-up); resets them."""
        late, self._timer_late_max_s = self._timer_late_max_s, 0.0
        if self._sources_max_taken != self._wakes:
            self._sources_max_taken = self._wakes
            for src in self._timer_sources:
                late = max(late, src.take_timer_late_max_s())
        return late

    def add_timer_source(self, source) -> None:
        """Count ``source``'s timers (``timers_fired``, ``timer_late_sum_s``,
        ``take_timer_late_max_s()``) in this loop's lateness (class docstring)."""
        self._timer_sources.append(source)
        self._sources_read = (-1, 0, 0.0)

    def remove_timer_source(self, source) -> None:
        """Stop asking ``source``; what it counted so far stays in the loop's totals, so that
        they never go back when an endpoint closes before the final sample."""
        if source in self._timer_sources:
            self._timer_sources.remove(source)
            self._timers_fired += source.timers_fired
            self._timer_late_sum_s += source.timer_late_sum_s
            self._timer_late_max_s = max(self._timer_late_max_s, source.take_timer_late_max_s())
            self._sources_read = (-1, 0, 0.0)

    def add_reader(self, fileobj, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever ``fileobj`` (socket or fd) is readable."""
        if self._poller is None:
            self._sel.register(fileobj, selectors.EVENT_READ, callback)
            return
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if fd in self._foreign:
            raise KeyError(f"descriptor {fd} is registered already")
        self._poller.add_foreign(fd)
        self._foreign[fd] = callback

    def remove_reader(self, fileobj) -> None:
        if self._poller is None:
            self._sel.unregister(fileobj)
            return
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if self._foreign.pop(fd, None) is None:
            raise KeyError(f"descriptor {fd} is not registered")
        self._poller.remove_fd(fd)

    def add_native_endpoint(self, endpoint, callback: Callable[[], None]) -> int:
        """Serve the C endpoint ``endpoint`` (``agents.mrc._core.Endpoint``) in the native wait:
        its QP timers and delay lines run there; ``callback()`` runs when its QPs have events.
        Returns its tag (for :meth:`add_native_socket`). Native loops only."""
        tag = self._next_tag
        self._next_tag += 1
        self._poller.add_endpoint(endpoint, tag)
        self._native[tag] = callback
        return tag

    def add_native_socket(self, sock, tag: int, read_tclass: bool) -> None:
        """Read ``sock`` into the endpoint of ``tag`` in the native wait."""
        self._poller.add_socket(sock.fileno(), tag, read_tclass)

    def remove_native_endpoint(self, tag: int) -> None:
        """Stop serving the endpoint of ``tag`` and its sockets (before they are closed)."""
        if self._native.pop(tag, None) is not None:
            self._poller.remove_endpoint(tag)

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback()`` once at absolute time ``when`` (the loop's clock)."""
        handle = TimerHandle(when, callback)
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, handle))
        return handle

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        return self.call_at(self.time() + delay_s, callback)

    def stop(self) -> None:
        self._stopped = True

    def run_once(self, max_wait_s: float | None = None) -> None:
        """Wait for I/O or the next timer (at most ``max_wait_s``), then run what is due."""
        self._wakes += 1
        if self._poller is not None:
            self._run_once_native(max_wait_s)
            return
        timers = self._timers
        while timers and timers[0][2].cancelled:
            heapq.heappop(timers)
        wait = max_wait_s
        now = self.time()
        if timers:
            until_timer = max(timers[0][0] - now, 0.0)
            wait = until_timer if wait is None else min(wait, until_timer)
        if self.hold_s:
            # receive moderation (a NIC's rx-usecs): no new wake-up sooner than hold_s after the
            # last one, so that datagrams arriving meanwhile are served in one pass
            pause = self._last_wake + self.hold_s - now
            if wait is not None:
                pause = min(pause, wait)
            if pause > 0:
                self._sleep(pause)
                self._holds += 1
                self._hold_sum_s += pause
                if wait is not None:
                    wait = max(wait - pause, 0.0)
        events = self._sel.select(wait)
        if events and self.hold_s:
            self._last_wake = self.time()
        for key, _ in events:
            key.data()
            if timers and timers[0][0] <= self.time():   # a timer came due: it goes before
                self.run_due()                           # the next socket's batch
        self.run_due()

    def _run_once_native(self, max_wait_s: float | None) -> None:
        """:meth:`run_once` through the C wait (module docstring): the receive hold, the
        endpoints' sockets and timers are served there; here the caller's descriptors, the
        endpoints that left QP events, then the due timers."""
        timers = self._timers
        while timers and timers[0][2].cancelled:
            heapq.heappop(timers)
        now = self.time()
        until = now + (3600.0 if max_wait_s is None else max_wait_s)
        if timers and timers[0][0] < until:
            until = timers[0][0]
        fds, tags = self._poller.wait(until, self.hold_s)
        foreign, native = self._foreign, self._native
        for fd in fds:
            callback = foreign.get(fd)
            if callback is not None:
                callback()
                if timers and timers[0][0] <= self.time():   # as run_once: timers before
                    self.run_due()                           # the next descriptor
        for tag in tags:
            callback = native.get(tag)
            if callback is not None:
                callback()
        self.run_due()

    def run_due(self) -> None:
        """Run the timers that are due now (what :meth:`run_once` does after the I/O); a
        host runtime also calls it between its agents' turns, so that one agent's long turn
        does not make every other agent's timers late."""
        if self._poller is not None:   # the native endpoints' timers, too (a turn can be long)
            self._poller.serve_due()
        timers = self._timers
        clock = self.time
        now = clock()
        if not timers or timers[0][0] > now:
            return
        # Lateness bookkeeping in locals (this is the hot loop); the clock is read again only
        # when an earlier callback of this batch ran (its time delays the next one).
        fired, late_sum, late_max = 0, 0.0, self._timer_late_max_s
        try:
            while timers and timers[0][0] <= now:
                when, _, handle = heapq.heappop(timers)
                if not handle.cancelled:
                    if fired:
                        now_cb = clock()
                    else:
                        now_cb = now
                    late = now_cb - when
                    fired += 1
                    late_sum += late
                    if late > late_max:
                        late_max = late
                    handle.callback()
        finally:
            self._timers_fired += fired
            self._timer_late_sum_s += late_sum
            self._timer_late_max_s = late_max

    def run(self, *, until: Callable[[], bool] | None = None,
            timeout_s: float | None = None) -> bool:
        """Run until ``stop()``, ``until()`` is true, or ``timeout_s`` passes.

        Returns True if stopped by ``until``/``stop``, False on timeout.
        """
        self._stopped = False
        deadline = None if timeout_s is None else self.time() + timeout_s
        while not self._stopped:
            if until is not None and until():
                return True
            if deadline is not None:
                left = deadline - self.time()
                if left <= 0:
                    return False
                self.run_once(min(left, 0.05))
            else:
                self.run_once(0.05)
        return True

    def close(self) -> None:
        if self._sel is not None:
            self._sel.close()
