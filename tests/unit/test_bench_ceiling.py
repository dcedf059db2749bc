"""The fabric-ceiling sweep's scenario at a given rate (no root: nothing is built)."""
import dataclasses

from testbed.tools import ceiling
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
    assert ceiling.ring_pairs(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a")]
    tcp = [{"end": {"sum_received": {"bits_per_second": 9.5e6}}}, {"end": {"sum_received": {"bits_per_second": 8.5e6}}}]
    t = ceiling.iperf3_totals(tcp, 8.0)
    assert (t["flows"], t["mbit_per_host"], t["mbit_total"], t["pps_total"]) == (2, 9.0, 18.0, None)
    udp = [{"end": {"sum": {"packets": 2000, "lost_packets": 20, "bits_per_second": 1e7}}}]
    u = ceiling.iperf3_totals(udp, 8.0)
    assert u["pps_total"] == 1980 / 8.0 and u["lost_pct"] == 1.0
    assert u["mbit_total"] == 1980 * ceiling.MRC_DATAGRAM_BYTES * 8 / 8.0 / 1e6
