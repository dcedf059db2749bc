"""The bench runs end to end on loopback and reports comparable figures."""
from agents.net import bench


def test_bench_reports_both_paths_and_their_ratio():
    res = bench.run(size_bytes=1 << 20, plain_packets=2000, repeat=2)
    assert res["mrc"]["bit_exact"]
    assert res["mrc"]["packets"] >= (1 << 20) // bench.DEFAULT_PAYLOAD_BYTES
    assert res["plain"]["packets"] >= 2000
    assert res["ratio"] == res["mrc"]["pps_per_core"] / res["plain"]["pps_per_core"] > 0
    assert len(res["runs"]["mrc"]) == len(res["runs"]["plain"]) == 2
    assert round(res["mrc"]["pps_per_core"]) in res["runs"]["mrc"]
