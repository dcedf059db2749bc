"""Per-link-end interface and qdisc counters, read cheaply enough to poll every 100 ms.

One :meth:`LinkCounters.read` sends, per namespace, one ``RTM_GETSTATS`` dump
(``IFLA_STATS_LINK_64`` only, rtnetlink(7); a kernel that refuses it, before 4.7, gets an
``RTM_GETLINK`` dump instead) and one ``RTM_GETQDISC`` dump, on the fabric's NETLINK_ROUTE
socket of that namespace (:meth:`testbed.fabric.local.Fabric.rtnl_socket`: opened once,
closed when the fabric stops; no subprocesses, no pyroute2 request pipeline). Replies are
parsed with a lean attribute walk whose message layouts and attribute numbers come from
pyroute2's message classes (``ifstatsmsg``, ``ifinfmsg``, ``ifinfmsg.ifstats64``, ``tcmsg``,
``stats2.queue``): a full pyroute2 ``decode()`` of a k=4 fat-tree's ~450 messages costs
~35 ms, the walk a few. A stats message is a fraction of a link message, which carries
every attribute of the interface (the costs: docs/engine.md, "At scale"; ``make bench``
prints a whole read's, ``counters_read_ms``).

Sources of each record's fields:

* ``tx_bytes``/``tx_packets``/``rx_bytes``/``rx_packets``: ``IFLA_STATS64``
  of the end's interface (for a veth, one end's tx is the other's rx; packets
  dropped by a :mod:`testbed.faults` ingress rule are counted in rx).
* ``drops``: the root HTB qdisc's drop counter on the end's egress
  (``TCA_STATS2``/``TCA_STATS_QUEUE``). HTB adds every drop of its leaf
  (pfifo/netem overflow) to its own counter, so this is HTB + leaf, counted
  once; cumulative since the fabric started.
* ``ecn_marked``/``trimmed``/``switch_drops`` (only on a router end running the switch
  program, :mod:`testbed.fabric.switch`): packets it marked CE, trimmed to their header, and
  dropped because its header queue overflowed; cumulative.
* ``rate_bps``: the HTB rate now configured, tracked by
  :meth:`testbed.faults.FaultInjector.set_rate` (:func:`testbed.faults.current_rate_bps`),
  not read back from the kernel (that would cost a class dump per namespace).
"""

from __future__ import annotations

import errno
import socket
import struct
import threading
from collections.abc import Iterator

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_GETQDISC, RTM_GETSTATS
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import stats2

from testbed.fabric import routing
from testbed.fabric.netlink import NLMSG_ERROR

NLMSG_DONE = 3
TC_H_ROOT = 0xFFFFFFFF
NLA_TYPE_MASK = 0x3FFF
_NLMSGHDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")
_RECV_BYTES = 1 << 16


def _layout(fields) -> struct.Struct:
    """struct for a pyroute2 ``fields`` tuple (native order, no padding: netlink packs these)."""
    return struct.Struct("=" + "".join(fmt for _, fmt in fields))


def _field_index(fields, name: str) -> int:
    """Position of ``name`` in the tuple that :func:`_layout`'s struct unpacks (pad bytes yield nothing)."""
    return [n for n, fmt in fields if not fmt.endswith("x")].index(name)


def _nla_number(cls, name: str) -> int:
    """Attribute type number of ``name`` in a pyroute2 class's ``nla_map``."""
    for i, entry in enumerate(cls.nla_map):
        if len(entry) == 3 and entry[1] == name:
            return entry[0]
        if len(entry) == 2 and entry[0] == name:
            return i
    raise KeyError(name)


_IFINFO = _layout(ifinfmsg.fields)
_IFINFO_INDEX = _field_index(ifinfmsg.fields, "index")
IFLA_STATS64 = _nla_number(ifinfmsg, "IFLA_STATS64")
_STATS64 = _layout(ifinfmsg.ifstats64.fields)
_S_RXP, _S_TXP, _S_RXB, _S_TXB = (_field_index(ifinfmsg.ifstats64.fields, n) for n in
                                  ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes"))
_IFSTATS = _layout(ifstatsmsg.fields)
_IFSTATS_INDEX = _field_index(ifstatsmsg.fields, "ifindex")
IFLA_STATS_LINK_64 = _nla_number(ifstatsmsg, "IFLA_STATS_LINK_64")
_TCMSG = _layout(tcmsg.fields)
_TC_INDEX, _TC_PARENT = _field_index(tcmsg.fields, "index"), _field_index(tcmsg.fields, "parent")
TCA_STATS2 = _nla_number(tcmsg, "TCA_STATS2")
TCA_STATS_QUEUE = _nla_number(stats2, "TCA_STATS_QUEUE")
_QSTATS = _layout(stats2.queue.fields)
_Q_DROPS = _field_index(stats2.queue.fields, "drops")


def _request(mtype: int, body: struct.Struct, payload: bytes | None = None) -> bytes:
    payload = bytes(body.size) if payload is None else payload
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), mtype, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + payload


