"""Scenario files -> :class:`testbed.spec.model.Scenario` (see :mod:`testbed.spec`)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from yaml.nodes import Node, ScalarNode

from testbed.model import units
from agents.protocol import TRANSPORTS

from testbed.model.kernel import KernelFeatures
from testbed.model.topology import Topology
from testbed.model.units import show
from testbed.spec.yamlread import Problem, Reader, SpecError, join, line_of
from testbed.spec.common import (COLLECTIVE_REQUIRED, COMMAND_ONLY, JOB_BACKENDS, COLLECTIVES, JOB_NAME_RE, ORDERS, EV_PATHS, parse_transport, transport_variant, SCENARIO_KEYS,
                                 _WORKLOAD_REQUIRED, SCENARIO_NAME_RE, ELEMENT_BYTES, MAX_WORKLOAD_BYTES,
                                 MAX_ITERATIONS, MAX_EVS, MAX_REFERRED_PROBLEMS, _sorted, _not_a_mapping,
                                 _explain_missing, CONTROLLER_POLICIES, EV_ACTIONS)
from testbed.spec.model import Scenario, WorkloadSpec
from testbed.spec.overrides import with_overrides
from testbed.spec.schema import SCENARIO, SCENARIO_DEFAULTS, TIMEOUT_BASE_S, TIMEOUT_MARGIN
from testbed.spec.timelinefile import _timeline, timeline_warnings
from testbed.spec.names import unknown
from testbed.spec.topofile import load_topology


def load_scenario(path: str | os.PathLike, *, features: KernelFeatures,
                  seed: int | None = None, overrides=(), check_sweep: bool = True) -> Scenario:
    """Load and validate a scenario file and the topology it names; ``seed`` replaces the
    file's (a trial of ``trials: N``: seeded choices such as ``random`` links follow it);
    ``overrides`` (:mod:`testbed.spec.overrides`: a sweep point, ``--set``) replace values
    before validation; the ``sweep:`` block is checked unless ``check_sweep`` is false.

    Raises SpecError listing every problem of both files.
    """
    reader = Reader(str(path))
    root = reader.compose(Path(path))
    if root is not None:   # sweep: and --set, checked and applied on the node tree
        root = with_overrides(reader, root, overrides, check=check_sweep,
                              load=lambda r, node: _scenario(r, node, Path(path), features, seed))
    scenario = _scenario(reader, root, Path(path), features, seed) if root else None
    if reader.problems or scenario is None:
        raise SpecError(_sorted(reader))
    return scenario


MAX_AGENT_PROCESSES = 256
COMMAND_TIMEOUT_S = 600.0
"""A command job's timeout when the scenario gives none, s: the testbed cannot know how long a
user's script runs."""
PER_HOST = "per-host"
"""``agent_processes: per-host``: one process per agent, in its host's namespace."""


def _find_topology(ref: str, scenario_path: Path) -> Path | None:
    if not ref or "\0" in ref:
        return None
    candidates = [Path(ref)] if Path(ref).is_absolute() else [scenario_path.parent / ref, Path(ref)]
    for c in candidates:
        try:
            if c.exists():
                return c
        except (OSError, ValueError):
            continue
    return None


