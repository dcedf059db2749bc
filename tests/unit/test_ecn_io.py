"""ECN through agents.net.udp over real loopback UDP/IPv6 (::1), no root.

A sender whose sockets carry traffic class 3 (CE, ``Endpoint(send_tclass=3)``) stands in for
a marking switch: the receiving endpoint must read CE per datagram and hand it to the QP, whose
SACK then carries the ECN echo; the requester puts that EV in SKIP and NSCC takes its ECN
branch. With ECN off the wire carries traffic class 0, as before ECN support.
"""
from __future__ import annotations

import os
import random
import socket
import sys
from types import SimpleNamespace

import pytest

from agents.net.udp import CE, ECT0, UDP_NO_CHECK6_RX, Endpoint, EventLoop, Route
from agents.mrc import (EVEvent, EVState, QP, QPAttr, QPConfig, WCStatus, WorkCompletion,
                        connect_pair)
from agents.mrc import packet as pk
from tests.conftest import ipv6_loopback_ok

SIZE = 256 << 10
EVS = [0, 1, 2, 3]


pytestmark = pytest.mark.skipif(not ipv6_loopback_ok(), reason="no IPv6 loopback")


def tclass_of(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS)


def sockets_of(ep: Endpoint) -> list[socket.socket]:
    return [ep.sock, *ep._src_socks.values(), *ep._dest_socks.values()]


def qp_pair(cc_params: dict):
    # NSCC with a tiny fixed base RTT and no target floor: every loopback RTT is above the
    # target, so an ECN echo is the "ECN, delay >= target" case (multiplicative decrease).
    cfg = QPConfig(min_rto_s=0.05, probe_interval_s=0.02, probe_timeout_s=0.05,
                   cc="uet-1.0-nscc", cc_params=cc_params)
    a = QP(10, rng=random.Random(1), config=cfg)
    b = QP(20, rng=random.Random(2), memory=bytearray(SIZE), config=cfg)
    connect_pair(a, b, EVS, attr=QPAttr(timeout=12), now=0.0)
    return a, b


def record_sacks(qp: QP) -> list[tuple]:
    """The SACKs ``qp`` processes, as ``packet.unpack_sack`` tuples (mode, flags, ...)."""
    sacks: list[tuple] = []
    on_sack = qp.requester.on_sack

    def record(f, now):
        sacks.append(f)
        on_sack(f, now)

    qp.requester.on_sack = record
    return sacks


def transfer(*, ecn_a: bool, ecn_b: bool, tclass_a: int | None, cc_params: dict) -> SimpleNamespace:
    """A (requester, on endpoint ea) writes SIZE bytes to B (responder, on eb) over 4 EVs."""
    loop = EventLoop()
    ea = Endpoint(loop, bind_addr="::1", port=0, ecn=ecn_a, send_tclass=tclass_a)
    eb = Endpoint(loop, bind_addr="::1", port=0, ecn=ecn_b)
    try:
        a, b = qp_pair(cc_params)
        sacks = record_sacks(a)
        ea.attach(a, {ev: Route("::1", eb.port) for ev in EVS})
        eb.attach(b, {ev: Route("::1", ea.port) for ev in EVS})
        tclasses = {"a": [tclass_of(s) for s in sockets_of(ea)],
                    "b": [tclass_of(s) for s in sockets_of(eb)]}
        src = os.urandom(SIZE)
        a.post_write(wr_id=1, local=src, remote_offset=0)
        ea.kick(a)
        events: list = []

        def finished():
            while (e := a.next_event()) is not None:
                events.append(e)
            return any(isinstance(e, WorkCompletion) for e in events)

        assert loop.run(until=finished, timeout_s=30)
        wc = [e for e in events if isinstance(e, WorkCompletion)]
        assert wc[0].status is WCStatus.SUCCESS and b.responder.memory.tobytes() == src
        return SimpleNamespace(a=a, b=b, ea=ea, eb=eb, sacks=sacks, tclasses=tclasses,
                               ev_events=[e for e in events if isinstance(e, EVEvent)])
    finally:
        ea.close()
        eb.close()
        loop.close()


ECN_CC = {"ecn_capable": True, "base_rtt_s": 1e-6, "min_target_s": 0.0}


def test_ce_on_the_wire_reaches_the_qp_and_comes_back_as_ecn_echo_skip_and_decrease():
    r = transfer(ecn_a=True, ecn_b=True, tclass_a=CE, cc_params=ECN_CC)
    assert r.tclasses == {"a": [CE] * len(r.tclasses["a"]), "b": [ECT0] * len(r.tclasses["b"])}
    assert r.eb.rx_ce >= r.b.responder.rx_packets > 0          # every data packet arrived CE-marked
    assert r.ea.rx_ce == 0                           # the SACKs were ECT(0), not CE
    echoed = [s for s in r.sacks if s[1] & pk.FLAG_ECN_ECHO]
    # every mark is echoed at once; a run of marks on one EV makes it ALWAYS_SKIP
    assert echoed and all(s[0] in (pk.SackMode.SKIP_ONCE, pk.SackMode.ALWAYS_SKIP) for s in echoed)
    assert {s[6] for s in echoed} <= set(EVS)
    assert len(echoed) == len(r.sacks) or r.a.requester.rtx_packets   # a duplicate's SACK may not echo
    # SKIP is NIC-internal: counted, never reported as an EV event (mrc_ctl.h event mask)
    assert r.a.stats()["ev_skips"]["ecn"] == len(echoed)
    assert not [e for e in r.ev_events if EVState.SKIP in (e.old, e.new)]
    nscc = r.a.cc
    assert nscc.ecn_capable and nscc.ecn_count == len(echoed)
    assert nscc.md_count >= 1                        # ECN with delay above target: decrease


