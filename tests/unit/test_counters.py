"""Counter parsing on netlink messages encoded by pyroute2 (no kernel)."""

from __future__ import annotations

import struct

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from testbed.fabric import counters as C


def link_msg(index: int, **stats) -> bytes:
    msg = ifinfmsg()
    msg["header"]["type"] = 16
    msg["index"] = index
    msg["flags"] = 0x10043  # flags sit next to the index: a wrong offset would read them
    values = {name: 0 for name, _ in ifinfmsg.ifstats64.fields}
    values.update(stats)
    msg["attrs"] = [("IFLA_IFNAME", f"if{index}"), ("IFLA_MTU", 1500), ("IFLA_STATS64", values)]
    msg.encode()
    return bytes(msg.data)


def qdisc_msg(index: int, parent: int, drops: int, kind: str = "htb") -> bytes:
    msg = tcmsg()
    msg["header"]["type"] = 36
    msg["index"] = index
    msg["handle"] = 0x10000
    msg["parent"] = parent
    msg["attrs"] = [("TCA_KIND", kind), ("TCA_STATS2", {"attrs": [
        ("TCA_STATS_BASIC", {"bytes": 5, "packets": 6}),
        ("TCA_STATS_QUEUE", {"qlen": 1, "backlog": 2, "drops": drops, "requeues": 3, "overlimits": 4})]})]
    msg.encode()
    return bytes(msg.data)


def done_msg() -> bytes:
    return struct.pack("=IHHIIi", 20, C.NLMSG_DONE, 2, 1, 0, 0)


def test_attribute_numbers_come_from_pyroute2():
    assert (C.IFLA_STATS64, C.TCA_STATS2, C.TCA_STATS_QUEUE) == (23, 7, 3)


def test_parse_link_reads_stats64():
    data = link_msg(12, tx_bytes=4, tx_packets=2, rx_bytes=3, rx_packets=1, rx_dropped=99)
    assert C.parse_link(data, 0, len(data)) == (12, (4, 2, 3, 1))
    assert C.parse_link(data, 0, len(data), want={11}) == (12, None)


def test_parse_link_without_stats():
    msg = ifinfmsg()
    msg["header"]["type"] = 16
    msg["index"] = 7
    msg["attrs"] = [("IFLA_IFNAME", "x")]
    msg.encode()
    assert C.parse_link(bytes(msg.data), 0, len(msg.data)) == (7, None)


def test_parse_qdisc_reads_queue_drops():
    data = qdisc_msg(12, C.TC_H_ROOT, 77)
    assert C.parse_qdisc(data, 0, len(data)) == (12, C.TC_H_ROOT, 77)
    leaf = qdisc_msg(12, 0x10010, 5, "pfifo")
    assert C.parse_qdisc(leaf, 0, len(leaf)) == (12, 0x10010, 5)
    assert C.parse_qdisc(leaf, 0, len(leaf), root_only=True) == (12, 0x10010, None)


def test_iter_messages_walks_a_datagram():
    data = link_msg(10) + link_msg(11) + done_msg()
    msgs = list(C.iter_messages(data))
    assert [m[0] for m in msgs] == [16, 16, C.NLMSG_DONE]
    assert [C.parse_link(data, s, e)[0] for t, s, e in msgs[:2]] == [10, 11]


class FakeSock:
    def __init__(self, datagrams):
        self.datagrams = list(datagrams)
        self.sent = []

    def send(self, data):
        self.sent.append(data)

    def recv_into(self, buf):
        data = self.datagrams.pop(0)
        buf[:len(data)] = data
        return len(data)


def test_dump_spans_datagrams_until_done():
    sock = FakeSock([link_msg(10) + link_msg(11), link_msg(12) + done_msg()])
    seen = []
    C._dump(sock, C.LINK_DUMP, bytearray(1 << 16), lambda d, t, s, e: seen.append(C.parse_link(d, s, e)[0]))
    assert seen == [10, 11, 12]
    length, mtype, flags = struct.unpack_from("=IHH", sock.sent[0])
    assert (length, mtype) == (len(C.LINK_DUMP), 18) and flags & 0x300 == 0x300   # RTM_GETLINK, NLM_F_DUMP


def test_dump_error_raises():
    err = struct.pack("=IHHIIi", 20, 2, 0, 1, 0, -95)
    with pytest.raises(OSError, match="errno 95"):
        C._dump(FakeSock([err]), C.QDISC_DUMP, bytearray(1 << 16), lambda *a: None)


def stats_msg(index: int, **stats) -> bytes:
    msg = ifstatsmsg()
    msg["header"]["type"] = 92                 # RTM_NEWSTATS
    msg["ifindex"] = index
    msg["filter_mask"] = 1
    values = {name: 0 for name, _ in ifstatsmsg.ifstats64.fields}
    values.update(stats)
    msg["attrs"] = [("IFLA_STATS_LINK_64", values)]
    msg.encode()
    return bytes(msg.data)


