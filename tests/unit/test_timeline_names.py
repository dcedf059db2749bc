"""Timeline names (no root): unknown hosts, switches and links list their candidates; ``plane_down``
/ ``plane_up`` resolve to a plane's links; a ``random`` draw can be named and reused."""

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from testbed.faults.timeline import Timeline, sweep_warmups
from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, load_scenario, load_topology
from testbed.spec.names import plane_links, rules

ROOT = Path(__file__).resolve().parents[2]
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
K4 = ROOT / "topologies" / "fat-tree-k4.yaml"
PLANES4 = ROOT / "topologies" / "leaf-spine-4plane-8-bdp64.yaml"
TINY = ROOT / "topologies" / "tiny.yaml"


def write(where: Path, topo: Path, timeline: str, hosts: str = "all") -> Path:
    path = where / "s.yaml"
    path.write_text(textwrap.dedent(f"""\
        topology: {topo}
        transports: [mrc]
        timeout: 60s
        workload: {{collective: all_reduce, hosts: {hosts}, min_bytes: 1MiB, max_bytes: 1MiB, iterations: 6}}
        timeline:
        """) + textwrap.dedent(timeline))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_scenario(path, features=FEATURES)
    return [str(p).removeprefix(f"{path}:") for p in info.value.problems]


# -- unknown names list their candidates ---------------------------------------------------

def test_switch_down_plane_0_names_the_switches_and_plane_down(tmp_path):
    path = write(tmp_path, PLANES4, "- {at: 1s, switch_down: plane 0}\n")
    assert problems(path) == [
        "6: timeline[0].switch_down: unknown switch 'plane 0' in topology 'leaf-spine-4plane-8-bdp64'; switches "
        "here are l<plane>_<i> (leaf), s<plane>_<j> (spine): plane 0-3, i 0-3, j 0-1; a whole plane is "
        "'plane_down: 0'"]


def test_a_small_topology_lists_every_name(tmp_path):
    path = write(tmp_path, TINY, """\
        - {at: 1s, switch_up: l2}
        - {at: 1s, link_down: h0-l1}
        - {at: 1s, switch_down: h0-l0}
        """)
    assert problems(path) == [
        "6: timeline[0].switch_up: unknown switch 'l2' in topology 'tiny'; the switches here: l0, l1, s0, s1",
        "7: timeline[1].link_down: unknown link 'h0-l1' in topology 'tiny' (did you mean 'l1-s0' or 'h3-l1' or "
        "'h2-l1'?); "
        "the links here: h0-l0, h1-l0, h2-l1, h3-l1, l0-s0, l0-s1, l1-s0, l1-s1",
        "8: timeline[2].switch_down: unknown switch 'h0-l0' in topology 'tiny'; the switches here: l0, l1, s0, s1; "
        "'h0-l0' is a link: 'link_down: h0-l0'"]


def test_a_large_topology_gives_the_naming_rule(tmp_path):
    path = write(tmp_path, K4, "- {at: 1s, link_down: e0_0-c0_0}\n", hosts="[h0_0_0, host7]")
    got = problems(path)
    assert got[0] == "4: workload.hosts[1]: unknown host 'host7'; hosts here are h<pod>_<edge>_<i> (pod 0-3, " \
                     "edge 0-1, i 0-1)"
    assert got[1].startswith("6: timeline[0].link_down: unknown link 'e0_0-c0_0' in topology 'fat-tree-k4' "
                             "(did you mean ")
    assert got[1].endswith("; links here are h<pod>_<edge>_<i>-e<pod>_<edge> or e<pod>_<i>-a<pod>_<j> or "
                           "a<pod>_<i>-c<i>_<j> (either end first)")


def test_an_explicit_topology_lists_the_first_names_and_the_count(tmp_path):
    doc = {"name": "chain", "kind": "explicit",
           "link_classes": {"host": {"rate": "1Gbit"}, "fabric": {"rate": "1Gbit"}},
           "nodes": {"sw0": {"role": "leaf"}, **{f"sw{i}": {"role": "spine"} for i in range(1, 14)},
                     "h0": {"role": "host"}, "h1": {"role": "host"}},
           "links": [{"endpoints": ["h0", "sw0"], "class": "host"}, {"endpoints": ["h1", "sw0"], "class": "host"}]
           + [{"endpoints": ["sw0", f"sw{i}"], "class": "fabric"} for i in range(1, 14)]}
    topo = tmp_path / "chain.yaml"
    topo.write_text(yaml.safe_dump(doc))
    assert rules(load_topology(topo, features=FEATURES), "switch") == []
    path = write(tmp_path, topo, "- {at: 1s, switch_down: sw99}\n")
    (line,) = problems(path)
    assert re.fullmatch(r"6: timeline\[0\]\.switch_down: unknown switch 'sw99' in topology 'chain' "
                        r"\(did you mean 'sw9'\?\); 14 switches here, e\.g\. (sw\d+, ){11}sw\d+", line), line