def test_ect0_without_marks_echoes_nothing():
    r = transfer(ecn_a=True, ecn_b=True, tclass_a=None, cc_params=ECN_CC)
    assert r.tclasses == {"a": [ECT0] * len(r.tclasses["a"]), "b": [ECT0] * len(r.tclasses["b"])}
    assert r.ea.rx_ce == r.eb.rx_ce == 0
    assert r.sacks and not any(s[1] & pk.FLAG_ECN_ECHO for s in r.sacks)
    assert not [e for e in r.ev_events if e.new is EVState.SKIP]
    assert r.a.cc.ecn_count == 0 and r.a.cc.md_count == 0   # ecn_capable: no delay-only decrease


def test_ecn_off_receiver_ignores_ce_and_sends_traffic_class_zero():
    r = transfer(ecn_a=False, ecn_b=False, tclass_a=CE, cc_params={})
    assert r.tclasses["b"] == [0] * len(r.tclasses["b"])
    assert r.eb.rx_ce == 0 and not any(s[1] & pk.FLAG_ECN_ECHO for s in r.sacks)
    assert not [e for e in r.ev_events if e.new is EVState.SKIP]


def wire_tclasses(*, ecn: bool, src_port: bool) -> list[int]:
    """Traffic classes of the datagrams a QP sends, read by a plain IPV6_RECVTCLASS socket."""
    loop = EventLoop()
    ep = Endpoint(loop, bind_addr="::1", port=0, ecn=ecn)
    sniffer = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        sniffer.bind(("::1", 0))
        sniffer.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
        sniffer.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_RX, 1)   # the endpoint sends checksum 0
        sniffer.settimeout(2.0)
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
        a, _ = qp_pair({})
        dest = sniffer.getsockname()[1]
        ep.attach(a, {ev: Route("::1", dest, port if src_port and ev == 0 else None)
                      for ev in EVS})
        a.post_write(wr_id=1, local=bytes(16 * 1024), remote_offset=0)
        ep.kick(a)
        out = []
        for _ in range(min(8, ep.tx_datagrams)):
            data, anc, _, _ = sniffer.recvmsg(65535, socket.CMSG_SPACE(4))
            assert data[1] == 1                              # DATA
            assert [(lvl, typ) for lvl, typ, _ in anc] == [(socket.IPPROTO_IPV6,
                                                              socket.IPV6_TCLASS)]
            out.append(int.from_bytes(anc[0][2], sys.byteorder))
        assert out
        return out
    finally:
        sniffer.close()
        ep.close()
        loop.close()


@pytest.mark.parametrize("src_port", [False, True])
def test_wire_traffic_class_is_zero_without_ecn_and_ect0_with_it(src_port):
    assert set(wire_tclasses(ecn=False, src_port=src_port)) == {0}
    assert set(wire_tclasses(ecn=True, src_port=src_port)) == {ECT0}


class _FakeQP:
    """Records what the endpoint hands over, in order: ("batch", [payload tags]) / ("ce", tag)."""

    def __init__(self, qpn: int):
        self.qpn = qpn
        self.config = SimpleNamespace(max_burst=8)
        self.calls: list = []

    def receive_datagrams(self, batch, now):
        self.calls.append(("batch", [d[8] for d in batch]))

    def receive_datagram(self, data, now, *, ecn=False):
        self.calls.append(("ce" if ecn else "one", data[8]))

    def datagrams_to_send(self, now):
        return []

    def get_timer(self):
        return None


def test_a_ce_datagram_splits_the_run_and_keeps_arrival_order():
    loop = EventLoop()
    ep = Endpoint(loop, bind_addr="::1", port=0, ecn=True)
    qp = _FakeQP(0x63)
    ep.attach(qp, {})
    plain = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    marked = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        marked.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, CE)
        for tag, sock in enumerate([plain, plain, marked, plain, marked, marked, plain]):
            sock.sendto(b"\x01\x01\x00\x00" + qp.qpn.to_bytes(4, "big") + bytes([tag]) + bytes(31),
                        ("::1", ep.port))
        assert loop.run(until=lambda: ep.rx_datagrams == 7, timeout_s=2)
        assert qp.calls == [("batch", [0, 1]), ("ce", 2), ("batch", [3]), ("ce", 4), ("ce", 5),
                            ("batch", [6])]
        assert ep.rx_ce == 3
    finally:
        plain.close()
        marked.close()
        ep.close()
        loop.close()


def test_send_tclass_is_checked():
    loop = EventLoop()
    try:
        with pytest.raises(ValueError, match="traffic class"):
            Endpoint(loop, bind_addr="::1", port=0, send_tclass=256)
    finally:
        loop.close()
