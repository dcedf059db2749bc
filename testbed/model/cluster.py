"""Servers and placement (pure): which server holds which node, and the links cut between them.

The servers file is read by :mod:`testbed.cluster.servers`, placements are made by
:mod:`testbed.cluster.placement`; the fabric layer builds from these plain values.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Mapping

from testbed.model.topology import Link, Role, Topology
from testbed.model.errors import InputError


class PlacementError(InputError):
    """A placement that cannot be used (unknown placer, a server left without nodes)."""


@dataclass(frozen=True)
class Placement:
    """``node -> server`` for every node; ``cut``: the links between servers (topology order)."""

    servers: tuple[str, ...]
    where: Mapping[str, str]
    cut: tuple[Link, ...]

    def nodes_on(self, server: str) -> list[str]:
        return [n for n, s in self.where.items() if s == server]

    def summary(self, topo: Topology) -> dict:
        """``{"cut_links", "links", "per_server": {server: {"nodes", "hosts", "tunnels"}}, "cut":
        [names of the links between servers]}``."""
        per = {s: {"nodes": 0, "hosts": 0, "tunnels": 0} for s in self.servers}
        for name, server in self.where.items():
            per[server]["nodes"] += 1
            per[server]["hosts"] += topo.nodes[name].role is Role.HOST
        for link in self.cut:
            per[self.where[link.a.node]]["tunnels"] += 1
            per[self.where[link.b.node]]["tunnels"] += 1
        return {"cut_links": len(self.cut), "links": len(topo.links), "per_server": per,
                "cut": sorted(link.name for link in self.cut)}


VXLAN_PORT = 4789
"""IANA's VXLAN UDP port (RFC 7348 §5)."""


VNI_MAX = 2**24 - 1
"""A VNI is 24 bits (RFC 7348 §5)."""


@dataclass(frozen=True)
class Server:
    """One server: SSH target ``user@address:port`` (``key``: private key file or None for
    the SSH agent/defaults) and its ``underlay`` address (VXLAN's local/remote)."""

    name: str
    address: str
    underlay: ipaddress.IPv4Address | ipaddress.IPv6Address
    user: str = "root"
    port: int = 22
    key: str | None = None
    repo: str | None = None
    """Absolute path of the mrc-testbed checkout on the server (None: the runner's own)."""
    python: str | None = None
    """Absolute path of the Python that runs ``testbed worker`` there (None: the runner's)."""


@dataclass(frozen=True)
class Cluster:
    """The servers, in file order, and the underlay's MTU (bytes), VXLAN port and VNI base."""

    servers: tuple[Server, ...]
    underlay_mtu: int = 1500
    vxlan_port: int = VXLAN_PORT
    vni_base: int = 1000
    source: str = ""
    """The file it was read from ("" if built in code)."""
    lines: dict = field(default_factory=dict, compare=False, repr=False)
    """Key path -> line in ``source`` (``underlay.mtu``, ``servers[1].underlay``, ...)."""

    def line_for(self, key_path: str) -> int:
        """Line of ``key_path`` (or of ``underlay``, else 0: the whole file)."""
        return self.lines.get(key_path) or self.lines.get(key_path.split(".")[0]) or 0

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    def server(self, name: str) -> Server:
        for s in self.servers:
            if s.name == name:
                return s
        raise KeyError(name)
