"""Load balance across the fabric: link utilisation per link direction, its spread,
and the fabric links where traced flows collide.

Everything needed is already in a run directory: the link counters (``links.jsonl``,
cumulative ``tx_bytes`` per link end: a :class:`~testbed.rundir.tables.LinkTable`), the
iteration events (the measured window), the traced paths (``paths.json``,
:mod:`testbed.fabric.paths`) and the topology the run used (link rates, node roles), which
:func:`load_run_topology` reads again from the file the manifest names, checked against the
manifest's ``topology_sha256``.

Terms:

* a *link direction* is one end of a link sending to the other end: end ``a`` of link
  ``e0_0-a0_0`` is the direction ``e0_0->a0_0``, and its bytes are that end's ``tx_bytes``;
* a *fabric* link has a switch at both ends, a *host* link a host at one end;
* utilisation = bytes sent by the link end in the window * 8 / (``rate_bps`` * window s),
  ``rate_bps`` the topology's configured rate (:attr:`testbed.model.topology.LinkParams.rate_bps`):
  a link a fault slowed or took down reads low, as it carried less;
* the spread is max / mean of every fabric direction's utilisation (idle directions count:
  a fabric that leaves half its links idle is unbalanced);
* a QP of a traced flow is its label without an MRC EV's ``" ev<k>"`` suffix
  (:class:`testbed.fabric.paths.Flow`): ``"mrc 3->4 ev1"`` is an EV of QP ``"mrc 3->4"``; ``"rc 3->4"``
  and each ``"rc-x8 3->4 qp<q>"`` are QPs of their own. Labels carry their job
  (``"job1: rc 3->4"``) in a run of several jobs, so flows of different jobs collide too. A fabric direction is *colliding* when data flows of two or more QPs
  cross it (EVs of one QP share a direction on purpose when its EVs repeat paths);
* the *load* of a direction is the number of full-rate connections it carries if every
  connection (a label without its ``" ev<k>"``/``" qp<q>"``: one job's ``src_rank -> dst_rank``)
  sends at one rate spread evenly over its data flows (an MRC QP's EVs, an RC connection's QPs): sum over the flows crossing of
  1 / (data flows of their connection). A load above 1 means that direction is
  *oversubscribed*: ECMP (or the choice of EVs) put more on it than it can carry.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from testbed.rundir.load import TransportRecords
from testbed.rundir.tables import LinkTable

if TYPE_CHECKING:
    from testbed.model.topology import Topology

BUSY_FRACTION = 0.9     # a direction above this utilisation is counted as busy
TOP_LINKS = 5           # busiest fabric directions listed by name
_EV_SUFFIX = re.compile(r" ev\d+$")
_FLOW_SUFFIX = re.compile(r" (?:ev|qp)\d+$")


@dataclass(frozen=True)
class Direction:
    """One direction of a link: ``end`` ("a" or "b") sends from ``src`` to ``dst`` at
    ``rate_bps`` (bits/s, configured); ``fabric``: both nodes are switches."""

    link: str
    end: str
    src: str
    dst: str
    fabric: bool
    rate_bps: float

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"


def directions(topo: Topology) -> dict[tuple[str, str], Direction]:
    """Both directions of every link of ``topo``, keyed ``(link, end)``, in topology order."""
    out = {}
    for link in topo.links:
        fabric = topo.nodes[link.a.node].role.is_switch and topo.nodes[link.b.node].role.is_switch
        for end, src, dst in (("a", link.a.node, link.b.node), ("b", link.b.node, link.a.node)):
            out[(link.name, end)] = Direction(link.name, end, src, dst, fabric, float(link.params.rate_bps))
    return out


def measured_window(events: list[dict], link_t: np.ndarray | None = None) -> tuple[float, float, str] | None:
    """``(start, end, source)``, wall-clock s, of the window utilisation is taken over:
    ``"measured_iterations"``: the first start to the last end of the non-warmup iterations
    (any rank; the gaps between iterations are inside); else ``"iterations"``: of every
    iteration; else ``"link_samples"``: the first to the last link-counter record
    (``link_t``). None if there is none of these or the span is empty."""
    its = [e for e in events if e.get("kind") == "iteration"]
    measured = [e for e in its if not e.get("warmup")]
    for source, group in (("measured_iterations", measured), ("iterations", its)):
        if group:
            lo, hi = min(float(e["t_start"]) for e in group), max(float(e["t_end"]) for e in group)
            return (lo, hi, source) if hi > lo else None
    if link_t is not None and len(link_t):
        lo, hi = float(np.min(link_t)), float(np.max(link_t))
        return (lo, hi, "link_samples") if hi > lo else None
    return None


def bytes_in_window(t: np.ndarray, counter: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    """``(bytes, covered_s)`` of a cumulative counter sampled at times ``t`` (sorted, s) over
    ``[lo, hi]``: the counter linearly interpolated at the window's edges, its positive steps
    summed (a reset counts nothing); ``covered_s``: the part of the window between the first
    and the last sample (0 if none)."""
    a, b = max(lo, float(t[0])) if len(t) else lo, min(hi, float(t[-1])) if len(t) else lo
    if b <= a:
        return 0.0, 0.0
    inside = (t > a) & (t < b)
    pts = np.concatenate([[a], t[inside], [b]])
    vals = np.interp(pts, t, counter)
    return float(np.clip(np.diff(vals), 0, None).sum()), b - a


def link_utilisation(links: LinkTable, dirs: dict[tuple[str, str], Direction],
                     window: tuple[float, float]) -> list[dict]:
    """One row per direction of ``dirs`` (in its order) over ``window`` (wall-clock s):
    ``{"link", "end", "direction" ("src->dst"), "fabric", "rate_bps", "tx_bytes",
    "covered_s", "utilisation"}``; utilisation = tx_bytes * 8 / (rate_bps * covered_s), a
    fraction (1.0 = line rate); ``tx_bytes``/``utilisation`` None for a direction without
    counters in the window. Counters of links not in ``dirs`` are ignored."""
    rows = []
    for key, d in dirs.items():
        col = links.ends.get(key)
        sent, covered = bytes_in_window(col["t"], col["tx_bytes"], *window) if col else (0.0, 0.0)
        ok = covered > 0 and d.rate_bps > 0
        rows.append({"link": d.link, "end": d.end, "direction": d.name, "fabric": d.fabric, "rate_bps": d.rate_bps,
                     "tx_bytes": sent if ok else None, "covered_s": covered,
                     "utilisation": sent * 8 / (d.rate_bps * covered) if ok else None})
    return rows


def spread(rows: list[dict], *, top: int = TOP_LINKS, busy: float = BUSY_FRACTION) -> dict | None:
    """Spread of the utilisation of ``rows`` (those with a value): ``{"directions", "missing"
    (rows without counters), "mean", "p50", "max", "max_over_mean" (None if mean is 0),
    "busy" (count above ``busy``), "busy_fraction", "busiest": the ``top`` by utilisation,
    [{"direction", "link", "end", "utilisation", "tx_bytes"}]}``; None without any value.
    Pass one link set: the fabric's rows or the host links' rows, not both."""
    have = [r for r in rows if r["utilisation"] is not None]
    if not have:
        return None
    u = np.array([r["utilisation"] for r in have], dtype=float)
    mean = float(u.mean())
    order = sorted(have, key=lambda r: (-r["utilisation"], r["link"], r["end"]))[:top]
    return {"directions": len(have), "missing": len(rows) - len(have), "mean": mean, "p50": float(np.median(u)),
            "max": float(u.max()), "max_over_mean": float(u.max()) / mean if mean > 0 else None,
            "busy": int((u > busy).sum()), "busy_fraction": busy,
            "busiest": [{k: r[k] for k in ("direction", "link", "end", "utilisation", "tx_bytes")} for r in order]}


# -- traced paths -------------------------------------------------------------------------
def qp_of(label: str) -> str:
    """The QP a traced flow belongs to: its label without an MRC EV's ``" ev<k>"`` suffix."""
    return _EV_SUFFIX.sub("", label)


