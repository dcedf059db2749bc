"""The native endpoint (agents/net/native_udp.py over agents/mrc/core/mrcn_endpoint.c) over real
loopback UDP/IPv6 (::1), no root: transfers in both route modes, batching (fewer system calls
than datagrams), CE marks reaching the QP, wire compatibility with the Python engine, and the
QP lifetimes the C endpoint must respect."""
import gc
import os
import random
import socket
import sys

import pytest

from agents.mrc import QP, QPAttr, QPConfig, WCStatus, WorkCompletion, connect_pair, native
from agents.net.native_udp import NativeEndpoint
from agents.net.udp import CE, Endpoint, EventLoop, Route
from tests.conftest import ipv6_loopback_ok

SIZE = 4 << 20

pytestmark = pytest.mark.skipif(not ipv6_loopback_ok(), reason="no IPv6 loopback")


@pytest.fixture(scope="module")
def core():
    mod = native.load()
    if mod is None or not hasattr(mod, "QP"):
        pytest.skip("native engine not built (MRC_NATIVE_REQUIRE=1 makes this an error)")
    return mod


def config(**kw):
    # 256 KiB fixed window keeps a burst inside the 4 MiB socket buffers.
    return QPConfig(min_rto_s=0.05, cc="fixed", cc_params={"window_bytes": 256 * 1024},
                    probe_interval_s=0.02, probe_timeout_s=0.05, **kw)


def pair(qp_a, qp_b, **kw):
    a = qp_a(10, rng=random.Random(1), config=config(**kw))
    b = qp_b(20, rng=random.Random(2), memory=bytearray(SIZE), config=config(**kw))
    connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(timeout=12), now=0.0)
    return a, b


def transfer(loop, ea, eb, a, b, routes_a, routes_b, size=SIZE):
    ea.attach(a, routes_a)
    eb.attach(b, routes_b)
    src = os.urandom(size)
    a.post_write(wr_id=1, local=src, remote_offset=0)
    ea.kick(a)
    done = []

    def finished():
        while (e := a.next_event()) is not None:
            done.append(e)
        return any(isinstance(e, WorkCompletion) for e in done)

    assert loop.run(until=finished, timeout_s=30)
    wc = [e for e in done if isinstance(e, WorkCompletion)]
    assert wc[0].status is WCStatus.SUCCESS and wc[0].wr_id == 1
    assert bytes(memoryview(b.responder.memory)[:size]) == src
    return wc


def closing(*objs):
    for o in objs:
        o.close()


def test_srv6_transfer_batches_its_system_calls(core):
    loop = EventLoop()
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    eb = NativeEndpoint(loop, bind_addr="::1", port=0)
    try:
        a, b = pair(core.QP, core.QP)
        transfer(loop, ea, eb, a, b, {ev: Route("::1", eb.port) for ev in range(4)},
                 {ev: Route("::1", ea.port) for ev in range(4)})
        assert all(v["packets_sent"] > 0 for v in a.stats()["evs"].values())
        ca, cb = ea.counters(), eb.counters()
        assert cb["rx_datagrams"] > SIZE // a.config.payload_bytes and ca["rx_unknown_qpn"] == 0
        # one sendmmsg carries a burst sprayed over every EV; one recvmmsg reads a batch
        assert ca["tx_syscalls"] * 4 <= ca["tx_datagrams"], ca
        assert cb["rx_syscalls"] < cb["rx_datagrams"], cb
        assert ea.tx_errors == 0 and ea.tx_no_route == 0
    finally:
        closing(ea, eb, loop)


def test_ecmp_mode_uses_one_source_port_per_ev(core):
    loop = EventLoop()
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    eb = NativeEndpoint(loop, bind_addr="::1", port=0)
    ports = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.bind(("::1", 0))
            ports.append(s.getsockname()[1])
            s.close()
        a, b = pair(core.QP, core.QP)
        transfer(loop, ea, eb, a, b, {ev: Route("::1", eb.port, src_port=ports[ev]) for ev in range(4)},
                 {ev: Route("::1", ea.port) for ev in range(4)}, size=1 << 20)
        assert set(ea._src_socks) == set(ports)
    finally:
        closing(ea, eb, loop)


@pytest.mark.parametrize("sender", ["native", "python"])
def test_wire_compatible_with_the_python_engine(core, sender):
    """A native QP on the native endpoint talks to a Python QP on the Python endpoint."""
    loop = EventLoop()
    native_side = NativeEndpoint(loop, bind_addr="::1", port=0)
    python_side = Endpoint(loop, bind_addr="::1", port=0)
    try:
        if sender == "native":
            ea, eb, a, b = native_side, python_side, *pair(core.QP, QP)
        else:
            ea, eb, a, b = python_side, native_side, *pair(QP, core.QP)
        transfer(loop, ea, eb, a, b, {ev: Route("::1", eb.port) for ev in range(4)},
                 {ev: Route("::1", ea.port) for ev in range(4)}, size=1 << 20)
    finally:
        closing(native_side, python_side, loop)


