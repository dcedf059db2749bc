"""The runner's side of a fabric sharded over servers reached by SSH (``fabric``).

:class:`RemoteShard` starts ``testbed worker`` on one server over an SSH channel
(``fabric.Connection``: paramiko underneath) and calls it (JSON lines, see
:mod:`testbed.cluster.worker`); a reader thread separates the replies from the lines the
worker pushes (its agents' messages and exits). :class:`SshShardedFabric` starts one per
server at once (a thread per connection, as ``fabric.ThreadingGroup`` runs its commands)
and offers the runner's fabric interface: link state and ECMP reconvergence on every
server holding an end of a link, nftables and HTB changes for a
:class:`testbed.faults.FaultInjector` (which keeps the fault state on this side), link
counters, reachability probes and path-tracing probes sent by the source host's worker,
each server's clock offset, and the agents (:class:`RemoteAgents`: started by each
server's worker, their control channel relayed, their times moved onto this machine's
clock, their records fetched at the end). ``stop`` asks every worker to tear down and
closes the connections in a ``finally``; a worker whose connection drops (the runner
killed) tears its agents and shard down on end of input.
:func:`ssh_fabric_factory` is what ``testbed run --servers`` uses.
"""

from __future__ import annotations

import json
import logging
import queue
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from testbed.model.topology import Topology
from testbed.model.cluster import Placement
from testbed.model.cluster import Cluster, Server
from testbed.model.errors import TestbedFailure

REPO = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


def _ship(path: str | Path) -> dict:
    """A spec file as the workers receive it: its name and YAML text (they need no copy)."""
    return {"name": Path(path).name, "text": Path(path).read_text()}


