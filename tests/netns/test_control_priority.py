"""Root tier: a host NIC's control priority (topology ``control_priority``) over the real fabric.

A QP pair across pods of a fat-tree whose host links set ``control_priority`` runs WRITEs.
The responder's host sends only control packets (SACKs) and the requester's host mostly data:
with the endpoints' ``control_priority`` set, the responder's NIC (its end of the host link)
carries them in HTB class 1:20 and the requester's data stays in 1:10; without it, every
packet goes to 1:10. Both engines. Counts are of this test's own link ends, before and after.
"""

from __future__ import annotations

import random

import pytest
from pyroute2 import IPRoute

from agents.mrc import QPAttr, QPConfig, connect_pair
from agents.net import EventLoop, Route
from agents.net.udp import priority_cmsg
from testbed.fabric.local import Fabric
from testbed.model.generators import fat_tree
from testbed.model.topology import CONTROL_PRIORITY, LinkParams
from tests.netns.qp_pair import engine_classes, write_and_wait

SRC, DST = "h0_0_0", "h3_1_1"
WRITES = 5


@pytest.fixture(scope="module")
def priority_fabric():
    host = LinkParams(50_000_000, 100, mtu=9000, control_priority=True)
    with Fabric(fat_tree(4, host_link=host, fabric_link=LinkParams(50_000_000, 100, mtu=9000))) as fabric:
        yield fabric


def class_packets(fabric, host: str) -> dict[str, int]:
    """Packets sent so far through each HTB class of ``host``'s NIC: {"1:10": n, "1:20": n}."""
    ifname = f"{host}-eth0"
    with fabric.inside(host), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        out = {}
        for c in ipr.get_classes(index=index):
            handle = c["handle"]
            name = f"{handle >> 16:x}:{handle & 0xFFFF:x}"
            stats = c.get_attr("TCA_STATS2")
            basic = stats.get_attr("TCA_STATS_BASIC") if stats else None
            out[name] = basic["packets"] if basic else 0
    return out


def run_writes(fabric, name: str, priority: int) -> tuple[dict, dict]:
    """Class packet deltas (SRC's NIC, DST's NIC) over :data:`WRITES` 64 KiB WRITEs SRC -> DST."""
    qp_cls, ep_cls, _ = engine_classes(name)
    before = class_packets(fabric, SRC), class_packets(fabric, DST)
    loop = EventLoop()
    with fabric.inside(SRC):
        ep_a = ep_cls(loop, control_priority=priority)
    with fabric.inside(DST):
        ep_b = ep_cls(loop, control_priority=priority)
    assert ep_a.control_priority == ep_b.control_priority == priority
    config = QPConfig(cc="fixed", cc_params={"window_bytes": 1 << 20})
    a = qp_cls(1, rng=random.Random(1), config=config)
    b = qp_cls(2, rng=random.Random(2), memory=bytearray(1 << 16), config=config)
    fwd, rev = fabric.evs(SRC, DST), fabric.evs(DST, SRC)
    connect_pair(a, b, evs=[ev.ev_id for ev in fwd], attr=QPAttr(timeout=16), now=loop.time())
    with fabric.inside(SRC):
        ep_a.attach(a, {ev.ev_id: Route(str(ev.address)) for ev in fwd})
    with fabric.inside(DST):
        ep_b.attach(b, {ev.ev_id: Route(str(ev.address)) for ev in rev})
    try:
        for i in range(WRITES):
            write_and_wait(loop, a, b, ep_a, i, bytes(1 << 16))
    finally:
        ep_a.close()
        ep_b.close()
        loop.close()
    after = class_packets(fabric, SRC), class_packets(fabric, DST)
    return tuple({k: after[i][k] - before[i].get(k, 0) for k in after[i]} for i in (0, 1))


@pytest.mark.parametrize("name", ["python", "native"])
def test_control_packets_take_the_nics_high_class(priority_fabric, name):
    if not priority_cmsg():
        pytest.skip("this kernel refuses SO_PRIORITY control messages")
    src, dst = run_writes(priority_fabric, name, CONTROL_PRIORITY)
    print(f"{name}: SRC NIC {src}, DST NIC {dst}")
    assert set(src) == set(dst) == {"1:1", "1:10", "1:20"}      # the two classes under one parent
    assert dst["1:20"] >= WRITES and dst["1:10"] <= 2             # SACKs (a stray neighbour packet at most)
    assert src["1:10"] >= WRITES * 7                               # 64 KiB in ~8 KiB packets, each write
    assert src["1:20"] <= dst["1:20"] // 2 + 2                    # the requester sends few control packets


@pytest.mark.parametrize("name", ["python", "native"])
def test_without_it_every_packet_is_data(priority_fabric, name):
    src, dst = run_writes(priority_fabric, name, 0)
    assert src["1:20"] == dst["1:20"] == 0
    assert dst["1:10"] >= WRITES
