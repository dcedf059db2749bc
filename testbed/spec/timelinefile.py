"""A scenario's ``timeline``: events, triggers, link references (names, ``random`` selectors,
flow targets) and the warnings a suspicious timeline gets (see :mod:`testbed.spec`)."""

from __future__ import annotations

import random
import re

from yaml.nodes import MappingNode, Node, ScalarNode

from testbed.model import units

from testbed.model.kernel import KernelFeatures
from testbed.spec.selectors import HOPS, UNREPAIRED, FlowTarget, check_hop, parse_selector
from testbed.model.topology import Role, Topology
from testbed.model.units import show
from testbed.spec.yamlread import Problem, Reader, join
from testbed.spec.schema import FLOW_TARGET, SCENARIO
from testbed.spec.common import (ACTIONS, LINK_SET_ACTIONS, MAX_TIMELINE_EVENTS, MAX_FLAP_COUNT, MIN_FLAP_PERIOD_S,
                                 PLANE_ACTIONS, SWITCH_ACTIONS)
from testbed.spec.model import TimelineEvent, WorkloadSpec
from testbed.spec.names import plane_links, role_links, unknown

#: The name of a ``random`` draw (``link_down: random aggregation-core as flaky``): no ``-``, so it is
#: never a link's name.
DRAW_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


def _timeline(r: Reader, node: Node | None, topo: Topology | None, seed: int | None, timeout_s: float | None,
              workload: WorkloadSpec | None, feats: KernelFeatures) -> tuple[TimelineEvent, ...] | None:
    if node is None:
        return ()
    items = r.seq(node, "timeline")
    if items is None:
        return None
    if len(items) > MAX_TIMELINE_EVENTS:
        r.error(node, "timeline", f"{len(items)} events; at most {MAX_TIMELINE_EVENTS} are accepted")
        return None
    rng = random.Random(seed)
    names = _link_names(topo) if topo is not None else {}
    draws: dict[str, str] = {}   # a named random draw -> the link it drew (the items above)
    events = [_event(r, item, join("timeline", i), topo, rng, timeout_s, workload, feats, names, draws)
              for i, item in enumerate(items)]
    return tuple(events) if None not in events else None


def _link_names(topo: Topology) -> dict[str, str]:
    """Both spellings of every link name (``a-b`` and ``b-a``) -> the link's name."""
    names = {f"{l.b.node}-{l.a.node}": l.name for l in topo.links}
    names.update({l.name: l.name for l in topo.links})
    return names


def _event(r: Reader, node: Node, path: str, topo: Topology | None, rng: random.Random,
           timeout_s: float | None, workload: WorkloadSpec | None, feats: KernelFeatures,
           names: dict[str, str], draws: dict[str, str] | None = None) -> TimelineEvent | None:
    m = r.mapping(node, path, *SCENARIO["timeline[]"])
    if m is None:
        return None
    fields: dict = {}
    ok = _trigger(r, node, m, path, fields, timeout_s, workload)
    actions = [a for a in ACTIONS if a in m]
    if len(actions) != 1:
        r.error(node, path, f"needs exactly one action ({', '.join(ACTIONS)}), got "
                            f"{', '.join(actions) if actions else 'none'}")
        return None
    action = fields["action"] = actions[0]
    apath = join(path, action)
    if action in SWITCH_ACTIONS:
        switch = _switch_ref(r, m[action], apath, topo, fields, workload)
        return TimelineEvent(link=None, **fields) if ok and switch is not None else None
    if action in PLANE_ACTIONS:
        plane = _plane_ref(r, m[action], apath, topo, fields)
        return TimelineEvent(link=None, **fields) if ok and plane is not None else None
    if action in ("link_down", "link_up"):
        ref_node, ref_path = m[action], apath
    else:
        am = r.mapping(m[action], apath, *SCENARIO[f"timeline[].{action}"])
        if am is None or "link" not in am:
            return None
        ref_node, ref_path = am["link"], join(apath, "link")
        ok = _action_params(r, am, apath, action, fields) and ok
        if action == "loss" and not (feats.nftables or feats.netem):
            r.error(m[action], apath, feats.lacks("loss", "nftables (numgen) or sch_netem"))
            ok = False
    link = _link_ref(r, ref_node, ref_path, topo, rng, fields, workload, names,
                     link_set=action in LINK_SET_ACTIONS, draws=draws)
    if fields.get("links"):
        if "direction" in am:
            r.error(am["direction"], join(apath, "direction"), f"a one-way loss needs one link, not the link set "
                                                               f"{show(fields['selector'])}")
            return None
        return TimelineEvent(link=None, **fields) if ok else None
    if action == "loss" and "direction" in am and link is not None:
        ok = _direction(r, am["direction"], join(apath, "direction"), topo, link, fields) and ok
    return TimelineEvent(link=link or None, **fields) if ok and link is not None else None


