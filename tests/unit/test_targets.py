"""Flow-aimed fault targets: selector parsing, spec errors, resolution on traced paths (pure)."""

from __future__ import annotations

import pytest

from testbed.fabric.paths import Flow, TracedFlow, static_path
from testbed.spec import SpecError, load_scenario
from testbed.spec.model import TimelineEvent
from testbed.spec.selectors import FlowSelector, FlowTarget, TargetError, parse_selector
from testbed.faults.targets import crossed_at, resolve, resolve_timeline
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams
from testbed.fabric.kernel import features

LP = LinkParams(10_000_000, 32)
TOPO = fat_tree(4, host_link=LP, fabric_link=LP)


def _flow(transport, s, d, nodes):
    """A traced data flow over ``nodes`` (host ... host) of the k4 fat-tree."""
    links = []
    for a, b in zip(nodes, nodes[1:]):
        links.append(next(l.name for l in TOPO.links_of[a] if l.peer_of(a).node == b))
    f = Flow(f"{transport} {s}->{d}", transport, s, d, "data", nodes[0], nodes[-1], links=tuple(links))
    return static_path(TOPO, f)


RC_3_4 = _flow("rc", 3, 4, ["h0_1_1", "e0_1", "a0_0", "c0_0", "a1_0", "e1_0", "h1_0_0"])
RC_7_8 = _flow("rc", 7, 8, ["h1_1_1", "e1_1", "a1_0", "c0_0", "a2_0", "e2_0", "h2_0_0"])
TCP_7_8 = _flow("tcp", 7, 8, ["h1_1_1", "e1_1", "a1_0", "c0_0", "a2_0", "e2_0", "h2_0_0"])
TCP_1_2 = _flow("tcp", 1, 2, ["h0_0_1", "e0_0", "a0_0", "e0_1", "h0_1_0"])


def test_parse_selector():
    assert parse_selector("rc", 16) == FlowSelector("rc")
    assert parse_selector("tcp 15->0", 16) == FlowSelector("tcp", 15, 0)
    for bad, why in (("udp", "not '<transport>'"), ("rc 3->5", "rank 3 sends to rank 4"),
                     ("rc 3-4", "<sender>-><receiver>"), ("rc 16->17", "ranks are 0..15")):
        with pytest.raises(ValueError, match=why):
            parse_selector(bad, 16)


def test_unrepaired_hop_is_the_core_to_aggregation_hop_on_a_fat_tree():
    ecmp = TOPO.ecmp_next_hops()
    assert crossed_at(TOPO, RC_3_4, "unrepaired", ecmp) == "a1_0-c0_0"
    assert crossed_at(TOPO, RC_3_4, "aggregation-core", ecmp) == "a0_0-c0_0"
    assert crossed_at(TOPO, TCP_1_2, "unrepaired", ecmp) == "e0_1-a0_0"   # intra-pod: agg -> edge
    assert crossed_at(TOPO, TCP_1_2, "core-aggregation", ecmp) is None


def test_resolve_needs_every_selector_and_names_the_crossing_flows():
    traced = [RC_3_4, RC_7_8, TCP_7_8, TCP_1_2]
    both = FlowTarget((FlowSelector("rc"), FlowSelector("tcp")))
    assert resolve(both, traced, TOPO, seed=1, index=0) == ("a2_0-c0_0", ["rc 7->8", "tcp 7->8"])
    one = FlowTarget((FlowSelector("rc", 3, 4),), "core-aggregation")
    assert resolve(one, traced, TOPO, seed=1, index=0) == ("a1_0-c0_0", ["rc 3->4"])
    with pytest.raises(TargetError, match="no link"):
        resolve(FlowTarget((FlowSelector("tcp", 1, 2),), "core-aggregation"), traced, TOPO, seed=1, index=0)


def test_several_candidates_are_a_seeded_choice():
    traced = [RC_3_4, RC_7_8]
    target = FlowTarget((FlowSelector("rc"),))
    picks = {resolve(target, traced, TOPO, seed=s, index=0)[0] for s in range(20)}
    assert picks == {"a1_0-c0_0", "a2_0-c0_0"}
    assert resolve(target, traced, TOPO, seed=3, index=0) == resolve(target, traced, TOPO, seed=3, index=0)


