"""Root tier: a running job's TCP connections are found in the hosts' sockets, and their paths
traced by hop-limited probes are the paths the quiet-fabric tracer finds for the same 5-tuples,
also while those connections carry bulk data."""

from __future__ import annotations

import socket
import threading

from testbed.fabric.counters import LinkCounters
from testbed.fabric.hoptrace import HopTracer, job_tcp_bytes, job_tcp_flows, unlimit_time_exceeded
from testbed.fabric.paths import Tracer
from tests.netns.conftest import wait_for

HOSTS = ["h0_0_0", "h1_0_1", "h2_1_0", "h3_1_1"]
PORT = 29511


def _connect_ring(fabric) -> list[socket.socket]:
    """A TCP connection from each host to the next (a ring), and back: [client, server] pairs."""
    topo, socks = fabric.topo, []
    for i, src in enumerate(HOSTS):
        dst = HOSTS[(i + 1) % len(HOSTS)]
        addr = str(topo.nics[dst][0].address)
        with fabric.inside(dst):
            srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((addr, PORT + i))
        srv.listen(1)
        with fabric.inside(src):
            cli = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        cli.bind((str(topo.nics[src][0].address), 0))
        cli.connect((addr, PORT + i))
        conn, _ = srv.accept()
        srv.close()
        socks += [cli, conn]
    return socks


def test_busy_connections_traced_by_hop_limit_match_the_quiet_tracer(k4):
    socks = _connect_ring(k4)
    stop = threading.Event()

    def pump(sock):   # the ring's clients send bulk data while the tracer runs
        chunk = b"x" * 65536
        try:
            while not stop.is_set():
                sock.send(chunk)
        except OSError:
            pass

    def drain(sock):
        try:
            while not stop.is_set() and sock.recv(1 << 20):
                pass
        except OSError:
            pass
    try:
        before = job_tcp_bytes(k4, HOSTS)
        threads = [threading.Thread(target=pump, args=(c,), daemon=True) for c in socks[0::2]]
        threads += [threading.Thread(target=drain, args=(s,), daemon=True) for s in socks[1::2]]
        for t in threads:
            t.start()
        stop.wait(1.0)
        flows = job_tcp_flows(k4, HOSTS, "gloo-tcp", since=before)
        # each connection seen from both ends: the sending direction busy, the ACK direction idle
        assert sorted((f.src_rank, f.dst_rank) for f in flows if f.kind == "data") == [(0, 1), (1, 2), (2, 3), (3, 0)]
        assert sorted((f.src_rank, f.dst_rank) for f in flows if f.kind == "idle") == [(0, 3), (1, 0), (2, 1), (3, 2)]
        assert unlimit_time_exceeded(k4) == len([n for n in k4.topo.nodes.values() if n.role.value != "host"])
        busy = HopTracer(k4).trace(flows)
    finally:
        stop.set()
        for s in socks:
            s.close()
    assert all(tf.outcome == "delivered" for tf in busy), [tf.to_dict() for tf in busy if tf.outcome != "delivered"]
    counters = LinkCounters(k4)
    last = [None]

    def quiet_now() -> bool:   # the connections are closed; their queued segments drain
        now = {(r["link"], r["node"]): r["tx_packets"] for r in counters.read()}
        still, last[0] = now == last[0], now
        return still
    assert wait_for(quiet_now, timeout_s=30.0, interval_s=0.1)
    with Tracer(k4) as quiet:
        for tf in busy:
            assert quiet.trace(tf.flow).links == tf.links, tf.flow.label
