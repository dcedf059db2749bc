"""A topology turned into a running Mininet fabric: nodes, veths, sysctls, tc, routes.

Hosts are Mininet ``Host``s and switches Mininet ``Node``s acting as IPv6
routers (no OVS, no controller). Each node is a Mininet shell in its own
network namespace; the shells are spawned together and then awaited, instead
of one after another (:mod:`testbed.fabric.nodes`). Kernel state goes through netlink
(pyroute2-compiled batches, :mod:`testbed.fabric.netlink`), one batch per namespace per phase:

1. ``nodes``   spawn every node's shell (its PID and namespace go to the ledger)
2. ``sysctls`` forwarding, seg6, L4 multipath hash, per-router hash seed,
               ``ignore_routes_with_linkdown``, no DAD (written before links exist)
3. ``links``   every veth pair created straight into its two namespaces, with
               pinned ifindexes and MACs, GSO off (``gso_max_segs 1``) so
               queues count real packets
4. ``config``  addresses, permanent neighbours, HTB + bounded leaf queue on both
               ends, SRv6 and ECMP routes

Teardown kills the recorded processes (the namespaces and their veths go with
them) and is idempotent. Any failure during bring-up tears down what was built
and re-raises.

A *shard* (``shard=`` :class:`Shard`, :mod:`testbed.cluster`) builds only the nodes placed
on one server: links with both ends there are veths as above, a cut link's local end is a
VXLAN device (:mod:`testbed.cluster.vxlan`) created from the server's underlay namespace
into the node, with the same ifindex, MAC, MTU and shaping, so every later phase and
runtime change applies to it unchanged. Taking a cut link down takes this shard's end
down; the peer server's shard takes the other (a tunnel has no carrier).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import time
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from mininet.node import Node

from testbed.fabric import routing, shaping
from testbed.fabric.kernel import features as kernel_features
from testbed.fabric.backend import FabricError, register_backend
from testbed.fabric.ledger import LEDGER_DIR, Ledger
from testbed.fabric.netlink import NETLINK_ROUTE, Batch, netns, open_netns, write_sysctls
from testbed.model.topology import EV, Role, Topology
from testbed.fabric.nodes import FabricHost, Router, await_shells
from testbed.fabric.ops import LocalOps
from testbed.model.cluster import Cluster, Placement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shard:
    """The part of a fabric one server builds: ``server`` in ``placement`` of ``cluster``;
    ``underlay_netns``: path of the network
    namespace holding this server's underlay address (None: the builder's own)."""

    server: str
    placement: Placement
    cluster: Cluster
    underlay_netns: str | None = None

    def local(self, node: str) -> bool:
        return self.placement.where[node] == self.server


@register_backend("local")
@dataclass
class Fabric(LocalOps):
    """A running fabric for ``topo``. Use as a context manager, or ``start()``/``stop()``.

    ``timings`` holds seconds per bring-up phase. ``have_netem`` says whether
    sch_netem exists (delay/loss in a link spec need it).
    """

    topo: Topology
    have_netem: bool = False
    ledger_dir: os.PathLike = LEDGER_DIR
    timings: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    ledger: Ledger | None = None
    _nsfd: dict[str, int] = field(default_factory=dict)
    _rtnl: dict[str, socket.socket] = field(default_factory=dict)
    _down: set[str] = field(default_factory=set)
    _children: list = field(default_factory=list)
    _ecmp_failed: frozenset[str] = frozenset()
    _installed_ecmp: dict | None = None
    switch_handles: dict = field(default_factory=dict)
    shard: Shard | None = None
    _rates_bps: dict[str, int] = field(default_factory=dict)

    @property
    def placement(self) -> Placement | None:
        return self.shard.placement if self.shard else None

    def is_local(self, node: str) -> bool:
        """True when this fabric (or shard) builds ``node``."""
        return self.shard is None or self.shard.local(node)

    def _local_links(self):
        """Links with at least one end built here."""
        return [l for l in self.topo.links if self.is_local(l.a.node) or self.is_local(l.b.node)]

    def down_end(self, link) -> str:
        """The node whose end of ``link`` :meth:`set_link` takes down here: ``a``, or on a
        shard the local end of a cut link."""
        return link.a.node if self.is_local(link.a.node) else link.b.node

    # -- lifecycle -------------------------------------------------------------
    def __enter__(self) -> "Fabric":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "Fabric":
        """Build everything; on any error tear down what was built and re-raise."""
        tc_plans = {l.name: shaping.plan(l.params, have_netem=self.have_netem,
                                         header_queue_pkts=l.params.header_class_pkts(shaping.CONTROL_QUEUE_PKTS))
                    for l in self.topo.links}
        if self.shard is not None:
            from testbed.fabric.vxlan import mtu_problems
            problems = mtu_problems(self.topo, self.shard.placement, self.shard.cluster)
            if problems:
                raise FabricError("; ".join(problems))
        # The per-node batches are pure (no fds, no lookups): a forked worker encodes
        # them on the second core while this process forks the node shells.
        self._installed_ecmp = self.topo.ecmp_next_hops()
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
            batches = pool.submit(_config_batches, self.topo, tc_plans, self._installed_ecmp)
            try:
                self._phase("nodes", self._start_nodes)
                self._phase("sysctls", self._set_sysctls)
                self._phase("links", self._create_links)
                self._phase("config", lambda: self._send_config(batches.result()))
                if any(l.params.switch_features for l in self._local_links()):
                    self._phase("switch", self._attach_switch_programs)
            except BaseException:
                batches.cancel()
                self.stop()
                raise
        return self

    def _phase(self, name: str, fn) -> None:
        t0 = time.perf_counter()
        fn()
        self.timings[name] = time.perf_counter() - t0

    def stop(self) -> float:
        """Kill every recorded process (namespaces go with them). Idempotent; returns seconds."""
        t0 = time.perf_counter()
        for handle in self.switch_handles.values():   # the namespaces take the filters with them
            handle.program.close()
        self.switch_handles.clear()
        for sock in self._rtnl.values():   # a socket holds its namespace alive
            sock.close()
        self._rtnl.clear()
        for fd in self._nsfd.values():
            os.close(fd)
        self._nsfd.clear()
        if self.ledger is not None:
            self.ledger.kill_processes()
        for node in self.nodes.values():
            if node.shell is not None:
                node.shell.wait()
                node.stdin.close()
                os.close(node.slave)
                node.shell = None
        for child in self._children:
            if child.poll() is None:
                child.kill()
            child.wait()
        self._children.clear()
        self.nodes.clear()
        if self.ledger is not None:
            self.ledger.discard()
            self.ledger = None
        self.timings["teardown"] = time.perf_counter() - t0
        return self.timings["teardown"]

    def _start_nodes(self) -> None:
        self.ledger = Ledger.create(self.topo.name, Path(self.ledger_dir))
        for node in self.topo.nodes.values():
            if not self.is_local(node.name):
                continue
            cls = FabricHost if node.role is Role.HOST else Router
            self.nodes[node.name] = cls(node.name)
        self.ledger.add_processes([(n.pid, name, "shell") for name, n in self.nodes.items()])
        await_shells(list(self.nodes.values()))
        for name, node in self.nodes.items():
            self._nsfd[name] = open_netns(node.pid)

    def _set_sysctls(self) -> None:
        ecn = any(link.params.ecn_threshold_pkts for link in self.topo.links)
        kernel = kernel_features()
        for name, node in self.topo.nodes.items():
            if not self.is_local(name):
                continue
            values = routing.host_sysctls(ecn) if node.role is Role.HOST else routing.switch_sysctls(name, kernel)
            with netns(self._nsfd[name]):
                write_sysctls(values)

    def _create_links(self) -> None:
        batch = Batch("links (root namespace)")
        tunnels = Batch("VXLAN ends (underlay namespace)")
        for link in self.topo.links:
            a, b = link.a.node, link.b.node
            if not (self.is_local(a) and self.is_local(b)):
                continue
            batch.link_add(ifname=link.a.ifname, index=routing.port_ifindex(self.topo, a, link), kind="veth",
                           nsfd=self._nsfd[a], mac=routing.mac_of(link, a), gso_max_segs=1,
                           mtu=link.params.mtu,
                           info_data=_veth_peer(link.b.ifname, routing.port_ifindex(self.topo, b, link),
                                                self._nsfd[b], routing.mac_of(link, b), link.params.mtu),
                           desc=f"veth {link.name}")
        if self.shard is not None:
            from testbed.fabric.vxlan import add_tunnel, tunnel_ends
            for end in tunnel_ends(self.topo, self.shard.placement, self.shard.cluster, self.shard.server):
                add_tunnel(tunnels, end, self._nsfd[end.node])
        sr_mtu = max(link.params.mtu for link in self.topo.links)
        for sw in self.topo.switches:
            if not self.is_local(sw.name):
                continue
            batch.link_add(ifname="sr0", index=routing.SR_IFINDEX, kind="veth", nsfd=self._nsfd[sw.name],
                           mtu=sr_mtu,
                           info_data=_veth_peer("sr1", routing.SR_PEER_IFINDEX, self._nsfd[sw.name], None,
                                                sr_mtu),
                           desc=f"{sw.name}: sr0 (seg6local device)")
        batch.send()
        if len(tunnels):
            underlay = self.shard.underlay_netns
            fd = os.open(underlay, os.O_RDONLY | os.O_CLOEXEC) if underlay else None
            try:
                tunnels.send(fd)
            finally:
                if fd is not None:
                    os.close(fd)

    def _attach_switch_programs(self) -> None:
        """The switch egress program (:mod:`testbed.fabric.switch`: ECN marking, trimming) on every
        router end of a link whose class asks for it; hosts' NICs do not mark or trim."""
        from testbed.fabric.switch import EgressConfig, attach
        for link in self.topo.links:
            p = link.params
            if not p.switch_features:
                continue
            for end in (link.a, link.b):
                if self.topo.nodes[end.node].role is Role.HOST or not self.is_local(end.node):
                    continue
                peer = link.b if end is link.a else link.a
                config = EgressConfig(p.rate_bps, p.mtu, p.ecn_threshold_pkts, p.trim_threshold_pkts,
                                      header_queue_pkts=p.trim_header_queue_pkts or 64, queue_pkts=p.queue_pkts,
                                      burst_bytes=shaping.burst_bytes(p),
                                      last_hop=self.topo.nodes[peer.node].role is Role.HOST)
                self.switch_handles[(link.name, end.node)] = attach(self.nodes[end.node].pid, end.ifname, config)

    def switch_counters(self) -> dict[tuple[str, str], dict[str, int]]:
        """``{(link, node): {"passed", "marked", "trimmed", "dropped"}}`` of every switch egress
        program (packets since bring-up); {} without switch features."""
        return {key: h.counters() for key, h in self.switch_handles.items()}

    def _send_config(self, batches: dict[str, Batch]) -> None:
        for name, batch in batches.items():
            if self.is_local(name):
                batch.send(self._nsfd[name])

    # -- access ------------------------------------------------------------------
    def nsfd(self, node: str) -> int:
        """Open fd of ``node``'s network namespace (valid until stop())."""
        return self._nsfd[node]

    @contextmanager
    def inside(self, node: str) -> Iterator[None]:
        """Run the body with this thread in ``node``'s namespace (sockets, sysctls)."""
        with netns(self._nsfd[node]):
            yield

    def rtnl_socket(self, node: str) -> socket.socket:
        """A NETLINK_ROUTE socket in ``node``'s namespace, opened on first use and closed by
        stop() (the link counters dump on it every tick). KeyError if ``node`` is not built here."""
        sock = self._rtnl.get(node)
        if sock is None:
            with netns(self._nsfd[node]):
                sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
            self._rtnl[node] = sock
        return sock

    def host_pid(self, node: str) -> int:
        """PID of ``node``'s shell (its namespaces); KeyError if not built here."""
        return self.nodes[node].pid

    def popen(self, node: str, argv: list[str], **kwargs):
        """Start ``argv`` inside ``node`` (mnexec -a); recorded in the ledger, killed on stop()."""
        proc = self.nodes[node].popen(argv, **kwargs)
        self._children.append(proc)
        self.ledger.add_processes([(proc.pid, node, argv[0])])
        return proc

    def evs(self, src_host: str, dst_host: str, *, limit: int | None = None) -> list[EV]:
        return self.topo.evs(src_host, dst_host, limit=limit)

    # -- runtime changes (fault primitives build on these) -------------------------
    def set_link(self, name: str, up: bool) -> None:
        """Take link ``name`` administratively down or up on its ``a`` end.

        The ``b`` end loses carrier, so its routes over the link are ignored
        (``ignore_routes_with_linkdown``); the ``a`` end's kernel drops its
        routes over the link, so bringing it up re-installs that node's plan.
        Raises KeyError for an unknown link, NetlinkBatchError if the kernel refuses.
        """
        link = self.topo.link_by_name[name]
        node = self.down_end(link)
        if not self.is_local(node):
            raise KeyError(f"link {name} has no end on this shard")
        batch = Batch(f"{name} {'up' if up else 'down'}")
        batch.link_set(index=routing.port_ifindex(self.topo, node, link), up=up)
        batch.send(self._nsfd[node])
        if up:
            self._down.discard(name)
            self.resync(node)
        else:
            self._down.add(name)

    @property
    def links_down(self) -> frozenset[str]:
        return frozenset(self._down)

    def _down_ports(self, node: str) -> frozenset[int]:
        """Ifindexes of ``node``'s ports that this fabric took administratively down."""
        return frozenset(routing.port_ifindex(self.topo, node, self.topo.link_by_name[name])
                         for name in self._down if self.down_end(self.topo.link_by_name[name]) == node)

    def _plan(self, node: str, ecmp: dict | None = None) -> list[routing.PlannedRoute]:
        down = self._down_ports(node)
        routes = routing.node_routes(self.topo, node, failed=self._ecmp_failed, ecmp=ecmp)
        return [r for r in (r.without_ports(down) for r in routes) if r is not None]

    def resync(self, node: str) -> None:
        """Re-install ``node``'s neighbours and routes (replace semantics)."""
        batch = Batch(f"{node}: resync")
        routing.compile_neighbours(batch, routing.node_neighbours(self.topo, node))
        routing.compile_routes(batch, self._plan(node), verb="replace")
        batch.send(self._nsfd[node])

    def reconverge(self, failed: Iterable[str] | None = None) -> None:
        """Recompute ECMP routes around ``failed`` links (default: links now down).

        Emulates routing convergence (BGP/IGP) for the ECMP baselines; SRv6
        routes are unchanged (MRC's senders choose their paths). Host-prefix
        routes that the new plan no longer has are deleted.
        """
        self._ecmp_failed = frozenset(self._down if failed is None else failed)
        ecmp = self.topo.ecmp_next_hops(self._ecmp_failed)
        for sw in self.topo.switches:
            if not self.is_local(sw.name):
                continue
            before = {r.dst for r in routing.node_routes(self.topo, sw.name, ecmp=self._installed_ecmp)
                      if r.ecmp}
            routes = [r for r in self._plan(sw.name, ecmp) if r.ecmp]
            batch = Batch(f"{sw.name}: reconverge")
            routing.compile_routes(batch, routes, verb="replace")
            stale = before - {r.dst for r in routes}
            routing.compile_routes(batch, [routing.PlannedRoute(d) for d in stale], verb="del")
            batch.send(self._nsfd[sw.name])
        self._installed_ecmp = ecmp

    def host_link_rate_bps(self) -> int:
        return min(l.params.rate_bps for l in self.topo.links if l.cls == "host")