def test_the_rules_name_the_generators_nodes():
    """Every node and link of a generated topology fits the rule its error messages give."""
    for path in (K4, PLANES4):
        topo = load_topology(path, features=FEATURES)
        for what, names in (("host", [h.name for h in topo.hosts]), ("switch", [s.name for s in topo.switches]),
                            ("link", [lk.name for lk in topo.links])):
            shapes = re.findall(r"[a-z]<[^>]+>(?:[_-][a-z]?<[^>]+>)*", " ".join(rules(topo, what)))
            pattern = "|".join(re.sub(r"<[^>]+>", r"\\d+", shape) for shape in shapes)
            assert shapes and all(re.fullmatch(pattern, n) for n in names), (path.name, what, pattern)


# -- plane_down / plane_up -------------------------------------------------------------------

def test_plane_down_is_the_paper_scenarios_sixteen_links(tmp_path):
    paper = yaml.safe_load((ROOT / "scenarios/paper/plane-failure.yaml").read_text())
    spelled = sorted(e["link_down"] for e in paper["timeline"] if "link_down" in e)
    path = write(tmp_path, PLANES4, """\
        - {at_iteration: 2, after: 300ms, plane_down: 0}
        - {at_iteration: 4, after: 300ms, plane_up: 0}
        """)
    s = load_scenario(path, features=FEATURES)
    down, up = s.timeline
    assert (down.action, down.link, down.selector) == ("plane_down", None, "plane 0")
    assert list(down.links) == spelled and up.links == down.links and len(spelled) == 16
    assert s.warnings == ()
    assert plane_links(s.topology, 3) == tuple(sorted(n.replace("l0_", "l3_").replace("s0_", "s3_")
                                                      for n in spelled))


def test_plane_steps_are_link_down_and_link_up_of_each_link(tmp_path):
    path = write(tmp_path, PLANES4, """\
        - {at: 1s, plane_down: 1}
        - {at: 2s, plane_up: 1}
        """)
    s = load_scenario(path, features=FEATURES)
    tl = Timeline(s.timeline, sweep_warmups(1, 6, 1))
    tl.start(0.0)
    steps = tl.due(10.0)
    assert [(st.action, st.link, st.value, st.index) for st in steps] == \
        [("link_down", link, False, 0) for link in s.timeline[0].links] + \
        [("link_up", link, True, 1) for link in s.timeline[0].links]
    assert {st.planned_s for st in steps[:16]} == {1.0}


@pytest.mark.parametrize("value, message", [
    ("4", "6: timeline[0].plane_down: topology 'leaf-spine-4plane-8-bdp64' has no plane 4 (its planes: 0-3)"),
    ("plane 2", "6: timeline[0].plane_down: expected the plane's number (plane_down: 2), got 'plane 2'"),
    ("-1", "6: timeline[0].plane_down: must be >= 0, got -1"),
])
def test_a_plane_out_of_range_names_the_valid_ones(tmp_path, value, message):
    assert problems(write(tmp_path, PLANES4, f"- {{at: 1s, plane_down: {value}}}\n")) == [message]


def test_a_one_plane_topology_says_so(tmp_path):
    assert problems(write(tmp_path, K4, "- {at: 1s, plane_up: 1}\n")) == [
        "6: timeline[0].plane_up: topology 'fat-tree-k4' has no plane 1 (its one plane: 0)"]


def test_plane_warnings(tmp_path):
    path = write(tmp_path, PLANES4, """\
        - {at: 1s, plane_up: 0}
        - {at: 2s, plane_down: 2}
        - {at: 3s, link_up: h0-l2_0}
        - {at: 4s, link_up: h0-l1_0}
        """)
    warnings = [str(w).removeprefix(f"{path}:") for w in load_scenario(path, features=FEATURES).warnings]
    assert warnings == ["6: timeline[0]: warning: plane_up plane 0 with no plane_down of that plane before it",
                        "9: timeline[3]: warning: link_up h0-l1_0 with no link_down of that link before it"]



@pytest.mark.parametrize("transports, plane, warned", [("[mrc, rc, tcp]", 1, "rc, tcp use"), ("[mrc, rc-x16]", 3, "rc-x16 uses"),
                                                       ("[mrc, rc]", 0, None), ("[mrc]", 2, None)])
