"""QPChannel and TCPChannel in one process over loopback (::1): peers, QPNs, rc striping."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import numpy as np
import pytest

from agents.net import EventLoop, Route
from agents.jobspec import EVSpec, JobSpec, PeerSpec
from agents.channels.qp import QPN_BASE, QPN_MAX, QPChannel, max_qpn, qpn
from agents.channels.tcp import TCPChannel


@dataclass(frozen=True)
class _Send:          # the fields a channel reads from agents.collectives.Send
    peer: int
    data: bytes
    remote_offset: int
    imm: int


def _free_port(kind) -> int:
    with socket.socket(socket.AF_INET6, kind) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


def _specs(n: int, transport: str, *, qps: int = 1, n_evs: int = 2) -> list[JobSpec]:
    """All-to-all specs of ``n`` ranks on ::1, each with its own UDP and TCP port."""
    udp = [_free_port(socket.SOCK_DGRAM) for _ in range(n)]
    tcp = [_free_port(socket.SOCK_STREAM) for _ in range(n)]
    hosts = tuple(f"h{r}" for r in range(n))
    n_evs = qps if transport == "rc" else n_evs

    def peer(r):
        return PeerSpec(r, hosts[r], "::1", tuple(EVSpec(e, "::1") for e in range(n_evs)),
                        udp[r], tcp[r])

    return [JobSpec(run_id="t", rank=r, world=hosts, host=hosts[r], transport=transport,
                    control_socket="/nonexistent", seed=1, sizes=(1024,), iterations=1,
                    warmup=0, send_to=tuple(peer(p) for p in range(n) if p != r),
                    recv_from=tuple(peer(p) for p in range(n) if p != r), bind_addr="::1",
                    collective="all_to_all", qps=qps, port=udp[r], tcp_port=tcp[r], mtu=9000,
                    qp={"timeout": 16, "cc": "fixed", "cc_params": {"window_bytes": 256 << 10}},
                    connect_timeout_s=5.0)
            for r in range(n)]


class _Net:
    """``n`` channels on one loop; records arrivals/completions per rank with their region."""

    def __init__(self, specs, region_bytes: int):
        self.loop = EventLoop()
        self.regions = [np.zeros(region_bytes, dtype=np.uint8) for _ in specs]
        self.arrivals = [[] for _ in specs]
        self.completions = [[] for _ in specs]
        self.channels = []
        for s in specs:
            kw = dict(on_arrival=lambda src, imm, r=s.rank: self._arrived(r, src, imm),
                      on_send_complete=lambda p, imm, r=s.rank: self.completions[r].append((p, imm)))
            if s.transport == "tcp":
                ch = TCPChannel(self.loop, s, self.regions[s.rank], **kw)
            else:
                ch = QPChannel(self.loop, s, self.regions[s.rank], on_ev_event=lambda *a: None, **kw)
            self.channels.append(ch)

    def _arrived(self, rank, src, imm):
        # what a workload sees at the moment of the arrival: the bytes already in place
        self.arrivals[rank].append((src, imm, self.regions[rank].tobytes()))

    def run(self, until, timeout_s=20.0):
        def step():
            for ch in self.channels:
                ch.service(self.loop.time())
            return until()
        assert self.loop.run(until=step, timeout_s=timeout_s)

    def close(self):
        for ch in self.channels:
            ch.close()
        self.loop.close()


@pytest.fixture
def net():
    made = []

    def make(specs, region_bytes):
        made.append(_Net(specs, region_bytes))
        return made[-1]
    yield make
    for n in made:
        n.close()


def test_qpns_are_distinct_24_bit_and_documented():
    n, qps = 8, 4
    seen = {qpn(s, d, q, n, responder=side) for s in range(n) for d in range(n) if s != d
            for q in range(qps) for side in (False, True)}
    assert len(seen) == n * (n - 1) * qps * 2
    assert min(seen) >= QPN_BASE and max(seen) <= max_qpn(n, qps) <= QPN_MAX
    assert max_qpn(128, 511) <= QPN_MAX < max_qpn(128, 512)


@pytest.mark.parametrize("transport,qps", [("mrc", 1), ("rc", 1), ("rc", 4), ("tcp", 1)])
def test_all_to_all_messages_land_before_their_arrival(net, transport, qps):
    n, size = 3, 100_003          # odd: the parts of an rc stripe differ by a byte
    specs = _specs(n, transport, qps=qps)
    nt = net(specs, n * size)
    nt.run(lambda: all(ch.connected for ch in nt.channels))
    payload = {(s, d): os.urandom(size) for s in range(n) for d in range(n) if s != d}
    for (s, d), data in payload.items():
        nt.channels[s].post(_Send(d, data, s * size, imm=1000 * s + d))
    assert [f["busy"] for f in nt.channels[0].flows() if f["dir"] == "tx"] == [True, True]   # posted, unacked
    nt.run(lambda: all(len(a) == n - 1 for a in nt.arrivals) and
           all(len(c) == n - 1 for c in nt.completions) and all(ch.idle for ch in nt.channels))
    for d in range(n):
        assert sorted(src for src, _, _ in nt.arrivals[d]) == [s for s in range(n) if s != d]
        for src, imm, region in nt.arrivals[d]:
            assert imm == 1000 * src + d
            assert region[src * size:(src + 1) * size] == payload[(src, d)]
        assert sorted(nt.completions[d]) == [(p, 1000 * d + p) for p in range(n) if p != d]
    flows = nt.channels[0].flows()
    assert [(f["dir"], f["peer"]) for f in flows] == [("tx", "h1"), ("tx", "h2"),
                                                      ("rx", "h1"), ("rx", "h2")]
    assert all(f["bytes"] >= size for f in flows)
    assert [f["busy"] for f in flows if f["dir"] == "tx"] == [False, False]   # every write acknowledged
    if transport == "rc":
        assert all([e["ev_id"] for e in f["evs"]] == list(range(qps)) for f in flows
                   if f["dir"] == "tx")
        summary = nt.channels[0].summary()
        assert summary["tx_qp"]["qps"] == summary["rx_qp"]["qps"] == 2 * qps
        for p in summary["peers"]:
            assert len(p["qps"]) == qps
            key = "acked_bytes" if p["dir"] == "tx" else "rx_bytes"
            assert all(s[key] >= size // qps for s in p["qps"]), p   # every QP carried its part


def test_rc_stripe_arrives_once_all_parts_landed(net):
    """Parts on QPs 1..3 are held back: no arrival until the last part lands; then one."""
    specs = _specs(2, "rc", qps=4)
    nt = net(specs, 64 << 10)
    tx, rx = nt.channels[0], nt.channels[1]
    held = tx.tx[0].qps[0]
    tx.endpoint.detach(held)                       # QP 0 sends nothing for now
    tx.post(_Send(1, bytes(range(256)) * 64, 0, imm=7))
    nt.run(lambda: sum(qp.responder.rx_bytes for qp in rx.rx[0].qps) == 3 * 4096, timeout_s=5)
    assert nt.arrivals[1] == [] and nt.completions[0] == []
    tx.endpoint.attach(held, {0: Route("::1", specs[1].port)})
    nt.run(lambda: nt.arrivals[1] and nt.completions[0], timeout_s=10)
    assert [(s, i) for s, i, _ in nt.arrivals[1]] == [(0, 7)] and nt.completions[0] == [(1, 7)]
    assert nt.arrivals[1][0][2][:16384] == bytes(range(256)) * 64


def test_rc_message_smaller_than_its_stripe(net):
    specs = _specs(2, "rc", qps=4)
    nt = net(specs, 1024)
    nt.channels[0].post(_Send(1, b"ab", 10, imm=3))     # two empty parts, two of one byte
    nt.run(lambda: nt.arrivals[1] and nt.completions[0])
    assert [(s, i) for s, i, _ in nt.arrivals[1]] == [(0, 3)]
    assert nt.arrivals[1][0][2][10:12] == b"ab"


def test_controller_commands_act_on_the_connections_profile(net):
    """deny / allow / replace through the tx connection's EV profile reach its QP; a replaced EV's
    backup route was set up front, so the writes still land; a refused command says why."""
    from dataclasses import replace
    specs = _specs(2, "mrc", n_evs=2)
    backup = (EVSpec(7, "::1"),)
    specs = [replace(s, send_to=tuple(replace(p, backup_evs=backup) for p in s.send_to),
                     recv_from=tuple(replace(p, backup_evs=backup) for p in s.recv_from)) for s in specs]
    nt = net(specs, 2 * 4096)
    ch, now = nt.channels[0], nt.loop.time()
    qp = ch.tx[0].qps[0]
    assert ch.command("h1", "deny", 0, None, now) == "ok" and qp.evs.info[0].state.name == "DENIED"
    assert ch.command("h1", "allow", 0, None, now) == "ok" and qp.evs.info[0].state.name == "GOOD"
    assert ch.command("h1", "replace", 1, 7, now) == "ok"
    assert qp.evs.order == [0, 7] and ch.profiles.get(2).ev_vals() == [0, 7]
    assert "not a backup EV" in ch.command("h1", "replace", 0, 9, now)
    assert "ENOENT" in ch.command("h1", "deny", 5, None, now)
    assert ch.command("h9", "deny", 0, None, now) == "no MRC connection to h9"
    data = os.urandom(4096)
    ch.post(_Send(1, data, 0, imm=5))
    nt.run(lambda: nt.arrivals[1] and ch.idle)
    assert nt.regions[1][:4096].tobytes() == data
    assert {e["ev_id"] for f in ch.flows() if f["dir"] == "tx" for e in f["evs"]} == {0, 7}


def test_a_query_reads_the_profile_as_a_restarted_controller_needs_it(net):
    """QUERY_EV_ARRAY then QUERY_EV_STATE per EV: a replaced EV's slot holds its backup, a denied
    EV says DENIED, one its QP retired says ASSUMED_BAD; no MRC connection: no EVs, and why."""
    from dataclasses import replace
    from agents.mrc.ev import EVCause
    specs = _specs(2, "mrc", n_evs=3)
    backup = (EVSpec(7, "::1"),)
    specs = [replace(s, send_to=tuple(replace(p, backup_evs=backup) for p in s.send_to),
                     recv_from=tuple(replace(p, backup_evs=backup) for p in s.recv_from)) for s in specs]
    nt = net(specs, 4096)
    ch, now = nt.channels[0], nt.loop.time()
    assert ch.query("h1") == ([{"ev_id": e, "port": 1, "state": "GOOD"} for e in range(3)], "ok")
    assert ch.command("h1", "replace", 0, 7, now) == "ok" and ch.command("h1", "deny", 1, None, now) == "ok"
    ch.tx[0].qps[0].evs.apply(2, EVCause.LOSS, now)   # the QP's loss detection retires EV 2
    assert ch.query("h1") == ([{"ev_id": 7, "port": 1, "state": "GOOD"}, {"ev_id": 1, "port": 1, "state": "DENIED"},
                               {"ev_id": 2, "port": 1, "state": "ASSUMED_BAD"}], "ok")
    assert ch.query("h9") == ([], "no MRC connection to h9")
