"""The runner's side of a fabric sharded over servers reached by SSH (``fabric``).

:class:`SshShardedFabric` starts one :class:`testbed.cluster.rpc.RemoteShard` per
server at once (a thread per connection, as ``fabric.ThreadingGroup`` runs its commands)
and offers the runner's fabric interface: link state and ECMP reconvergence on every
server holding an end of a link, nftables and HTB changes for a
:class:`testbed.faults.FaultInjector` (which keeps the fault state on this side), link
counters, reachability probes and path-tracing probes sent by the source host's worker,
each server's clock offset, and the agents (:class:`RemoteAgents`: started by each
server's worker, their control channel relayed, their times moved onto this machine's
clock, their records fetched at the end;
:mod:`testbed.cluster.remote_agents`). ``stop`` asks every worker to tear down and
closes the connections in a ``finally``; a worker whose connection drops (the runner
killed) tears its agents and shard down on end of input.
:func:`ssh_fabric_factory` is what ``testbed run --servers`` uses.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from testbed.cluster.remote_agents import RemoteAgents
from testbed.cluster.rpc import RemoteShard, connect
from testbed.fabric.backend import register_backend
from testbed.model.cluster import Cluster, Placement
from testbed.model.topology import Topology


def _ship(path: str | Path) -> dict:
    """A spec file as the workers receive it: its name and YAML text (they need no copy)."""
    return {"name": Path(path).name, "text": Path(path).read_text()}


@register_backend("ssh")
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
    _down: set[str] = field(default_factory=set)
    _rates_bps: dict[str, int] = field(default_factory=dict)
    have_netem: bool = False   # shaping is the workers'; netem is never needed here
    clocks: dict[str, dict] = field(default_factory=dict)
    """Each server's clock offset from this machine's at the last :meth:`start_agents`
    (:meth:`clock_offsets`)."""

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
                spec = {"topology": _ship(self.topology_path), "servers": _ship(self.servers_path)}
                built = list(pool.map(lambda sh: sh.call("build", **spec, server=sh.server.name,
                                                         placer=self.placer), shards))
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
        (self._down.discard if up else self._down.add)(link)

    def link_flags(self, link: str) -> dict[str, list[str]]:
        out = {}
        for server in self._servers_of(link):
            out.update(self.shards[server].call("link_flags", link=link)["flags"])
        return out

    def run_nft(self, node: str, cmds: list[dict]) -> tuple[int, object, str]:
        """libnftables JSON ``cmds`` in ``node``'s namespace, by its server's worker: (rc, output,
        error text), as :func:`testbed.fabric.nft.run_binding`. What a
        :class:`testbed.faults.FaultInjector` of this fabric runs its loss and blackhole rules with."""
        reply = self.shards[self.placement.where[node]].call("nft", node=node, cmds=cmds)
        return reply["rc"], reply["out"], reply["err"]

    def set_htb(self, link: str, node: str, rate_bps: int) -> None:
        """The HTB rate (bit/s) of ``node``'s end of ``link``, by its server's worker (what a
        :class:`testbed.faults.FaultInjector` of this fabric changes rates with)."""
        self.shards[self.placement.where[node]].call("htb", link=link, node=node, rate_bps=rate_bps)
        lk = self.topo.link_by_name[link]
        if rate_bps == lk.params.rate_bps:
            self._rates_bps.pop(link, None)
        else:
            self._rates_bps[link] = rate_bps

    def link_rate_bps(self, link) -> int:
        return self._rates_bps.get(link.name, link.params.rate_bps)

    def is_local(self, node: str) -> bool:
        """Every node is this fabric's (its workers act on each server's own nodes)."""
        return True

    def host_pid(self, node: str) -> int:
        """No namespace of this machine holds a node: KeyError naming its server (the workers
        start the agents: :meth:`start_agents`)."""
        raise KeyError(f"{node} lives on server {self.placement.where.get(node, '?')}, not on this machine")

    def popen(self, node: str, argv: list[str], **kwargs):
        """KeyError as :meth:`host_pid`: a process inside ``node`` is started by its server's worker."""
        self.host_pid(node)

    @property
    def switch_handles(self) -> dict:
        """Empty: the switch programs are held by the workers."""
        return {}

    @property
    def links_down(self) -> frozenset[str]:
        return frozenset(self._down)

    def reconverge(self, failed=None) -> None:
        """ECMP routes around ``failed`` (default: the links now down) on every server."""
        failed = sorted(self._down if failed is None else failed)
        for shard in self.shards.values():
            shard.call("reconverge", failed=failed)

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
        """:func:`testbed.fabric.verify.probe` across servers: each round's datagrams leave from the
        workers of their source hosts, and every worker reports what reached its hosts.
        Returns a :class:`testbed.fabric.verify.Reachability` (``evs`` from the topology)."""
        from testbed.fabric.verify import Reachability, _rounds
        hosts = [h.name for h in self.topo.hosts]
        pairs = list(pairs) if pairs is not None else [(a, b) for a in hosts for b in hosts if a != b]
        result = Reachability()
        t0 = time.perf_counter()
        try:
            for shard in self.shards.values():   # every receiver listens before anything is sent
                shard.call("probe_open")
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

    def start_agents(self, jobs: list[dict], processes: int | None = 0) -> RemoteAgents:
        """Start ``jobs``' agents on their hosts' servers (:class:`RemoteAgents`; ``processes``
        as there), with the clock offsets measured at this call."""
        self.clocks = self.clock_offsets()
        return RemoteAgents(self, jobs, {name: c["offset_s"] for name, c in self.clocks.items()}, processes)

    def link_counters(self):
        """An object whose ``read()`` is :meth:`counters` (what :class:`testbed.fabric.paths.Tracer`
        and the runner read)."""
        fabric = self

        class _Counters:
            def read(self) -> list[dict]:
                return fabric.counters()
        return _Counters()

    def send_trace_probes(self, host: str, t, probes: int) -> None:
        """:class:`testbed.fabric.paths.Tracer`'s probe packets from ``host``, by its server's worker."""
        from dataclasses import asdict
        self.shards[self.placement.where[host]].call("trace_send", host=host, tuple=asdict(t), probes=probes)

    def counters(self) -> list[dict]:
        """Every link end's counters (:meth:`testbed.fabric.counters.LinkCounters.read` records)."""
        out = []
        for shard in self.shards.values():
            out += shard.call("counters")["links"]
        for rec in out:   # the rate in force is what this side set
            rec["rate_bps"] = self.link_rate_bps(self.topo.link_by_name[rec["link"]])
        return out



def ssh_fabric_factory(topo: Topology, topology_path: str, servers_path: str, placer: str = "pods"):
    """``(fabric_factory, problems)`` for :func:`testbed.run.run_scenario`: every transport's
    fabric spread over the servers of ``servers_path`` by their workers
    (:class:`SshShardedFabric`, placed by ``placer``). ``problems`` (a servers file that does
    not validate, a placement its tunnels cannot carry; :class:`testbed.spec.Problem`) come
    before anything is built; with problems the factory is None."""
    from testbed.spec import SpecError
    from testbed.cluster.servers import load_servers
    from testbed.cluster.vxlan import checked_placement
    try:
        cluster = load_servers(servers_path)
    except SpecError as exc:
        return None, list(exc.problems)
    placement, problems = checked_placement(topo, cluster, placer, str(topology_path))
    if problems:
        return None, problems
    return (lambda t, netem: SshShardedFabric(t, topology_path, servers_path, cluster, placement, placer)), []

