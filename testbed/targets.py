"""Faults aimed at flows: a timeline action's ``link`` given as the link some flows cross.

In a scenario, wherever a link name goes (``link_down``, ``link_up``, and the ``link`` of
``flap``/``loss``/``rate``/``blackhole``) a mapping may stand instead::

    link_down: {crossed_by: "rc 3->4", hop: core-aggregation}
    link_down: {crossed_by: [rc, tcp]}          # hop defaults to "unrepaired"

* ``crossed_by``: one flow selector or a list. A selector is ``"<transport>"`` (any ring
  flow of that transport) or ``"<transport> <r>-><r+1>"`` (ranks in ring order). With a
  list, the link must be crossed, at that hop, by a data flow matching *each* selector.
* ``hop``: where on the flow's path, named by the roles of the sending and the receiving
  node of the hop, in the flow's direction: ``host-edge``, ``edge-aggregation``,
  ``aggregation-core``, ``core-aggregation`` (into the destination pod),
  ``aggregation-edge``, ``edge-host``, and for leaf-spine ``host-leaf``, ``leaf-spine``,
  ``spine-leaf``, ``leaf-host``. Default ``unrepaired``: the first switch-to-switch hop
  whose sending switch has a single shortest-path next hop to the destination, so that no
  router next to the failure can route around it (no local repair) and only routing
  reconvergence (``reconverge_after``) or the transport itself can: on a fat-tree, the
  core -> aggregation hop of an inter-pod flow.
* ``repairable: true``: besides, no flow of the named transports, in either direction
  (data or acknowledgements), may cross the link at an unrepaired hop: every flow over it
  is re-hashed by the router next to the failure, so the scenario measures local repair.

The runner resolves a target when the fabric is up and before the agents start: it traces
the ring flows of the named transports (:mod:`testbed.paths`; their 5-tuples come from the
job specs, so they are the same on every transport's fabric), keeps the links crossed at
the hop, and picks one (sorted; several candidates: a choice seeded by the scenario seed
and the index of the first event with an equal target, so that a ``link_up`` given the
same target as its ``link_down`` brings back the link that went down). The resolved link
and the flows crossing it are journaled.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from .paths import TracedFlow
from .topology import Role, Topology

UNREPAIRED = "unrepaired"
ROLE_HOPS = ("host-edge", "edge-aggregation", "aggregation-core", "core-aggregation", "aggregation-edge",
             "edge-host", "host-leaf", "leaf-spine", "spine-leaf", "leaf-host")
HOPS = (UNREPAIRED, *ROLE_HOPS)


class TargetError(ValueError):
    """A flow target names no link on this fabric (no flow crosses such a hop)."""


@dataclass(frozen=True)
class FlowSelector:
    """``transport`` and optionally one ring hop ``src_rank -> dst_rank``."""

    transport: str
    src_rank: int | None = None
    dst_rank: int | None = None

    def matches(self, tf: TracedFlow) -> bool:
        f = tf.flow
        return (f.kind == "data" and f.transport == self.transport
                and (self.src_rank is None or (f.src_rank, f.dst_rank) == (self.src_rank, self.dst_rank)))

    def __str__(self) -> str:
        return self.transport if self.src_rank is None else f"{self.transport} {self.src_rank}->{self.dst_rank}"


@dataclass(frozen=True)
class FlowTarget:
    """A link given by the flows crossing it: every selector of ``crossed_by`` must have a
    data flow crossing it at ``hop`` (one of :data:`HOPS`)."""

    crossed_by: tuple[FlowSelector, ...]
    hop: str = UNREPAIRED
    repairable: bool = False

    @property
    def transports(self) -> list[str]:
        return sorted({s.transport for s in self.crossed_by})

    def __str__(self) -> str:
        return (f"crossed_by [{', '.join(map(str, self.crossed_by))}] hop {self.hop}"
                + (" repairable" if self.repairable else ""))


def parse_selector(text: str, world: int, connections: set[tuple[int, int]] | None = None) -> FlowSelector:
    """``"rc"`` or ``"rc 3->4"`` -> FlowSelector. ``connections``: the (sender, receiver) rank
    pairs of the collective (default: a ring's, r -> r+1). Raises ValueError naming what is
    wrong (unknown transport, ranks outside the world of ``world`` ranks, not a connection)."""
    from .spec import TRANSPORTS, transport_variant
    words = text.split()
    try:
        transport_variant(words[0] if words else "")
    except ValueError:
        words = []
    if not words or len(words) > 2:
        raise ValueError(f"{text!r} is not '<transport>' or '<transport> <r>-><r+1>' "
                         f"(transports: {', '.join(TRANSPORTS)})")
    if len(words) == 1:
        return FlowSelector(words[0])
    src, sep, dst = words[1].partition("->")
    if not sep or not src.isdigit() or not dst.isdigit():
        raise ValueError(f"{text!r}: the flow is '<sender>-><receiver>', ranks (e.g. 3->4)")
    s, d = int(src), int(dst)
    if not (s < world and d < world):
        raise ValueError(f"{text!r}: the ranks are 0..{world - 1}")
    if connections is None and d != (s + 1) % world:
        raise ValueError(f"{text!r}: rank {s} sends to rank {(s + 1) % world} in a ring of {world}")
    if connections is not None and (s, d) not in connections:
        sends = sorted(b for a, b in connections if a == s)
        raise ValueError(f"{text!r}: rank {s} sends to rank{'s' if len(sends) != 1 else ''} "
                         f"{', '.join(map(str, sends)) or 'none'} in this collective")
    return FlowSelector(words[0], s, d)


def hop_roles(topo: Topology, tf_or_nodes) -> list[str]:
    """``"<role>-<role>"`` of every hop of a traced flow (or of a node sequence)."""
    nodes = tf_or_nodes if isinstance(tf_or_nodes, (list, tuple)) else \
        [tf_or_nodes.flow.src_host] + [h.next for h in tf_or_nodes.hops]
    roles = [topo.nodes[n].role.value for n in nodes]
    return [f"{a}-{b}" for a, b in zip(roles, roles[1:])]


def check_hop(topo: Topology, src_host: str, dst_host: str, hop: str) -> str | None:
    """Why a flow between these hosts cannot cross ``hop`` (from the shape of its shortest
    paths), or None if it can."""
    if hop == UNREPAIRED:
        return None
    ev = topo.evs(src_host, dst_host, limit=1)
    if not ev:
        return f"no path from {src_host} to {dst_host}"
    shape = hop_roles(topo, [src_host, *ev[0].switches, dst_host])
    if hop not in shape:
        return f"the flow {src_host} -> {dst_host} crosses no {hop} hop (its path: {' '.join(shape)})"
    return None


def unrepaired_links(topo: Topology, tf: TracedFlow, ecmp: dict) -> set[str]:
    """Links of every switch-to-switch hop of ``tf`` whose sending switch has a single
    shortest-path next hop to the flow's last switch (no local repair there)."""
    dst_switch = tf.hops[-1].node if tf.hops else None
    return {h.link for h in tf.hops
            if topo.nodes[h.node].role is not Role.HOST and topo.nodes[h.next].role is not Role.HOST
            and (h.node == dst_switch or len(ecmp.get(h.node, {}).get(dst_switch, ())) == 1)}


def crossed_at(topo: Topology, tf: TracedFlow, hop: str, ecmp: dict) -> str | None:
    """The link ``tf`` crosses at ``hop`` (first such hop), None if it crosses none.
    ``ecmp``: ``topo.ecmp_next_hops()`` (for ``unrepaired``)."""
    if hop == UNREPAIRED:
        unrepaired = unrepaired_links(topo, tf, ecmp)
        return next((h.link for h in tf.hops if h.link in unrepaired), None)
    return next((h.link for h, r in zip(tf.hops, hop_roles(topo, tf)) if r == hop), None)


def resolve(target: FlowTarget, traced: Iterable[TracedFlow], topo: Topology, *, seed: int,
            index: int) -> tuple[str, list[str]]:
    """(link, labels of the data flows crossing it at the hop) for ``target``, from traced
    flows (only delivered ones count). Raises TargetError if no link qualifies."""
    ecmp = topo.ecmp_next_hops()
    traced = [tf for tf in traced if tf.outcome == "delivered"]
    per_selector = []
    crossing: dict[str, set[str]] = {}
    for sel in target.crossed_by:
        links = set()
        for tf in traced:
            if sel.matches(tf) and (link := crossed_at(topo, tf, target.hop, ecmp)) is not None:
                links.add(link)
                crossing.setdefault(link, set()).add(tf.flow.label)
        per_selector.append(links)
    candidates = set.intersection(*per_selector) if per_selector else set()
    if target.repairable:
        named = set(target.transports)
        candidates -= {link for tf in traced if tf.flow.transport in named
                       for link in unrepaired_links(topo, tf, ecmp)}
    candidates = sorted(candidates)
    if not candidates:
        raise TargetError(f"no link is crossed at hop {target.hop} by "
                          + " and ".join(f"a {s} flow" for s in target.crossed_by)
                          + (" and at no unrepaired hop by any of their flows" if target.repairable else ""))
    link = candidates[0] if len(candidates) == 1 else random.Random(f"{seed}:target:{index}").choice(candidates)
    return link, sorted(crossing[link])


def trace_and_resolve(fabric, scenario, transport: str) -> tuple[tuple, list[TracedFlow], list[dict]]:
    """On a running, quiet ``fabric`` (agents not started): trace every flow of ``transport``
    (data and ack, every job) and the data flows of the transports that flow targets name (the
    first job's: selectors name its ranks), and resolve
    the targets of ``scenario.timeline``. Returns (the timeline with every ``link`` resolved,
    ``transport``'s traced flows, one record per resolved target: ``{"index", "action",
    "target", "link", "flows"}``). Raises TargetError, paths.TraceError."""
    from .jobs import build_all_jobs, build_jobs
    from .paths import Tracer, job_flows

    topo = scenario.topology
    named = {t for e in scenario.timeline if e.target for t in e.target.transports}
    both_ways = {t for e in scenario.timeline if e.target and e.target.repairable for t in e.target.transports}
    flows = []
    for t in sorted(named | {transport}):
        jobs = (build_all_jobs(scenario, t, run_id="paths", control_socket="-") if t == transport
                else build_jobs(scenario, t, run_id="paths", control_socket="-"))
        flows += [f for f in job_flows(jobs, topo, t) if t == transport or t in both_ways or f.kind == "data"]
    with Tracer(fabric) as tracer:
        traced = [tracer.trace(f) for f in flows]
    primary = [tf for tf in traced if tf.flow.job == scenario.workload.name]   # selectors name job 0's flows
    events, resolved = resolve_timeline(scenario.timeline, primary, topo, seed=scenario.seed)
    return events, [tf for tf in traced if tf.flow.transport == transport], resolved


def resolve_timeline(timeline, traced: list[TracedFlow], topo: Topology, *,
                     seed: int) -> tuple[tuple, list[dict]]:
    """(``timeline`` with every target's ``link`` resolved by :func:`resolve` on ``traced``,
    one record per resolved target). Equal targets resolve to the same link: the choice
    among candidates is seeded by the index of the first event with that target, so a
    ``link_up`` that repeats its ``link_down``'s target brings back the link that went down.
    Raises TargetError."""
    import dataclasses

    events, resolved = [], []
    first_index: dict[FlowTarget, int] = {}
    for i, e in enumerate(timeline):
        if e.target is not None:
            index = first_index.setdefault(e.target, i)
            link, labels = resolve(e.target, traced, topo, seed=seed, index=index)
            e = dataclasses.replace(e, link=link)
            resolved.append({"index": i, "action": e.action, "target": str(e.target), "link": link,
                             "flows": labels})
        events.append(e)
    return tuple(events), resolved