def _veth_peer(ifname: str, index: int, nsfd: int, mac: str | None, mtu: int | None = None) -> list:
    """IFLA_INFO_DATA of a veth whose peer gets a pinned ifindex (pyroute2's peer= drops it)."""
    attrs = [("IFLA_IFNAME", ifname), ("IFLA_NET_NS_FD", nsfd), ("IFLA_GSO_MAX_SEGS", 1)]
    if mtu:
        attrs.append(("IFLA_MTU", mtu))
    if mac:
        attrs.append(("IFLA_ADDRESS", mac))
    return [("VETH_INFO_PEER", {"index": index, "attrs": attrs})]


def _config_batches(topo: Topology, tc_plans: dict[str, shaping.TcPlan], ecmp: dict) -> dict[str, Batch]:
    """Every node's batch: lo/sr/ports up, tc, addresses, neighbours, routes (pure)."""
    out = {}
    for name, node in topo.nodes.items():
        batch = Batch(name)
        batch.link_set(index=1, up=True, desc=f"{name}: lo up")
        if node.role.is_switch:
            for ifindex in (routing.SR_IFINDEX, routing.SR_PEER_IFINDEX):
                batch.link_set(index=ifindex, up=True, desc=f"{name}: sr up")
        for link in topo.links_of[name]:
            ifindex = routing.port_ifindex(topo, name, link)
            shaping.compile_into(batch, ifindex, tc_plans[link.name])
            batch.link_set(index=ifindex, up=True, desc=f"{link.port_of(name).ifname} up")
        for addr, plen, ifindex in routing.node_addresses(topo, name):
            batch.addr_add(index=ifindex, address=str(addr), prefixlen=plen)
        routing.compile_neighbours(batch, routing.node_neighbours(topo, name))
        routing.compile_routes(batch, routing.node_routes(topo, name, ecmp=ecmp))
        out[name] = batch
    return out
