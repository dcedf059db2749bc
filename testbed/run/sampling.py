"""What the runner samples itself while the workload runs, every :data:`LINK_SAMPLE_S`.

* kernel link counters: :class:`testbed.counters.LinkCounters` (one netlink dump per
  namespace) -> ``links.jsonl``;
* host CPU use from ``/proc/stat``: :class:`CpuSampler` -> ``cpu.jsonl``.

Record formats are in :mod:`testbed.run.records`. Every record carries the wall-clock
time at which it was read.
"""

from __future__ import annotations

import time

LINK_SAMPLE_S = 0.100       # kernel link counters and CPU, s (metrics.LINK_BIN_S)


class CpuSampler:
    """Host CPU busy fraction from ``/proc/stat`` deltas (proc(5)): busy = 1 - (idle + iowait) / total,
    over all cores, and per core."""

    def __init__(self):
        self._last = self._read()

    @staticmethod
    def _read() -> list[list[int]]:
        with open("/proc/stat") as f:
            return [list(map(int, line.split()[1:9])) for line in f if line.startswith("cpu")]

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