def test_a_link_up_with_its_link_downs_target_brings_back_the_same_link():
    """Two candidates: with the choice seeded by each event's own index, the up of some seeds
    named the other link (core-link-failure at 10 Mbit/s, seed 3: down e3_1-a3_0, up e2_1-a2_0), so the
    failed link stayed down for the rest of the run."""
    traced = [RC_3_4, RC_7_8]
    target = FlowTarget((FlowSelector("rc"),))
    other = FlowTarget((FlowSelector("rc"),), "aggregation-core")
    timeline = (TimelineEvent("link_down", None, at_iteration=2, target=target),
                TimelineEvent("link_down", None, at_iteration=2, target=other),
                TimelineEvent("link_up", None, at_iteration=4, target=target),
                TimelineEvent("link_up", None, at_iteration=4, target=other))
    downs = set()
    for seed in range(20):
        events, records = resolve_timeline(timeline, traced, TOPO, seed=seed)
        assert events[0].link == events[2].link and events[1].link == events[3].link
        assert [r["index"] for r in records] == [0, 1, 2, 3]
        assert events[0].link == resolve(target, traced, TOPO, seed=seed, index=0)[0]
        downs.add(events[0].link)
    assert downs == {"a1_0-c0_0", "a2_0-c0_0"}   # still a seeded choice between the two


def test_dropped_flows_do_not_count():
    dropped = TracedFlow(RC_3_4.flow, RC_3_4.hops[:3], "dropped", "c0_0")
    with pytest.raises(TargetError):
        resolve(FlowTarget((FlowSelector("rc"),)), [dropped], TOPO, seed=1, index=0)


SCENARIO = """
name: t
topology: {topo}
transports: [mrc, rc, tcp]
seed: 1
timeout: 60s
workload: {{collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB, factor: 2,
           iterations: 3, warmup: 1}}
timeline:
  - at_iteration: 1
    {action}
"""


def _scenario_file(tmp_path, action: str, more: str = ""):
    """SCENARIO on fat-tree-k4 with timeline[0] ``action`` (and ``more`` timeline lines), as tmp_path/s.yaml."""
    from pathlib import Path
    topo = Path(__file__).resolve().parents[2] / "topologies" / "fat-tree-k4.yaml"
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(topo=topo, action=action) + more)
    return path


@pytest.mark.parametrize("action, message", [
    ("link_down: {crossed_by: [rc, tcp]}", None),
    ("flap: {link: {crossed_by: 'rc 3->4', hop: core-aggregation}, period: 1s, count: 2}", None),
    ("link_down: {crossed_by: 'rc 0->1', hop: core-aggregation}",
     "timeline[0].link_down.crossed_by: the flow h0_0_0 -> h0_0_1 crosses no core-aggregation hop"),
    ("link_down: {crossed_by: [rc, 'udp 1->2']}", "timeline[0].link_down.crossed_by[1]: 'udp 1->2' is not"),
    ("link_down: {crossed_by: rc, hop: sideways}", "timeline[0].link_down.hop: unknown hop 'sideways'"),
    ("link_down: {hop: unrepaired}", "crossed_by"),
])
def test_spec_checks_flow_targets(tmp_path, action, message):
    path = _scenario_file(tmp_path, action)
    if message is None:
        s = load_scenario(path, features=features())
        assert s.timeline[0].link is None and s.timeline[0].target is not None
        assert "crossed_by" in s.to_dict()["timeline"][0]["target"]
        return
    with pytest.raises(SpecError) as err:
        load_scenario(path, features=features())
    assert message in str(err.value) and "s.yaml:11" in str(err.value)


def test_up_path_option_parses_a_five_tuple():
    from testbed.commands.up import parse_path
    f = parse_path("h0_0_0:h3_1_1:tcp:40000:5201", TOPO)
    assert (f.src_host, f.dst_host, f.tuple.proto, f.tuple.sport, f.tuple.dport) == \
        ("h0_0_0", "h3_1_1", "tcp", 40000, 5201)
    assert parse_path("h0_0_0:h3_1_1", TOPO).tuple.sport == 49152
    for bad, why in (("h0_0_0", "expected"), ("h0_0_0:e0_0", "not a host"), ("h0_0_0:h0_0_1:sctp", "udp or tcp"),
                     ("h0_0_0:h0_0_1:udp:x", "integers"), ("h0_0_0:h0_0_1:udp:0", "1..65535")):
        with pytest.raises(ValueError, match=why):
            parse_path(bad, TOPO)


def test_repairable_excludes_links_any_flow_crosses_at_an_unrepaired_hop():
    # rc 3->4 goes up over a0_0-c0_0 (repairable there); a tcp flow comes down over it into pod 0
    tcp_15_0 = _flow("tcp", 15, 0, ["h3_1_1", "e3_1", "a3_0", "c0_0", "a0_0", "e0_0", "h0_0_0"])
    up = FlowTarget((FlowSelector("rc", 3, 4),), "aggregation-core")
    assert resolve(up, [RC_3_4, tcp_15_0], TOPO, seed=1, index=0)[0] == "a0_0-c0_0"
    both = FlowTarget((FlowSelector("rc"), FlowSelector("tcp")), "aggregation-core", repairable=True)
    with pytest.raises(TargetError, match="at no unrepaired hop"):
        tcp_3_4 = _flow("tcp", 3, 4, ["h0_1_1", "e0_1", "a0_0", "c0_0", "a1_0", "e1_0", "h1_0_0"])
        resolve(both, [RC_3_4, tcp_15_0, tcp_3_4], TOPO, seed=1, index=0)
    ok = FlowTarget((FlowSelector("rc"),), "aggregation-core", repairable=True)
    assert resolve(ok, [RC_3_4, RC_7_8], TOPO, seed=1, index=0)[0] == "a0_0-c0_0"


