"""The agent's job spec (JSON written by the runner): strict parse into frozen dataclasses.

One module on purpose (over ~400 lines): the job spec's dataclasses and their one strict parser.

Every problem is collected and reported together as one :class:`JobSpecError`
naming the key path (``send_to[1].evs[2].address: expected str``). Unknown
keys are rejected. This module is the job spec's one definition: :class:`JobSpec` (its
fields are the keys), :func:`parse_job` (JSON -> JobSpec) and :meth:`JobSpec.to_dict`
(JobSpec -> JSON; the runner, :mod:`testbed.spec.jobs`, builds JobSpec objects and writes
this), with ``parse_job(spec.to_dict()) == spec``.

Cross-checks: the ranks of ``send_to``/``recv_from`` are exactly
:func:`agents.collectives.peers` of (collective, rank, n, targets), in that
order; every peer's ``host`` is ``world[peer.rank]``; ``qps > 1`` only for
``rc``, whose peers then carry exactly ``qps`` EVs with ids ``0..qps-1``
(QP q of a connection uses EV q); the derived QPNs fit 24 bits
(:func:`agents.channels.qp.qpn`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from typing import Any

from agents.collectives import COLLECTIVES, COMPLETION_GATED, peers
from agents.channels.qp import QPN_MAX, max_qpn
from agents.mrc.ev import EV_SELECT
from agents.mrc.packet import MIN_MTU_BYTES, MIN_PAYLOAD_BYTES
from agents.net.udp import MAX_ROUTE_DELAY_S
from agents.protocol import TCP_PORT, TRANSPORTS, UDP_PORT


QP_ATTR_KEYS = {"mpr": "mpr", "mpr_dest": "mpr_dest", "max_wimm": "max_wimm",
                "max_wimm_dest": "max_wimm_dest", "timeout": "timeout",
                "retry_linear": "retry_linear_cnt", "retry_exp": "retry_exp_cnt"}
"""Job-spec ``qp`` keys -> :class:`agents.mrc.QPAttr` fields (OCP MRC 1.0, mrc.h)."""
QP_CONFIG_KEYS = {"time_scale": float, "min_rto_s": float, "initial_rto_s": float, "sack_every": int,
                  "ack_delay_s": float, "ack_coalesce_s": float, "reorder_threshold": int, "probe_interval_s": float,
                  "probe_timeout_s": float, "probe_successes": int, "skip_timeout_s": float,
                  "cc": str, "cc_params": dict, "max_burst": int, "cnp_interval_s": float,
                  "loss_inference": bool, "ev_select": str}
"""Job-spec ``qp`` keys -> :class:`agents.mrc.QPConfig` fields (emulation parameters)."""
QP_CHANNEL_KEYS = {"ev_min_active": int, "ecn": bool, "control_priority": int}
"""Job-spec ``qp`` keys the channel applies itself: ``ev_min_active`` (INIT's EV floor),
``ecn`` (default false: ECT(0) on MRC packets, CE read per datagram and passed to the QP,
NSCC built ``ecn_capable``; see :mod:`agents.net.udp` and :mod:`agents.channels.qp`) and
``control_priority`` (u32, default 0: none; the ``skb->priority`` of every control packet,
which puts it in the host NIC's strict-priority HTB class; see :mod:`agents.net.udp`)."""


ENGINES = ("python", "native")
"""The MRC engines a job may run its QPs on: ``python`` (agents/mrc, the specification) and
``native`` (agents/mrc/core through agents.mrc._core, held to it by differential tests)."""


class JobSpecError(ValueError):
    """The job spec is unreadable or invalid; ``problems`` lists every ``key: message``."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"bad job spec {source}: " + "; ".join(problems))


@dataclass(frozen=True)
class EVSpec:
    """One EV: ``ev_id`` (u32), destination ``address`` (a uSID address ending at the peer,
    or its ECMP address), the fabric ``links`` it crosses, optional UDP ``src_port`` (ECMP),
    ``plane``: the plane (NIC port) it leaves by (mrc_ctl.h's EV ``port``; 0 on one plane),
    ``delay_s``: the one-way propagation delay of its path (s; the sum of its links' ``delay``),
    which the agent's endpoint adds by holding each datagram (:mod:`agents.net.udp`)."""

    ev_id: int
    address: str
    links: tuple[str, ...] = ()
    src_port: int | None = None
    plane: int = 0
    delay_s: float = 0.0

    def to_dict(self) -> dict:
        out = {"ev_id": self.ev_id, "address": self.address, "links": list(self.links)}
        if self.src_port is not None:
            out["src_port"] = self.src_port
        if self.plane:
            out["plane"] = self.plane
        if self.delay_s:
            out["delay_s"] = self.delay_s
        return out


@dataclass(frozen=True)
class PeerSpec:
    """A peer rank: ``rank``, ``host`` (== world[rank]), ``ecmp_addr``, ``evs`` (paths that
    end at it), its UDP ``port``/TCP ``tcp_port`` (None: same as ours; loopback tests give
    each agent its own). ``src_port`` (``send_to`` peers only): the TCP source port to
    connect from (seeded by the runner so that one seed gives one set of ECMP paths; None:
    the kernel's ephemeral choice). ``backup_evs`` (mrc): paths not in use that the controller
    may swap in by REPLACE_EV (their routes are set up front; the ids differ from ``evs``')."""

    rank: int
    host: str
    ecmp_addr: str
    evs: tuple[EVSpec, ...]
    port: int | None = None
    tcp_port: int | None = None
    src_port: int | None = None
    backup_evs: tuple[EVSpec, ...] = ()

    def to_dict(self) -> dict:
        out = {"rank": self.rank, "host": self.host, "ecmp_addr": self.ecmp_addr,
               "evs": [ev.to_dict() for ev in self.evs]}
        if self.backup_evs:
            out["backup_evs"] = [ev.to_dict() for ev in self.backup_evs]
        for key in ("port", "tcp_port", "src_port"):   # optional: absent when None
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class JobSpec:
    """One agent's job: the JSON object's keys are these fields (:meth:`to_dict`, :func:`parse_job`).

    ``run_id``; ``rank`` in the job's ``world`` (its hosts, >= 2, distinct; ``host`` ==
    ``world[rank]``); ``transport`` (:data:`agents.protocol.TRANSPORTS`); ``control_socket``
    (absolute path of the runner's Unix socket); ``seed``; ``sizes`` (bytes, each >= 4 *
    len(world), rounded down to float32 elements: nccl-tests' size column), ``iterations`` >=
    1 and ``warmup`` >= 0 per size; ``send_to`` / ``recv_from`` (:class:`PeerSpec`, exactly
    :func:`agents.collectives.peers` of the collective, in that order); ``bind_addr`` (this
    host's ECMP address); ``collective`` (:data:`agents.collectives.COLLECTIVES`);
    ``targets`` (permutation only, required there: ``targets[r]`` the rank r sends to, a
    permutation of 0..n-1 without a fixed point); ``agent`` (default: rank; the ``rank`` of
    every control message, distinct over the jobs of a run); ``job`` (a name for logs and the
    done summary); ``qps`` (> 1 for rc only: QPs per connection, NCCL_IB_QPS_PER_CONNECTION);
    ``sample_interval_s``; ``ev_stats_s`` (> 0: every MRC tx connection's per-EV packet counts
    go to the runner as ``ev_stats`` events this often, for a controller; 0: never); ``samples_path`` (absolute; samples go to this file, one JSON object
    a line, not over the control socket); ``port`` / ``tcp_port`` (this agent's UDP and TCP
    ports); ``mtu`` (sizes mrc/rc data packets: :func:`agents.mrc.packet.payload_bytes_for_mtu`,
    at least :data:`agents.mrc.packet.MIN_MTU_BYTES`; kernel tcp ignores it); ``qp`` (:data:`QP_ATTR_KEYS`, :data:`QP_CONFIG_KEYS`,
    :data:`QP_CHANNEL_KEYS`); ``connect_timeout_s``; ``linger_s`` (after ``done``, s: how long the agent keeps acknowledging its ``recv_from`` peers' retransmissions when no ``stop`` comes; the testbed gives its run's timeout, :func:`testbed.spec.jobs.build_all_jobs`); ``rx_hold_s``
    (>= 0, s: receive moderation of the agent's event loop, :class:`agents.net.loop.EventLoop`
    ``hold_s``; 0: none); ``rt_priority`` (0..99: the agent's process runs at SCHED_RR with this
    priority, :func:`agents.realtime`; 0: the normal policy); ``engine`` (:data:`ENGINES`: the MRC
    engine of mrc and rc QPs, the Python specification or the native one, :mod:`agents.mrc.native`;
    kernel tcp ignores it)."""

    run_id: str
    rank: int
    world: tuple[str, ...]
    host: str
    transport: str
    control_socket: str
    seed: int
    sizes: tuple[int, ...]
    iterations: int
    warmup: int
    send_to: tuple[PeerSpec, ...]
    recv_from: tuple[PeerSpec, ...]
    bind_addr: str
    collective: str = "all_reduce"
    targets: tuple[int, ...] | None = None
    agent: int = 0
    job: str = "job0"
    qps: int = 1
    sample_interval_s: float = 0.01
    ev_stats_s: float = 0.0
    samples_path: str = ""
    port: int = UDP_PORT
    mtu: int = 1500
    tcp_port: int = TCP_PORT
    qp: dict = field(default_factory=dict)
    connect_timeout_s: float = 10.0
    linger_s: float = 2.0
    rx_hold_s: float = 0.0
    rt_priority: int = 0
    engine: str = "native"

    @property
    def world_size(self) -> int:
        return len(self.world)

    def to_dict(self) -> dict:
        """The JSON object of this job spec (:func:`parse_job` reads it back to an equal JobSpec;
        ``targets`` absent when None)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("send_to", "recv_from"):
                v = [p.to_dict() for p in v]
            elif f.name == "targets":
                if v is None:
                    continue
                v = list(v)
            elif isinstance(v, tuple):
                v = list(v)
            elif f.name == "qp":
                v = json.loads(json.dumps(v))   # a copy, JSON types
            out[f.name] = v
        return out

    def qp_attr_kwargs(self) -> dict:
        """``qp`` keys that are mrc.h QP attributes, under QPAttr field names."""
        return {QP_ATTR_KEYS[k]: v for k, v in self.qp.items() if k in QP_ATTR_KEYS}

    def qp_config_kwargs(self) -> dict:
        """``qp`` keys that are emulation parameters (QPConfig fields)."""
        return {k: v for k, v in self.qp.items() if k in QP_CONFIG_KEYS}

    @property
    def ecn(self) -> bool:
        """``qp.ecn``: the job's MRC/RC packets are ECT(0) and CE marks reach the QPs."""
        return self.qp.get("ecn", False)

    @property
    def control_priority(self) -> int:
        """``qp.control_priority``: the skb->priority of the job's control packets (0: none)."""
        return self.qp.get("control_priority", 0)


class _Checker:
    def __init__(self):
        self.problems: list[str] = []

    def get(self, obj: dict, key: str, path: str, kind, *, default: Any = ..., check=None,
            why: str = ""):
        where = f"{path}.{key}" if path else key
        if key not in obj:
            if default is ...:
                self.problems.append(f"{where}: missing")
            return None if default is ... else default
        value = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            if not (float in kinds and isinstance(value, int) and not isinstance(value, bool)):
                self.problems.append(f"{where}: expected {'/'.join(k.__name__ for k in kinds)}, "
                                     f"got {value!r}")
                return None
        if check is not None and not check(value):
            self.problems.append(f"{where}: {why} (got {value!r})")
            return None
        return value

    def unknown(self, obj: dict, allowed: set, path: str) -> None:
        for key in sorted(set(obj) - allowed):
            self.problems.append(f"{(path + '.') if path else ''}{key}: unknown key")


_TOP = {f.name for f in fields(JobSpec)}     # the keys are the dataclasses' fields
_PEER = {f.name for f in fields(PeerSpec)}
_EV = {f.name for f in fields(EVSpec)}


def _port(v) -> bool:
    return 0 < v < 65536


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _evs(c: _Checker, obj: dict, path: str, key: str = "evs") -> tuple[list[EVSpec], list]:
    evs = []
    raw_evs = c.get(obj, key, path, list, default=[]) or []
    for i, ev in enumerate(raw_evs):
        p = f"{path}.{key}[{i}]"
        if not isinstance(ev, dict):
            c.problems.append(f"{p}: expected an object")
            continue
        c.unknown(ev, _EV, p)
        ev_id = c.get(ev, "ev_id", p, int, check=lambda v: 0 <= v <= 0xFFFFFFFF, why="not a u32")
        address = c.get(ev, "address", p, str)
        links = c.get(ev, "links", p, list, default=[])
        src_port = c.get(ev, "src_port", p, int, default=None, check=_port, why="not a port")
        plane = c.get(ev, "plane", p, int, default=0, check=lambda v: 0 <= v <= 0xFFFF, why="not a plane")
        delay = c.get(ev, "delay_s", p, float, default=0.0, check=lambda v: 0 <= v <= MAX_ROUTE_DELAY_S,
                      why=f"not a delay in 0..{MAX_ROUTE_DELAY_S} s")
        if ev_id is not None and address is not None:
            evs.append(EVSpec(ev_id, address, tuple(map(str, links or [])), src_port, plane or 0,
                              float(delay or 0.0)))
    if len({e.ev_id for e in evs}) != len(evs):
        c.problems.append(f"{path}.{key}: duplicate ev_id")
    return evs, raw_evs


def _peer(c: _Checker, obj, path: str, *, transport: str | None, qps: int,
          sender: bool) -> PeerSpec | None:
    if not isinstance(obj, dict):
        c.problems.append(f"{path}: expected an object")
        return None
    c.unknown(obj, _PEER, path)
    evs, raw_evs = _evs(c, obj, path)
    backups, _ = _evs(c, obj, path, "backup_evs")
    if {e.ev_id for e in backups} & {e.ev_id for e in evs}:
        c.problems.append(f"{path}.backup_evs: an ev_id also in evs")
    if backups and transport != "mrc":
        c.problems.append(f"{path}.backup_evs: only mrc has backup EVs")
    if transport in ("mrc", "rc") and not raw_evs:
        c.problems.append(f"{path}.evs: at least one EV is needed for this transport")
    elif transport == "rc" and len(evs) == len(raw_evs) and \
            sorted(e.ev_id for e in evs) != list(range(qps)):
        c.problems.append(f"{path}.evs: rc with qps {qps} needs exactly ev_id 0..{qps - 1} "
                          f"(one EV per QP), got {sorted(e.ev_id for e in evs)}")
    rank = c.get(obj, "rank", path, int, check=lambda v: v >= 0, why="must be >= 0")
    host = c.get(obj, "host", path, str)
    ecmp = c.get(obj, "ecmp_addr", path, str)
    port = c.get(obj, "port", path, int, default=None, check=_port, why="not a port")
    tcp_port = c.get(obj, "tcp_port", path, int, default=None, check=_port, why="not a port")
    src_port = c.get(obj, "src_port", path, int, default=None, check=_port, why="not a port")
    if src_port is not None and not sender:
        c.problems.append(f"{path}.src_port: only send_to peers have a TCP source port")
    if rank is None or host is None or ecmp is None:
        return None
    return PeerSpec(rank, host, ecmp, tuple(evs), port, tcp_port, src_port, tuple(backups))


def _peer_list(c: _Checker, raw: dict, key: str, **kw) -> list[PeerSpec | None] | None:
    if key not in raw:
        c.problems.append(f"{key}: missing")
        return None
    items = raw[key]
    if not isinstance(items, list):   # may be empty: incast's root sends to no one, its senders hear no one
        c.problems.append(f"{key}: expected a list of peers")
        return None
    return [_peer(c, p, f"{key}[{i}]", sender=key == "send_to", **kw) for i, p in enumerate(items)]


def _qp_keys(c: _Checker, qp: dict) -> None:
    for key, value in qp.items():
        if key in QP_ATTR_KEYS:
            if not _is_int(value):
                c.problems.append(f"qp.{key}: expected int, got {value!r}")
        elif key in QP_CONFIG_KEYS:
            want = QP_CONFIG_KEYS[key]
            ok = isinstance(value, want) or want is float and isinstance(value, int)
            if not ok or isinstance(value, bool) and want is not bool:
                c.problems.append(f"qp.{key}: expected {want.__name__}, got {value!r}")
        elif key not in QP_CHANNEL_KEYS:
            c.problems.append(f"qp.{key}: unknown key")
    if "ev_min_active" in qp and not (_is_int(qp["ev_min_active"]) and qp["ev_min_active"] >= 1):
        c.problems.append(f"qp.ev_min_active: expected int >= 1, got {qp['ev_min_active']!r}")
    if "ecn" in qp and not isinstance(qp["ecn"], bool):
        c.problems.append(f"qp.ecn: expected bool, got {qp['ecn']!r}")
    if qp.get("ev_select", "rotation") not in EV_SELECT:
        c.problems.append(f"qp.ev_select: expected one of {', '.join(EV_SELECT)}, got {qp['ev_select']!r}")
    if "control_priority" in qp and not (_is_int(qp["control_priority"]) and 0 <= qp["control_priority"] < 2**32):
        c.problems.append(f"qp.control_priority: expected a u32, got {qp['control_priority']!r}")


def _targets(c: _Checker, raw: dict, collective: str | None, n: int | None):
    if "targets" not in raw:
        if collective == "permutation":
            c.problems.append("targets: missing (the permutation collective needs it)")
        return None
    t = raw["targets"]
    if collective is not None and collective != "permutation":
        c.problems.append(f"targets: only for the permutation collective, not {collective}")
        return None
    if not isinstance(t, list) or not all(_is_int(x) for x in t):
        c.problems.append(f"targets: expected a list of ranks, got {t!r}")
        return None
    if n is not None and (sorted(t) != list(range(n)) or any(x == r for r, x in enumerate(t))):
        c.problems.append(f"targets: must be a permutation of 0..{n - 1} without a fixed point "
                          f"(targets[r] = the rank r sends to), got {t}")
        return None
    return tuple(t)


def _check_peers(c: _Checker, v: dict, world: list, rank: int) -> None:
    n = len(world)
    known = v["collective"] is not None and (v["collective"] != "permutation" or
                                             v["targets"] is not None)
    want = (None, None)
    if known:
        try:
            want = peers(v["collective"], rank, n, v["targets"])
        except ValueError as exc:          # e.g. a world beyond the immediate's chunk field
            c.problems.append(f"world: {exc}")
    for key, expected in zip(("send_to", "recv_from"), want):
        got = v[key]
        if got is None:
            continue
        for i, p in enumerate(got):
            if p is not None and p.rank >= n:
                c.problems.append(f"{key}[{i}].rank: {p.rank} outside world of {n}")
            elif p is not None and p.host != world[p.rank]:
                c.problems.append(f"{key}[{i}].host: {p.host!r} is not world[{p.rank}] = "
                                  f"{world[p.rank]!r}")
        ranks = [p.rank for p in got if p is not None]
        if expected is not None and len(ranks) == len(got) and ranks != list(expected):
            c.problems.append(f"{key}: ranks {ranks}, but rank {rank}'s {v['collective']} "
                              f"{'sends to' if key == 'send_to' else 'receives from'} "
                              f"{list(expected)}")


def _cross_checks(c: _Checker, v: dict) -> None:
    world, rank = v["world"], v["rank"]
    if v["qps"] is not None and v["qps"] > 1 and v["transport"] not in (None, "rc"):
        c.problems.append(f"qps: {v['qps']} QPs per connection is for rc only, "
                          f"not {v['transport']}")
    if not world or rank is None:
        return
    n = len(world)
    if rank >= n:
        c.problems.append(f"rank: {rank} outside world of {n}")
        return
    if v["host"] is not None and v["host"] != world[rank]:
        c.problems.append(f"host: {v['host']!r} is not world[{rank}] = {world[rank]!r}")
    _check_peers(c, v, world, rank)
    if v["qps"] is not None and max_qpn(n, v["qps"]) > QPN_MAX:
        c.problems.append(f"qps: {v['qps']} QPs per connection over {n} ranks do not fit "
                          f"24-bit QPNs (agents.channels.qp.qpn)")
    least = 1 if v["collective"] in COMPLETION_GATED else n
    for size in v["sizes"] or []:
        if size // 4 < least:
            c.problems.append(f"sizes: {size} bytes is fewer float32 elements than "
                              f"{'one' if least == 1 else f'{n} ranks'}")


def parse_job(raw: Any, source: str = "<job>") -> JobSpec:
    """Validate a decoded job-spec object; raise JobSpecError listing every problem."""
    c = _Checker()
    if not isinstance(raw, dict):
        raise JobSpecError(source, ["top level: expected a JSON object"])
    c.unknown(raw, _TOP, "")
    g = c.get
    pos = dict(check=lambda v: v > 0, why="must be > 0")
    v = {
        "run_id": g(raw, "run_id", "", str),
        "rank": g(raw, "rank", "", int, check=lambda v: v >= 0, why="must be >= 0"),
        "world": g(raw, "world", "", list, check=lambda v: len(v) >= 2 and
                   all(isinstance(h, str) for h in v) and len(set(v)) == len(v),
                   why="needs >= 2 distinct host names"),
        "host": g(raw, "host", "", str),
        "transport": g(raw, "transport", "", str, check=lambda v: v in TRANSPORTS,
                       why=f"must be one of {', '.join(TRANSPORTS)}"),
        "control_socket": g(raw, "control_socket", "", str, check=os.path.isabs,
                            why="must be an absolute path"),
        "seed": g(raw, "seed", "", int),
        "sizes": g(raw, "sizes", "", list, check=lambda v: len(v) > 0 and all(
            _is_int(s) and s > 0 for s in v), why="needs positive integer byte sizes"),
        "iterations": g(raw, "iterations", "", int, **pos),
        "warmup": g(raw, "warmup", "", int, check=lambda v: v >= 0, why="must be >= 0"),
        "bind_addr": g(raw, "bind_addr", "", str),
        "collective": g(raw, "collective", "", str, default="all_reduce",
                        check=lambda v: v in COLLECTIVES,
                        why=f"must be one of {', '.join(COLLECTIVES)}"),
        "agent": g(raw, "agent", "", int, default=None, check=lambda v: v >= 0,
                   why="must be >= 0"),
        "job": g(raw, "job", "", str, default="job0", check=bool, why="must not be empty"),
        "qps": g(raw, "qps", "", int, default=1, check=lambda v: v >= 1, why="must be >= 1"),
        "sample_interval_s": g(raw, "sample_interval_s", "", float, default=0.01, **pos),
        "ev_stats_s": g(raw, "ev_stats_s", "", float, default=0.0, check=lambda v: v >= 0, why="must be >= 0"),
        "samples_path": g(raw, "samples_path", "", str, default="", check=lambda v: not v or os.path.isabs(v),
                          why="must be an absolute path"),
        "port": g(raw, "port", "", int, default=UDP_PORT, check=_port, why="not a port"),
        "mtu": g(raw, "mtu", "", int, default=1500, check=lambda v: MIN_MTU_BYTES <= v <= 65535,
                 why=f"must be in [{MIN_MTU_BYTES}, 65535] ({MIN_PAYLOAD_BYTES} bytes of payload and more)"),
        "tcp_port": g(raw, "tcp_port", "", int, default=TCP_PORT, check=_port, why="not a port"),
        "qp": g(raw, "qp", "", dict, default={}),
        "connect_timeout_s": g(raw, "connect_timeout_s", "", float, default=10.0, **pos),
        "linger_s": g(raw, "linger_s", "", float, default=2.0,
                      check=lambda v: v >= 0, why="must be >= 0"),
        "rx_hold_s": g(raw, "rx_hold_s", "", float, default=0.0,
                       check=lambda v: 0 <= v <= 0.1, why="must be in [0, 0.1]"),
        "rt_priority": g(raw, "rt_priority", "", int, default=0,
                         check=lambda v: 0 <= v <= 99, why="must be in [0, 99]"),
        "engine": g(raw, "engine", "", str, default="native", check=lambda v: v in ENGINES,
                    why=f"must be one of {', '.join(ENGINES)}"),
    }
    world_ok = v["world"] is not None
    v["targets"] = _targets(c, raw, v["collective"], len(v["world"]) if world_ok else None)
    kw = dict(transport=v["transport"], qps=v["qps"] or 1)
    v["send_to"] = _peer_list(c, raw, "send_to", **kw)
    v["recv_from"] = _peer_list(c, raw, "recv_from", **kw)
    _qp_keys(c, v["qp"] or {})
    _cross_checks(c, v)
    if c.problems:
        raise JobSpecError(source, c.problems)
    if v["agent"] is None:
        v["agent"] = v["rank"]
    for key in ("world", "sizes", "send_to", "recv_from"):
        v[key] = tuple(v[key])
    return JobSpec(**v)


def load_job(path: str) -> JobSpec:
    """Read and validate the job-spec file at ``path``; raise JobSpecError."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except OSError as exc:
        raise JobSpecError(path, [f"cannot read: {exc.strerror or exc}"]) from None
    except json.JSONDecodeError as exc:
        raise JobSpecError(path, [f"line {exc.lineno} column {exc.colno}: {exc.msg}"]) from None
    return parse_job(raw, path)
