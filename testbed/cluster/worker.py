"""One server's shard, driven over a byte stream (the SSH channel of ``testbed worker``).

Protocol: JSON lines. Each request ``{"op": ..., ...}`` gets exactly one reply
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``, in order.

* ``build`` ``{"topology": file, "servers": file, "server": name, "placer": "pods"}`` (a file
  as shipped by the runner: ``{"name": its file name, "text": its YAML}``; the servers file's
  key files are not looked for here): load and validate both, place, and build this server's
  shard (:class:`testbed.fabric.local.Fabric` with a :class:`~testbed.fabric.local.Shard`; VXLAN ends
  from this process's namespace, which holds the server's underlay address). Reply
  ``{"timings", "nodes", "pid", "ledger"}``. Must come first.
* ``set_link`` ``{"link", "up"}``: this shard's end(s) of the link (both ends of a cut link
  are taken down, one by each server's worker: a tunnel has no carrier).
* ``reconverge`` ``{"failed": [link, ...]}``: recompute ECMP routes around them.
* ``counters``: ``{"links": [...]}``, :meth:`testbed.fabric.counters.LinkCounters.read` of this
  shard's link ends.
* ``link_flags`` ``{"link"}``: ``{"flags": {node: [IFF names]}}`` of this shard's ends.
* ``clock``: ``{"wall": time.time()}`` (the runner measures each server's offset).
* ``trace_send`` ``{"host", "tuple": {src, dst, proto, sport, dport}, "probes"}``: the
  path tracer's probe packets (:mod:`testbed.fabric.paths`) from a host of this shard.
* ``nft`` ``{"node", "cmds"}``: libnftables JSON commands in a node's namespace, ``{"rc", "out",
  "err"}``; ``htb`` ``{"link", "node", "rate_bps"}``: the HTB rate of a node's end of a link.
  The runner's :class:`testbed.faults.FaultInjector` drives faults through these two (it
  owns the fault state); the link counters then report the rate in force.
* ``probe_send`` ``{"pairs": [[src, dst], ...], "srv6", "ecmp"}``: one datagram per EV and
  per NIC pair from each pair's source host on this shard (:mod:`testbed.fabric.verify`'s wire
  format; ``probe_open`` first opens this shard's hosts' sockets, on every server before
  any sends);
  ``{"sent": [[src, dst, ev_id], ...]}``.
* ``probe_collect`` ``{"quiet_s", "timeout_s"}``: what arrived at this shard's hosts until
  ``quiet_s`` without an arrival; ``{"received": [...]}``. ``probe_close`` closes the sockets.
* ``agents_start`` ``{"jobs": [job spec, ...], "processes": null | N | 0}``: start the agents
  of these jobs (their hosts on this server; one process each, or N host runtimes, 0: one
  per core here) with a control socket of this worker's (:class:`testbed.cluster.relay.AgentRelay`);
  ``{"pids": {agent: pid}}``. From then on the worker also writes pushed lines, between
  replies: ``{"push": "agent", "line"}`` (an agent's message) and ``{"push": "exit", "rank",
  "code"}``. ``agents_send`` ``{"line", "rank": agent or null}``: a runner's message to one
  agent or all. ``agents_collect``: their samples files, logs, this server's CPU and the
  agents' scheduler records. ``agents_stop``: stop what still runs.
* ``stop``: tear down; the worker then exits.

End of input (the runner or its SSH connection died) and SIGTERM/SIGHUP tear the shard
down too; a worker killed outright leaves its ledger for ``testbed clean`` on its server.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)


class _Stop(Exception):
    pass


class Worker:
    """Serves one shard; see the module docstring."""

    def __init__(self) -> None:
        self.fabric = None
        self.counters = None
        self._probe_rx: dict = {}
        self._probe_tx: dict = {}
        self.agents = None
        self.workdir: Path | None = None
        self._wfile: BinaryIO | None = None
        self._wlock = threading.Lock()

    # -- ops -------------------------------------------------------------------
    def op_build(self, topology: dict, servers: dict, server: str, placer: str = "pods") -> dict:
        from testbed.fabric.local import Fabric, Shard
        from testbed.fabric.kernel import features
        from testbed.spec import load_topology
        from testbed.cluster.placement import place
        from testbed.cluster.servers import load_servers
        if self.fabric is not None:
            raise RuntimeError("already built")
        feats = features()
        topo = load_topology(self._shipped(topology), features=feats)
        cluster = load_servers(self._shipped(servers), check_keys=False)
        placement = place(topo, cluster.names, placer)
        self.fabric = Fabric(topo, have_netem=feats.netem, shard=Shard(server, placement, cluster, None))
        self.fabric.start()
        return {"timings": self.fabric.timings, "nodes": len(self.fabric.nodes), "pid": os.getpid(),
                "ledger": self.fabric.ledger.run_id if self.fabric.ledger else None}

    def _shipped(self, file: dict) -> Path:
        """A file the runner shipped (``{"name", "text"}``) written into this worker's private
        directory under its own name (so problems name it as the runner's copy does)."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="mrc-worker-"))
        name = Path(str(file["name"])).name
        if name in ("", ".", "..") or not name.endswith((".yaml", ".yml")):
            raise ValueError(f"shipped file name {file['name']!r}: expected a .yaml file name")
        (self.workdir / "spec").mkdir(mode=0o700, exist_ok=True)
        path = self.workdir / "spec" / name
        path.write_text(str(file["text"]))
        return path

    def op_set_link(self, link: str, up: bool) -> dict:
        self.fabric.set_link(link, up)
        return {}

    def op_reconverge(self, failed: list[str]) -> dict:
        self.fabric.reconverge(failed)
        return {}

    def op_counters(self) -> dict:
        from testbed.fabric.counters import LinkCounters
        self.counters = self.counters or LinkCounters(self.fabric)
        return {"links": self.counters.read()}

    def op_link_flags(self, link: str) -> dict:
        from testbed.fabric import routing
        from testbed.fabric.netlink import netns
        topo = self.fabric.topo
        lk = topo.link_by_name[link]
        out = {}
        for port in (lk.a, lk.b):
            if not self.fabric.is_local(port.node):
                continue
            with netns(self.fabric.nsfd(port.node)):
                index = routing.port_ifindex(topo, port.node, lk)
                flags = _flags(socket.if_indextoname(index))
            out[port.node] = flags
        return {"flags": out}

    def op_nft(self, node: str, cmds: list) -> dict:
        """nftables commands (libnftables JSON) in ``node``'s namespace: ``{"rc", "out", "err"}``."""
        if not self.fabric.is_local(node):
            raise KeyError(f"{node} is not on this server")
        rc, out, err = self.fabric.run_nft(node, cmds)
        return {"rc": rc, "out": out, "err": err}

    def op_htb(self, link: str, node: str, rate_bps: int) -> dict:
        """HTB rate of ``node``'s end of ``link``, bit/s (:meth:`testbed.fabric.local.Fabric.set_htb`)."""
        if not self.fabric.is_local(node):
            raise KeyError(f"{node} is not on this server")
        self.fabric.set_htb(link, node, int(rate_bps))
        return {}

    def op_trace_send(self, host: str, tuple: dict, probes: int) -> dict:
        from testbed.fabric.paths import FiveTuple, send_probes
        if not self.fabric.is_local(host):
            raise KeyError(f"{host} is not on this server")
        send_probes(self.fabric, host, FiveTuple(**tuple), probes)
        return {}

    def op_clock(self) -> dict:
        import time
        return {"wall": time.time()}

    def _probe_sockets(self) -> None:
        from testbed.fabric.verify import PROBE_PORT, _udp_socket
        if self._probe_rx:
            return
        for host in self.fabric.topo.hosts:
            if self.fabric.is_local(host.name):
                self._probe_rx[host.name] = _udp_socket(self.fabric, host.name, bind_port=PROBE_PORT)
                self._probe_tx[host.name] = _udp_socket(self.fabric, host.name, bind_port=None)

    def op_probe_open(self) -> dict:
        """Open the probe sockets of this shard's hosts (before any server sends)."""
        self._probe_sockets()
        return {}

    def op_probe_send(self, pairs: list, srv6: bool = True, ecmp: bool = True) -> dict:
        from testbed.fabric.verify import _send
        self._probe_sockets()
        topo, sent = self.fabric.topo, []
        for src, dst in pairs:
            if src not in self._probe_tx:
                continue
            keys = []
            if srv6:
                keys += [((src, dst, ev.ev_id), str(ev.address)) for ev in topo.evs(src, dst)]
            if ecmp:
                keys += [((src, dst, -1 - s.plane), str(d.address)) for s in topo.nics[src] for d in topo.nics[dst]
                         if s.plane == d.plane]
            for key, address in keys:
                _send(self._probe_tx[src], key, address)
                sent.append(list(key))
        return {"sent": sent}

    def op_probe_collect(self, quiet_s: float = 0.15, timeout_s: float = 2.0, expect: int | None = None) -> dict:
        from testbed.fabric.verify import collect
        self._probe_sockets()
        got = collect(self._probe_rx, expect=expect, timeout_s=timeout_s, quiet_s=quiet_s)
        return {"received": [list(key) for key in sorted(got)]}

    def op_probe_close(self) -> dict:
        for sock in [*self._probe_rx.values(), *self._probe_tx.values()]:
            sock.close()
        self._probe_rx.clear()
        self._probe_tx.clear()
        return {}

    def emit(self, obj: dict) -> None:
        """Write one line to the runner (a reply or a pushed line; thread-safe)."""
        data = json.dumps(obj).encode() + b"\n"
        with self._wlock:
            self._wfile.write(data)
            self._wfile.flush()

    def op_agents_start(self, jobs: list, processes: int | None = None) -> dict:
        from testbed.cluster.relay import AgentRelay
        if self.agents is not None:
            raise RuntimeError("agents already started (agents_stop first)")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="mrc-worker-"))
        self.agents = AgentRelay(self.fabric, self.workdir / f"agents-{len(os.listdir(self.workdir))}", self.emit)
        try:
            return {"pids": self.agents.start(jobs, processes)}
        except BaseException:
            self.op_agents_stop()
            raise

    def op_agents_send(self, line: str, rank: int | None = None) -> dict:
        self._need_agents().send(line, rank)
        return {}

    def op_agents_collect(self) -> dict:
        return self._need_agents().collect()

    def op_agents_stop(self) -> dict:
        if self.agents is not None:
            agents, self.agents = self.agents, None
            agents.stop()
        return {}

    def _need_agents(self):
        if self.agents is None:
            raise RuntimeError("no agents started")
        return self.agents

    def op_stop(self) -> dict:
        self.close()
        raise _Stop

    # -- loop ------------------------------------------------------------------
    def close(self) -> None:
        self.op_probe_close()
        self.op_agents_stop()
        if self.fabric is not None:
            self.fabric.stop()
            self.fabric = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def handle(self, request: dict) -> dict:
        op = request.pop("op", None)
        fn = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
        if fn is None:
            return {"ok": False, "error": f"unknown op {op!r}"}
        if op not in ("build", "stop") and self.fabric is None:
            return {"ok": False, "error": f"{op}: nothing built yet (send build first)"}
        try:
            return {"ok": True, **fn(**request)}
        except _Stop:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is a reply, the worker keeps serving
            log.debug("op %s failed", op, exc_info=True)
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def serve(self, rfile: BinaryIO, wfile: BinaryIO) -> None:
        self._wfile = wfile
        try:
            for line in rfile:
                try:
                    request = json.loads(line)
                    if not isinstance(request, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    reply = {"ok": False, "error": f"bad request: {exc}"}
                else:
                    try:
                        reply = self.handle(request)
                    except _Stop:
                        self.emit({"ok": True})
                        return
                self.emit(reply)
        finally:
            self.close()


def _flags(ifname: str) -> list[str]:
    """IFF_* names set on ``ifname`` in the current namespace (SIOCGIFFLAGS)."""
    import fcntl
    import struct
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", ifname.encode(), 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s.fileno(), 0x8913, req)[:18])[1]
    names = {0x1: "UP", 0x40: "RUNNING"}
    return [n for bit, n in names.items() if flags & bit]


def main() -> int:
    """``testbed worker``: serve stdin/stdout until stop or end of input."""
    worker = Worker()

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        worker.serve(sys.stdin.buffer, sys.stdout.buffer)
    finally:
        worker.close()
    return 0