def _hops(flow: dict, topo: Topology | None) -> list[tuple[str | None, str, str | None, bool]]:
    """``(src node, link, dst node, fabric)`` per link of a traced flow. Nodes from its
    ``hops`` when recorded, else walked from ``src_host`` over the topology, else None.
    Fabric from the nodes' roles when the topology knows them, else by position (hosts only
    start and end a path: every hop but the first and the one into ``dst_host`` is fabric)."""
    links = list(flow.get("links") or ())
    hops = flow.get("hops")
    if isinstance(hops, list) and len(hops) == len(links) and all(
            isinstance(h, list) and len(h) == 3 and all(isinstance(x, str) for x in h) for h in hops):
        nodes = [(h[0], h[2]) for h in hops]
    else:
        nodes = _walk(topo, flow.get("src_host"), links)
    out = []
    for i, (link, (src, dst)) in enumerate(zip(links, nodes)):
        if topo is not None and src in topo.nodes and dst in topo.nodes:
            fabric = topo.nodes[src].role.is_switch and topo.nodes[dst].role.is_switch
        else:
            last_into_host = i == len(links) - 1 and (dst is None or dst == flow.get("dst_host"))
            fabric = i > 0 and not last_into_host
        out.append((src, link, dst, fabric))
    return out


def _walk(topo: Topology | None, src_host, links: list[str]) -> list[tuple[str | None, str | None]]:
    node = src_host
    out: list[tuple[str | None, str | None]] = []
    for name in links:
        link = topo.link_by_name.get(name) if topo is not None and node is not None else None
        if link is None or node not in (link.a.node, link.b.node):
            node = None
            out.append((None, None))
            continue
        nxt = link.peer_of(node).node
        out.append((node, nxt))
        node = nxt
    return out


