"""The resolved scenario: :class:`WorkloadSpec`, :class:`TimelineEvent`, :class:`Scenario`."""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field



from testbed.spec.selectors import FlowTarget
from testbed.model.topology import Topology
from testbed.spec.yamlread import Problem


# -- scenario -----------------------------------------------------------------

@dataclass(frozen=True)
class WorkloadSpec:
    """The collective to run: ``hosts`` resolved to names in rank order (after ``order``);
    sizes in bytes. ``evs``: at most that many EVs per QP, one per distinct path;
    ``evs_per_qp``: exactly that many, reusing paths round-robin where there are fewer.
    ``ev_paths``: how an EV id maps to a path: ``"spread"`` (the default: EV k takes path k, so a
    QP's EVs cover its paths evenly) or ``"oblivious"`` (each EV's path drawn by a seeded hash of
    the scenario seed, the host pair and the EV id, with collisions, as a switch hashing each EV's
    entropy would: :func:`testbed.spec.jobs.qp_evs`).
    ``payload``: bytes of payload per mrc/rc data packet as the file gave it (None: the default,
    :func:`testbed.spec.jobs.job_payload_bytes`); ``mtu`` and ``payload`` exclude each other."""

    collective: str
    hosts: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    factor: int
    iterations: int
    warmup: int
    evs: int | None = None
    mtu: int | None = None
    order: str = "listed"
    evs_per_qp: int | None = None
    #: permutation only: ``targets[r]`` is the rank r sends to (a seeded derangement).
    targets: tuple[int, ...] | None = None
    #: the job's name (``jobs[i].name``; ``job0`` for a scenario's single ``workload``)
    name: str = "job0"
    payload: int | None = None
    #: a command job (:mod:`agents.jobs`): the command's argv (``python`` as argv[0]: the testbed's
    #: own interpreter), its working directory (the scenario file's), extra environment (sorted
    #: (name, value) pairs) and the step reports expected (None: unknown). ``collective`` is then
    #: ``all_reduce`` with one float32 per rank: the ring the mrc backend's QPs follow.
    command: tuple[str, ...] | None = None
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    steps: int | None = None
    ev_paths: str = "spread"

    @property
    def is_command(self) -> bool:
        """A command job (a user's script on every host), not a synthetic collective."""
        return self.command is not None

    def peers(self, rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(send_to, recv_from) ranks of ``rank`` (:func:`agents.collectives.peers`)."""
        from agents.collectives import peers
        return peers(self.collective, rank, len(self.hosts), self.targets)

    @property
    def connections(self) -> list[tuple[int, int]]:
        """Every (sender, receiver) rank pair of the collective, by sender then receiver."""
        return [(r, d) for r in range(len(self.hosts)) for d in self.peers(r)[0]]

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
    ``rate_bps``; loss/rate/blackhole optional ``duration_s`` (auto-revert); loss optional
    ``direction``: ``"<from>-><to>"`` (node names: only packets travelling into ``<to>`` are
    lost), or with a flow target ``"forward"`` (the way the selected data flow crosses the link)
    or ``"reverse"`` (the opposite way: its acknowledgements), resolved to ``"<from>-><to>"``
    with the link; None: both ways.
    ``target``: a :class:`testbed.faults.targets.FlowTarget` when the link is given by the
    flows crossing it; ``link`` is then None until the runner resolves it on the
    running fabric (:func:`testbed.faults.targets.resolve`).
    ``switch_down``/``switch_up``: ``link`` is None, ``switch`` names the switch and ``links``
    are all its links (sorted), each taken down or up at once; with a ``target``, both are
    empty until the runner resolves it (:func:`testbed.faults.targets.resolve_switch`).
    ``loss``/``rate``/``blackhole`` on a link set (``all``, ``all <role>-<role>``): ``link`` is
    None, ``selector`` the set's text and ``links`` its links (sorted), each changed at once.
    ``plane_down``/``plane_up``: ``link`` is None, ``selector`` is ``plane <N>`` and ``links`` the
    plane's links (sorted: :func:`testbed.spec.names.plane_links`), each a ``link_down``/``link_up``.
    A named ``random`` draw (``random <role>-<role> as <name>``) keeps that text as ``selector``;
    a later reference by the name has the same ``link`` and the name as ``selector``."""

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
    direction: str | None = None
    switch: str | None = None
    links: tuple[str, ...] = ()

    @property
    def loss_into(self) -> str | None:
        """The node whose incoming packets a one-way loss drops (None: both ways, or unresolved)."""
        return self.direction.split("->")[1] if self.direction and "->" in self.direction else None


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
    workload: WorkloadSpec
    timeline: tuple[TimelineEvent, ...] = ()
    trials: int = 1
    #: Suspicious but valid timeline items (overlapping faults, a link_up with no
    #: link_down, faults outlasting the timeout), as Problems; not in ``to_dict``.
    warnings: tuple[Problem, ...] = dataclass_field(default=(), compare=False)
    #: Every job run at once (``jobs:``); ``workload`` is the first. Empty: ``(workload,)``.
    jobs: tuple[WorkloadSpec, ...] = ()
    #: ``agent_processes: N``: N host runtimes (:mod:`agents.runtime`) serve every agent, each
    #: on one loop; ``"per-host"``: one process per agent (per host and job); None (absent):
    #: the default, one runtime per core (:func:`testbed.run.agents.default_agent_processes`).
    agent_processes: int | str | None = None
    #: ``agent_realtime: true``: the agents' processes run at SCHED_RR (job ``rt_priority``
    #: :data:`testbed.spec.jobs.AGENT_RT_PRIORITY`) instead of the normal policy.
    agent_realtime: bool = False
    #: ``engine:``: the MRC engine of the mrc and rc QPs, "python" (the specification) or
    #: "native" (:mod:`agents.mrc.native`); kernel tcp has none.
    engine: str = "native"
    #: ``controller: {policy}``: the MRC controller's policy (:mod:`testbed.controller`), started
    #: on every mrc run; None: no controller (and no ``ev_*`` timeline action).
    controller: str | None = None
    #: ``controller: {restart: true}``: a lost controller is restarted, and the new one
    #: resynchronises from the agents before it decides (:mod:`testbed.run.ctlwatch`).
    controller_restart: bool = False
    #: The values absent optional keys took (:data:`testbed.spec.schema.SCENARIO_DEFAULTS`, the
    #: derived timeout), as ``(key path, value)`` in file order: ``(("seed", 1), ("timeout", 58.0))``.
    defaults: tuple[tuple[str, object], ...] = ()
    #: ``qp:``: QP settings for every mrc and rc QP of the run, as ``(key, value)`` pairs in file
    #: order: ``loss_inference`` (False: a loss is found only by the RTO or a NACK), ``ecn`` (False:
    #: no ECT, so no CE marks, no ECN steering and no NSCC response to ECN), ``rto_base_rtts`` (the
    #: RTO's least margin above SRTT in base RTTs; absent:
    #: :data:`testbed.spec.jobs.RTO_MARGIN_BASE_RTTS`), ``nscc_delay_filter`` (NSCC's
    #: ``delay_filter``, :data:`agents.mrc.cc.DELAY_FILTERS`: "ewma" cuts on uet-htsim's filtered
    #: delay), ``ev_select`` (MRC's EV selection, :data:`agents.mrc.ev.EV_SELECT`: "reps" is a
    #: non-spec variant after uet-htsim's REPS). Applied by :func:`testbed.spec.jobs.build_job_specs`.
    qp: tuple[tuple[str, object], ...] = ()

    def engines(self) -> dict[str, str]:
        """The engine of every transport of the run: mrc/rc variants the scenario's ``engine``,
        kernel tcp ``"kernel"`` (so that no figure is quoted without its engine)."""
        return {t: "kernel" if t == "tcp" else self.engine for t in self.transports}

    @property
    def all_jobs(self) -> tuple[WorkloadSpec, ...]:
        """The jobs run at once: ``jobs``, or the single ``workload``. The timeline's
        ``at_iteration`` and flow selectors refer to the first."""
        return self.jobs or (self.workload,)

    def to_dict(self) -> dict:
        """JSON-able resolved spec for manifest.json (topology summarized, not inlined)."""
        topo = self.topology
        return {
            "name": self.name, "path": self.path, "description": self.description,
            "topology": {"name": topo.name, "path": self.topology_path, "kind": topo.kind,
                         "params": dict(topo.params), "nodes": len(topo.nodes), "links": len(topo.links),
                         "hosts": len(topo.hosts)},
            "transports": list(self.transports), "seed": self.seed, "trials": self.trials,
            "agent_processes": self.agent_processes, "agent_realtime": self.agent_realtime,
            "engine": self.engine, "engines": self.engines(), "controller": self.controller,
            "controller_restart": self.controller_restart, "qp": dict(self.qp),
            "timeout_s": self.timeout_s, "defaults": dict(self.defaults),
            "reconverge_after_s": self.reconverge_after_s,
            "workload": _workload_dict(self.workload),
            "jobs": [_workload_dict(j) for j in self.all_jobs],
            "timeline": [{**vars(e), "target": str(e.target) if e.target else None} for e in self.timeline],
        }




def _workload_dict(wl: WorkloadSpec) -> dict:
    return {**vars(wl), "hosts": list(wl.hosts), "sizes_bytes": list(wl.sizes_bytes),
            "targets": list(wl.targets) if wl.targets is not None else None}
