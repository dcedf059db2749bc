"""The control channel's messages and line framer (sans-I/O), and the runner's server on a real
Unix socket: garbage from one connection drops that connection, not the run."""
from __future__ import annotations

import json
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import protocol
from agents.protocol import (
    AGENT_MESSAGES,
    RUNNER_MESSAGES,
    Done,
    Event,
    Failed,
    Iteration,
    LineFramer,
    LoopStats,
    ControlProtocolError,
    Ready,
    Sample,
    Start,
    Stop,
    encode,
)
from testbed.run.control import ControlServer

EXAMPLES = [
    Ready(2),
    Start(),
    Iteration(1, size=1 << 20, iter=0, seq=3, warmup=False, t_start=10.0, t_end=10.5, seconds=0.5, wrong=0),
    Sample(0, 12.25, [{"peer": "h1", "dir": "tx", "bytes": 5, "evs": [{"ev_id": 0, "state": "GOOD"}]}],
           LoopStats(timers=7, late_sum_s=0.003, late_max_s=0.001)),
    Sample(0, 12.5, []),
    Event(1, 11.0, "ev_state", peer="h2", dir="tx", qpn=5, ev_id=3, old="GOOD", new="ASSUMED_BAD",
          cause="loss"),
    Event(1, 11.0, "qp_error", reason="retry exhausted"),
    Done(3, {"wrong": 0, "sizes": []}),
    Failed(3, "TimeoutError: no peer"),
    Stop(),
]


def test_wire_format_names_fields_as_the_runner_records_them():
    lines = [json.loads(encode(m)) for m in EXAMPLES]
    assert lines[0] == {"type": "ready", "rank": 2}
    assert lines[1] == {"type": "start"}
    assert lines[2] == {"type": "iteration", "rank": 1, "size": 1 << 20, "iter": 0, "seq": 3, "warmup": False,
                        "t_start": 10.0, "t_end": 10.5, "seconds": 0.5, "wrong": 0}
    assert lines[3]["loop"] == {"timers": 7, "late_sum_s": 0.003, "late_max_s": 0.001}
    assert "loop" not in lines[4]
    assert lines[5] == {"type": "event", "rank": 1, "t": 11.0, "kind": "ev_state", "peer": "h2", "dir": "tx",
                        "qpn": 5, "ev_id": 3, "old": "GOOD", "new": "ASSUMED_BAD", "cause": "loss"}
    assert lines[6] == {"type": "event", "rank": 1, "t": 11.0, "kind": "qp_error", "reason": "retry exhausted"}
    assert all(encode(m).endswith(b"\n") and encode(m).count(b"\n") == 1 for m in EXAMPLES)


def test_lines_split_across_feeds_and_several_in_one():
    data = b"".join(encode(m) for m in EXAMPLES)
    framer = LineFramer()
    got = []
    for i in range(0, len(data), 7):
        got += framer.feed(data[i:i + 7])
    assert got == EXAMPLES and framer.buffered_bytes == 0
    assert LineFramer().feed(data) == EXAMPLES


def test_blank_lines_are_ignored():
    assert LineFramer().feed(b"\n  \n" + encode(Stop()) + b"\r\n\n") == [Stop()]


def test_over_long_line_raises_with_or_without_its_newline():
    framer = LineFramer(max_line_bytes=100)
    assert framer.feed(b"x" * 100) == []
    with pytest.raises(ControlProtocolError, match="longer than 100 bytes"):
        framer.feed(b"x")
    with pytest.raises(ControlProtocolError, match="longer than 100"):
        LineFramer(max_line_bytes=100).feed(b"{" + b" " * 200 + b"}\n")


def test_bad_json_and_the_messages_before_it():
    with pytest.raises(ControlProtocolError, match="bad control message") as err:
        LineFramer().feed(encode(Ready(0)) + b'{"type": "ready", "rank": \n' + encode(Ready(1)))
    assert err.value.messages == [Ready(0)]