def collisions(paths: list[dict], topo: Topology | None = None, *, kinds: Iterable[str] = ("data",)) -> dict:
    """Fabric directions crossed by traced flows of ``kinds`` (default data; their ACKs are
    left out), from one transport's ``paths.json`` flows. Returns ``{"flows" (traced flows
    considered), "qps", "directions_used" (fabric directions crossed), "colliding" (count),
    "oversubscribed" (count of directions with load > 1), "max_load", "links": [{"link",
    "direction" ("src->dst", the link name when the nodes are unknown), "qps" (QPs crossing),
    "load", "flows": [labels]}]}``, ``links`` holding the colliding directions by load, then
    QPs, then name (see the module docstring for QP, colliding and load). ``max_load``: over
    every fabric direction used (1.0: no direction carries more than one connection's worth;
    None without fabric hops)."""
    kinds = set(kinds)
    flows = [f for f in paths if f.get("kind", "data") in kinds and isinstance(f.get("label"), str)]
    per_conn: dict[tuple, int] = defaultdict(int)
    for f in flows:
        per_conn[_connection(f)] += 1
    on: dict[tuple, dict] = {}
    for f in flows:
        share = 1.0 / per_conn[_connection(f)]
        for src, link, dst, fabric in _hops(f, topo):
            if fabric:
                d = on.setdefault((link, src, dst), {"labels": set(), "qps": set(), "load": 0.0})
                d["labels"].add(f["label"])
                d["qps"].add(qp_of(f["label"]))
                d["load"] += share
    rows = [{"link": link, "direction": f"{src}->{dst}" if src and dst else link, "qps": len(d["qps"]),
             "load": d["load"], "flows": sorted(d["labels"], key=_label_key)} for (link, src, dst), d in on.items()]
    colliding = sorted((r for r in rows if r["qps"] >= 2), key=lambda r: (-r["load"], -r["qps"], r["direction"]))
    return {"flows": len(flows), "qps": len({qp_of(f["label"]) for f in flows}), "directions_used": len(rows),
            "colliding": len(colliding), "oversubscribed": sum(r["load"] > 1 + 1e-9 for r in rows),
            "max_load": max((r["load"] for r in rows), default=None), "links": colliding}


def _connection(flow: dict) -> str:
    """The connection a data flow is part of: its label without an MRC EV's ``" ev<k>"`` or
    an RC QP's ``" qp<q>"`` (``"job1: rc-x8 3->4 qp2"`` -> ``"job1: rc-x8 3->4"``)."""
    return _FLOW_SUFFIX.sub("", flow["label"])


def _label_key(label: str) -> tuple:
    """Sort labels by their numbers ("rc 2->3" before "rc 10->11")."""
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", label))


def ev_coverage(paths: list[dict], jobs: list[dict] = ()) -> list[dict]:
    """Per MRC QP (data flows labelled ``... ev<k>``), how many distinct paths its EVs cover:
    ``[{"qp", "evs", "distinct_paths"}]`` by QP. Without traced paths, from the job specs'
    ``send_to[i].evs[].links`` of ``transport: mrc`` ranks (QP
    ``"mrc r->s"``). Empty for a transport without EVs."""
    by_qp: dict[str, list[tuple]] = defaultdict(list)
    for f in paths:
        label = f.get("label")
        if f.get("kind", "data") == "data" and isinstance(label, str) and _EV_SUFFIX.search(label):
            by_qp[qp_of(label)].append(tuple(f.get("links") or ()))
    if not paths:
        n, several = len(jobs), len({job["job"] for job in jobs}) > 1
        for job in jobs:
            if job.get("transport") != "mrc":
                continue
            # labelled as testbed.fabric.paths labels flows: the job's name in a run of several
            r, prefix = job["rank"], f"{job['job']}: " if several or job["job"] != "job0" else ""
            for peer in job.get("send_to") or ():
                qp = f"{prefix}mrc {r}->{peer.get('rank', (r + 1) % n)}"
                by_qp[qp] = [tuple(ev.get("links") or ()) for ev in peer.get("evs", [])]
    return [{"qp": qp, "evs": len(p), "distinct_paths": len(set(p))}
            for qp, p in sorted(by_qp.items(), key=lambda kv: _label_key(kv[0])) if p]


