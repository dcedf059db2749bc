"""Topology files: generator counts, addressing, explicit == generated, and a table of bad files."""

import dataclasses
import itertools
import textwrap
from pathlib import Path

import pytest
import yaml

from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, load_topology
from testbed.model.topology import Role

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "topologies").glob("*.yaml"))
#: The development machines' kernel: no sch_netem (docs/troubleshooting.md, "The kernel-feature probe").
NO_NETEM = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
NETEM = KernelFeatures(frozenset({"htb", "tbf", "pfifo", "netem"}), seg6_next_csid=True, nftables=True)
UNPROBED = KernelFeatures(probed=False, reason="not root")
#: A link class's loss without netem names the timeline's loss action, which needs none.
TIMELINE_LOSS = ("; a scenario's timeline 'loss' action drops packets without netem (with nftables): e.g. "
                 "'- {at: 0s, loss: {link: all, percent: 1%}}' (every link; 'link: all host-edge' for one role "
                 "pair's links)")


def write(tmp_path: Path, text: str, name: str = "t.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems(path: Path, features: KernelFeatures = NO_NETEM) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_topology(path, features=features)
    return [str(p) for p in info.value.problems]


def roles(topo):
    counts = {}
    for node in topo.nodes.values():
        counts[node.role] = counts.get(node.role, 0) + 1
    return counts


def test_shipped_files_all_validate():
    assert {p.name for p in SHIPPED} >= {"fat-tree-k4.yaml", "fat-tree-k8.yaml", "leaf-spine-2plane.yaml",
                                         "tiny.yaml"}
    for path in SHIPPED:   # this machine's kernel: no netem, the switch program runs
        topo = load_topology(path, features=dataclasses.replace(NO_NETEM, bpf_egress=True))
        if path.name == "fat-tree-k4-trim.yaml":
            params = {link.params for link in topo.links}
            assert {(p.ecn_threshold_pkts, p.trim_threshold_pkts, p.trim_header_queue_pkts) for p in params} == \
                {(2, 6, 64)}


def test_fat_tree_k4_counts_and_rates():
    topo = load_topology(ROOT / "topologies/fat-tree-k4.yaml", features=NO_NETEM)
    assert roles(topo) == {Role.CORE: 4, Role.AGGREGATION: 8, Role.EDGE: 8, Role.HOST: 16}
    assert len(topo.links) == 48
    assert {(l.params.rate_bps, l.params.queue_pkts, l.params.mtu) for l in topo.links} == {(10_000_000, 32, 9000)}
    assert topo.name == "fat-tree-k4" and topo.kind == "fat-tree"


def test_fat_tree_k8_counts_and_evs():
    topo = load_topology(ROOT / "topologies/fat-tree-k8.yaml", features=NO_NETEM)
    assert len(topo.nodes) == 208 and len(topo.links) == 384
    assert {l.params.rate_bps for l in topo.links} == {2_000_000}
    assert len(topo.evs("h0_0_0", "h5_1_2")) == (8 // 2) ** 2


def test_fat_tree_k4_addresses_and_usids_unique():
    topo = load_topology(ROOT / "topologies/fat-tree-k4.yaml", features=NO_NETEM)
    assert len(topo.evs("h0_0_0", "h3_1_1")) == (4 // 2) ** 2
    usids = [n.usid for n in topo.switches] + [nic.usid for nics in topo.nics.values() for nic in nics]
    assert len(usids) == len(set(usids)) == 20 + 16
    addrs = [nic.address for nics in topo.nics.values() for nic in nics]
    assert len(addrs) == len(set(addrs))
    evs = topo.evs("h0_0_0", "h1_0_0")
    assert len({ev.address for ev in evs}) == len(evs) == 4


def test_leaf_spine_two_planes():
    topo = load_topology(ROOT / "topologies/leaf-spine-2plane.yaml", features=NO_NETEM)
    assert topo.planes == [0, 1]
    assert all(len(nics) == 2 for nics in topo.nics.values())
    assert roles(topo) == {Role.HOST: 4, Role.LEAF: 4, Role.SPINE: 4}


def test_tiny_explicit():
    topo = load_topology(ROOT / "topologies/tiny.yaml", features=NO_NETEM)
    assert roles(topo) == {Role.HOST: 4, Role.LEAF: 2, Role.SPINE: 2}
    assert topo.kind == "explicit" and {l.params.rate_bps for l in topo.links} == {100_000_000}
    assert topo.link_by_name["l0-s0"].a.ifname == "l0-eth2"
    assert topo.link_by_name["l0-s1"].a.ifname == "l0-eth3"
    assert len(topo.evs("h0", "h2")) == 2


@pytest.mark.parametrize("source", ["fat-tree-k4.yaml", "leaf-spine-2plane.yaml"])
def test_explicit_form_resolves_to_the_same_graph(tmp_path, source):
    generated = load_topology(ROOT / "topologies" / source, features=NO_NETEM)
    digest = generated.digest_fields
    host, fabric = (next(l.params for l in generated.links if l.cls == c) for c in ("host", "fabric"))
    doc = {
        "name": generated.name, "kind": "explicit",
        "link_classes": {c: {"rate": f"{p.rate_bps}bit", "queue": p.queue_pkts, "mtu": p.mtu}
                         for c, p in (("host", host), ("fabric", fabric))},
        "nodes": {name: {k: v for k, v in n.items() if v is not None and not (n["role"] == "host" and k == "plane")}
                  for name, n in digest["nodes"].items()},
        "links": [{"endpoints": l["endpoints"], "class": l["class"]} for l in digest["links"]],
    }
    path = tmp_path / "explicit.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    explicit = load_topology(path, features=NO_NETEM)
    assert explicit.digest_fields == digest
    assert {n: node.usid for n, node in explicit.nodes.items()} == {n: node.usid for n, node in generated.nodes.items()}
    hosts = [h.name for h in generated.hosts]
    for src, dst in itertools.islice(itertools.permutations(hosts, 2), 20):
        assert [e.address for e in explicit.evs(src, dst)] == [e.address for e in generated.evs(src, dst)]


def test_delay_needs_no_netem_and_loss_does(tmp_path):
    """A link's delay is held by the agents' endpoints (agents.net.udp), not by a qdisc."""
    path = write(tmp_path, """
        kind: fat-tree
        k: 2
        link_classes:
          host: {rate: 1Gbit, delay: 5ms}
          fabric: {rate: 1Gbit, delay: 250us}
        """)
    topo = load_topology(path, features=NO_NETEM)
    assert {l.cls: l.params.delay_s for l in topo.links} == {"host": 5e-3, "fabric": 250e-6}
    load_topology(path, features=UNPROBED)


def test_a_link_delay_above_a_second_is_refused(tmp_path):
    path = write(tmp_path, """
        kind: fat-tree
        k: 2
        link_classes: {host: {rate: 1Gbit, delay: 2s}, fabric: {rate: 1Gbit}}
        """)
    assert problems(path) == [f"{path}:3: link_classes.host.delay: 2s is above a link's largest delay "
                              "(1s: the agents' endpoints hold a path's sum of them)"]


def test_delay_and_loss_allowed_with_netem(tmp_path):
    path = write(tmp_path, """
        kind: fat-tree
        k: 2
        link_classes:
          host: {rate: 1Gbit, queue: 10, delay: 50us, loss: 0.1%}
          fabric: {rate: 1Gbit}
        """)
    topo = load_topology(path, features=NETEM)
    host = next(l for l in topo.links if l.cls == "host")
    assert (host.params.delay_s, host.params.loss_pct, host.params.queue_pkts) == (50e-6, 0.1, 10)
    assert topo.name == "t"


EXPLICIT_HEAD = """
    kind: explicit
    link_classes:
      host: {rate: 10Mbit, queue: 64}
      fabric: {rate: 10Mbit, queue: 64}
    nodes:
      h0: {role: host}
      h1: {role: host}
      l0: {role: leaf}
    links:
"""

BAD = [
    ("unknown key", """
        kind: fat-tree
        k: 4
        colour: blue
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        """, ["3: colour: unknown key (allowed: kind, link_classes, k, name)"]),
    ("bad rate", """
        kind: fat-tree
        k: 4
        link_classes:
          host: {rate: 1Gbit}
          fabric: {rate: 10 Mbps}
        """, ["5: link_classes.fabric.rate: '10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)"]),
    ("odd k", """
        kind: fat-tree
        k: 5
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        """, ["2: k: fat-tree k must be even and >= 2, got 5"]),
    ("small k", """
        kind: fat-tree
        k: 0
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        """, ["2: k: fat-tree k must be even and >= 2, got 0"]),
    ("k wrong type", """
        kind: fat-tree
        k: four
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        """, ["2: k: expected an integer, got 'four'"]),
    ("missing k and class", """
        kind: fat-tree
        link_classes: {host: {rate: 1Gbit}}
        """, ["1: missing required key 'k'", "2: link_classes: missing required link class 'fabric'"]),
    ("unknown kind", """
        kind: torus
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        """, ["1: kind: 'torus' is not one of fat-tree, leaf-spine, explicit"]),
    ("queue type", """
        kind: leaf-spine
        leaves: 2
        spines: 0
        hosts_per_leaf: 1
        link_classes: {host: {rate: 1Gbit, queue: lots}, fabric: {rate: 1Gbit, mtu: 1000, jitter: 1ms}}
        """, ["3: spines: must be >= 1, got 0", "5: link_classes.host.queue: expected an integer, got 'lots'",
              "5: link_classes.fabric.jitter: unknown key (allowed: rate, queue, delay, loss, mtu, ecn, trim, control_priority)",
              "5: link_classes.fabric.mtu: must be >= 1280, got 1000"]),
    ("loss without netem", """
        kind: fat-tree
        k: 2
        link_classes:
          host: {rate: 1Gbit, delay: 5ms}
          fabric: {rate: 1Gbit, loss: 1%}
        """, ["5: link_classes.fabric.loss: loss needs sch_netem, which this kernel lacks" + TIMELINE_LOSS]),
    ("too many hosts", """
        kind: fat-tree
        k: 64
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        """, ["1: 65536 host NICs exceed the uSID plan's 32768"]),
    ("not a mapping", "- a\n- b\n", ["1: expected a mapping (a topology or scenario document), got a list"]),
    ("yaml syntax", "kind: [fat-tree\n", ["2: not valid YAML: expected ',' or ']', but got '<stream end>'"]),
    ("empty", "", ["1: file is empty; expected a mapping"]),
    ("dangling endpoint", EXPLICIT_HEAD + """
          - endpoints: [h0, l0]
          - endpoints: [h1, l9]
        """, ["12: links[1]: endpoint 'l9' is not a declared node"]),
    ("duplicate endpoint", EXPLICIT_HEAD + """
          - endpoints: ["h0:h0-eth0", l0]
          - endpoints: ["h0:h0-eth0", l0]
          - endpoints: [h1, l0]
        """, ["12: links[1]: endpoint h0:h0-eth0 is already used by links[0]"]),
    ("self loop and bad endpoint form", EXPLICIT_HEAD + """
          - endpoints: [l0, l0]
          - endpoints: ["h0:", l0, h1]
        """, ["12: links[1].endpoints: expected 2 endpoints, got 3"]),
    ("duplicate node", """
        kind: explicit
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        nodes:
          h0: {role: host}
          h0: {role: leaf}
          l0: {role: leaf}
        links:
          - endpoints: [h0, l0]
        """, ["5: nodes.h0: duplicate node 'h0' (first at line 4)"]),
    ("long and bad names", """
        kind: explicit
        link_classes: {host: {rate: 1Gbit}, fabric: {rate: 1Gbit}}
        nodes:
          verylongswitch1: {role: spine}
          bad-name: {role: leaf}
          h0: {role: host, plane: 1}
          l0: {role: switch}
        links: []
        """, ["4: nodes.verylongswitch1: node name 'verylongswitch1' is too long: interface "
              "verylongswitch1-eth0 would exceed 15 characters (Linux IFNAMSIZ)",
              "5: nodes.bad-name: node name 'bad-name' must start with a letter and hold only letters, "
              "digits and '_'",
              "6: nodes.h0.plane: hosts have no plane; a host gets one NIC per plane from its links",
              "7: nodes.l0.role: 'switch' is not one of host, edge, aggregation, core, leaf, spine"]),
    ("long interface name", EXPLICIT_HEAD + """
          - endpoints: ["h0:h0-a-very-long-if", l0]
        """, ["11: links[0].endpoints[0]: interface name 'h0-a-very-long-if' is 17 bytes, "
              "longer than 15 (Linux IFNAMSIZ counts bytes)"]),
    ("link overrides", EXPLICIT_HEAD + """
          - endpoints: [h0, l0]
            class: spine
          - endpoints: [h1, l0]
            rate: 10 Mbps
            queue: 0
        """, ["12: links[0].class: 'spine' is not one of host, fabric",
              "14: links[1].rate: '10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)",
              "15: links[1].queue: must be >= 1, got 0"]),
]


@pytest.mark.parametrize("text,expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_topology_files(tmp_path, text, expected):
    path = write(tmp_path, text)
    assert problems(path) == [f"{path}:{e}" for e in expected]


def test_all_errors_in_one_file_reported_together(tmp_path):
    path = write(tmp_path, EXPLICIT_HEAD.replace("h1: {role: host}", "h1: {role: hots}") + """
          - endpoints: [h0, l0]
            rate: fast
          - {endpoints: [h1, l0], loss: 2%}
    stray: 1
    """)
    found = problems(path)
    assert found == [f"{path}:7: nodes.h1.role: 'hots' is not one of host, edge, aggregation, core, leaf, spine",
                     f"{path}:12: links[0].rate: 'fast' is not a rate (examples: 10Mbit, 1Gbit)",
                     f"{path}:13: links[1].loss: loss needs sch_netem, which this kernel lacks" + TIMELINE_LOSS,
                     f"{path}:14: stray: unknown key (allowed: kind, link_classes, nodes, links, name)"]


def test_unprobed_kernel_treats_netem_as_absent(tmp_path):
    path = write(tmp_path, """
        kind: fat-tree
        k: 2
        link_classes: {host: {rate: 1Gbit, loss: 1%}, fabric: {rate: 1Gbit}}
        """)
    assert problems(path, UNPROBED) == [
        f"{path}:3: link_classes.host.loss: loss needs sch_netem, which could not be detected (not root); "
        "assumed absent" + TIMELINE_LOSS]
    load_topology(ROOT / "topologies/fat-tree-k4.yaml", features=UNPROBED)


def test_spec_error_str_is_one_problem_per_line(tmp_path):
    path = write(tmp_path, "kind: fat-tree\nk: 3\nlink_classes: {host: {rate: 1}, fabric: {rate: 1Gbit}}\n")
    with pytest.raises(SpecError) as info:
        load_topology(path, features=NO_NETEM)
    assert str(info.value).splitlines() == [str(p) for p in info.value.problems]
    assert len(info.value.problems) == 2


def test_kernel_features_not_root_is_unprobed(monkeypatch):
    from testbed.fabric import kernel
    kernel.features.cache_clear()
    monkeypatch.setattr(kernel.os, "geteuid", lambda: 1000)
    try:
        feats = kernel.features()
        assert (feats.probed, feats.netem, feats.qdiscs, feats.reason) == (False, False, frozenset(), "not root")
        assert kernel.features() is feats  # cached per process
    finally:
        kernel.features.cache_clear()