def test_the_stats_dump_asks_for_the_64_bit_link_stats_only():
    length, mtype, flags = struct.unpack_from("=IHH", C.STATS_DUMP)
    assert (length, mtype) == (len(C.STATS_DUMP), 94) and flags & 0x300 == 0x300   # RTM_GETSTATS, NLM_F_DUMP
    family, ifindex, mask = struct.unpack_from("=B3xII", C.STATS_DUMP, 16)
    assert (family, ifindex, mask) == (0, 0, 1)    # IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64)


def test_parse_stats_reads_link_64():
    data = stats_msg(12, tx_bytes=4, tx_packets=2, rx_bytes=3, rx_packets=1, rx_dropped=99)
    assert C.parse_stats(data, 0, len(data)) == (12, (4, 2, 3, 1))
    assert C.parse_stats(data, 0, len(data), want={11}) == (12, None)


class FakeKernel:
    """One namespace's NETLINK_ROUTE socket: dumps of its interfaces (stats from their ifindex)
    and root qdiscs; ``getstats_errno`` refuses RTM_GETSTATS as an old kernel does."""

    def __init__(self, ifindexes, getstats_errno: int = 0):
        self.ifindexes, self.getstats_errno = ifindexes, getstats_errno
        self.sent, self.replies = [], []

    def send(self, data):
        self.sent.append(struct.unpack_from("=H", data, 4)[0])
        kind = self.sent[-1]
        if kind == 94 and self.getstats_errno:
            self.replies.append(struct.pack("=IHHIIi", 20, 2, 0, 1, 0, -self.getstats_errno))
            return
        one = {94: lambda i: stats_msg(i, tx_bytes=i * 10, tx_packets=i, rx_bytes=i * 20, rx_packets=2 * i),
               18: lambda i: link_msg(i, tx_bytes=i * 10, tx_packets=i, rx_bytes=i * 20, rx_packets=2 * i),
               38: lambda i: qdisc_msg(i, C.TC_H_ROOT, i + 1) + qdisc_msg(i, 0x10010, 1000, "pfifo")}[kind]
        self.replies.append(b"".join(one(i) for i in [1, *self.ifindexes]) + done_msg())   # 1: lo, not a port

    def recv_into(self, buf):
        data = self.replies.pop(0)
        buf[:len(data)] = data
        return len(data)


class FakeFabric:
    def __init__(self, getstats_errno: int = 0):
        from testbed.model.generators import fat_tree
        from testbed.model.topology import LinkParams
        from testbed.fabric import routing
        lp = LinkParams(rate_bps=10_000_000)
        self.topo = fat_tree(4, host_link=lp, fabric_link=lp)
        self.switch_handles = {}
        self.socks = {node: FakeKernel([routing.port_ifindex(self.topo, node, l) for l in self.topo.links_of[node]],
                                       getstats_errno) for node in self.topo.nodes}

    def is_local(self, node):
        return True

    def rtnl_socket(self, node):
        return self.socks[node]

    def link_rate_bps(self, link):
        return link.params.rate_bps


def _by_end(records):
    return {(r["link"], r["end"]): (r["tx_bytes"], r["tx_packets"], r["rx_bytes"], r["rx_packets"], r["drops"])
            for r in records}


def test_a_read_is_one_stats_dump_and_one_qdisc_dump_per_namespace():
    from testbed.fabric import routing
    fabric = FakeFabric()
    records = C.LinkCounters(fabric).read()
    assert len(records) == 2 * len(fabric.topo.links)
    for (name, end), got in _by_end(records).items():
        link = fabric.topo.link_by_name[name]
        i = routing.port_ifindex(fabric.topo, getattr(link, end).node, link)
        assert got == (i * 10, i, i * 20, 2 * i, i + 1)   # the root qdisc's drops, not its leaf's
    assert {tuple(k.sent) for k in fabric.socks.values()} == {(94, 38)}


def test_a_kernel_without_getstats_is_read_through_the_link_dump_from_then_on():
    import errno
    new, old = FakeFabric(), FakeFabric(getstats_errno=errno.EOPNOTSUPP)
    counters = C.LinkCounters(old)
    assert _by_end(counters.read()) == _by_end(C.LinkCounters(new).read())
    sent = [tuple(old.socks[node].sent) for node in counters._ends]
    assert sent[0] == (94, 18, 38) and set(sent[1:]) == {(18, 38)}   # refused once, not asked again
    counters.read()
    assert tuple(old.socks[next(iter(counters._ends))].sent) == (94, 18, 38, 18, 38)


def test_another_error_of_the_stats_dump_is_raised():
    import errno
    with pytest.raises(OSError, match=f"errno {errno.EPERM}"):
        C.LinkCounters(FakeFabric(getstats_errno=errno.EPERM)).read()
