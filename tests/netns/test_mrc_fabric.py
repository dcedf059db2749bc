"""Root tier: MRC over the real fabric (SRv6 uSID EVs through kernel routers, HTB-shaped links).

Both QPs run in this process on one event loop; each endpoint's socket is
opened inside its host's namespace, so every datagram crosses the fabric.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from agents.net import Endpoint, EventLoop, Route
from agents.mrc import QP, QPAttr, QPConfig, WCOpcode, WorkCompletion, connect_pair
from agents.mrc.ev import EVEvent
from tests.netns.conftest import small_fat_tree

SRC, DST = "h0_0_0", "h3_1_1"  # different pods: (k/2)^2 = 4 EVs


def qp_config(fabric) -> QPConfig:
    """NSCC sized to the host link: BDP = rate x base RTT (an event-loop RTT of ~2 ms here)."""
    return QPConfig(cc="uet-1.0-nscc", cc_params={"rate_bps": fabric.host_link_rate_bps(), "base_rtt_s": 0.002})


def write_over_fabric(fabric, size_bytes: int, *, fail: str | None = None, timeout_s: float = 60.0):
    """One WRITE of ``size_bytes`` SRC -> DST; ``fail`` is downed once half is acknowledged.

    Returns (seconds, bit-exact, EV events of the requester, requester stats).
    """
    fwd, rev = fabric.evs(SRC, DST), fabric.evs(DST, SRC)
    loop = EventLoop()
    with fabric.inside(SRC):
        ep_a = Endpoint(loop)
    with fabric.inside(DST):
        ep_b = Endpoint(loop)
    memory = bytearray(size_bytes)
    config = qp_config(fabric)
    a = QP(1, rng=random.Random(1), config=config)
    b = QP(2, rng=random.Random(2), memory=memory, config=config)
    # timeout 15: 1.024 us * 2**15 = 33.6 ms, above a full 100-packet queue at 50 Mbit/s (24 ms)
    connect_pair(a, b, evs=[ev.ev_id for ev in fwd], attr=QPAttr(timeout=15), now=loop.time())
    with fabric.inside(SRC):        # attach opens the per-destination send sockets
        ep_a.attach(a, {ev.ev_id: Route(str(ev.address)) for ev in fwd})
    with fabric.inside(DST):
        ep_b.attach(b, {ev.ev_id: Route(str(ev.address)) for ev in rev})
    data = np.random.default_rng(7).integers(0, 256, size_bytes, dtype=np.uint8).tobytes()
    state = {"done": False, "failed": False, "events": []}

    def until() -> bool:
        while (event := a.next_event()) is not None:
            if isinstance(event, WorkCompletion) and event.opcode is WCOpcode.RDMA_WRITE:
                state["done"] = True
            elif isinstance(event, EVEvent):
                state["events"].append(event)
        while b.next_event() is not None:
            pass
        if fail and not state["failed"] and a.stats()["acked_bytes"] >= size_bytes // 2:
            fabric.set_link(fail, False)
            state["failed"] = True
        return state["done"]

    t0 = time.monotonic()
    a.post_write(wr_id=1, local=data, remote_offset=0)
    ep_a.kick(a)
    try:
        finished = loop.run(until=until, timeout_s=timeout_s)
    finally:
        ep_a.close()
        ep_b.close()
        loop.close()
        if fail and state["failed"]:
            fabric.set_link(fail, True)
    assert finished, f"WRITE did not complete in {timeout_s}s: {a.stats()}"
    return time.monotonic() - t0, bytes(memory) == data, state["events"], a.stats()


@pytest.fixture(scope="module")
def fabric50():
    """k=4 at 50 Mbit/s: one Python process runs both QPs (~4.4k data packets/s each way)."""
    with small_fat_tree(50_000_000) as fabric:
        yield fabric


def test_64mib_write_over_the_fabric_completes_bit_exact(fabric50):
    """Correctness, not speed: the write completes (the timeout only catches a hang: ~11 s at
    line rate) and every byte lands. The rate MRC reaches over the fabric is make bench's
    (the ceiling sweep: mrc's busbw against the host link at each rate, 90% to pass)."""
    size = 64 << 20
    seconds, exact, _, stats = write_over_fabric(fabric50, size, timeout_s=300.0)
    assert exact
    assert stats["acked_bytes"] == size
    rate_bps = fabric50.host_link_rate_bps()
    print(f"64 MiB in {seconds:.2f}s: goodput {size * 8 / seconds / 1e6:.1f} Mbit/s of "
          f"{rate_bps / 1e6:.0f}, {stats['retransmissions']} retransmissions")


def test_write_survives_an_aggregation_core_link_failure(fabric50):
    fwd = fabric50.evs(SRC, DST)
    failed = next(l for l in fwd[0].links if l.startswith("a0_") and "-c" in l)
    dead = {ev.ev_id for ev in fwd if failed in ev.links}
    seconds, exact, events, stats = write_over_fabric(fabric50, 16 << 20, fail=failed, timeout_s=300.0)
    assert exact
    left_good = {e.ev for e in events if e.old.name == "GOOD"}
    assert dead <= left_good, (dead, events)
