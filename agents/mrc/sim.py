"""A deterministic multipath network on a fake clock, joining two sans-I/O QPs.

Each :class:`PathSpec` is one bidirectional path (one EV): per direction a
FIFO link of ``rate_bps`` (serialisation) plus a one-way ``delay_s``, with
random ``loss``, ``duplicate`` and ``reorder`` (a reordered packet gets
``reorder_delay_s`` extra delay) probabilities, an optional drop-tail queue
limit ``queue_bytes``, and ``down`` intervals [(t_down, t_up), ...] during
which every packet sent or arriving is dropped (t_up may be ``inf``),
optional trimming (``trim``: a data packet that would overflow the queue is cut to its
header and flagged ``FLAG_TRIMMED``, plus ``FLAG_TRIMMED_LASTHOP`` with ``trim_lasthop``, as a
trimming switch does, instead of being dropped), and optional RED-style ECN marking (DCQCN's CP, Zhu et al. SIGCOMM 2015 section
3.1): a packet that finds ``q`` bytes queued ahead of it is CE-marked with
probability 0 up to ``ecn_kmin_bytes``, rising linearly to ``ecn_pmax`` at
``ecn_kmax_bytes``, and 1 above; the receiving QP gets ``ecn=True``.
All randomness comes from one ``random.Random(seed)``: a run replays exactly.

The loop is event-driven: the fake clock jumps to the next of path
deliveries and QP timers; after each step both QPs are drained
(``datagrams_to_send``) into their paths. EV ``ev_ids[i]`` rides path ``i``.
``batch=True`` hands the datagrams due at one step to each QP through
``receive_datagrams`` (the I/O adapter's batch entry point) instead of one
``receive_datagram`` each; ``tap(direction, data, ev)`` sees every datagram a QP
emits (the differential harness, ``tests/unit/qp_diff.py``, compares them).
"""
from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

from . import packet as pk
from .qp import QP


@dataclass(frozen=True)
class PathSpec:
    """One path: ``rate_bps`` per direction, one-way ``delay_s``, probabilities in [0, 1]."""

    rate_bps: float = 1e9
    delay_s: float = 0.001
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_delay_s: float = 0.0
    queue_bytes: int | None = None
    down: tuple[tuple[float, float], ...] = ()
    ecn_kmin_bytes: int | None = None
    ecn_kmax_bytes: int | None = None
    ecn_pmax: float = 1.0
    trim: bool = False
    trim_lasthop: bool = False

    def __post_init__(self):
        if self.rate_bps <= 0 or self.delay_s < 0:
            raise ValueError("rate_bps must be > 0 and delay_s >= 0")
        for p in (self.loss, self.duplicate, self.reorder, self.ecn_pmax):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"probability {p} outside [0, 1]")
        if (self.ecn_kmin_bytes is None) != (self.ecn_kmax_bytes is None) or \
                self.ecn_kmin_bytes is not None and not 0 <= self.ecn_kmin_bytes <= self.ecn_kmax_bytes:
            raise ValueError("ECN marking needs 0 <= ecn_kmin_bytes <= ecn_kmax_bytes (both or neither)")
        if self.trim_lasthop and not self.trim:
            raise ValueError("trim_lasthop needs trim")

    def mark_probability(self, queue_bytes: float) -> float:
        """CE-mark probability of a packet finding ``queue_bytes`` queued (0 without marking)."""
        kmin, kmax = self.ecn_kmin_bytes, self.ecn_kmax_bytes
        if kmin is None or queue_bytes <= kmin:
            return 0.0
        if queue_bytes > kmax:
            return 1.0
        return self.ecn_pmax * (queue_bytes - kmin) / (kmax - kmin)

    def is_down(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.down)


@dataclass
class PathCounters:
    sent: int = 0
    delivered: int = 0
    dropped_loss: int = 0
    dropped_down: int = 0
    dropped_queue: int = 0
    duplicated: int = 0
    reordered: int = 0
    ce_marked: int = 0
    trimmed: int = 0


