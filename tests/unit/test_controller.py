"""The MRC controller: policy decisions (sans-I/O), its messages, the scenario's controller key
and EV timeline actions."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from agents.protocol import (RUNNER_INBOUND, TO_CONTROLLER, Command, Event, Hello, LineFramer, Operator,
                             ControlProtocolError, Stop, encode)
from testbed.controller.policy import ACK_TIMEOUT_S, CONFIRM_S, DROP_WINDOW, Connection, Controller, Path as EVPath
from testbed.controller.process import serve
from testbed.faults.steps import EVAction
from testbed.faults.timeline import Timeline
from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, load_scenario

# h0 -> h1 over four EVs; 0 and 1 share the core link "a-c0", 2 and 3 cross "a-c1"; the
# backups: 10 over c0 (the suspect), 11 over c2, 12 on the other plane (another NIC port).
LINKS = {0: ("h0-e", "e-a", "a-c0", "c0-b"), 1: ("h0-e", "e-a2", "a2-c0", "c0-b"),
         2: ("h0-e", "e-a", "a-c1", "c1-b"), 3: ("h0-e", "e-a2", "a2-c1", "c1-b")}
BACKUPS = {10: ("h0-e", "e-a", "a-c0", "c0-b2"), 11: ("h0-e", "e-a", "a-c2", "c2-b"),
           12: ("h0-e9", "e9-a9", "a9-c9", "c9-b")}


def conn() -> Connection:
    return Connection(0, "h1", {e: EVPath(e, l) for e, l in LINKS.items()},
                      {e: EVPath(e, l) for e, l in BACKUPS.items()})


def ev(ev_id: int, new: str, old: str = "GOOD", drop_count: int = 3) -> Event:
    return Event(0, 1.0, "ev_state", peer="h1", dir="tx", qpn=7, ev_id=ev_id, old=old, new=new, cause="loss",
                 drop_count=drop_count)


def ack(cmd: Command, t: float = 1.0, reason: str = "ok") -> Event:
    """The agent's result of ``cmd`` (``ev_command``), as the runner forwards it."""
    return Event(cmd.rank, t, "ev_command", peer=cmd.peer, ev_id=cmd.ev_id, cause=cmd.op, reason=reason,
                 new_ev_id=cmd.new_ev_id)


def test_replace_picks_a_backup_on_the_same_port_that_avoids_the_suspect_links():
    c = Controller([conn()], "replace")
    assert c.on_event(ev(0, "ASSUMED_BAD"), 2.0) == []
    cmds = c.on_timer(2.0 + CONFIRM_S)
    assert c.decisions[-1]["suspects"] == ["a-c0"]   # the only link of EV 0 no good EV crosses
    assert cmds == [Command(0, "h1", "replace", 0, "ASSUMED_BAD (drop_count 3), for 0.50 s", 11)]   # 10 crosses a-c0


def test_suspects_are_the_links_no_good_ev_crosses():
    links = {**LINKS, 10: BACKUPS[10]}
    c = Controller([Connection(0, "h1", {e: EVPath(e, links[e]) for e in (0, 2, 3, 10)},
                               {e: EVPath(e, BACKUPS[e]) for e in (11, 12)})], "replace")
    # EV 0's links: h0-e, e-a (EV 2 and 10 cross them), a-c0 (10 crosses it), c0-b: the suspect
    assert c.suspects(c.conns[(0, "h1")], 0) == {"c0-b"}
    c.on_event(ev(0, "ASSUMED_BAD"), 2.0)
    assert [m.new_ev_id for m in c.on_timer(2.0 + CONFIRM_S)] == [11]   # 12 leaves by another port (plane)


