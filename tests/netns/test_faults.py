"""Root tier: link faults (link down/up, nftables loss/blackhole, HTB rate) on real namespaces."""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import subprocess
import time

import pytest

from testbed import faults as faults_mod
from testbed.fabric.counters import LinkCounters
from testbed.faults import FaultError, FaultInjector, LinkState, Reconverge, Step, nft
from testbed.fabric import nft as fabric_nft
from testbed.fabric.verify import probe
from tests.netns.conftest import listening, small_fat_tree, wait_for

FABRIC_LINK = "a0_0-c0_0"
HOST_LINK = "h0_0_0-e0_0"


@pytest.fixture
def faults(k4):
    lf = FaultInjector(k4)
    try:
        yield lf
    finally:
        lf.revert_all()


def nft_tables(fabric, node: str) -> list[str]:
    out = fabric.nodes[node].cmd("nft -j list tables")
    return [item["table"]["name"] for item in json.loads(out)["nftables"] if "table" in item]


def htb_rate(fabric, node: str, ifname: str) -> str:
    out = fabric.nodes[node].cmd(f"tc class show dev {ifname}")
    return re.search(r"htb 1:10 .*? rate (\S+)", out).group(1)


def routes(fabric, node: str) -> str:
    return fabric.nodes[node].cmd("ip -6 route show table all")


def operstate(fabric, node: str, ifname: str) -> str:
    return json.loads(fabric.nodes[node].cmd(f"ip -j link show dev {ifname}"))[0]["operstate"]


def link_ends(fabric, name):
    link = fabric.topo.link_by_name[name]
    return [(p.node, p.ifname) for p in (link.a, link.b)]


def test_loss_rate_within_0_15_points_of_the_set_rate():
    """nftables numgen measured within 0.15 points of the set rate.

    700k datagrams cross one link; every arrival at the receiving end is
    counted in its rx_packets (veth counts before the ingress hook), every
    drop in the loss counter. Binomial sd at p=0.1, n=700k: 0.036 points, so
    0.15 points is > 4 sd (a false failure about once in 30 000 runs).
    """
    n, pct, tol_points = 700_000, 10.0, 0.15
    sd_points = 100 * math.sqrt(pct / 100 * (1 - pct / 100) / n)
    assert tol_points >= 4 * sd_points
    with small_fat_tree(1_000_000_000) as fabric:   # 1 Gbit/s: no queue drops at the sender
        lf = FaultInjector(fabric)
        counters = LinkCounters(fabric)
        try:
            lf.set_loss(HOST_LINK, pct)

            def arrivals():
                return sum(r["rx_packets"] for r in counters.read() if r["link"] == HOST_LINK)

            link = fabric.topo.link_by_name[HOST_LINK]
            with fabric.inside(link.a.node):
                sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            dst = (str(link.addr_of(link.b.node)), 9)
            rx0, drop0 = arrivals(), lf.counters()[HOST_LINK]["loss_dropped"]
            with sock:
                for _ in range(n):
                    sock.sendto(b"x", dst)
            assert wait_for(lambda: arrivals() - rx0 >= n, timeout_s=30)
            rx1, c1 = arrivals(), lf.counters()[HOST_LINK]
        finally:
            lf.revert_all()
    arrived, dropped = rx1 - rx0, c1["loss_dropped"] - drop0
    assert arrived >= n
    measured = 100 * dropped / arrived
    print(f"loss set {pct}% measured {measured:.4f}% over {arrived} packets (sd {sd_points:.4f} points)")
    assert abs(measured - pct) <= tol_points
    assert c1["blackhole_dropped"] == 0


def test_set_loss_replaces_earlier_loss_and_clear_removes_the_tables(k4, faults):
    faults.set_loss(FABRIC_LINK, 50)
    faults.set_loss(FABRIC_LINK, 10)
    for node, ifname in link_ends(k4, FABRIC_LINK):
        assert nft_tables(k4, node) == [f"mrc_fault_{FABRIC_LINK}"]
        ruleset = k4.nodes[node].cmd("nft list ruleset")
        assert f'device "{ifname}"' in ruleset
        assert ruleset.count("numgen random") == 1
        assert "numgen random mod 1000000 < 100000 " in ruleset
    counts = faults.counters()
    assert list(counts) == [FABRIC_LINK] and set(counts[FABRIC_LINK]) == {"loss_dropped", "blackhole_dropped"}
    assert counts[FABRIC_LINK]["blackhole_dropped"] == 0   # (a stray packet may have met the loss rule)
    faults.clear_loss(FABRIC_LINK)
    for node, _ in link_ends(k4, FABRIC_LINK):
        assert nft_tables(k4, node) == []
    assert faults.counters() == {}
    faults.clear_loss(FABRIC_LINK)  # no-op


