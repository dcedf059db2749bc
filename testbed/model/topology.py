"""Pure graph model of a fabric: nodes, links, addressing plan, uSIDs and EVs.

No I/O here: a :class:`Topology` is a frozen description that ``fabric.py``
turns into namespaces, veths and routes, and that tests check without root.

Addressing plan (DESIGN.md, "Fabric"):

* uSID block ``fcbb:bb00::/32`` with 16-bit uSIDs. Every switch owns the
  locator ``fcbb:bb00:<usid>::/48``; every host NIC owns one too (a local route
  on the host). uSIDs are allocated by role: host NICs ``0x1000+n``,
  edge/leaf ``0xE000+i``, aggregation ``0xA000+i``, core/spine ``0xC000+i``,
  so an address reads as its path: ``fcbb:bb00:e000:a000:c000:a002:e004:1008``.
* Point-to-point link ``i``: ``fd01:0:0:<i>::/64``, endpoint ``a`` is ``::1``,
  endpoint ``b`` is ``::2``.
* ECMP (baseline) address of a host NIC on plane ``p`` behind switch with uSID
  ``s``: ``fd00:0:<p>:<s>::<nic usid>/128``; the switch's host prefix is
  ``fd00:0:<p>:<s>::/64``.
* An EV is one path between two host NICs on the same plane: its destination
  address is the block followed by the uSIDs of every switch crossed and of
  the destination NIC (at most 6 uSIDs = 128 bits).
"""

from __future__ import annotations

import ipaddress
import itertools
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Iterable, Mapping, Sequence

from testbed.model.units import show
from testbed.model.errors import InputError

USID_BLOCK = ipaddress.IPv6Network("fcbb:bb00::/32")
#: Maximum uSIDs after the 32-bit block in one 128-bit destination address.
MAX_USIDS = 6
#: Linux IFNAMSIZ - 1 (include/uapi/linux/if.h): bytes, not characters.
IFNAME_MAX = 15
#: Planes are 16 bits of the ECMP address ``fd00:0:<plane>:...``.
MAX_PLANE = 0xFFFF
#: Switches on the longest EV: MAX_USIDS less the destination NIC's uSID.
MAX_EV_SWITCHES = MAX_USIDS - 1

#: Rough memory per emulated object, for :func:`footprint` (measured order of
#: magnitude, not a promise): a Mininet node is a shell (bash under mnexec) in its
#: own namespaces, ~4 MiB; a link is a veth pair with HTB and a leaf qdisc plus
#: routes, ~1 MiB; a host runs one Python agent during a run, ~16 MiB at import
#: and ~48 MiB with its buffers and traces.
NODE_BYTES = 4 * 2**20
LINK_BYTES = 1 * 2**20
AGENT_BYTES = 48 * 2**20

_USID_BASE = {"host": 0x1000, "edge": 0xE000, "leaf": 0xE000, "aggregation": 0xA000,
              "core": 0xC000, "spine": 0xC000}
