"""What a topology's nodes and links are called, for the loaders' "unknown name" problems.

An unknown host, switch or link names the close matches (:func:`difflib.get_close_matches`)
and then the valid names themselves when there are few (:data:`FEW`), else the naming rule of
the generator that made the topology (:func:`rules`, the rules of ``docs/topologies.md``), else
(an explicit topology) the first few names and how many there are.
"""

from __future__ import annotations

import difflib

from testbed.model.topology import Role, Topology
from testbed.model.units import show

#: At most this many valid names are listed whole.
FEW = 12
#: Close matches named at most.
CLOSE = 3


def _span(n: int) -> str:
    return "0" if n == 1 else f"0-{n - 1}"


def rules(topo: Topology, what: str) -> list[str]:
    """The naming rules of ``what`` (``host``, ``switch`` or ``link``) in a generated topology,
    with the ranges of this one's indices; [] for an explicit topology (its names are declared)."""
    p = topo.params
    if topo.kind == "fat-tree":
        k, half = p["k"], p["k"] // 2
        host = f"h<pod>_<edge>_<i> (pod {_span(k)}, edge {_span(half)}, i {_span(half)})"
        switches = [f"e<pod>_<i> (edge), a<pod>_<i> (aggregation): pod {_span(k)}, i {_span(half)}",
                    f"c<i>_<j> (core): i, j {_span(half)}"]
        links = ["h<pod>_<edge>_<i>-e<pod>_<edge>", "e<pod>_<i>-a<pod>_<j>", "a<pod>_<i>-c<i>_<j>"]
    elif topo.kind == "leaf-spine":
        planes, leaves, spines = p.get("planes", 1), p["leaves"], p["spines"]
        host = f"h<n> (n {_span(leaves * p['hosts_per_leaf'])})"
        switches = [f"l<plane>_<i> (leaf), s<plane>_<j> (spine): plane {_span(planes)}, i {_span(leaves)}, "
                    f"j {_span(spines)}"]
        links = [f"h<n>-l<plane>_<n // {p['hosts_per_leaf']}>", "l<plane>_<i>-s<plane>_<j>"]
    else:
        return []
    return {"host": [host], "switch": switches,
            "link": [f"{' or '.join(links)} (either end first)"]}[what]


def unknown(word: str, options: list[str], topo: Topology, what: str, *,
            close_from: dict[str, str] | None = None) -> str:
    """The tail of an "unknown ``what`` ``word``" problem: `` (did you mean 'x'?); hosts here are
    h<pod>_<edge>_<i> (pod 0-3, ...)`` or ``; the switches here: l0, s0``. ``close_from``: the
    spellings the close matches come from, each to the name it spells (a link's both orders);
    default ``options``."""
    pool = close_from if close_from is not None else {o: o for o in options}
    near = _close(word, list(pool)) if len(word) <= 64 and len(pool) <= 5000 else []
    near = list(dict.fromkeys(pool[n] for n in near))
    out = f" (did you mean {' or '.join(show(n) for n in near)}?)" if near else ""
    plural = f"{what}es" if what == "switch" else f"{what}s"
    if len(options) <= FEW:
        return f"{out}; the {plural} here: {', '.join(options) if options else 'none'}"
    found = rules(topo, what)
    if found:
        return f"{out}; {plural} here are {'; '.join(found)}"
    return f"{out}; {len(options)} {plural} here, e.g. {', '.join(options[:FEW])}"


def _close(word: str, pool: list[str]) -> list[str]:
    """The closest matches of ``word`` (:func:`difflib.get_close_matches`), at most :data:`CLOSE`
    and only those as close as the closest (``h0-l9``: ``h0-l0_0``, ``h0-l1_0``... alike)."""
    near = difflib.get_close_matches(word, pool, n=CLOSE)
    if not near:
        return []
    best = difflib.SequenceMatcher(None, word, near[0]).ratio()
    return [n for n in near if difflib.SequenceMatcher(None, word, n).ratio() >= best - 1e-9]


def role_links(topo: Topology) -> list[str]:
    """The ``<role>-<role>`` pairs this topology has links between (``random``'s and ``all``'s)."""
    roles = {tuple(sorted((topo.nodes[l.a.node].role.value, topo.nodes[l.b.node].role.value),
                          key=[r.value for r in Role].index)) for l in topo.links}
    return [f"{a}-{b}" for a, b in sorted(roles, key=lambda ab: [[r.value for r in Role].index(x) for x in ab])]


def plane_links(topo: Topology, plane: int) -> tuple[str, ...]:
    """The links of ``plane`` (sorted names): every link with a switch of that plane at an end,
    so its NICs' host links and its switch-to-switch links."""
    return tuple(sorted(l.name for l in topo.links
                        if any(topo.nodes[n].role.is_switch and (topo.nodes[n].plane or 0) == plane
                               for n in (l.a.node, l.b.node))))
