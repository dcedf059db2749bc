"""The quiet-fabric path tracer (:class:`testbed.fabric.paths.Tracer`) on a busy machine (issue 46
item 3): probes the routers forward late are not lost, so a flow whose counters show its probes
part of the way is read again until they arrive; it is ``dropped`` only once the fabric's
counters stand still. A fake fabric whose link counters reveal the probes one hop per read."""

from __future__ import annotations

from collections import deque

from testbed.fabric.paths import FiveTuple, Flow, Tracer
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams

SRC, DST = "h0_0_0", "h3_1_1"


def shortest_ends(topo, src: str, dst: str) -> list[tuple[str, str]]:
    """(link, sending node) of each hop of one shortest path src -> dst (hosts do not forward)."""
    prev, todo = {src: None}, deque([src])
    while todo:
        node = todo.popleft()
        if node != src and node in {h.name for h in topo.hosts}:
            continue
        for link in topo.links_of[node]:
            nxt = link.peer_of(node).node
            if nxt not in prev:
                prev[nxt] = (link.name, node)
                todo.append(nxt)
    ends, node = [], dst
    while prev[node] is not None:
        ends.append(prev[node])
        node = prev[node][1]
    return ends[::-1]


class LaggingFabric:
    """The probes cross one hop per counter read after the send (a softirq running late);
    ``reach``: how many hops they ever cross (fewer than the path's: dropped there)."""

    def __init__(self, reach: int | None = None):
        lp = LinkParams(10_000_000, 64)
        self.topo = fat_tree(4, host_link=lp, fabric_link=lp)
        self.path = shortest_ends(self.topo, SRC, DST)
        self.reach = len(self.path) if reach is None else reach
        self.tx = {(l.name, n): 0 for l in self.topo.links for n in (l.a.node, l.b.node)}
        self.pending: list[tuple[str, str]] = []
        self.reads = 0

    def link_counters(self):
        return self

    def read(self) -> list[dict]:
        self.reads += 1
        if self.pending:
            self.tx[self.pending.pop(0)] += self.probes
        return [{"link": l, "node": n, "tx_packets": v} for (l, n), v in self.tx.items()]

    def send_trace_probes(self, host: str, t: FiveTuple, probes: int) -> None:
        assert host == SRC
        self.probes, self.pending = probes, list(self.path[:self.reach])


def flow(topo) -> Flow:
    t = FiveTuple(str(topo.nics[SRC][0].address), str(topo.nics[DST][0].address), "udp", 50001, 4791)
    return Flow("rc 0->1", "rc", 0, 1, "data", SRC, DST, t)


def test_late_probes_read_as_delivered_not_dropped():
    fabric = LaggingFabric()
    with Tracer(fabric) as tracer:
        tf = tracer.trace(flow(fabric.topo))
    assert tf.outcome == "delivered", tf.to_dict()
    assert [(h.link, h.node) for h in tf.hops] == fabric.path and len(fabric.path) == 6


def test_probes_that_stop_short_are_dropped_once_the_counters_stand_still():
    fabric = LaggingFabric(reach=3)
    with Tracer(fabric, quiet_s=0.05, settle_s=30.0) as tracer:
        tf = tracer.trace(flow(fabric.topo))
    assert tf.outcome == "dropped" and tf.dropped_at == fabric.path[3][1], tf.to_dict()
    assert [(h.link, h.node) for h in tf.hops] == fabric.path[:3]


class OnceLostFabric(LaggingFabric):
    """The first round's probes stop after ``reach`` hops (lost there once); later rounds cross."""

    def __init__(self, reach: int):
        super().__init__()
        self.first_reach, self.rounds = reach, 0

    def send_trace_probes(self, host: str, t: FiveTuple, probes: int) -> None:
        self.rounds += 1
        self.probes = probes
        self.pending = list(self.path[:self.first_reach] if self.rounds == 1 else self.path)


def test_a_round_lost_once_is_probed_again_and_delivered():
    fabric = OnceLostFabric(reach=2)
    with Tracer(fabric, quiet_s=0.05, settle_s=30.0) as tracer:
        tf = tracer.trace(flow(fabric.topo))
    assert tf.outcome == "delivered" and fabric.rounds == 2, tf.to_dict()
    assert [(h.link, h.node) for h in tf.hops] == fabric.path


def test_a_cut_path_stops_every_round_and_is_dropped():
    fabric = LaggingFabric(reach=3)
    sends = []
    send = fabric.send_trace_probes
    fabric.send_trace_probes = lambda *a: (sends.append(a[0]), send(*a))
    with Tracer(fabric, quiet_s=0.05, settle_s=30.0) as tracer:
        tf = tracer.trace(flow(fabric.topo))
    assert tf.outcome == "dropped" and tf.dropped_at == fabric.path[3][1] and len(sends) == 2
