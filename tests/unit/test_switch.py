"""testbed.fabric.switch, the pure parts: config validation, sizes per opcode, the config map
layout, the virtual-queue model, the header class in the tc plan. No root, no BPF."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.mrc.packet import Opcode
from testbed.fabric import shaping
from testbed.fabric.netlink import Batch
from testbed.fabric.switch import build
from testbed.fabric.switch.config import CONFIG_STRUCT, HTB_HEADER_CLASSID, MAX_TRIMMED_FRAME_BYTES, NS_X8, U64_MAX, EgressConfig, SwitchConfigError, header_bytes, trimmed_frame_bytes
from testbed.fabric.switch.model import Kind, Verdict, VirtualQueues, counters
from testbed.model.topology import LinkParams


@pytest.mark.parametrize("opcode,size", [(Opcode.WRITE_FIRST, 40), (Opcode.WRITE_MIDDLE, 40),
                                         (Opcode.WRITE_LAST, 40), (Opcode.WRITE_ONLY, 40),
                                         (Opcode.WRITE_LAST_WITH_IMM, 44), (Opcode.WRITE_ONLY_WITH_IMM, 44)])
def test_header_bytes_per_opcode(opcode, size):
    assert header_bytes(opcode) == size
    assert trimmed_frame_bytes(opcode) == 14 + 40 + 8 + size


def test_header_bytes_rejects_other_opcodes():
    with pytest.raises(SwitchConfigError, match="opcode 5"):
        header_bytes(5)


def test_largest_trimmed_frame_is_one_header_queue_slot():
    assert MAX_TRIMMED_FRAME_BYTES == max(trimmed_frame_bytes(o) for o in Opcode) == 106


@pytest.mark.parametrize("kwargs,match", [
    ({"rate_bps": 0}, "rate_bps"), ({"rate_bps": True}, "rate_bps"), ({"rate_bps": 1.5e6}, "rate_bps"),
    ({"mtu": 1279}, "mtu"), ({"mtu": 65536}, "mtu"),
    ({"ecn_threshold_pkts": 0}, "ecn_threshold_pkts"), ({"trim_threshold_pkts": -1}, "trim_threshold_pkts"),
    ({"header_queue_pkts": 0}, "header_queue_pkts"), ({"header_queue_pkts": None}, "header_queue_pkts"),
    ({"ecn_threshold_pkts": None, "trim_threshold_pkts": None}, "neither"),
    ({"header_priority": -1}, "header_priority"), ({"header_priority": 2**32}, "header_priority"),
    ({"queue_pkts": 8}, "trim_threshold_pkts 8 is not below queue_pkts 8"),
    ({"queue_pkts": 0}, "queue_pkts"),
])
def test_config_validation_names_the_field(kwargs, match):
    base = {"rate_bps": 5_000_000, "mtu": 1500, "ecn_threshold_pkts": 4, "trim_threshold_pkts": 8}
    with pytest.raises(SwitchConfigError, match=match):
        EgressConfig(**{**base, **kwargs})


def test_config_bytes_and_map_value():
    c = EgressConfig(5_000_000, 9000, ecn_threshold_pkts=4, trim_threshold_pkts=None, header_queue_pkts=10,
                     queue_pkts=20)
    assert (c.frame_bytes, c.ecn_bytes, c.trim_bytes) == (9014, 4 * 9014, 0)
    assert c.header_queue_bytes == 10 * 106 and c.queue_bytes == 20 * 9014
    assert c.header_priority == HTB_HEADER_CLASSID == 0x10020
    assert c.idle_ns * c.rate_bps + NS_X8 <= U64_MAX < (c.idle_ns + 1) * c.rate_bps + NS_X8
    assert CONFIG_STRUCT.size == 56
    assert CONFIG_STRUCT.unpack(c.pack()) == (5_000_000, 4 * 9014, 0, 1060, 20 * 9014, c.idle_ns, 0x10020, 0)
    assert EgressConfig(1, 1500, 1, None).queue_bytes == U64_MAX


def test_last_hop_port_is_the_last_word_of_the_map_value():
    c = EgressConfig(5_000_000, 9000, ecn_threshold_pkts=None, trim_threshold_pkts=4, last_hop=True)
    assert CONFIG_STRUCT.unpack(c.pack())[-1] == 1
    with pytest.raises(SwitchConfigError, match="last_hop"):
        EgressConfig(5_000_000, 9000, None, 4, last_hop=1)


def test_thresholds_count_real_backlog_above_the_htb_bucket():
    c = EgressConfig(5_000_000, 9000, ecn_threshold_pkts=2, trim_threshold_pkts=6, queue_pkts=32,
                     burst_bytes=18_028)
    assert (c.ecn_bytes, c.trim_bytes, c.queue_bytes) == (2 * 9014 + 18_028, 6 * 9014 + 18_028,
                                                          32 * 9014 + 18_028)
    assert CONFIG_STRUCT.unpack(c.pack())[1:3] == (c.ecn_bytes, c.trim_bytes)
    v = _burst(c, 9)
    assert v[:4] == [Verdict.PASS] * 4 and v[4:8] == [Verdict.MARK] * 4 and v[8] is Verdict.TRIM
    with pytest.raises(SwitchConfigError, match="burst_bytes"):
        EgressConfig(5_000_000, 9000, 2, None, burst_bytes=-1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4_000_000), st.integers(64, 9014)), min_size=1, max_size=60))
def test_virtual_queue_minus_bucket_is_the_token_bucket_backlog(arrivals):
    """Fluid check of the rule above: a shaper of rate R with a bucket of B bytes (full when
    idle, as HTB's) holds max(0, V - B) bytes, V being the rate-R queue of the same arrivals."""
    rate, bucket = 8_000_000_000, 20_000          # 1 byte/ns
    c = EgressConfig(rate, 9000, ecn_threshold_pkts=None, trim_threshold_pkts=1)
    vq = VirtualQueues(c, last_ns=0)
    tokens, backlog, t_prev = float(bucket), 0.0, 0
    t = 0
    for gap, size in arrivals:
        t += gap
        dt = t - t_prev
        served = min(backlog, tokens + dt)          # the backlog leaves at R once tokens run out
        tokens = min(bucket, tokens + dt - served)
        backlog -= served
        take = min(tokens, size)                    # what the bucket lets through at once
        tokens -= take
        backlog += size - take
        t_prev = t
        vq.packet(t, size, Kind.OTHER, ect=False)
        assert backlog == pytest.approx(max(0, vq.q - bucket), abs=1)


def _burst(config, n, kind=Kind.DATA, ect=True, gap_ns=0):
    vq = VirtualQueues(config, last_ns=10**9)
    return [vq.packet(10**9 + i * gap_ns, config.frame_bytes, kind, ect=ect, trimmed_bytes=102) for i in range(n)]


def test_model_back_to_back_burst():
    c = EgressConfig(5_000_000, 1500, ecn_threshold_pkts=2, trim_threshold_pkts=4, header_queue_pkts=3)
    v = _burst(c, 10)
    assert v[:2] == [Verdict.PASS] * 2 and v[2:4] == [Verdict.MARK] * 2
    assert v[4:7] == [Verdict.TRIM] * 3 and v[7:] == [Verdict.DROP] * 3  # 3 header slots of 106 >= 3 * 102
    assert counters(v) == {"passed": 4, "marked": 2, "trimmed": 3, "dropped": 3}


def test_model_non_mrc_is_never_trimmed_and_non_ect_never_marked():
    c = EgressConfig(5_000_000, 1500, ecn_threshold_pkts=2, trim_threshold_pkts=4, queue_pkts=6)
    assert set(_burst(c, 10, Kind.OTHER)[2:]) == {Verdict.MARK}
    assert set(_burst(c, 10, Kind.OTHER, ect=False)) == {Verdict.PASS}


def test_model_control_packets_take_the_header_class_only_with_trimming():
    trim = EgressConfig(5_000_000, 1500, ecn_threshold_pkts=2, trim_threshold_pkts=4, header_queue_pkts=3)
    vq = VirtualQueues(trim, last_ns=10**9)
    for _ in range(4):
        vq.packet(10**9, 1500, Kind.DATA, ect=True)          # a standing data queue
    assert vq.packet(10**9, 120, Kind.CONTROL, ect=False) is Verdict.HEADER
    assert (vq.q, vq.h) == (4 * 1500, 120)                   # charged to H, not queued behind data
    ecn_only = EgressConfig(5_000_000, 1500, ecn_threshold_pkts=2, trim_threshold_pkts=None)
    vq = VirtualQueues(ecn_only, last_ns=10**9)
    assert vq.packet(10**9, 120, Kind.CONTROL, ect=False) is Verdict.PASS
    assert (vq.q, vq.h) == (120, 0)                          # no header class: a plain packet


def test_model_drains_at_the_rate_headers_first():
    c = EgressConfig(8_000_000_000, 1500, ecn_threshold_pkts=None, trim_threshold_pkts=2)  # 1 byte/ns
    vq = VirtualQueues(c, last_ns=0)
    vq.packet(0, 1000, Kind.OTHER, ect=False)
    vq.packet(0, 100, Kind.HEADER, ect=False)
    assert (vq.q, vq.h) == (1000, 100)
    vq.packet(50, 0, Kind.OTHER, ect=False)
    assert (vq.q, vq.h) == (1000, 50)        # the header queue drains first
    vq.packet(1100, 0, Kind.OTHER, ect=False)
    assert (vq.q, vq.h, vq.carry) == (0, 0, 0)


def test_model_carries_fractions_of_a_byte():
    c = EgressConfig(4, 1500, ecn_threshold_pkts=1, trim_threshold_pkts=None)  # 0.5 byte/s
    vq = VirtualQueues(c, last_ns=0)
    vq.packet(0, 10, Kind.OTHER, ect=False)
    for t in range(1, 5):
        vq.packet(t * 10**9, 0, Kind.OTHER, ect=False)
    assert vq.q == 8                          # 4 s at 0.5 byte/s, no rounding loss


def test_model_idle_empties():
    c = EgressConfig(10**12, 1500, ecn_threshold_pkts=1, trim_threshold_pkts=None)
    vq = VirtualQueues(c, last_ns=0, q=10**9, h=10**6)
    vq.packet(c.idle_ns, 0, Kind.OTHER, ect=False)
    assert (vq.q, vq.h) == (0, 0)


def _descs(tc_plan):
    batch = Batch("test")
    shaping.compile_into(batch, 7, tc_plan)
    return [desc for _, desc, _ in batch._requests]


def test_shaping_default_is_one_class():
    tc = shaping.plan(LinkParams(5_000_000, 64), have_netem=False)
    assert tc.header_queue_pkts is None
    assert len(_descs(tc)) == 3


def test_shaping_header_class():
    tc = shaping.plan(LinkParams(5_000_000, 64), have_netem=False, header_queue_pkts=16)
    descs = _descs(tc)
    assert len(descs) == 6
    assert any("1:20" in d for d in descs) and any("leaf 20: limit 16" in d for d in descs)
    with pytest.raises(ValueError):
        shaping.plan(LinkParams(5_000_000, 64), have_netem=False, header_queue_pkts=0)


def test_clang_argv(monkeypatch, tmp_path):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.SwitchBuildError, match="clang not found"):
        build.clang_argv(build.SOURCE, tmp_path / "x.o")
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/bin/clang")
    argv = build.clang_argv(build.SOURCE, tmp_path / "x.o")
    assert argv[:2] == ["/usr/bin/clang", "-O2"] and "bpf" in argv and argv[-1] == str(tmp_path / "x.o")
