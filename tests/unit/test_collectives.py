"""Collectives: exact results in memory under any delivery interleaving, #wrong on corruption,
buffering of arrivals from peers ahead, errors for impossible arrivals, and over the MRC sim."""
from __future__ import annotations

import math
import random
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agents import collectives as co

WORLDS = [2, 3, 4, 7, 16]


def _wrong(workloads):
    return [r.wrong for w in workloads for r in w.results]


def _sizes(n):
    # element counts: not divisible by n (except by chance for n=2), a large one last
    return [4 * (9 * n + 5), 4 * 1001, 4 * 70_001]


@pytest.mark.parametrize("collective", co.COLLECTIVES)
@pytest.mark.parametrize("world_size", WORLDS)
@pytest.mark.parametrize("shuffled", [False, True])
def test_exact_in_memory_with_eager_placement(collective, world_size, shuffled):
    # eager placement: the data lands when posted, the arrival is consumed much later
    rng = random.Random(world_size) if shuffled else None
    ws = co.run_in_memory(world_size, _sizes(world_size), collective=collective, iterations=2,
                          warmup=1, seed=7, eager_placement=True, rng=rng)
    assert all(w.done for w in ws)
    assert _wrong(ws) == [0] * (world_size * 9)
    assert [r.warmup for r in ws[0].results] == [True, False, False] * 3
    assert all(w.summary()["wrong"] == 0 for w in ws)


@settings(max_examples=60, deadline=None)
@given(collective=st.sampled_from(co.COLLECTIVES), world_size=st.sampled_from(WORLDS),
       extra=st.lists(st.integers(0, 300), min_size=1, max_size=3),
       delivery=st.integers(0, 2**32 - 1), eager=st.booleans(), seed=st.integers(0, 1000))
def test_any_interleaving_of_senders_gives_exact_results(collective, world_size, extra, delivery,
                                                         eager, seed):
    sizes = [4 * (world_size + e) for e in extra]
    ws = co.run_in_memory(world_size, sizes, collective=collective, iterations=2, warmup=1,
                          seed=seed, eager_placement=eager, rng=random.Random(delivery))
    assert all(w.done for w in ws)
    assert _wrong(ws) == [0] * (world_size * 3 * len(sizes))


@pytest.mark.parametrize("collective", co.COLLECTIVES)
def test_a_corrupted_write_is_counted_wrong(collective):
    n, count = 4, 1003
    hit = []

    def corrupt(rank, send):
        if rank == 1 and not hit:                 # rank 1's first write only
            hit.append(send)
            arr = np.frombuffer(send.data, np.float32).copy()
            arr[:3] += 1000.0
            return arr.tobytes()
        return send.data

    ws = co.run_in_memory(n, [count * 4], collective=collective, seed=1, corrupt=corrupt)
    wrongs = [w.results[0].wrong for w in ws]
    assert sum(wrongs) > 0
    if collective in ("all_to_all", "permutation"):
        # only the receiver of that write sees it, 3 elements
        assert wrongs == [3 if r == hit[0].peer else 0 for r in range(n)]


def test_ring_corruption_travels_on():
    # all_reduce: rank 1's first all-gather write reaches ranks 2, 3 and 0, not back to 1
    n, count = 4, 1000

    def corrupt(rank, send):
        if rank == 1 and send.step == n - 1:
            arr = np.frombuffer(send.data, np.float32).copy()
            arr[:3] += 1000.0
            return arr.tobytes()
        return send.data

    ws = co.run_in_memory(n, [count * 4], seed=1, corrupt=corrupt)
    assert [w.results[0].wrong for w in ws] == [3, 0, 3, 3]


def test_expected_results_match_numpy():
    # the reference #wrong is counted against, computed independently here
    n, count, seed = 5, 103, 4
    datas = [co.rank_data(seed, r, 0, count) for r in range(n)]
    total = np.sum(np.stack(datas), axis=0, dtype=np.float32)
    bounds = co.chunk_bounds(count, n)
    targets = co.derangement(seed, n)
    for collective in co.COLLECTIVES:
        perm = collective == "permutation"
        ws = co.run_in_memory(n, [count * 4], collective=collective, seed=seed)
        assert _wrong(ws) == [0] * n
        for r in range(n):
            a, b = bounds[r]
            algo = co._ALGOS[collective](collective, r, n, count, 4 * count, 0, targets if perm else None)
            expected = {"all_reduce": total, "reduce_scatter": total[a:b],
                        "all_gather": np.concatenate([datas[c][x:y] for c, (x, y) in enumerate(bounds)]),
                        "all_to_all": np.concatenate([datas[c][a:b] for c in range(n)]),
                        "permutation": datas[targets.index(r)],
                        "incast": np.concatenate(datas[1:]) if r == 0 else np.empty(0, np.float32)}[collective]
            assert np.array_equal(algo.expected(seed), expected)