def _direction(r: Reader, node: Node, path: str, topo: Topology | None, link: str, fields: dict) -> bool:
    """A one-way loss: ``both``, ``forward``/``reverse`` (a flow target's), or ``<from>-><to>``."""
    text = r.text(node, path)
    if text is None or topo is None:
        return False
    if text == "both":
        return True
    if text in ("forward", "reverse"):
        if "target" not in fields:
            r.error(node, path, f"{show(text)} needs a flow target (link: {{crossed_by: ...}}); give "
                                f"'<from>-><to>' for a named link")
            return False
        fields["direction"] = text
        return True
    ends = text.split("->")
    lk = topo.link_by_name.get(link) if link else None
    if len(ends) != 2:
        r.error(node, path, f"{show(text)} is not both, forward, reverse or '<from>-><to>'")
        return False
    if lk is not None and sorted(ends) != sorted((lk.a.node, lk.b.node)):
        r.error(node, path, f"{show(text)}: the ends of {link} are {lk.a.node} and {lk.b.node}")
        return False
    fields["direction"] = text
    return True


def _trigger(r: Reader, node: Node, m: dict[str, Node], path: str, fields: dict,
             timeout_s: float | None, workload: WorkloadSpec | None) -> bool:
    if ("at" in m) == ("at_iteration" in m):
        r.error(node, path, "needs exactly one trigger: 'at' or 'at_iteration'")
        return False
    if "after" in m and "at" in m:
        r.error(m["after"], join(path, "after"), "'after' goes with 'at_iteration', not 'at'")
        return False
    if "at" in m:
        fields["at_s"] = at_s = r.unit(m["at"], join(path, "at"), units.parse_duration)
        if at_s is not None and timeout_s is not None and at_s >= timeout_s:
            r.error(m["at"], join(path, "at"), f"{units.format_duration(at_s)} is not before the timeout "
                                               f"({units.format_duration(timeout_s)})")
            return False
        return at_s is not None
    fields["at_iteration"] = it = r.integer(m["at_iteration"], join(path, "at_iteration"), minimum=0)
    if it is not None and workload is not None and workload.is_command:
        if workload.steps is None or it >= workload.steps:
            r.error(m["at_iteration"], join(path, "at_iteration"),
                    "a command job counts iterations by its step reports: give workload.steps (the steps the "
                    "script reports with testbed_job.step())" if workload.steps is None else
                    f"step {it} never happens: the job reports {workload.steps} steps (0..{workload.steps - 1})")
            return False
    elif it is not None and workload is not None and it >= workload.measured_iterations:
        r.error(m["at_iteration"], join(path, "at_iteration"),
                f"iteration {it} never happens: the workload measures {workload.measured_iterations} "
                f"iterations (0..{workload.measured_iterations - 1})")
        return False
    if "after" in m:
        fields["after_s"] = r.unit(m["after"], join(path, "after"), units.parse_duration)
    return it is not None and fields.get("after_s", 0.0) is not None