def test_stream_is_unusable_after_an_error():
    framer = LineFramer()
    with pytest.raises(ControlProtocolError):
        framer.feed(b"nonsense\n")
    with pytest.raises(ControlProtocolError, match="earlier error"):
        framer.feed(encode(Stop()))


@pytest.mark.parametrize("line,match", [
    (b'{"type": "teleport"}', "unknown control message type 'teleport'"),
    (b'{"rank": 1}', "without a type"),
    (b'[1, 2]', "without a type"),
    (b'{"type": 5}', "without a type"),
    (b'{"type": "ready"}', "missing field 'rank'"),
    (b'{"type": "ready", "rank": 1, "colour": "red"}', "unknown field 'colour'"),
    (b'{"type": "ready", "rank": true}', "rank must be an integer"),
    (b'{"type": "ready", "rank": 1.0}', "rank must be an integer"),
    (b'{"type": "sample", "rank": 1, "t": NaN, "flows": []}', "t must be a finite number"),
    (b'{"type": "sample", "rank": 1, "t": 1, "flows": {}}', "flows must be an array"),
    (b'{"type": "sample", "rank": 1, "t": 1, "flows": [], "loop": {"timers": 1}}', "loop: missing field"),
    (b'{"type": "event", "rank": 1, "t": 1, "kind": "qp_error"}', "qp_error event without reason"),
    (b'{"type": "event", "rank": 1, "t": 1, "kind": "boom", "reason": "x"}', "event kind must be one of"),
    (b'\xff\xfe\xfa\n', "bad control message"),
])
def test_not_a_message(line, match):
    with pytest.raises(ControlProtocolError, match=match):
        LineFramer().feed(line + b"\n")


def test_each_end_accepts_only_the_other_ends_messages():
    with pytest.raises(ControlProtocolError, match="'stop' goes the other way"):
        LineFramer(AGENT_MESSAGES).feed(encode(Stop()))
    with pytest.raises(ControlProtocolError, match="'ready' goes the other way"):
        LineFramer(RUNNER_MESSAGES).feed(encode(Ready(0)))
    assert LineFramer(RUNNER_MESSAGES).feed(encode(Start()) + encode(Stop())) == [Start(), Stop()]


def test_misuse_of_a_message_is_a_value_error():
    with pytest.raises(ValueError, match="ev_state event without"):
        Event(0, 1.0, "ev_state", peer="h1")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_any_bytes_give_messages_or_protocol_error(chunks):
    framer = LineFramer(max_line_bytes=256)
    try:
        for chunk in chunks:
            for msg in framer.feed(chunk):
                assert isinstance(msg, protocol.MESSAGES)
    except ControlProtocolError:
        pass


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["ready", "start", "sample", "event", "done", "iteration", "nope"]),
       st.dictionaries(st.sampled_from(["rank", "t", "flows", "kind", "reason", "summary", "size", "loop", "x"]),
                       json_values, max_size=5))
def test_any_json_object_gives_a_message_or_protocol_error(kind, fields):
    line = json.dumps({"type": kind, **fields}).encode() + b"\n"
    try:
        (msg,) = LineFramer().feed(line)
    except ControlProtocolError:
        return
    assert LineFramer().feed(encode(msg)) == [msg]      # what decodes, re-encodes to itself


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(EXAMPLES), max_size=6), st.lists(st.integers(1, 50), max_size=20))
def test_round_trip_under_any_split(msgs, cuts):
    data = b"".join(encode(m) for m in msgs)
    framer, got, i = LineFramer(), [], 0
    for n in cuts:
        got += framer.feed(data[i:i + n])
        i += n
    got += framer.feed(data[i:])
    assert got == msgs


# -- the runner's server -------------------------------------------------------------
def _poll_until(server, pred, timeout_s=5.0):
    got = []
    deadline = time.monotonic() + timeout_s
    while not pred(got) and time.monotonic() < deadline:
        got += server.poll(0.05)
    return got


