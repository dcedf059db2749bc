"""``testbed validate``: ok lines, problems on stderr, exit 2, --format json, and no side effects."""

import json
import os
from pathlib import Path

import pytest

from testbed import cli
from testbed.commands import validate
from testbed.model.kernel import KernelFeatures

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True, bpf_egress=True)


@pytest.fixture(autouse=True)
def fake_kernel(monkeypatch):
    monkeypatch.setattr(validate, "features", lambda: FEATURES)


def test_shipped_topologies_scenarios_and_fixture_scenario_ok(capsys):
    files = sorted(str(p) for p in (ROOT / "topologies").glob("*.yaml")) + \
        sorted(str(p) for p in (ROOT / "scenarios").glob("*.yaml")) + [str(DATA / "scenario-ok.yaml")]
    assert cli.main(["validate", *files]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"{DATA / 'scenario-ok.yaml'}:28: timeline[4]: warning: rate on e0_0-a0_0 "
                                "overlaps timeline[3] (loss on the same link)"]
    assert "fat-tree-k4.yaml (topology fat-tree-k4: 36 nodes, 48 links, 16 hosts)" in out
    assert "fat-tree-k8: 208 nodes, 384 links, 128 hosts" in out
    assert ("scenario core-link-failure-test: 36 nodes, 48 links, 16 hosts (topology fat-tree-k4); "
            "transports mrc, rc, tcp; timeline 6 events") in out
    assert "scenario plane-spine-failure: 12 nodes, 16 links, 4 hosts (topology leaf-spine-2plane)" in out
    assert out.count("ok: ") == len(files)