def _scenario(r: Reader, root: Node, path: Path, feats: KernelFeatures,
              seed_override: int | None = None) -> Scenario | None:
    if _not_a_mapping(r, root, "a scenario"):
        return None
    m = r.mapping(root, "", *SCENARIO[""])
    if m is None:
        return None
    found = [k for k in SCENARIO_KEYS if k in m]
    _explain_missing(r, f"read as a scenario because it has a top-level {', '.join(found)} key")
    name = _scenario_name(r, m.get("name"), path.stem)
    description = r.text(m.get("description"), "description") or ""
    topo, topo_path = None, None
    ref = r.text(m.get("topology"), "topology")
    if ref is not None:
        found = _find_topology(ref, path)
        if found is not None and found.suffix not in (".yaml", ".yml"):
            r.error(m["topology"], "topology", f"topology file {show(ref)} is not a .yaml or .yml file")
        elif found is None:
            r.error(m["topology"], "topology", f"topology file {show(ref)} not found (looked in "
                                               f"{path.parent or '.'} and the current directory)")
        else:
            topo_path = os.path.relpath(found) if not os.path.relpath(found).startswith("..") else str(found)
            try:
                topo = load_topology(topo_path, features=feats)
            except SpecError as exc:
                if len(exc.problems) > MAX_REFERRED_PROBLEMS:  # a file that is not a topology at all
                    rest = len(exc.problems) - MAX_REFERRED_PROBLEMS
                    exc = SpecError([*exc.problems[:MAX_REFERRED_PROBLEMS],
                                     replace(exc.problems[MAX_REFERRED_PROBLEMS], key_path="",
                                             message=f"... and {rest} more problems in this file")])
                for p in exc.problems:  # an unreadable topology is this file's problem, at its line
                    r.problems.append(p if p.line else replace(p, file=r.file, line=line_of(m["topology"]),
                                                               key_path="topology",
                                                               message=f"{show(topo_path, 200)}: {p.message}"))
    transports = _transports(r, m.get("transports"))
    defaults: dict[str, object] = {}   # key path -> the value an absent optional key took
    seed = r.integer(m.get("seed"), "seed", minimum=0, maximum=2**63 - 1)
    if "seed" not in m:
        seed = defaults["seed"] = SCENARIO_DEFAULTS["seed"]
    if seed_override is not None and seed is not None:
        seed = seed_override
    trials = r.integer(m["trials"], "trials", minimum=1, maximum=1000) if "trials" in m else 1
    agent_processes = None
    if "agent_processes" in m:
        node = m["agent_processes"]
        value = r.value(node) if isinstance(node, ScalarNode) else None
        if value == PER_HOST:
            agent_processes = PER_HOST
        elif isinstance(value, int) and not isinstance(value, bool):
            agent_processes = r.integer(node, "agent_processes", minimum=1, maximum=MAX_AGENT_PROCESSES)
        else:
            r.error(node, "agent_processes", f"expected {PER_HOST} or a number of host runtimes "
                                             f"1..{MAX_AGENT_PROCESSES}, got {r.describe(node)}")
    agent_realtime = False
    if "agent_realtime" in m:
        node = m["agent_realtime"]
        value = r.value(node) if isinstance(node, ScalarNode) else None
        if isinstance(value, bool):
            agent_realtime = value
        else:
            r.error(node, "agent_realtime", f"expected true or false, got {r.describe(node)}")
    qp = _qp(r, m.get("qp"))
    engine = _engine(r, m)
    if "engine" not in m:
        defaults["engine"] = engine
    timeout_s = r.unit(m.get("timeout"), "timeout", units.parse_duration)
    if timeout_s == 0:
        r.error(m["timeout"], "timeout", "must be > 0")
    reconverge = r.unit(m.get("reconverge_after"), "reconverge_after", units.parse_duration)
    jobs = _jobs(r, m, topo, seed, defaults, path.parent)
    workload = jobs[0] if jobs else None
    if "timeout" not in m and jobs and topo is not None:
        timeout_s = defaults["timeout"] = (COMMAND_TIMEOUT_S if workload.is_command
                                           else derived_timeout_s(jobs, topo))
    if workload is not None and transports is not None:
        _check_transports(r, transports, workload.is_command)
    timeline = _timeline(r, m.get("timeline"), topo, seed, timeout_s, workload, feats)
    controller, controller_restart = _controller(r, m.get("controller"), timeline)
    if workload is not None and workload.is_command and transports is not None:
        from testbed.spec.commandfile import command_controller_problem, command_timeline_problems
        command_timeline_problems(r, timeline, transports)
        command_controller_problem(r, m.get("controller"))
    if "agent_processes" in m and agent_processes is None:
        return None
    if r.problems or None in (name, topo, transports, seed, timeout_s, workload, timeline, trials):
        return None
    warnings = timeline_warnings(r, timeline, timeout_s) + _dcqcn_warnings(r, transports, topo) + \
        _variant_warnings(r, transports, qp) + _plane_warnings(r, transports, timeline)
    return Scenario(name, str(path), description, topo, topo_path, transports, seed, timeout_s,
                    reconverge, workload, timeline, trials, warnings, jobs=tuple(jobs),
                    agent_processes=agent_processes, agent_realtime=agent_realtime, controller=controller,
                    controller_restart=controller_restart, engine=engine, defaults=tuple(defaults.items()),
                    qp=qp)