def trim_datagram(data: bytes, lasthop: bool = False) -> bytes | None:
    """``data`` cut to its header as a trimming switch cuts it: FLAG_TRIMMED (and
    FLAG_TRIMMED_LASTHOP with ``lasthop``) set, the payload gone, ``length`` kept, the CRC
    recomputed (:mod:`agents.mrc.packet`'s DATA layout); None for a datagram that is not
    a valid, untrimmed DATA packet (a switch trims only data)."""
    if len(data) < 2 or data[1] != pk.PacketType.DATA:
        return None
    try:
        _, flags, *_, start, _ = pk.unpack_data(data)
    except pk.ProtocolError:
        return None
    if flags & pk.FLAG_TRIMMED:
        return None
    hdr = bytearray(data[:start])
    hdr[3] = flags | pk.FLAG_TRIMMED | (pk.FLAG_TRIMMED_LASTHOP if lasthop else 0)
    return bytes(hdr) + pk.CRC.pack(pk.crc32(hdr))


class _Link:
    __slots__ = ("spec", "busy_until", "counters")

    def __init__(self, spec: PathSpec):
        self.spec = spec
        self.busy_until = 0.0
        self.counters = PathCounters()


@dataclass
class MultipathNetwork:
    """Join QP ``a`` and QP ``b`` over ``paths``; ``ev_ids[i]`` is the EV of path i.

    ``reverse_paths``: the b -> a direction of each path, when it differs (default: the
    same spec both ways). ``seed`` seeds the network's own RNG (loss, reordering,
    duplication). ``now`` is the fake clock in seconds. ``batch``: deliver each step's
    datagrams for a QP with ``receive_datagrams`` (runs of one direction, in arrival order).
    ``tap(direction, data, ev)``: called for every datagram a QP emits (direction 0: a -> b).
    """

    a: QP
    b: QP
    paths: Sequence[PathSpec]
    ev_ids: Sequence[int] | None = None
    seed: int = 0
    now: float = 0.0
    reverse_paths: Sequence[PathSpec] | None = None
    batch: bool = False
    tap: Callable[[int, bytes, int], None] | None = None
    _heap: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.ev_ids = list(self.ev_ids) if self.ev_ids is not None else list(range(len(self.paths)))
        if len(self.ev_ids) != len(self.paths):
            raise ValueError("need one EV id per path")
        self._path_of = {ev: i for i, ev in enumerate(self.ev_ids)}
        # links[(src, path)] for src in (0: a->b, 1: b->a)
        back = self.reverse_paths if self.reverse_paths is not None else self.paths
        if len(back) != len(self.paths):
            raise ValueError("need one reverse spec per path")
        self.links = {(d, i): _Link(p) for d, specs in ((0, self.paths), (1, back))
                      for i, p in enumerate(specs)}
        self._seq = 0
        self.steps = 0

    def _enqueue(self, direction: int, data: bytes, ev: int) -> None:
        i = self._path_of.get(ev)
        if i is None:
            raise ValueError(f"EV {ev} has no path")
        link = self.links[(direction, i)]
        spec, c, now = link.spec, link.counters, self.now
        c.sent += 1
        if spec.is_down(now):
            c.dropped_down += 1
            return
        start = max(now, link.busy_until)
        if spec.queue_bytes is not None and (start - now) * spec.rate_bps / 8 > spec.queue_bytes:
            cut = trim_datagram(data, spec.trim_lasthop) if spec.trim else None
            if cut is None:
                c.dropped_queue += 1
                return
            c.trimmed += 1   # the header goes on, past the queue limit (a trimming switch's priority)
            data = cut
        link.busy_until = start + len(data) * 8 / spec.rate_bps
        rng = self.rng
        if spec.loss and rng.random() < spec.loss:
            c.dropped_loss += 1
            return
        ce = False
        if spec.ecn_kmin_bytes is not None:
            p = spec.mark_probability((start - now) * spec.rate_bps / 8)
            ce = p > 0 and rng.random() < p
            c.ce_marked += ce
        arrive = link.busy_until + spec.delay_s
        if spec.reorder and rng.random() < spec.reorder:
            arrive += spec.reorder_delay_s
            c.reordered += 1
        copies = 2 if spec.duplicate and rng.random() < spec.duplicate else 1
        if copies == 2:
            c.duplicated += 1
        for k in range(copies):
            self._seq += 1
            heapq.heappush(self._heap, (arrive + k * 1e-7, self._seq, direction, i, data, ce))

    def drain(self) -> None:
        """Send what both QPs have to send now into their paths (after every step; a driver
        that calls a QP between steps, e.g. ``post_write``, calls it too)."""
        tap = self.tap
        for direction, qp in ((0, self.a), (1, self.b)):
            for data, ev in qp.datagrams_to_send(self.now):
                if tap is not None:
                    tap(direction, data, ev)
                self._enqueue(direction, data, ev)

    def step(self) -> bool:
        """Advance to the next event and process it; False when nothing is pending."""
        candidates = [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
        if self._heap:
            candidates.append(self._heap[0][0])
        if not candidates:
            return False
        t = max(min(candidates), self.now)
        self.now = t
        heap = self._heap
        run: list = []          # batch mode: the current run of (direction, data, ce)
        while heap and heap[0][0] <= t:
            _, _, direction, i, data, ce = heapq.heappop(heap)
            link = self.links[(direction, i)]
            if link.spec.is_down(t):
                link.counters.dropped_down += 1
                continue
            link.counters.delivered += 1
            if not self.batch:
                (self.b if direction == 0 else self.a).receive_datagram(data, t, ecn=ce)
                continue
            if run and run[0][0] != direction:
                self._deliver_run(run, t)
                run = []
            run.append((direction, data, ce))
        if run:
            self._deliver_run(run, t)
        for qp in (self.a, self.b):
            deadline = qp.get_timer()
            if deadline is not None and deadline <= t:
                qp.handle_timer(t)
        self.drain()
        self.steps += 1
        return True

    def _deliver_run(self, run: list, t: float) -> None:
        """One ``receive_datagrams`` call for a run of datagrams of one direction (``ce``
        None when none of them is CE-marked, as an I/O adapter without marks passes it)."""
        ce = [c for _, _, c in run]
        (self.b if run[0][0] == 0 else self.a).receive_datagrams(
            [d for _, d, _ in run], t, ce if any(ce) else None)

    def run(self, *, until: float = math.inf, stop: Callable[[], bool] | None = None,
            observer: Callable[[float], None] | None = None, max_steps: int = 10_000_000) -> float:
        """Run until fake time ``until``, ``stop()`` is true, or nothing is pending.

        ``observer(now)`` is called after every step. Returns the fake time
        reached. Raises RuntimeError if ``max_steps`` is exceeded (a livelock).
        """
        self.drain()
        for _ in range(max_steps):
            if stop is not None and stop():
                return self.now
            nxt = self.next_time()
            if nxt is None or nxt > until:
                self.now = min(until, self.now) if nxt is None else until
                return self.now
            self.step()
            if observer is not None:
                observer(self.now)
        raise RuntimeError(f"simulation exceeded {max_steps} steps")

    def next_time(self) -> float | None:
        """The fake time of the next step (delivery or QP timer), or None when nothing is pending."""
        candidates = [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
        if self._heap:
            candidates.append(self._heap[0][0])
        return min(candidates) if candidates else None

    _drain = drain            # the names callers used before drain/next_time were public
    _next_time = next_time

    def counters(self) -> dict:
        """Per-link counters: {"a->b path 0": {...}, ...}."""
        return {f"{'a->b' if d == 0 else 'b->a'} path {i}": vars(l.counters)
                for (d, i), l in self.links.items()}
