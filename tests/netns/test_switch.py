"""testbed.fabric.switch on this kernel: (a) the egress program on crafted packets through
BPF_PROG_TEST_RUN, (b) on a veth link shaped by HTB, its counters against the
virtual-queue model and what the receiver sees. Skipped, with the probe's reason,
when the kernel feature ``bpf_egress`` is absent."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import time
import uuid

import pytest

from agents.mrc import packet as P
from testbed.fabric import kernel, shaping
from testbed.fabric.netlink import Batch, netns
from testbed.fabric.switch import EgressConfig, EgressProgram, SwitchAttachError, attach, trimmed_frame_bytes
from testbed.fabric.switch.bpf import TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT
from testbed.fabric.switch.model import Kind, VirtualQueues, counters
from testbed.model.topology import LinkParams

MARK_REDIRECTED = 0x8000_0000
ECT0, ECT1, CE = 0b10, 0b01, 0b11
SOL_UDP, UDP_NO_CHECK6_TX, UDP_NO_CHECK6_RX = 17, 101, 102
SO_RCVBUFFORCE = 33
PAYLOAD = 1400


@pytest.fixture(scope="module", autouse=True)
def bpf_egress():
    feats = kernel.features()
    if not feats.bpf_egress:
        pytest.skip(f"kernel feature bpf_egress unavailable: {feats.bpf_egress_error or feats.reason}")


def frame(mrc: bytes, *, ecn: int = ECT0, nexthdr: int = 17, udp_csum: int = 0) -> bytes:
    """Ethernet + IPv6 (traffic class ECN bits ``ecn``) + UDP (checksum ``udp_csum``) + ``mrc``."""
    ip6 = struct.pack("!IHBB", (6 << 28) | (ecn << 20), 8 + len(mrc), nexthdr, 64)
    ip6 += socket.inet_pton(socket.AF_INET6, "fcbb:bb00:1:2::") + socket.inet_pton(socket.AF_INET6, "fd00::2")
    return bytes(12) + b"\x86\xdd" + ip6 + struct.pack("!HHHH", 40000, 4791, 8 + len(mrc), udp_csum) + mrc


def data(psn: int = 1, opcode: int = P.Opcode.WRITE_ONLY, flags: int = 0) -> bytes:
    imm = 0xABCD if opcode in P.OPCODES_WITH_IMM else None
    return P.encode_data_parts(7, psn, 3, opcode, flags, 4096, 123456789, imm, bytes(range(256)) * 5 + b"x" * 120)


def ecn_of(f: bytes) -> int:
    return (f[15] >> 4) & 3


@pytest.fixture
def program():
    # 8 kbit/s: 1 byte per ms, so the virtual queue stays put while a test runs
    with EgressProgram(EgressConfig(8000, 1500, ecn_threshold_pkts=2, trim_threshold_pkts=4,
                                    header_queue_pkts=3)) as prog:
        yield prog


def test_below_thresholds_unchanged(program):
    for i in range(2):
        f = frame(data(i))
        r = program.test_run(f)
        assert (r.retval, r.frame, r.mark, r.priority) == (TC_ACT_OK, f, 0, 0)
    assert program.counters() == {"passed": 2, "marked": 0, "trimmed": 0, "dropped": 0}


def test_ect_above_ecn_threshold_gets_ce(program):
    for _ in range(2):
        program.test_run(frame(data()))
    for ecn, want in ((ECT0, CE), (ECT1, CE), (0, 0), (CE, CE)):
        f = frame(b"not mrc at all", ecn=ecn)
        r = program.test_run(f)
        assert r.retval == TC_ACT_OK and ecn_of(r.frame) == want
        assert r.frame[:15] == f[:15] and r.frame[16:] == f[16:]
    assert program.counters()["marked"] == 2


@pytest.mark.parametrize("opcode", [P.Opcode.WRITE_ONLY, P.Opcode.WRITE_LAST_WITH_IMM, P.Opcode.WRITE_FIRST])
def test_data_above_trim_threshold_is_trimmed(program, opcode):
    for _ in range(4):
        program.test_run(frame(b"\x00" * 1400))      # fills the queue to the trim threshold
    original = data(9, opcode)
    r = program.test_run(frame(original))
    assert r.retval == TC_ACT_REDIRECT
    assert r.priority == 0x10020 and r.mark == MARK_REDIRECTED
    assert len(r.frame) == trimmed_frame_bytes(opcode)
    mrc = r.frame[62:]
    pkt = P.parse(mrc)                                # CRC checked: equals zlib.crc32 of the header
    orig = P.parse(original)
    assert pkt.flags == P.FLAG_TRIMMED and pkt.payload == b""
    assert (pkt.psn, pkt.opcode, pkt.length, pkt.imm, pkt.remote_offset) == \
        (orig.psn, orig.opcode, orig.length, orig.imm, orig.remote_offset)
    assert struct.unpack_from("!H", r.frame, 18)[0] == 8 + len(mrc)    # IPv6 payload length
    assert struct.unpack_from("!HH", r.frame, 58) == (8 + len(mrc), 0)  # UDP length, checksum
    assert program.counters()["trimmed"] == 1
    second = program.test_run(r.frame, mark=r.mark, priority=r.priority)  # back through the hook
    assert (second.retval, second.frame, second.mark) == (TC_ACT_OK, r.frame, 0)
    assert program.counters()["passed"] == 4


def test_non_mrc_and_checksummed_never_trimmed(program):
    for _ in range(4):
        program.test_run(frame(b"\x00" * 1400))
    bad_crc = bytearray(data())
    bad_crc[1] = 2                                    # a SACK type byte: not DATA
    for f in (frame(b"\x01\x01" + b"\x00" * 1400), frame(bytes(bad_crc)), frame(data(), udp_csum=0x1234),
              frame(data(), nexthdr=0x2B)):
        r = program.test_run(f)
        assert r.retval == TC_ACT_OK and len(r.frame) == len(f)
    assert program.counters()["trimmed"] == 0


def test_header_queue_overflow_is_the_only_drop(program):
    for _ in range(4):
        program.test_run(frame(data()))
    retvals = [program.test_run(frame(data())).retval for _ in range(5)]
    assert retvals == [TC_ACT_REDIRECT] * 3 + [TC_ACT_SHOT] * 2
    upstream = P.encode(P.DataPacket(7, 1, 3, P.Opcode.WRITE_ONLY, 0, 1400, 5, P.FLAG_TRIMMED))
    assert program.test_run(frame(upstream)).retval == TC_ACT_SHOT   # a header trimmed upstream
    assert program.counters() == {"passed": 4, "marked": 2, "trimmed": 3, "dropped": 3}


def test_upstream_trimmed_header_goes_to_the_header_class(program):
    upstream = frame(P.encode(P.DataPacket(7, 1, 3, P.Opcode.WRITE_ONLY, 0, 1400, 5, P.FLAG_TRIMMED)))
    r = program.test_run(upstream)
    assert (r.retval, r.frame, r.priority) == (TC_ACT_OK, upstream, 0x10020)


@pytest.mark.parametrize("control", [
    P.SackPacket(7, 10, 10, 0b101, 3, 123456789),
    P.NackPacket(7, 12, 3, 123456789, P.NackReason.TRIMMED),
    P.ProbePacket(7, 1, 3, 4, 123456789),
    P.ProbePacket(7, 1, 3, 4, 123456789, response=True),
], ids=["sack", "nack", "probe", "probe-rsp"])
def test_control_packets_go_to_the_header_class_with_trimming(program, control):
    assert len(P.encode(control)) <= P.SACK_HDR.size + P.CRC_BYTES == 52   # MRC_CTRL_MAX
    f = frame(P.encode(control), ecn=0)
    r = program.test_run(f)
    assert (r.retval, r.frame, r.priority) == (TC_ACT_OK, f, 0x10020)
    with EgressProgram(EgressConfig(8000, 1500, ecn_threshold_pkts=2, trim_threshold_pkts=None)) as ecn_only:
        r = ecn_only.test_run(f)
        assert (r.retval, r.frame, r.priority) == (TC_ACT_OK, f, 0)    # no header class there


# -- (b) a real link ---------------------------------------------------------------

RATE_BPS = 5_000_000
FLOOD_BPS = 10_000_000
FLOOD_S = 1.0
PORT = 4791


def ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=10)


@pytest.fixture
def link():
    """Namespaces A and B joined by a veth (A: swa fd00:5::1, B: swb fd00:5::2, a permanent
    neighbour entry so no ND runs during the test); A's end shaped at RATE_BPS with the header class. Deleted by recorded name, even on failure."""
    tag = uuid.uuid4().hex[:8]
    names = [f"mrcsw-a-{tag}", f"mrcsw-b-{tag}"]
    created = []
    try:
        for name in names:
            ip("netns", "add", name)
            created.append(name)
        a, b = names
        ip("-n", a, "link", "add", "swa", "type", "veth", "peer", "name", "swb", "netns", b)
        for ns, dev, addr in ((a, "swa", "fd00:5::1/64"), (b, "swb", "fd00:5::2/64")):
            ip("-n", ns, "addr", "add", addr, "dev", dev, "nodad")
            ip("-n", ns, "link", "set", dev, "up")
        mac = json.loads(subprocess.run(["ip", "-n", b, "-j", "link", "show", "swb"], check=True,
                                        capture_output=True, text=True, timeout=10).stdout)[0]["address"]
        ip("-n", a, "neigh", "replace", "fd00:5::2", "lladdr", mac, "dev", "swa", "nud", "permanent")
        fd = os.open(f"/var/run/netns/{a}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            with netns(fd):
                ifindex = socket.if_nametoindex("swa")
            batch = Batch("test_switch")
            shaping.compile_into(batch, ifindex, shaping.plan(LinkParams(RATE_BPS, 100), have_netem=False,
                                                              header_queue_pkts=16))
            batch.send(fd)
        finally:
            os.close(fd)
        yield names
    finally:
        for name in reversed(created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def ns_socket(name: str) -> socket.socket:
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with netns(fd):
            return socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    finally:
        os.close(fd)


def flood(sock: socket.socket) -> list[int]:
    """MRC WRITE_ONLY packets, ECT(0), paced at FLOOD_BPS for FLOOD_S; their send times (ns)."""
    frame_bits = 8 * (14 + 48 + P.DATA_HDR.size + PAYLOAD + 4)
    gap_ns = frame_bits * 10**9 // FLOOD_BPS
    sent, start = [], time.monotonic_ns()
    for psn in range(int(FLOOD_S * FLOOD_BPS / frame_bits)):
        while time.monotonic_ns() < start + psn * gap_ns:
            pass
        sent.append(time.monotonic_ns())
        sock.sendto(P.encode_data_parts(1, psn, 0, P.Opcode.WRITE_ONLY, 0, 0, 0, None, b"p" * PAYLOAD),
                    ("fd00:5::2", PORT))
    return sent


def receive(sock: socket.socket, quiet_s: float = 0.5) -> list[tuple[int, bytes]]:
    """(ECN bits, datagram) of everything that arrives until ``quiet_s`` of silence."""
    got = []
    sock.settimeout(quiet_s)
    while True:
        try:
            msg, anc, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(4))
        except socket.timeout:
            return got
        tclass = next(struct.unpack("=i", d)[0] for lvl, typ, d in anc
                      if lvl == socket.IPPROTO_IPV6 and typ == socket.IPV6_TCLASS)
        got.append((tclass & 3, msg))


def htb_classes(name: str) -> dict[str, tuple[int, int]]:
    """{classid: (packets, bytes)} sent by each HTB class on A's swa."""
    out = subprocess.run(["tc", "-n", name, "-s", "class", "show", "dev", "swa"], check=True,
                         capture_output=True, text=True, timeout=10).stdout   # no JSON for classes in 6.1
    return {m[1]: (int(m[3]), int(m[2])) for m in re.finditer(r"class htb (\S+) .*\n Sent (\d+) bytes (\d+) pkt", out)}


def within(measured: int, expected: int) -> bool:
    return abs(measured - expected) <= max(3, 0.05 * expected)


def test_flood_on_a_shaped_link(link):
    a, b = link
    config = EgressConfig(RATE_BPS, 1500, ecn_threshold_pkts=4, trim_threshold_pkts=8, header_queue_pkts=16,
                          queue_pkts=100)
    rx, tx = ns_socket(b), ns_socket(a)
    try:
        rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        rx.setsockopt(SOL_UDP, UDP_NO_CHECK6_RX, 1)
        rx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
        rx.bind(("fd00:5::2", PORT))
        tx.setsockopt(SOL_UDP, UDP_NO_CHECK6_TX, 1)
        tx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, ECT0)
        handle = attach(a, "swa", config)
        try:
            with pytest.raises(SwitchAttachError, match="already attached"):
                attach(a, "swa", config)
            sent = flood(tx)
            got = receive(rx)
            measured = handle.counters()
            classes = htb_classes(a)
        finally:
            handle.detach()
            handle.detach()
    finally:
        rx.close()
        tx.close()
    vq = VirtualQueues(config)
    full = 14 + 48 + P.DATA_HDR.size + PAYLOAD + 4
    expected = counters(vq.packet(t, full, Kind.DATA, ect=True, trimmed_bytes=trimmed_frame_bytes(10))
                        for t in sent)
    trimmed_rx = [m for _, m in got if len(m) == P.DATA_HDR.size + 4]
    ce_rx = sum(1 for ecn, m in got if ecn == CE and len(m) > 100)
    print(f"\nsent {len(sent)} at {FLOOD_BPS / 1e6:g} Mbit/s over a {RATE_BPS / 1e6:g} Mbit/s link; "
          f"program {measured}; model {expected}; received {len(got)}: {ce_rx} CE, "
          f"{len(trimmed_rx)} trimmed; htb classes {classes}")
    assert expected["trimmed"] > len(sent) / 4 and expected["marked"] >= 4   # the flood does congest
    for key in ("marked", "trimmed", "dropped"):
        assert within(measured[key], expected[key]), (key, measured, expected)
    others = measured["passed"] + measured["trimmed"] + measured["dropped"] - len(sent)
    assert 0 <= others <= 10                               # MLD/RS of the link coming up
    assert all(P.parse(m).flags == P.FLAG_TRIMMED for m in trimmed_rx)
    assert len(trimmed_rx) == measured["trimmed"]          # nothing lost behind the header class
    assert ce_rx == measured["marked"]
    # HTB charged the trimmed size in the header class (the redirect re-queued them)
    assert classes["1:20"] == (measured["trimmed"], measured["trimmed"] * trimmed_frame_bytes(10))
    assert len(got) == len(sent) - measured["dropped"]       # and nothing lost in HTB


