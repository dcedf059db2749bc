"""Kernel requirements, probed (issue 46): the multipath hash sysctls the switches write.

Without ``net.ipv4.fib_multipath_hash_seed`` (Linux < 6.11) the fabric keeps hash policy 3 on the
5-tuple but writes no seed, and the run says what that changes (manifest, report); without
``net.ipv6.fib_multipath_hash_fields`` (Linux < 5.14) validation refuses, naming the sysctl and
the first kernel that has it. Likewise without seg6local End ``flavors next-csid`` (Linux < 6.1: every
switch's SRv6 uSID locator route) validation refuses every topology, and without the switch program's BPF
helpers (Linux < 5.3) it refuses ECN marking and trimming, naming what the release predates. No root,
nothing built: the kernel is faked."""

import ctypes
import errno
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


# -- seg6local End flavors next-csid (Linux 6.1) and the switch program's BPF needs (Linux 5.3) --

NO_CSID = replace(FEATURES, seg6_next_csid=False)                                  # e.g. Ubuntu 22.04's 5.15
NO_BPF = replace(FEATURES, bpf_egress=False, bpf_egress_error=kernel.explain_bpf_error(
    "SwitchLoadError: loading the egress program (verifier log on stderr): Invalid argument (errno 22)",
    "5.0.0-1-amd64"))
NO_CLANG = replace(FEATURES, bpf_egress=False,
                   bpf_egress_error="clang not found (make setup installs clang, llvm, libbpf-dev)")
CSID_LINE = ("the switches' SRv6 uSID locators need seg6local End with flavors next-csid, which this kernel lacks "
             "(Linux 6.1 or later has it)")


def test_without_next_csid_validation_refuses_every_topology_in_one_line_naming_the_kernel():
    assert FEATURES.refusals() == () and KernelFeatures().refusals() == ()   # built by hand: present
    assert NO_CSID.refusals() == (CSID_LINE,)
    with pytest.raises(SpecError) as info:
        load_topology(ROOT / "topologies/fat-tree-k4.yaml", features=NO_CSID)
    (problem,) = info.value.problems
    assert str(problem) == f"{ROOT / 'topologies/fat-tree-k4.yaml'}:{problem.line}: {CSID_LINE}"
    with pytest.raises(SpecError, match="Linux 6.1 or later"):
        load_scenario(ROOT / "scenarios/core-link-failure.yaml", features=NO_CSID)
    both = replace(NO_CSID, multipath_hash_fields=False)
    assert [line.split(" need")[0] for line in both.refusals()] == [
        "the switches' ECMP hash (policy 3, the 5-tuple)", "the switches' SRv6 uSID locators"]