def test_ce_marks_reach_the_native_qp(core):
    """A sender whose sockets carry CE (a marking switch's stand-in) makes the native receiver
    read the mark per datagram (rx_ce) and echo it (the sender's EVs see SKIPs)."""
    loop = EventLoop()
    ea = NativeEndpoint(loop, bind_addr="::1", port=0, ecn=True, send_tclass=CE)
    eb = NativeEndpoint(loop, bind_addr="::1", port=0, ecn=True)
    try:
        a, b = pair(core.QP, core.QP)
        transfer(loop, ea, eb, a, b, {ev: Route("::1", eb.port) for ev in range(4)},
                 {ev: Route("::1", ea.port) for ev in range(4)}, size=256 << 10)
        assert eb.rx_ce > 0 and eb.rx_ce == eb.counters()["rx_ce"]
        assert sum(a.stats()["ev_skips"].values()) > 0
    finally:
        closing(ea, eb, loop)


def test_unknown_qpn_and_short_datagrams_are_counted(core):
    loop = EventLoop()
    ep = NativeEndpoint(loop, bind_addr="::1", port=0)
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        s.sendto(b"\x01\x01\x00\x00\x00\x00\x00\x63" + bytes(40), ("::1", ep.port))
        s.sendto(b"\x01\x01\x00", ("::1", ep.port))
        assert loop.run(until=lambda: ep.rx_unknown_qpn == 1 and ep.counters()["rx_short"] == 1,
                        timeout_s=2)
    finally:
        s.close()
        closing(ep, loop)


def test_a_detached_qp_with_a_deadline_is_never_called_and_can_be_freed(core):
    loop = EventLoop()
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    try:
        a, _ = pair(core.QP, core.QP)
        refs = sys.getrefcount(a)
        ea.attach(a, {ev: Route("::1", 9) for ev in range(4)})   # nothing listens: lost
        a.post_write(wr_id=1, local=bytes(10000), remote_offset=0)
        ea.kick(a)
        assert a.get_timer() is not None and ea._ep.next_deadline() is not None
        assert sys.getrefcount(a) > refs           # attached: the endpoints hold it
        ea.detach(a)
        assert ea._ep.next_deadline() is None
        assert sys.getrefcount(a) == refs          # detached: no reference left to free it under
        del a, _
        gc.collect()
        assert ea._ep.on_timer(1e9) == 0           # and no heap entry to call
    finally:
        closing(ea, loop)


def test_an_attached_qp_stays_alive_while_the_endpoint_may_call_it(core):
    loop = EventLoop()
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    try:
        a, _ = pair(core.QP, core.QP)
        refs = sys.getrefcount(a)
        ea.attach(a, {ev: Route("::1", 9) for ev in range(4)})
        assert sys.getrefcount(a) >= refs + 1      # the C endpoint's binding holds it
        a.post_write(wr_id=1, local=bytes(10000), remote_offset=0)
        ea.kick(a)
        del a, _
        gc.collect()
        assert ea._ep.on_timer(1e9) == 1           # still alive: its timer runs safely
    finally:
        closing(ea, loop)


def test_native_endpoint_refuses_a_python_qp(core):
    loop = EventLoop()
    ep = NativeEndpoint(loop, bind_addr="::1", port=0)
    try:
        a, _ = pair(QP, QP)
        with pytest.raises(TypeError):
            ep.attach(a, {0: Route("::1", 9)})
    finally:
        closing(ep, loop)


def test_due_qp_timers_run_after_a_receive_batch_and_count_their_lateness(core):
    """A QP timer that came due while the endpoint was busy runs right after the next receive
    batch (as an event loop runs due timers between sockets), and its lateness counts in the
    loop's, which the fidelity check judges, although the loop's own timer never fired."""
    import time
    loop = EventLoop()
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        a, _ = pair(core.QP, core.QP)
        ea.attach(a, {ev: Route("::1", 9) for ev in range(4)})   # nothing listens: lost
        a.post_write(wr_id=1, local=bytes(10000), remote_offset=0)
        ea.kick(a)
        deadline = ea._ep.next_deadline()
        assert deadline is not None and ea.timers_fired == 0
        time.sleep(max(deadline - time.monotonic(), 0) + 0.002)
        s.sendto(b"\x01\x01\x00\x00\x00\x00\x00\x63" + bytes(40), ("::1", ea.port))   # wakes it
        time.sleep(0.01)
        assert ea._ep.on_readable(ea.sock.fileno(), False, loop.time()) == 1
        assert ea.timers_fired == 1 and loop.timers_fired == 1
        late = loop.take_timer_late_max_s()
        assert 0.002 <= late < 1.0 and ea.timer_late_sum_s == pytest.approx(late)
        assert a.stats()["timeouts"] >= 1
    finally:
        s.close()
        closing(ea, loop)