def test_header_class_layout_survives_a_rate_change(link):
    a, _ = link
    fd = os.open(f"/var/run/netns/{a}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with netns(fd):
            ifindex = socket.if_nametoindex("swa")
        batch = Batch("test_switch rate change")
        shaping.compile_into(batch, ifindex, shaping.plan(LinkParams(2 * RATE_BPS, 100), have_netem=False,
                                                          header_queue_pkts=16), replace=True)
        batch.send(fd)
    finally:
        os.close(fd)
    out = subprocess.run(["tc", "-n", a, "class", "show", "dev", "swa"], check=True, capture_output=True,
                         text=True, timeout=10).stdout
    rates = {m[0]: (m[1], m[2]) for m in re.findall(r"class htb (\S+) .*?rate (\S+) ceil (\S+)", out)}
    assert rates == {"1:1": ("10Mbit", "10Mbit"), "1:10": ("10Kbit", "10Mbit"), "1:20": ("10Mbit", "10Mbit")}


def test_a_trim_at_the_last_hop_says_so():
    """On a port that faces a host (``last_hop``) the trimmed header carries FLAG_TRIMMED_LASTHOP
    too, so the receiver NACKs TRIMMED_LASTHOP and the sender does not skip the EV."""
    cfg = EgressConfig(8000, 1500, ecn_threshold_pkts=2, trim_threshold_pkts=4, header_queue_pkts=3, last_hop=True)
    with EgressProgram(cfg) as prog:
        for _ in range(4):
            prog.test_run(frame(b"\x00" * 1400))
        r = prog.test_run(frame(data(9)))
        assert r.retval == TC_ACT_REDIRECT
        assert P.parse(r.frame[62:]).flags == P.FLAG_TRIMMED | P.FLAG_TRIMMED_LASTHOP
