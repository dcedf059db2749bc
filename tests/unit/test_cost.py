"""CPU per delivered packet from a run's records, and the profile's categories."""
from __future__ import annotations

import json

import pytest

from testbed.tools.cost import CATEGORIES, categorize, packet_cost


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _run(tmp_path, *, evs=True):
    d = tmp_path / "mrc"
    d.mkdir()
    # two runtimes: ranks 0, 2 share process A, ranks 1, 3 process B (schedstat run ns, wait ns, slices)
    a0, b0, a1, b1 = [1_000_000_000, 0, 1], [2_000_000_000, 0, 1], [3_000_000_000, 0, 9], [3_500_000_000, 0, 9]
    _write(d / "sched.jsonl", [{"t": 10.0, "ranks": {"0": a0, "2": a0, "1": b0, "3": b0}},
                               {"t": 14.0, "ranks": {"0": a1, "2": a1, "1": b1, "3": b1}}])
    # the machine: 2 cores, half busy from t=10 to t=14 (a record before the window is ignored)
    _write(d / "cpu.jsonl", [{"t": 9.0, "busy_fraction": 1.0, "cores": [1, 1]}] +
           [{"t": 10.0 + i * 0.5, "busy_fraction": 0.5, "cores": [0.5, 0.5]} for i in range(9)])
    samples = []
    for rank in range(4):
        tx_evs = [{"ev_id": 0, "state": "GOOD", "sent": 300, "lost": 50}] if evs else []
        for t, scale in ((11.0, 0), (13.0, 1)):   # only each rank's last sample counts
            samples.append({"t": t, "rank": rank, "flows": [
                {"dir": "tx", "peer": "x", "bytes": 1, "evs": [dict(e, sent=e["sent"] * scale,
                                                                  lost=e["lost"] * scale) for e in tx_evs]},
                {"dir": "rx", "peer": "y", "bytes": 4096 * 100 * scale, "evs": []}]})
    _write(d / "samples.jsonl", samples)
    return d


def test_packet_cost_counts_each_process_once_and_the_window_only(tmp_path):
    c = packet_cost(_run(tmp_path))
    assert c["data_packets"] == 4 * 250                       # sent - lost, last sample per rank
    assert c["agent_cpu_s"] == pytest.approx(2.0 + 1.5)       # A: 2 s, B: 1.5 s (not per rank)
    assert c["machine_cpu_s"] == pytest.approx(4.0, rel=1e-6)  # 0.5 x 2 cores x 4 s
    assert c["seconds"] == pytest.approx(4.0)
    assert c["agent_us_per_packet"] == pytest.approx(3.5e6 / 1000)
    assert c["machine_us_per_packet"] == pytest.approx(4e6 / 1000)
    assert c["packets_per_s"] == pytest.approx(250.0)


def test_packet_cost_of_tcp_counts_received_bytes_in_4kib_packets(tmp_path):
    c = packet_cost(_run(tmp_path, evs=False))
    assert c["data_packets"] == 4 * 100


def test_packet_cost_without_records_is_a_value_error(tmp_path):
    d = _run(tmp_path)
    (d / "sched.jsonl").write_text("")
    with pytest.raises(ValueError, match="no agent CPU records"):
        packet_cost(d)


def test_categorize_attributes_each_stack_by_its_innermost_known_frame():
    raw = "\n".join([
        "<module> (agents/__main__.py:1);run (agents/runtime.py:150);EpollSelector.select (selectors.py:468);"
        "epoll_wait (libc.so.6) 40",
        "run (agents/runtime.py:150);Endpoint._flush (agents/net/udp.py:312);send (libc.so.6) 20",
        "run (agents/runtime.py:150);Endpoint._on_readable (agents/net/udp.py:225) 7",
        "Endpoint._on_readable (agents/net/udp.py:230);QP.receive_datagrams (agents/mrc/qp.py:321);"
        "Responder.on_data (agents/mrc/responder.py:130) 11",
        "QP.receive_datagram (agents/mrc/qp.py:283);EventLoop.call_at (agents/net/loop.py:67) 3",
        "Agent._sample (agents/agent.py:150);dumps (json/__init__.py:234) 2",
        "Workload.on_arrival (agents/collectives/workload.py:162);_pattern (agents/collectives/data.py:89);"
        "random_bounded_uint8_fill (numpy/random/_bounded.so) 5",
        "Workload.on_arrival (agents/collectives/workload.py:162) 1",
        "0x7f00 (libc.so.6) 1",
        "EventLoop.run_once (agents/net/loop.py:99);clock_nanosleep (libc.so.6) 4",
        "garbage line",
    ])
    c = categorize(raw)
    assert set(c) == {*CATEGORIES, "waiting"}
    assert c == {"waiting": 44, "syscalls": 20, "event loop": 7, "protocol": 11, "timers": 3,
                 "samples and logging": 2, "buffers": 5, "collective": 1, "other": 1}


def test_categorize_knows_the_native_engine():
    so = "_core.cpython-311-x86_64-linux-gnu.so"
    raw = "\n".join([
        f"run (agents/runtime.py:150);readable (agents/net/native_udp.py:70);mrcn_ep_on_readable ({so});"
        "recvmmsg (libc.so.6) 6",
        f"readable (agents/net/native_udp.py:70);mrcn_ep_on_readable ({so});mrcn_qp_receive_batch ({so});"
        f"mrcn_responder_on_data ({so}) 9",
        f"readable (agents/net/native_udp.py:70);mrcn_ep_on_readable ({so});mrcn_qp_receive ({so});"
        "crc32_gzip_refl (libisal.so.2) 4",
        f"readable (agents/net/native_udp.py:70);mrcn_ep_on_readable ({so}) 5",
        f"NativeEndpoint._on_timer (agents/net/native_udp.py:140);mrcn_ep_on_timer ({so}) 3",
        # a timer's work in the loss detector is protocol work, as loss.py's is in Python
        f"NativeEndpoint._on_timer (agents/net/native_udp.py:140);mrcn_ep_on_timer ({so});"
        f"mrcn_qp_handle_timer ({so});mrcn_loss_on_timer ({so}) 2",
        # the native loop's wait (epoll_pwait2 for nanosecond timeouts) is waiting, not work
        f"EventLoop._run_once_native (agents/net/loop.py:240);wait (agents/mrc/_core_poller.pxi:73);"
        f"mrcn_poller_wait ({so});epoll_until ({so});epoll_pwait2 (libc.so.6) 8",
    ])
    c = categorize(raw)
    assert (c["syscalls"], c["protocol"], c["event loop"], c["timers"], c["waiting"]) == (6, 15, 5, 3, 8)
