"""DCQCN's pacing through the real event loop and UDP on ::1 (no root): the write arrives intact at
about the paced rate, the loop woken by the QP's pacing deadline."""
import os
import random
import time

import pytest

from agents.mrc import QP, QPAttr, QPConfig, Transport, WCStatus, WorkCompletion, connect_pair
from agents.net.udp import Endpoint, EventLoop, Route
from tests.conftest import ipv6_loopback_ok

SIZE = 250_000
RATE = 20e6      # 100 ms for SIZE




@pytest.mark.skipif(not ipv6_loopback_ok(), reason="no IPv6 loopback")
def test_a_paced_write_over_loopback_takes_its_rate():
    cfg = QPConfig(transport=Transport.RC, cc="dcqcn", cc_params={"rate_bps": RATE}, min_rto_s=0.05,
                   cnp_interval_s=0.001)
    a = QP(10, rng=random.Random(1), config=cfg)
    b = QP(20, rng=random.Random(2), memory=bytearray(SIZE), config=cfg)
    connect_pair(a, b, [0], attr=QPAttr(timeout=12))
    loop = EventLoop()
    ea, eb = Endpoint(loop, bind_addr="::1", port=0), Endpoint(loop, bind_addr="::1", port=0)
    try:
        ea.attach(a, {0: Route("::1", eb.port)})
        eb.attach(b, {0: Route("::1", ea.port)})
        src = os.urandom(SIZE)
        done = []

        def finished():
            while (e := a.next_event()) is not None:
                done.append(e)
            return bool(done)
        t0 = time.monotonic()
        a.post_write(wr_id=1, local=src, remote_offset=0)
        ea.kick(a)
        assert loop.run(until=finished, timeout_s=10)
        elapsed = time.monotonic() - t0
    finally:
        ea.close()
        eb.close()
        loop.close()
    assert isinstance(done[0], WorkCompletion) and done[0].status is WCStatus.SUCCESS
    assert bytes(b.responder.memory) == src
    ideal = SIZE * 8 / RATE
    assert 0.9 * ideal < elapsed   # paced, not a burst (a busy host may be late: no upper bound but the run's 10 s)
