"""Link faults without a kernel: numgen thresholds, nftables transactions, the journal and undo logic."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from testbed import faults
from testbed.faults import (
    FaultError,
    FaultState,
    LinkFaults,
    loss_threshold,
    transition,
)
from testbed.topology import LinkParams, fat_tree

LINK = "a0_0-c0_0"


def test_loss_threshold_has_1e_4_percent_resolution():
    assert loss_threshold(10) == 100_000
    assert loss_threshold(0.01) == 100
    assert loss_threshold(0.0001) == 1
    assert loss_threshold(33.3333) == 333_333
    assert loss_threshold(100) == faults.LOSS_MOD


@pytest.mark.parametrize("bad", [0, -1, 100.01, float("nan"), float("inf"), "5", None, 0.00001])
def test_loss_threshold_rejects(bad):
    with pytest.raises(ValueError):
        loss_threshold(bad)


def ops(cmds):
    return [(verb, next(iter(body))) for c in cmds for verb, body in c.items()]


def test_transition_creates_table_counters_chain_then_rules():
    cmds = transition(LINK, "a0_0-eth2", FaultState(), FaultState(loss_pct=10.0, blackhole=True))
    json.dumps(cmds)
    assert ops(cmds) == [("add", "table"), ("add", "counter"), ("add", "counter"), ("add", "chain"),
                         ("flush", "chain"), ("add", "rule"), ("add", "rule")]
    chain = cmds[3]["add"]["chain"]
    assert chain == {"family": "netdev", "table": "mrc_fault_a0_0-c0_0", "name": "ingress", "type": "filter",
                     "hook": "ingress", "dev": "a0_0-eth2", "prio": -500, "policy": "accept"}
    blackhole, loss = (c["add"]["rule"]["expr"] for c in cmds[5:])
    assert blackhole == [{"counter": "blackhole_dropped"}, {"drop": None}]   # first: drops all
    assert loss[0]["match"] == {"op": "<", "left": {"numgen": {"mode": "random", "mod": 1_000_000, "offset": 0}},
                                "right": 100_000}
    assert loss[1:] == [{"counter": "loss_dropped"}, {"drop": None}]


def test_transition_between_active_states_only_refills_the_chain():
    cmds = transition(LINK, "x", FaultState(loss_pct=50.0), FaultState(loss_pct=1.0))
    assert ops(cmds) == [("flush", "chain"), ("add", "rule")]   # counters survive


def test_full_loss_is_an_unconditional_drop():
    (rule,) = transition(LINK, "x", FaultState(blackhole=True), FaultState(loss_pct=100.0))[1:]
    assert rule["add"]["rule"]["expr"] == [{"counter": "loss_dropped"}, {"drop": None}]


def test_transition_to_nothing_deletes_the_table_idempotently():
    cmds = transition(LINK, "x", FaultState(blackhole=True), FaultState())
    assert ops(cmds) == [("add", "table"), ("delete", "table")]
    assert transition(LINK, "x", FaultState(), FaultState()) == []


def test_current_rate_defaults_to_the_topology():
    fabric = SimpleNamespace(topo=None)
    link = SimpleNamespace(name=LINK, params=LinkParams(20_000_000))
    assert faults.current_rate_bps(fabric, link) == 20_000_000
    fabric._fault_rate_bps = {LINK: 5}
    assert faults.current_rate_bps(fabric, link) == 5


class FakeFabric:
    def __init__(self):
        lp = LinkParams(20_000_000, 64)
        self.topo = fat_tree(4, host_link=lp, fabric_link=lp)
        self.have_netem = False
        self.fds = {name: 100 + i for i, name in enumerate(self.topo.nodes)}

    def nsfd(self, node):
        return self.fds[node]   # KeyError once "stopped"


def fake_faults(fail_on=None):
    fabric = FakeFabric()
    lf = LinkFaults(fabric)
    lf.calls = []
    node_of_fd = {fd: n for n, fd in fabric.fds.items()}

    def run(fd, cmds):
        node = node_of_fd[fd]
        lf.calls.append((node, ops(cmds)))
        if fail_on and fail_on(node, cmds):
            return 1, "", "Error: Operation not supported"
        return 0, "", ""

    lf._run = run
    return fabric, lf


def test_unknown_link_names_it():
    _, lf = fake_faults()
    with pytest.raises(KeyError, match="no-such-link"):
        lf.set_loss("no-such-link", 1)
    with pytest.raises(KeyError, match="no-such-link"):
        lf.set_rate("no-such-link", None)


def test_changes_are_journaled_and_state_tracked():
    _, lf = fake_faults()
    lf.set_loss(LINK, 10)
    lf.set_blackhole(LINK, True)
    lf.clear_loss(LINK)
    assert lf.active == {LINK: FaultState(blackhole=True)}
    assert [(op, link, v) for _, op, link, v in lf.journal] == [
        ("loss", LINK, 10.0), ("blackhole", LINK, True), ("clear_loss", LINK, None)]
    assert [node for node, _ in lf.calls] == ["a0_0", "c0_0"] * 3
    lf.set_blackhole(LINK, False)
    assert lf.active == {}
    assert lf.calls[-1][1] == [("add", "table"), ("delete", "table")]


def test_refusal_on_the_second_end_undoes_the_first():
    _, lf = fake_faults(fail_on=lambda node, cmds: node == "c0_0")
    with pytest.raises(FaultError, match="c0_0.*Operation not supported"):
        lf.set_loss(LINK, 5)
    assert lf.active == {}
    assert [node for node, _ in lf.calls] == ["a0_0", "c0_0", "a0_0"]
    assert lf.calls[-1][1] == [("add", "table"), ("delete", "table")]


def test_revert_all_deletes_tables_and_is_idempotent():
    _, lf = fake_faults()
    lf.set_loss(LINK, 10)
    lf.set_blackhole("h0_0_0-e0_0", True)
    lf.calls.clear()
    lf.revert_all()
    assert sorted(node for node, _ in lf.calls) == ["a0_0", "c0_0", "e0_0", "h0_0_0"]
    assert lf.active == {}
    lf.calls.clear()
    lf.revert_all()
    assert lf.calls == []


def test_revert_all_retries_what_failed_and_raises_once():
    failing = {"on": True}
    _, lf = fake_faults(fail_on=lambda node, cmds: failing["on"] and ("delete", "table") in ops(cmds))
    lf.set_loss(LINK, 10)
    with pytest.raises(FaultError, match="revert_all"):
        lf.revert_all()
    failing["on"] = False
    lf.calls.clear()
    lf.revert_all()
    assert len(lf.calls) == 2


def test_revert_all_after_stop_logs_instead_of_raising(caplog):
    fabric, lf = fake_faults()
    lf.set_loss(LINK, 10)
    fabric.fds.clear()   # what Fabric.stop() does
    fabric.__dict__["_fault_rate_bps"] = {LINK: 1_000_000}
    lf._rate_dirty.add(LINK)
    with caplog.at_level(logging.INFO, logger="testbed.faults"):
        lf.revert_all()
    assert "gone" in caplog.text
    assert lf.active == {} and fabric._fault_rate_bps == {}


def test_set_rate_rejects_non_positive_or_non_int():
    _, lf = fake_faults()
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError):
            lf.set_rate(LINK, bad)