def _qp(r: Reader, node) -> tuple[tuple[str, object], ...]:
    """``qp:``: QP settings of every mrc and rc QP (:attr:`testbed.spec.model.Scenario.qp`):
    ``loss_inference`` and ``ecn`` true or false, ``rto_base_rtts`` a number of base RTTs in
    [1, 1000], ``nscc_delay_filter`` one of :data:`agents.mrc.cc.DELAY_FILTERS`, ``ev_select``
    one of :data:`agents.mrc.ev.EV_SELECT`. Problems go to ``r``; absent: ``()``."""
    from agents.mrc.cc import DELAY_FILTERS
    from agents.mrc.ev import EV_SELECT
    if node is None:
        return ()
    choices = {"nscc_delay_filter": DELAY_FILTERS, "ev_select": EV_SELECT}
    m = r.mapping(node, "qp", *SCENARIO["qp"])
    out: list[tuple[str, object]] = []
    for key, value_node in (m or {}).items():
        value = r.value(value_node) if isinstance(value_node, ScalarNode) else None
        if key in choices:
            if value not in choices[key]:
                r.error(value_node, f"qp.{key}", f"expected one of {', '.join(choices[key])}, "
                                                 f"got {r.describe(value_node)}")
                continue
            out.append((key, value))
        elif key == "rto_base_rtts":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 1000:
                r.error(value_node, f"qp.{key}", f"expected a number of base RTTs from 1 to 1000 "
                                                 f"(the paper's ratio is ~33), got {r.describe(value_node)}")
                continue
            out.append((key, float(value)))
        elif isinstance(value, bool):
            out.append((key, value))
        else:
            r.error(value_node, f"qp.{key}", f"expected true or false, got {r.describe(value_node)}")
    return tuple(out)


def _engine(r, m) -> str:
    """``engine:``, the MRC engine of the mrc and rc QPs (:data:`agents.jobspec.ENGINES`);
    absent: :data:`testbed.spec.schema.SCENARIO_DEFAULTS`'s."""
    from agents.jobspec import ENGINES
    default = SCENARIO_DEFAULTS["engine"]
    if "engine" not in m:
        return default
    node = m["engine"]
    value = r.value(node) if isinstance(node, ScalarNode) else None
    if value in ENGINES:
        return value
    r.error(node, "engine", f"expected one of {', '.join(ENGINES)}, got {r.describe(node)}")
    return default


def derived_timeout_s(jobs: list[WorkloadSpec], topo: Topology) -> float:
    """A scenario's timeout when it gives none, seconds: :data:`testbed.spec.schema.TIMEOUT_BASE_S`
    plus :data:`~testbed.spec.schema.TIMEOUT_MARGIN` times the time every job's sweep (warm-up and
    measured iterations of every size, one job after another) takes at its hosts' slowest host
    link if it ran at that link's full rate: ``size * bus_factor`` bytes per rank and iteration
    (nccl-tests' busbw convention, :func:`agents.collectives.bus_factor`). Rounded up to 1 s."""
    import math
    from agents.collectives import bus_factor
    wire_s = 0.0
    for job in jobs:
        rate_bps = min(topo.link_by_name[nic.link].params.rate_bps for h in job.hosts for nic in topo.nics[h])
        per_rank_bytes = sum(job.sizes_bytes) * bus_factor(job.collective, len(job.hosts))
        wire_s += per_rank_bytes * (job.iterations + job.warmup) * 8 / rate_bps
    return float(math.ceil(TIMEOUT_BASE_S + TIMEOUT_MARGIN * wire_s))


