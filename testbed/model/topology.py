"""Pure graph model of a fabric: nodes, links, NICs, EVs and the :class:`Topology` holding them.

No I/O here: a :class:`Topology` is a frozen description that :mod:`testbed.fabric.local`
turns into namespaces, veths and routes, and that tests check without root. Its addresses
follow :mod:`testbed.model.addressing`; its paths are computed by :mod:`testbed.model.graph`;
it validates itself with :mod:`testbed.model.check`; :mod:`testbed.model.generators` builds it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Iterable, Mapping, Sequence

from testbed.model import graph
from testbed.model.addressing import USID_BASE, host_prefix, link_subnet, locator, usid_address
from testbed.model.check import check
from testbed.model.errors import InputError

#: Rough memory per emulated object, for :func:`footprint` (measured order of
#: magnitude, not a promise): a Mininet node is a shell (bash under mnexec) in its
#: own namespaces, ~4 MiB; a link is a veth pair with HTB and a leaf qdisc plus
#: routes, ~1 MiB; a host runs one Python agent during a run, ~16 MiB at import
#: and ~48 MiB with its buffers and traces.
NODE_BYTES = 4 * 2**20
LINK_BYTES = 1 * 2**20
AGENT_BYTES = 48 * 2**20


class TopologyError(InputError):
    """A topology that cannot be built. ``problems`` is a list of (key_path, message)."""

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in self.problems))


class Role(str, Enum):
    """Node roles: fat-tree edge/aggregation/core, leaf-spine leaf/spine, host."""

    HOST = "host"
    EDGE = "edge"
    AGGREGATION = "aggregation"
    CORE = "core"
    LEAF = "leaf"
    SPINE = "spine"

    @property
    def is_switch(self) -> bool:
        return self is not Role.HOST


CONTROL_PRIORITY = 0x0001_0020
"""skb->priority of a control packet on a ``control_priority`` link: HTB class 1:20's id (HTB
classifies a packet whose priority equals one of its class ids into that class)."""


@dataclass(frozen=True)
class LinkParams:
    """Shaping of one link, applied in both directions.

    ``rate_bps`` bits/s (HTB rate), ``queue_pkts`` leaf queue limit in packets,
    ``delay_s`` one-way delay in seconds and ``loss_pct`` random loss in percent
    (both need sch_netem), ``mtu`` the interfaces' IPv6 MTU in bytes (1280..65535;
    jumbo 9000 carries RoCEv2's 4096-byte path MTU, as AI fabrics do).
    Switch features on a router's egress (:mod:`testbed.fabric.switch`, a tc BPF program with a
    virtual queue drained at ``rate_bps``): ``ecn_threshold_pkts`` marks ECT packets CE
    above that many MTU-sized packets queued; ``trim_threshold_pkts`` trims MRC data
    packets to their header above it (sent at high priority; dropped only when
    ``trim_header_queue_pkts`` headers are queued). None: off.
    ``control_priority``: a host's NIC on this link sends the transports' control packets
    (SACK, NACK, probes, CNP) in a strict-priority class ahead of its own queued data, as a
    RoCE or UET NIC schedules its ACKs (the agents set their ``skb->priority``).
    """

    rate_bps: int
    queue_pkts: int = 100
    delay_s: float = 0.0
    loss_pct: float = 0.0
    mtu: int = 1500
    ecn_threshold_pkts: int | None = None
    trim_threshold_pkts: int | None = None
    trim_header_queue_pkts: int | None = None
    control_priority: bool = False

    def header_class_pkts(self, control_queue_pkts: int) -> int | None:
        """The queue (packets) of the link ends' strict-priority class 1:20: the trimmed
        headers' with trimming on, ``control_queue_pkts`` with only ``control_priority``;
        None: no such class."""
        if self.trim_threshold_pkts:
            return self.trim_header_queue_pkts
        return control_queue_pkts if self.control_priority else None

    @property
    def switch_features(self) -> bool:
        """True when a router egress on this link runs the switch program (ECN or trimming)."""
        return self.ecn_threshold_pkts is not None or self.trim_threshold_pkts is not None


@dataclass(frozen=True)
class Node:
    """A host or a switch. ``plane`` is None for hosts (they have one NIC per plane)."""

    name: str
    role: Role
    plane: int | None = None
    pod: int | None = None
    usid: int | None = None  # switches only; host NICs carry their own

    @property
    def locator(self) -> ipaddress.IPv6Network:
        if self.usid is None:
            raise ValueError(f"{self.name}: hosts have one locator per NIC")
        return locator(self.usid)


@dataclass(frozen=True)
class Port:
    """One end of a link: a node and its interface name."""

    node: str
    ifname: str


@dataclass(frozen=True)
class Link:
    """A point-to-point link (one veth pair). ``index`` numbers links from 0."""

    name: str
    a: Port
    b: Port
    cls: str
    params: LinkParams
    index: int

    def port_of(self, node: str) -> Port:
        if self.a.node == node:
            return self.a
        if self.b.node == node:
            return self.b
        raise KeyError(f"{node} is not an endpoint of {self.name}")

    def peer_of(self, node: str) -> Port:
        return self.b if self.port_of(node) is self.a else self.a

    @property
    def subnet(self) -> ipaddress.IPv6Network:
        return link_subnet(self.index)

    def addr_of(self, node: str) -> ipaddress.IPv6Address:
        """Point-to-point address of ``node`` on this link (a: ::1, b: ::2)."""
        return self.subnet[1 if self.port_of(node) is self.a else 2]


@dataclass(frozen=True)
class Nic:
    """A host NIC: one per plane, attached to exactly one switch."""

    host: str
    ifname: str
    plane: int
    usid: int
    link: str
    switch: str
    switch_usid: int

    @property
    def locator(self) -> ipaddress.IPv6Network:
        return locator(self.usid)

    @property
    def address(self) -> ipaddress.IPv6Address:
        """Plain (ECMP-routed) address of this NIC."""
        return host_prefix(self.plane, self.switch_usid)[self.usid]


@dataclass(frozen=True)
class EV:
    """An entropy value in SRv6 mode: one path between two host NICs.

    ``switches`` in order from source to destination, ``links`` every link
    crossed (host links included), ``usids`` the switch uSIDs then the
    destination NIC's, ``address`` the uSID destination address.
    """

    ev_id: int
    plane: int
    src: Nic
    dst: Nic
    switches: tuple[str, ...]
    links: tuple[str, ...]
    usids: tuple[int, ...]

    @property
    def address(self) -> ipaddress.IPv6Address:
        return usid_address(self.usids)



@dataclass(frozen=True)
class Topology:
    """A fabric: ``nodes`` by name and ``links`` in index order.

    Build with :mod:`testbed.model.generators` (``fat_tree``, ``leaf_spine``, ``from_explicit``);
    the constructor validates (raises :class:`TopologyError`).
    """

    name: str
    nodes: Mapping[str, Node]
    links: tuple[Link, ...]
    kind: str = "explicit"
    params: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = check(self)
        if problems:
            raise TopologyError(problems)

    # -- views ---------------------------------------------------------------
    @property
    def hosts(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role is Role.HOST]

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role.is_switch]

    @cached_property
    def link_by_name(self) -> dict[str, Link]:
        return {link.name: link for link in self.links}

    @cached_property
    def links_of(self) -> dict[str, list[Link]]:
        out: dict[str, list[Link]] = {name: [] for name in self.nodes}
        for link in self.links:
            out[link.a.node].append(link)
            out[link.b.node].append(link)
        return out

    @cached_property
    def nics(self) -> dict[str, list[Nic]]:
        """Host name -> its NICs, ordered by plane."""
        out: dict[str, list[Nic]] = {}
        counter = 0
        for host in self.hosts:
            nics = []
            for link in self.links_of[host.name]:
                sw = self.nodes[link.peer_of(host.name).node]
                nics.append(Nic(host.name, link.port_of(host.name).ifname, sw.plane or 0,
                                USID_BASE["host"] + counter, link.name, sw.name, sw.usid))
                counter += 1
            out[host.name] = sorted(nics, key=lambda n: n.plane)
        return out

    @property
    def planes(self) -> list[int]:
        return sorted({n.plane or 0 for n in self.switches})

    @property
    def digest_fields(self) -> dict:
        """A JSON-able canonical description (for hashing and the explicit form)."""
        return {
            "name": self.name,
            "nodes": {n.name: {"role": n.role.value, "plane": n.plane, "pod": n.pod}
                      for n in self.nodes.values()},
            "links": [{"endpoints": [f"{l.a.node}:{l.a.ifname}", f"{l.b.node}:{l.b.ifname}"],
                       "class": l.cls, "params": vars(l.params)} for l in self.links],
        }

    # -- paths (:mod:`testbed.model.graph`) -----------------------------------
    def evs(self, src_host: str, dst_host: str, *, limit: int | None = None) -> list[EV]:
        """Every EV (shortest switch path, per plane) from ``src_host`` to ``dst_host``.

        EV ids interleave planes so the first ``n`` EVs spread evenly over planes.
        Raises KeyError for an unknown host, ValueError for src == dst.
        """
        if src_host == dst_host:
            raise ValueError(f"{src_host}: no EVs from a host to itself")
        return [EV(ev_id, s_nic.plane, s_nic, d_nic, switches, (s_nic.link, *links, d_nic.link),
                   tuple(self.nodes[s].usid for s in switches) + (d_nic.usid,))
                for ev_id, (s_nic, d_nic, (switches, links))
                in enumerate(graph.ev_paths(self, src_host, dst_host, limit))]

    def count_evs(self, src_host: str, dst_host: str) -> int:
        """``len(self.evs(src_host, dst_host))`` without enumerating them: shortest
        paths counted per plane by dynamic programming over hop distances."""
        return graph.count_evs(self, src_host, dst_host)

    def switch_paths(self, src: str, dst: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """All shortest paths between two switches through switches only.

        Returns ``[(switch names, link names)]`` in a deterministic order;
        parallel links give distinct paths. Cached per pair.
        """
        key = (src, dst)
        cache = self.__dict__.setdefault("_path_cache", {})
        if key not in cache:
            cache[key] = list(graph.iter_switch_paths(self, src, dst))
        return cache[key]

    def ecmp_next_hops(self, failed: Iterable[str] = ()) -> dict[str, dict[str, list[Link]]]:
        """Shortest-path next hops: switch -> destination switch -> links (ECMP set).

        ``failed`` link names are removed first, so a recomputation after a fault
        emulates routing convergence. Unreachable destinations are left out.
        """
        return graph.ecmp_next_hops(self, failed)


def footprint(*, nodes: int, hosts: int, links: int) -> int:
    """Estimated memory in bytes of a running fabric: one namespace per node, one
    veth pair per link, one agent per host (see NODE_BYTES, LINK_BYTES, AGENT_BYTES)."""
    return nodes * NODE_BYTES + links * LINK_BYTES + hosts * AGENT_BYTES