# ---- a hand-driven network: per (sender, receiver) FIFO queues -----------------------

class _Net:
    def __init__(self, n, sizes, collective, iterations, targets=None):
        self.n, self.wire, self.acks = n, {}, {}
        self.ws = [co.Workload(r, n, sizes, iterations, 0, 3, post=lambda s, r=r: self._post(r, s),
                               collective=collective, targets=targets) for r in range(n)]

    def _post(self, r, send):
        self.ws[send.peer].recv_region[send.remote_offset:send.remote_offset + len(send.data)] = \
            np.frombuffer(send.data, np.uint8)               # eager placement
        self.wire.setdefault((r, send.peer), deque()).append(send)

    def deliver(self, src, dst):
        send = self.wire[(src, dst)].popleft()
        self.ws[dst].on_arrival(src, send.imm, 0.0)
        self.acks.setdefault((src, dst), deque()).append(send)

    def complete(self, src, dst):
        self.ws[src].on_send_complete(dst, self.acks[(src, dst)].popleft().imm, 0.0)

    def run(self, hold_acks=()):
        """Deliver everything; complete every write except those of (src, dst) in ``hold_acks``."""
        moved = True
        while moved:
            moved = False
            for key, q in list(self.wire.items()):
                if q:
                    self.deliver(*key)
                    moved = True
            for key, q in list(self.acks.items()):
                if q and key not in hold_acks:
                    self.complete(*key)
                    moved = True


def test_all_to_all_arrival_from_next_iteration_is_buffered():
    net = _Net(3, [4 * 30], "all_to_all", iterations=2)
    for w in net.ws:
        w.start(0.0)
    for s, d in [(1, 0), (2, 0), (0, 1), (2, 1)]:       # ranks 0 and 1 finish iteration 0
        net.deliver(s, d)
    assert [len(w.results) for w in net.ws] == [1, 1, 0]
    net.deliver(0, 2)                                     # rank 0's iteration 0 write
    net.deliver(0, 2)                                     # and its iteration 1 write: held
    assert len(net.ws[2]._held) == 1
    net.run()
    assert all(w.done for w in net.ws)
    assert _wrong(net.ws) == [0] * 6


def test_permutation_sender_runs_ahead_of_a_blocked_receiver():
    # one 5-cycle r -> r+1; rank 1's write to rank 2 lands but never completes: rank 0 runs
    # L-1 = 4 iterations ahead of rank 1, rewriting both of its slots at rank 1 twice
    n = 5
    targets = tuple((r + 1) % n for r in range(n))
    net = _Net(n, [4 * 64], "permutation", iterations=8, targets=targets)
    for w in net.ws:
        w.start(0.0)
    net.run(hold_acks={(1, 2)})
    assert [len(w.results) for w in net.ws] == [4, 0, 1, 2, 3]
    assert sorted(k[0] for k in net.ws[1]._held) == [1, 2, 3, 4]    # copied out at rank 1
    net.run()
    assert all(w.done for w in net.ws)
    assert _wrong(net.ws) == [0] * (n * 8)


def test_arrivals_before_start_are_replayed():
    net = _Net(2, [4 * 8], "all_reduce", iterations=1)
    net.ws[0].start(0.0)
    net.deliver(0, 1)                                     # rank 1 has not started
    net.ws[1].start(0.0)
    net.run()
    assert _wrong(net.ws) == [0, 0]


def test_ring_tolerates_a_channel_that_reorders_one_senders_writes():
    net = _Net(3, [4 * 30], "all_gather", iterations=2)
    for w in net.ws:
        w.start(0.0)
    net.deliver(2, 0)                                     # rank 0 posts its step 1 to rank 1
    net.wire[(0, 1)].rotate(1)                            # step 1 overtakes step 0
    net.deliver(0, 1)
    assert list(net.ws[1]._held) == [(0, 0, 1)]
    net.deliver(0, 1)
    assert not net.ws[1]._held
    net.run()
    assert _wrong(net.ws) == [0] * 6


