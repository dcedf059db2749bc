"""Max-min fair rates on a run's traced paths: the ideal ring step a transport's paths allow.

``python -m testbed.tools.maxmin RUN_DIR [--transport rc] [--placements N --seed S]``

The model (the "max-min script" of docs/reproducing.md, "Why one RoCE QP gets a third here,
not half", made a tool):

* **Resources** are link *directions* (a link end sending to the other end), each with its
  link's configured rate (:attr:`testbed.model.topology.LinkParams.rate_bps`, from the topology
  file the manifest names, :func:`testbed.metrics.balance.load_run_topology`). Only data flows
  load them: ACKs are left out (a few bytes per data packet).
* **Flows**: one ring step of a collective is every connection (one job's ``src_rank ->
  dst_rank``) sending one chunk at once. A connection with several data flows (an MRC QP's EVs,
  an ``rc-xN`` connection's QPs) is split into *subflows*, one per traced data flow, each
  carrying an equal share of the chunk (1/k of it for k flows). Equal shares because that is
  what the senders do: MRC sprays a QP's packets over its EVs in turn and an ``rc-xN``
  connection stripes its data over its QPs evenly (the same assumption as
  :func:`testbed.metrics.balance.collisions`' load); a splittable flow (each connection routed
  as a multi-commodity flow) would be the optimum no sender here reaches. A subflow that
  finishes early hands its share of the links to the others (below), so an imbalance among a
  QP's EVs costs only what the links cannot absorb.
* **Rates**: max-min fair by progressive filling (water-filling): every unfrozen subflow's rate
  rises together until a link saturates; the subflows on it freeze; repeat.
* **Re-sharing**: when a subflow finishes, the rates of the rest are computed again
  (event-driven); the step ends when its last subflow does (a ring all-reduce step waits for
  its slowest connection). With equal-sized single-path flows that is exactly the most loaded
  link's ``load x chunk / rate`` (the first water level only rises as flows leave), so the
  single-path ring's ideal is ``1 / max_load`` of a link; with subflows of different sizes (MRC
  QPs with different EV counts) the re-sharing matters.

The ideal busbw is the chunk over the step time, in units of one host link's rate (``links``:
1/3 = a third of a link) and as a fraction of the NICs a connection sends over (``of NICs``:
mrc sprays over 4 NICs, rc uses one); set against ``summary.json``'s measured
``busbw_fraction_of_nics`` it says how close a transport came to what its paths allow.

``--placements N`` re-derives the placement statistics: N random placements of a single-path
ring (a random ring order over the run's hosts; each flow on one plane, a leaf-crossing flow
on a uniformly random one of the equal-cost switch paths,
:meth:`testbed.model.topology.Topology.switch_paths`, as ECMP hashing spreads flows), the same
max-min per placement, and the share of placements giving 1/2, 1/3, 1/4, ... of a link.

:func:`max_min_rates` and :func:`completion_times` are the model on a plain incidence matrix;
:func:`subflows` builds it from a transport's ``paths.json``; :func:`ideal_step` and
:func:`analyze_run` apply it; :func:`placements` is the Monte Carlo.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
from rich.console import Console

from testbed.report.layout import Grid
from testbed.rundir import names as rec
from testbed.rundir.damage import Damage, collecting
from testbed.rundir.read import load_manifest, read_json
from testbed.rundir.load import read_paths as load_paths

if TYPE_CHECKING:
    from testbed.model.topology import Topology

REL_TOL = 1e-9      # a remainder below this fraction of a flow's size is done (float rounding)
MAX_DENOMINATOR = 64
"""Fractions shown exactly when a value is within :data:`REL_TOL` of one with at most this
denominator (1/3 of a link, not 0.333)."""

Direction = tuple[str, str]
"""A link direction: ``(link name, node sending)``."""


# -- the model on an incidence matrix -----------------------------------------------------
def max_min_rates(incidence: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    ``incidence``: shape (links, flows), nonzero where the flow crosses the link;
    ``capacity``: shape (links,), each link's rate (any unit; >= 0). Returns shape (flows,),
    in ``capacity``'s unit. Every flow must cross at least one link (else ValueError: its rate
    would be unbounded; a negative capacity too); a link of capacity 0 freezes its flows at 0."""
    a = np.asarray(incidence, dtype=bool)
    cap = np.asarray(capacity, dtype=float)
    if a.ndim != 2 or cap.shape != (a.shape[0],):
        raise ValueError(f"incidence {a.shape} and capacity {cap.shape} do not match")
    if a.shape[1] and not a.any(axis=0).all():
        raise ValueError("a flow crosses no link")
    if (cap < 0).any():
        raise ValueError("a negative capacity")
    rate = np.zeros(a.shape[1])
    frozen = np.zeros(a.shape[1], dtype=bool)
    residual = cap.copy()
    while not frozen.all():
        n = a[:, ~frozen].sum(axis=1)
        used = n > 0
        level = np.full(len(cap), np.inf)
        level[used] = residual[used] / n[used]
        inc = float(level.min())
        rate[~frozen] += inc
        residual -= inc * n
        # the links at the lowest level saturate together (a tolerance, not ==, for rounding)
        sat = used & (level <= inc * (1 + REL_TOL) + 1e-300)
        residual[sat] = 0.0
        frozen |= a[sat].any(axis=0)
    return rate


