"""A host runtime: one process serving the agents of many emulated hosts on one event loop.

``python -m agents --job A.json --netns /proc/P/ns/net --job B.json --netns ...`` runs one
:class:`agents.agent.Agent` per job on one shared :class:`agents.net.loop.EventLoop` (one process
per core instead of one per host: 2 processes instead of 16 on fat-tree-k4 with 2 cores).

Every agent opens its sockets inside its own host's network namespace: while an agent is
connecting (its channel not yet up: the only time an agent opens sockets: UDP endpoints
and their send sockets, the TCP listener and connects) the runtime's thread enters that
host's namespace for the agent's turn (``setns(2)`` on ``/proc/<pid>/ns/net`` of the
host's shell) and comes back after it. A socket stays in the namespace it was made in
whatever its thread does next, so addresses, routes, EVs and QPNs are exactly those of
the host. Connections accepted later belong to their listener's namespace.

Identity and outcomes stay per rank: each agent has its own control connection (its
``ready``, ``iteration``, ``done`` or ``failed``), its own samples file and its own exit
status; one agent's failure ends only that agent. The runtime exits with the worst of
them (1 failed > 3 stopped > 0 done). A runtime that dies takes all its ranks with it,
as a dead agent process takes its one (the runner reports them ``crashed``).

Between two agents' turns the runtime runs the timers that came due (a turn can be long:
an iteration's end checks the whole buffer), as a kernel would preempt one agent process
for another's timer. Shared by the runtime's agents: the loop's timer statistics (the samples' ``loop``
field: an agent's sample takes the lateness since the last sample of any of them).
"""

from __future__ import annotations

import ctypes
import heapq
import logging
import os

from .agent import EXIT_DONE, EXIT_FAILED, EXIT_STOPPED, IDLE_WAIT_S, Agent
from .net.loop import EventLoop
from .jobspec import JobSpec

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000   # sched.h
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    """Move this thread into the network namespace ``fd`` (setns(2)); OSError on failure."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def worst(statuses: list[int]) -> int:
    """The runtime's exit status from its agents': failed, else stopped, else done."""
    for status in (EXIT_FAILED, EXIT_STOPPED):
        if status in statuses:
            return status
    return max(statuses, default=EXIT_DONE)


class LoopView:
    """One agent's view of the runtime's shared :class:`agents.net.loop.EventLoop`: the same readers,
    timers and clock, with every callback adding the agent (``index``) to ``ready``, so the
    runtime gives a turn only to the agents something happened to (a datagram, a timer, a
    control message) instead of to every agent on every wake-up. A callback that returns
    False says it left nothing for the agent (the native endpoint: datagrams that raised no
    QP event), and the agent gets no turn for it."""

    def __init__(self, loop: EventLoop, ready: set, index: int):
        self._loop = loop
        self.time = loop.time
        self._ready, self._index = ready, index

    def _mark(self, callback):
        ready, index = self._ready, self._index

        def run():
            if callback() is not False:
                ready.add(index)
        return run

    def add_reader(self, fileobj, callback) -> None:
        self._loop.add_reader(fileobj, self._mark(callback))

    def remove_reader(self, fileobj) -> None:
        self._loop.remove_reader(fileobj)

    def call_at(self, when: float, callback):
        return self._loop.call_at(when, self._mark(callback))

    def call_later(self, delay_s: float, callback):
        return self.call_at(self.time() + delay_s, callback)

    @property
    def timers_fired(self) -> int:
        return self._loop.timers_fired

    @property
    def timer_late_sum_s(self) -> float:
        return self._loop.timer_late_sum_s

    def take_timer_late_max_s(self) -> float:
        return self._loop.take_timer_late_max_s()

    def add_timer_source(self, source) -> None:
        self._loop.add_timer_source(source)

    @property
    def native_poller(self) -> bool:
        return self._loop.native_poller

    def add_native_endpoint(self, endpoint, callback) -> int:
        return self._loop.add_native_endpoint(endpoint, self._mark(callback))

    def add_native_socket(self, sock, tag: int, read_tclass: bool) -> None:
        self._loop.add_native_socket(sock, tag, read_tclass)

    def remove_native_endpoint(self, tag: int) -> None:
        self._loop.remove_native_endpoint(tag)

    def remove_timer_source(self, source) -> None:
        self._loop.remove_timer_source(source)

    def run_once(self, max_wait_s: float | None = None) -> None:
        raise RuntimeError("an agent in a runtime does not run the shared loop")

    def close(self) -> None:
        pass


def run(specs: list[JobSpec], netns_paths: list[str], rx_hold_s: float = 0.0) -> int:
    """Run ``specs`` (one per emulated host, ``netns_paths[i]`` the namespace of
    ``specs[i]``'s host) on one loop; the worst exit status. Raises OSError if a namespace
    cannot be opened (before any agent starts).

    An agent gets a turn when one of its sockets or timers fired (its view marks it
    ready) or at the next time it named (:meth:`agents.agent.Agent.next_due`: its next
    sample, its wait's deadline, soon while it polls), kept in a heap: the work per
    wake-up grows with the agents that have something to do, not with all of them.
    ``rx_hold_s``: the loop's receive moderation (:class:`agents.net.loop.EventLoop` ``hold_s``)."""
    if len(specs) != len(netns_paths):
        raise ValueError(f"{len(specs)} jobs but {len(netns_paths)} namespaces")
    fds = [os.open(p, os.O_RDONLY | os.O_CLOEXEC) for p in netns_paths]
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    loop = EventLoop(native=any(getattr(spec, "engine", None) == "native" for spec in specs))
    loop.hold_s = rx_hold_s
    ready: set[int] = set(range(len(specs)))
    views = [LoopView(loop, ready, i) for i in range(len(specs))]
    agents = [Agent(spec, view) for spec, view in zip(specs, views)]
    status: dict[int, int] = {}
    live: set[int] = set()
    timed: list[tuple[float, int]] = []          # (when, agent): a heap of named times
    named: dict[int, float] = {}                 # the earliest time in ``timed`` per agent
    try:
        for i, agent in enumerate(agents):
            st = agent.open()
            if st is None:
                live.add(i)
            else:
                status[i] = st
        ready &= live
        while live:
            now = loop.time()
            while timed and timed[0][0] <= now:
                _, i = heapq.heappop(timed)
                if named.get(i, 0.0) <= now:
                    named.pop(i, None)
                if i in live:
                    ready.add(i)
            turn = sorted(ready)
            ready.clear()
            for i in turn:
                agent = agents[i]
                if agent.connecting:   # its sockets are opened in its host's namespace
                    setns(fds[i])
                    try:
                        st = agent.outcome(lambda: agent.advance(now))
                    finally:
                        setns(home)
                else:
                    st = agent.outcome(lambda: agent.advance(now))
                if st is not None:
                    status[i] = agent.close(st)
                    live.discard(i)
                else:
                    due = agent.next_due(loop.time())
                    if due is not None and due < named.get(i, float("inf")):
                        named[i] = due
                        heapq.heappush(timed, (due, i))
                loop.run_due()   # timers due during this turn run before the next agent's
            ready &= live
            if live:
                wait = 0.0 if ready else IDLE_WAIT_S
                if timed and not ready:
                    wait = min(wait, max(0.0, timed[0][0] - loop.time()))
                loop.run_once(wait)
    finally:
        for i in live:   # an unexpected error in the runtime itself: close what still runs
            agents[i].close(EXIT_FAILED)
        loop.close()
        for fd in (*fds, home):
            os.close(fd)
    return worst(list(status.values()))
