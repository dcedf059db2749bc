"""The agent's job spec (JSON written by the runner): strict parse into frozen dataclasses.

Every problem is collected and reported together as one :class:`JobSpecError`
naming the key path (``next.evs[2].address: expected a string``). Unknown
keys are rejected. The format is documented in :mod:`agents.__main__`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from agents.protocol import TCP_PORT, TRANSPORTS, UDP_PORT


QP_ATTR_KEYS = {"mpr": "mpr", "mpr_dest": "mpr_dest", "max_wimm": "max_wimm",
                "max_wimm_dest": "max_wimm_dest", "timeout": "timeout",
                "retry_linear": "retry_linear_cnt", "retry_exp": "retry_exp_cnt"}
"""Job-spec ``qp`` keys -> :class:`agents.mrc.QPAttr` fields (OCP MRC 1.0, mrc.h)."""
QP_CONFIG_KEYS = {"time_scale": float, "min_rto_s": float, "sack_every": int,
                  "ack_delay_s": float, "reorder_threshold": int, "probe_interval_s": float,
                  "probe_timeout_s": float, "probe_successes": int, "skip_timeout_s": float,
                  "cc": str, "cc_params": dict, "max_burst": int}
"""Job-spec ``qp`` keys -> :class:`agents.mrc.QPConfig` fields (emulation parameters)."""


class JobSpecError(ValueError):
    """The job spec is unreadable or invalid; ``problems`` lists every ``key: message``."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"bad job spec {source}: " + "; ".join(problems))


@dataclass(frozen=True)
class EVSpec:
    """One EV: ``ev_id`` (u32), destination ``address`` (a uSID address ending at the peer,
    or its ECMP address), the fabric ``links`` it crosses, optional UDP ``src_port`` (ECMP)."""

    ev_id: int
    address: str
    links: tuple[str, ...] = ()
    src_port: int | None = None


@dataclass(frozen=True)
class PeerSpec:
    """A ring neighbour: ``host``, ``ecmp_addr``, ``evs`` (paths that end at it), and its
    UDP ``port``/TCP ``tcp_port`` (None: same as ours; loopback tests give each agent its own).
    ``src_port`` (``next`` only): the TCP source port to connect from (seeded by the runner so
    that one seed gives one set of ECMP paths; None: the kernel's ephemeral choice)."""

    host: str
    ecmp_addr: str
    evs: tuple[EVSpec, ...]
    port: int | None = None
    tcp_port: int | None = None
    src_port: int | None = None


@dataclass(frozen=True)
class JobSpec:
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
    next: PeerSpec
    prev: PeerSpec
    bind_addr: str
    sample_interval_s: float = 0.01
    port: int = UDP_PORT
    mtu: int = 1500
    tcp_port: int = TCP_PORT
    qp: dict = field(default_factory=dict)
    connect_timeout_s: float = 10.0
    linger_s: float = 2.0

    @property
    def world_size(self) -> int:
        return len(self.world)

    def qp_attr_kwargs(self) -> dict:
        """``qp`` keys that are mrc.h QP attributes, under QPAttr field names."""
        return {QP_ATTR_KEYS[k]: v for k, v in self.qp.items() if k in QP_ATTR_KEYS}

    def qp_config_kwargs(self) -> dict:
        """``qp`` keys that are emulation parameters (QPConfig fields)."""
        return {k: v for k, v in self.qp.items() if k in QP_CONFIG_KEYS}


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


_TOP = {"run_id", "rank", "world", "host", "transport", "control_socket", "seed", "sizes",
        "iterations", "warmup", "sample_interval_s", "port", "mtu", "next", "prev",
        "bind_addr", "qp", "tcp_port", "connect_timeout_s", "linger_s"}
_PEER = {"host", "ecmp_addr", "evs", "port", "tcp_port", "src_port"}
_EV = {"ev_id", "address", "links", "src_port"}


def _port(v) -> bool:
    return 0 < v < 65536