def test_a_plane_the_single_nic_transports_never_use_is_warned(tmp_path, transports, plane, warned):
    path = write(tmp_path, PLANES4, f"""\
        - {{at: 1s, plane_down: {plane}}}
        - {{at: 2s, plane_up: {plane}}}
        """)
    path.write_text(path.read_text().replace("transports: [mrc]", f"transports: {transports}"))
    warnings = [str(w).removeprefix(f"{path}:") for w in load_scenario(path, features=FEATURES).warnings]
    if warned is None:
        assert warnings == []
    else:
        assert warnings == [f"6: timeline[0].plane_down: warning: {warned} each host's first NIC only (plane 0): "
                            f"plane {plane} carries none of their traffic (fail plane 0 to compare them with mrc)"]

# -- named random draws -------------------------------------------------------------------

def test_a_named_draw_is_the_same_link_later(tmp_path):
    path = write(tmp_path, K4, """\
        - {at: 1s, link_down: random aggregation-core as flaky}
        - {at: 2s, link_up: flaky}
        - {at: 3s, loss: {link: flaky, percent: 1%, duration: 1s}}
        - {at: 5s, flap: {link: random edge-aggregation as other, period: 1s, count: 1}}
        - {at: 7s, blackhole: {link: other, duration: 1s}}
        """)
    s = load_scenario(path, features=FEATURES)
    down, up, loss, flap, hole = s.timeline
    assert down.selector == "random aggregation-core as flaky" and up.selector == "flaky"
    assert down.link == up.link == loss.link and flap.link == hole.link != down.link
    assert s.warnings == ()
    # the draw is the one the unnamed selector makes: naming it changes no seeded choice
    plain = tmp_path / "plain"
    plain.mkdir()
    assert load_scenario(write(plain, K4, "- {at: 1s, link_down: random aggregation-core}\n"),
                         features=FEATURES).timeline[0].link == down.link


def test_an_unnamed_redraw_warns_with_the_fix(tmp_path):
    path = write(tmp_path, K4, """\
        - {at: 1s, link_down: random aggregation-core}
        - {at: 2s, link_up: random aggregation-core}
        """)
    s = load_scenario(path, features=FEATURES)
    assert s.timeline[0].link != s.timeline[1].link
    (w,) = [str(w).removeprefix(f"{path}:") for w in s.warnings]
    assert w == (f"7: timeline[1]: warning: link_up {s.timeline[1].link} with no link_down of that link before it "
                 "('random aggregation-core' drew another link; each 'random' draws anew: name the first draw, "
                 "'link_down: random aggregation-core as <name>', and give 'link_up: <name>')")


def test_draw_names_are_checked(tmp_path):
    path = write(tmp_path, K4, """\
        - {at: 1s, link_up: flaky}
        - {at: 1s, link_down: random aggregation-core as flaky}
        - {at: 2s, link_down: random edge-aggregation as flaky}
        - {at: 3s, link_down: random edge-aggregation as a0_0}
        - {at: 3s, link_down: random edge-aggregation as x-y}
        - {at: 3s, link_down: random edge-aggregation called z}
        - {at: 4s, link_up: flakey}
        """)
    got = problems(path)
    assert got[0].startswith("6: timeline[0].link_up: unknown link 'flaky' in topology 'fat-tree-k4'; links here "
                             "are ") and got[0].endswith("; a random draw is named with 'random <role>-<role> as "
                                                         "<name>'")
    first = tmp_path / "first"
    first.mkdir()
    drawn = load_scenario(write(first, K4, "- {at: 1s, link_down: random aggregation-core}\n"),
                          features=FEATURES).timeline[0].link
    assert got[1:5] == [
        f"8: timeline[2].link_down: 'flaky' already names an earlier draw ({drawn}): give each draw its own name",
        "9: timeline[3].link_down: 'a0_0' is a node of topology 'fat-tree-k4': name the draw otherwise",
        "10: timeline[4].link_down: 'x-y' cannot name a draw: 1-32 letters, digits and '_', starting with a letter "
        "or '_', not 'all' or 'random'",
        "11: timeline[5].link_down: selector 'random edge-aggregation called z' is not 'random <role>-<role>' or "
        "'random <role>-<role> as <name>'"]
    assert got[5].startswith("12: timeline[6].link_up: unknown link 'flakey'") and \
        got[5].endswith("; the random draws named above: flaky")


# -- a link class's loss names the timeline's -------------------------------------------------

def test_a_link_class_loss_without_netem_names_the_timeline_loss(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("kind: fat-tree\nk: 2\nlink_classes: {host: {rate: 1Gbit, loss: 1%}, fabric: {rate: 1Gbit}}\n")
    with pytest.raises(SpecError) as info:
        load_topology(path, features=FEATURES)
    (p,) = info.value.problems
    assert "needs sch_netem" in p.message and "timeline 'loss' action" in p.message
    example = re.search(r"'(- \{at: 0s, loss: [^']+)'", p.message)[1]
    scenario = write(tmp_path, K4, example + "\n")
    assert load_scenario(scenario, features=FEATURES).timeline[0].loss_pct == 1.0
