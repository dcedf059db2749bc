"""What the runner samples itself while the workload runs, every :data:`LINK_SAMPLE_S`.

* kernel link counters: :class:`testbed.fabric.counters.LinkCounters` (one netlink dump per
  namespace) -> ``links.jsonl``;
* host CPU use from ``/proc/stat``: :class:`CpuSampler` -> ``cpu.jsonl``;
* every agent process's scheduler statistics from ``/proc/<pid>/schedstat``:
  :class:`SchedSampler` -> ``sched.jsonl`` (how long each agent waited for a CPU: on a
  2-core machine emulating a fabric, the measure of emulation starvation).

:class:`Ticker` keeps the period. Record formats are in :mod:`testbed.rundir.schemas`. Every
record carries the wall-clock time at which it was read, so a late tick shows as a gap.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Mapping

log = logging.getLogger(__name__)

LINK_SAMPLE_S = 0.100       # kernel link counters and CPU, s (metrics.LINK_BIN_S)


def proc_stat_ticks() -> list[list[int]]:
    """``/proc/stat``'s ``cpu`` lines (proc(5)), the machine's first, then each core's: ticks of
    user, nice, system, idle, iowait, irq, softirq, steal."""
    with open("/proc/stat") as f:
        return [list(map(int, line.split()[1:9])) for line in f if line.startswith("cpu")]


class CpuSampler:
    """Host CPU busy fraction from ``/proc/stat`` deltas (proc(5)): busy = 1 - (idle + iowait) / total,
    over all cores, and per core."""

    def __init__(self):
        self._last = self._read()

    _read = staticmethod(proc_stat_ticks)

    def sample(self) -> dict:
        """``{"t", "busy_fraction", "cores"}`` since the previous call (or construction)."""
        now = self._read()
        fracs = []
        for a, b in zip(self._last, now):
            total = sum(b) - sum(a)
            idle = (b[3] + b[4]) - (a[3] + a[4])
            fracs.append(round(1.0 - idle / total, 4) if total > 0 else 0.0)
        self._last = now
        return {"t": time.time(), "busy_fraction": fracs[0], "cores": fracs[1:]}


def read_schedstat(pid: int) -> list[int] | None:
    """``[cpu_ns, wait_ns, slices]`` of ``pid`` from ``/proc/<pid>/schedstat``: time spent on a
    CPU, time spent waiting on a run queue (ns) and timeslices run, cumulative (kernel
    Documentation/scheduler/sched-stats.rst); None if the process is gone."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            fields = f.read().split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return [int(v) for v in fields[:3]] if len(fields) >= 3 else None


class SchedSampler:
    """Scheduler statistics of the agents: ``procs`` maps rank -> its process (a Popen whose
    ``pid`` is the agent's python: Mininet's ``mnexec`` execs the command, it does not fork)."""

    def __init__(self, procs: Mapping[int, object]):
        self.procs = procs

    def sample(self) -> dict:
        """``{"t", "ranks": {"<rank>": [cpu_ns, wait_ns, slices]}}``; exited agents left out. The
        ranks of one host runtime get the same list (its process is read once per sample)."""
        ranks, read = {}, {}
        for rank, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            if proc.pid not in read:
                read[proc.pid] = read_schedstat(proc.pid)
            stat = read[proc.pid]
            if stat is not None:
                ranks[str(rank)] = stat
        return {"t": time.time(), "ranks": ranks}


class _Pid:
    """A process known by its PID alone: ``poll()`` is None while ``/proc/<pid>`` exists."""

    def __init__(self, pid: int):
        self.pid = pid

    def poll(self) -> int | None:
        return None if os.path.exists(f"/proc/{self.pid}") else 0


class CommandProcs(Mapping):
    """The processes of a command job's ranks, for :class:`SchedSampler`: each launcher's command
    (its first child, ``/proc/<pid>/task/<pid>/children``), not the launcher itself, which only
    waits; with ``thread`` (the mrc backend's progress thread, ``agents.torch_mrc.engine.THREAD_NAME``)
    that thread of it, whose timers are MRC's, and a rank only once its thread runs (a counter of
    another thread before it would make its first difference meaningless)."""

    def __init__(self, launchers: Mapping[int, object], thread: str | None = None):
        self.launchers, self.thread = launchers, thread
        self._command: dict[int, int] = {}
        self._found: dict[int, _Pid] = {}

    def _command_pid(self, rank: int) -> int | None:
        if rank not in self._command:
            pid = self.launchers[rank].pid
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    children = f.read().split()
            except OSError:
                return None
            if not children:
                return None
            self._command[rank] = int(children[0])
        return self._command[rank]

    def _task(self, pid: int) -> int | None:
        """The thread of ``pid`` named :attr:`thread` (``/proc/<pid>/task/<tid>/comm``)."""
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() == self.thread:
                        return int(tid)
        except OSError:
            return None
        return None

    def _child(self, rank: int) -> _Pid | None:
        if rank not in self._found:
            pid = self._command_pid(rank)
            if pid is None:
                return None
            tid = self._task(pid) if self.thread else pid
            if tid is None:
                return None
            self._found[rank] = _Pid(tid)
        return self._found[rank]

    def __getitem__(self, rank: int):
        child = self._child(rank)
        if child is None:
            raise KeyError(rank)
        return child

    def __iter__(self):
        return (r for r in self.launchers if self._child(r) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Ticker:
    """A period on a monotonic clock: :meth:`due` is true once per ``period_s`` from ``start``.

    A tick the caller reaches late fires once (no burst of catch-up ticks, no tick right
    after another); if it is late by a period or more, the ticks it missed are counted in
    ``skipped`` and the next one is a full period later. The records a tick writes carry
    the time they are read, so the gap shows in the data.
    """

    def __init__(self, period_s: float, start: float):
        self.period_s = period_s
        self.next = start
        self.skipped = 0

    def due(self, now: float) -> bool:
        if now < self.next:
            return False
        late = now - self.next
        if late >= self.period_s:
            missed = int(late // self.period_s)
            self.skipped += missed
            log.debug("sampling tick %.3f s late: %d tick(s) skipped", late, missed)
            self.next = now + self.period_s
        else:
            self.next += self.period_s
        return True