def _action_params(r: Reader, am: dict[str, Node], path: str, action: str, fields: dict) -> bool:
    spec = {"period": ("period_s", units.parse_duration), "percent": ("loss_pct", units.parse_percent),
            "rate": ("rate_bps", units.parse_rate), "duration": ("duration_s", units.parse_duration)}
    ok = True
    for key, (field, parse) in spec.items():
        if key in am:
            fields[field] = value = r.unit(am[key], join(path, key), parse)
            if value == 0:
                r.error(am[key], join(path, key), "must be > 0")
            ok = ok and bool(value)
    if "count" in am:
        fields["count"] = r.integer(am["count"], join(path, "count"), minimum=1, maximum=MAX_FLAP_COUNT)
        ok = ok and fields["count"] is not None
    if fields.get("period_s") and fields["period_s"] < MIN_FLAP_PERIOD_S:
        r.error(am["period"], join(path, "period"), f"{units.format_duration(fields['period_s'])} is shorter "
                                                    f"than the shortest flap period "
                                                    f"({units.format_duration(MIN_FLAP_PERIOD_S)})")
        ok = False
    return ok


def _target_field(r: Reader, node: Node, path: str, topo: Topology | None, fields: dict,
                  workload: WorkloadSpec | None, switch: bool = False) -> str | None:
    """A flow target mapping into ``fields["target"]``: "" (resolved on the fabric), None on error."""
    target = _flow_target(r, node, path, topo, workload, switch=switch)
    if target is None:
        return None
    fields["target"] = target
    return ""


def _link_ref(r: Reader, node: Node, path: str, topo: Topology | None, rng: random.Random,
              fields: dict, workload: WorkloadSpec | None = None, names: dict[str, str] | None = None,
              link_set: bool = False, draws: dict[str, str] | None = None) -> str | None:
    """A link name, a ``random <role>-<role>`` selector (``... as <name>`` names the draw in
    ``draws``), the name of an earlier draw, or a flow target mapping
    (:mod:`testbed.faults.targets`: sets ``fields["target"]`` and returns "" for "resolved later").
    With ``link_set`` also ``all`` or ``all <role>-<role>``: sets ``fields["links"]`` (sorted
    names) and ``fields["selector"]``, and returns ""."""
    if isinstance(node, MappingNode):
        return _target_field(r, node, path, topo, fields, workload)
    ref = r.text(node, path)
    if ref is None or topo is None:
        return None
    words = ref.split()
    if words and words[0] == "all":
        if not link_set:
            r.error(node, path, f"{show(ref)}: a link set is for {', '.join(LINK_SET_ACTIONS)}; give one link")
            return None
        links = _role_links(r, node, path, topo, ref, words) if len(words) > 1 else list(topo.links)
        if not links:
            return None
        fields["selector"], fields["links"] = ref, tuple(sorted(l.name for l in links))
        return ""
    if words and words[0] == "random":
        fields["selector"] = ref
        draw_as = None
        if len(words) > 2:
            if len(words) != 4 or words[2] != "as":
                r.error(node, path, f"selector {show(ref)} is not 'random <role>-<role>' or "
                                    f"'random <role>-<role> as <name>'")
                return None
            draw_as = _draw_name(r, node, path, topo, words[3], draws)
            if draw_as is None:
                return None
        candidates = _role_links(r, node, path, topo, ref, words[:2])
        link = rng.choice(candidates).name if candidates else None
        if draw_as is not None and link is not None and draws is not None:
            draws[draw_as] = link
        return link
    if draws and ref in draws:
        fields["selector"] = ref
        return draws[ref]
    names = names if names is not None else _link_names(topo)
    if ref not in names:
        canonical = [l.name for l in topo.links]
        named = (f"; the random draws named above: {', '.join(draws)}" if draws else
                 "; a random draw is named with 'random <role>-<role> as <name>'" if DRAW_NAME_RE.fullmatch(ref)
                 else "")
        r.error(node, path, f"unknown link {show(ref)} in topology {show(topo.name)}"
                            f"{unknown(ref, canonical, topo, 'link', close_from=names)}{named}")
        return None
    return names[ref]