def test_no_backup_is_journaled_and_changes_nothing():
    c = Controller([Connection(0, "h1", {0: EVPath(0, LINKS[0]), 2: EVPath(2, LINKS[2])},
                               {12: EVPath(12, BACKUPS[12])})], "replace")
    assert c.on_event(ev(0, "ASSUMED_BAD"), 1.0) == [] and c.on_timer(1.0 + CONFIRM_S) == []
    assert c.decisions[-1]["decision"] == "no_backup" and c.conns[(0, "h1")].active.keys() == {0, 2}
    assert c.on_timer(5.0) == [] and len(c.decisions) == 1   # journaled once


def test_policy_none_decides_nothing_but_carries_out_operator_actions():
    c = Controller([conn()], "none")
    assert c.on_event(ev(0, "ASSUMED_BAD"), 1.0) == [] and c.on_timer(9.0) == []
    deny = c.on_operator(Operator("deny", "h0-e", 3), 2.0)
    assert [(m.op, m.ev_id) for m in deny] == [("deny", 0), ("deny", 1), ("deny", 2), ("deny", 3)]
    assert c.on_operator(Operator("deny", "a-c1", 3), 2.5) == []          # in flight
    for m in deny:
        c.on_event(ack(m), 2.6)
    assert c.on_operator(Operator("deny", "a-c1", 3), 2.7) == []          # already denied
    allow = c.on_operator(Operator("allow", "a-c1", 4), 3.0)
    assert [(m.op, m.ev_id, m.reason) for m in allow] == [("allow", 2, "timeline[4] ev_allow a-c1")]


def test_operator_replace_avoids_the_named_link():
    c = Controller([conn()], "none")
    cmds = c.on_operator(Operator("replace", "c0-b", 0), 1.0)
    assert {m.ev_id: m.new_ev_id for m in cmds}.keys() == {0, 1}
    assert sorted(m.new_ev_id for m in cmds) == [10, 11]                   # 10 leaves c0 by c0-b2
    assert c.decisions[-1] == {"t": 1.0, "decision": "replace", "rank": 0, "peer": "h1", "ev_id": 1,
                               "new_ev_id": cmds[1].new_ev_id, "reason": "timeline[0] ev_replace c0-b",
                               "suspects": ["c0-b"]}
    for m in cmds:
        c.on_event(ack(m), 1.1)
    assert c.on_operator(Operator("replace", "a-c1", 1), 2.0) == []   # no same-port backup left
    assert (c.decisions[-1]["decision"], c.decisions[-1]["ev_id"]) == ("no_backup", 2)


def test_events_of_other_directions_or_unknown_evs_are_ignored():
    c = Controller([conn()], "replace")
    rx = Event(0, 1.0, "ev_state", peer="h1", dir="rx", qpn=7, ev_id=0, old="GOOD", new="ASSUMED_BAD", cause="loss")
    assert c.on_event(rx, 1.0) == [] and c.on_event(ev(99, "ASSUMED_BAD"), 1.0) == [] and not c.decisions
    with pytest.raises(ValueError, match="policy"):
        Controller([], "retire")


def test_messages_round_trip_and_each_end_accepts_only_its_own():
    cmd = Command(3, "h1", "replace", 2, "why", 7)
    assert LineFramer(RUNNER_INBOUND).feed(encode(Hello("controller")) + encode(cmd)) == [Hello("controller"), cmd]
    assert LineFramer(TO_CONTROLLER).feed(encode(Operator("deny", "l", 1))) == [Operator("deny", "l", 1)]
    with pytest.raises(ControlProtocolError, match="other way"):
        LineFramer(TO_CONTROLLER).feed(encode(cmd))
    for bad in ({"type": "command", "rank": 1, "peer": "h", "op": "retire", "ev_id": 1, "reason": ""},
                {"type": "command", "rank": 1, "peer": "h", "op": "deny", "ev_id": 1, "reason": "", "new_ev_id": 2},
                {"type": "hello", "role": "agent"}):
        with pytest.raises(ControlProtocolError):
            LineFramer(RUNNER_INBOUND).feed(json.dumps(bad).encode() + b"\n")