def _coverage_summary(rows: list[dict]) -> dict | None:
    if not rows:
        return None
    evs, distinct = [r["evs"] for r in rows], [r["distinct_paths"] for r in rows]
    return {"qps": len(rows), "evs_min": min(evs), "evs_max": max(evs), "distinct_paths_min": min(distinct),
            "distinct_paths_max": max(distinct), "distinct_paths_mean": float(np.mean(distinct)), "per_qp": rows}


# -- one transport ----------------------------------------------------------------------
def balance_summary(tr: TransportRecords, topo: Topology | None, t0_s: float, *, top: int = TOP_LINKS,
                    topology_problem: str | None = None) -> dict:
    """Load balance of one transport, JSON-ready::

        {"window_s": [start, end] (relative to t0_s) | None, "window_source": see measured_window,
         "fabric": spread of the fabric directions | None, "host": spread of the host-link
         directions | None, "collisions": collisions(...) (each colliding link with its
         "utilisation" when known), "ev_paths": {"qps", "evs_min", "evs_max",
         "distinct_paths_min", "distinct_paths_max", "distinct_paths_mean", "per_qp"} | None,
         "problems": [why a part is missing]}

    ``topo``: the run's topology (:func:`load_run_topology`); without it there is no
    utilisation (rates and roles unknown) and ``topology_problem`` says why."""
    problems = []
    win = measured_window(tr.events, tr.links.t)
    rows: list[dict] = []
    if topo is None:
        problems.append(f"no utilisation: {topology_problem or 'topology not available'}")
    elif win is None:
        problems.append("no utilisation: no iteration and no link counters")
    else:
        rows = link_utilisation(tr.links, directions(topo), win[:2])
        if all(r["utilisation"] is None for r in rows):
            problems.append("no utilisation: no link counters in the window")
    coll = collisions(tr.paths, topo)
    if not tr.paths:
        problems.append("no collisions: no traced paths (paths.json)")
    by_dir = {r["direction"]: r["utilisation"] for r in rows}
    for c in coll["links"]:
        c["utilisation"] = by_dir.get(c["direction"])
    return {"window_s": [win[0] - t0_s, win[1] - t0_s] if win else None, "window_source": win[2] if win else None,
            "fabric": spread([r for r in rows if r["fabric"]], top=top),
            "host": spread([r for r in rows if not r["fabric"]], top=top),
            "collisions": coll, "ev_paths": _coverage_summary(ev_coverage(tr.paths, tr.jobs)), "problems": problems}


def load_run_topology(run_dir: Path, manifest: dict) -> tuple[Topology | None, str | None]:
    """``(topology, None)`` of the file the manifest names (``scenario.topology.path``: as
    given, then relative to the run directory's parent's parent and to the repository),
    if its sha256 is the manifest's ``topology_sha256`` (when recorded); else ``(None, why)``.
    The kernel features are not checked again: the run built this topology."""
    from testbed.model.kernel import QDISCS, KernelFeatures
    from testbed.spec import SpecError, load_topology
    scen = manifest.get("scenario")
    rel = ((scen.get("topology") or {}).get("path") if isinstance(scen, dict) else None)
    if not isinstance(rel, str) or not rel:
        return None, "the manifest names no topology file"
    want = manifest.get("topology_sha256")
    repo = Path(__file__).resolve().parents[2]
    seen, changed = set(), False
    for base in (Path.cwd(), Path(run_dir).resolve().parent.parent, repo):
        path = (base / rel).resolve()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if isinstance(want, str) and want and hashlib.sha256(data).hexdigest() != want:
            changed = True
            continue
        try:
            return load_topology(path, features=KernelFeatures(frozenset(QDISCS), True, True)), None
        except (SpecError, OSError) as exc:
            return None, f"{path}: {exc}"
    return None, f"{rel}: {'changed since the run (sha256 differs)' if changed else 'not found'}"
