"""The in-memory harness: ``world_size`` :class:`~.workload.Workload` objects joined by perfect channels."""
from __future__ import annotations

import random
from collections import deque
from typing import Callable, Iterable, Sequence

import numpy as np

from .algorithms import Send, derangement
from .workload import Workload


def run_in_memory(world_size: int, sizes: Iterable[int], *, collective: str = "all_reduce",
                  targets: Sequence[int] | None = None, iterations: int = 1, warmup: int = 0,
                  seed: int = 0, corrupt: Callable[[int, Send], bytes] | None = None,
                  eager_placement: bool = False,
                  rng: random.Random | None = None) -> list[Workload]:
    """Run ``world_size`` Workloads joined by perfect in-memory channels; return them.

    ``targets`` (permutation) defaults to ``derangement(seed, world_size)``.
    ``corrupt(rank, send)`` may return replacement bytes for a write (tests).
    A sender's writes to one receiver arrive in the order posted; a write's
    completion is reported after the receiver's ``on_arrival`` returned. Without
    ``rng`` every event runs in the order it was queued; with ``rng`` the next
    event is a random one of the (sender, receiver) queues of arrivals and of
    completions, so senders interleave and completions lag arbitrarily.
    ``eager_placement``: the data lands in the peer's region when posted, long
    before the peer consumes the arrival (the worst case for slot reuse).
    """
    if collective == "permutation" and targets is None:
        targets = derangement(seed, world_size)
    queues: dict[tuple[str, int, int], deque] = {}     # (kind, sender, receiver) -> Sends
    order: deque = deque()                             # keys in queueing order (rng None)
    workloads: list[Workload] = []

    def push(kind: str, rank: int, send: Send) -> None:
        key = (kind, rank, send.peer)
        queues.setdefault(key, deque()).append(send)
        if rng is None:
            order.append(key)

    def place(rank: int, send: Send) -> None:
        data = corrupt(rank, send) if corrupt else send.data
        region = workloads[send.peer].recv_region
        region[send.remote_offset:send.remote_offset + len(data)] = np.frombuffer(data, dtype=np.uint8)

    for rank in range(world_size):
        def post(send: Send, rank=rank) -> None:
            if eager_placement:
                place(rank, send)
            push("arrive", rank, send)
        workloads.append(Workload(rank, world_size, list(sizes), iterations, warmup, seed, post,
                                  collective=collective, targets=targets))
    for w in workloads:
        w.start(0.0)
    clock = 0.0
    while queues:
        key = order.popleft() if rng is None else rng.choice(list(queues))
        kind, rank, peer = key
        send = queues[key].popleft()
        if not queues[key]:
            del queues[key]
        clock += 1e-6
        if kind == "arrive":
            if not eager_placement:
                place(rank, send)
            workloads[peer].on_arrival(rank, send.imm, clock)
            push("complete", rank, send)
        else:
            workloads[rank].on_send_complete(peer, send.imm, clock)
    return workloads
