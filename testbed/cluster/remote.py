"""The runner's side of a fabric sharded over servers reached by SSH (``fabric``).

:class:`RemoteShard` starts ``testbed worker`` on one server over an SSH channel
(``fabric.Connection``: paramiko underneath) and calls it (JSON lines, see
:mod:`testbed.cluster.worker`). :class:`SshShardedFabric` starts one per server at once
(a thread per connection, as ``fabric.ThreadingGroup`` runs its commands), routes link
faults to both servers of a cut link and gathers the link counters; ``stop`` asks every
worker to tear down and closes the connections in a ``finally``. A worker whose
connection drops (the runner killed) tears its shard down on end of input.

Not yet: agents, path tracing and reachability probes across servers, records and clock
offsets (the runner cannot drive a scenario through this yet).
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..topology import Topology
from .placement import Placement
from .servers import Cluster, Server

REPO = Path(__file__).resolve().parents[2]


class RemoteError(RuntimeError):
    """A worker refused a request, or its channel closed."""


def connect(server: Server, **connect_kwargs):
    """``fabric.Connection`` to ``server`` (its user, port and key; ``connect_kwargs`` are
    paramiko's, e.g. ``sock=`` a socket already connected)."""
    from fabric import Connection
    kwargs = {"look_for_keys": server.key is None, "allow_agent": server.key is None, **connect_kwargs}
    if server.key:
        kwargs["key_filename"] = server.key
    return Connection(str(server.address), user=server.user, port=server.port, connect_kwargs=kwargs)


class RemoteShard:
    """``testbed worker`` on ``server`` over ``connection``; :meth:`call` sends one request."""

    def __init__(self, server: Server, connection, *, timeout_s: float = 120.0):
        self.server = server
        self.connection = connection
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        connection.open()
        self.channel = connection.client.get_transport().open_session()
        self.channel.settimeout(timeout_s)
        repo = server.repo or str(REPO)
        python = server.python or sys.executable
        self.channel.exec_command(f"cd {shlex.quote(repo)} && exec {shlex.quote(python)} -m testbed worker")
        self._rfile = self.channel.makefile("rb")
        self._wfile = self.channel.makefile_stdin("wb")

    def call(self, op: str, **args) -> dict:
        """One request; the reply without ``ok``. Raises RemoteError naming the server."""
        with self._lock:
            self._wfile.write(json.dumps({"op": op, **args}).encode() + b"\n")
            self._wfile.flush()
            line = self._rfile.readline()
        if not line:
            err = self.channel.recv_stderr(65536).decode(errors="replace") if self.channel.recv_stderr_ready() else ""
            raise RemoteError(f"{self.server.name}: worker gone during {op} "
                              f"(exit {self.channel.exit_status if self.channel.exit_status_ready() else '?'})"
                              + (f": {err.strip()[-500:]}" if err else ""))
        reply = json.loads(line)
        if not reply.pop("ok", False):
            raise RemoteError(f"{self.server.name}: {op}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        try:
            self.channel.close()
        finally:
            self.connection.close()


@dataclass
class SshShardedFabric:
    """``topo`` (read from ``topology_path``) placed over ``cluster`` (read from
    ``servers_path``; each worker reads the same two files) with ``placement``;
    ``connect_to(server)`` -> a ``fabric.Connection`` (default :func:`connect`)."""

    topo: Topology
    topology_path: str
    servers_path: str
    cluster: Cluster
    placement: Placement
    placer: str = "pods"
    connect_to: Callable = connect
    shards: dict[str, RemoteShard] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    built: dict[str, dict] = field(default_factory=dict)

    def __enter__(self) -> "SshShardedFabric":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "SshShardedFabric":
        """Connect, start every worker and build every shard at once; on any failure stop
        what was started and re-raise. ``timings``: seconds per phase of the slowest
        shard, ``total`` the wall-clock time of the whole bring-up."""
        t0 = time.perf_counter()
        servers = [self.cluster.server(s) for s in self.placement.servers]
        try:
            with ThreadPoolExecutor(max_workers=len(servers)) as pool:
                shards = list(pool.map(lambda s: RemoteShard(s, self.connect_to(s)), servers))
                self.shards = {sh.server.name: sh for sh in shards}
                built = list(pool.map(lambda sh: sh.call("build", topology=str(self.topology_path),
                                                         servers=str(self.servers_path),
                                                         server=sh.server.name, placer=self.placer), shards))
        except BaseException:
            self.stop()
            raise
        self.built = {sh.server.name: b for sh, b in zip(shards, built)}
        for b in built:
            for phase, secs in b["timings"].items():
                self.timings[phase] = max(self.timings.get(phase, 0.0), secs)
        self.timings["total"] = time.perf_counter() - t0
        return self

    def stop(self) -> None:
        """Ask each worker to tear down, then close its connection (in a ``finally``)."""
        for name, shard in list(self.shards.items()):
            try:
                shard.call("stop")
            except Exception:  # noqa: BLE001 - a worker already gone tears down on end of input
                pass
            finally:
                shard.close()
                del self.shards[name]

    def _servers_of(self, link: str) -> list[str]:
        """Servers holding an end of ``link``; KeyError for an unknown link."""
        lk = self.topo.link_by_name[link]
        return sorted({self.placement.where[lk.a.node], self.placement.where[lk.b.node]})

    def set_link(self, link: str, up: bool) -> None:
        """Down or up on every server holding an end (both, for a cut link)."""
        for server in self._servers_of(link):
            self.shards[server].call("set_link", link=link, up=up)

    def link_flags(self, link: str) -> dict[str, list[str]]:
        out = {}
        for server in self._servers_of(link):
            out.update(self.shards[server].call("link_flags", link=link)["flags"])
        return out

    def fault(self, kind: str, link: str, value=None) -> None:
        """Loss (%), clear_loss, blackhole (bool) or rate (bit/s, None: the topology's) on
        ``link``, applied by the worker of each server holding an end."""
        for server in self._servers_of(link):
            self.shards[server].call("fault", kind=kind, link=link, value=value)

    def fault_counters(self) -> dict[str, dict]:
        """nftables drops per faulted link, both servers' ends summed."""
        out: dict[str, dict] = {}
        for shard in self.shards.values():
            for link, c in shard.call("fault_counters")["counters"].items():
                tot = out.setdefault(link, {k: 0 for k in c})
                for k, v in c.items():
                    tot[k] = tot.get(k, 0) + v
        return out

    def reconverge(self, failed: list[str]) -> None:
        for shard in self.shards.values():
            shard.call("reconverge", failed=list(failed))

    def clock_offsets(self, samples: int = 5) -> dict[str, dict]:
        """Each server's wall-clock offset from this machine's, s: the sample with the least
        round trip (NTP's rule, RFC 5905 §10), offset = remote - midpoint of the round trip,
        uncertain by half of it. ``{server: {"offset_s", "rtt_s"}}``."""
        out = {}
        for name, shard in self.shards.items():
            best = None
            for _ in range(samples):
                t0 = time.time()
                wall = shard.call("clock")["wall"]
                t1 = time.time()
                if best is None or t1 - t0 < best[1]:
                    best = (wall - (t0 + t1) / 2, t1 - t0)
            out[name] = {"offset_s": best[0], "rtt_s": best[1]}
        return out

    def probe(self, pairs: list[tuple[str, str]] | None = None, *, srv6: bool = True, ecmp: bool = True,
              quiet_s: float = 0.15, timeout_s: float = 2.0):
        """:func:`testbed.verify.probe` across servers: each round's datagrams leave from the
        workers of their source hosts, and every worker reports what reached its hosts.
        Returns a :class:`testbed.verify.Reachability` (``evs`` from the topology)."""
        from ..verify import Reachability, _rounds
        hosts = [h.name for h in self.topo.hosts]
        pairs = list(pairs) if pairs is not None else [(a, b) for a in hosts for b in hosts if a != b]
        result = Reachability()
        t0 = time.perf_counter()
        try:
            for round_pairs in _rounds(pairs):
                expect = {name: 0 for name in self.shards}
                for shard in self.shards.values():
                    for key in shard.call("probe_send", pairs=round_pairs, srv6=srv6, ecmp=ecmp)["sent"]:
                        result.sent.add(tuple(key))
                        expect[self.placement.where[key[1]]] += 1
                for name, shard in self.shards.items():   # returns once all its hosts' datagrams came
                    for key in shard.call("probe_collect", quiet_s=quiet_s, timeout_s=timeout_s,
                                          expect=expect[name])["received"]:
                        result.received.add(tuple(key))
        finally:
            for shard in self.shards.values():
                shard.call("probe_close")
        if srv6:
            for src, dst in pairs:
                for ev in self.topo.evs(src, dst):
                    result.evs[(src, dst, ev.ev_id)] = ev
        result.seconds = time.perf_counter() - t0
        return result

    def link_counters(self):
        """An object whose ``read()`` is :meth:`counters` (what :class:`testbed.paths.Tracer`
        and the runner read)."""
        fabric = self

        class _Counters:
            def read(self) -> list[dict]:
                return fabric.counters()
        return _Counters()

    def send_trace_probes(self, host: str, t, probes: int) -> None:
        """:class:`testbed.paths.Tracer`'s probe packets from ``host``, by its server's worker."""
        from dataclasses import asdict
        self.shards[self.placement.where[host]].call("trace_send", host=host, tuple=asdict(t), probes=probes)

    def counters(self) -> list[dict]:
        """Every link end's counters (:meth:`testbed.counters.LinkCounters.read` records)."""
        out = []
        for shard in self.shards.values():
            out += shard.call("counters")["links"]
        return out