def _peer(c: _Checker, obj, path: str, need_evs: bool) -> PeerSpec | None:
    if not isinstance(obj, dict):
        c.problems.append(f"{path}: expected an object")
        return None
    c.unknown(obj, _PEER, path)
    evs = []
    raw_evs = c.get(obj, "evs", path, list, default=[])
    for i, ev in enumerate(raw_evs or []):
        p = f"{path}.evs[{i}]"
        if not isinstance(ev, dict):
            c.problems.append(f"{p}: expected an object")
            continue
        c.unknown(ev, _EV, p)
        ev_id = c.get(ev, "ev_id", p, int, check=lambda v: 0 <= v <= 0xFFFFFFFF, why="not a u32")
        address = c.get(ev, "address", p, str)
        links = c.get(ev, "links", p, list, default=[])
        src_port = c.get(ev, "src_port", p, int, default=None, check=_port, why="not a port")
        if ev_id is not None and address is not None:
            evs.append(EVSpec(ev_id, address, tuple(map(str, links or [])), src_port))
    if need_evs and not raw_evs:
        c.problems.append(f"{path}.evs: at least one EV is needed for this transport")
    if len({e.ev_id for e in evs}) != len(evs):
        c.problems.append(f"{path}.evs: duplicate ev_id")
    host = c.get(obj, "host", path, str)
    ecmp = c.get(obj, "ecmp_addr", path, str)
    port = c.get(obj, "port", path, int, default=None, check=_port, why="not a port")
    tcp_port = c.get(obj, "tcp_port", path, int, default=None, check=_port, why="not a port")
    src_port = c.get(obj, "src_port", path, int, default=None, check=_port, why="not a port")
    if host is None or ecmp is None:
        return None
    return PeerSpec(host, ecmp, tuple(evs), port, tcp_port, src_port)


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
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in v),
            why="needs positive integer byte sizes"),
        "iterations": g(raw, "iterations", "", int, **pos),
        "warmup": g(raw, "warmup", "", int, check=lambda v: v >= 0, why="must be >= 0"),
        "bind_addr": g(raw, "bind_addr", "", str),
        "sample_interval_s": g(raw, "sample_interval_s", "", float, default=0.01, **pos),
        "port": g(raw, "port", "", int, default=UDP_PORT, check=_port, why="not a port"),
        "mtu": g(raw, "mtu", "", int, default=1500, check=lambda v: 1280 <= v <= 65535,
                 why="must be in [1280, 65535] (IPv6)"),
        "tcp_port": g(raw, "tcp_port", "", int, default=TCP_PORT, check=_port, why="not a port"),
        "qp": g(raw, "qp", "", dict, default={}),
        "connect_timeout_s": g(raw, "connect_timeout_s", "", float, default=10.0, **pos),
        "linger_s": g(raw, "linger_s", "", float, default=2.0,
                      check=lambda v: v >= 0, why="must be >= 0"),
    }
    need_evs = v["transport"] in ("mrc", "rc")
    for side in ("next", "prev"):
        if side not in raw:
            c.problems.append(f"{side}: missing")
            v[side] = None
        else:
            v[side] = _peer(c, raw[side], side, need_evs)
    for key, value in (v["qp"] or {}).items():
        if key in QP_ATTR_KEYS:
            if not isinstance(value, int) or isinstance(value, bool):
                c.problems.append(f"qp.{key}: expected int, got {value!r}")
        elif key in QP_CONFIG_KEYS:
            want = QP_CONFIG_KEYS[key]
            ok = isinstance(value, want) or want is float and isinstance(value, int)
            if not ok or isinstance(value, bool):
                c.problems.append(f"qp.{key}: expected {want.__name__}, got {value!r}")
        else:
            c.problems.append(f"qp.{key}: unknown key")
    world, rank = v["world"], v["rank"]
    if world and rank is not None:
        n = len(world)
        if rank >= n:
            c.problems.append(f"rank: {rank} outside world of {n}")
        else:
            if v["host"] is not None and v["host"] != world[rank]:
                c.problems.append(f"host: {v['host']!r} is not world[{rank}] = {world[rank]!r}")
            for side, other in (("next", world[(rank + 1) % n]), ("prev", world[(rank - 1) % n])):
                if v[side] is not None and v[side].host != other:
                    c.problems.append(f"{side}.host: {v[side].host!r}, the ring says {other!r}")
        for size in v["sizes"] or []:
            if size // 4 < n:
                c.problems.append(f"sizes: {size} bytes is fewer float32 elements than {n} ranks")
    if c.problems:
        raise JobSpecError(source, c.problems)
    v["world"] = tuple(world)
    v["sizes"] = tuple(v["sizes"])
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
