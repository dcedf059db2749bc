"""``mrc``: a torch.distributed backend whose collectives run over the testbed's MRC QPs.

A training script inside an emulated host calls ``torch.distributed.init_process_group("mrc")``
with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: the store) and
``TESTBED_MRC_JOB``, the path of the rank's job spec (:mod:`agents.torch_mrc.config`). The
backend reuses what the agents have: the ring's :class:`agents.channels.qp.QPChannel` over the
scenario's EVs (SRv6 paths), the ring algorithm (:class:`agents.collectives.algorithms._Ring`,
on the caller's tensors), the immediates (:func:`agents.collectives.encode_imm`) and the event
loop (:class:`agents.net.loop.EventLoop`), with a progress thread
(:mod:`agents.torch_mrc.engine`) and the agents' samples and events
(:mod:`agents.torch_mrc.report`), so the runner measures a real job as it measures an agent.

Registration: :func:`register` (``Backend.register_backend("mrc", creator, devices=["cpu"])``;
torch 1.13 has no ``devices``). :func:`autoload` is the ``torch.backends`` entry point that
torch >= 2.5 calls during ``import torch`` (``torch._import_device_backends``; off with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), so an unmodified script's ``init_process_group("mrc")``
works once this package is installed. Importing this package does not import torch.

Collectives (:mod:`agents.torch_mrc.process_group`): allreduce (ReduceOp.SUM; float32, float64,
the integers, ...), broadcast (any dtype, as bytes), allgather and all_gather_into_tensor
(equal sizes), barrier; everything else raises ``NotImplementedError("mrc backend: <op> is not
supported")``. Large tensors are cut into segments whose every write fits one receive slot
(allreduce: ``n`` slots' worth a segment; :mod:`agents.torch_mrc.segments`), so the receive region
stays ``2(n-1)`` slots of ``TESTBED_MRC_SLOT_BYTES`` (1 MiB by default, less from 33 ranks on).
Events go to the pipe in ``TESTBED_REPORT_FD`` when it is set.

Numerics: the ring adds in ring order. Chunk ``c`` of a segment is summed starting at rank ``c``:
``((x[c] + x[c+1]) + x[c+2]) + ... + x[c-1]`` (ranks mod n), so each chunk's order starts at a
different rank, and the order is neither rank order nor Gloo's (its ring or halving-doubling
schedule). Float sums are therefore not bit-identical to Gloo's: each order is within
``(n-1) * u * sum|x_i|`` of the exact sum (u: the unit roundoff, 2**-24 for float32), so the two
are within twice that. Measured (tests/unit/test_torch_mrc.py, 3 ranks, 262144 float32 of
N(0, 10) each): 20% of the elements differ, by at most 1.9e-7 * sum|x_i| (bound 2.4e-7); DDP
after 5 SGD steps on both: parameters within 1.5e-8. Integer sums, and float sums of
integer-valued data below 2**24 (float32) or 2**53 (float64), are exact in every order, and every
rank gets the same bits.
"""
from __future__ import annotations

import logging

from .config import ENV_JOB, ENV_REPORT_FD, ENV_SLOT_BYTES, MRCConfigError

log = logging.getLogger(__name__)

BACKEND = "mrc"
DEVICES = ("cpu",)

__all__ = ["BACKEND", "ENV_JOB", "ENV_REPORT_FD", "ENV_SLOT_BYTES", "MRCConfigError", "autoload", "create",
           "register"]


def create(store, rank: int, world_size: int, timeout):
    """The backend's creator: :func:`agents.torch_mrc.process_group.create` (imports torch)."""
    from .process_group import create as create_group
    return create_group(store, rank, world_size, timeout)


def register() -> None:
    """Register the ``mrc`` backend with torch.distributed (for CPU tensors); idempotent. Imports
    torch.distributed. RuntimeError if torch has no distributed support."""
    import torch.distributed as dist
    if not dist.is_available():
        raise RuntimeError("mrc backend: this torch has no torch.distributed")
    try:
        dist.Backend.register_backend(BACKEND, create, devices=list(DEVICES))
    except TypeError:                     # torch < 2.0: no devices argument
        dist.Backend.register_backend(BACKEND, create)


def autoload() -> None:
    """The ``torch.backends`` entry point: :func:`register`, which never raises here (a failure is
    logged at debug level, and ``init_process_group("mrc")`` then says the backend is unknown).
    Cheap: torch.distributed is imported already when torch calls it."""
    try:
        register()
    except Exception as exc:  # noqa: BLE001 - import torch must never fail because of us
        log.debug("mrc backend: not registered: %r", exc)
