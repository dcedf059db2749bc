"""make bench's fabric ceiling and kernel limits, their pure parts (no root: nothing is built): the
sweep's scenario at a rate, its interleaved repeats and pass rule, the control mix read from a
run, the mixed ring's offered control rate and R."""
import dataclasses
import json
import types

import pytest

from testbed.tools import ceiling, kernel_limit
from testbed.spec import load_file
from testbed.fabric.kernel import features


def test_scenario_at_a_rate_changes_only_rates_and_sizes():
    base = load_file(ceiling.CEILING_SCENARIO, features=features())
    sc = ceiling._at_rate(base, 100_000_000, dataclasses)
    assert {lk.params.rate_bps for lk in sc.topology.links} == {100_000_000}
    old = {(lk.name, dataclasses.replace(lk.params, rate_bps=0)) for lk in base.topology.links}
    new = {(lk.name, dataclasses.replace(lk.params, rate_bps=0)) for lk in sc.topology.links}
    assert old == new                                   # same graph, queues, MTU
    size = sc.workload.min_bytes
    assert size == sc.workload.max_bytes and size & (size - 1) == 0
    assert 0.25 <= size * 8 / 100e6 <= 1.0              # ~0.5 s of the link per iteration
    assert sc.workload.hosts == base.workload.hosts and sc.timeline == ()
    assert ceiling._at_rate(base, 1_000, dataclasses).workload.min_bytes == 64 << 10   # the floor


