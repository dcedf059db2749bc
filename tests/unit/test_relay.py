"""The runner's relay never blocks: a bounded send queue per connection, written when the socket
is writable; ev_stats dropped first under back-pressure, never events or commands; a message is
dropped whole or written whole, so the framing survives any stall."""

from __future__ import annotations

import os
import socket
import time

import pytest

from agents.protocol import TO_CONTROLLER, Command, Event, Hello, LineFramer, Operator, Query, Ready, Synced, encode
from testbed.run.control import CONTROLLER, ControlServer
from testbed.run.sendq import SendQueue


def stats(i: int) -> Event:
    return Event(0, float(i), "ev_stats", peer="h1", evs=[{"ev_id": e, "sent": i * 100, "lost": i} for e in range(8)])


def state(i: int) -> Event:
    return Event(0, float(i), "ev_state", peer="h1", dir="tx", qpn=7, ev_id=i, old="GOOD", new="ASSUMED_BAD",
                 cause="loss", drop_count=2)


def test_queue_drops_only_droppable_messages_and_only_whole_ones():
    q = SendQueue(limit_bytes=100)
    a, b, c = b"a" * 40 + b"\n", b"b" * 40 + b"\n", b"c" * 40 + b"\n"
    assert q.push(a, 0.0, droppable=True) and q.push(b, 0.0, droppable=True)
    q.sent(10, 0.5)                                  # the head is partly written: it stays
    assert q.push(c, 1.0)                            # undroppable: b (not yet started) goes
    assert q.dropped == 1 and q.over_limit == 0
    assert not q.push(b"d" * 60 + b"\n", 1.0, droppable=True) and q.dropped == 2
    assert q.push(b"e" * 80 + b"\n", 1.0) and q.over_limit == 1   # never dropped, even over the limit
    out = bytearray()
    while len(q):
        chunk = bytes(q.pending()[:7])
        out += chunk
        q.sent(len(chunk), 2.0)
    assert bytes(out) == a[10:] + c + b"e" * 80 + b"\n"   # the written 10 bytes, then the rest whole
    with pytest.raises(ValueError):
        q.sent(1, 3.0)


def test_queue_stall_clock_runs_only_while_nothing_moves():
    q = SendQueue()
    assert q.stalled_s(5.0) == 0.0
    q.push(b"x\n", 10.0)
    assert q.stalled_s(13.0) == 3.0
    q.sent(1, 13.0)
    assert q.stalled_s(14.0) == 1.0
    q.sent(1, 14.0)
    assert q.stalled_s(20.0) == 0.0


@pytest.fixture
def relay(tmp_path):
    """A ControlServer on a fake clock and a controller connection whose reader we control."""
    now = [0.0]
    server = ControlServer(str(tmp_path / "c.sock"), clock=lambda: now[0], limit_bytes=16 << 10)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ctl.connect(server.path)
    ctl.sendall(b'{"type":"hello","role":"controller"}\n')
    deadline = time.monotonic() + 5
    while not server.has_controller and time.monotonic() < deadline:
        server.poll(0.05)
    assert server.has_controller
    conn = server.by_rank[CONTROLLER]
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    yield server, ctl, now
    ctl.close()
    server.close()


def test_a_stalled_controller_never_blocks_the_runner_and_the_stream_stays_well_framed(relay):
    server, ctl, now = relay
    sent_events = [state(i) for i in range(200)]
    t0 = time.monotonic()
    for i in range(2000):                      # the controller reads nothing meanwhile
        server.to_controller(stats(i))
        if i % 10 == 0:
            assert server.to_controller(sent_events[i // 10])
        now[0] += 0.01
    assert server.to_controller(Operator("deny", "l", 1))
    assert time.monotonic() - t0 < 2.0         # 2200 sends, none waited for the reader
    assert server.dropped > 0 and server.stalled_s(CONTROLLER) > 0
    # the controller wakes up: every event and the operator action arrive, in order, whole
    framer, got = LineFramer(TO_CONTROLLER), []
    ctl.setblocking(False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (got and isinstance(got[-1], Operator)):
        server.poll(0.01)
        try:
            got += framer.feed(ctl.recv(1 << 16))
        except BlockingIOError:
            pass
    kept = [m for m in got if isinstance(m, Operator) or m.kind == "ev_state"]
    assert kept == sent_events + [Operator("deny", "l", 1)]
    n_stats = sum(1 for m in got if isinstance(m, Event) and m.kind == "ev_stats")
    assert n_stats + server.dropped == 2000
    assert server.stalled_s(CONTROLLER) == 0.0


def test_commands_to_an_agent_are_queued_not_blocked(tmp_path):
    server = ControlServer(str(tmp_path / "c.sock"), allowed_pids=lambda: [os.getpid()])
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    agent.connect(server.path)
    agent.sendall(b'{"type":"ready","rank":3}\n')
    deadline = time.monotonic() + 5
    while 3 not in server.by_rank and time.monotonic() < deadline:
        server.poll(0.05)
    cmd = Command(3, "h1", "deny", 2, "why")
    assert all(server.send(3, cmd) for _ in range(3000))   # far beyond the socket buffer
    assert server.dropped == 0
    server.disconnect(3)
    assert not server.send(3, cmd)
    agent.close()
    server.close()


def test_queries_and_synced_are_the_controllers_only_and_claim_no_rank(tmp_path):
    """A query names an agent's rank: from the controller's connection it is relayed, never taken
    as that agent's connection; from any other connection it is dropped (as a command is)."""
    server = ControlServer(str(tmp_path / "c.sock"), allowed_pids=lambda: [os.getpid()])
    agent, ctl = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    got = []
    try:
        agent.connect(server.path)
        ctl.connect(server.path)
        agent.sendall(encode(Query(5, "h1")) + encode(Synced(1, 1, 0, 0, 0)) + b'{"type":"ready","rank":3}\n')
        ctl.sendall(encode(Hello("controller")) + encode(Query(3, "h1")) + encode(Synced(2, 2, 1, 0, 0)))
        deadline = time.monotonic() + 5
        while len(got) < 4 and time.monotonic() < deadline:
            got += server.poll(0.05)
        assert sorted(map(repr, got)) == sorted(map(repr, [Ready(3), Hello("controller"), Query(3, "h1"),
                                                           Synced(2, 2, 1, 0, 0)]))
        assert set(server.by_rank) == {3, CONTROLLER} and server.by_rank[3] is not server.by_rank[CONTROLLER]
    finally:
        agent.close()
        ctl.close()
        server.close()
