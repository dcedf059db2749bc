"""A restarted controller resynchronises from the agents (QUERY_EV_ARRAY, QUERY_EV_STATE) before
it decides anything: the policy on a fake clock, and the process loop against a fake runner
connection that answers its queries."""

from __future__ import annotations

import json
import socket
import threading

from agents.protocol import RUNNER_INBOUND, Command, Event, Hello, LineFramer, Operator, Query, Stop, Synced, encode
from testbed.controller.policy import CONFIRM_S, RESYNC_TIMEOUT_S, Connection, Controller, Path as EVPath
from testbed.controller.process import serve
from tests.unit.test_controller import BACKUPS, LINKS, conn, ev


def other() -> Connection:
    """h1 -> h0 over EVs 0..3 (the same links, another connection), no backups."""
    return Connection(1, "h0", {e: EVPath(e, l) for e, l in LINKS.items()}, {})


def answer(rank: int, peer: str, states: dict[int, str], t: float = 1.0, reason: str = "ok") -> Event:
    """An agent's ``ev_query`` answer: the profile's EVs in slot order with their states."""
    return Event(rank, t, "ev_query", peer=peer, evs=[{"ev_id": e, "port": 1, "state": s} for e, s in states.items()],
                 reason=reason)


# What the lost predecessor left in h0's profile for h1: EV 0 replaced by backup 11 (same slot),
# EV 2 denied by the operator, EV 3 held ASSUMED_BAD by the QP.
AFTER_PREDECESSOR = {11: "GOOD", 1: "GOOD", 2: "DENIED", 3: "ASSUMED_BAD"}


def test_resync_rebuilds_the_model_from_the_agents_profiles_before_any_decision():
    c = Controller([conn(), other()], "replace")
    assert c.resync(0.0) == [Query(0, "h1"), Query(1, "h0")]
    assert c.on_event(ev(1, "ASSUMED_BAD"), 0.5) == []   # before its answer: superseded by it
    assert c.on_event(answer(0, "h1", AFTER_PREDECESSOR), 1.0) == []
    h1 = c.conns[(0, "h1")]
    assert list(h1.active) == [11, 1, 2, 3] and h1.retired == {0} and set(h1.backups) == {10, 12}
    assert h1.states == {2: "DENIED", 3: "ASSUMED_BAD"} and h1.fresh == {11}
    # h0's answer is still due: nothing is decided, however long EV 3 has looked bad
    assert c.on_timer(1.0 + 1.5 * CONFIRM_S) == [] and not h1.suspect_since and not c.synced
    assert c.next_deadline() == RESYNC_TIMEOUT_S
    assert c.on_event(answer(1, "h0", {e: "GOOD" for e in LINKS}), 1.9) == [Synced(2, 2, 1, 1, 1)]
    assert c.synced and h1.suspect_since == {3: 1.9}
    cmds = c.on_timer(1.9 + CONFIRM_S)
    # the predecessor's backup 11 is active on the agent: offering it again would be refused
    # (a controller that kept the job spec's view picks 11, the least used)
    assert cmds == [Command(0, "h1", "replace", 3, "ASSUMED_BAD (found at resync), for 0.50 s", 10)]
    assert [(d["decision"], d["rank"]) for d in c.decisions[:2]] == [("resynced", 0), ("resynced", 1)]


def test_without_resync_the_job_spec_view_offers_an_ev_the_agent_already_uses():
    """The rule the resync exists for: the same situation, a controller that did not ask."""
    c = Controller([conn()], "replace")
    c.on_event(ev(3, "ASSUMED_BAD"), 1.0)
    (cmd,) = c.on_timer(1.0 + CONFIRM_S)
    assert cmd.new_ev_id == 11 and 11 in AFTER_PREDECESSOR


def test_a_silent_or_refusing_agent_leaves_its_connection_unmanaged():
    c = Controller([conn(), other()], "replace")
    c.resync(0.0)
    c.on_event(answer(1, "h0", {}, reason="no channel yet"), 0.2)
    assert c.on_timer(RESYNC_TIMEOUT_S - 0.01) == []
    assert c.on_timer(RESYNC_TIMEOUT_S) == [Synced(2, 0, 0, 0, 0)]
    assert not c.conns[(0, "h1")].managed and not c.conns[(1, "h0")].managed
    assert [d["reason"] for d in c.decisions] == ["resync: no channel yet",
                                                  f"resync: no answer within {RESYNC_TIMEOUT_S:g} s"]
    # no decision on what it does not know: neither its own nor the timeline's
    assert c.on_event(ev(0, "ASSUMED_BAD"), 3.0) == [] and c.on_timer(3.0 + CONFIRM_S) == []
    assert c.on_operator(Operator("deny", "a-c0", 4), 4.0) == []


def test_an_answer_naming_an_ev_outside_the_job_spec_or_malformed_is_not_guessed_at():
    c = Controller([conn(), other()], "replace")
    c.resync(0.0)
    assert c.on_event(answer(0, "h1", {0: "GOOD", 99: "GOOD"}), 0.1) == []
    bad = Event(1, 0.2, "ev_query", peer="h0", evs=[{"ev_id": "0", "state": "GOOD"}, 7], reason="ok")
    assert c.on_event(bad, 0.2) == [Synced(2, 0, 0, 0, 0)]
    assert [d["reason"] for d in c.decisions] == ["resync: EVs [99] are not the job spec's",
                                                  "resync: a malformed EV array [{'ev_id': '0', 'state': 'GOOD'}, 7]"]


def test_timeline_actions_during_a_resync_run_when_it_ends():
    c = Controller([conn()], "replace")
    c.resync(0.0)
    assert c.on_operator(Operator("deny", "c1-b", 2), 0.1) == []
    out = c.on_event(answer(0, "h1", {e: "GOOD" for e in LINKS}), 0.2)
    assert out == [Synced(1, 1, 0, 0, 0),
                   Command(0, "h1", "deny", 2, "timeline[2] ev_deny c1-b"),
                   Command(0, "h1", "deny", 3, "timeline[2] ev_deny c1-b")]


def test_the_process_resyncs_first_against_a_fake_runner():
    """``serve(resync=True)``: hello, one query per connection, nothing else until the answers
    are in; then Synced and, after CONFIRM_S with no further message, the replace."""
    runner, ctl = socket.socketpair()
    decisions, done = _Sink(), []
    t = threading.Thread(target=lambda: done.append(serve(ctl, Controller([conn()], "replace"), decisions,
                                                          resync=True)))
    t.start()
    framer, got = LineFramer(RUNNER_INBOUND), []
    runner.settimeout(10)
    try:
        while len(got) < 2:
            got += framer.feed(runner.recv(4096))
        assert got == [Hello("controller"), Query(0, "h1")]
        runner.sendall(encode(ev(3, "ASSUMED_BAD")))          # before the answer: left out
        runner.sendall(encode(answer(0, "h1", AFTER_PREDECESSOR)))
        while len(got) < 4:
            got += framer.feed(runner.recv(4096))
        runner.sendall(encode(Stop()))
    finally:
        t.join(5)
        runner.close()
    assert got[2] == Synced(1, 1, 1, 1, 1) and got[3].op == "replace" and got[3].new_ev_id == 10
    assert done == [0]
    assert [json.loads(line)["decision"] for line in decisions.lines] == ["resynced", "replace"]
    assert BACKUPS[10][0] == LINKS[3][0]     # the backup leaves by the same NIC port


class _Sink:
    """A decisions file in memory."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines += [line for line in text.splitlines() if line]

    def flush(self) -> None:
        pass