A2_0 = ["a2_0-c0_0", "a2_0-c0_1", "e2_0-a2_0", "e2_1-a2_0"]


def test_a_switch_target_is_a_switch_each_selector_enters_not_one_link():
    # rc 7->8 enters a2_0 from c0_0, this tcp flow from c0_1: no link is shared, the switch is
    tcp_into_a2_0 = _flow("tcp", 3, 4, ["h0_1_1", "e0_1", "a0_0", "c0_1", "a2_0", "e2_1", "h2_1_0"])
    target = FlowTarget((FlowSelector("rc"), FlowSelector("tcp")), "core-aggregation")
    with pytest.raises(TargetError, match="no link is crossed at hop core-aggregation"):
        resolve(target, [RC_7_8, tcp_into_a2_0], TOPO, seed=1, index=0)
    from testbed.faults.targets import resolve_switch
    assert resolve_switch(target, [RC_7_8, tcp_into_a2_0], TOPO, seed=1, index=0) == \
        ("a2_0", ["rc 7->8", "tcp 3->4"])
    with pytest.raises(TargetError, match="no switch is entered at hop core-aggregation by a rc flow and a tcp"):
        resolve_switch(target, [RC_7_8, TCP_1_2], TOPO, seed=1, index=0)


def test_switch_actions_with_one_target_resolve_to_one_switch_and_all_its_links():
    target = FlowTarget((FlowSelector("rc"),), "core-aggregation")
    timeline = (TimelineEvent("switch_down", None, at_iteration=2, target=target),
                TimelineEvent("switch_up", None, at_iteration=4, target=target))
    picks = set()
    for seed in range(20):
        events, records = resolve_timeline(timeline, [RC_3_4, RC_7_8], TOPO, seed=seed)
        assert events[0].switch == events[1].switch and events[0].link is None
        assert events[0].links == tuple(sorted(l.name for l in TOPO.links_of[events[0].switch]))
        assert records[0]["switch"] == events[0].switch and records[0]["links"] == list(events[0].links)
        picks.add(events[0].switch)
    assert picks == {"a1_0", "a2_0"}


@pytest.mark.parametrize("action, message", [
    ("switch_down: a2_0", None),
    ("switch_down: {crossed_by: [rc, tcp], hop: core-aggregation}", None),
    ("switch_down: a2_9", "timeline[0].switch_down: unknown switch 'a2_9' in topology 'fat-tree-k4' "
                          "(did you mean 'a2_1' or 'a2_0'?)"),
    ("switch_down: h0_0_0", "timeline[0].switch_down: 'h0_0_0' is a host, not a switch"),
    ("switch_up: {crossed_by: rc, hop: edge-host}", "timeline[0].switch_up.hop: hop edge-host enters a host"),
    ("switch_down: {crossed_by: rc, repairable: true}",
     "timeline[0].switch_down.repairable: repairable is for a link, not a switch"),
    ("switch_down: {link: a2_0}", "timeline[0].switch_down"),
])
def test_spec_checks_switch_actions(tmp_path, action, message):
    path = _scenario_file(tmp_path, action)
    if message is None:
        e = load_scenario(path, features=features()).timeline[0]
        assert e.link is None
        if e.target is None:
            assert (e.switch, list(e.links)) == ("a2_0", A2_0)
        else:
            assert (e.switch, e.links) == (None, ())
        return
    with pytest.raises(SpecError) as err:
        load_scenario(path, features=features())
    assert message in str(err.value) and "s.yaml:11" in str(err.value)


def test_switch_actions_are_checked_for_suspicious_timelines(tmp_path):
    path = _scenario_file(tmp_path, "switch_down: a2_0", "  - {at_iteration: 1, after: 1s, link_down: c0_0-a2_0}\n"
                                                         "  - {at_iteration: 2, switch_up: a2_0}\n"
                                                         "  - {at_iteration: 2, switch_up: c0_1}\n")
    warnings = [w.message for w in load_scenario(path, features=features()).warnings]
    assert warnings == ["warning: link_down on a2_0-c0_0 overlaps timeline[0] (switch_down on link a2_0-c0_0)",
                        "warning: switch_up c0_1 with no switch_down of that switch before it"]