# ---- errors ------------------------------------------------------------------------

def _workload(collective="all_reduce", n=3, rank=0, **kw):
    targets = tuple((r + 1) % n for r in range(n)) if collective == "permutation" else None
    return co.Workload(rank, n, [4 * 12], 1, 0, 0, post=lambda s: None, collective=collective,
                       targets=targets, **kw)


@pytest.mark.parametrize("collective", co.COLLECTIVES)
def test_impossible_arrivals_are_collective_errors(collective):
    w = _workload(collective)
    w.start(0.0)
    src = w.recv_from[0]
    chunk = w._algo.recv_chunk(src, 0)
    stranger = next(p for p in range(3) if p not in w.recv_from)    # only rank 0 itself for a2a
    for args in [(stranger, co.encode_imm(0, 0, chunk)),            # not a sender of ours
                 (src, co.encode_imm(0, 0, (chunk + 1) % 3)),       # wrong chunk
                 (src, co.encode_imm(0, 2 * 3, chunk)),             # no such step
                 (src, co.encode_imm(1, 0, chunk))]:                # iteration 1 of a 1-iteration run
        with pytest.raises(co.CollectiveError):
            w.on_arrival(*args, 0.0)
    w.on_arrival(src, co.encode_imm(0, 0, chunk), 0.0)
    with pytest.raises(co.CollectiveError):                         # duplicate
        w.on_arrival(src, co.encode_imm(0, 0, chunk), 0.0)


def test_duplicate_of_a_held_arrival_and_arrival_after_done():
    w = _workload("all_reduce", n=3)
    w.start(0.0)
    imm = co.encode_imm(0, 1, w._algo.recv_chunk(2, 1))                # step 1 before step 0: held
    w.on_arrival(2, imm, 0.0)
    with pytest.raises(co.CollectiveError):
        w.on_arrival(2, imm, 0.0)
    ws = co.run_in_memory(2, [16])
    with pytest.raises(co.CollectiveError):
        ws[0].on_arrival(1, co.encode_imm(0, 0, 1), 0.0)


def test_completion_errors():
    w = _workload("permutation")
    w.start(0.0)
    with pytest.raises(co.CollectiveError):
        w.on_send_complete(1, co.encode_imm(1, 0, 0), 0.0)          # no such write
    w.on_send_complete(1, co.encode_imm(0, 0, 0), 0.0)
    with pytest.raises(co.CollectiveError):
        w.on_send_complete(1, co.encode_imm(0, 0, 0), 0.0)          # twice
    ring = _workload("all_gather")
    ring.on_send_complete(1, 12345, 0.0)                            # ignored for rings
    with pytest.raises(co.CollectiveError):
        ring.on_send_complete(2, 0, 0.0)                            # rank 2 is not a send_to peer


def test_bad_arguments_raise_value_error():
    post = lambda s: None
    with pytest.raises(ValueError):
        co.Workload(0, 1, [64], 1, 0, 0, post=post)                 # world of 1
    with pytest.raises(ValueError):
        co.Workload(0, 4, [8], 1, 0, 0, post=post)                  # 2 elements < 4 ranks
    with pytest.raises(ValueError):
        co.Workload(0, 4, [64], 1, 0, 0, post=post, collective="broadcast")
    with pytest.raises(ValueError):
        co.Workload(0, 3, [64], 1, 0, 0, post=post, collective="permutation", targets=(0, 2, 1))
    with pytest.raises(ValueError):
        co.Workload(0, 3, [64], 1, 0, 0, post=post, collective="permutation")
    with pytest.raises(ValueError):
        co.Workload(0, 3, [64], 1, 0, 0, post=post, targets=(1, 2, 0))
    with pytest.raises(ValueError):
        co.Workload(0, 3, [64], 1, 0, 0, post=post, recv_region=np.zeros(4, np.uint8))
    with pytest.raises(ValueError):
        co.Workload(3, 3, [64], 1, 0, 0, post=post)
    with pytest.raises(ValueError):
        co.size_sweep(0, 10)
    with pytest.raises(ValueError):
        co.encode_imm(co.SEQ_MOD, 0, 0)
    co.Workload(0, 3, [4], 1, 0, 0, post=post, collective="permutation", targets=(1, 2, 0))


# ---- pure helpers ------------------------------------------------------------------