def test_the_process_loop_answers_events_with_commands_and_logs_decisions(tmp_path):
    """The loop wakes at the controller's deadline: the replace follows CONFIRM_S after the
    ASSUMED_BAD with no further message from the runner."""
    runner, ctl = socket.socketpair()
    log = open(tmp_path / "d.jsonl", "w")
    done = []
    t = threading.Thread(target=lambda: done.append(serve(ctl, Controller([conn()], "replace"), log)))
    t.start()
    framer = LineFramer(RUNNER_INBOUND)
    runner.sendall(encode(ev(0, "ASSUMED_BAD")))
    got = []
    runner.settimeout(10)
    while len(got) < 2:
        got += framer.feed(runner.recv(4096))
    runner.sendall(encode(Stop()))
    t.join(5)
    log.close()
    assert got[0] == Hello("controller") and got[1].op == "replace" and done == [0]
    assert json.loads((tmp_path / "d.jsonl").read_text())["decision"] == "replace"


FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
TOPO = Path(__file__).resolve().parents[2] / "topologies" / "fat-tree-k4.yaml"
SCENARIO = """\
name: ctl
topology: {topo}
transports: [mrc]
seed: 1
timeout: 60s
{controller}workload: {{collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB, factor: 2,
           iterations: 3, warmup: 1}}
timeline:
  - at: 1s
    ev_deny: {{link: a0_0-c0_0}}
"""