_USID_SPAN = {"host": 0x8000, "edge": 0x1000, "leaf": 0x1000, "aggregation": 0x1000,
              "core": 0x1000, "spine": 0x1000}


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
    """

    rate_bps: int
    queue_pkts: int = 100
    delay_s: float = 0.0
    loss_pct: float = 0.0
    mtu: int = 1500
    ecn_threshold_pkts: int | None = None
    trim_threshold_pkts: int | None = None
    trim_header_queue_pkts: int | None = None

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
        return ipaddress.IPv6Network(f"fd01:0:0:{self.index:x}::/64")

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


def locator(usid: int) -> ipaddress.IPv6Network:
    """Locator ``fcbb:bb00:<usid>::/48`` of a 16-bit uSID."""
    if not 0 < usid <= 0xFFFF:
        raise ValueError(f"uSID {usid:#x} is not a non-zero 16-bit value")
    return ipaddress.IPv6Network(f"fcbb:bb00:{usid:x}::/48")


def usid_address(usids: Sequence[int]) -> ipaddress.IPv6Address:
    """Destination address carrying ``usids`` (at most 6) after the uSID block."""
    if not 0 < len(usids) <= MAX_USIDS:
        raise ValueError(f"{len(usids)} uSIDs do not fit a uSID container (1..{MAX_USIDS})")
    value = int(USID_BLOCK.network_address)
    for i, usid in enumerate(usids):
        value |= (usid & 0xFFFF) << (16 * (5 - i))
    return ipaddress.IPv6Address(value)


def host_prefix(plane: int, switch_usid: int) -> ipaddress.IPv6Network:
    """ECMP prefix of the hosts behind one switch: ``fd00:0:<plane>:<usid>::/64``."""
    return ipaddress.IPv6Network(f"fd00:0:{plane:x}:{switch_usid:x}::/64")


def plane_prefix(plane: int) -> ipaddress.IPv6Network:
    """ECMP prefix of every host NIC on ``plane``: ``fd00:0:<plane>::/48``."""
    return ipaddress.IPv6Network(f"fd00:0:{plane:x}::/48")


@dataclass(frozen=True)
class Topology:
    """A fabric: ``nodes`` by name and ``links`` in index order.

    Build with :func:`fat_tree`, :func:`leaf_spine` or :func:`from_explicit`;
    the constructor validates (raises :class:`TopologyError`).
    """

    name: str
    nodes: Mapping[str, Node]
    links: tuple[Link, ...]
    kind: str = "explicit"
    params: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = _check(self)
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
                                _USID_BASE["host"] + counter, link.name, sw.name, sw.usid))
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

    # -- paths ---------------------------------------------------------------
    def evs(self, src_host: str, dst_host: str, *, limit: int | None = None) -> list[EV]:
        """Every EV (shortest switch path, per plane) from ``src_host`` to ``dst_host``.

        EV ids interleave planes so the first ``n`` EVs spread evenly over planes.
        Raises KeyError for an unknown host, ValueError for src == dst.
        """
        if src_host == dst_host:
            raise ValueError(f"{src_host}: no EVs from a host to itself")
        per_plane = []
        for s_nic in self.nics[src_host]:
            for d_nic in self.nics[dst_host]:
                if s_nic.plane == d_nic.plane:
                    paths = (self.switch_paths(s_nic.switch, d_nic.switch) if limit is None else
                             itertools.islice(self._iter_switch_paths(s_nic.switch, d_nic.switch), limit))
                    per_plane.append([(s_nic, d_nic, p) for p in paths])
        ordered = [item for group in _interleave(per_plane) for item in group]
        evs = []
        for ev_id, (s_nic, d_nic, (switches, links)) in enumerate(ordered[:limit]):
            evs.append(EV(ev_id, s_nic.plane, s_nic, d_nic, switches,
                          (s_nic.link, *links, d_nic.link),
                          tuple(self.nodes[s].usid for s in switches) + (d_nic.usid,)))
        return evs

    def count_evs(self, src_host: str, dst_host: str) -> int:
        """``len(self.evs(src_host, dst_host))`` without enumerating them: shortest
        paths counted per plane by dynamic programming over hop distances."""
        total = 0
        for s_nic in self.nics[src_host]:
            for d_nic in self.nics[dst_host]:
                if s_nic.plane == d_nic.plane:
                    total += self._count_switch_paths(s_nic.switch, d_nic.switch)
        return total

    def _count_switch_paths(self, src: str, dst: str) -> int:
        dist = self._switch_distances(dst)
        if src not in dist:
            return 0
        ways = {dst: 1}
        for node in sorted((n for n in dist if dist[n] <= dist[src]), key=dist.__getitem__):
            if node == dst:
                continue
            ways[node] = sum(ways.get(l.peer_of(node).node, 0) for l in self.links_of[node]
                             if dist.get(l.peer_of(node).node, -1) == dist[node] - 1)
        return ways[src]

    def switch_paths(self, src: str, dst: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """All shortest paths between two switches through switches only.

        Returns ``[(switch names, link names)]`` in a deterministic order;
        parallel links give distinct paths.
        """
        key = (src, dst)
        cache = self.__dict__.setdefault("_path_cache", {})
        if key not in cache:
            cache[key] = list(self._iter_switch_paths(src, dst))
        return cache[key]

    def _iter_switch_paths(self, src: str, dst: str):
        """Shortest switch paths from ``src`` to ``dst``, lazily, in :meth:`switch_paths` order."""
        dist = self._switch_distances(dst)
        if src not in dist:
            return
        stack = [(src, (src,), ())]
        while stack:
            node, nodes, links = stack.pop()
            if node == dst:
                yield nodes, links
                continue
            nxt = [(link.peer_of(node).node, link) for link in self.links_of[node]
                   if dist.get(link.peer_of(node).node, -1) == dist[node] - 1]
            stack.extend((peer, nodes + (peer,), links + (link.name,)) for peer, link in reversed(nxt))

    def _switch_distances(self, dst: str, failed: frozenset[str] = frozenset()) -> dict[str, int]:
        """Hop count from every switch to switch ``dst`` (switch-only graph)."""
        dist = {dst: 0}
        queue = deque([dst])
        while queue:
            node = queue.popleft()
            for link in self.links_of[node]:
                if link.name in failed:
                    continue
                peer = link.peer_of(node).node
                if self.nodes[peer].role.is_switch and peer not in dist:
                    dist[peer] = dist[node] + 1
                    queue.append(peer)
        return dist

    def ecmp_next_hops(self, failed: Iterable[str] = ()) -> dict[str, dict[str, list[Link]]]:
        """Shortest-path next hops: switch -> destination switch -> links (ECMP set).

        ``failed`` link names are removed first, so a recomputation after a fault
        emulates routing convergence. Unreachable destinations are left out.
        """
        failed = frozenset(failed)
        out: dict[str, dict[str, list[Link]]] = defaultdict(dict)
        for dst in (s.name for s in self.switches):
            dist = self._switch_distances(dst, failed)
            for sw, d in dist.items():
                if sw == dst:
                    continue
                hops = [l for l in self.links_of[sw] if l.name not in failed
                        and dist.get(l.peer_of(sw).node, -1) == d - 1]
                out[sw][dst] = hops
        return dict(out)


def footprint(*, nodes: int, hosts: int, links: int) -> int:
    """Estimated memory in bytes of a running fabric: one namespace per node, one
    veth pair per link, one agent per host (see NODE_BYTES, LINK_BYTES, AGENT_BYTES)."""
    return nodes * NODE_BYTES + links * LINK_BYTES + hosts * AGENT_BYTES


def ifname_problem(ifname: str) -> str | None:
    """Why ``ifname`` cannot name a Linux interface (``dev_valid_name``), or None.

    The limit is IFNAME_MAX bytes of UTF-8, and '/', ':', whitespace, '.' and '..'
    are refused by the kernel.
    """
    size = len(ifname.encode("utf-8", "surrogatepass"))
    if size > IFNAME_MAX:
        return (f"interface name {show(ifname)} is {size} bytes, longer than {IFNAME_MAX} "
                "(Linux IFNAMSIZ counts bytes)")
    if ifname in (".", "..") or any(c in "/:" or c.isspace() or not c.isprintable() for c in ifname):
        return f"interface name {show(ifname)} is not valid on Linux (no '/', ':', spaces, '.' or '..')"
    return None


def _interleave(groups: list[list]) -> list[list]:
    """Round-robin over groups: [[a0, b0], [a1, b1], ...]."""
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.append([g[i] for g in groups if i < len(g)])
    return out


def _check(topo: Topology) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    endpoints: dict[tuple[str, str], int] = {}
    for i, link in enumerate(topo.links):
        for side, port in (("a", link.a), ("b", link.b)):
            where = f"links[{i}]"
            if port.node not in topo.nodes:
                problems.append((where, f"endpoint {port.node!r} is not a declared node"))
                continue
            why = ifname_problem(port.ifname)
            if why:
                problems.append((where, why))
            if (port.node, port.ifname) in endpoints:
                problems.append((where, f"endpoint {port.node}:{port.ifname} is already used "
                                        f"by links[{endpoints[(port.node, port.ifname)]}]"))
            endpoints[(port.node, port.ifname)] = i
        if link.a.node == link.b.node:
            problems.append((f"links[{i}]", f"link {link.name} connects {link.a.node} to itself"))
        roles = [topo.nodes[p.node].role for p in (link.a, link.b) if p.node in topo.nodes]
        if roles.count(Role.HOST) == 2:
            problems.append((f"links[{i}]", f"link {link.name} joins two hosts; hosts attach to switches"))
        planes = {topo.nodes[p.node].plane or 0 for p in (link.a, link.b)
                  if p.node in topo.nodes and topo.nodes[p.node].role.is_switch}
        if len(planes) > 1:
            problems.append((f"links[{i}]", f"link {link.name} joins planes {sorted(planes)}"))
    if problems:
        return problems
    for host in topo.hosts:
        if not topo.links_of[host.name]:
            problems.append((f"nodes.{host.name}", "host has no link"))
        planes = [topo.nodes[l.peer_of(host.name).node].plane or 0 for l in topo.links_of[host.name]]
        if len(planes) != len(set(planes)):
            problems.append((f"nodes.{host.name}", "host has more than one NIC on a plane"))
    usids: dict[int, str] = {}
    for node in topo.switches:
        if node.usid in usids:
            problems.append((f"nodes.{node.name}", f"uSID {node.usid:#06x} already used by {usids[node.usid]}"))
        usids[node.usid or 0] = node.name
        if (node.plane or 0) > MAX_PLANE:
            problems.append((f"nodes.{node.name}", f"plane {node.plane} does not fit the 16 bits of the "
                                                   f"address fd00:0:<plane>:: (0..{MAX_PLANE})"))
    if problems or topo.kind != "explicit":
        return problems  # generated fabrics are connected and shallow by construction
    return _check_reach(topo)


def _check_reach(topo: Topology) -> list[tuple[str, str]]:
    """Hosts that cannot reach each other: no common plane, a plane split into islands,
    or switch paths longer than an EV can carry (MAX_EV_SWITCHES switches).

    Cost: one BFS per host-attached switch over its plane (explicit fabrics only).
    """
    problems: list[tuple[str, str]] = []
    attached: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))  # plane -> sw -> hosts
    plane_sets: dict[frozenset[int], str] = {}
    for host in topo.hosts:
        planes = set()
        for link in topo.links_of[host.name]:
            sw = topo.nodes[link.peer_of(host.name).node]
            attached[sw.plane or 0][sw.name].append(host.name)
            planes.add(sw.plane or 0)
        if planes:
            plane_sets.setdefault(frozenset(planes), host.name)
    for (pa, ha), (pb, hb) in itertools.combinations(plane_sets.items(), 2):
        if not pa & pb:
            problems.append((f"nodes.{hb}", f"hosts {ha} (planes {sorted(pa)}) and {hb} (planes {sorted(pb)}) "
                                            "share no plane"))
    for plane, switches in sorted(attached.items()):
        first = next(iter(switches))
        for src in switches:
            dist = topo._switch_distances(src)
            for dst, hosts in switches.items():
                if dst not in dist:
                    problems.append((f"nodes.{hosts[0]}", f"host {hosts[0]} cannot reach host "
                                                          f"{switches[first][0]} on plane {plane}: "
                                                          "the fabric is split into islands"))
                elif dist[dst] + 1 > MAX_EV_SWITCHES:
                    problems.append((f"nodes.{hosts[0]}", f"the path from {switches[src][0]} to {hosts[0]} "
                                                          f"crosses {dist[dst] + 1} switches; an EV holds "
                                                          f"at most {MAX_EV_SWITCHES} switch uSIDs + the NIC's"))
            if problems:
                return problems
    return problems


# -- builders -----------------------------------------------------------------

class _Builder:
    """Accumulates nodes and links, allocating uSIDs and interface names."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.links: list[Link] = []
        self._role_count: dict[str, int] = defaultdict(int)
        self._port_count: dict[str, int] = defaultdict(int)

    def node(self, name: str, role: Role, *, plane: int | None = None, pod: int | None = None) -> str:
        usid = None
        if role.is_switch:
            n = self._role_count[role.value]
            if n >= _USID_SPAN[role.value]:
                raise TopologyError([(f"nodes.{name}", f"more than {_USID_SPAN[role.value]} {role.value} switches")])
            usid = _USID_BASE[role.value] + n
            self._role_count[role.value] += 1
            plane = plane or 0
        self.nodes[name] = Node(name, role, plane, pod, usid)
        return name

    def ifname(self, node: str) -> str:
        n = self._port_count[node]
        self._port_count[node] += 1
        return f"{node}-eth{n}"

    def link(self, a: str, b: str, cls: str, params: LinkParams, *,
             a_if: str | None = None, b_if: str | None = None) -> None:
        a_port = Port(a, a_if or self.ifname(a))
        b_port = Port(b, b_if or self.ifname(b))
        self.links.append(Link(f"{a}-{b}", a_port, b_port, cls, params, len(self.links)))

    def build(self, name: str, kind: str, params: Mapping[str, int]) -> Topology:
        counts = Counter(l.name for l in self.links)
        dup = {n for n, c in counts.items() if c > 1}
        links = tuple(l if l.name not in dup else
                      Link(f"{l.name}.{l.index}", l.a, l.b, l.cls, l.params, l.index) for l in self.links)
        return Topology(name, dict(self.nodes), links, kind, dict(params))