class RemoteError(TestbedFailure):
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
    """``testbed worker`` on ``server`` over ``connection``; :meth:`call` sends one request.

    A reader thread takes the worker's lines: replies go to the caller waiting in
    :meth:`call`, pushed lines (``{"push": ...}``: the agents' messages and exits) to
    ``on_push(server_name, line)`` (set it before agents start; unset: dropped)."""

    def __init__(self, server: Server, connection, *, timeout_s: float = 120.0):
        self.server = server
        self.connection = connection
        self.timeout_s = timeout_s
        self.on_push: Callable[[str, dict], None] | None = None
        self._lock = threading.Lock()
        self._replies: queue.Queue = queue.Queue()
        connection.open()
        self.channel = connection.client.get_transport().open_session()
        repo = server.repo or str(REPO)
        python = server.python or sys.executable
        self.channel.exec_command(f"cd {shlex.quote(repo)} && exec {shlex.quote(python)} -m testbed worker")
        self._rfile = self.channel.makefile("rb")
        self._wfile = self.channel.makefile_stdin("wb")
        self._reader = threading.Thread(target=self._read, name=f"worker-{server.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self._rfile:
                msg = json.loads(line)
                if "push" in msg:
                    if self.on_push is not None:
                        self.on_push(self.server.name, msg)
                else:
                    self._replies.put(msg)
        except Exception as exc:  # noqa: BLE001 - a broken channel ends the worker for the caller
            log.debug("%s: worker channel: %s", self.server.name, exc)
        finally:
            self._replies.put(None)   # end of output: every waiting and later call fails
            if self.on_push is not None:
                self.on_push(self.server.name, {"push": "gone"})

    def call(self, op: str, **args) -> dict:
        """One request; the reply without ``ok``. Raises RemoteError naming the server."""
        with self._lock:
            try:
                self._wfile.write(json.dumps({"op": op, **args}).encode() + b"\n")
                self._wfile.flush()
            except OSError as exc:
                raise RemoteError(f"{self.server.name}: worker gone before {op}: {exc}") from None
            try:
                reply = self._replies.get(timeout=self.timeout_s)
            except queue.Empty:
                raise RemoteError(f"{self.server.name}: no reply to {op} within {self.timeout_s:g} s") from None
            if reply is None:
                self._replies.put(None)
        if reply is None:
            err = self.channel.recv_stderr(65536).decode(errors="replace") if self.channel.recv_stderr_ready() else ""
            raise RemoteError(f"{self.server.name}: worker gone during {op} "
                              f"(exit {self.channel.exit_status if self.channel.exit_status_ready() else '?'})"
                              + (f": {err.strip()[-500:]}" if err else ""))
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


class RemoteProcess:
    """An agent on a server, as the runner's process checks see it: ``pid`` (on its server)
    and :meth:`poll` (its exit status once its worker pushed it, else None)."""

    def __init__(self, pid: int, server: str):
        self.pid, self.server = pid, server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class RemoteAgents:
    """A run's agents started by the workers of ``fabric`` (each job on its host's server), as
    the runner sees them: the :class:`testbed.run.control.ControlServer` calls (:meth:`poll`,
    :meth:`send`, :meth:`broadcast`, :meth:`close`) and ``procs`` ({agent: RemoteProcess}).

    ``processes``: how each server runs its agents (None one process per agent, N host
    runtimes, 0 one runtime per core of that server). ``offsets``: each server's clock
    offset from this machine's, s
    (:meth:`SshShardedFabric.clock_offsets`); every time an agent reports (a sample's ``t``, an
    event's ``t``, an iteration's ``t_start``/``t_end``) is moved onto this machine's clock
    (t - offset), so records from every server share one timeline. A worker that goes away
    makes its agents exit with status -1 (the runner reports them ``crashed``).
    """

    GONE = -1

    def __init__(self, fabric: "SshShardedFabric", jobs: list[dict], offsets: dict[str, float],
                 processes: int | None = 0):
        from agents.protocol import AGENT_MESSAGES, LineFramer
        self.fabric, self.offsets = fabric, offsets
        self._inbox: queue.Queue = queue.Queue()
        self._framers = {name: LineFramer(AGENT_MESSAGES) for name in fabric.shards}
        self.where = {job["agent"]: fabric.placement.where[job["host"]] for job in jobs}
        self.procs: dict[int, RemoteProcess] = {}
        for shard in fabric.shards.values():
            shard.on_push = self._on_push
        by_server = {name: [j for j in jobs if self.where[j["agent"]] == name] for name in fabric.shards}
        try:
            with ThreadPoolExecutor(max_workers=len(by_server)) as pool:
                started = dict(zip(by_server, pool.map(
                    lambda name: fabric.shards[name].call("agents_start", jobs=by_server[name],
                                                          processes=processes)["pids"]
                    if by_server[name] else {}, by_server)))
        except BaseException:
            self.close()
            raise
        for name, pids in started.items():
            for rank, pid in pids.items():
                self.procs[int(rank)] = RemoteProcess(pid, name)

    def _on_push(self, server: str, push: dict) -> None:   # a worker's reader thread
        self._inbox.put((server, push))

    def poll(self, timeout_s: float) -> list:
        """The agents' messages that arrive within ``timeout_s`` (after the first, no waiting),
        times on this machine's clock; exits update ``procs``."""
        out: list = []
        try:
            item = self._inbox.get(timeout=max(timeout_s, 0.0)) if timeout_s > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return out
        while item is not None:
            self._take(*item, out)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                item = None
        return out

    def _take(self, server: str, push: dict, out: list) -> None:
        from agents.protocol import ProtocolError
        kind = push.get("push")
        if kind == "agent":
            try:
                msgs = self._framers[server].feed(str(push["line"]).encode())
            except ProtocolError as exc:
                log.warning("%s: a relayed agent message was not one: %s", server, exc)
                msgs = exc.messages
            out.extend(self._on_clock(msg, self.offsets.get(server, 0.0)) for msg in msgs)
        elif kind == "exit":
            proc = self.procs.get(int(push["rank"]))
            if proc is not None:
                proc.returncode = int(push["code"])
        elif kind == "gone":
            for proc in self.procs.values():
                if proc.server == server and proc.returncode is None:
                    proc.returncode = self.GONE

    @staticmethod
    def _on_clock(msg, offset_s: float):
        import dataclasses
        if not offset_s:
            return msg
        moved = {f: getattr(msg, f) - offset_s for f in ("t", "t_start", "t_end") if hasattr(msg, f)}
        return dataclasses.replace(msg, **moved) if moved else msg

    def send(self, rank: int, msg) -> bool:
        from agents.protocol import encode
        try:
            self.fabric.shards[self.where[rank]].call("agents_send", line=encode(msg).decode(), rank=rank)
            return True
        except (KeyError, RemoteError):
            return False

    def broadcast(self, msg) -> None:
        """``msg`` to every agent, each server's at once (one request per server, in parallel)."""
        from agents.protocol import encode
        line = encode(msg).decode()
        names = sorted(set(self.where.values()))
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            for name, exc in zip(names, pool.map(lambda n: _try(self.fabric.shards[n].call, "agents_send",
                                                                line=line, rank=None), names)):
                if exc is not None:
                    log.warning("%s: %s", name, exc)

    def collect(self, transport_dir: Path) -> dict[str, dict]:
        """Fetch every server's records into ``transport_dir`` as one machine's run leaves them:
        ``samples/rank<a>.jsonl`` and ``logs/rank<a>.log`` per agent (times moved onto this
        clock). Returns ``{server: {"cpu": [records], "sched": [records]}}`` (moved too; each CPU
        record tagged with its ``server``). A server that cannot answer is logged and skipped."""
        from testbed.rundir import names as records
        from testbed.rundir import write as rundir_write
        out = {}
        for name in sorted(set(self.where.values())):
            try:
                got = self.fabric.shards[name].call("agents_collect")
            except RemoteError as exc:
                log.warning("records of %s: %s", name, exc)
                continue
            offset = self.offsets.get(name, 0.0)
            for rank, files in got["ranks"].items():
                rank = int(rank)
                path = rundir_write.samples_file(transport_dir, rank)
                path.parent.mkdir(records.DIR_MODE, parents=True, exist_ok=True)
                path.write_text("".join(_moved_line(line, offset) for line in files["samples"].splitlines(True)))
                log_path = rundir_write.agent_log(transport_dir, rank)
                log_path.parent.mkdir(records.DIR_MODE, parents=True, exist_ok=True)
                log_path.write_text(files["log"])
            out[name] = {kind: [json.loads(_moved_line(line, offset)) for line in got[kind].splitlines()
                                if line.strip()] for kind in ("cpu", "sched")}
            for rec in out[name]["cpu"]:
                rec["server"] = name
        return out

    def close(self) -> None:
        """Stop what still runs on every server (agents_stop); errors are logged."""
        for name, shard in list(self.fabric.shards.items()):
            exc = _try(shard.call, "agents_stop")
            if exc is not None:
                log.warning("%s: agents_stop: %s", name, exc)
            shard.on_push = None


def _try(fn, *args, **kwargs) -> Exception | None:
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the caller logs it
        return exc
    return None


def _moved_line(line: str, offset_s: float) -> str:
    """A JSON-lines record with its ``t`` moved by ``-offset_s``; a line that is not a JSON
    object with a number ``t`` (a killed agent's torn last line) is kept as it is."""
    if not offset_s:
        return line
    try:
        obj = json.loads(line)
        obj["t"] = float(obj["t"]) - offset_s
    except (ValueError, TypeError, KeyError):
        return line
    return json.dumps(obj) + "\n"


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