def test_scenario_controller_and_ev_actions(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller: {policy: replace}\n"))
    s = load_scenario(path, features=FEATURES)
    assert s.controller == "replace" and s.timeline[0].action == "ev_deny" and s.to_dict()["controller"] == "replace"
    tl = Timeline(s.timeline, [False, False, False])
    tl.start(0.0)
    assert [st.change for st in tl.due(2.0)] == [EVAction("a0_0-c0_0", "deny")]
    path.write_text(SCENARIO.format(topo=TOPO, controller=""))
    with pytest.raises(SpecError, match=r"s.yaml:10: timeline\[0\].ev_deny: ev_deny is a controller action"):
        load_scenario(path, features=FEATURES)
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller: {policy: retire}\n"))
    with pytest.raises(SpecError, match=r"s.yaml:6: controller.policy: unknown policy 'retire'"):
        load_scenario(path, features=FEATURES)


def test_scenario_controller_restart_is_validated_with_its_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller: {policy: replace, restart: true}\n"))
    s = load_scenario(path, features=FEATURES)
    assert s.controller_restart and s.to_dict()["controller_restart"] is True
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller: {policy: replace}\n"))
    assert not load_scenario(path, features=FEATURES).controller_restart
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller:\n  policy: replace\n  restart: often\n"))
    with pytest.raises(SpecError, match=r"s.yaml:8: controller.restart: expected true or false, got 'often'"):
        load_scenario(path, features=FEATURES)
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller: {policy: none, restrat: true}\n"))
    with pytest.raises(SpecError, match=r"s.yaml:6: controller.restrat: unknown key"):
        load_scenario(path, features=FEATURES)


def stats(counts: dict[int, tuple], t: float = 1.0) -> Event:
    """ev_stats of h0 -> h1: per EV (sent, lost[, rtx, skips])."""
    keys = ("sent", "lost", "rtx", "skips")
    return Event(0, t, "ev_stats", peer="h1", evs=[{"ev_id": e, **dict(zip(keys, c))} for e, c in counts.items()])


def test_a_gray_ev_is_replaced_from_its_drop_rate():
    """An EV that keeps delivering most packets is never ASSUMED_BAD; its drop rate over the
    last DROP_WINDOW first transmissions of the agents' telemetry is what the replace policy
    acts on."""
    c = Controller([conn()], "replace")
    assert c.on_event(stats({0: (0, 0), 1: (0, 0), 2: (0, 0), 3: (0, 0)}), 1.0) == []
    n = DROP_WINDOW
    assert c.on_event(stats({0: (n, n // 5), 1: (n, 1), 2: (n, 0), 3: (n, 2)}), 2.0) == []
    cmds = c.on_timer(2.0 + CONFIRM_S)
    assert [(m.op, m.ev_id, m.new_ev_id) for m in cmds] == [("replace", 0, 11)]
    assert cmds[0].reason == f"drop rate 20.0% over {n} first transmissions, for 0.50 s"
    assert c.decisions[-1]["suspects"] == ["a-c0"]
    # below the window or the rate: nothing; a stranded EV is journaled once
    assert c.on_event(stats({1: (n + 10, 5), 2: (2 * n, 4)}), 3.0) == [] and c.on_timer(4.0) == []
    c2 = Controller([Connection(0, "h1", {0: EVPath(0, LINKS[0]), 2: EVPath(2, LINKS[2])}, {})], "replace")
    c2.on_event(stats({0: (0, 0)}), 1.0)
    for t in (2.0, 3.0, 4.0):
        c2.on_event(stats({0: (int(t) * n, int(t) * n // 4)}), t)
    assert [d["decision"] for d in c2.decisions] == ["no_backup"]
    assert Controller([conn()], "none").on_event(stats({0: (0, 0)}), 1.0) == []


# -- the rules an operator can trust (issue 29); each test fails on the controller before them --

def test_rule_congestion_is_not_failure():
    """Losses on an EV that saw congestion (SKIPs: CE marks, trims) are excused; the rate is
    losses per first transmission, so retransmissions do not dilute a real failure."""
    c = Controller([conn()], "replace")
    c.on_event(stats({0: (0, 0, 0, 0), 1: (0, 0, 0, 0)}), 1.0)
    # EV 0 lost 8% of 100 packets, but was CE-marked / trimmed (30 SKIPs, as on the victim pair
    # of incast-controller): congestion
    assert c.on_event(stats({0: (100, 8, 0, 30), 1: (100, 0, 0, 0)}), 2.0) == []
    assert c.on_timer(5.0) == [] and not c.decisions
    # EV 1: 200 transmissions, 100 of them retransmissions (of other EVs' losses), 8 lost:
    # 4% of transmissions but 8% of first transmissions, no congestion signal: a failure
    c.on_event(stats({0: (200, 8, 0, 30), 1: (200, 8, 100, 0)}), 6.0)
    cmds = c.on_timer(6.0 + CONFIRM_S)
    assert [(m.ev_id, m.reason) for m in cmds] == [(1, "drop rate 8.0% over 100 first transmissions, for 0.50 s")]


def test_rule_hysteresis_an_ev_must_stay_bad_before_it_is_replaced():
    """A spurious ASSUMED_BAD that the QP undoes (DELIVERED) within CONFIRM_S replaces nothing;
    one that stays is replaced once confirmed."""
    c = Controller([conn()], "replace")
    assert c.on_event(ev(0, "ASSUMED_BAD"), 1.0) == []
    assert c.on_event(ev(0, "GOOD", old="ASSUMED_BAD"), 1.005) == []
    assert c.on_timer(1.0 + CONFIRM_S) == [] and c.on_timer(9.0) == [] and not c.decisions
    assert c.on_event(ev(0, "ASSUMED_BAD"), 10.0) == []
    assert c.next_deadline() == 10.0 + CONFIRM_S
    assert c.on_timer(10.0 + CONFIRM_S - 0.01) == []
    assert [m.ev_id for m in c.on_timer(10.0 + CONFIRM_S)] == [0]


def test_rule_backups_spread_over_connections():
    """Two connections leaving by the same edge, whose EVs fail on the same core link: the
    second gets the other backup path (least used), not the first backup of the list again."""
    def connection(rank: int, peer: str) -> Connection:
        return Connection(rank, peer, {0: EVPath(0, ("h0-e", "e-a", "a-c0", "c0-b")),
                                       1: EVPath(1, ("h0-e", "e-a", "a-c3", "c3-b"))},
                          {10: EVPath(10, ("h0-e", "e-a", "a-c1", "c1-b")),
                           11: EVPath(11, ("h0-e", "e-a", "a-c2", "c2-b"))})
    c = Controller([connection(0, "h1"), connection(0, "h2")], "none")
    cmds = c.on_operator(Operator("replace", "a-c0", 0), 1.0)
    assert [(m.peer, m.ev_id) for m in cmds] == [("h1", 0), ("h2", 0)]
    assert {m.new_ev_id for m in cmds} == {10, 11}      # one over c1, one over c2


def test_rule_the_model_changes_only_on_the_agents_acknowledgement():
    """A sent replace changes nothing until the agent says "ok"; a refusal is journaled failed,
    the refused backup is not offered again and the EV, still bad, is retried with another;
    an unanswered command fails after ACK_TIMEOUT_S."""
    c = Controller([conn()], "replace")
    h1 = c.conns[(0, "h1")]
    (cmd,) = c.on_operator(Operator("replace", "a-c1", 0), 1.0)      # EV 2
    assert cmd.ev_id == 2 and h1.active.keys() == {0, 1, 2, 3} and cmd.new_ev_id in h1.backups
    c.on_event(ack(cmd, reason=f"EV {cmd.new_ev_id} is not a backup EV of the connection to h1"), 1.1)
    assert c.decisions[-1]["decision"] == "failed" and h1.active.keys() == {0, 1, 2, 3}
    c.on_event(ev(2, "ASSUMED_BAD"), 1.2)                 # still bad: retried, with another backup
    (retry,) = c.on_timer(1.2 + CONFIRM_S)
    assert retry.ev_id == 2 and retry.new_ev_id not in (cmd.new_ev_id, None)
    assert c.on_timer(1.2 + 2 * CONFIRM_S) == []          # in flight: not sent twice
    c.on_event(ack(retry), 2.0)
    assert c.decisions[-1]["decision"] == "acked"
    assert h1.active.keys() == {0, 1, 3, retry.new_ev_id} and 2 in h1.retired
    # an unanswered deny: journaled failed, the model unchanged
    (deny,) = c.on_operator(Operator("deny", "a2-c0", 5), 3.0)
    assert c.on_timer(3.0 + ACK_TIMEOUT_S) == [] and h1.states.get(deny.ev_id, "GOOD") == "GOOD"
    assert c.decisions[-1]["decision"] == "failed" and "no acknowledgement" in c.decisions[-1]["reason"]


def test_rule_a_fresh_backup_vouches_for_no_link_until_it_has_history():
    """EV 1 is replaced by 10, which crosses a-c0. Until 10 has carried DROP_WINDOW first
    transmissions it does not exonerate a-c0: when EV 0 goes bad, a-c0 is still a suspect."""
    c = Controller([conn()], "none")
    h1 = c.conns[(0, "h1")]
    (cmd,) = c.on_operator(Operator("replace", "a2-c0", 0), 1.0)
    assert cmd.new_ev_id == 11                    # the least used (a-c2 is idle, EV 0 uses a-c0)
    c.on_event(ack(cmd, reason="refused"), 1.1)   # so that 10, over a-c0, comes in
    (cmd,) = c.on_operator(Operator("replace", "a2-c0", 1), 1.2)
    assert cmd.new_ev_id == 10
    c.on_event(ack(cmd), 1.3)
    assert 10 in h1.active and c.suspects(h1, 0) == {"a-c0", "c0-b"}
    n = DROP_WINDOW
    c.on_event(stats({0: (0, 0), 2: (0, 0), 3: (0, 0), 10: (0, 0)}), 2.0)
    c.on_event(stats({0: (n, 0), 2: (n, 0), 3: (n, 0), 10: (n, 0)}), 3.0)   # 10 has delivered
    assert c.suspects(h1, 0) == {"c0-b"}
