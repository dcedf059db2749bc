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

``switch_down`` / ``switch_up`` take the same mapping for a switch: the node the selected flows
*enter* at the hop (the receiving end of the hop's link; a hop into a host is refused), e.g.
``switch_down: {crossed_by: [mrc, rc, tcp], hop: core-aggregation}``: an aggregation switch
that an mrc, an rc and a tcp flow each enter from a core (not necessarily over one link).

The runner resolves a target when the fabric is up and before the agents start: it traces
the ring flows of the named transports (:mod:`testbed.fabric.paths`; their 5-tuples come from the
job specs, so they are the same on every transport's fabric), keeps the links crossed at
the hop, and picks one (sorted; several candidates: a choice seeded by the scenario seed
and the index of the first event with an equal target, so that a ``link_up`` given the
same target as its ``link_down`` brings back the link that went down). The resolved link
and the flows crossing it are journaled.
"""

from __future__ import annotations

import random
from typing import Iterable

from testbed.fabric.paths import TracedFlow
from testbed.model.topology import Role, Topology
from testbed.spec.common import SWITCH_ACTIONS
from testbed.spec.selectors import UNREPAIRED, FlowTarget, TargetError, hop_roles


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


def entered_at(topo: Topology, tf: TracedFlow, hop: str, ecmp: dict) -> str | None:
    """The node ``tf`` enters at ``hop``: the receiving end of :func:`crossed_at`'s link."""
    link = crossed_at(topo, tf, hop, ecmp)
    return next((h.next for h in tf.hops if h.link == link), None) if link is not None else None


def resolve(target: FlowTarget, traced: Iterable[TracedFlow], topo: Topology, *, seed: int,
            index: int) -> tuple[str, list[str]]:
    """(link, labels of the data flows crossing it at the hop) for ``target``, from traced
    flows (only delivered ones count). Raises TargetError if no link qualifies."""
    return _resolve(target, traced, topo, seed=seed, index=index, at=crossed_at, what="link is crossed")


def resolve_switch(target: FlowTarget, traced: Iterable[TracedFlow], topo: Topology, *, seed: int,
                   index: int) -> tuple[str, list[str]]:
    """(switch, labels of the data flows entering it at the hop) for a switch action's ``target``:
    a switch that a data flow of each selector enters at ``target.hop`` (:func:`entered_at`), chosen
    as :func:`resolve` chooses a link. Raises TargetError if no switch qualifies."""
    return _resolve(target, traced, topo, seed=seed, index=index, at=entered_at, what="switch is entered")


def _resolve(target: FlowTarget, traced: Iterable[TracedFlow], topo: Topology, *, seed: int, index: int,
             at, what: str) -> tuple[str, list[str]]:
    ecmp = topo.ecmp_next_hops()
    traced = [tf for tf in traced if tf.outcome == "delivered"]
    per_selector = []
    crossing: dict[str, set[str]] = {}
    for sel in target.crossed_by:
        found = set()
        for tf in traced:
            if sel.matches(tf) and (key := at(topo, tf, target.hop, ecmp)) is not None:
                found.add(key)
                crossing.setdefault(key, set()).add(tf.flow.label)
        per_selector.append(found)
    candidates = set.intersection(*per_selector) if per_selector else set()
    if target.repairable:
        named = set(target.transports)
        candidates -= {link for tf in traced if tf.flow.transport in named
                       for link in unrepaired_links(topo, tf, ecmp)}
    candidates = sorted(candidates)
    if not candidates:
        raise TargetError(f"no {what} at hop {target.hop} by "
                          + " and ".join(f"a {s} flow" for s in target.crossed_by)
                          + (" and at no unrepaired hop by any of their flows" if target.repairable else ""))
    pick = candidates[0] if len(candidates) == 1 else random.Random(f"{seed}:target:{index}").choice(candidates)
    return pick, sorted(crossing[pick])


def trace_and_resolve(fabric, scenario, transport: str) -> tuple[tuple, list[TracedFlow], list[dict]]:
    """On a running, quiet ``fabric`` (agents not started): trace every flow of ``transport``
    (data and ack, every job) and the data flows of the transports that flow targets name (the
    first job's: selectors name its ranks), and resolve
    the targets of ``scenario.timeline``. Returns (the timeline with every ``link`` resolved,
    ``transport``'s traced flows, one record per resolved target: ``{"index", "action",
    "target", "link", "flows"}``). Raises TargetError, paths.TraceError."""
    from testbed.spec.jobs import build_all_jobs, build_jobs
    from testbed.fabric.paths import Tracer, job_flows

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
    A switch action's target sets ``switch`` and ``links`` (:func:`resolve_switch`; record:
    ``"switch"`` and ``"links"`` instead of ``"link"``). Raises TargetError."""
    import dataclasses

    events, resolved = [], []
    first_index: dict[FlowTarget, int] = {}
    for i, e in enumerate(timeline):
        if e.target is not None and e.action in SWITCH_ACTIONS:
            index = first_index.setdefault(e.target, i)
            switch, labels = resolve_switch(e.target, traced, topo, seed=seed, index=index)
            e = dataclasses.replace(e, switch=switch, links=tuple(sorted(l.name for l in topo.links_of[switch])))
            resolved.append({"index": i, "action": e.action, "target": str(e.target), "switch": switch,
                             "links": list(e.links), "flows": labels})
        elif e.target is not None:
            index = first_index.setdefault(e.target, i)
            link, labels = resolve(e.target, traced, topo, seed=seed, index=index)
            e = dataclasses.replace(e, link=link, direction=_way(e, link, labels, traced))
            resolved.append({"index": i, "action": e.action, "target": str(e.target), "link": link,
                             "flows": labels, **({"direction": e.direction} if e.direction else {})})
        events.append(e)
    return tuple(events), resolved


def _way(e, link: str, labels: list[str], traced: list[TracedFlow]) -> str | None:
    """``"<from>-><to>"`` for a ``forward``/``reverse`` loss on ``link``: the way the first
    crossing data flow (by label) goes over it, or the opposite; the event's own otherwise."""
    if e.direction not in ("forward", "reverse"):
        return e.direction
    hop = next(h for tf in traced if tf.flow.label == labels[0] for h in tf.hops if h.link == link)
    a, b = (hop.node, hop.next) if e.direction == "forward" else (hop.next, hop.node)
    return f"{a}->{b}"