def test_runner_drops_a_connection_that_sends_garbage_and_keeps_the_others(tmp_path, caplog):
    server = ControlServer(str(tmp_path / "ctl.sock"))
    good, bad = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    try:
        for s in (good, bad):
            s.connect(server.path)
        good.sendall(encode(Ready(0)))
        bad.sendall(encode(Ready(1)) + b"this is not json\n" + encode(Ready(1)))
        got = _poll_until(server, lambda g: len(g) >= 2)
        assert sorted(m.rank for m in got) == [0, 1]          # what came before the garbage counts
        assert "dropping the connection of rank(s) [1]" in caplog.text
        assert list(server.by_rank) == [0]
        assert bad.recv(10) == b""                            # closed by the runner
        assert server.send(0, Start()) and not server.send(1, Start())
        assert good.recv(100) == b'{"type":"start"}\n'
        good.sendall(encode(Done(0, {})))
        assert _poll_until(server, bool) == [Done(0, {})]
    finally:
        good.close()
        bad.close()
        server.close()


def test_runner_accepts_only_its_own_agents_and_the_socket_is_private(tmp_path, caplog):
    """SO_PEERCRED: a peer that is not one of the started PIDs (nor below one) is refused
    before anything it sends is read; the socket file is 0600."""
    import os
    import subprocess
    import sys
    allowed: list[int] = []
    server = ControlServer(str(tmp_path / "ctl.sock"), allowed_pids=lambda: allowed)
    assert os.stat(server.path).st_mode & 0o777 == 0o600
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        stranger.connect(server.path)
        stranger.sendall(encode(Ready(0)))
        assert _poll_until(server, bool, timeout_s=0.5) == []
        assert server.refused == 1 and "is not an agent this runner started" in caplog.text
        try:
            assert stranger.recv(10) == b""   # closed (or reset: what it sent was never read)
        except ConnectionResetError:
            pass
        # a child of an allowed PID (an agent behind a wrapper) is accepted
        allowed.append(os.getpid())
        code = ("import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
                "s.sendall(b'{\"type\":\"ready\",\"rank\":3}\\n'); s.recv(1)")
        child = subprocess.Popen([sys.executable, "-c", code, server.path])
        try:
            assert _poll_until(server, bool) == [Ready(3)]
        finally:
            child.kill()
            child.wait()
    finally:
        stranger.close()
        server.close()


def test_sample_records_round_trip_and_are_validated():
    msg = Sample(3, 12.5, [{"peer": "h1", "dir": "tx", "bytes": 10}], LoopStats(4, 0.01, 0.002))
    rec = protocol.sample_record(msg)
    assert "type" not in rec and protocol.sample_from_record(json.loads(json.dumps(rec))) == msg
    for bad in ({"t": 1.0, "rank": "3", "flows": []}, {"t": 1.0, "rank": 3}, [1, 2],
                {"type": "sample", "t": 1.0, "rank": 3, "flows": []}):
        with pytest.raises(protocol.ControlProtocolError):
            protocol.sample_from_record(bad)


def test_a_poll_waiting_in_another_thread_returns_on_wakeup(tmp_path):
    import threading
    server = ControlServer(str(tmp_path / "ctl.sock"))
    try:
        took = []

        def wait():
            t0 = time.monotonic()
            took.append((server.poll(10.0), time.monotonic() - t0))

        th = threading.Thread(target=wait)
        th.start()
        time.sleep(0.1)   # time for the thread to block in poll (not observable; an early wakeup stays pending)
        server.wakeup()
        server.wakeup()                      # a second one before the poll drains: harmless
        th.join(5.0)
        assert took and took[0][0] == [] and took[0][1] < 5.0
        assert server.poll(0.05) == []       # drained: the next poll waits again
    finally:
        server.close()
