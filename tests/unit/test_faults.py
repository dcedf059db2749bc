"""Link faults without a kernel: numgen thresholds, nftables transactions, the injector's state,
journal, typed steps and undo logic."""

from __future__ import annotations

import json
import logging

import pytest

from testbed import faults
from testbed.faults import (
    Blackhole,
    FaultError,
    FaultInjector,
    FaultState,
    LinkState,
    Loss,
    Rate,
    Reconverge,
    Step,
    loss_threshold,
    transition,
)
from testbed.fabric.netlink import NetlinkBatchError
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams

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


class FakeFabric:
    """What the injector uses of a FabricBackend: topo, is_local, run_nft, set_htb, set_link,
    reconverge; ``run(fd, cmds)`` stands in for nftables, ``fds`` for the namespaces."""

    def __init__(self):
        lp = LinkParams(20_000_000, 64)
        self.topo = fat_tree(4, host_link=lp, fabric_link=lp)
        self.have_netem = False
        self.fds = {name: 100 + i for i, name in enumerate(self.topo.nodes)}
        self.link_calls: list[tuple[str, bool]] = []
        self.refuse_links = False
        self.reconverged = 0

        self.htb_calls: list[tuple[str, str, int]] = []
        self.run = lambda fd, cmds: (0, "", "")

    def nsfd(self, node):
        return self.fds[node]   # KeyError once "stopped"

    def is_local(self, node):
        return True

    def run_nft(self, node, cmds):
        return self.run(self.nsfd(node), cmds)

    def set_htb(self, link, node, rate_bps):
        self.nsfd(node)
        self.htb_calls.append((link, node, rate_bps))

    def link_rate_bps(self, link):
        return link.params.rate_bps

    def set_link(self, name, up):
        node = self.topo.link_by_name[name].a.node
        self.fds[node]          # KeyError once "stopped", as Fabric.set_link
        if self.refuse_links:
            raise NetlinkBatchError(f"{name} {'up' if up else 'down'}", [("link set", 1)])
        self.link_calls.append((name, up))

    def reconverge(self):
        self.reconverged += 1


def fake_faults(fail_on=None, record=None):
    fabric = FakeFabric()
    lf = FaultInjector(fabric, record=record)
    lf.calls = []
    node_of_fd = {fd: n for n, fd in fabric.fds.items()}

    def run(fd, cmds):
        node = node_of_fd[fd]
        lf.calls.append((node, ops(cmds)))
        if fail_on and fail_on(node, cmds):
            return 1, "", "Error: Operation not supported"
        return 0, "", ""

    fabric.run = run
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
    assert sorted(node for node, cmds in lf.calls if cmds == [("add", "table"), ("delete", "table")]) == \
        ["a0_0", "c0_0", "e0_0", "h0_0_0"]
    assert len(lf.calls) == 8      # and the drop counters of each end, read first for the journal
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
    assert [cmds for _, cmds in lf.calls].count([("add", "table"), ("delete", "table")]) == 2


def test_revert_all_after_stop_logs_instead_of_raising(caplog):
    fabric, lf = fake_faults()
    lf.set_loss(LINK, 10)
    lf.set_link(LINK, False)
    lf._rates[LINK] = 1_000_000      # as set_rate leaves it (its netlink part needs a kernel)
    lf._rate_dirty.add(LINK)
    fabric.fds.clear()   # what Fabric.stop() does
    with caplog.at_level(logging.INFO, logger="testbed.faults"):
        lf.revert_all()
    assert "gone" in caplog.text and "fabric stopped" in caplog.text
    assert lf.active == {} and lf.rates == {} and lf.links_down == frozenset()


def test_set_rate_rejects_non_positive_or_non_int():
    _, lf = fake_faults()
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError):
            lf.set_rate(LINK, bad)


def test_rate_changes_go_through_the_fabric_and_revert():
    fabric, lf = fake_faults()
    link = fabric.topo.link_by_name[LINK]
    lf.set_rate(LINK, 5_000_000)
    assert lf.rate_bps(link) == 5_000_000 and lf.rates == {LINK: 5_000_000}
    assert {(l, r) for l, _, r in fabric.htb_calls} == {(LINK, 5_000_000)}
    assert {n for _, n, _ in fabric.htb_calls} == {link.a.node, link.b.node}
    lf.revert_all()
    assert lf.rates == {} and fabric.htb_calls[-1][2] == 20_000_000