def fat_tree(k: int, *, host_link: LinkParams, fabric_link: LinkParams, name: str | None = None) -> Topology:
    """Three-tier k-ary fat-tree (Al-Fares et al., SIGCOMM 2008).

    k pods, each with k/2 edge and k/2 aggregation switches; (k/2)^2 cores;
    k/2 hosts per edge: k^3/4 hosts, 5k^2/4 switches, 3k^3/4 links.
    Names: hosts ``h<pod>_<edge>_<i>``, edges ``e<pod>_<i>``, aggregations
    ``a<pod>_<i>``, cores ``c<i>_<j>`` (core group i attaches to aggregation i
    of every pod). Raises TopologyError for odd k or k < 2.
    """
    if k < 2 or k % 2:
        raise TopologyError([("k", f"fat-tree k must be even and >= 2, got {k}")])
    half = k // 2
    b = _Builder()
    for pod in range(k):
        for e in range(half):
            edge = b.node(f"e{pod}_{e}", Role.EDGE, pod=pod)
            for h in range(half):
                host = b.node(f"h{pod}_{e}_{h}", Role.HOST, pod=pod)
                b.link(host, edge, "host", host_link)
    for pod in range(k):
        for a in range(half):
            agg = b.node(f"a{pod}_{a}", Role.AGGREGATION, pod=pod)
            for e in range(half):
                b.link(f"e{pod}_{e}", agg, "fabric", fabric_link)
    for i in range(half):
        for j in range(half):
            core = b.node(f"c{i}_{j}", Role.CORE)
            for pod in range(k):
                b.link(f"a{pod}_{i}", core, "fabric", fabric_link)
    return b.build(name or f"fat-tree-k{k}", "fat-tree", {"k": k})


