"""io.py over real loopback UDP/IPv6 (::1), no root."""
import os
import random
import socket

import pytest

from agents.net.udp import UDP_NO_CHECK6_RX, UDP_NO_CHECK6_TX, Endpoint, EventLoop, Route
from agents.mrc import QP, QPAttr, QPConfig, WCStatus, WorkCompletion, connect_pair
from tests.conftest import ipv6_loopback_ok

SIZE = 4 << 20




pytestmark = pytest.mark.skipif(not ipv6_loopback_ok(), reason="no IPv6 loopback")


def qp_pair():
    # 256 KiB fixed window keeps a burst inside the 4 MiB socket buffers.
    cfg = QPConfig(min_rto_s=0.05, cc="fixed", cc_params={"window_bytes": 256 * 1024},
                   probe_interval_s=0.02, probe_timeout_s=0.05)
    a = QP(10, rng=random.Random(1), config=cfg)
    b = QP(20, rng=random.Random(2), memory=bytearray(SIZE), config=cfg)
    connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(timeout=12), now=0.0)
    return a, b


def run_transfer(routes_a, routes_b, loop, ea, eb, a, b):
    ea.attach(a, routes_a)
    eb.attach(b, routes_b)
    src = os.urandom(SIZE)
    a.post_write(wr_id=1, local=src, remote_offset=0)
    ea.kick(a)
    done = []

    def finished():
        while (e := a.next_event()) is not None:
            done.append(e)
        return any(isinstance(e, WorkCompletion) for e in done)

    assert loop.run(until=finished, timeout_s=30)
    wc = [e for e in done if isinstance(e, WorkCompletion)]
    assert wc[0].status is WCStatus.SUCCESS and wc[0].wr_id == 1
    assert b.responder.memory.tobytes() == src
    return wc


def test_srv6_mode_transfer_over_loopback_with_zero_checksum():
    loop = EventLoop()
    ea = Endpoint(loop, bind_addr="::1", port=0)
    eb = Endpoint(loop, bind_addr="::1", port=0)
    try:
        for ep in (ea, eb):
            assert ep.sock.getsockopt(socket.SOL_UDP, UDP_NO_CHECK6_TX) == 1
            assert ep.sock.getsockopt(socket.SOL_UDP, UDP_NO_CHECK6_RX) == 1
        a, b = qp_pair()
        run_transfer({ev: Route("::1", eb.port) for ev in range(4)},
                     {ev: Route("::1", ea.port) for ev in range(4)}, loop, ea, eb, a, b)
        sent = [v["packets_sent"] for v in a.stats()["evs"].values()]
        assert all(n > 0 for n in sent)
        assert ea.rx_unknown_qpn == 0 and eb.rx_datagrams > SIZE // a.config.payload_bytes
    finally:
        ea.close()
        eb.close()
        loop.close()


def test_udp_ecmp_mode_uses_one_source_port_per_ev():
    loop = EventLoop()
    ea = Endpoint(loop, bind_addr="::1", port=0)
    eb = Endpoint(loop, bind_addr="::1", port=0)
    ports = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.bind(("::1", 0))
            ports.append(s.getsockname()[1])
            s.close()
        a, b = qp_pair()
        run_transfer({ev: Route("::1", eb.port, src_port=ports[ev]) for ev in range(4)},
                     {ev: Route("::1", ea.port) for ev in range(4)}, loop, ea, eb, a, b)
        assert set(ea._src_socks) == set(ports)
        assert all(sock.getsockname()[1] == p for p, sock in ea._src_socks.items())
    finally:
        ea.close()
        eb.close()
        loop.close()


def test_loop_serves_foreign_descriptors_and_timers():
    loop = EventLoop()
    r, w = socket.socketpair()
    got, fired = [], []
    loop.add_reader(r, lambda: got.append(r.recv(100)))
    loop.call_later(0.01, lambda: fired.append(loop.time()))
    cancelled = loop.call_later(0.005, lambda: fired.append("cancelled"))
    cancelled.cancel()
    w.send(b"ping")
    assert loop.run(until=lambda: got and fired, timeout_s=2)
    assert got == [b"ping"] and len(fired) == 1 and fired[0] != "cancelled"
    r.close()
    w.close()
    loop.close()


def test_unknown_qpn_is_counted():
    loop = EventLoop()
    ep = Endpoint(loop, bind_addr="::1", port=0)
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        s.sendto(b"\x01\x01\x00\x00\x00\x00\x00\x63" + bytes(40), ("::1", ep.port))
        assert loop.run(until=lambda: ep.rx_unknown_qpn == 1, timeout_s=2)
    finally:
        s.close()
        ep.close()
        loop.close()