def _draw_name(r: Reader, node: Node, path: str, topo: Topology, name: str,
               draws: dict[str, str] | None) -> str | None:
    """The ``<name>`` of ``random <role>-<role> as <name>`` if it can name a draw, else None (a problem)."""
    if not DRAW_NAME_RE.fullmatch(name) or name in ("all", "random"):
        r.error(node, path, f"{show(name)} cannot name a draw: 1-32 letters, digits and '_', starting with a "
                            f"letter or '_', not 'all' or 'random'")
        return None
    if draws is not None and name in draws:
        r.error(node, path, f"{show(name)} already names an earlier draw ({draws[name]}): give each draw its "
                            f"own name")
        return None
    if name in topo.nodes:
        r.error(node, path, f"{show(name)} is a node of topology {show(topo.name)}: name the draw otherwise")
        return None
    return name


def _plane_ref(r: Reader, node: Node, path: str, topo: Topology | None, fields: dict) -> int | None:
    """A plane number (sets ``fields["selector"]`` to ``plane <N>`` and ``fields["links"]`` to
    its links: :func:`testbed.spec.names.plane_links`); None after a problem."""
    value = r.value(node)
    if isinstance(value, str) and (spelt := re.fullmatch(r"plane\s*(\d+)", value.strip())):
        r.error(node, path, f"expected the plane's number ({path.rsplit('.', 1)[-1]}: {spelt[1]}), got {show(value)}")
        return None
    plane = r.integer(node, path, minimum=0)
    if plane is None or topo is None:
        return None
    planes = topo.planes
    if plane not in planes:
        valid = (f"{planes[0]}-{planes[-1]}" if planes == list(range(planes[0], planes[-1] + 1)) and len(planes) > 1
                 else ", ".join(map(str, planes)))
        r.error(node, path, f"topology {show(topo.name)} has no plane {plane} "
                            f"({'its planes' if len(planes) > 1 else 'its one plane'}: {valid})")
        return None
    fields["selector"], fields["links"] = f"plane {plane}", plane_links(topo, plane)
    return plane


def _role_links(r: Reader, node: Node, path: str, topo: Topology, ref: str, words: list[str]) -> list:
    """The links of ``<word> <role>-<role>`` (either order of the roles); [] after an error."""
    roles = words[1].split("-") if len(words) == 2 else []
    valid = [role.value for role in Role]
    if len(roles) != 2 or not set(roles) <= set(valid):
        r.error(node, path, f"selector {show(ref)} is not '{words[0]} <role>-<role>' (roles: {', '.join(valid)})")
        return []
    links = [l for l in topo.links if sorted(roles) == sorted(
        (topo.nodes[l.a.node].role.value, topo.nodes[l.b.node].role.value))]
    if not links:
        r.error(node, path, f"no {words[1]} link in topology {show(topo.name)} "
                            f"(its links: {', '.join(role_links(topo))})")
    return links


def _switch_ref(r: Reader, node: Node, path: str, topo: Topology | None, fields: dict,
                workload: WorkloadSpec | None) -> str | None:
    """A switch name (sets ``fields["switch"]`` and ``fields["links"]``: all its links), or a flow
    target mapping (sets ``fields["target"]``: the switch the flows enter at the hop, resolved on
    the fabric by :func:`testbed.faults.targets.resolve_switch`; returns "")."""
    if isinstance(node, MappingNode):
        return _target_field(r, node, path, topo, fields, workload, switch=True)
    name = r.text(node, path)
    if name is None or topo is None:
        return None
    if name not in topo.nodes:
        switches = [n.name for n in topo.switches]
        plane = re.fullmatch(r"plane\s*(\d+)", name.strip())
        action = path.rsplit(".", 1)[-1]   # switch_down or switch_up
        hint = (f"; a whole plane is '{action.replace('switch', 'plane')}: {plane[1]}'" if plane else
                f"; {show(name)} is a link: '{action.replace('switch', 'link')}: {name}'"
                if name in topo.link_by_name else "")
        r.error(node, path, f"unknown switch {show(name)} in topology {show(topo.name)}"
                            f"{unknown(name, switches, topo, 'switch')}{hint}")
        return None
    if not topo.nodes[name].role.is_switch:
        r.error(node, path, f"{show(name)} is a host, not a switch (a host's link: link_down)")
        return None
    fields["switch"] = name
    fields["links"] = tuple(sorted(l.name for l in topo.links_of[name]))
    return name