LINK_DUMP = _request(RTM_GETLINK, _IFINFO)
QDISC_DUMP = _request(RTM_GETQDISC, _TCMSG)
#: ``filter_mask`` bit of an attribute ``a`` is ``1 << (a - 1)`` (``IFLA_STATS_FILTER_BIT``).
STATS_DUMP = _request(RTM_GETSTATS, _IFSTATS,
                      _IFSTATS.pack(*(1 << IFLA_STATS_LINK_64 - 1 if name == "filter_mask" else 0
                                      for name, fmt in ifstatsmsg.fields if not fmt.endswith("x"))))
_REFUSED = (errno.EOPNOTSUPP, errno.EINVAL)
"""Errors of a kernel without ``RTM_GETSTATS``: the link dump is used instead."""
_READ_LOCK = threading.Lock()
"""One reader at a time on the fabric's shared sockets (a dump's replies are not tagged by reader)."""


def iter_messages(data: bytes | memoryview) -> Iterator[tuple[int, int, int]]:
    """(type, start, end) of each netlink message in one datagram."""
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, mtype = _NLMSGHDR.unpack_from(data, off)[:2]
        if length < _NLMSGHDR.size:
            break
        yield mtype, off, off + length
        off += (length + 3) & ~3


def _parse_stats64(data, start: int, end: int, want, header: struct.Struct, index: int,
                   attr: int) -> tuple[int, tuple[int, int, int, int] | None]:
    """(ifindex, (tx_bytes, tx_packets, rx_bytes, rx_packets) or None) of a message whose body is
    ``header`` (ifindex at field ``index``) then attributes, one of them ``attr`` holding a
    ``rtnl_link_stats64``; ``want`` as in :func:`parse_link`."""
    body = start + _NLMSGHDR.size
    ifindex = header.unpack_from(data, body)[index]
    if want is not None and ifindex not in want:
        return ifindex, None
    # Hot loop (every port, every 100 ms): the attribute walk inlined.
    off = body + header.size
    unpack = _NLA.unpack_from
    while off + 4 <= end:
        length, atype = unpack(data, off)
        if length < 4:
            break
        if atype & NLA_TYPE_MASK == attr and length - 4 >= _STATS64.size:
            s = _STATS64.unpack_from(data, off + 4)
            return ifindex, (s[_S_TXB], s[_S_TXP], s[_S_RXB], s[_S_RXP])
        off += (length + 3) & ~3
    return ifindex, None


def parse_link(data, start: int, end: int, want=None) -> tuple[int, tuple[int, int, int, int] | None]:
    """(ifindex, (tx_bytes, tx_packets, rx_bytes, rx_packets) or None) of one RTM_NEWLINK message.

    With ``want`` (a container of ifindexes), other interfaces are not parsed (stats None).
    """
    return _parse_stats64(data, start, end, want, _IFINFO, _IFINFO_INDEX, IFLA_STATS64)


def parse_stats(data, start: int, end: int, want=None) -> tuple[int, tuple[int, int, int, int] | None]:
    """As :func:`parse_link`, of one RTM_NEWSTATS message (``IFLA_STATS_LINK_64``)."""
    return _parse_stats64(data, start, end, want, _IFSTATS, _IFSTATS_INDEX, IFLA_STATS_LINK_64)


def parse_qdisc(data, start: int, end: int, root_only: bool = False) -> tuple[int, int, int | None]:
    """(ifindex, parent, drops or None) of one RTM_NEWQDISC message (``root_only``: skip non-root ones)."""
    body = start + _NLMSGHDR.size
    hdr = _TCMSG.unpack_from(data, body)
    if root_only and hdr[_TC_PARENT] != TC_H_ROOT:
        return hdr[_TC_INDEX], hdr[_TC_PARENT], None
    # Hot loop (every root qdisc, every 100 ms): the walk to TCA_STATS2 / TCA_STATS_QUEUE inlined.
    unpack = _NLA.unpack_from
    off, stop, want = body + _TCMSG.size, end, TCA_STATS2
    while off + 4 <= stop:
        length, atype = unpack(data, off)
        if length < 4:
            break
        if atype & NLA_TYPE_MASK == want:
            if want == TCA_STATS_QUEUE:
                if length - 4 >= _QSTATS.size:
                    return hdr[_TC_INDEX], hdr[_TC_PARENT], _QSTATS.unpack_from(data, off + 4)[_Q_DROPS]
                break
            off, stop, want = off + 4, off + length, TCA_STATS_QUEUE   # into TCA_STATS2
            continue
        off += (length + 3) & ~3
    return hdr[_TC_INDEX], hdr[_TC_PARENT], None


