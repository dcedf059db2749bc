"""Root tier: the propagation delay of a topology's links (``delay:``) over the real fabric.

The kernel here has no netem: the agents' endpoints hold each datagram for its path's delay
(agents.net.udp, agents/mrc/core/mrcn_delay.h). A QP pair across pods of a fat-tree whose
links carry 1 ms (host) and 2 ms (fabric) one way sends one-packet WRITEs one after another;
each completes one round trip later, so the median completion time must grow by twice the
path's delay (2 x (1 + 4 x 2 + 1) = 20 ms) over the same writes with the lines off, in both
engines.
"""

from __future__ import annotations

import random
import statistics
import time

import pytest

from agents.mrc import QPAttr, QPConfig, connect_pair
from agents.net import EventLoop, Route
from testbed.fabric.local import Fabric
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams
from testbed.spec.jobs import path_delay_s
from tests.netns.qp_pair import engine_classes, write_and_wait

SRC, DST = "h0_0_0", "h3_1_1"   # different pods: 6 links
WRITES = 15


@pytest.fixture(scope="module")
def delayed_fabric():
    host = LinkParams(50_000_000, 100, delay_s=0.001)
    fabric_link = LinkParams(50_000_000, 100, delay_s=0.002)
    with Fabric(fat_tree(4, host_link=host, fabric_link=fabric_link)) as fabric:
        yield fabric


def write_times(fabric, engine: str, with_delay: bool) -> list[float]:
    """Seconds from post to completion of each of :data:`WRITES` one-packet WRITEs SRC -> DST."""
    qp_cls, ep_cls, native_loop = engine_classes(engine)
    topo = fabric.topo
    fwd, rev = fabric.evs(SRC, DST), fabric.evs(DST, SRC)
    loop = EventLoop(native=native_loop)
    with fabric.inside(SRC):
        ep_a = ep_cls(loop)
    with fabric.inside(DST):
        ep_b = ep_cls(loop)
    config = QPConfig(cc="fixed", cc_params={"window_bytes": 1 << 20})
    a = qp_cls(1, rng=random.Random(1), config=config)
    b = qp_cls(2, rng=random.Random(2), memory=bytearray(4096), config=config)
    connect_pair(a, b, evs=[ev.ev_id for ev in fwd], attr=QPAttr(timeout=16), now=loop.time())

    def routes(evs):
        return {ev.ev_id: Route(str(ev.address), delay_s=path_delay_s(topo, ev.links) if with_delay else 0.0)
                for ev in evs}
    with fabric.inside(SRC):
        ep_a.attach(a, routes(fwd))
    with fabric.inside(DST):
        ep_b.attach(b, routes(rev))
    times = []
    try:
        for i in range(WRITES):
            t0 = loop.time()
            times.append(write_and_wait(loop, a, b, ep_a, i, bytes(1024)) - t0)
            time.sleep(0.01)   # the next write starts from an idle path
    finally:
        ep_a.close()
        ep_b.close()
        loop.close()
    return times


@pytest.mark.parametrize("engine", ["python", "native", "native-loop"])
def test_the_delay_line_adds_twice_the_paths_delay_to_a_round_trip(delayed_fabric, engine):
    path = max(fabric_ev.links for fabric_ev in delayed_fabric.evs(SRC, DST))
    want = 2 * path_delay_s(delayed_fabric.topo, path)
    assert want == pytest.approx(0.020)
    plain = statistics.median(write_times(delayed_fabric, engine, with_delay=False))
    delayed_times = write_times(delayed_fabric, engine, with_delay=True)
    delayed = statistics.median(delayed_times)
    print(f"{engine}: median write {plain * 1e3:.2f} ms plain, {delayed * 1e3:.2f} ms delayed "
          f"(+{(delayed - plain) * 1e3:.2f} ms, expected +{want * 1e3:.1f})")
    # load only adds time: no delayed round trip is shorter than the two delays; the upper bound
    # catches a delay applied twice (or a hang), not the loop's lateness on a busy machine
    assert min(delayed_times) >= want
    assert delayed - plain < 2 * want