def _controller(r: Reader, node: Node | None, timeline) -> tuple[str | None, bool]:
    """``controller: {policy: none|replace, restart: true|false}`` as (policy, restart); the
    ``ev_*`` timeline actions need one."""
    policy, restart = None, False
    if node is not None:
        cm = r.mapping(node, "controller", *SCENARIO["controller"])
        if cm is not None and "restart" in cm:
            restart = bool(r.boolean(cm["restart"], "controller.restart"))
        if cm is not None and "policy" in cm:
            policy = r.text(cm["policy"], "controller.policy")
            if policy is not None and policy not in CONTROLLER_POLICIES:
                r.error(cm["policy"], "controller.policy", f"unknown policy {show(policy)} (one of: "
                                                           f"{', '.join(CONTROLLER_POLICIES)})")
                policy = None
    for i, e in enumerate(timeline or ()):
        if e.action in EV_ACTIONS and policy is None and node is None:
            path = join(join("timeline", i), e.action)
            r.problems.append(Problem(r.file, r.line_for(path), path,
                                      f"{e.action} is a controller action: add 'controller: {{policy: none}}' "
                                      f"(or replace) to the scenario"))
    return policy, restart


def _jobs(r: Reader, m: dict, topo: Topology | None, seed: int | None,
          defaults: dict[str, object], scenario_dir: Path = Path(".")) -> list[WorkloadSpec] | None:
    """``workload`` (one job, named job0) or ``jobs`` (a list of workloads with unique
    ``name``s, run at once on disjoint or shared hosts); exactly one of the two."""
    if ("workload" in m) == ("jobs" in m):
        r.error(m.get("jobs") or m.get("workload") or 1, "", "give exactly one of 'workload' (one job) or "
                                                            "'jobs' (a list of jobs run at once)")
        return None
    if "workload" in m:
        wl = _workload(r, m["workload"], topo, seed, defaults, scenario_dir=scenario_dir)
        return [wl] if wl is not None else None
    items = r.seq(m["jobs"], "jobs")
    if not items:
        if items == []:
            r.error(m["jobs"], "jobs", "needs at least one job")
        return None
    out, names = [], []
    for i, item in enumerate(items):
        where = join("jobs", i)
        if _not_a_mapping(r, item, "a job"):
            return None
        keys = {k.value: v for k, v in item.value}
        name = r.text(keys.get("name"), join(where, "name")) if "name" in keys else f"job{i}"
        if name is not None and not JOB_NAME_RE.fullmatch(name):
            r.error(keys["name"], join(where, "name"), f"job name {show(name)}: use 1-32 lower-case letters, "
                                                       "digits, '_' or '-', starting with a letter")
            name = None
        elif name in names:
            r.error(keys["name"], join(where, "name"), f"duplicate job name {show(name)}")
            name = None
        names.append(name)
        out.append(_workload(r, item, topo, seed, defaults, where, name or f"job{i}", scenario_dir))
    return out if None not in out and None not in names else None


def _scenario_name(r: Reader, node: Node | None, stem: str) -> str | None:
    """The scenario's name (default: the file stem), which names its run directory."""
    name = r.text(node, "name") if node is not None else stem
    if name is None:
        return None
    if not SCENARIO_NAME_RE.fullmatch(name) or ".." in name:
        where = node if node is not None else 1
        r.error(where, "name", f"scenario name {show(name)} names the run directory: use 1-64 letters, "
                               "digits, '.', '_' or '-', starting with a letter or digit, without '..'"
                + ("" if node is not None else " (it defaults to the file name; add a 'name' key)"))
        return None
    return name


def _transports(r: Reader, node: Node | None) -> tuple[str, ...] | None:
    items = r.seq(node, "transports") if node is not None else None
    if items is None:
        return None
    if not items:
        r.error(node, "transports", f"must name at least one of {', '.join(TRANSPORTS)}")
        return None
    out = []
    for i, item in enumerate(items):
        name = r.text(item, join("transports", i))
        try:
            if name is not None:
                transport_variant(name)
            out.append(name)
        except ValueError as exc:
            r.error(item, join("transports", i), str(exc))
            out.append(None)
    for i, t in enumerate(out):
        if t is not None and t in out[:i]:
            r.error(items[i], join("transports", i), f"duplicate transport {t!r}")
    return tuple(out) if None not in out and len(set(out)) == len(out) else None


