"""Bounds that keep validation honest and cheap: the machine-size estimate, linear
fabric building, counted (not enumerated) EVs, scenario names, interface names in
bytes, and the YAML reader's own limits."""


import pytest
import yaml

from testbed import spec
from testbed.spec import topofile
from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, load_file
from testbed.model.addressing import ifname_problem
from testbed.model.generators import fat_tree, leaf_spine
from testbed.model.topology import LinkParams, footprint
from testbed.spec.yamlsafe import MAX_FILE_BYTES, expanded_size, flow_depth_line

FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo", "netem"}), seg6_next_csid=True, nftables=True)
CLASSES = "link_classes: {host: {rate: 1Mbit}, fabric: {rate: 1Mbit}}\n"
P = LinkParams(rate_bps=10**6)


def problems(tmp_path, text, name="t.yaml"):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_file(path, features=FEATURES)
    return [f"{p.line}: {p.key_path}: {p.message}" if p.key_path else f"{p.line}: {p.message}"
            for p in info.value.problems]


def test_fabric_too_large_for_this_machine_refused_from_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(topofile, "machine_memory_bytes", lambda: 24 * 2**30)
    assert problems(tmp_path, "kind: fat-tree\nk: 16\n" + CLASSES) == [
        "1: too large for this machine: 1344 namespaces (1024 hosts), 3072 links, ~56.2 GiB estimated "
        "(4 MiB per namespace, 1 MiB per link, 48 MiB per host agent) against 75% of 24.0 GiB"]
    problems(tmp_path, "kind: leaf-spine\nleaves: 4096\nspines: 4096\nhosts_per_leaf: 1\n" + CLASSES)
    monkeypatch.setattr(topofile, "machine_memory_bytes", lambda: 2**40)
    (tmp_path / "k16.yaml").write_text("kind: fat-tree\nk: 16\n" + CLASSES)
    assert len(load_file(tmp_path / "k16.yaml", features=FEATURES).hosts) == 1024


def test_footprint_of_the_shipped_k8_fits_this_machine():
    assert footprint(nodes=208, hosts=128, links=384) < 0.75 * 23 * 2**30


def test_building_is_linear_in_links():
    topo = fat_tree(40, host_link=P, fabric_link=P)  # 48,000 links: duplicate names are counted once, not per link
    assert len(topo.links) == 48000


@pytest.mark.parametrize("topo,src,dst", [
    (fat_tree(4, host_link=P, fabric_link=P), "h0_0_0", "h3_1_1"),
    (fat_tree(8, host_link=P, fabric_link=P), "h0_0_0", "h0_1_0"),
    (leaf_spine(leaves=2, spines=3, hosts_per_leaf=2, planes=2, host_link=P, fabric_link=P), "h0", "h3"),
])
def test_evs_counted_without_enumerating(topo, src, dst):
    evs = topo.evs(src, dst)
    assert topo.count_evs(src, dst) == len(evs)
    assert topo.evs(src, dst, limit=3) == evs[:3]


@pytest.mark.parametrize("name,ok", [("core-link-failure", True), ("run.v2_a", True), ("../x", False),
                                     ("a/b", False), ("a..b", False), (".hidden", False), ("x" * 65, False),
                                     ("caf\u00e9", False), ("a b", False)])
def test_scenario_names_from_a_safe_set(tmp_path, name, ok):
    text = (f"name: '{name}'\ntopology: /work/main/topologies/tiny.yaml\ntransports: [mrc]\nseed: 1\n"
            "timeout: 10s\nworkload: {collective: all_reduce, hosts: all, min_bytes: 4, max_bytes: 4, "
            "factor: 2, iterations: 1, warmup: 0}\n")
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("/work/main", str(spec.Path(__file__).resolve().parents[2])))
    if ok:
        assert load_file(path, features=FEATURES).name == name
    else:
        with pytest.raises(SpecError, match="names the run directory"):
            load_file(path, features=FEATURES)


def test_default_scenario_name_from_an_unsafe_file_name(tmp_path):
    root = spec.Path(__file__).resolve().parents[2]
    text = (f"topology: {root}/topologies/tiny.yaml\ntransports: [mrc]\nseed: 1\ntimeout: 10s\n"
            "workload: {collective: all_reduce, hosts: all, min_bytes: 4, max_bytes: 4, factor: 2, "
            "iterations: 1, warmup: 0}\n")
    assert any("add a 'name' key" in p for p in problems(tmp_path, text, name="my run.yaml"))


@pytest.mark.parametrize("ifname,why", [("h0-eth0", None), ("x" * 15, None), ("x" * 16, "16 bytes"),
                                        ("\u00e9" * 8, "16 bytes"), ("a/b", "not valid"), ("..", "not valid"),
                                        ("a b", "not valid")])
def test_interface_names_measured_in_bytes(ifname, why):
    got = ifname_problem(ifname)
    assert (got is None) if why is None else (why in got)


def test_reader_bounds(tmp_path):
    assert flow_depth_line("a: " + "[" * 65 + "]" * 65) == 1
    assert flow_depth_line("a: '" + "[" * 100 + "'\n# " + "{" * 100) is None
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * MAX_FILE_BYTES)
    assert problems(tmp_path / "..", big.read_text(), name=big.name)[0].startswith("0: cannot read: ")
    bomb = yaml.compose("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]")
    assert expanded_size(bomb) == 1 + 3 + 3 + 7 + 15  # root, keys, a, b = [a, a], c = [b, b]


def test_problems_from_a_wrong_topology_file_are_capped(tmp_path):
    (tmp_path / "notes.yaml").write_text("".join(f"line{i}: x\n" for i in range(100)))
    text = ("topology: notes.yaml\ntransports: [mrc]\nseed: 1\ntimeout: 10s\n"
            "workload: {collective: all_reduce, hosts: all, min_bytes: 4, max_bytes: 4, factor: 2, "
            "iterations: 1, warmup: 0}\n")
    got = problems(tmp_path, text, name="s.yaml")
    assert len(got) == spec.MAX_REFERRED_PROBLEMS + 1 and got[-1].endswith("... and 82 more problems in this file")