def test_kernel_limit_ring_and_iperf3_totals():
    assert kernel_limit.ring_pairs(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a")]
    tcp = [{"end": {"sum_received": {"bits_per_second": 9.5e6}}}, {"end": {"sum_received": {"bits_per_second": 8.5e6}}}]
    t = kernel_limit.iperf3_totals(tcp, 8.0)
    assert (t["flows"], t["mbit_per_host"], t["mbit_total"], t["pps_total"]) == (2, 9.0, 18.0, None)
    udp = [{"end": {"sum": {"packets": 2000, "lost_packets": 20, "bits_per_second": 1e7}}}]
    u = kernel_limit.iperf3_totals(udp, 8.0)
    assert u["pps_total"] == 1980 / 8.0 and u["lost_pct"] == 1.0
    assert u["mbit_total"] == 1980 * kernel_limit.MRC_DATAGRAM_BYTES * 8 / 8.0 / 1e6


def _done(rank, data, dgrams):
    return {"t": 1.0, "kind": "agent", "rank": rank, "status": "done",
            "summary": {"channel": {"tx_qp": {"tx_packets": data}, "udp": {"tx_datagrams": dgrams}}}}


def test_control_mix_counts_every_datagram_that_is_not_data(tmp_path):
    lines = [_done(0, 1000, 1500), _done(1, 3000, 4300), {"t": 2.0, "kind": "agent", "rank": 2, "status": "connected"}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    mix = ceiling.control_mix(tmp_path)
    assert (mix["data_datagrams"], mix["datagrams"]) == (4000, 5800)
    assert mix["control_per_data"] == pytest.approx(1800 / 4000)


def test_control_mix_of_a_run_without_datagram_counts_is_an_error(tmp_path):
    (tmp_path / "events.jsonl").write_text(json.dumps({"t": 1.0, "kind": "agent", "rank": 0, "status": "done", "summary": {"channel": {}}}) + "\n")
    with pytest.raises(ValueError, match="datagram counts"):
        ceiling.control_mix(tmp_path)


def test_the_mixed_rings_control_offer_follows_the_data_offer():
    # 200 Mbit/s of 4096-byte datagrams is 6103.5/s; half a 52-byte control datagram each
    bps = kernel_limit.control_offer_bps(200, 4096, 0.5, 52)
    assert bps == pytest.approx(200e6 / (4096 * 8) * 0.5 * 52 * 8)
    assert kernel_limit.control_offer_bps(200, 4096, 0.0, 52) == 0.0
    with pytest.raises(ValueError):
        kernel_limit.control_offer_bps(200, 4096, -0.1, 52)
    assert ceiling.CONTROL_DATAGRAM_BYTES == 52     # a SACK's header and CRC


def test_a_ceilings_data_packets_are_its_busbw_in_payloads_on_every_host():
    # 95% of 40 Mbit/s is 38 Mbit/s per host: 1159.7 packets of 4096 bytes, 16 hosts
    assert ceiling.ceiling_data_pps(0.95, 40, 16, 4096) == pytest.approx(0.95 * 40e6 / 32768 * 16)


def _limits():
    def ring(pps, cpu=0.5):
        return {"pps_total": pps, "mbit_per_host": pps * 32768 / 16 / 1e6, "lost_pct": 0.0,
                "cpu": {"busy_fraction": cpu, "user_fraction": 0.05, "us_per_datagram": 10.0}}

    def mixed(*pps):
        return [{"data": ring(p), "control": ring(p / 2), "control_per_data": 0.5, "control_bytes": 52,
                 "sent_ratio": 0.5, "passes": 1} for p in pps]
    return [{"rate_mbit": 100, "datagram": 4096, "repeat": 3, "udp": [ring(40000)] * 3, "tcp": {},
             "mixed": {"mrc": mixed(30000, 31000, 29000)}},
            {"rate_mbit": 200, "datagram": 4096, "repeat": 3, "udp": [ring(80000), ring(60000), ring(70000)],
             "tcp": {}, "mixed": {"mrc": mixed(50000, 20000, 45000)}}]


def test_r_is_the_ceiling_over_the_best_mixed_ring_and_the_data_only_ratio_is_beside_it():
    run = {"busbw_fraction": 0.95, "valid": True, "passed": True, "control_per_data": 0.5,
           "machine_us_per_packet": 40.0}
    c = {"rates": [40], "repeat": 3, "ceiling": {"mrc": 40, "rc": None},
         "runs": {"mrc": {40: [run, {**run, "busbw_fraction": 0.93, "control_per_data": 0.52}, run]}, "rc": {}}}
    rows = {r["row"]: r for r in ceiling.ratio_rows(_limits(), c)}
    pps = ceiling.ceiling_data_pps(0.95, 40, 16, 4096)
    assert rows["mrc"]["data_pps"] == pytest.approx(pps)
    # the rings' medians: mixed 45,000 at 200 Mbit/s (above 30,000 at 100), data only 70,000
    assert rows["mrc"]["mixed"]["rate_mbit"] == 200 and rows["mrc"]["mixed"]["pps"] == (45000, 20000, 50000)
    assert rows["mrc"]["r"] == pytest.approx(pps / 45000)
    assert rows["mrc"]["r_data_only"] == pytest.approx(pps / 70000)
    assert rows["mrc"]["busbw"] == (0.95, 0.93, 0.95) and rows["mrc"]["control_per_data"] == 0.5
    assert rows["rc"]["r"] is None and rows["rc"]["data_pps"] is None
    assert ceiling.mixes_of(c) == {"mrc": (0.5, ceiling.CONTROL_DATAGRAM_BYTES)}
    ceiling.ratio_table(_limits(), c)               # renders both rows
    kernel_limit.mixed_table(_limits())
    kernel_limit.limit_table(_limits())


def test_the_sweep_interleaves_its_repeats_and_a_rate_passes_only_when_every_run_does(monkeypatch):
    order = []
    passing = {("mrc", 10): [True, True, True], ("mrc", 20): [True, False, True], ("mrc", 30): [True] * 3, ("mrc", 40): [False] * 3,
               ("rc", 10): [True] * 3, ("rc", 20): [False] * 3, ("rc", 30): [False] * 3}
    seen = {}

    def fake_run(sc, *, transports, **kw):
        rate = sc.topology.links[0].params.rate_bps // 1_000_000
        order.append((transports[0], rate))
        return types.SimpleNamespace(run_dir=kw["runs_root"] / "none", status={}, transport=transports[0], rate=rate)

    def fake_record(result, transport, load_summary):
        k = (transport, result.rate)
        i = seen[k] = seen.get(k, -1) + 1
        ok = passing[k][i]
        return {"busbw_fraction": 0.95 if ok else 0.5, "valid": True, "passed": ok, "control_per_data": 0.5}

    import testbed.run
    monkeypatch.setattr(testbed.run, "run_scenario", fake_run)
    monkeypatch.setattr(ceiling, "_ceiling_run", fake_record)
    c = ceiling.bench_ceiling([10, 20, 30, 40], ("mrc", "rc"), engines=("native",), repeat=3)
    # every row once per round, three rounds per rate; rc stops after two rates that did not pass
    assert order[:6] == [("mrc", 10), ("rc", 10)] * 3
    assert order[6:12] == [("mrc", 20), ("rc", 20)] * 3
    assert order[12:18] == [("mrc", 30), ("rc", 30)] * 3
    assert order[18:] == [("mrc", 40)] * 3
    assert c["ceiling"] == {"mrc, native engine": 30, "rc, native engine": 10}
    assert len(c["runs"]["mrc, native engine"][20]) == 3
    with pytest.raises(ValueError):
        ceiling.bench_ceiling([10], ("mrc",), repeat=0)


def test_a_rings_cpu_is_its_busy_share_split_into_user_and_kernel_and_per_datagram():
    # ticks: user, nice, system, idle, iowait, irq, softirq, steal; 2 cores, 1000 ticks in all
    before = [100, 0, 100, 100, 0, 0, 100, 0]
    after = [250, 0, 400, 300, 0, 0, 450, 0]
    cpu = kernel_limit.cpu_figures(before, after, 2, 40000.0)
    assert cpu["busy_fraction"] == 0.8 and cpu["user_fraction"] == pytest.approx(150 / 800, abs=1e-4)
    assert cpu["us_per_datagram"] == pytest.approx(0.8 * 2 / 40000 * 1e6)
    assert kernel_limit.cpu_figures(before, after, 2, None)["us_per_datagram"] is None


def test_iperf3_totals_count_what_was_sent_beside_what_arrived():
    udp = [{"end": {"sum": {"packets": 2000, "lost_packets": 20}}}, {"end": {"sum": {"packets": 1000, "lost_packets": 0}}}]
    u = kernel_limit.iperf3_totals(udp, 10.0, 52)
    assert (u["sent_pps_total"], u["pps_total"]) == (300.0, 298.0)
