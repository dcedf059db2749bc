"""Kernel probe: bounded as a whole (child wait included) and cached per boot, so a
``validate`` verdict does not depend on the machine's load. No namespace is created."""

import json
import os
import time

import pytest

from testbed.fabric import kernel

RESULT = {"qdiscs": ["htb", "netem"], "seg6_next_csid": True, "nftables": False}


def test_hanging_probe_child_is_killed_within_the_bound(monkeypatch):
    monkeypatch.setattr(kernel, "PROBE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(kernel, "_unshare_net", lambda: None)
    monkeypatch.setattr(kernel, "_probe_all", lambda: time.sleep(60))   # a probe that hangs: the point is the deadline
    start = time.monotonic()
    with pytest.raises(kernel.KernelProbeError, match="longer than 0.5s"):
        kernel._run_probe_child()
    assert time.monotonic() - start < 5


def test_probe_child_result_read_back(monkeypatch):
    monkeypatch.setattr(kernel, "_unshare_net", lambda: None)
    monkeypatch.setattr(kernel, "_probe_all", lambda: RESULT)
    assert kernel._run_probe_child() == RESULT


def test_cache_round_trip_and_distrust(tmp_path):
    path = tmp_path / "sub" / "kernel-features.json"
    kernel.write_cache(path, "boot1 6.1 v1", RESULT)
    assert kernel.read_cache(path, "boot1 6.1 v1") == RESULT
    assert kernel.read_cache(path, "boot2 6.1 v1") is None  # another boot
    os.chmod(path, 0o666)
    assert kernel.read_cache(path, "boot1 6.1 v1") is None  # others could have written it
    os.chmod(path, 0o644)
    path.write_text(json.dumps({"key": "boot1 6.1 v1", "result": {"qdiscs": "htb"}}))
    assert kernel.read_cache(path, "boot1 6.1 v1") is None  # damaged
    path.write_text("{")
    assert kernel.read_cache(path, "boot1 6.1 v1") is None
    assert kernel.read_cache(tmp_path, "boot1 6.1 v1") is None  # a directory


@pytest.mark.skipif(os.geteuid() != 0, reason="features() probes only as root")
def test_features_use_the_cache_without_probing(tmp_path, monkeypatch):
    path = tmp_path / "kernel-features.json"
    monkeypatch.setattr(kernel, "CACHE_PATH", path)
    monkeypatch.setattr(kernel, "cache_key", lambda: "boot1")
    kernel.write_cache(path, "boot1", RESULT)

    def no_probe():
        raise AssertionError("probed although cached")

    monkeypatch.setattr(kernel, "_run_probe_child", no_probe)
    feats = kernel.features.__wrapped__()
    assert feats.probed and feats.netem and feats.seg6_next_csid and not feats.nftables


@pytest.mark.skipif(os.geteuid() != 0, reason="features() probes only as root")
def test_features_probe_once_and_cache(tmp_path, monkeypatch):
    path = tmp_path / "kernel-features.json"
    monkeypatch.setattr(kernel, "CACHE_PATH", path)
    monkeypatch.setattr(kernel, "cache_key", lambda: "boot1")
    monkeypatch.setattr(kernel, "_run_probe_child", lambda: RESULT)
    assert kernel.features.__wrapped__().has_qdisc("htb")
    assert kernel.read_cache(path, "boot1") == RESULT


def test_cache_key_names_this_boot():
    key = kernel.cache_key()
    assert key is None or (os.uname().release in key and len(key.split()[0]) >= 32)