def _flow_target(r: Reader, node: Node, path: str, topo: Topology | None,
                 workload: WorkloadSpec | None, switch: bool = False) -> FlowTarget | None:
    """A flow target; ``switch``: of a switch action (the hop must enter a switch, no ``repairable``)."""
    m = r.mapping(node, path, *SCENARIO[FLOW_TARGET])
    if m is None or "crossed_by" not in m or topo is None or workload is None:
        return None
    hop = r.text(m["hop"], join(path, "hop")) if "hop" in m else UNREPAIRED
    if hop is not None and hop not in HOPS:
        r.error(m["hop"], join(path, "hop"), f"unknown hop {show(hop)} (one of: {', '.join(HOPS)})")
        return None
    if switch and hop is not None and hop.endswith("-host"):
        r.error(m["hop"], join(path, "hop"), f"hop {hop} enters a host: a switch is the node the flows "
                                             f"enter at the hop")
        return None
    if switch and "repairable" in m:
        r.error(m["repairable"], join(path, "repairable"), "repairable is for a link, not a switch")
        return None
    cb = m["crossed_by"]
    items = r.seq(cb, join(path, "crossed_by")) if not isinstance(cb, ScalarNode) else [cb]
    if not items or hop is None:
        if items == []:
            r.error(cb, join(path, "crossed_by"), "needs at least one flow selector")
        return None
    hosts = list(workload.hosts)
    selectors = []
    for i, item in enumerate(items):
        where = join(path, "crossed_by") if isinstance(cb, ScalarNode) else join(join(path, "crossed_by"), i)
        text = r.text(item, where)
        if text is None:
            return None
        try:
            sel = parse_selector(text, len(hosts), set(workload.connections))
        except ValueError as exc:
            r.error(item, where, str(exc))
            return None
        if sel.src_rank is not None:
            why = check_hop(topo, hosts[sel.src_rank], hosts[sel.dst_rank], hop)
            if why:
                r.error(item, where, why)
                return None
        selectors.append(sel)
    repairable = r.boolean(m["repairable"], join(path, "repairable")) if "repairable" in m else False
    if repairable is None:
        return None
    return FlowTarget(tuple(selectors), hop, repairable)