def completion_times(incidence: np.ndarray, capacity: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """When each flow of one step finishes, all starting at 0, under max-min re-sharing.

    Shapes as :func:`max_min_rates`; ``sizes``: shape (flows,), in capacity-unit x time (a
    flow of size 1 on a link of capacity 1 alone takes 1). Rates are recomputed each time a
    flow finishes. Returns shape (flows,), in that time unit (0 for a flow of size 0, inf for
    one held at rate 0 by a link of capacity 0). Raises ValueError as :func:`max_min_rates`."""
    a = np.asarray(incidence, dtype=bool)
    size = np.asarray(sizes, dtype=float)
    if size.shape != (a.shape[1],) or (size < 0).any():
        raise ValueError(f"sizes {size.shape}: one non-negative size per flow ({a.shape[1]})")
    done = np.full(len(size), np.inf)
    remaining = size.copy()
    active = size > 0
    done[~active] = 0.0
    t = 0.0
    while active.any():
        idx = np.flatnonzero(active)
        r = max_min_rates(a[:, idx], capacity)
        moving = r > 0
        if not moving.any():
            break                       # what is left never finishes (done stays inf)
        dt = float((remaining[idx][moving] / r[moving]).min())
        t += dt
        left = remaining[idx] - r * dt
        finished = moving & (left <= REL_TOL * size[idx])
        remaining[idx] = np.where(finished, 0.0, left)
        done[idx[finished]] = t
        active[idx[finished]] = False
    return done


# -- a run's traced paths -----------------------------------------------------------------
@dataclass(frozen=True)
class Subflow:
    """One traced data flow as the model sees it: ``connection`` ``(job, src_rank, dst_rank)``,
    ``label`` (paths.json's), ``directions`` crossed in order (:data:`Direction`), ``share`` of
    its connection's chunk (1/k for k data flows), ``fabric``: the directions between two
    switches (every hop but a path's first and last: hosts only start and end paths)."""

    connection: tuple[str, int, int]
    label: str
    directions: tuple[Direction, ...]
    share: float

    @property
    def fabric(self) -> tuple[Direction, ...]:
        return self.directions[1:-1]


def read_paths(run_dir: Path, transport: str) -> list[dict]:
    """The ``flows`` of ``RUN_DIR/<transport>/paths.json``, each checked against
    :data:`testbed.rundir.schemas.PATH_FLOW`; a bad flow is a :func:`problem` and left out
    (raises MetricsError outside a :func:`collecting` block); [] if the file is missing.
    (:func:`testbed.rundir.load.load_transport` reads them too, with every sample of the run.)"""
    return load_paths(Path(run_dir) / transport / rec.PATHS)


def subflows(paths: Iterable[dict], topo: Topology | None = None) -> tuple[list[Subflow], list[str]]:
    """``(subflows, skipped)`` of a transport's traced flows (paths.json ``flows``): the
    delivered data flows, in file order, oriented by their ``hops`` (else walked from
    ``src_host`` over ``topo``); ``skipped``: why each other data flow was left out (not
    delivered, or no way to orient its links)."""
    flows, skipped = [], []
    for f in paths:
        if f.get("kind", "data") != "data":
            continue
        label = str(f.get("label", f"{f.get('src_rank')}->{f.get('dst_rank')}"))
        if f.get("outcome", "delivered") != "delivered":
            skipped.append(f"{label}: {f.get('outcome')} (its path is not known to its end)")
            continue
        dirs = _directions(f, topo)
        if dirs is None:
            skipped.append(f"{label}: no hops recorded and no topology to orient its links")
            continue
        flows.append((f, label, dirs))
    per_conn = Counter(_connection(f) for f, _, _ in flows)
    return [Subflow(_connection(f), label, dirs, 1.0 / per_conn[_connection(f)]) for f, label, dirs in flows], skipped


def _connection(flow: dict) -> tuple[str, int, int]:
    return str(flow.get("job", "job0")), int(flow["src_rank"]), int(flow["dst_rank"])


def _directions(flow: dict, topo: Topology | None) -> tuple[Direction, ...] | None:
    links = list(flow.get("links") or ())
    hops = flow.get("hops")
    if isinstance(hops, list) and len(hops) == len(links) and all(
            isinstance(h, list) and len(h) == 3 and h[1] == link for h, link in zip(hops, links)):
        return tuple((link, str(h[0])) for h, link in zip(hops, links))
    if topo is None or not isinstance(flow.get("src_host"), str):
        return None
    node, out = flow["src_host"], []
    for name in links:
        link = topo.link_by_name.get(name)
        if link is None or node not in (link.a.node, link.b.node):
            return None
        out.append((name, node))
        node = link.peer_of(node).node
    return tuple(out)


@dataclass(frozen=True)
class Step:
    """One step's ideal, per :func:`ideal_step`. ``step``: its time in chunk-times (a chunk at
    one unit rate takes 1); ``links``: busbw in unit rates (1/step); ``nics``: the slowest
    rank's NIC bandwidth in units, its host links that its subflows leave or reach it on (as
    :func:`testbed.metrics.nics.nic_bandwidth_bps` counts the planes a job uses); ``of_nics``:
    ``links / nics``; ``max_load``: the
    most connections' worth of data on one fabric direction (a connection counts 1/k per
    subflow, as summary.json's ``balance.collisions.max_load``; None without fabric hops);
    ``connections``, ``subflows``: counts; ``per_connection``: ``{(job, src, dst): finish}``."""

    step: float
    links: float
    nics: float
    of_nics: float
    max_load: float | None
    connections: int
    subflows: int
    per_connection: dict


def ideal_step(flows: Sequence[Subflow], rate_of: dict[Direction, float] | None = None, *,
               unit: float = 1.0, default_rate: float | None = None) -> Step:
    """The max-min ideal of one step of ``flows`` (each connection a chunk of 1, split over its
    subflows by their ``share``). ``rate_of``: each direction's rate (bits/s or any unit; a
    direction absent from it has ``default_rate``); ``unit``: the rate one link means (the host
    link's), so ``links`` reads in links. Raises ValueError without flows or for a direction
    without a rate."""
    if not flows:
        raise ValueError("no flows")
    rate_of = rate_of or {}
    index: dict[Direction, int] = {}
    for f in flows:
        for d in f.directions:
            index.setdefault(d, len(index))
    cap = np.empty(len(index))
    for d, i in index.items():
        r = rate_of.get(d, default_rate)
        if r is None:
            raise ValueError(f"no rate for link {d[0]} from {d[1]}")
        cap[i] = r / unit
    a = np.zeros((len(index), len(flows)), dtype=bool)
    for j, f in enumerate(flows):
        a[[index[d] for d in f.directions], j] = True
    done = completion_times(a, cap, np.array([f.share for f in flows]))
    finish: dict[tuple, float] = defaultdict(float)
    nic_links: dict[tuple, dict[str, float]] = defaultdict(dict)   # (job, rank) -> {host link: rate}
    load: dict[Direction, float] = defaultdict(float)
    for f, t in zip(flows, done):
        finish[f.connection] = max(finish[f.connection], float(t))
        job, src, dst = f.connection
        for rank, d in ((src, f.directions[0]), (dst, f.directions[-1])):
            nic_links[(job, rank)][d[0]] = cap[index[d]]
        for d in f.fabric:
            load[d] += f.share
    step = max(finish.values())
    nics = min(sum(links.values()) for links in nic_links.values())
    links = 1.0 / step if step > 0 else float("inf")
    return Step(step, links, float(nics), links / nics if nics > 0 else float("nan"),
                max(load.values()) if load else None, len(finish), len(flows), dict(finish))


def link_rates(topo: Topology) -> dict[Direction, float]:
    """Both directions of every link of ``topo`` with its configured rate, bits/s."""
    out = {}
    for link in topo.links:
        for end in (link.a, link.b):
            out[(link.name, end.node)] = float(link.params.rate_bps)
    return out


# -- a run ----------------------------------------------------------------------------------
def analyze_run(run_dir: Path, transports: Sequence[str] | None = None, *, topo: Topology | None = None) -> dict:
    """The ideal step of each transport of a run directory (default: every transport of its
    manifest with a ``paths.json``). Returns::

        {"run_dir", "topology" (name | None), "topology_problem" (why none | None),
         "unit_bps" (one link: the manifest's host_link_rate_bps, else the slowest first hop),
         "transports": [{"transport", "connections", "subflows", "skipped" [why],
                         "links", "nics", "of_nics", "max_load", "step", "summary_max_load",
                         "measured_links" (summary.json's busbw_fraction_of_nics x nic_bandwidth_bps,
                         in links), "of_ideal" (measured_links / links)}],
         "hosts": [hosts the traced data flows start at, in topology order], "problems": [damage read]}

    ``topo``: the topology (default: the file the manifest names, checked by its sha256;
    without it every link runs at ``unit_bps``). A transport without traced data flows is
    listed with ``"problem"`` instead of figures. Raises RunDirError if ``run_dir`` is no run
    directory."""
    run_dir = Path(run_dir)
    topo_problem = None
    if topo is None:
        topo, topo_problem = run_topology(run_dir)
    with collecting(Damage()) as damage:
        manifest = load_manifest(run_dir)
        summary = read_json(run_dir / rec.SUMMARY, {}) if (run_dir / rec.SUMMARY).exists() else {}
        names = list(transports or [t for t in manifest.get("transports", [])
                                    if (run_dir / t / rec.PATHS).exists()])
        read = {t: read_paths(run_dir, t) for t in names}
    rates = link_rates(topo) if topo is not None else {}
    unit = manifest.get("host_link_rate_bps")
    out, hosts = [], []
    for t in names:
        flows, skipped = subflows(read[t], topo)
        for f in read[t]:
            if f.get("kind", "data") == "data" and f.get("src_host") not in hosts:
                hosts.append(f.get("src_host"))
        row = {"transport": t, "skipped": skipped}
        if not flows:
            row["problem"] = f"no traced data flows in {t}/{rec.PATHS}"
            out.append(row)
            continue
        unit = unit or min(rates.get(f.directions[0], 0) for f in flows) or None
        if unit is None:
            raise ValueError(f"{run_dir}: no link rate (no host_link_rate_bps in the manifest, no topology)")
        s = ideal_step(flows, rates, unit=float(unit), default_rate=float(unit))
        meas = ((summary.get("transports") or {}).get(t) or {}) if isinstance(summary, dict) else {}
        coll = ((meas.get("balance") or {}).get("collisions") or {}) if isinstance(meas, dict) else {}
        frac, nic_bps = meas.get("busbw_fraction_of_nics"), meas.get("nic_bandwidth_bps")
        measured = frac * nic_bps / unit if all(isinstance(x, (int, float)) for x in (frac, nic_bps)) else None
        row.update(connections=s.connections, subflows=s.subflows, links=s.links, nics=s.nics,
                   of_nics=s.of_nics, max_load=s.max_load, step=s.step, summary_max_load=coll.get("max_load"),
                   measured_links=measured, of_ideal=measured / s.links if measured is not None else None)
        out.append(row)
    return {"run_dir": str(run_dir), "topology": topo.name if topo is not None else None,
            "topology_problem": topo_problem, "unit_bps": unit, "transports": out,
            "hosts": _in_order(topo, [h for h in hosts if isinstance(h, str)]), "problems": damage.lines()}


def run_topology(run_dir: Path) -> tuple[Topology | None, str | None]:
    """``(topology, None)`` of the file a run's manifest names, else ``(None, why)``
    (:func:`testbed.metrics.balance.load_run_topology`). Raises RunDirError if ``run_dir`` is no
    run directory."""
    from testbed.metrics.balance import load_run_topology
    with collecting(Damage()):      # analyze_run reports the manifest's damage
        manifest = load_manifest(Path(run_dir))
    return load_run_topology(Path(run_dir), manifest)


def _in_order(topo: Topology | None, hosts: list[str]) -> list[str]:
    # the topology's order, so that a seed draws the same placements whatever order the flows were traced in
    if topo is None:
        return sorted(hosts)
    rank = {h.name: i for i, h in enumerate(topo.hosts)}
    return sorted(hosts, key=lambda h: (rank.get(h, len(rank)), h))


# -- random placements ----------------------------------------------------------------------
def ring_paths(topo: Topology, order: Sequence[str], choose, plane: int = 0) -> list[tuple[Direction, ...]]:
    """The directions of each flow ``order[i] -> order[i+1]`` (and the last to the first) of a
    single-path ring on ``plane``: the source's NIC link, a switch path between the two NICs'
    switches picked by ``choose(n) -> index`` among the ``n`` equal-cost ones, the
    destination's NIC link. Raises KeyError for an unknown host, IndexError for a plane a host
    has no NIC on."""
    out = []
    for src, dst in zip(order, [*order[1:], order[0]]):
        s_nic, d_nic = _nic(topo, src, plane), _nic(topo, dst, plane)
        candidates = topo.switch_paths(s_nic.switch, d_nic.switch)
        switches, links = candidates[choose(len(candidates))] if candidates else ((s_nic.switch,), ())
        dirs = [(s_nic.link, src)] + [(link, sw) for link, sw in zip(links, switches)] + [(d_nic.link, d_nic.switch)]
        out.append(tuple(dirs))
    return out


def _nic(topo: Topology, host: str, plane: int):
    for nic in topo.nics[host]:
        if nic.plane == plane:
            return nic
    raise IndexError(f"{host} has no NIC on plane {plane}")


def placements(topo: Topology, hosts: Sequence[str], n: int, seed: int, *, plane: int = 0) -> np.ndarray:
    """The ideal single-path ring (busbw in host-link rates, :func:`ideal_step`'s ``links``) of
    ``n`` random placements: per placement a random order of ``hosts`` and a uniformly random
    equal-cost switch path per flow (:func:`ring_paths`), drawn from
    ``numpy.random.default_rng(seed)`` (the same seed gives the same array). Shape (n,).
    Raises ValueError for fewer than 2 hosts."""
    if len(hosts) < 2:
        raise ValueError("a ring needs 2 hosts or more")
    rng = np.random.default_rng(seed)
    rates = link_rates(topo)
    unit = min(rates[(_nic(topo, h, plane).link, h)] for h in hosts)
    out = np.empty(n)
    hosts = list(hosts)
    for i in range(n):
        order = [hosts[j] for j in rng.permutation(len(hosts))]
        paths = ring_paths(topo, order, lambda k: int(rng.integers(k)), plane)
        flows = [Subflow(("mc", r, (r + 1) % len(order)), "", p, 1.0) for r, p in enumerate(paths)]
        out[i] = ideal_step(flows, rates, unit=unit).links
    return out


def as_fraction(x: float | None) -> str:
    """``x`` as "1/3" when it is one (within :data:`REL_TOL`, denominator at most
    :data:`MAX_DENOMINATOR`), else to 3 significant digits; "-" for None."""
    if x is None or not np.isfinite(x):
        return "-"
    f = Fraction(x).limit_denominator(MAX_DENOMINATOR)
    if abs(float(f) - x) <= REL_TOL * max(abs(x), 1.0):
        return str(f)
    return f"{x:.3g}"


def distribution(values: np.ndarray) -> list[tuple[str, int, float]]:
    """``[(fraction, count, share)]`` of ``values`` grouped by :func:`as_fraction`, largest
    value first; share of ``len(values)``."""
    groups: dict[str, list[float]] = defaultdict(list)
    for v in values:
        groups[as_fraction(float(v))].append(float(v))
    rows = sorted(groups.items(), key=lambda kv: -kv[1][0])
    return [(k, len(v), len(v) / len(values)) for k, v in rows]


# -- the command ----------------------------------------------------------------------------
def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _compute(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """``{"run": analyze_run(...)}`` and/or ``{"placements": {...}}`` for the parsed ``args``."""
    topo = None
    if args.topology is not None:
        from testbed.model.kernel import QDISCS, KernelFeatures
        from testbed.spec import load_topology
        # the file is read for its graph and rates only: no kernel is asked what it supports
        topo = load_topology(args.topology, features=KernelFeatures(frozenset(QDISCS), True, True))
    out: dict = {}
    hosts = [h.name for h in topo.hosts] if topo is not None else []
    if args.run_dir is not None:
        if topo is None:
            topo = run_topology(args.run_dir)[0]
        out["run"] = analyze_run(args.run_dir, args.transport, topo=topo)
        hosts = out["run"]["hosts"] or hosts or ([h.name for h in topo.hosts] if topo is not None else [])
    if args.placements:
        if topo is None:
            parser.error("--placements needs the topology (the run's file is missing: pass --topology FILE)")
        values = placements(topo, hosts, args.placements, args.seed, plane=args.plane)
        out["placements"] = {"n": args.placements, "seed": args.seed, "plane": args.plane, "hosts": len(hosts),
                             "topology": topo.name, "median": as_fraction(float(np.median(values))),
                             "distribution": [{"links": k, "count": c, "share": s} for k, c, s in distribution(values)]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.tools.maxmin", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", type=Path, help="a run directory (manifest.json, <transport>/paths.json)")
    parser.add_argument("--transport", action="append", metavar="NAME",
                        help="a transport of the run (repeatable; default: every one with traced paths)")
    parser.add_argument("--placements", type=int, default=0, metavar="N",
                        help="also N random single-path placements over the run's hosts (Monte Carlo)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the placements (default 1)")
    parser.add_argument("--plane", type=int, default=0, help="the plane the placements' rings ride (default 0)")
    parser.add_argument("--topology", type=Path, metavar="FILE",
                        help="a topology file instead of the run's (without RUN_DIR: placements over all its hosts)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    if args.run_dir is None and args.topology is None:
        parser.error("give a RUN_DIR or --topology FILE")
    if args.placements < 0:
        parser.error("--placements must be >= 0")
    from testbed.model.errors import RecordsError
    from testbed.spec import SpecError
    try:
        out = _compute(parser, args)
    except (RecordsError, SpecError, ValueError, KeyError, IndexError, OSError) as exc:
        print(f"maxmin: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    console = Console(width=max(Console().width, 120))
    if "run" in out:
        run = out["run"]
        rows = []
        for r in run["transports"]:
            if "problem" in r:
                rows.append([r["transport"], r["problem"], *["-"] * 8])
                continue
            rows.append([r["transport"], f"{r['connections']} / {r['subflows']}", as_fraction(r["links"]),
                         as_fraction(r["nics"]), _pct(r["of_nics"]), as_fraction(r["max_load"]),
                         as_fraction(r["summary_max_load"]), _num(r["measured_links"]), _num(r["of_ideal"]),
                         str(len(r["skipped"]))])
        unit = f"{run['unit_bps'] / 1e6:g} Mbit/s" if run["unit_bps"] else "?"
        console.print(Grid(f"max-min ideal ring step: {run['run_dir']}",
                           ["transport", "conns / subflows", "ideal (links)", "NICs", "ideal of NICs",
                            "max load", "summary max load", "measured (links)", "measured / ideal", "skipped"],
                           rows, caption=f"one link = {unit}; topology {run['topology'] or 'none: ' + str(run['topology_problem'])}"))
        for line in run["problems"] + [f"{r['transport']}: {s}" for r in run["transports"] for s in r["skipped"][:5]]:
            console.print(f"note: {line}", markup=False, highlight=False)
    if "placements" in out:
        p = out["placements"]
        console.print(Grid(f"ideal single-path ring over {p['n']} random placements ({p['hosts']} hosts, plane "
                           f"{p['plane']} of {p['topology']}, seed {p['seed']})",
                           ["ideal (links)", "placements", "share"],
                           [[d["links"], str(d["count"]), _pct(d["share"])] for d in p["distribution"]],
                           caption=f"median {p['median']} of a link"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
