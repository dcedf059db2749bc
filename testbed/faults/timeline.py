"""A scenario's fault timeline as a schedule of primitive steps (sans-I/O, on any clock).

The runner feeds it the workload start and the agents' iteration reports and asks
what is due; it applies the steps (:mod:`testbed.run.transport`) and journals them.

Triggers (:class:`testbed.spec.TimelineEvent`):

* ``at_s``: seconds after the workload start (the start barrier).
* ``at_iteration: N`` (+ ``after_s``): measured iteration N (0-based over the whole
  size sweep, warm-ups not counted) begins when the first rank finishes the
  iteration before it (the preceding warm-up or measured one, in sweep order);
  the event fires ``after_s`` later. With no warm-up before iteration 0 it fires
  ``after_s`` after the start.

Expansion into :class:`Step` s, each carrying one typed change of
:mod:`testbed.faults.steps` (``phase`` "apply" starts a disruption, "revert"
ends it; :mod:`testbed.metrics` reads the same words):

* ``link_down`` / ``link_up``: one :class:`LinkState` step (apply).
* ``switch_down`` / ``switch_up``: one :class:`LinkState` step (apply) per link of the switch,
  all at T, in link name order (the step's action stays ``switch_down`` / ``switch_up``).
* ``plane_down`` / ``plane_up``: one :class:`LinkState` step (apply) per link of the plane, all
  at T, in link name order, each with the action ``link_down`` / ``link_up``: journaled as the
  same ``link_down`` lines spelled out one per link would be (the metrics count the links of one
  instant as one fault).
* ``flap {period, count}``: ``count`` cycles of down at ``T + i*period`` (apply) and
  up half a period later (revert).
* ``loss`` / ``rate`` / ``blackhole``: a :class:`Loss` / :class:`Rate` / :class:`Blackhole`
  apply at T; with ``duration`` a revert at ``T + duration`` (loss None, rate None:
  the topology's, blackhole off); on a link set, one of each per link, in link name order.
* ``ev_deny`` / ``ev_allow`` / ``ev_replace``: one :class:`EVAction` (apply), for the
  controller (the runner sends it; no link changes).
* :class:`Reconverge` steps are scheduled by :meth:`Timeline.link_changed`
  ``reconverge_after_s`` after each link state change: routing converges on the
  state the fabric is in *then* (a flap shorter than the delay is never seen).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Iterable

from testbed.faults.steps import Blackhole, Change, EVAction, LinkState, Loss, Rate, Reconverge, Step
from testbed.spec import TimelineEvent

__all__ = ["Step", "Timeline", "sweep_warmups"]


def sweep_warmups(sizes: int, iterations: int, warmup: int) -> list[bool]:
    """Per sweep position (the agents' ``seq``), whether that iteration is a warm-up:
    for each size ``warmup`` warm-ups then ``iterations`` measured ones (nccl-tests order)."""
    return [w for _ in range(sizes) for w in [True] * warmup + [False] * iterations]


class Timeline:
    """Schedule of ``events`` (resolved, in file order). ``warmups``: :func:`sweep_warmups`."""

    def __init__(self, events: Iterable[TimelineEvent], warmups: list[bool], *,
                 reconverge_after_s: float | None = None):
        self.events = list(events)
        self.reconverge_after_s = reconverge_after_s
        measured_seq = [seq for seq, w in enumerate(warmups) if not w]
        # event index -> seq whose completion triggers it (-1: the workload start)
        self._iteration_trigger = {i: measured_seq[e.at_iteration] - 1 for i, e in enumerate(self.events)
                                   if e.at_iteration is not None and e.at_iteration < len(measured_seq)}
        self._heap: list[tuple[float, int, Step]] = []
        self._seq = itertools.count()
        self._fired: set[int] = set()
        self.started_at: float | None = None

    # -- inputs ----------------------------------------------------------------
    def start(self, now: float) -> None:
        """The workload starts at ``now``: schedule the time-triggered events."""
        self.started_at = now
        for i, e in enumerate(self.events):
            if e.at_s is not None:
                self._fire(i, now + e.at_s)
            elif self._iteration_trigger.get(i) == -1:
                self._fire(i, now + e.after_s)

    def iteration_done(self, seq: int, now: float) -> None:
        """A rank finished sweep position ``seq`` at ``now`` (the first report counts)."""
        for i, trigger in self._iteration_trigger.items():
            if trigger == seq and i not in self._fired:
                self._fire(i, now + self.events[i].after_s)

    def link_changed(self, now: float) -> None:
        """A link went down or up at ``now``: schedule a reconvergence if configured."""
        if self.reconverge_after_s is not None:
            t = now + self.reconverge_after_s
            self._push(Step(t, Reconverge(), "reconverge", "apply", None, self._planned(t)))

    # -- outputs ---------------------------------------------------------------
    def due(self, now: float) -> list[Step]:
        """Steps with ``t <= now``, in time order (ties in scheduling order); removed."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[2])
        return out

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pending(self) -> list[Step]:
        """Steps scheduled but not yet due, in time order."""
        return [s for _, _, s in sorted(self._heap)]

    def unfired(self) -> list[int]:
        """Indexes of events whose trigger never came."""
        return [i for i in range(len(self.events)) if i not in self._fired]

    # -- expansion ---------------------------------------------------------------
    def _planned(self, t: float) -> float | None:
        """``t`` since the workload start, µs-rounded (None before it)."""
        return None if self.started_at is None else round(t - self.started_at, 6)

    def _push(self, step: Step) -> None:
        heapq.heappush(self._heap, (step.t, next(self._seq), step))

    def _fire(self, i: int, t: float) -> None:
        self._fired.add(i)
        e = self.events[i]

        def step(dt: float, change: Change, phase: str, action: str = e.action) -> None:
            self._push(Step(t + dt, change, action, phase, i, self._planned(t + dt)))

        if e.action in ("link_down", "link_up"):
            step(0.0, LinkState(e.link, up=e.action == "link_up"), "apply")
        elif e.action in ("switch_down", "switch_up"):
            for link in e.links:
                step(0.0, LinkState(link, up=e.action == "switch_up"), "apply")
        elif e.action in ("plane_down", "plane_up"):
            for link in e.links:
                step(0.0, LinkState(link, up=e.action == "plane_up"), "apply", e.action.replace("plane", "link"))
        elif e.action.startswith("ev_"):
            step(0.0, EVAction(e.link, e.action.removeprefix("ev_")), "apply")
        elif e.action == "flap":
            for c in range(e.count):
                step(c * e.period_s, LinkState(e.link, up=False), "apply")
                step(c * e.period_s + e.period_s / 2, LinkState(e.link, up=True), "revert")
        else:
            for link in e.links or (e.link,):
                apply, revert = {"loss": (Loss(link, e.loss_pct, e.loss_into), Loss(link, None)),
                                 "rate": (Rate(link, e.rate_bps), Rate(link, None)),
                                 "blackhole": (Blackhole(link, True), Blackhole(link, False))}[e.action]
                step(0.0, apply, "apply")
                if e.duration_s is not None:
                    step(e.duration_s, revert, "revert")