@given(seq=st.integers(0, co.SEQ_MOD - 1), step=st.integers(0, 2047), chunk=st.integers(0, 2047))
def test_imm_round_trip(seq, step, chunk):
    imm = co.encode_imm(seq, step, chunk)
    assert 0 <= imm < 2**32
    assert co.decode_imm(imm) == (seq, step, chunk)


def test_bus_factors_and_bandwidths():
    n = 8
    assert co.bus_factor("all_reduce", n) == pytest.approx(2 * 7 / 8)
    for c in ("all_gather", "reduce_scatter", "all_to_all"):
        assert co.bus_factor(c, n) == pytest.approx(7 / 8)
    assert co.bus_factor("permutation", n) == 1.0
    with pytest.raises(ValueError):
        co.bus_factor("broadcast", n)
    algbw, busbw = co.bus_bandwidth(1_000_000, 0.01, 4)
    assert algbw == pytest.approx(1e8) and busbw == pytest.approx(1e8 * 2 * 3 / 4)
    algbw, busbw = co.bus_bandwidth(1_000_000, 0.01, 4, "all_to_all")
    assert busbw == pytest.approx(1e8 * 3 / 4)
    ws = co.run_in_memory(4, [4 * 100], collective="all_gather", iterations=2)
    s = ws[0].summary()
    assert s["collective"] == "all_gather"
    row = s["sizes"][0]
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 3 / 4)


def test_size_sweep():
    assert co.size_sweep(8, 64, 2) == [8, 16, 32, 64]
    assert co.size_sweep(1024, 5000, 4) == [1024, 4096]


@pytest.mark.parametrize("n", range(2, 40))
def test_derangement_has_no_fixed_point_and_is_seeded(n):
    for seed in range(5):
        t = co.derangement(seed, n)
        assert sorted(t) == list(range(n))
        assert all(t[r] != r for r in range(n))
        assert co.derangement(seed, n) == t
    if n >= 4:
        assert len({co.derangement(seed, n) for seed in range(10)}) > 1


def test_derangement_rejects_tiny_worlds():
    with pytest.raises(ValueError):
        co.derangement(0, 1)


def test_peers():
    assert co.peers("all_reduce", 0, 4) == ((1,), (3,))
    assert co.peers("reduce_scatter", 1, 2) == ((0,), (0,))
    assert co.peers("all_to_all", 2, 4) == ((0, 1, 3), (0, 1, 3))
    assert co.peers("permutation", 0, 3, targets=(2, 0, 1)) == ((2,), (1,))


@pytest.mark.parametrize("collective", co.COLLECTIVES)
def test_region_layout(collective):
    n, sizes = 4, [4 * 1001, 4 * 66]
    targets = co.derangement(0, n) if collective == "permutation" else None
    w = co.Workload(0, n, sizes, 1, 0, 0, post=lambda s: None, collective=collective, targets=targets)
    stride = 4 * (1001 if collective in ("permutation", "incast") else math.ceil(1001 / n))
    assert w.slot_size_bytes() == stride
    slots = 2 if collective == "permutation" else 2 * (n - 1)
    assert w.recv_region_bytes() == slots * stride
    # every write of two consecutive iterations of the first size, over all senders, is disjoint
    spans = []
    for it in (0, 1):
        for r in range(n):
            algo = co._ALGOS[collective](collective, r, n, 1001, stride, it, targets)
            algo.prepare(0)
            spans += [(s.peer, s.remote_offset, s.remote_offset + len(s.data)) for s in algo.start()]
            for step in range(1, algo.steps):
                s = algo._send_step(step)
                spans.append((s.peer, s.remote_offset, s.remote_offset + len(s.data)))
    for dst in range(n):
        mine = sorted((a, b) for p, a, b in spans if p == dst)
        assert all(b <= w.recv_region_bytes() for _, b in mine)
        if collective != "all_reduce":                # all_reduce reuses its 2(n-1) slots per step
            assert all(b1 <= a2 for (_, b1), (a2, _) in zip(mine, mine[1:]))


# ---- over the deterministic MRC multipath simulator ------------------------------

