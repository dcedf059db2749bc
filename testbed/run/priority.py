"""The runner's CPU share while the agents run: its scheduler autogroup's nice value, or each
of its threads' where it has no autogroup of its own, raised and put back (:class:`RunnerPriority`);
with real-time agents, its threads at a real-time priority above theirs.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

RUNNER_AUTOGROUP_NICE = -20
"""Nice value of the runner's scheduler autogroup while the agents run.

With ``kernel.sched_autogroup_enabled`` (1 on Debian) CFS first shares the CPU between
autogroups (sessions) and every agent is a session of its own (``mnexec`` starts it with
``setsid``), so on a saturated machine the runner gets 1/(agents + 1) of it whatever its own
nice value, and its samplers miss most of their ticks. The autogroup's nice
(``/proc/self/autogroup``, sched(7)) sets its weight: at -20 it is 86.7 nice-0 tasks, so the
runner gets what it needs (a few percent of a core, the fidelity table's "runner CPU") before
the agents, and no more.

A process in the root autogroup (started by a daemon that never called ``setsid``, as a CI
job may be) reads an empty ``/proc/self/autogroup`` and cannot set its nice; its threads
then compete one by one with the agents' autogroups, so each thread's own nice is set
instead (same value, same weight). Restored when the transport ends; skipped (logged) where
neither is possible."""

AUTOGROUP = "/proc/self/autogroup"


def _autogroup_nice(nice: int) -> int | None:
    """Set this process's autogroup nice value; the previous one, or None if not possible
    (no autogroup support, the root autogroup, or not permitted)."""
    try:
        with open(AUTOGROUP) as f:
            before = int(f.read().split("nice")[1])
        with open(AUTOGROUP, "w") as f:
            f.write(str(nice))
    except (OSError, IndexError, ValueError) as exc:
        log.debug("runner autogroup nice not set: %s", exc)
        return None
    return before


def _threads_realtime(priority: int | dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Put every thread of this process at SCHED_RR ``priority`` with SCHED_RESET_ON_FORK (the
    processes and threads it starts begin at SCHED_OTHER), or the threads named in ``{tid:
    (policy, priority)}`` back; returns ``{tid: (previous policy, previous priority)}`` of the
    threads changed (sched(7))."""
    if isinstance(priority, dict):
        wanted = priority
    else:
        wanted = {int(t): (os.SCHED_RR | os.SCHED_RESET_ON_FORK, priority) for t in os.listdir("/proc/self/task")}
    before: dict[int, tuple[int, int]] = {}
    for tid, (policy, prio) in wanted.items():
        try:
            prev = (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority)
            os.sched_setscheduler(tid, policy, os.sched_param(prio))
        except OSError as exc:      # thread gone, or not permitted
            log.debug("runner thread %d policy not set: %s", tid, exc)
            continue
        before[tid] = prev
    return before


def _threads_nice(nice: int | dict[int, int]) -> dict[int, int]:
    """Set the nice value of every thread of this process (an int), or of the threads named
    in ``{tid: nice}``; returns ``{tid: previous nice}`` of the threads changed. Threads the
    runner starts afterwards inherit the nice of the thread that starts them (sched(7))."""
    if isinstance(nice, dict):
        wanted = nice
    else:
        wanted = {int(t): nice for t in os.listdir("/proc/self/task")}
    before: dict[int, int] = {}
    for tid, value in wanted.items():
        try:
            prev = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, value)
        except OSError as exc:      # thread gone, or not permitted
            log.debug("runner thread %d nice not set: %s", tid, exc)
            continue
        before[tid] = prev
    return before


class RunnerPriority:
    """Raise the runner's CPU share while agents run (:data:`RUNNER_AUTOGROUP_NICE`), and
    put it back. ``how`` names the knob that took effect: "autogroup", "threads" or None, and
    "SCHED_RR <priority>" when :meth:`raise_` was asked for a real-time priority and got it."""

    def __init__(self) -> None:
        self.how: str | None = None
        self._autogroup: int | None = None
        self._threads: dict[int, int] = {}
        self._realtime: dict[int, tuple[int, int]] = {}

    def raise_(self, nice: int = RUNNER_AUTOGROUP_NICE, realtime: int = 0) -> str | None:
        """``realtime`` > 0: the runner's threads also run at that SCHED_RR priority. Real-time
        agents (``agent_realtime``) take every cycle a normal task would get, so a runner that is
        only niced misses its ticks; one real-time level above them it samples on time, and it
        never spins, so the agents keep what it does not use."""
        self._autogroup = _autogroup_nice(nice)
        if self._autogroup is not None:
            self.how = "autogroup"
        else:
            self._threads = _threads_nice(nice)
            self.how = "threads" if self._threads else None
        if realtime > 0:
            self._realtime = _threads_realtime(realtime)
            if self._realtime:
                self.how = f"SCHED_RR {realtime}" + (f" + {self.how}" if self.how else "")
        if self.how is None:
            log.info("runner priority not raised (no autogroup nice, no thread nice)")
        return self.how

    def restore(self) -> None:
        if self._realtime:
            _threads_realtime(self._realtime)
        if self._autogroup is not None:
            _autogroup_nice(self._autogroup)
        if self._threads:
            _threads_nice(self._threads)
        self._autogroup, self._threads, self._realtime, self.how = None, {}, {}, None