def leaf_spine(*, leaves: int, spines: int, hosts_per_leaf: int, planes: int = 1,
               host_link: LinkParams, fabric_link: LinkParams, name: str | None = None) -> Topology:
    """Two-tier leaf-spine, optionally multi-plane.

    Each plane ``p`` is its own leaf-spine (leaves ``l<p>_<i>``, spines
    ``s<p>_<j>``, every leaf to every spine); host ``h<n>`` has one NIC per
    plane, attached to leaf ``n // hosts_per_leaf`` of that plane (MRC.md,
    "Multi-plane"). Raises TopologyError for counts below 1.
    """
    problems = [(key, f"must be >= 1, got {val}") for key, val in
                (("leaves", leaves), ("spines", spines), ("hosts_per_leaf", hosts_per_leaf),
                 ("planes", planes)) if val < 1]
    if problems:
        raise TopologyError(problems)
    b = _Builder()
    hosts = [b.node(f"h{n}", Role.HOST) for n in range(leaves * hosts_per_leaf)]
    for p in range(planes):
        for i in range(leaves):
            b.node(f"l{p}_{i}", Role.LEAF, plane=p)
        for j in range(spines):
            b.node(f"s{p}_{j}", Role.SPINE, plane=p)
    for p in range(planes):
        for n, host in enumerate(hosts):
            b.link(host, f"l{p}_{n // hosts_per_leaf}", "host", host_link)
    for p in range(planes):
        for i in range(leaves):
            for j in range(spines):
                b.link(f"l{p}_{i}", f"s{p}_{j}", "fabric", fabric_link)
    kind = "leaf-spine"
    return b.build(name or f"leaf-spine-{planes}plane", kind,
                   {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf, "planes": planes})


