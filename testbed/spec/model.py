"""The resolved scenario: :class:`Workload`, :class:`TimelineEvent`, :class:`Scenario`."""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field



from ..targets import FlowTarget
from ..topology import Topology
from ..yamlread import Problem


# -- scenario -----------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """The collective to run: ``hosts`` resolved to names; sizes in bytes."""

    collective: str
    hosts: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    factor: int
    iterations: int
    warmup: int
    evs: int | None = None
    mtu: int | None = None

    @property
    def sizes_bytes(self) -> tuple[int, ...]:
        """nccl-tests sweep: min_bytes, min_bytes*factor, ... up to max_bytes."""
        sizes, size = [], self.min_bytes
        while size <= self.max_bytes:
            sizes.append(size)
            size *= self.factor
        return tuple(sizes)

    @property
    def measured_iterations(self) -> int:
        """Measured iterations over the whole sweep (``at_iteration`` counts these)."""
        return self.iterations * len(self.sizes_bytes)


@dataclass(frozen=True)
class TimelineEvent:
    """One fault: trigger (``at_s`` since workload start, or ``at_iteration``
    plus ``after_s``), ``action`` (one of ACTIONS), resolved ``link`` name and
    its ``selector`` text if it was chosen by one. Action parameters: flap
    ``period_s`` (one down+up cycle) and ``count``; loss ``loss_pct``; rate
    ``rate_bps``; loss/rate/blackhole optional ``duration_s`` (auto-revert).
    ``target``: a :class:`testbed.targets.FlowTarget` when the link is given by the
    flows crossing it; ``link`` is then None until the runner resolves it on the
    running fabric (:func:`testbed.targets.resolve`)."""

    action: str
    link: str | None
    at_s: float | None = None
    at_iteration: int | None = None
    after_s: float = 0.0
    selector: str | None = None
    period_s: float | None = None
    count: int | None = None
    loss_pct: float | None = None
    rate_bps: int | None = None
    duration_s: float | None = None
    target: "FlowTarget | None" = None


@dataclass(frozen=True)
class Scenario:
    """A resolved scenario file; see the module docstring for the schema."""

    name: str
    path: str
    description: str
    topology: Topology
    topology_path: str
    transports: tuple[str, ...]
    seed: int
    timeout_s: float
    reconverge_after_s: float | None
    workload: Workload
    timeline: tuple[TimelineEvent, ...] = ()
    trials: int = 1
    #: Suspicious but valid timeline items (overlapping faults, a link_up with no
    #: link_down, faults outlasting the timeout), as Problems; not in ``to_dict``.
    warnings: tuple[Problem, ...] = dataclass_field(default=(), compare=False)

    def to_dict(self) -> dict:
        """JSON-able resolved spec for manifest.json (topology summarized, not inlined)."""
        topo = self.topology
        return {
            "name": self.name, "path": self.path, "description": self.description,
            "topology": {"name": topo.name, "path": self.topology_path, "kind": topo.kind,
                         "params": dict(topo.params), "nodes": len(topo.nodes), "links": len(topo.links),
                         "hosts": len(topo.hosts)},
            "transports": list(self.transports), "seed": self.seed, "trials": self.trials,
            "timeout_s": self.timeout_s,
            "reconverge_after_s": self.reconverge_after_s,
            "workload": {**vars(self.workload), "hosts": list(self.workload.hosts),
                         "sizes_bytes": list(self.workload.sizes_bytes)},
            "timeline": [{**vars(e), "target": str(e.target) if e.target else None} for e in self.timeline],
        }


