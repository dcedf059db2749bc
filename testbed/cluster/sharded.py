"""A fabric built as shards in this process: one :class:`~testbed.fabric.local.Fabric` per server
of a placement, each creating its VXLAN ends from that server's underlay namespace.

This is how a fabric spread over servers looks from the runner's side, with every
"server" on this machine: stand-in servers are network namespaces joined by an underlay
(:func:`standin_underlay`), the layout the root-tier tests use. It offers the interface the
runner, the fault injector, the counters and path tracing use (``topo``, ``nsfd``,
``inside``, ``popen``, ``set_link``, ``reconverge``, ...), each call routed to the shard
that owns the node, and a link fault to every shard holding an end of the link.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from testbed.fabric.backend import register_backend
from testbed.fabric.local import Fabric, Shard
from testbed.fabric.ledger import LEDGER_DIR, Ledger
from testbed.fabric.netlink import netns
from testbed.model.topology import Topology
from testbed.model.cluster import Placement
from testbed.model.cluster import Cluster
from testbed.fabric.ops import LocalOps


@register_backend("sharded")
@dataclass
class ShardedFabric(LocalOps):
    """``topo`` placed by ``placement`` over ``cluster``'s servers; ``underlay_netns``:
    server name -> path of its underlay namespace (absent: this process's namespace)."""

    topo: Topology
    placement: Placement
    cluster: Cluster
    underlay_netns: dict[str, str] = field(default_factory=dict)
    have_netem: bool = False
    ledger_dir: os.PathLike = LEDGER_DIR
    shards: dict[str, Fabric] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    _rates_bps: dict[str, int] = field(default_factory=dict)

    def is_local(self, node: str) -> bool:
        """Every node: each shard is built by this process."""
        return True

    def __enter__(self) -> "ShardedFabric":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "ShardedFabric":
        """Build every shard (one after another; a real deployment builds them at once, one
        per server); on any error tear down what was built and re-raise. ``timings``: the
        slowest shard's seconds per phase, and ``shards`` the sum."""
        try:
            for server in self.placement.servers:
                shard = Shard(server, self.placement, self.cluster, self.underlay_netns.get(server))
                fabric = Fabric(self.topo, have_netem=self.have_netem, ledger_dir=self.ledger_dir, shard=shard)
                self.shards[server] = fabric
                fabric.start()
        except BaseException:
            self.stop()
            raise
        for fabric in self.shards.values():
            for phase, secs in fabric.timings.items():
                self.timings[phase] = max(self.timings.get(phase, 0.0), secs)
        return self

    def stop(self) -> float:
        total = sum(f.stop() for f in self.shards.values())
        self.shards.clear()
        self.timings["teardown"] = total
        return total

    # -- routing calls to the owning shard ----------------------------------------
    def shard_of(self, node: str) -> Fabric:
        return self.shards[self.placement.where[node]]

    @property
    def nodes(self) -> dict:
        return {name: node for f in self.shards.values() for name, node in f.nodes.items()}

    @property
    def switch_handles(self) -> dict:
        return {k: v for f in self.shards.values() for k, v in f.switch_handles.items()}

    def nsfd(self, node: str) -> int:
        return self.shard_of(node).nsfd(node)

    def rtnl_socket(self, node: str):
        return self.shard_of(node).rtnl_socket(node)

    @contextmanager
    def inside(self, node: str) -> Iterator[None]:
        with self.shard_of(node).inside(node):
            yield

    def host_pid(self, node: str) -> int:
        return self.shard_of(node).host_pid(node)

    def popen(self, node: str, argv: list[str], **kwargs):
        return self.shard_of(node).popen(node, argv, **kwargs)

    def evs(self, src_host: str, dst_host: str, *, limit: int | None = None):
        return self.topo.evs(src_host, dst_host, limit=limit)

    def set_link(self, name: str, up: bool) -> None:
        """Down or up on every shard holding an end: a cut link's two VXLAN ends both change
        (a tunnel carries no carrier), an intra-shard veth on its ``a`` end as on one machine."""
        link = self.topo.link_by_name[name]
        servers = {self.placement.where[link.a.node], self.placement.where[link.b.node]}
        for server in sorted(servers):
            self.shards[server].set_link(name, up)

    @property
    def links_down(self) -> frozenset[str]:
        return frozenset().union(*(f.links_down for f in self.shards.values()))

    def reconverge(self, failed=None) -> None:
        failed = self.links_down if failed is None else failed
        for f in self.shards.values():
            f.reconverge(failed)

    def switch_counters(self) -> dict:
        out = {}
        for f in self.shards.values():
            out.update(f.switch_counters())
        return out

    def host_link_rate_bps(self) -> int:
        return min(l.params.rate_bps for l in self.topo.links if l.cls == "host")


@dataclass
class StandinUnderlay:
    """Stand-in servers on this machine: one network namespace per server (``netns``: name
    -> path), each with its underlay address on a port of one bridge in a namespace of
    its own (``bridge_ns``), MTU ``cluster.underlay_mtu``. The names are in a ledger before
    they exist, so ``testbed clean`` removes them after a killed process; :meth:`close`
    deletes them by recorded name."""

    netns: dict[str, str]
    bridge_ns: str
    ledger: Ledger
    client_address: str = ""
    """An address on the bridge, in ``bridge_ns``: where the runner's SSH connections come from."""
    sshd: dict[str, subprocess.Popen] = field(default_factory=dict)

    def close(self) -> None:
        for proc in self.sshd.values():
            proc.kill()
            proc.wait()
        self.sshd.clear()
        self.ledger.kill_processes()
        self.ledger.remove_resources()
        self.ledger.discard()

    def start_sshd(self, cluster: Cluster, keydir: Path) -> Path:
        """An sshd (openssh-server) in every server's namespace, listening on its underlay
        address and port, root login with a key made here; returns the private key file.
        Their PIDs go to the ledger. Raises FileNotFoundError without /usr/sbin/sshd."""
        sshd = Path("/usr/sbin/sshd")
        if not sshd.exists():
            raise FileNotFoundError("/usr/sbin/sshd (Debian package openssh-server) is missing")
        keydir.mkdir(parents=True, exist_ok=True)
        for name in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keydir / name)],
                           check=True, capture_output=True, timeout=30)
        (keydir / "authorized_keys").write_text((keydir / "client.pub").read_text())
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # sshd's privilege-separation directory
        for server in cluster.servers:
            cfg = keydir / f"sshd_config.{server.name}"
            cfg.write_text(f"ListenAddress {server.underlay}\nPort {server.port}\nHostKey {keydir / 'host'}\n"
                           f"AuthorizedKeysFile {keydir / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
                           "StrictModes no\nPidFile none\nUsePAM no\nPasswordAuthentication no\n"
                           "KbdInteractiveAuthentication no\nLogLevel ERROR\n")
            proc = subprocess.Popen(["ip", "netns", "exec", Path(self.netns[server.name]).name, str(sshd), "-D", "-e",
                                     "-f", str(cfg)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=open(keydir / f"sshd.{server.name}.log", "wb"))
            self.sshd[server.name] = proc
            self.ledger.add_processes([(proc.pid, server.name, "sshd")])
        return keydir / "client"

    def socket_to(self, server, timeout_s: float = 10.0) -> socket.socket:
        """A TCP connection to ``server``'s SSH port made from the bridge namespace (retried
        while its sshd starts, until ``timeout_s``)."""
        fd = os.open(f"/var/run/netns/{self.bridge_ns}", os.O_RDONLY | os.O_CLOEXEC)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    with netns(fd):
                        return socket.create_connection((str(server.underlay), server.port), timeout=timeout_s)
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        finally:
            os.close(fd)


def standin_underlay(cluster: Cluster, tag: str | None = None, *,
                     ledger_dir: os.PathLike = LEDGER_DIR) -> StandinUnderlay:
    """Namespaces ``mrcsrv-<server>-<tag>`` holding each server's underlay address, joined by
    a bridge in ``mrcul-<tag>``; torn down on failure. Raises subprocess.CalledProcessError."""
    tag = tag or uuid.uuid4().hex[:6]
    bridge_ns = f"mrcul-{tag}"
    under = StandinUnderlay({}, bridge_ns, Ledger.create(f"stand-in underlay {tag}", Path(ledger_dir)))

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=10)

    def add_netns(name: str) -> None:
        under.ledger.netns.append(name)
        under.ledger.save()
        ip("netns", "add", name)

    try:
        add_netns(bridge_ns)
        ip("-n", bridge_ns, "link", "add", "br0", "mtu", str(cluster.underlay_mtu), "type", "bridge")
        ip("-n", bridge_ns, "link", "set", "br0", "up")
        plen = 64 if cluster.servers[0].underlay.version == 6 else 24
        taken = {s.underlay for s in cluster.servers}
        client = next(a for a in (cluster.servers[0].underlay + i for i in range(0xfe, 0x1fe)) if a not in taken)
        ip("-n", bridge_ns, "addr", "add", f"{client}/{plen}", "dev", "br0",
           *(["nodad"] if client.version == 6 else []))
        under.client_address = str(client)
        for i, server in enumerate(cluster.servers):
            ns = f"mrcsrv-{server.name}-{tag}"
            add_netns(ns)
            port = f"p{i}"
            ip("-n", ns, "link", "add", "ul0", "mtu", str(cluster.underlay_mtu), "type", "veth", "peer",
               "name", port, "mtu", str(cluster.underlay_mtu), "netns", bridge_ns)   # both ends: a veth
            # drops what exceeds its peer's MTU, and the bridge takes its ports' smallest
            ip("-n", bridge_ns, "link", "set", port, "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{server.underlay}/{plen}", "dev", "ul0",
               *(["nodad"] if server.underlay.version == 6 else []))
            ip("-n", ns, "link", "set", "ul0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            under.netns[server.name] = f"/var/run/netns/{ns}"
    except BaseException:
        under.close()
        raise
    return under
