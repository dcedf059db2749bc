"""Ring all-reduce: bit-exact in memory, #wrong on corruption, and over the MRC simulator."""
from __future__ import annotations

import random

import numpy as np
import pytest

from agents import collectives as co


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
@pytest.mark.parametrize("count", [8 * 9 + 5, 1001, 70_001])
def test_ring_allreduce_bit_exact_in_memory(world_size, count):
    workloads = co.run_in_memory(world_size, [count * 4], iterations=2, warmup=1, seed=7)
    for w in workloads:
        assert w.done
        assert [r.wrong for r in w.results] == [0, 0, 0]
        assert [r.warmup for r in w.results] == [True, False, False]
    # the last result buffer is exactly the sum, on every rank
    for w in workloads:
        assert w.summary()["wrong"] == 0


def test_ring_allreduce_algorithm_matches_numpy_sum():
    n, count = 5, 103
    datas = [co.rank_data(1, r, 0, count) for r in range(n)]
    region = [np.zeros(co.recv_region_bytes(count, n), np.uint8) for _ in range(n)]
    algos = [co.RingAllReduce(r, n, datas[r].copy(), region[r]) for r in range(n)]
    pending = [(r, a.start()) for r, a in enumerate(algos)]
    while pending:
        r, send = pending.pop(0)
        peer = (r + 1) % n
        region[peer][send.remote_offset:send.remote_offset + len(send.data)] = \
            np.frombuffer(send.data, np.uint8)
        nxt = algos[peer].on_arrival(send.imm)
        if nxt is not None:
            pending.append((peer, nxt))
    total = np.sum(np.stack(datas), axis=0, dtype=np.float32)
    for a in algos:
        assert a.done
        assert np.array_equal(a.buffer, total)


def test_wrong_counts_a_corrupted_chunk():
    n, count = 4, 1000
    bounds = co.chunk_bounds(count, n)

    def corrupt(rank, send):
        if rank == 1 and send.step == n - 1:     # first all-gather write of rank 1
            arr = np.frombuffer(send.data, np.float32).copy()
            arr[:3] += 1000.0
            return arr.tobytes()
        return send.data

    ws = co.run_in_memory(n, [count * 4], seed=1, corrupt=corrupt)
    wrongs = [w.results[0].wrong for w in ws]
    # the corrupted all-gather chunk travels on to ranks 2, 3 and 0 (not back to 1)
    assert wrongs[1] == 0
    assert wrongs[2] == 3 and wrongs[3] == 3 and wrongs[0] == 3
    assert bounds[0][0] == 0


def test_unexpected_arrival_is_a_collective_error():
    region = np.zeros(co.recv_region_bytes(12, 3), np.uint8)
    algo = co.RingAllReduce(0, 3, np.zeros(12, np.float32), region)
    with pytest.raises(co.CollectiveError):
        algo.on_arrival(co.encode_imm(1, 0))


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):
        co.RingAllReduce(0, 1, np.zeros(4, np.float32), np.zeros(0, np.uint8))
    with pytest.raises(ValueError):
        co.Workload(0, 4, [8], 1, 0, 0, post=lambda s: None)   # 2 elements < 4 ranks
    with pytest.raises(ValueError):
        co.size_sweep(0, 10)


def test_size_sweep_and_bandwidths():
    assert co.size_sweep(8, 64, 2) == [8, 16, 32, 64]
    assert co.size_sweep(1024, 5000, 4) == [1024, 4096]
    algbw, busbw = co.bus_bandwidth(1_000_000, 0.01, 4)
    assert algbw == pytest.approx(1e8)
    assert busbw == pytest.approx(1e8 * 2 * 3 / 4)


# ---- over the deterministic MRC multipath simulator ------------------------------

def _ring_over_sim(world_size, size_bytes, *, iterations, paths_for):
    """4 ranks, connection r -> r+1 is one MultipathNetwork (tx QP of r, rx QP of r+1)."""
    from agents.mrc.qp import QP, connect_pair
    from agents.mrc.sim import MultipathNetwork
    from agents.mrc.types import QPConfig, WCOpcode

    config = QPConfig(time_scale=1.0, min_rto_s=0.002)
    workloads, tx, rx = [], [], []
    for r in range(world_size):
        tx.append(QP(100 + r, rng=random.Random(r), config=config))
        w = co.Workload(r, world_size, [size_bytes], iterations, 0, 11,
                        post=lambda s, r=r: tx[r].post_write(wr_id=s.imm, local=s.data,
                                                             remote_offset=s.remote_offset,
                                                             imm=s.imm))
        workloads.append(w)
        rx.append(QP(200 + r, rng=random.Random(50 + r), memory=w.recv_region, config=config))
    nets = []
    for r in range(world_size):
        a, b = tx[r], rx[(r + 1) % world_size]
        paths = paths_for(r)
        connect_pair(a, b, range(len(paths)))
        nets.append(MultipathNetwork(a, b, paths, seed=r))
    ev_events = []
    for w in workloads:
        w.start(0.0)
    now = 0.0
    for _ in range(2_000_000):
        for net in nets:
            net.now = now
            net._drain()                        # sim has no public drain (see report)
        times = [t for t in (net._next_time() for net in nets) if t is not None]
        if all(w.done for w in workloads) or not times:
            break
        now = max(min(times), now)
        for net in nets:
            t = net._next_time()
            net.now = now
            if t is not None and t <= now:
                net.step()
        for r in range(world_size):
            for qp in (tx[r], rx[r]):
                while (ev := qp.next_event()) is not None:
                    if getattr(ev, "opcode", None) is WCOpcode.RECV_RDMA_WITH_IMM:
                        workloads[r].on_arrival(ev.imm, now)
                    elif hasattr(ev, "reason"):
                        raise AssertionError(f"QP error: {ev}")
                    elif hasattr(ev, "new"):
                        ev_events.append((r, ev))
    return workloads, ev_events, now


def test_ring_allreduce_over_mrc_sim_survives_a_dying_path():
    from agents.mrc.sim import PathSpec
    from agents.mrc.ev import EVState

    def paths_for(r):
        healthy = PathSpec(rate_bps=1e9, delay_s=0.0002)
        dying = PathSpec(rate_bps=1e9, delay_s=0.0002, down=((0.004, float("inf")),))
        return [healthy, dying if r == 1 else healthy, healthy, healthy]

    ws, ev_events, end = _ring_over_sim(4, 256 * 1024, iterations=4, paths_for=paths_for)
    assert all(w.done for w in ws)
    assert [r.wrong for w in ws for r in w.results] == [0] * 16
    assert ws[0].results[0].t_end < 0.004 < end           # the path died mid-run
    assert any(r == 1 and ev.ev == 1 and ev.new is EVState.ASSUMED_BAD for r, ev in ev_events)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_slot_reuse_is_safe_across_sizes_with_eager_placement(world_size):
    # data lands when posted; the receiver consumes arrivals later: a sender that
    # moved on to the next size must not overwrite a slot still to be consumed
    sizes = [4 * 64, 4 * 4096, 4 * 256, 4 * 70_001]
    ws = co.run_in_memory(world_size, sizes, iterations=3, warmup=1, seed=2,
                          eager_placement=True)
    assert [r.wrong for w in ws for r in w.results] == [0] * (world_size * 16)
