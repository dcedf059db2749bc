"""Counter parsing on netlink messages encoded by pyroute2 (no kernel)."""

from __future__ import annotations

import struct

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
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