def _check_transports(r: Reader, transports: tuple[str, ...], command: bool) -> None:
    """A command job runs on its backends' transports (:data:`JOB_BACKENDS`), a collective job on
    the agents' transports."""
    for i, t in enumerate(transports):
        if command and t not in JOB_BACKENDS:
            r.error(r.line_for(join("transports", i)) or 1, join("transports", i),
                    f"{t!r} is not a command job's transport: a command job runs on "
                    f"{' or '.join(JOB_BACKENDS)} (its torch.distributed backend)")
        elif not command and parse_transport(t).backend is not None:
            r.error(r.line_for(join("transports", i)) or 1, join("transports", i),
                    f"{t!r} runs a command job's torch.distributed backend: this workload is a collective "
                    f"(give 'command' for a real job, or use tcp)")


def _dcqcn_warnings(r: Reader, transports: tuple[str, ...], topo: Topology) -> tuple[Problem, ...]:
    """A DCQCN transport cuts its rate only on CNPs, which need CE marks: warn when no link marks."""
    if any(link.params.ecn_threshold_pkts for link in topo.links):
        return ()
    return tuple(Problem(r.file, r.line_for(join("transports", i)), join("transports", i),
                         f"warning: {t} on a fabric that marks no ECN (no link has 'ecn'): DCQCN gets "
                         "no CNPs and paces at line rate")
                 for i, t in enumerate(transports) if parse_transport(t).cc == "dcqcn")


def _plane_warnings(r: Reader, transports: tuple[str, ...], timeline) -> tuple[Problem, ...]:
    """rc, tcp and their variants use a host's first NIC only (plane 0; testbed.spec.jobs): a
    ``plane_down`` of another plane cannot touch them, so a comparison with mrc would mislead."""
    single = [t for t in transports if t != "mrc"]
    if not single:
        return ()
    return tuple(Problem(r.file, r.line_for(join(join("timeline", i), "plane_down")),
                         join(join("timeline", i), "plane_down"),
                         f"warning: {', '.join(single)} {'uses' if len(single) == 1 else 'use'} each host's first NIC only (plane 0): "
                         f"{e.selector} carries none of their traffic (fail plane 0 to compare them with mrc)")
                 for i, e in enumerate(timeline) if e.action == "plane_down" and e.selector != "plane 0")


def _variant_warnings(r: Reader, transports: tuple[str, ...], qp) -> tuple[Problem, ...]:
    """``qp.ev_select: reps`` replaces MRC's EV selection: its mrc results are the variant's, not MRC's."""
    if dict(qp).get("ev_select") != "reps" or "mrc" not in transports:
        return ()
    return (Problem(r.file, r.line_for(join("qp", "ev_select")), join("qp", "ev_select"),
                    "warning: reps is not MRC's EV selection (a variant after uet-htsim's REPS): "
                    "quote this run's mrc results as that variant, not as MRC"),)