def test_loop_callbacks_say_whether_a_qp_has_events_for_its_owner(core):
    """A data packet in the middle of a message or a SACK that completes nothing raises no QP
    event: the endpoint's callback returns False (a host runtime then gives its agent no turn);
    the batch that completes the write or lands the message returns True."""
    loop = EventLoop()
    returned = []
    add_reader = loop.add_reader

    def recording(fileobj, callback):
        def wrapped():
            out = callback()
            returned.append(out)
            return out
        add_reader(fileobj, wrapped)
    loop.add_reader = recording
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    eb = NativeEndpoint(loop, bind_addr="::1", port=0)
    try:
        a, b = pair(core.QP, core.QP)
        b.post_recv(1)
        transfer(loop, ea, eb, a, b, {ev: Route("::1", eb.port) for ev in range(4)},
                 {ev: Route("::1", ea.port) for ev in range(4)}, size=256 * 1024)
        assert set(returned) == {True, False}
        assert returned.count(False) > returned.count(True)
    finally:
        closing(ea, eb)


def test_a_runtime_turn_follows_only_callbacks_that_left_something():
    from agents.runtime import LoopView
    loop = EventLoop()
    ready: set = set()
    view = LoopView(loop, ready, 3)
    view.call_at(0.0, lambda: False)
    loop.run_due()
    assert ready == set()
    view.call_at(0.0, lambda: None)
    loop.run_due()
    assert ready == {3}


def test_a_native_loop_serves_endpoints_in_c_and_python_only_its_own(core):
    """EventLoop(native=True): the endpoints' sockets and QP timers are served by the C wait;
    Python sees its own descriptor and timer, and the endpoints whose QPs have events, far
    fewer times than datagrams crossed."""
    loop = EventLoop(native=True)
    assert loop.native_poller
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    eb = NativeEndpoint(loop, bind_addr="::1", port=0)
    r, w = socket.socketpair()
    got, fired, calls = [], [], []
    loop.add_reader(r, lambda: got.append(r.recv(16)))
    loop.call_later(0.01, lambda: (fired.append(True), w.send(b"x")))
    on_events = ea._on_events
    ea._on_events = lambda: calls.append(1) or on_events()
    loop._native[ea._tag] = ea._on_events
    try:
        a, b = pair(core.QP, core.QP)
        transfer(loop, ea, eb, a, b, {ev: Route("::1", eb.port) for ev in range(4)},
                 {ev: Route("::1", ea.port) for ev in range(4)}, size=1 << 20)
        loop.run(until=lambda: bool(got), timeout_s=5)
        assert fired == [True] and got == [b"x"]
        datagrams = eb.rx_datagrams + ea.rx_datagrams
        assert datagrams > 256 and 0 < len(calls) < datagrams // 16
        loop.remove_reader(r)
        with pytest.raises(KeyError):
            loop.remove_reader(r)
    finally:
        closing(ea, eb, r, w)
        loop.close()


def test_a_native_loop_keeps_the_receive_hold(core):
    """hold_s: no wake-up for I/O sooner than hold_s after the previous one (a NIC's
    rx-usecs), counted in holds / hold_sum_s."""
    loop = EventLoop(native=True)
    loop.hold_s = 0.005
    r, w = socket.socketpair()
    got = []
    loop.add_reader(r, lambda: got.append(r.recv(16)))
    try:
        w.send(b"1")
        loop.run_once(0.1)
        t0 = loop.time()
        w.send(b"2")
        loop.run_once(0.1)
        assert got == [b"1", b"2"]
        assert loop.time() - t0 >= 0.004 and loop.holds >= 1 and loop.hold_sum_s > 0.003
    finally:
        closing(r, w)
        loop.close()