def test_bad_file_exit_2_problems_on_stderr_and_nothing_else(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: fat-tree\nk: 3\nlink_classes: {host: {rate: 10 Mbps}, fabric: {rate: 1Gbit}}\n")
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    assert cli.main(["validate", "bad.yaml", str(ROOT / "topologies/tiny.yaml")]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "bad.yaml:2: k: fat-tree k must be even and >= 2, got 3",
        "bad.yaml:3: link_classes.host.rate: '10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)",
        "invalid: bad.yaml (2 problems)"]
    assert "ok: " in out and "tiny" in out and "bad.yaml" not in out
    assert sorted(os.listdir(tmp_path)) == before


def test_scenario_detected_by_content(tmp_path, capsys):
    scenario = tmp_path / "looks-like-a-topology.yaml"
    scenario.write_text("transports: [mrc]\n")
    assert cli.main(["validate", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert f"{scenario}:1: missing required key 'topology'" in err


def test_json_format(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: explicit\n")
    assert cli.main(["validate", "--format", "json", str(bad), str(ROOT / "topologies/fat-tree-k4.yaml")]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["kernel"]["qdiscs"] == ["htb", "pfifo", "tbf"]
    first, second = doc["files"]
    assert first["ok"] is False and {"file": str(bad), "line": 1, "key_path": "",
                                     "message": "missing required key 'link_classes'"} in first["problems"]
    assert second["ok"] is True and second["summary"]["links"] == 48


def test_missing_file(tmp_path, capsys):
    assert cli.main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: cannot read: No such file or directory" in capsys.readouterr().err


def test_input_is_printed_escaped_whatever_the_locale(tmp_path, capsys, monkeypatch):
    bad = tmp_path / ":x: [red]b[i].yaml"
    bad.write_text('kind: fat-tree\nk: 4\nlink_classes: {host: {rate: 1Mbit}, fabric: {rate: 1Mbit}}\n'
                   '"\\ud800:x:": 1\n')
    assert cli.main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:4: '\\ud800:x:': unknown key" in err
    assert "\u274c" not in err and f"invalid: {bad} (1 problem)" in err


def test_special_files_rejected_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert cli.main(["validate", str(fifo), "/dev/zero", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{fifo}: cannot read: a FIFO, not a regular file" in err
    assert "/dev/zero: cannot read: a character device, not a regular file" in err
    assert f"{tmp_path}: cannot read: a directory, not a regular file" in err


def test_timeline_warnings_printed_exit_0(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"""topology: {ROOT / 'topologies/fat-tree-k4.yaml'}
transports: [mrc]
seed: 1
timeout: 10s
workload: {{collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB, factor: 2,
           iterations: 2, warmup: 0}}
timeline:
  - at: 1s
    link_down: a0_0-c0_0
  - at: 2s
    blackhole: {{link: c0_0-a0_0, duration: 1s}}
  - at: 3s
    link_up: e0_0-a0_0
  - at: 9s
    flap: {{link: e0_1-a0_1, period: 1s, count: 4}}
""")
    assert cli.main(["validate", str(scenario)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{scenario}:10: timeline[1]: warning: blackhole on a0_0-c0_0 overlaps timeline[0] "
        "(link_down on the same link)",
        f"{scenario}:12: timeline[2]: warning: link_up e0_0-a0_0 with no link_down of that link before it",
        f"{scenario}:14: timeline[3]: warning: flap on e0_1-a0_1 lasts until 13s, past the timeout (10s)"]


def test_switch_features_need_the_bpf_egress_kernel_feature(tmp_path, capsys, monkeypatch):
    """A topology asking for ECN marking or trimming is refused, by key and line, where the
    kernel cannot run the switch program; thresholds must lie below the link's queue."""
    monkeypatch.setattr(validate, "features", lambda: KernelFeatures(frozenset({"htb", "pfifo"}),
                                                                       seg6_next_csid=True, nftables=True))
    path = ROOT / "topologies" / "fat-tree-k4-trim.yaml"
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:12: link_classes.host.ecn: ecn marking needs a tc BPF egress program" in err
    assert f"{path}:12: link_classes.host.trim: trimming needs a tc BPF egress program" in err
    monkeypatch.setattr(validate, "features", lambda: FEATURES)
    bad = tmp_path / "t.yaml"
    bad.write_text(path.read_text().replace("trim: {threshold: 6, header_queue: 64}", "trim: {threshold: 40}", 1)
                   .replace("ecn: {threshold: 2}", "ecn: {treshold: 2}", 1))
    assert cli.main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "link_classes.host.trim.threshold: 40 packets is not below the link's queue (32 packets)" in err
    assert "link_classes.host.ecn.treshold: unknown key" in err


SERVERS = """servers:
  - {name: s1, address: 192.0.2.10, underlay: fd00:1::10}
  - {name: s2, address: 192.0.2.11, underlay: fd00:1::11}
underlay:
  mtu: MTU
"""


def test_servers_place_each_fabric_and_report_the_cut(tmp_path, capsys):
    servers = tmp_path / "servers.yaml"
    servers.write_text(SERVERS.replace("MTU", "9100"))
    assert cli.main(["validate", str(ROOT / "topologies/fat-tree-k4.yaml"), "--servers", str(servers)]) == 0
    out, err = capsys.readouterr()
    assert "placed (pods) cutting 8 of 48 links: s1 18 nodes, 8 hosts, 8 tunnels; s2 18 nodes, 8 hosts" in out
    assert err == ""


def test_servers_whose_underlay_cannot_carry_the_mtu_are_a_problem_at_their_line(tmp_path, capsys):
    servers = tmp_path / "servers.yaml"
    servers.write_text(SERVERS.replace("MTU", "1500"))
    topo = str(ROOT / "topologies/fat-tree-k4.yaml")
    assert cli.main(["validate", topo, "--servers", str(servers)]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines()[0].startswith(f"{servers}:5: underlay.mtu: {topo}: class fabric: mtu 9000 exceeds "
                                          "the VXLAN inner MTU 1430")
    assert "raise underlay.mtu to 9070" in err and out == ""


def test_a_bad_servers_file_is_reported_and_nothing_is_placed(tmp_path, capsys):
    servers = tmp_path / "servers.yaml"
    servers.write_text(SERVERS.replace("MTU", "1500").replace("fd00:1::11", "fd00:1::10"))
    assert cli.main(["validate", str(ROOT / "topologies/fat-tree-k4.yaml"), "--servers", str(servers)]) == 2
    out, err = capsys.readouterr()
    assert f"{servers}:3: servers[1].underlay: underlay fd00:1::10 is also s1's" in err and out == ""