def _workload(r: Reader, node: Node | None, topo: Topology | None, seed: int | None, defaults: dict[str, object],
              where: str = "workload", name: str = "job0", scenario_dir: Path = Path(".")) -> WorkloadSpec | None:
    m = r.mapping(node, where, *SCENARIO["workload" if where == "workload" else "jobs[]"]) if node is not None else None
    if m is None:
        return None
    if "command" in m:
        from testbed.spec.commandfile import command_workload
        return command_workload(r, m, topo, seed, where, name, scenario_dir)
    for key in COMMAND_ONLY:
        if key in m:
            r.error(m[key], f"{where}.{key}", f"{key!r} is a command job's key: this job has no 'command'")
    missing = [k for k in COLLECTIVE_REQUIRED if k not in m]
    for key in missing:
        r.error(node, where, f"missing required key {key!r}"
                + (" (or 'command' for a command job)" if key == "collective" else ""))
    if missing or not set(_WORKLOAD_REQUIRED) <= m.keys():
        return None
    collective = r.choice(m["collective"], f"{where}.collective", COLLECTIVES)
    hosts = _hosts(r, m["hosts"], topo, where)
    order = r.choice(m["order"], f"{where}.order", ORDERS) if "order" in m else "listed"
    sizes = [r.unit(m[k], f"{where}.{k}", units.parse_size) for k in ("min_bytes", "max_bytes")]
    for i, key in enumerate(("min_bytes", "max_bytes")):
        if sizes[i] is not None and sizes[i] > MAX_WORKLOAD_BYTES:
            r.error(m[key], f"{where}.{key}", f"{units.format_size(sizes[i])} is above the largest buffer a "
                                               f"rank may hold ({units.format_size(MAX_WORKLOAD_BYTES)})")
            sizes[i] = None
        elif sizes[i] and sizes[i] % ELEMENT_BYTES:
            r.error(m[key], f"{where}.{key}", f"{sizes[i]} bytes is not a whole number of float32 "
                                               f"elements ({ELEMENT_BYTES} bytes each)")
            sizes[i] = None
    if sizes[0] == 0:
        r.error(m["min_bytes"], f"{where}.min_bytes", "must be >= 1 byte")
    elif None not in sizes and sizes[1] < sizes[0]:
        r.error(m["max_bytes"], f"{where}.max_bytes",
                f"{units.format_size(sizes[1])} is below min_bytes ({units.format_size(sizes[0])})")
    counts = []
    for k, low, high in (("factor", 2, MAX_WORKLOAD_BYTES), ("iterations", 1, MAX_ITERATIONS),
                         ("warmup", 0, MAX_ITERATIONS)):
        if k in m:
            counts.append(r.integer(m[k], f"{where}.{k}", minimum=low, maximum=high))
        else:
            counts.append(SCENARIO_DEFAULTS[f"workload.{k}"])
            defaults[f"{where}.{k}"] = counts[-1]
    evs = r.integer(m.get("evs"), f"{where}.evs", minimum=1, maximum=MAX_EVS)
    evs_per_qp = r.integer(m.get("evs_per_qp"), f"{where}.evs_per_qp", minimum=1, maximum=MAX_EVS)
    if "evs" in m and "evs_per_qp" in m:
        r.error(m["evs_per_qp"], f"{where}.evs_per_qp", "give either evs (at most one EV per path) or "
                                                        "evs_per_qp (exactly this many, reusing paths), not both")
    ev_paths = ev_paths_key(r, m, where)
    mtu = r.integer(m.get("mtu"), f"{where}.mtu", minimum=1280, maximum=65535)
    if mtu is not None and topo is not None and mtu > (low := min(l.params.mtu for l in topo.links)):
        r.error(m["mtu"], f"{where}.mtu", f"{mtu} is above the fabric's smallest link MTU ({low})")
    payload = _payload(r, m, topo, where)
    if r.problems or None in (collective, hosts, order, *sizes, *counts):
        return None
    targets = None
    if collective == "permutation":
        from agents.collectives import derangement
        targets = tuple(derangement(seed, len(hosts)))
    salt = "" if where == "workload" or where == "jobs[0]" else f":{name}"
    return WorkloadSpec(collective, order_hosts(hosts, order, topo, f"{seed}{salt}"), sizes[0], sizes[1], *counts,
                    evs=evs, mtu=mtu, order=order, evs_per_qp=evs_per_qp, targets=targets, name=name,
                        payload=payload, ev_paths=ev_paths or "spread")


def ev_paths_key(r: Reader, m: dict, where: str) -> str | None:
    """``ev_paths`` of a workload mapping (:data:`EV_PATHS`; absent: None, the default "spread");
    ``oblivious`` with ``evs`` counts the same EVs, each on a hashed path."""
    if "ev_paths" not in m:
        return None
    return r.choice(m["ev_paths"], f"{where}.ev_paths", EV_PATHS)