def test_full_loss_drops_every_packet(k4, faults):
    faults.set_loss(FABRIC_LINK, 100)
    result = probe(k4, ecmp=False)
    expected = {key for key, ev in result.evs.items() if FABRIC_LINK in ev.links}
    assert result.lost_evs() == expected
    assert faults.counters()[FABRIC_LINK]["loss_dropped"] >= len(expected)


def test_blackhole_drops_everything_while_carrier_and_routes_stay_up(k4, faults):
    ends = link_ends(k4, FABRIC_LINK)
    routes_before = {node: routes(k4, node) for node, _ in ends}
    faults.set_blackhole(FABRIC_LINK, True)
    result = probe(k4, ecmp=False)
    expected = {key for key, ev in result.evs.items() if FABRIC_LINK in ev.links}
    assert expected
    assert result.lost_evs() == expected          # exactly the EVs crossing the link
    dropped = faults.counters()[FABRIC_LINK]
    assert dropped["blackhole_dropped"] >= len(expected) and dropped["loss_dropped"] == 0
    for node, ifname in ends:
        assert operstate(k4, node, ifname) == "UP"
        assert routes(k4, node) == routes_before[node]
        assert "linkdown" not in routes_before[node]
    faults.set_blackhole(FABRIC_LINK, False)
    assert not probe(k4, ecmp=False).lost
    for node, _ in ends:
        assert nft_tables(k4, node) == []


def test_blackhole_and_loss_share_one_table(k4, faults):
    faults.set_loss(FABRIC_LINK, 5)
    faults.set_blackhole(FABRIC_LINK, True)
    faults.set_blackhole(FABRIC_LINK, False)
    node, _ = link_ends(k4, FABRIC_LINK)[0]
    ruleset = k4.nodes[node].cmd("nft list ruleset")
    assert "numgen random" in ruleset and 'counter name "blackhole_dropped" drop' not in ruleset
    assert faults.active == {FABRIC_LINK: faults_mod.FaultState(loss_pct=5.0)}


