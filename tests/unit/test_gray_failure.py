"""One-way (gray) loss: spec, resolution against traced flows, steps and the injector's nftables plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.faults import Loss
from testbed.faults.nft import FaultState
from testbed.faults.targets import resolve_timeline
from testbed.faults.timeline import Timeline
from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, load_scenario
from tests.unit.test_faults import LINK, fake_faults
from tests.unit.test_targets import RC_3_4, RC_7_8, SCENARIO

FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
TOPO = Path(__file__).resolve().parents[2] / "topologies" / "fat-tree-k4.yaml"
def load(tmp_path, loss: str):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(topo=TOPO, action=f"loss: {loss}"))
    return load_scenario(path, features=FEATURES)


def test_a_named_link_loses_one_way_into_the_named_node(tmp_path):
    e = load(tmp_path, "{link: a0_0-c0_0, percent: 20%, direction: c0_0->a0_0}").timeline[0]
    assert (e.link, e.direction, e.loss_into, e.loss_pct) == ("a0_0-c0_0", "c0_0->a0_0", "a0_0", 20.0)
    both = load(tmp_path, "{link: a0_0-c0_0, percent: 20%, direction: both}").timeline[0]
    assert both.direction is None and both.loss_into is None


@pytest.mark.parametrize("loss, message", [
    ("{link: a0_0-c0_0, percent: 1%, direction: c0_0->e0_0}", "the ends of a0_0-c0_0 are a0_0 and c0_0"),
    ("{link: a0_0-c0_0, percent: 1%, direction: forward}", "needs a flow target"),
    ("{link: a0_0-c0_0, percent: 1%, direction: up}", "is not both, forward, reverse"),
])
def test_bad_directions_name_the_key_and_line(tmp_path, loss, message):
    with pytest.raises(SpecError) as err:
        load(tmp_path, loss)
    assert message in str(err.value) and "s.yaml:11" in str(err.value) and "loss.direction" in str(err.value)


def test_forward_and_reverse_resolve_to_the_flows_way_over_the_link(tmp_path):
    fwd = load(tmp_path, "{link: {crossed_by: 'rc 3->4', hop: core-aggregation}, percent: 20%, direction: forward}")
    rev = load(tmp_path, "{link: {crossed_by: 'rc 3->4', hop: core-aggregation}, percent: 20%, direction: reverse}")
    (f,), rec = resolve_timeline(fwd.timeline, [RC_3_4, RC_7_8], fwd.topology, seed=1)
    (r,), _ = resolve_timeline(rev.timeline, [RC_3_4, RC_7_8], rev.topology, seed=1)
    assert f.link == r.link == "a1_0-c0_0"            # rc 3->4 goes c0_0 -> a1_0 at this hop
    assert (f.direction, f.loss_into) == ("c0_0->a1_0", "a1_0")
    assert (r.direction, r.loss_into) == ("a1_0->c0_0", "c0_0")
    assert rec[0]["direction"] == "c0_0->a1_0"


def test_the_timeline_step_carries_the_receiving_node(tmp_path):
    e = load(tmp_path, "{link: a0_0-c0_0, percent: 20%, direction: c0_0->a0_0, duration: 1s}").timeline[0]
    tl = Timeline([e], [False, False, False])
    tl.start(0.0)
    tl.iteration_done(0, 0.0)                    # at_iteration: 1
    assert [s.change for s in tl.due(5.0)] == [Loss("a0_0-c0_0", 20.0, "a0_0"), Loss("a0_0-c0_0", None)]


def test_one_way_loss_adds_a_rule_on_the_receiving_end_only():
    fabric, lf = fake_faults()
    link = fabric.topo.link_by_name[LINK]
    lf.set_loss(LINK, 20, into=link.b.node)
    rules = {node: [op for op in ops if op == ("add", "rule")] for node, ops in lf.calls}
    assert rules == {link.a.node: [], link.b.node: [("add", "rule")]}
    assert lf.active == {LINK: FaultState(loss_pct=20.0, loss_into=link.b.node)}
    lf.calls.clear()
    lf.clear_loss(LINK)
    assert {node for node, ops in lf.calls if ops} == {link.b.node}   # the a end had nothing to remove
    with pytest.raises(ValueError, match="not an end"):
        lf.set_loss(LINK, 20, into="h0_0_0")


def test_fault_state_at_each_end():
    s = FaultState(loss_pct=5.0, blackhole=True, loss_into="x")
    assert s.at_end("x") == FaultState(5.0, True) and s.at_end("y") == FaultState(None, True)
    assert FaultState(5.0).at_end("y") == FaultState(5.0)