def test_link_state_goes_through_the_fabric_and_is_owned_by_the_injector():
    fabric, lf = fake_faults()
    lf.set_link(LINK, False)
    lf.set_link("h0_0_0-e0_0", False)
    lf.set_link("h0_0_0-e0_0", True)
    assert fabric.link_calls == [(LINK, False), ("h0_0_0-e0_0", False), ("h0_0_0-e0_0", True)]
    assert lf.links_down == {LINK}
    with pytest.raises(KeyError, match="nope"):
        lf.set_link("nope", False)
    fabric.refuse_links = True
    with pytest.raises(FaultError, match="link set"):
        lf.set_link("a1_0-c0_0", False)
    assert lf.links_down == {LINK}


def test_typed_changes_name_their_kind_value_and_description():
    assert [(c.kind, c.link, c.value, c.describe()) for c in (
        LinkState(LINK, False), LinkState(LINK, True), Loss(LINK, 2.5), Loss(LINK, None),
        Rate(LINK, 5_000_000), Rate(LINK, None), Blackhole(LINK, True), Blackhole(LINK, False), Reconverge())] == [
        ("link", LINK, False, "down"), ("link", LINK, True, "up"), ("loss", LINK, 2.5, "loss 2.5%"),
        ("loss", LINK, None, "loss off"), ("rate", LINK, 5_000_000, "rate 5 Mbit/s"),
        ("rate", LINK, None, "rate restored"), ("blackhole", LINK, True, "blackhole on"),
        ("blackhole", LINK, False, "blackhole off"), ("reconverge", None, None, "routing reconverged")]
    step = Step(1.5, Rate(LINK, 7), "rate", "apply", 3)
    assert step.record() == {"t": 1.5, "kind": "rate", "link": LINK, "value": 7, "action": "rate",
                             "phase": "apply", "index": 3, "planned_s": None}


def test_steps_are_applied_and_journaled_with_drop_counters_on_revert():
    recs = []
    fabric, lf = fake_faults(record=recs.append)
    listing = {"nftables": [{"counter": {"name": "loss_dropped", "packets": 4}},
                            {"counter": {"name": "blackhole_dropped", "packets": 0}}]}
    run = fabric.run
    fabric.run = lambda fd, cmds: (0, listing, "") if "list" in cmds[0] else run(fd, cmds)
    lf.apply_step(Step(1.0, LinkState(LINK, False), "flap", "apply", 0))
    lf.apply_step(Step(1.1, Reconverge(), "reconverge", "apply", None))
    lf.apply_step(Step(2.0, Loss("h0_0_0-e0_0", 10.0), "loss", "apply", 1, planned_s=0.75))
    lf.apply_step(Step(3.0, Loss("h0_0_0-e0_0", None), "loss", "revert", 1))
    assert recs == [
        {"kind": "fault", "action": "flap", "link": LINK, "phase": "apply", "step": "link", "value": False,
         "index": 0},
        {"kind": "reconverge", "links_down": [LINK]},
        {"kind": "fault", "action": "loss", "link": "h0_0_0-e0_0", "phase": "apply", "step": "loss",
         "value": 10.0, "index": 1, "planned_s": 0.75},
        {"kind": "fault", "action": "loss", "link": "h0_0_0-e0_0", "phase": "revert", "step": "loss",
         "value": None, "index": 1, "loss_dropped": 8, "blackhole_dropped": 0}]   # both ends summed
    assert fabric.reconverged == 1 and lf.active == {}


def test_revert_all_brings_links_up_then_journals_the_rest():
    recs = []
    fabric, lf = fake_faults(record=recs.append)
    lf.apply(LinkState(LINK, False))
    lf.apply(Blackhole("h0_0_0-e0_0", True))
    lf.revert_all()
    assert fabric.link_calls[-1] == (LINK, True) and lf.links_down == frozenset() and lf.active == {}
    assert [r["step"] for r in recs] == ["link", "all"]
    assert recs[0] == {"kind": "fault", "action": "end", "link": LINK, "phase": "revert", "step": "link",
                       "value": True}
    assert set(recs[1]["nft_drops"]) == {"h0_0_0-e0_0"}
    recs.clear()
    lf.revert_all()                                   # idempotent: nothing but the closing record
    assert recs == [{"kind": "fault", "action": "end", "link": None, "phase": "revert", "step": "all",
                     "nft_drops": {}}]


def test_revert_all_keeps_a_link_it_could_not_bring_up_and_raises():
    fabric, lf = fake_faults()
    lf.set_link(LINK, False)
    fabric.refuse_links = True
    with pytest.raises(FaultError, match=f"link up {LINK}"):
        lf.revert_all()
    assert lf.links_down == {LINK}
    fabric.refuse_links = False
    lf.revert_all()
    assert lf.links_down == frozenset()
