"""The endpoints' propagation delay line (``Route.delay_s``), in both engines, over real
loopback UDP/IPv6 (::1), no root: a held datagram leaves no sooner than its delay, the RTT a
QP measures gains both directions' delay, bulk data crosses intact over routes of several
delays, and what was held is counted out."""
import os
import random
import time

import pytest

from agents.mrc import QP, QPAttr, QPConfig, WCStatus, WorkCompletion, connect_pair, native
from agents.net.native_udp import NativeEndpoint
from agents.net.udp import Endpoint, EventLoop, Route
from tests.conftest import ipv6_loopback_ok

pytestmark = pytest.mark.skipif(not ipv6_loopback_ok(), reason="no IPv6 loopback")

SLACK_S = 1.0    # a loaded 2-core machine may run a release late (a hang bound, not a latency target); never early


def engines():
    """(QP class, endpoint class, native loop) of each engine; the native one also on the C wait."""
    out = [pytest.param((QP, Endpoint, False), id="python")]
    mod = native.load()
    for native_loop, name in ((False, "native"), (True, "native-loop")):
        if mod is not None and hasattr(mod, "QP"):
            out.append(pytest.param((mod.QP, NativeEndpoint, native_loop), id=name))
        else:
            out.append(pytest.param(None, id=name, marks=pytest.mark.skip(
                reason="native engine not built (MRC_NATIVE_REQUIRE=1 makes this an error)")))
    return out


@pytest.fixture(params=engines())
def engine(request):
    if request.param is None and native.required():
        pytest.fail("the native engine is required but not built")
    return request.param


def make_pair(qp_cls, size):
    cfg = QPConfig(min_rto_s=0.5, cc="fixed", cc_params={"window_bytes": 256 * 1024},
                   probe_interval_s=1.0, probe_timeout_s=1.0)
    a = qp_cls(10, rng=random.Random(1), config=cfg)
    b = qp_cls(20, rng=random.Random(2), memory=bytearray(size), config=cfg)
    connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(timeout=18), now=time.monotonic())
    return a, b


def run_write(engine, size, delays):
    """Write ``size`` bytes from QP a to QP b, EV k's routes (both ways) delayed ``delays[k]``;
    returns (seconds from post to completion, a, b, endpoint a, endpoint b)."""
    qp_cls, ep_cls, native_loop = engine
    loop = EventLoop(native=native_loop)
    ea = ep_cls(loop, bind_addr="::1", port=0)
    eb = ep_cls(loop, bind_addr="::1", port=0)
    try:
        a, b = make_pair(qp_cls, size)
        ea.attach(a, {ev: Route("::1", eb.port, delay_s=d) for ev, d in enumerate(delays)})
        eb.attach(b, {ev: Route("::1", ea.port, delay_s=d) for ev, d in enumerate(delays)})
        src = os.urandom(size)
        t0 = loop.time()
        a.post_write(wr_id=7, local=src, remote_offset=0)
        ea.kick(a)
        done = []

        def finished():
            while (e := a.next_event()) is not None:
                if isinstance(e, WorkCompletion):
                    done.append((loop.time(), e))
            return bool(done)

        assert loop.run(until=finished, timeout_s=20)
        t, wc = done[0]
        assert wc.status is WCStatus.SUCCESS and wc.wr_id == 7
        assert bytes(memoryview(b.responder.memory)[:size]) == src
        return t - t0, a, b, ea, eb
    finally:
        ea.close()
        eb.close()


def test_a_write_completes_no_sooner_than_both_directions_delay(engine):
    undelayed, *_ = run_write(engine, 1000, [0.0] * 4)
    d = 0.04
    took, a, _, ea, eb = run_write(engine, 1000, [d] * 4)
    # data one way, its SACK the other: each held d by the endpoint it leaves
    assert 2 * d <= took <= 2 * d + undelayed + SLACK_S
    assert a.stats()["srtt_s"] >= 2 * d
    assert ea.tx_released >= 1 and eb.tx_released >= 1


def test_bulk_data_crosses_intact_over_routes_of_several_delays(engine):
    delays = [0.005, 0.01, 0.02, 0.02]
    size = 512 * 1024
    took, a, b, ea, eb = run_write(engine, size, delays)
    assert took >= 2 * min(delays)
    sent = a.stats()["evs"]
    assert all(sent[ev]["packets_sent"] > 0 for ev in range(4))
    # what went into a line came out of it (the transfer ended, so nothing is left but
    # datagrams held after the completion: acknowledgements on their way)
    assert 0 < ea.tx_released <= ea.tx_datagrams


@pytest.mark.parametrize("bad", [-0.001, 10.5])
def test_a_route_delay_outside_its_range_is_refused(bad):
    with pytest.raises(ValueError, match="delay"):
        Route("::1", 4791, delay_s=bad)


def test_the_native_endpoint_refuses_a_delay_outside_its_range():
    mod = native.load()
    if mod is None or not hasattr(mod, "Endpoint"):
        pytest.skip("native engine not built")
    ep = mod.Endpoint()
    with pytest.raises(ValueError, match="add_route"):
        ep.add_route(0, ("::1", 4791), 11.0)
    with pytest.raises(ValueError, match="add_route"):
        ep.add_route(0, ("::1", 4791), -1.0)
    assert ep.add_route(0, ("::1", 4791), 0.01) == 0