def _ring_over_sim(world_size, size_bytes, *, iterations, paths_for):
    """Connection r -> r+1 is one MultipathNetwork (tx QP of r, rx QP of r+1)."""
    from agents.mrc.qp import QP, connect_pair
    from agents.mrc.sim import MultipathNetwork
    from agents.mrc.types import QPAttr, QPConfig, WCOpcode

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
    recvs = QPAttr().max_wimm_dest
    for r in range(world_size):
        a, b = tx[r], rx[(r + 1) % world_size]
        paths = paths_for(r)
        connect_pair(a, b, range(len(paths)))
        for i in range(recvs):                   # receives posted up front, reposted on use
            b.post_recv(i)
        nets.append(MultipathNetwork(a, b, paths, seed=r))
    ev_events = []
    for w in workloads:
        w.start(0.0)
    now = 0.0
    for _ in range(2_000_000):
        for net in nets:
            net.now = now
            net.drain()
        times = [t for t in (net.next_time() for net in nets) if t is not None]
        if all(w.done for w in workloads) or not times:
            break
        now = max(min(times), now)
        for net in nets:
            t = net.next_time()
            net.now = now
            if t is not None and t <= now:
                net.step()
        for r in range(world_size):
            for qp in (tx[r], rx[r]):
                while (ev := qp.next_event()) is not None:
                    if getattr(ev, "opcode", None) is WCOpcode.RECV_RDMA_WITH_IMM:
                        qp.post_recv(ev.wr_id)
                        workloads[r].on_arrival((r - 1) % world_size, ev.imm, now)
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
    assert _wrong(ws) == [0] * 16
    assert ws[0].results[0].t_end < 0.004 < end           # the path died mid-run
    assert any(r == 1 and ev.ev == 1 and ev.new is EVState.ASSUMED_BAD for r, ev in ev_events)


def test_incast_senders_are_gated_by_completions_and_the_root_gets_every_buffer():
    """incast: rank 0 receives n-1 whole buffers; a sender's iteration ends when its write is
    complete (nothing else bounds its lead); busbw is the rate into the root."""
    n = 5
    assert co.peers("incast", 0, n) == ((), (1, 2, 3, 4)) and co.peers("incast", 3, n) == ((0,), ())
    assert co.bus_factor("incast", n) == n - 1
    posted = []
    w = co.Workload(2, n, [4 * 10], 3, 0, 1, post=posted.append, collective="incast")
    w.start(0.0)
    assert [s.peer for s in posted] == [0] and not w.results       # waits for the completion
    w.on_send_complete(0, posted[0].imm, 1.0)
    assert len(w.results) == 1 and len(posted) == 2
    with pytest.raises(co.CollectiveError):
        w.on_send_complete(0, posted[0].imm, 2.0)                   # completed already


@given(st.integers(1, 300), st.integers(0, 1000), st.integers(1, 40), st.data())
def test_count_wrong_periodic_equals_count_wrong_of_the_materialised_expectation(n, start, p, data):
    from agents.collectives.data import _periodic, count_wrong, count_wrong_periodic
    period = np.arange(p, dtype=np.float32)
    result = _periodic(period, start, start + n).copy()
    for j in data.draw(st.lists(st.integers(0, n - 1), max_size=5)):
        result[j] = data.draw(st.sampled_from([np.nan, -1.0, result[j]]))
    assert count_wrong_periodic(result, period, start) == count_wrong(result, _periodic(period, start, start + n))


def test_prefetch_makes_one_pattern_a_call_then_nothing():
    from agents.collectives import data
    seed, it, n, count = 987654, 3, 5, 1 << 12
    made = [data.prefetch(seed, it, n, count) for _ in range(n + 2)]
    assert made == [True] * n + [False, False]
    assert all((seed, r, it, count) in data._PATTERNS for r in range(n))
    assert data._pattern(seed, 2, it, count) is data._PATTERNS[(seed, 2, it, count)]   # what the check uses


@pytest.mark.parametrize("count", [1, 17, 4096, 65521, 200_000])
def test_each_iteration_has_other_data_and_its_sum_is_the_rotated_total(count):
    from agents.collectives import data
    seed, n = 4242, 5
    for it in (0, 1, 7):
        datas = [co.rank_data(seed, r, it, count) for r in range(n)]
        assert np.array_equal(np.sum(datas, axis=0, dtype=np.float32), co.expected_sum(seed, it, n, count))
    if count > 1:
        a, b = co.rank_data(seed, 2, 3, count), co.rank_data(seed, 2, 4, count)
        assert np.count_nonzero(a != b) > count // 2          # about 16 of 17 elements differ
    assert not np.array_equal(co.rank_data(seed, 0, 0, count), co.rank_data(seed, 1, 0, count)) or count == 1
    assert data.ITERATION_SHIFT % data.DATA_PERIOD != 0
