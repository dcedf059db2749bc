"""A host NIC's control priority (topology ``control_priority``): the key, the NIC's classes, the
jobs' ``qp.control_priority``, and which datagrams the Python endpoint sends with it (the native
endpoint's are checked on the fabric: tests/netns/test_control_priority.py)."""
from __future__ import annotations

import socket
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from agents.mrc.packet import PacketType
from agents.net import EventLoop
from agents.net import udp
from testbed.fabric import shaping
from testbed.model.kernel import KernelFeatures
from testbed.model.topology import CONTROL_PRIORITY, LinkParams
from testbed.spec import SpecError, load_scenario, load_topology
from testbed.spec.jobs import build_jobs

FEATURES = KernelFeatures(frozenset({"htb", "pfifo"}), seg6_next_csid=True, nftables=True)
TOPO = """\
kind: fat-tree
k: 4
link_classes:
  host:   {{rate: 10Mbit, queue: 32, mtu: 9000{host}}}
  fabric: {{rate: 10Mbit, queue: 32, mtu: 9000}}
"""


def _topology(tmp_path: Path, host_extra: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(TOPO.format(host=host_extra))
    return path


def test_the_key_sets_the_host_class_only(tmp_path):
    topo = load_topology(_topology(tmp_path, ", control_priority: true"), features=FEATURES)
    by_host = {l.name: l.params.control_priority for l in topo.links}
    assert by_host["h0_0_0-e0_0"] is True and by_host["e0_0-a0_0"] is False
    assert not any(l.params.control_priority for l in load_topology(_topology(tmp_path, ""), features=FEATURES).links)


def test_a_non_boolean_is_refused_at_its_line(tmp_path):
    path = _topology(tmp_path, ", control_priority: yes please")
    with pytest.raises(SpecError) as info:
        load_topology(path, features=FEATURES)
    assert [str(p) for p in info.value.problems] == [
        f"{path}:4: link_classes.host.control_priority: expected true or false, got 'yes please'"]


def test_the_nic_gets_a_strict_priority_class():
    base = LinkParams(10_000_000, 32, mtu=9000)
    assert base.header_class_pkts(shaping.CONTROL_QUEUE_PKTS) is None
    assert shaping.plan(base, have_netem=False).header_queue_pkts is None
    on = replace(base, control_priority=True)
    assert on.header_class_pkts(shaping.CONTROL_QUEUE_PKTS) == shaping.CONTROL_QUEUE_PKTS
    trim = replace(on, trim_threshold_pkts=8, trim_header_queue_pkts=16)
    assert trim.header_class_pkts(shaping.CONTROL_QUEUE_PKTS) == 16   # trimming's class serves both
    assert CONTROL_PRIORITY == 0x10020 and shaping.HEADER_CLASS == "1:20"


def test_jobs_of_our_transports_carry_the_priority(tmp_path):
    topo = _topology(tmp_path, ", control_priority: true")
    scen = tmp_path / "s.yaml"
    scen.write_text(f"name: s\ntopology: {topo}\ntransports: [mrc, rc, tcp]\n"
                    "workload: {collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB}\n")
    scenario = load_scenario(scen, features=FEATURES)
    for transport, want in (("mrc", CONTROL_PRIORITY), ("rc", CONTROL_PRIORITY), ("tcp", None)):
        jobs = build_jobs(scenario, transport, run_id="r", control_socket="/tmp/c.sock")
        assert {(j.get("qp") or {}).get("control_priority") for j in jobs} == {want}, transport


class _Sock:
    """Records how each datagram was sent."""

    def __init__(self):
        self.sent = []

    def sendto(self, data, addr):
        self.sent.append(("plain", data[1]))

    def sendmsg(self, buffers, ancdata, flags=0, *addr):
        self.sent.append(("cmsg", buffers[0][1], ancdata))


@pytest.mark.parametrize("priority", [CONTROL_PRIORITY, 0])
def test_the_python_endpoint_marks_control_packets_only(priority, monkeypatch):
    monkeypatch.setattr(udp, "priority_cmsg", lambda: True)
    loop = EventLoop()
    ep = udp.Endpoint(loop, bind_addr="::1", port=0, control_priority=priority)
    try:
        assert ep.control_priority == priority
        sock = _Sock()
        for ptype in (PacketType.DATA, PacketType.SACK, PacketType.NACK, PacketType.PROBE_REQ):
            ep._send(sock.sendto, bytes([1, ptype, 0, 0]) + bytes(12), ("::1", 4791, 0, 0))
    finally:
        ep.close()
        loop.close()
    cmsg = [(socket.SOL_SOCKET, socket.SO_PRIORITY, struct.pack("I", priority))]
    want_ctl = [("cmsg", t, cmsg) for t in (PacketType.SACK, PacketType.NACK, PacketType.PROBE_REQ)]
    assert sock.sent == ([("plain", PacketType.DATA)] + want_ctl if priority else
                         [("plain", t) for t in (PacketType.DATA, PacketType.SACK, PacketType.NACK,
                                                 PacketType.PROBE_REQ)])


def test_a_kernel_that_refuses_the_message_gets_none(monkeypatch, caplog):
    monkeypatch.setattr(udp, "priority_cmsg", lambda: False)
    assert udp.control_cmsg(CONTROL_PRIORITY) is None and "refuses SO_PRIORITY" in caplog.text
    assert udp.control_cmsg(0) is None