def _payload(r: Reader, m: dict, topo: Topology | None, where: str) -> int | None:
    """``workload.payload``: bytes of payload per mrc/rc data packet (a size: ``8KiB``, ``8192``),
    a multiple of :data:`ELEMENT_BYTES`, at least :data:`agents.mrc.packet.MIN_PAYLOAD_BYTES`, whose
    MTU (:func:`agents.mrc.packet.mtu_for_payload`) fits the fabric's smallest link MTU; not with
    ``mtu``. None when absent or wrong (a problem is recorded)."""
    from agents.mrc.packet import MIN_PAYLOAD_BYTES, mtu_for_payload, payload_bytes_for_mtu
    if "payload" not in m:
        return None
    node, key = m["payload"], f"{where}.payload"
    payload = r.unit(node, key, units.parse_size)
    if payload is None:
        return None
    if "mtu" in m:
        r.error(node, key, "give either mtu (the agents' IPv6 MTU) or payload (bytes per data packet), not both")
        return None
    if payload < MIN_PAYLOAD_BYTES:
        r.error(node, key, f"must be >= {MIN_PAYLOAD_BYTES} bytes (RoCEv2's smallest path MTU), got {payload}")
        return None
    if payload % ELEMENT_BYTES:
        r.error(node, key, f"{payload} bytes is not a whole number of float32 elements ({ELEMENT_BYTES} bytes each)")
        return None
    if topo is not None and mtu_for_payload(payload) > (low := min(l.params.mtu for l in topo.links)):
        fits = payload_bytes_for_mtu(low) // ELEMENT_BYTES * ELEMENT_BYTES if low >= mtu_for_payload(0) else 0
        r.error(node, key, f"{payload} bytes need an MTU of {mtu_for_payload(payload)} (payload + IPv6/UDP + MRC "
                           f"headers), above the fabric's smallest link MTU ({low}): at most {fits} bytes fit")
        return None
    return payload


def order_hosts(hosts: tuple[str, ...], order: str, topo: Topology, seed: int | str | None) -> tuple[str, ...]:
    """Rank order of ``hosts`` (see :data:`testbed.spec.common.ORDERS`).

    ``random``: ``random.Random(f"{seed}:order").shuffle``, a placement by a scheduler that does
    not know the topology (a scenario's second and later jobs salt the seed with their name, so
    two random rings differ). ``rail``: hosts sorted by (position under their first NIC's switch,
    that switch's position), so consecutive ranks sit under different edge switches and every
    ring hop crosses the fabric, as with rail-ordered rings over servers whose GPU i is on rail i.
    """
    import random
    out = list(hosts)
    if order == "random":
        random.Random(f"{seed}:order").shuffle(out)
    elif order == "rail":
        switch_of = {h: topo.nics[h][0].switch for h in out}
        switches = list(dict.fromkeys(switch_of[h] for h in (x.name for x in topo.hosts) if h in switch_of))
        under = {s: [h for h in (x.name for x in topo.hosts) if switch_of.get(h) == s] for s in switches}
        out.sort(key=lambda h: (under[switch_of[h]].index(h), switches.index(switch_of[h])))
    return tuple(out)


def _hosts(r: Reader, node: Node, topo: Topology | None, where: str = "workload") -> tuple[str, ...] | None:
    known = [h.name for h in topo.hosts] if topo else None
    if r.value(node) == "all":
        return tuple(known) if known is not None else None
    items = r.seq(node, f"{where}.hosts")
    if items is None:
        return None
    names = [r.text(item, join(f"{where}.hosts", i)) for i, item in enumerate(items)]
    for i, host in enumerate(names):
        path = join(f"{where}.hosts", i)
        if host is not None and known is not None and host not in known:
            r.error(items[i], path, f"unknown host {show(host)}{unknown(host, known, topo, 'host')}")
        elif host is not None and host in names[:i]:
            r.error(items[i], path, f"duplicate host {show(host)}")
    if len(items) < 2:
        r.error(node, f"{where}.hosts", f"a collective needs >= 2 hosts, got {len(items)}")
    return tuple(names)


