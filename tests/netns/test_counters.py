"""Root tier: per-link-end counters read over netlink, checked against the kernel's own tools."""

from __future__ import annotations

import re
import socket

import pytest

from testbed.fabric.counters import LinkCounters
from testbed.faults import FaultInjector
from tests.netns.conftest import wait_for

HOST_LINK = "h0_0_0-e0_0"
SO_SNDBUFFORCE = 32
KEYS = {"link", "end", "node", "ifname", "tx_bytes", "tx_packets", "rx_bytes", "rx_packets", "drops", "rate_bps"}


def sysfs_stats(fabric, node: str, ifname: str) -> dict[str, int]:
    out = fabric.nodes[node].cmd(
        " ".join(f"cat /sys/class/net/{ifname}/statistics/{k};" for k in
                 ("tx_bytes", "tx_packets", "rx_bytes", "rx_packets")))
    return dict(zip(("tx_bytes", "tx_packets", "rx_bytes", "rx_packets"), map(int, out.split())))


def tc_dropped(fabric, node: str, ifname: str) -> dict[str, int]:
    out = fabric.nodes[node].cmd(f"tc -s qdisc show dev {ifname}")
    return {kind: int(n) for kind, n in re.findall(r"qdisc (\w+) .*?\n Sent \d+ bytes \d+ pkt \(dropped (\d+)", out)}


def backlog(fabric, node: str, ifname: str) -> int:
    """Packets queued in ``ifname``'s root qdisc."""
    out = fabric.nodes[node].cmd(f"tc -s qdisc show dev {ifname}")
    return int(re.search(r"backlog \S+ (\d+)p", out).group(1))


def record(counters, link: str, end: str) -> dict:
    return next(r for r in counters.read() if r["link"] == link and r["end"] == end)


def test_one_record_per_link_end(k4):
    records = LinkCounters(k4).read()
    assert len(records) == 2 * len(k4.topo.links) == 96
    for rec, (link, end) in zip(records, [(l, e) for l in k4.topo.links for e in "ab"]):
        port = getattr(link, end)
        assert set(rec) == KEYS
        assert (rec["link"], rec["end"], rec["node"], rec["ifname"]) == (link.name, end, port.node, port.ifname)
        assert all(isinstance(rec[k], int) and rec[k] >= 0 for k in KEYS - {"link", "end", "node", "ifname"})
        assert rec["rate_bps"] == link.params.rate_bps


def test_counters_match_sysfs_and_the_veth_peer(k4):
    counters = LinkCounters(k4)
    link = k4.topo.link_by_name[HOST_LINK]
    before = record(counters, HOST_LINK, "a")
    with k4.inside(link.a.node):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with sock:
        for _ in range(50):   # fewer than the 64-packet leaf queue: none dropped
            sock.sendto(b"y" * 100, (str(link.addr_of(link.b.node)), 9))
    assert wait_for(lambda: record(counters, HOST_LINK, "a")["tx_packets"] - before["tx_packets"] >= 50)
    a, b = (r for r in counters.read() if r["link"] == HOST_LINK)
    assert a["tx_packets"] - before["tx_packets"] >= 50
    assert a["tx_bytes"] - before["tx_bytes"] >= 50 * (14 + 40 + 8 + 100)
    # A veth end's tx is its peer's rx (the ends are read a moment apart: a late ICMP error may differ).
    assert 0 <= b["rx_packets"] - a["tx_packets"] <= 2 and 0 <= a["rx_packets"] - b["tx_packets"] <= 2
    assert (b["rx_bytes"] - a["tx_bytes"]) <= 2 * 200 and (a["rx_bytes"] - b["tx_bytes"]) <= 2 * 200
    for end in "ab":   # sysfs read between two read()s lies between them (ICMP errors may trickle)
        r0 = record(counters, HOST_LINK, end)
        sysfs = sysfs_stats(k4, r0["node"], r0["ifname"])
        r1 = record(counters, HOST_LINK, end)
        assert all(r0[k] <= v <= r1[k] for k, v in sysfs.items()), (r0, sysfs, r1)
        assert r1["tx_packets"] - r0["tx_packets"] < 5


def test_drops_are_the_egress_qdisc_drops(k4):
    """A flood beyond the host link's 20 Mbit/s overflows its 64-packet pfifo; HTB counts those drops too."""
    counters = LinkCounters(k4)
    link = k4.topo.link_by_name[HOST_LINK]
    before = record(counters, HOST_LINK, "a")["drops"]
    with k4.inside(link.a.node):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 64 << 20)  # the qdisc, not the socket, limits
        sock.setblocking(False)
        for _ in range(5000):
            sock.sendto(b"z" * 1000, (str(link.addr_of(link.b.node)), 9))
    assert wait_for(lambda: backlog(k4, link.a.node, link.a.ifname) == 0)  # 64 queued packets drain in ~30 ms
    rec = record(counters, HOST_LINK, "a")
    kernel = tc_dropped(k4, link.a.node, link.a.ifname)
    assert rec["drops"] - before > 1000
    assert rec["drops"] == kernel["htb"] == kernel["pfifo"]
    assert record(counters, HOST_LINK, "b")["drops"] == 0


def test_rate_bps_follows_set_rate(k4):
    counters = LinkCounters(k4)
    faults = FaultInjector(k4)
    try:
        faults.set_rate(HOST_LINK, 4_000_000)
        assert {record(counters, HOST_LINK, e)["rate_bps"] for e in "ab"} == {4_000_000}
        assert all(r["rate_bps"] == 20_000_000 for r in counters.read() if r["link"] != HOST_LINK)
    finally:
        faults.revert_all()
    assert {record(counters, HOST_LINK, e)["rate_bps"] for e in "ab"} == {20_000_000}


def test_read_is_cheap_on_k4(k4):
    counters = LinkCounters(k4)
    counters.read()
    for _ in range(50):   # repeated reads reuse what the first one opened (its cost belongs in `make bench`)
        assert len(counters.read()) == 96


def test_read_after_stop_raises_key_error_and_stop_closed_the_sockets():
    from tests.netns.conftest import small_fat_tree
    with small_fat_tree() as fabric:
        counters = LinkCounters(fabric)
        assert len(counters.read()) == 2 * len(fabric.topo.links)
        socks = [fabric.rtnl_socket(node) for node in fabric.topo.nodes]
        assert len({s.fileno() for s in socks}) == len(socks)   # one per namespace, kept open
    assert all(s.fileno() == -1 for s in socks)    # an open socket would keep its namespace alive
    with pytest.raises(KeyError):
        counters.read()