def _dump(sock: socket.socket, request: bytes, buf: bytearray, handle) -> None:
    """Send one dump request and call ``handle(data, mtype, start, end)`` for every reply message."""
    sock.send(request)
    view = memoryview(buf)
    while True:
        n = sock.recv_into(buf)
        data = view[:n]
        for mtype, start, end in iter_messages(data):
            if mtype == NLMSG_DONE:
                return
            if mtype == NLMSG_ERROR:
                err = -struct.unpack_from("=i", data, start + _NLMSGHDR.size)[0]
                if err:
                    raise OSError(err, f"netlink dump: errno {err}")
                return
            handle(data, mtype, start, end)


class LinkCounters:
    """Counters of every link end of a started fabric (see the module docstring for sources)."""

    def __init__(self, fabric):
        self.fabric = fabric
        topo = fabric.topo
        #: node -> {ifindex: (link, end letter, port)}, in topology link order
        self._ends: dict[str, dict[int, tuple]] = {}
        self._order: list[tuple[str, int]] = []
        for link in topo.links:
            for letter, port in (("a", link.a), ("b", link.b)):
                if not fabric.is_local(port.node):   # a shard reads its own ends
                    continue
                ifindex = routing.port_ifindex(topo, port.node, link)
                self._ends.setdefault(port.node, {})[ifindex] = (link, letter, port)
                self._order.append((port.node, ifindex))
        self._buf = bytearray(_RECV_BYTES)
        self._stats_dump, self._parse = STATS_DUMP, parse_stats

    def _interfaces(self, sock, node: str, ends: dict, stats: dict) -> None:
        """Every interface's stats in ``node``'s namespace into ``stats[node, ifindex]``."""
        parse = self._parse

        def on_link(data, mtype, start, end):
            ifindex, s = parse(data, start, end, ends)
            if s is not None:
                stats[node, ifindex] = s
        try:
            _dump(sock, self._stats_dump, self._buf, on_link)
        except OSError as exc:
            if exc.errno not in _REFUSED or self._stats_dump is LINK_DUMP:
                raise
            self._stats_dump, self._parse = LINK_DUMP, parse_link
            self._interfaces(sock, node, ends, stats)

    def read(self) -> list[dict]:
        """One record per link end, links in topology order, ``a`` end first.

        ``{"link", "end": "a"|"b", "node", "ifname", "tx_bytes", "tx_packets",
        "rx_bytes", "rx_packets", "drops", "rate_bps"}``: bytes and packets
        cumulative since the interface was created, ``drops`` in packets
        (egress HTB + leaf), ``rate_bps`` in bits/s. Raises KeyError if the
        fabric is stopped, OSError if a namespace, a dump or an interface is missing.
        """
        stats: dict[tuple[str, int], tuple] = {}
        drops: dict[tuple[str, int], int] = {}
        with _READ_LOCK:
            for node, ends in self._ends.items():
                sock = self.fabric.rtnl_socket(node)

                def on_qdisc(data, mtype, start, end, node=node, ends=ends):
                    ifindex, _, d = parse_qdisc(data, start, end, root_only=True)
                    if d is not None and ifindex in ends:
                        drops[node, ifindex] = d

                self._interfaces(sock, node, ends, stats)
                _dump(sock, QDISC_DUMP, self._buf, on_qdisc)
        out = []
        switch = self.fabric.switch_handles
        for key in self._order:
            link, letter, port = self._ends[key[0]][key[1]]
            if key not in stats:
                raise OSError(errno.ENODEV, f"{port.node}: no IFLA_STATS64 for {port.ifname} (ifindex {key[1]})")
            tx_b, tx_p, rx_b, rx_p = stats[key]
            rec = {"link": link.name, "end": letter, "node": port.node, "ifname": port.ifname,
                   "tx_bytes": tx_b, "tx_packets": tx_p, "rx_bytes": rx_b, "rx_packets": rx_p,
                   "drops": drops.get(key, 0), "rate_bps": self.fabric.link_rate_bps(link)}
            handle = switch.get((link.name, port.node))
            if handle is not None:   # the switch program's own counters (one map lookup each)
                c = handle.counters()
                rec.update(ecn_marked=c["marked"], trimmed=c["trimmed"], switch_drops=c["dropped"])
            out.append(rec)
        return out