def test_cli_validate_refuses_a_kernel_without_next_csid(monkeypatch, capsys):
    monkeypatch.setattr(validate, "features", lambda: NO_CSID)
    assert cli.main(["validate", str(ROOT / "scenarios/core-link-failure.yaml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].endswith(CSID_LINE), err
    assert err[1].startswith("invalid: ") and "(1 problem)" in err[1]


@pytest.mark.parametrize("release,refused", [("5.15.0-91-generic", True), ("6.0.12", True), ("6.1.0-18-amd64", False),
                                             ("6.8.0-45-generic", False), ("", False), ("weird", False)])
def test_unprobed_the_release_alone_refuses_a_kernel_older_than_6_1(release, refused):
    feats = KernelFeatures(probed=False, reason="not root", seg6_next_csid=False, release=release)
    lines = feats.refusals()
    assert bool(lines) is refused
    if refused:
        (line,) = lines
        assert f"this kernel (Linux {release}) lacks (Linux 6.1 or later has it)" in line and "next-csid" in line


def test_features_records_the_release_and_unprobed_reports_next_csid_absent(monkeypatch):
    monkeypatch.setattr(kernel.os, "geteuid", lambda: 1000)
    feats = kernel.features.__wrapped__()
    assert not feats.probed and not feats.seg6_next_csid and feats.release == kernel.os.uname().release
    assert feats.to_dict()["release"] == feats.release


class _Batch:
    """A netlink.Batch that records its requests and fails or not (no namespace, no socket)."""
    fail = False
    sent: list = []

    def __init__(self, where):
        self.kw = []

    def route(self, verb, **kw):
        self.kw.append((verb, kw))

    def send(self, fd=None):
        _Batch.sent.append(self.kw)
        if _Batch.fail:
            from testbed.fabric.netlink import NetlinkBatchError
            raise NetlinkBatchError("kernel probe", [("route add", 22)])


@pytest.mark.parametrize("netlink_ok,ip_rc,expected", [(True, None, True), (False, 0, True), (False, 2, False)])
def test_the_next_csid_probe_sends_the_fabrics_own_locator_route_then_tries_iproute2(monkeypatch, netlink_ok,
                                                                                      ip_rc, expected):
    from testbed.fabric import netlink
    monkeypatch.setattr(netlink, "Batch", _Batch)
    monkeypatch.setattr(_Batch, "fail", not netlink_ok)
    monkeypatch.setattr(_Batch, "sent", [])
    calls = []

    def run(argv, **kw):
        calls.append(argv)
        return type("P", (), {"returncode": ip_rc})()
    monkeypatch.setattr(kernel.subprocess, "run", run)
    monkeypatch.setattr(kernel.shutil, "which", lambda name: f"/usr/sbin/{name}")
    assert kernel._probe_seg6() is expected
    ((verb, kw),) = _Batch.sent[0]
    assert verb == "add" and kw["encap_type"] == routing.LWTUNNEL_ENCAP_SEG6_LOCAL and kw["oif"] == 1
    assert dict(kw["encap"]["attrs"])["SEG6_LOCAL_ACTION"] == "End"
    assert dict(dict(kw["encap"]["attrs"])["SEG6_LOCAL_FLAVORS"]["attrs"]) == {
        "SEG6_LOCAL_FLV_OPERATION": 1 << routing.SEG6_LOCAL_FLV_OP_NEXT_CSID,
        "SEG6_LOCAL_FLV_LCBLOCK_BITS": 32, "SEG6_LOCAL_FLV_LCNODE_FN_BITS": 16}
    assert (calls == []) is netlink_ok and all("next-csid" in argv for argv in calls)


def test_the_switch_programs_needs_list_every_helper_the_source_calls():
    import re

    from testbed.fabric.switch.build import SOURCE
    from testbed.model.kernel import FIRST_KERNEL, SWITCH_PROGRAM_NEEDS, release_version
    called = set(re.findall(r"\b(bpf_[a-z0-9_]+)\s*\(", SOURCE.read_text())) - {"bpf_htons", "bpf_htonl"}
    assert called == {name for name in SWITCH_PROGRAM_NEEDS if name.startswith("bpf_")}
    assert FIRST_KERNEL["bpf_egress"] == max(SWITCH_PROGRAM_NEEDS.values(), key=release_version) == "5.3"
    assert kernel.explain_bpf_error("SwitchLoadError: x", "6.1.0-18-amd64") == "SwitchLoadError: x"
    assert kernel.explain_bpf_error("SwitchBuildError: clang failed", "4.19.0") == "SwitchBuildError: clang failed"
    assert kernel.explain_bpf_error("SwitchLoadError: x", "5.2.0").startswith(
        "Linux 5.2.0 predates bounded loops (Linux 5.3); ")


def test_without_the_switch_program_trimming_and_ecn_are_refused_naming_the_helper_and_the_kernel():
    path = ROOT / "topologies/fat-tree-k4-trim.yaml"
    with pytest.raises(SpecError) as info:
        load_topology(path, features=NO_BPF)
    lines = [str(p) for p in info.value.problems]
    assert len(lines) == 4 and all("\n" not in line for line in lines), lines   # ecn and trim of both classes
    for line in lines:
        assert "needs a tc BPF egress program" in line and "Linux 5.3 or later has every helper it calls" in line
        assert "Linux 5.0.0-1-amd64 predates bpf_spin_lock (Linux 5.1)" in line and "bounded loops (Linux 5.3)" in line
    with pytest.raises(SpecError) as info:
        load_topology(path, features=NO_CLANG)
    assert all("cannot be built here: clang not found" in str(p) and "lacks" not in str(p)
               for p in info.value.problems)
    load_topology(ROOT / "topologies/fat-tree-k4.yaml", features=NO_BPF)   # no ecn or trim: no refusal


def test_without_epoll_pwait2_the_fallback_says_the_timers_fire_up_to_a_millisecond_late():
    no_wait = replace(FEATURES, epoll_pwait2=False)
    (line,) = no_wait.fallbacks()
    assert "\n" not in line and no_wait.refusals() == ()
    for words in ("epoll_pwait2", "Linux 5.11", "seccomp", "milliseconds", "1 ms late", "fidelity"):
        assert words in line, words
    assert no_wait.to_dict()["epoll_pwait2"] is False


@pytest.mark.parametrize("err, present", [(errno.EBADF, True), (errno.ENOSYS, False), (errno.EPERM, False)])
def test_epoll_pwait2_is_probed_by_its_errno_on_a_bad_fd(monkeypatch, err, present):
    calls = []

    class FakeLibc:
        def syscall(self, nr, *args):
            calls.append((nr, args[0]))
            ctypes.set_errno(err)
            return -1
    monkeypatch.setattr(kernel.ctypes, "CDLL", lambda *a, **k: FakeLibc())
    assert kernel.probe_epoll_pwait2() is present
    assert calls == [(441, -1)]


def test_epoll_pwait2_is_probed_without_root(monkeypatch):
    monkeypatch.setattr(kernel, "probe_epoll_pwait2", lambda: False)
    monkeypatch.setattr(kernel.os, "geteuid", lambda: 1000)
    feats = kernel.features.__wrapped__()
    assert not feats.probed and not feats.epoll_pwait2 and len(feats.fallbacks()) >= 1
