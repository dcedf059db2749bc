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
from testbed.controller.policy import Connection, Controller, Path as EVPath
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


def test_replace_picks_a_backup_on_the_same_port_that_avoids_the_suspect_links():
    c = Controller([conn()], "replace")
    cmds = c.on_event(ev(0, "ASSUMED_BAD"), 2.0)
    assert c.decisions[-1]["suspects"] == ["a-c0"]   # the only link of EV 0 no good EV crosses
    assert cmds == [Command(0, "h1", "replace", 0, "ASSUMED_BAD (drop_count 3)", 11)]   # 10 crosses a-c0


def test_suspects_are_the_links_no_good_ev_crosses():
    c = Controller([conn()], "replace")
    c.on_event(ev(1, "ASSUMED_BAD"), 1.0)     # EV 1 out: replaced by 10 ("c0-b2")
    assert c.conns[(0, "h1")].active.keys() == {0, 2, 3, 10}
    cmds = c.on_event(ev(0, "ASSUMED_BAD"), 2.0)
    # EV 0's links: h0-e, e-a (EV 2 and 10 cross them), a-c0 (10 crosses it), c0-b: the suspect
    assert c.decisions[-1]["suspects"] == ["c0-b"]
    assert cmds[0].new_ev_id == 11                # 12 leaves by another port (plane)
    assert c.conns[(0, "h1")].retired == {0, 1}


def test_no_backup_is_journaled_and_changes_nothing():
    c = Controller([Connection(0, "h1", {0: EVPath(0, LINKS[0]), 2: EVPath(2, LINKS[2])},
                               {12: EVPath(12, BACKUPS[12])})], "replace")
    assert c.on_event(ev(0, "ASSUMED_BAD"), 1.0) == []
    assert c.decisions[-1]["decision"] == "no_backup" and c.conns[(0, "h1")].active.keys() == {0, 2}


def test_policy_none_decides_nothing_but_carries_out_operator_actions():
    c = Controller([conn()], "none")
    assert c.on_event(ev(0, "ASSUMED_BAD"), 1.0) == []
    deny = c.on_operator(Operator("deny", "h0-e", 3), 2.0)
    assert [(m.op, m.ev_id) for m in deny] == [("deny", 0), ("deny", 1), ("deny", 2), ("deny", 3)]
    assert c.on_operator(Operator("deny", "a-c1", 3), 2.5) == []          # already denied
    allow = c.on_operator(Operator("allow", "a-c1", 4), 3.0)
    assert [(m.op, m.ev_id, m.reason) for m in allow] == [("allow", 2, "timeline[4] ev_allow a-c1")]


def test_operator_replace_avoids_the_named_link():
    c = Controller([conn()], "none")
    cmds = c.on_operator(Operator("replace", "c0-b", 0), 1.0)
    assert [(m.ev_id, m.new_ev_id) for m in cmds] == [(0, 10), (1, 11)]   # 10 leaves c0 by c0-b2
    assert c.decisions[-1] == {"t": 1.0, "decision": "replace", "rank": 0, "peer": "h1", "ev_id": 1,
                               "new_ev_id": 11, "reason": "timeline[0] ev_replace c0-b", "suspects": ["c0-b"]}
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
    runner, ctl = socket.socketpair()
    log = open(tmp_path / "d.jsonl", "w")
    done = []
    t = threading.Thread(target=lambda: done.append(serve(ctl, Controller([conn()], "replace"), log)))
    t.start()
    framer = LineFramer(RUNNER_INBOUND)
    runner.sendall(encode(ev(0, "ASSUMED_BAD")) + encode(Stop()))
    got = []
    while len(got) < 2:
        got += framer.feed(runner.recv(4096))
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


def stats(counts: dict[int, tuple[int, int]]) -> Event:
    return Event(0, 1.0, "ev_stats", peer="h1", evs=[{"ev_id": e, "sent": s, "lost": l} for e, (s, l) in counts.items()])


def test_a_gray_ev_is_replaced_from_its_drop_rate():
    """An EV that keeps delivering most packets is never ASSUMED_BAD; its drop rate over the
    last DROP_WINDOW packets of the agents' telemetry is what the replace policy acts on."""
    from testbed.controller.policy import DROP_WINDOW
    c = Controller([conn()], "replace")
    assert c.on_event(stats({0: (0, 0), 1: (0, 0), 2: (0, 0), 3: (0, 0)}), 1.0) == []
    n = DROP_WINDOW
    cmds = c.on_event(stats({0: (n, n // 5), 1: (n, 1), 2: (n, 0), 3: (n, 2)}), 2.0)
    assert [(m.op, m.ev_id, m.new_ev_id) for m in cmds] == [("replace", 0, 11)]
    assert cmds[0].reason == f"drop rate 20.0% over {n} packets" and c.decisions[-1]["suspects"] == ["a-c0"]
    # below the window or the rate: nothing; a stranded EV is journaled once
    assert c.on_event(stats({1: (n + 10, 5), 2: (2 * n, 4)}), 3.0) == []
    c2 = Controller([Connection(0, "h1", {0: EVPath(0, LINKS[0]), 2: EVPath(2, LINKS[2])}, {})], "replace")
    c2.on_event(stats({0: (0, 0)}), 1.0)
    for t in (2.0, 3.0, 4.0):
        c2.on_event(stats({0: (int(t) * n, int(t) * n // 4)}), t)
    assert [d["decision"] for d in c2.decisions] == ["no_backup"]
    assert Controller([conn()], "none").on_event(stats({0: (0, 0)}), 1.0) == []


def test_servers_runs_refuse_a_controller_up_front_naming_the_file_and_key(tmp_path, capsys):
    """The controller runs on one machine only: with --servers a scenario that has one is refused
    before any server is contacted (the servers file does not even exist here), not ignored."""
    from testbed import cli
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller: {policy: replace}\n"))
    assert cli.main(["run", str(path), "--servers", str(tmp_path / "servers.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:6: controller.policy: the MRC controller (policy replace) does not run on --servers runs" in err
    from testbed.spec import key_line
    assert key_line(path, "controller.policy") == 6 and key_line(path, "nope.x") == 0
