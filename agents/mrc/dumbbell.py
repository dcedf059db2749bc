"""Several QP pairs through one shared bottleneck, on a fake clock (deterministic).

:class:`agents.mrc.sim.MultipathNetwork` joins one pair over parallel paths; congestion
control between flows needs flows that share a queue. Here pair k (sender ``pairs[k][0]``,
receiver ``pairs[k][1]``) sends every data-direction datagram through one
``bottleneck`` link (a :class:`agents.mrc.sim.PathSpec`: rate, delay, drop-tail queue, ECN
marking) and every reverse datagram (SACKs, NACKs, CNPs) through its own ``reverse`` link.
EVs are not distinguished (one path per direction). Randomness (loss, marking) comes from
``random.Random(seed)``.
"""
from __future__ import annotations

import heapq
import math
import random
from typing import Callable, Sequence

from .qp import QP
from .sim import PathSpec, _Link


class Dumbbell:
    """Join ``pairs`` [(sender QP, receiver QP), ...] over a shared ``bottleneck`` (sender ->
    receiver) and per-pair ``reverse`` links (default: the bottleneck's rate and delay, no
    queue limit, no loss, no marking). ``now``: fake time in seconds."""

    def __init__(self, pairs: Sequence[tuple[QP, QP]], bottleneck: PathSpec,
                 reverse: PathSpec | None = None, *, seed: int = 0):
        self.pairs = list(pairs)
        self.rng = random.Random(seed)
        self.now = 0.0
        self.bottleneck = _Link(bottleneck)
        back = reverse or PathSpec(rate_bps=bottleneck.rate_bps, delay_s=bottleneck.delay_s)
        self.reverse = [_Link(back) for _ in self.pairs]
        self._heap: list = []
        self._seq = 0

    def _enqueue(self, link: _Link, data: bytes, dest: QP) -> None:
        spec, c, now = link.spec, link.counters, self.now
        c.sent += 1
        start = max(now, link.busy_until)
        queued = (start - now) * spec.rate_bps / 8
        if spec.queue_bytes is not None and queued > spec.queue_bytes:
            c.dropped_queue += 1
            return
        link.busy_until = start + len(data) * 8 / spec.rate_bps
        if spec.loss and self.rng.random() < spec.loss:
            c.dropped_loss += 1
            return
        p = spec.mark_probability(queued)
        ce = p > 0 and self.rng.random() < p
        c.ce_marked += ce
        self._seq += 1
        heapq.heappush(self._heap, (link.busy_until + spec.delay_s, self._seq, dest, data, ce))

    def _drain(self) -> None:
        for k, (a, b) in enumerate(self.pairs):
            for data, _ev in a.datagrams_to_send(self.now):
                self._enqueue(self.bottleneck, data, b)
            for data, _ev in b.datagrams_to_send(self.now):
                self._enqueue(self.reverse[k], data, a)

    def _qps(self):
        return [qp for pair in self.pairs for qp in pair]

    def _next_time(self) -> float | None:
        times = [t for t in (qp.get_timer() for qp in self._qps()) if t is not None]
        if self._heap:
            times.append(self._heap[0][0])
        return min(times) if times else None

    def run(self, *, until: float = math.inf, observer: Callable[[float], None] | None = None,
            max_steps: int = 10_000_000) -> float:
        """Advance to fake time ``until`` or until nothing is pending; ``observer(now)`` after each
        step. Returns the time reached; RuntimeError after ``max_steps`` steps (a livelock)."""
        self._drain()
        for _ in range(max_steps):
            t = self._next_time()
            if t is None or t > until:      # as MultipathNetwork.run: idle keeps the clock
                self.now = min(until, self.now) if t is None else until
                return self.now
            self.now = t = max(t, self.now)
            while self._heap and self._heap[0][0] <= t:
                _, _, dest, data, ce = heapq.heappop(self._heap)
                dest.receive_datagram(data, t, ecn=ce)
            for qp in self._qps():
                d = qp.get_timer()
                if d is not None and d <= t:
                    qp.handle_timer(t)
            self._drain()
            if observer is not None:
                observer(t)
        raise RuntimeError(f"simulation exceeded {max_steps} steps")