@dataclass(frozen=True)
class NodeDecl:
    """Explicit-form node: name, role, optional plane and pod."""

    name: str
    role: Role
    plane: int | None = None
    pod: int | None = None


@dataclass(frozen=True)
class LinkDecl:
    """Explicit-form link: endpoints as (node, ifname or None), class, params."""

    a: tuple[str, str | None]
    b: tuple[str, str | None]
    cls: str
    params: LinkParams


def from_explicit(name: str, nodes: Sequence[NodeDecl], links: Sequence[LinkDecl]) -> Topology:
    """Topology from declared nodes and links (containerlab-like explicit form).

    Interface names not given are numbered ``<node>-eth<n>`` in link order
    after the given ones. Raises TopologyError naming ``nodes.X``/``links[i]``.
    """
    b = _Builder()
    problems: list[tuple[str, str]] = []
    for decl in nodes:
        b.node(decl.name, decl.role, plane=decl.plane, pod=decl.pod)
    taken: dict[str, set[str]] = defaultdict(set)
    for decl in links:
        for node, ifname in (decl.a, decl.b):
            if ifname:
                taken[node].add(ifname)
    for i, decl in enumerate(links):
        ifs = []
        for node, ifname in (decl.a, decl.b):
            if node not in b.nodes:
                problems.append((f"links[{i}]", f"endpoint {node!r} is not a declared node"))
            if not ifname:
                ifname = b.ifname(node)
                while ifname in taken[node]:
                    ifname = b.ifname(node)
            ifs.append(ifname)
        b.link(decl.a[0], decl.b[0], decl.cls, decl.params, a_if=ifs[0], b_if=ifs[1])
    if problems:
        raise TopologyError(problems)
    return b.build(name, "explicit", {})
