"""Kernel requirements, probed (issue 46): the multipath hash sysctls the switches write.

Without ``net.ipv4.fib_multipath_hash_seed`` (Linux < 6.11) the fabric keeps hash policy 3 on the
5-tuple but writes no seed, and the run says what that changes (manifest, report); without
``net.ipv6.fib_multipath_hash_fields`` (Linux < 5.14) validation refuses, naming the sysctl and
the first kernel that has it. No root, nothing built: the kernel is faked."""

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from testbed import cli, report
from testbed.commands import validate
from testbed.fabric import kernel, routing
from testbed.model.kernel import HASH_FIELDS_SYSCTL, HASH_SEED_SYSCTL, KernelFeatures
from testbed.spec import SpecError, load_scenario, load_topology

from .test_metrics import make_run

ROOT = Path(__file__).resolve().parents[2]
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True, bpf_egress=True)
NO_SEED = replace(FEATURES, multipath_hash_seed=False)
NO_FIELDS = replace(FEATURES, multipath_hash_fields=False, multipath_hash_seed=False)   # e.g. Linux 5.10


def test_with_every_sysctl_a_switch_writes_policy_3_the_5_tuple_and_its_own_seed():
    out = routing.switch_sysctls("a0_0", FEATURES)
    assert out["net.ipv6.fib_multipath_hash_policy"] == 3
    assert out[HASH_FIELDS_SYSCTL] == routing.IP6_MULTIPATH_HASH_5TUPLE == 0x37
    assert out[HASH_SEED_SYSCTL] == routing.hash_seed("a0_0") != routing.switch_sysctls("a0_1", FEATURES)[HASH_SEED_SYSCTL]
    assert FEATURES.fallbacks() == () and FEATURES.refusals() == ()


def test_without_the_hash_seed_a_switch_keeps_policy_3_and_the_5_tuple_but_writes_no_seed():
    out = routing.switch_sysctls("a0_0", NO_SEED)
    assert HASH_SEED_SYSCTL not in out
    assert out["net.ipv6.fib_multipath_hash_policy"] == 3 and out[HASH_FIELDS_SYSCTL] == 0x37
    assert out == {k: v for k, v in routing.switch_sysctls("a0_0", FEATURES).items() if k != HASH_SEED_SYSCTL}


def test_the_seed_fallback_says_in_one_line_what_it_changes_and_for_whom():
    (line,) = NO_SEED.fallbacks()
    assert "\n" not in line and NO_SEED.refusals() == ()
    for words in (HASH_SEED_SYSCTL, "Linux 6.11", "every router hashes", "polarisation", "rc and tcp",
                  "mrc's SRv6 paths"):
        assert words in line, words


def test_without_the_hash_fields_validation_refuses_in_one_line_naming_the_sysctl_and_the_kernel():
    with pytest.raises(SpecError) as info:
        load_topology(ROOT / "topologies/fat-tree-k4.yaml", features=NO_FIELDS)
    (problem,) = info.value.problems
    assert str(problem) == (f"{ROOT / 'topologies/fat-tree-k4.yaml'}:{problem.line}: the switches' ECMP hash "
                            f"(policy 3, the 5-tuple) needs {HASH_FIELDS_SYSCTL}, which this kernel lacks "
                            "(Linux 5.14 or later has it)")
    with pytest.raises(SpecError, match="Linux 5.14 or later"):   # a scenario's topology too
        load_scenario(ROOT / "scenarios/core-link-failure.yaml", features=NO_FIELDS)
    load_topology(ROOT / "topologies/fat-tree-k4.yaml", features=NO_SEED)   # the seed alone: no refusal


def test_cli_validate_refuses_a_kernel_without_the_hash_fields(monkeypatch, capsys):
    monkeypatch.setattr(validate, "features", lambda: NO_FIELDS)
    assert cli.main(["validate", str(ROOT / "scenarios/core-link-failure.yaml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and HASH_FIELDS_SYSCTL in err[0] and "Linux 5.14" in err[0], err
    assert err[1].startswith("invalid: ") and "(1 problem)" in err[1]


def test_the_sysctls_are_probed_from_proc_sys_also_without_root(tmp_path, monkeypatch):
    (tmp_path / "net/ipv6").mkdir(parents=True)
    (tmp_path / "net/ipv6/fib_multipath_hash_fields").write_text("0\n")   # Debian 12's 6.1: no seed
    assert kernel.probe_sysctls(tmp_path) == {"multipath_hash_fields": True, "multipath_hash_seed": False}
    assert kernel.probe_sysctls(tmp_path / "absent") == {"multipath_hash_fields": False, "multipath_hash_seed": False}
    monkeypatch.setattr(kernel, "SYSCTL_ROOT", tmp_path)
    monkeypatch.setattr(kernel.os, "geteuid", lambda: 1000)
    feats = kernel.features.__wrapped__()
    assert not feats.probed and feats.multipath_hash_fields and not feats.multipath_hash_seed
    assert feats.to_dict()["multipath_hash_seed"] is False


def test_the_run_records_the_fallback_and_the_report_prints_one_line(tmp_path, monkeypatch):
    from testbed.run import manifest as mf
    monkeypatch.setattr(mf, "features", lambda: NO_SEED)
    sc = load_scenario(ROOT / "scenarios/core-link-failure.yaml", features=NO_SEED)
    m = mf.base_manifest(sc)
    assert m["kernel_fallbacks"] == list(NO_SEED.fallbacks()) and m["kernel_features"]["multipath_hash_seed"] is False
    monkeypatch.setattr(mf, "features", lambda: FEATURES)
    assert mf.base_manifest(sc)["kernel_fallbacks"] == []

    run = make_run(tmp_path)
    doc = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**doc, "kernel_fallbacks": m["kernel_fallbacks"]}))
    buf = io.StringIO()
    summary = report.render(run, Console(file=buf, width=100, color_system=None), plots=False)
    assert summary["kernel_fallbacks"] == m["kernel_fallbacks"]
    text = buf.getvalue().replace("\n", " ")
    assert text.count("kernel fallback: ") == 1 and "polarisation" in text


def test_a_run_without_fallbacks_prints_none(tmp_path):
    buf = io.StringIO()
    summary = report.render(make_run(tmp_path), Console(file=buf, width=100, color_system=None), plots=False)
    assert summary["kernel_fallbacks"] == [] and "kernel fallback" not in buf.getvalue()