def timeline_warnings(r: Reader, timeline: tuple[TimelineEvent, ...], timeout_s: float) -> tuple[Problem, ...]:
    """Suspicious timelines: two faults on one link at once (a switch's faults count on each of
    its links), a ``link_up`` (``switch_up``) with no ``link_down`` (``switch_down``) of that link
    (switch) before it, a fault lasting past the timeout.

    ``at`` times and ``at_iteration`` + ``after`` times are not comparable: a pair of one
    of each is never called suspicious; overlaps are checked within ``at`` events and
    within one iteration. Flow targets (resolved on the fabric) are skipped.
    Cost: O(n^2) in events, n <= MAX_TIMELINE_EVENTS.
    """
    out: list[Problem] = []
    spans = []  # (index, base, links, start, end)
    for i, e in enumerate(timeline):
        subject = _subject(e)
        if subject is None or e.action.startswith("ev_"):   # controller actions are not link faults
            continue
        base, start = _when(e)
        if e.action in _DOWN_OF:
            downs = [_when(d) for d in timeline if d.action == _DOWN_OF[e.action] and _subject(d) == subject
                     or e.action == "link_up" and d.action in _DOWN_OF.values() and d.links and e.link in d.links]
            if all(b[0] == base[0] and (b, t) > (base, start) for b, t in downs):
                out.append(_warning(r, i, f"{e.action} {subject} with no {_DOWN_OF[e.action]} of that "
                                          f"{e.action.split('_')[0]} before it{_redraw_fix(e, timeline)}"))
            continue
        end = _fault_end(e, start, base, timeline)
        links = _links(e)
        for j, other_base, o_links, o_start, o_end in spans:
            shared = sorted(links & o_links)
            if shared and other_base == base and None not in (end, o_end) and start < o_end and o_start < end:
                where = "the same link" if len(links) == len(o_links) == 1 else f"link {shared[0]}"
                out.append(_warning(r, i, f"{e.action} on {subject} overlaps timeline[{j}] "
                                          f"({timeline[j].action} on {where})"))
        if base == ("at",) and end is not None and end != float("inf") and end > timeout_s:
            out.append(_warning(r, i, f"{e.action} on {subject} lasts until {units.format_duration(end)}, "
                                      f"past the timeout ({units.format_duration(timeout_s)})"))
        spans.append((i, base, links, start, end))
    return tuple(out)


#: The action that ends each restoring action's fault.
_DOWN_OF = {"link_up": "link_down", "switch_up": "switch_down", "plane_up": "plane_down"}


def _redraw_fix(e: TimelineEvent, timeline: tuple[TimelineEvent, ...]) -> str:
    """The fix when a restoring action's link was drawn by ``random``: each ``random`` draws
    anew, so name the earlier draw and restore that name ("" for any other link)."""
    if not (e.selector or "").startswith("random "):
        return ""
    down = next((d.selector for d in timeline if d.action == _DOWN_OF[e.action]
                 and (d.selector or "").startswith("random ") and len(d.selector.split()) == 2), e.selector)
    return (f" ({show(e.selector)} drew another link; each 'random' draws anew: name the first draw, "
            f"'{_DOWN_OF[e.action]}: {down} as <name>', and give '{e.action}: <name>')")


def _subject(e: TimelineEvent) -> str | None:
    """The link or switch an event acts on (None: a flow target, resolved on the fabric)."""
    return e.switch if e.action in SWITCH_ACTIONS else e.link or e.selector


def _links(e: TimelineEvent) -> set[str]:
    return set(e.links) if e.action in SWITCH_ACTIONS or e.links else {e.link}


def _when(e: TimelineEvent) -> tuple[tuple, float]:
    """(time base, start in seconds within it) of an event: ``("at",)`` or ``("iteration", n)``."""
    if e.at_s is not None:
        return ("at",), e.at_s
    return ("iteration", e.at_iteration), e.after_s


def _fault_end(e: TimelineEvent, start: float, base: tuple, timeline: tuple[TimelineEvent, ...]) -> float | None:
    """When a fault ends: a flap after its cycles, a link_down (switch_down) at the next link_up
    (switch_up) of the link (switch) in the same time base (None, unknown, if the only one is in
    another), other faults after their duration; inf if never."""
    if e.action == "flap":
        return start + (e.count or 0) * (e.period_s or 0.0)
    if e.action in _DOWN_OF.values():
        up = next(u for u, d in _DOWN_OF.items() if d == e.action)
        ups = [_when(u) for u in timeline if u.action == up and _subject(u) == _subject(e)]
        same = [t for b, t in ups if b == base and t >= start]
        if same:
            return min(same)
        return None if any(b[0] != base[0] for b, _ in ups) else float("inf")
    return start + e.duration_s if e.duration_s else float("inf")


def _warning(r: Reader, i: int, message: str) -> Problem:
    path = join("timeline", i)
    return Problem(r.file, r.line_for(path), path, f"warning: {message}")


