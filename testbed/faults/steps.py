"""Typed fault changes and timeline steps (pure): what :class:`testbed.faults.timeline.Timeline` schedules
and :class:`testbed.faults.FaultInjector` applies.

One small frozen dataclass per kind of change; each knows its ``kind`` (the word the run
journal and :mod:`testbed.metrics` use: ``link``, ``loss``, ``rate``, ``blackhole``,
``reconverge``), its ``value`` as journaled, and a short description for the console.
A :class:`Step` is one change at a time ``t``, tagged with the timeline event it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Union


@dataclass(frozen=True)
class LinkState:
    """Take ``link`` administratively down (``up`` False) or bring it back up."""

    kind: ClassVar[str] = "link"
    link: str
    up: bool

    @property
    def value(self) -> bool:
        return self.up

    def describe(self) -> str:
        return "up" if self.up else "down"


@dataclass(frozen=True)
class Loss:
    """Drop ``percent`` % (0 < percent <= 100) of ``link``'s packets; None: no loss.
    ``into``: only packets travelling into that node (one direction); None: both ways."""

    kind: ClassVar[str] = "loss"
    link: str
    percent: float | None
    into: str | None = None

    @property
    def value(self) -> float | None:
        return self.percent

    def describe(self) -> str:
        way = f" into {self.into}" if self.into else ""
        return "loss off" if self.percent is None else f"loss {self.percent}%{way}"


@dataclass(frozen=True)
class Rate:
    """Shape ``link`` to ``rate_bps`` bits/s both ways; None: the topology's rate."""

    kind: ClassVar[str] = "rate"
    link: str
    rate_bps: int | None

    @property
    def value(self) -> int | None:
        return self.rate_bps

    def describe(self) -> str:
        return "rate restored" if self.rate_bps is None else f"rate {self.rate_bps / 1e6:g} Mbit/s"


@dataclass(frozen=True)
class Blackhole:
    """Drop every packet of ``link`` both ways (``on``) while carrier and routes stay up."""

    kind: ClassVar[str] = "blackhole"
    link: str
    on: bool

    @property
    def value(self) -> bool:
        return self.on

    def describe(self) -> str:
        return "blackhole on" if self.on else "blackhole off"


@dataclass(frozen=True)
class Reconverge:
    """Recompute the ECMP routes around the links down now (emulated routing convergence)."""

    kind: ClassVar[str] = "reconverge"
    link: ClassVar[None] = None
    value: ClassVar[None] = None

    def describe(self) -> str:
        return "routing reconverged"


@dataclass(frozen=True)
class EVAction:
    """An operator action for the MRC controller: ``op`` (deny, allow, replace) every EV that
    crosses ``link``. Not a fault on the link: the controller acts on the agents' EV profiles."""

    kind: ClassVar[str] = "ev_action"
    link: str
    op: str

    @property
    def value(self) -> str:
        return self.op

    def describe(self) -> str:
        return f"controller: {self.op} the EVs crossing it"


Change = Union[LinkState, Loss, Rate, Blackhole, Reconverge, EVAction]
"""Every change a step makes."""
FAULTS = (LinkState, Loss, Rate, Blackhole)
"""The changes that are faults on a link (every kind but :class:`Reconverge`)."""


@dataclass(frozen=True)
class Step:
    """``change`` at ``t`` (the runner's clock, s). ``action``/``phase``/``index``: the timeline
    event it comes from (its action, "apply" starts a disruption and "revert" ends it, its
    index in the file; None for a reconvergence). ``planned_s``: ``t`` in seconds since the
    workload start (None before it). Steps of several events scheduled for one instant (same
    trigger and offset) have equal values: the metrics read them as one fault."""

    t: float
    change: Change
    action: str
    phase: str
    index: int | None
    planned_s: float | None = None

    @property
    def kind(self) -> str:
        return self.change.kind

    @property
    def link(self) -> str | None:
        return self.change.link

    @property
    def value(self) -> Any:
        return self.change.value

    def record(self) -> dict:
        """The step as the run journal lists it (e.g. steps not reached)."""
        return {"t": self.t, "kind": self.kind, "link": self.link, "value": self.value,
                "action": self.action, "phase": self.phase, "index": self.index, "planned_s": self.planned_s}
