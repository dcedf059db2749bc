"""Root tier: traced paths (RTM_GETROUTE with the 5-tuple) are the links the packets cross,
and no core-aggregation link failure makes a packet cross a link twice."""

from __future__ import annotations

import socket

import pytest

from testbed.fabric.counters import LinkCounters
from testbed.fabric.paths import FiveTuple, Flow, Tracer, job_flows, trace_flows

PACKETS = 40


def _ring_jobs(fabric, transport: str, seed: int = 1) -> list[dict]:
    """Job specs of a 16-rank ring in host order, as the runner builds them (pure)."""
    from testbed.spec.jobs import build_jobs
    from testbed.spec import Scenario, WorkloadSpec
    topo = fabric.topo
    hosts = tuple(h.name for h in topo.hosts)
    wl = WorkloadSpec("all_reduce", hosts, 1 << 20, 1 << 20, 2, 1, 0, evs=8)
    scenario = Scenario("ring", "-", "", topo, "-", (transport,), seed, 60.0, None, wl)
    return build_jobs(scenario, transport, run_id="t", control_socket="/tmp/none.sock")


def _send(fabric, t: FiveTuple, host: str, count: int = PACKETS) -> None:
    """``count`` UDP datagrams with exactly the 5-tuple ``t`` from ``host``'s namespace."""
    with fabric.inside(host):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with sock:
        sock.bind((t.src, t.sport))
        for _ in range(count):
            try:
                sock.sendto(b"x" * 64, (t.dst, t.dport))
            except OSError:   # an ICMP error from an earlier datagram (no listener): keep sending
                pass


def _tx_packets(counters: LinkCounters) -> dict[tuple[str, str], int]:
    return {(r["link"], r["node"]): r["tx_packets"] for r in counters.read()}


def _crossed(before: dict, after: dict, at_least: int) -> set[tuple[str, str]]:
    return {k for k in after if after[k] - before[k] >= at_least}


@pytest.mark.parametrize("transport", ["rc", "tcp"])
def test_every_ring_flow_is_delivered_over_a_shortest_path(k4, transport):
    flows = job_flows(_ring_jobs(k4, transport), k4.topo)
    traced = trace_flows(k4, flows)
    assert len(traced) == 32
    for tf in traced:
        assert tf.outcome == "delivered", tf.to_dict()
        src_sw, dst_sw = tf.hops[0].next, tf.hops[-1].node
        assert len(tf.hops) == 2 + len(k4.topo.switch_paths(src_sw, dst_sw)[0][1]), tf.to_dict()


def test_traced_hops_are_the_links_the_packets_cross(k4):
    """For UDP flows with 5-tuples that hash differently, the link ends whose tx counter
    grows by the datagrams sent are exactly the traced hops (node -> link)."""
    counters = LinkCounters(k4)
    src, dst = k4.topo.nics["h0_0_0"][0], k4.topo.nics["h3_1_1"][0]
    with Tracer(k4) as tracer:
        for sport in (50001, 50002, 50003, 50004, 50005, 50006):
            t = FiveTuple(str(src.address), str(dst.address), "udp", sport, 4791)
            tf = tracer.trace(Flow("probe", "rc", 0, 1, "data", "h0_0_0", "h3_1_1", t))
            before = _tx_packets(counters)
            _send(k4, t, "h0_0_0")
            after = _tx_packets(counters)
            crossed = _crossed(before, after, PACKETS)
            assert crossed == {(h.link, h.node) for h in tf.hops}, (sport, tf.to_dict())


def test_core_aggregation_failures_drop_without_loops(k4):
    """Every aggregation-core link down in turn: the flows into the pod behind it either take
    a live path or are dropped at the core; none crosses a link twice (traced, and by counters:
    no link end sends more than the datagrams of the flows that cross it)."""
    topo = k4.topo
    counters = LinkCounters(k4)
    core_links = [l for l in topo.links if l.a.node.startswith("a") and l.b.node.startswith("c")]
    assert len(core_links) == 16
    with Tracer(k4) as tracer:
        for link in core_links:
            pod = topo.nodes[link.a.node].pod
            dst = next(h.name for h in topo.hosts if h.pod == pod)
            srcs = [h.name for h in topo.hosts if h.pod != pod][::3]
            k4.set_link(link.name, False)
            try:
                tuples = [FiveTuple(str(topo.nics[src][0].address), str(topo.nics[dst][0].address),
                                    "udp", sport, 4791)
                          for i, src in enumerate(srcs) for sport in (40000 + i, 41000 + i)]
                outcomes = {tracer.trace(Flow("probe", "rc", 0, 1, "data", src, dst, t)).outcome
                            for src, t in zip([s for s in srcs for _ in (0, 1)], tuples)}
                before = _tx_packets(counters)
                for src, t in zip([s for s in srcs for _ in (0, 1)], tuples):
                    _send(k4, t, src, 10)
                after = _tx_packets(counters)
            finally:
                k4.set_link(link.name, True)
            assert "loop" not in outcomes, link.name
            sent = 10 * 2 * len(srcs)
            worst = max(after[k] - before[k] for k in after)
            assert worst <= sent + 5, (link.name, worst, sent)