def _iperf(fabric, src, dst, seconds, port):
    dst_addr = str(fabric.topo.nics[dst][0].address)
    server = fabric.popen(dst, ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    assert wait_for(lambda: listening(fabric, dst, port))
    client = fabric.popen(src, ["iperf3", "-c", dst_addr, "-p", str(port), "-t", str(seconds)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return server, client


def _tx_bps(counters, link, seconds):
    """Bits/s sent by ``link``'s a end over the longest interval the bytes could have taken (a
    busy machine can only make it an underestimate)."""
    def tx():
        return next(r["tx_bytes"] for r in counters.read() if r["link"] == link and r["end"] == "a")
    t0 = time.monotonic()
    b0 = tx()
    time.sleep(seconds)   # the passage of time: the window the rate is measured over
    b1 = tx()
    return (b1 - b0) * 8 / (time.monotonic() - t0)


def test_set_rate_changes_throughput_and_none_restores_it(k4, faults):
    """20 Mbit/s host link: its classes at 10 Mbit/s while set and no more than that sent (interface
    counters, +5%); back to 20 once restored, and no more than that. Upper bounds only: a busy
    machine sends less, never more (how close a flow gets to a rate is make bench's kernel limit)."""
    counters = LinkCounters(k4)
    configured = k4.topo.link_by_name[HOST_LINK].params.rate_bps
    faults.set_rate(HOST_LINK, configured // 2)
    for node, ifname in link_ends(k4, HOST_LINK):
        assert htb_rate(k4, node, ifname) == "10Mbit"
    server, client = _iperf(k4, "h0_0_0", "h1_0_0", 7, 5311)
    try:
        time.sleep(1.0)   # the passage of time: past slow start
        slow = _tx_bps(counters, HOST_LINK, 2.0)
        faults.set_rate(HOST_LINK, None)
        time.sleep(0.7)   # the passage of time: TCP ramps back up to the restored rate
        fast = _tx_bps(counters, HOST_LINK, 2.0)
        _, err = client.communicate(timeout=60)
        server.wait(timeout=30)
    finally:
        for proc in (client, server):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert client.returncode == 0, err
    print(f"set_rate: {slow / 1e6:.2f} Mbit/s at 10 Mbit/s, {fast / 1e6:.2f} Mbit/s restored to 20")
    assert 0 < slow <= 1.05 * configured / 2
    assert 0 < fast <= 1.05 * configured
    for node, ifname in link_ends(k4, HOST_LINK):
        assert htb_rate(k4, node, ifname) == "20Mbit"


def test_revert_all_leaves_no_table_and_restores_rates(k4):
    lf = FaultInjector(k4)
    counters = LinkCounters(k4)
    try:
        lf.set_loss(FABRIC_LINK, 1.5)
        lf.set_blackhole(HOST_LINK, True)
        lf.set_loss("a1_0-c0_0", 0.01)
        lf.set_rate(FABRIC_LINK, 7_000_000)
        lf.set_rate(HOST_LINK, 3_000_000)
        assert {r["rate_bps"] for r in counters.read() if r["link"] == FABRIC_LINK} == {7_000_000}
        assert [op for _, op, _, _ in lf.journal] == ["loss", "blackhole", "loss", "rate", "rate"]
    finally:
        lf.revert_all()
    for name in (FABRIC_LINK, HOST_LINK, "a1_0-c0_0"):
        for node, ifname in link_ends(k4, name):
            assert nft_tables(k4, node) == []
            assert htb_rate(k4, node, ifname) == "20Mbit"
    assert all(r["rate_bps"] == 20_000_000 for r in counters.read())
    assert lf.counters() == {} and lf.active == {}
    lf.revert_all()   # idempotent
    assert not probe(k4, ecmp=False).lost


def test_unknown_link_and_bad_values(k4, faults):
    for call in (lambda: faults.set_loss("x-y", 1), lambda: faults.clear_loss("x-y"),
                 lambda: faults.set_blackhole("x-y", True), lambda: faults.set_rate("x-y", 1)):
        with pytest.raises(KeyError, match="x-y"):
            call()
    for pct in (0, -1, 100.5, float("nan")):
        with pytest.raises(ValueError):
            faults.set_loss(FABRIC_LINK, pct)
    for rate in (0, -5, 1.5, True):
        with pytest.raises(ValueError):
            faults.set_rate(FABRIC_LINK, rate)
    assert faults.active == {}


def test_kernel_refusal_raises_fault_error_and_undoes_the_first_end(k4, faults, monkeypatch):
    """The b end's transaction fails: FaultError carries nft's message, the a end is put back."""
    link = k4.topo.link_by_name[FABRIC_LINK]
    real = nft.transition

    def broken(name, ifname, old, new):
        cmds = real(name, ifname, old, new)
        if ifname == link.b.ifname and new.active:
            cmds.append({"add": {"rule": {"family": "netdev", "table": "no_such_table", "chain": "x",
                                          "expr": [{"drop": None}]}}})
        return cmds

    monkeypatch.setattr(nft, "transition", broken)
    with pytest.raises(FaultError, match="No such file or directory"):
        faults.set_loss(FABRIC_LINK, 10)
    for node, _ in link_ends(k4, FABRIC_LINK):
        assert nft_tables(k4, node) == []
    assert faults.active == {}


def test_kernel_refusal_of_a_rate_raises_fault_error_and_keeps_the_old_rate(k4, faults, monkeypatch):
    """The b end's request goes to a missing ifindex (ENODEV): FaultError, and the a end is put back."""
    from testbed.fabric import routing
    link = k4.topo.link_by_name[FABRIC_LINK]
    real = routing.port_ifindex

    def doctored(topo, node, lk):
        return 999 if (node, lk.name) == (link.b.node, FABRIC_LINK) else real(topo, node, lk)

    monkeypatch.setattr(routing, "port_ifindex", doctored)
    with pytest.raises(FaultError, match="htb class rate 5000000 bit/s: No such device"):
        faults.set_rate(FABRIC_LINK, 5_000_000)
    monkeypatch.undo()
    for node, ifname in link_ends(k4, FABRIC_LINK):
        assert htb_rate(k4, node, ifname) == "20Mbit"
    assert k4.link_rate_bps(link) == 20_000_000


def test_revert_all_after_the_fabric_stopped_logs_instead_of_raising(caplog):
    fabric = small_fat_tree(10_000_000)
    fabric.start()
    try:
        lf = FaultInjector(fabric)
        lf.set_loss(HOST_LINK, 20)
        lf.set_rate(FABRIC_LINK, 5_000_000)
    finally:
        fabric.stop()
    with caplog.at_level(logging.INFO, logger="testbed.faults"):
        lf.revert_all()
        lf.revert_all()
    assert "gone" in caplog.text
    assert lf.active == {}


def test_nft_binary_fallback_behaves_like_the_binding(k4, monkeypatch):
    """Without python3-nftables, ``nft -j -f -`` runs under nsenter with the same transactions."""
    monkeypatch.setattr(fabric_nft, "have_nft_binding", lambda: False)
    assert fabric_nft.runner() is fabric_nft.run_nft_binary
    lf = FaultInjector(k4)
    try:
        lf.set_loss(FABRIC_LINK, 100)
        lf.set_blackhole(FABRIC_LINK, True)
        for node, ifname in link_ends(k4, FABRIC_LINK):
            assert nft_tables(k4, node) == [f"mrc_fault_{FABRIC_LINK}"]
        result = probe(k4, ecmp=False)
        assert result.lost_evs() == {k for k, ev in result.evs.items() if FABRIC_LINK in ev.links}
        assert lf.counters()[FABRIC_LINK]["blackhole_dropped"] >= len(result.lost_evs())
        with pytest.raises(FaultError, match="No such file or directory"):
            lf._nft(link_ends(k4, FABRIC_LINK)[0][0], [{"flush": {"chain": {
                "family": "netdev", "table": "nope", "name": "x"}}}], "test")
    finally:
        lf.revert_all()
    for node, _ in link_ends(k4, FABRIC_LINK):
        assert nft_tables(k4, node) == []


def test_link_down_up_is_owned_by_the_injector_and_reverted(k4):
    """A link taken down by a step is down in the kernel and in the injector's state; reconvergence
    is journaled with it; revert_all brings it up (journaled) and traffic crosses it again."""
    recs = []
    lf = FaultInjector(k4, record=recs.append)
    (a_node, a_if), (b_node, b_if) = link_ends(k4, FABRIC_LINK)
    try:
        lf.apply_step(Step(0.0, LinkState(FABRIC_LINK, up=False), "link_down", "apply", 0))
        assert operstate(k4, a_node, a_if) == "DOWN" and operstate(k4, b_node, b_if) != "UP"
        assert lf.links_down == {FABRIC_LINK}
        result = probe(k4, ecmp=False)
        assert result.lost_evs() == {k for k, ev in result.evs.items() if FABRIC_LINK in ev.links} != set()
        lf.apply_step(Step(0.1, Reconverge(), "reconverge", "apply", None))
        assert not probe(k4, srv6=False).lost            # ECMP routes went around it
    finally:
        lf.revert_all()
    assert lf.links_down == frozenset()
    assert operstate(k4, a_node, a_if) == "UP"
    k4.reconverge()
    assert not probe(k4, ecmp=False).lost and not probe(k4, srv6=False).lost
    assert [(r["kind"], r.get("step"), r.get("phase")) for r in recs] == [
        ("fault", "link", "apply"), ("reconverge", None, None), ("fault", "link", "revert"), ("fault", "all", "revert")]
    assert recs[1]["links_down"] == [FABRIC_LINK]


def test_one_way_loss_drops_only_packets_into_the_named_end(k4):
    """A gray failure: 100 % loss into c0_0 on a0_0-c0_0 loses exactly the EVs that cross the
    link from a0_0 to c0_0; those crossing from c0_0 to a0_0 arrive."""
    lf = FaultInjector(k4)
    try:
        lf.set_loss(FABRIC_LINK, 100, into="c0_0")
        result = probe(k4, ecmp=False)
        into_core = {k for k, ev in result.evs.items() if FABRIC_LINK in ev.links
                     and ev.switches.index("a0_0") < ev.switches.index("c0_0")}
        assert into_core and result.lost_evs() == into_core
        assert lf.counters()[FABRIC_LINK]["loss_dropped"] >= len(into_core)
    finally:
        lf.revert_all()
    for node, _ in link_ends(k4, FABRIC_LINK):
        assert nft_tables(k4, node) == []


def test_a_loss_on_every_link_reaches_every_link_end_and_reverts(k4):
    """The link set ``all``: one Loss step per link from the timeline, one table at each end."""
    from testbed.faults.timeline import Timeline, sweep_warmups
    from testbed.spec import TimelineEvent
    links = tuple(sorted(l.name for l in k4.topo.links))
    timeline = Timeline([TimelineEvent("loss", None, at_s=0.0, loss_pct=0.5, selector="all", links=links)],
                        sweep_warmups(1, 1, 0))
    timeline.start(0.0)
    lf = FaultInjector(k4)
    try:
        recs = [lf.apply_step(step) for step in timeline.due(1.0)]
        assert sorted(r["link"] for r in recs) == sorted(links) and {r["value"] for r in recs} == {0.5}
        assert {r["planned_s"] for r in recs} == {0.0}
        for name in links:
            for node, _ in link_ends(k4, name):
                assert nft.table_name(name) in nft_tables(k4, node)
    finally:
        lf.revert_all()
    for name in links:
        for node, _ in link_ends(k4, name):
            assert nft_tables(k4, node) == []