def test_run_due_serves_the_native_endpoints_timers_between_turns(core):
    """A host runtime calls run_due between agents' turns: on a native loop it also runs the
    endpoints' due QP timers, which otherwise wait for the next wait of the loop."""
    import time as _time
    loop = EventLoop(native=True)
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    try:
        a = core.QP(10, rng=random.Random(1), config=config())
        b = core.QP(20, rng=random.Random(2), memory=bytearray(1 << 16), config=config())
        connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(timeout=12), now=loop.time())
        ea.attach(a, {ev: Route("::1", 9) for ev in range(4)})   # nobody answers: the RTO fires
        a.post_write(wr_id=1, local=bytes(1000), remote_offset=0)
        ea.kick(a)
        deadline = ea._ep.next_deadline()
        assert deadline is not None
        _time.sleep(max(0.0, deadline - loop.time()) + 0.002)
        fired = ea.timers_fired
        loop.run_due()
        assert ea.timers_fired > fired
    finally:
        closing(ea)
        loop.close()


def test_a_timer_error_leaves_the_other_due_qps_their_timers(core):
    """run_due takes every due QP off the heap; one whose flush fails (its route's socket is
    closed: EBADF, not a drop) must not leave the others with no timer: they all run, the
    failing one is re-armed, and the error is still reported."""
    ep = core.Endpoint()
    good = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    bad = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        ok_route = ep.add_route(good.fileno(), ("::1", 9))
        qps = []
        for qpn in (10, 30, 50):
            a = core.QP(qpn, rng=random.Random(qpn), config=config())
            b = core.QP(qpn + 1, rng=random.Random(qpn + 1), memory=bytearray(1 << 16), config=config())
            connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(timeout=12), now=0.0)
            ep.attach(a)
            for ev in range(4):
                ep.set_route(qpn, ev, ok_route)
            a.post_write(wr_id=1, local=bytes(10000), remote_offset=0)
            ep.kick(qpn, 0.0)               # sent (nothing listens), timers armed
            qps.append(a)
        bad_route = ep.add_route(bad.fileno(), ("::1", 9))
        for ev in range(4):
            ep.set_route(10, ev, bad_route)   # the first QP due now sends on a closed socket
        bad.close()
        with pytest.raises(Exception):
            ep.on_timer(1e9)
        assert [q.stats()["timeouts"] >= 1 for q in qps] == [True, True, True]   # all ran
        assert ep.next_deadline() is not None
        for ev in range(4):
            ep.set_route(10, ev, ok_route)
        ep.on_timer(2e9)                      # every QP still has its timer
        assert all(q.stats()["timeouts"] >= 2 for q in qps)
    finally:
        good.close()
        if bad.fileno() >= 0:
            bad.close()
        del ep


def test_a_detached_qps_slot_is_taken_by_the_next_attach_and_serves_it(core):
    """An endpoint that outlives its QPs (a torch communicator's) reuses a detached QP's slot:
    attach and detach many times and the slots stay one; the QP in the reused slot transfers."""
    loop = EventLoop()
    ea = NativeEndpoint(loop, bind_addr="::1", port=0)
    eb = NativeEndpoint(loop, bind_addr="::1", port=0)
    try:
        for _ in range(5):
            old, _ = pair(core.QP, core.QP)
            ea.attach(old, {ev: Route("::1", 9) for ev in range(4)})
            old.post_write(wr_id=1, local=bytes(10000), remote_offset=0)
            ea.kick(old)                           # armed: a heap entry that detach must take away
            ea.detach(old)
        assert ea._ep.slots == 1 and ea._ep.next_deadline() is None
        a, b = pair(core.QP, core.QP)
        transfer(loop, ea, eb, a, b, {ev: Route("::1", eb.port) for ev in range(4)},
                 {ev: Route("::1", ea.port) for ev in range(4)}, size=1 << 20)
        assert ea._ep.slots == 1
    finally:
        closing(ea, eb, loop)


def test_a_removed_endpoints_poller_slot_is_taken_by_the_next_endpoint(core):
    """The native loop's poller reuses a removed endpoint's slot (its sockets were removed with
    it), so a runtime that opens and closes endpoints does not scan a growing list each wait."""
    loop = EventLoop(native=True)
    try:
        for _ in range(4):
            ep = NativeEndpoint(loop, bind_addr="::1", port=0)
            ep.close()
        assert loop._poller.slots == 1
        a_ep = NativeEndpoint(loop, bind_addr="::1", port=0)
        b_ep = NativeEndpoint(loop, bind_addr="::1", port=0)
        assert loop._poller.slots == 2
        a, b = pair(core.QP, core.QP)
        transfer(loop, a_ep, b_ep, a, b, {ev: Route("::1", b_ep.port) for ev in range(4)},
                 {ev: Route("::1", a_ep.port) for ev in range(4)}, size=1 << 20)
        closing(a_ep, b_ep)
    finally:
        loop.close()
