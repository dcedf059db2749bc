"""A cross-server link as two VXLAN ends (root): two stand-in servers (namespaces joined by
an IPv6 underlay veth), one node namespace on each; each end is created from its server's
namespace straight into the node's, with the pinned ifindex, MAC and MTU, then shaped as a
veth would be. Checks reachability, the MTU limit, the underlay socket's namespace, and
that a fault (both ends down: a tunnel has no carrier) cuts it. Deleted by recorded name."""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import uuid

import pytest

from testbed.fabric import shaping
from testbed.fabric.vxlan import TunnelEnd, add_tunnel, inner_mtu
from testbed.fabric.netlink import Batch
from testbed.model.topology import LinkParams

UNDERLAY_MTU = 1500
MTU = inner_mtu(UNDERLAY_MTU, 6)      # 1430


def ip(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *argv], check=True, capture_output=True, text=True, timeout=10)


def ping(ns: str, dst: str, size: int = 56, count: int = 2) -> bool:
    r = subprocess.run(["ip", "netns", "exec", ns, "ping", "-6", "-n", "-q", "-c", str(count), "-i", "0.2",
                        "-W", "1", "-M", "do", "-s", str(size), dst], capture_output=True, timeout=20)
    return r.returncode == 0


def nsfd(name: str) -> int:
    return os.open(f"/var/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)


@pytest.fixture
def servers():
    tag = uuid.uuid4().hex[:8]
    names = {k: f"mrcvx-{k}-{tag}" for k in ("srva", "srvb", "na", "nb")}
    created = []
    try:
        for name in names.values():
            ip("netns", "add", name)
            created.append(name)
        for k in ("na", "nb"):     # as the fabric's nodes: addresses survive a link going down
            for scope in ("all", "default"):
                subprocess.run(["ip", "netns", "exec", names[k], "sysctl", "-qw",
                                f"net.ipv6.conf.{scope}.keep_addr_on_down=1"], check=True, timeout=10)
        ip("-n", names["srva"], "link", "add", "ul0", "mtu", str(UNDERLAY_MTU), "type", "veth", "peer", "name", "ul0",
           "netns", names["srvb"])
        for k, addr in (("srva", "fd00:99::1/64"), ("srvb", "fd00:99::2/64")):
            ip("-n", names[k], "addr", "add", addr, "dev", "ul0", "nodad")
            ip("-n", names[k], "link", "set", "ul0", "up")
        yield names
    finally:
        for name in reversed(created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def end(side: str) -> TunnelEnd:
    a = side == "a"
    return TunnelEnd(link="a0_0-c0_1", node="na" if a else "nb", ifname="a0_0-eth3" if a else "c0_1-eth0",
                     ifindex=103 if a else 100, mac="02:00:00:21:00:01" if a else "02:00:00:21:00:02", mtu=MTU,
                     vni=1033, local=ipaddress.ip_address("fd00:99::1" if a else "fd00:99::2"),
                     remote=ipaddress.ip_address("fd00:99::2" if a else "fd00:99::1"), port=4789)


def build(names: dict, side: str, rate_bps: int = 50_000_000) -> TunnelEnd:
    e = end(side)
    node, server = names["n" + side], names["srv" + side]
    node_fd, server_fd = nsfd(node), nsfd(server)
    try:
        batch = Batch(f"vxlan {side}")
        add_tunnel(batch, e, node_fd)
        batch.send(server_fd)                        # from the server: the underlay socket lives there
        cfg = Batch(f"{side}: config")
        cfg.link_set(index=e.ifindex, up=True)
        cfg.addr_add(index=e.ifindex, address=f"fd00:5::{1 if side == 'a' else 2}", prefixlen=64)
        shaping.compile_into(cfg, e.ifindex, shaping.plan(LinkParams(rate_bps, 32, mtu=MTU), have_netem=False))
        cfg.send(node_fd)
    finally:
        os.close(node_fd)
        os.close(server_fd)
    return e


def test_a_vxlan_link_between_two_stand_in_servers(servers):
    a, b = build(servers, "a"), build(servers, "b")
    info = json.loads(ip("-n", servers["na"], "-d", "-j", "link", "show", "dev", a.ifname).stdout)[0]
    assert (info["ifindex"], info["address"], info["mtu"]) == (103, a.mac, MTU)
    vx = info["linkinfo"]["info_data"]
    assert (vx["id"], vx["port"], vx["remote6"], vx["local6"], vx["learning"]) == \
        (1033, 4789, "fd00:99::2", "fd00:99::1", False)
    assert info.get("link_netnsid") is not None      # the socket stays in the server's namespace
    qdiscs = json.loads(subprocess.run(["tc", "-n", servers["nb"], "-j", "qdisc", "show", "dev", b.ifname],
                                       check=True, capture_output=True, text=True, timeout=10).stdout)
    assert {q["kind"] for q in qdiscs} >= {"htb", "pfifo"}
    assert ping(servers["na"], "fd00:5::2")
    assert ping(servers["na"], "fd00:5::2", size=MTU - 48)            # a full inner MTU packet fits
    assert not ping(servers["na"], "fd00:5::2", size=MTU - 48 + 1, count=1)
    # a tunnel has no carrier: one end down leaves the other up, so a fault takes both down
    ip("-n", servers["na"], "link", "set", a.ifname, "down")
    state_b = json.loads(ip("-n", servers["nb"], "-j", "link", "show", "dev", b.ifname).stdout)[0]["operstate"]
    assert state_b in ("UP", "UNKNOWN")
    ip("-n", servers["nb"], "link", "set", b.ifname, "down")
    assert not ping(servers["nb"], "fd00:5::1", count=1)
    for side, e in (("a", a), ("b", b)):
        ip("-n", servers["n" + side], "link", "set", e.ifname, "up")
    assert ping(servers["na"], "fd00:5::2")
