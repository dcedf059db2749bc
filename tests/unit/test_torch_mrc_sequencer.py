"""The mrc backend's sans-I/O core (agents.torch_mrc.segments, .sequencer) joined in memory: no
torch, no sockets. Ranks interleave at random, submit their ops at different times (so writes of
ops a rank has not seen yet arrive early), and every write lands in the receiver's slot the
moment it is posted (the worst case for slot reuse)."""
from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest

from agents.collectives import CollectiveError, encode_imm
from agents.torch_mrc.segments import AllGatherOp, AllReduceOp, BroadcastOp, barrier_op
from agents.torch_mrc.sequencer import Sequencer


class Ring:
    """``n`` Sequencers joined by perfect in-memory connections r -> r+1."""

    def __init__(self, n: int, stride: int, rng: random.Random):
        self.n, self.stride, self.rng = n, stride, rng
        self.regions = [np.zeros(2 * (n - 1) * stride, np.uint8) for _ in range(n)]
        self.links: dict[tuple[str, int], deque] = {}
        self.seqs = [Sequencer(r, n, stride, self.regions[r], post=lambda s, r=r: self._post(r, s))
                     for r in range(n)]

    def _post(self, rank: int, send) -> None:
        assert send.peer == (rank + 1) % self.n and len(send.data) <= self.stride
        region = self.regions[send.peer]
        region[send.remote_offset:send.remote_offset + len(send.data)] = np.frombuffer(send.data, np.uint8)
        self.links.setdefault(("arrive", rank), deque()).append(send)

    def step(self) -> bool:
        """Deliver one arrival or completion, chosen at random; False when nothing is in flight."""
        keys = [k for k, q in self.links.items() if q]
        if not keys:
            return False
        kind, rank = key = self.rng.choice(keys)
        send = self.links[key].popleft()
        if kind == "arrive":
            self.seqs[send.peer].on_arrival(rank, send.imm)
            self.links.setdefault(("complete", rank), deque()).append(send)
        else:
            self.seqs[rank].on_send_complete()
        return True

    def run(self, submits: list[list]) -> None:
        """``submits[r]``: rank r's ops in order, each submitted when the dice say so (each rank
        its own pace: some submit everything at once, some lag behind their peers)."""
        todo = [deque(ops) for ops in submits]
        pace = [self.rng.choice((0.02, 0.3, 1.0)) for _ in range(self.n)]
        while True:
            ready = [r for r in range(self.n) if todo[r] and self.rng.random() < pace[r]]
            if ready or (not any(self.links.values()) and any(todo)):
                r = self.rng.choice(ready or [r for r in range(self.n) if todo[r]])
                self.seqs[r].submit(todo[r].popleft())
            elif not self.step() and not any(todo):
                return


def _done(log: list, name: str):
    return lambda exc: log.append((name, exc))


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("seed", range(4))
def test_mixed_ops_are_exact_under_random_interleaving(n, seed):
    rng = random.Random(seed)
    stride = 64                     # bytes: every op below is several segments
    ring = Ring(n, stride, rng)
    gen = np.random.default_rng(seed)
    inputs = [[gen.integers(-100, 100, size=size).astype(dt) for dt, size in
               ((np.float32, 1000), (np.int64, 7), (np.float64, 333), (np.int32, 1))] for _ in range(n)]
    bcast = [gen.integers(0, 255, size=517, dtype=np.uint8) if r == n - 1 else np.zeros(517, np.uint8)
             for r in range(n)]
    source = bcast[n - 1].copy()
    gathered = [[np.full(50, -1.0) for _ in range(n)] for _ in range(n)]
    mine = [np.arange(50, dtype=np.float64) + 1000 * r for r in range(n)]
    logs: list[list] = [[] for _ in range(n)]
    submits = []
    for r in range(n):
        ops = [AllReduceOp([a], n, stride, _done(logs[r], f"ar{i}")) for i, a in enumerate(inputs[r])]
        ops.insert(2, BroadcastOp(bcast[r], n - 1, n, stride, _done(logs[r], "bc")))
        ops.insert(3, barrier_op(n, _done(logs[r], "barrier")))
        ops.append(AllGatherOp(mine[r], gathered[r], n, stride, _done(logs[r], "ag")))
        ops.append(AllReduceOp([np.zeros(0, np.float32)], n, stride, _done(logs[r], "empty")))
        submits.append(ops)
    expected = [sum(inputs[r][i].astype(np.float64) for r in range(n)) for i in range(4)]
    ring.run(submits)
    for r in range(n):
        assert logs[r] == [("ar0", None), ("ar1", None), ("bc", None), ("barrier", None), ("ar2", None),
                           ("ar3", None), ("ag", None), ("empty", None)]
        for i in range(4):
            np.testing.assert_array_equal(inputs[r][i], expected[i].astype(inputs[r][i].dtype))
        np.testing.assert_array_equal(bcast[r], source)
        for c in range(n):
            np.testing.assert_array_equal(gathered[r][c], mine[c])
        assert ring.seqs[r].idle


def test_several_arrays_are_summed_over_the_list_too():
    """Gloo's semantics for an allreduce of several tensors: one total, in every tensor."""
    n, ring = 3, Ring(3, 1 << 10, random.Random(1))
    arrays = [[np.full(10, r + 1.0, np.float32), np.full(10, 10.0 * (r + 1), np.float32)] for r in range(n)]
    ring.run([[AllReduceOp(arrays[r], n, 1 << 10, lambda exc: None)] for r in range(n)])
    for r in range(n):
        for a in arrays[r]:
            np.testing.assert_array_equal(a, np.full(10, 66.0, np.float32))


def test_writes_wait_for_a_free_slot():
    """A rank never has more than 2(n-1) writes incomplete: the slot of write k is free again."""
    n, stride = 3, 8
    ring = Ring(n, stride, random.Random(3))
    most = [0]
    orig = ring._post

    def post(rank, send):
        seq = ring.seqs[rank]
        most[0] = max(most[0], seq.posted - seq.completed)
        orig(rank, send)
    ring._post = post
    datas = [np.arange(4000, dtype=np.uint8) if r == 0 else np.zeros(4000, np.uint8) for r in range(n)]
    ring.run([[BroadcastOp(datas[r], 0, n, stride, lambda exc: None)] for r in range(n)])
    assert most[0] == 2 * (n - 1)
    assert all(np.array_equal(d, datas[0]) for d in datas)


def test_unexpected_arrivals_raise():
    n, stride = 3, 64
    region = np.zeros(4 * stride, np.uint8)
    seq = Sequencer(1, n, stride, region, post=lambda s: None)
    seq.submit(AllReduceOp([np.ones(30, np.float32)], n, stride, lambda exc: None))
    with pytest.raises(CollectiveError, match="not an arrival of segment 0"):
        seq.on_arrival(0, encode_imm(0, 0, 2))          # step 0 from rank 0 carries chunk 0
    seq.on_arrival(0, encode_imm(0, 0, 0))
    with pytest.raises(CollectiveError, match="finished"):
        seq.on_arrival(0, encode_imm(1000, 0, 0))       # seq from the past


def test_fail_completes_every_pending_op():
    n, stride = 3, 64
    seq = Sequencer(0, n, stride, np.zeros(4 * stride, np.uint8), post=lambda s: None)
    log: list = []
    seq.submit(AllReduceOp([np.ones(30, np.float32)], n, stride, _done(log, "a")))
    seq.submit(barrier_op(n, _done(log, "b")))
    boom = RuntimeError("qp error")
    seq.fail(boom)
    assert log == [("a", boom), ("b", boom)] and seq.pending == 0
