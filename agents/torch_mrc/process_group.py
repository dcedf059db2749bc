"""The torch side of the mrc backend: :class:`MRCProcessGroup`, a Python
``torch.distributed.ProcessGroup`` over an :class:`agents.torch_mrc.engine.Engine`, and
:func:`create`, the creator that ``torch.distributed.Backend.register_backend`` is given.

The pattern is torch's own for Python process groups (``test/distributed/test_c10d_pypg.py``):
the group subclasses ``ProcessGroup`` (constructed as ``ProcessGroup(rank, size)``; the
``(store, rank, size)`` form does not reach the Python trampoline in torch 2.13), each collective
returns a ``Work`` subclass whose ``get_future()`` is a ``torch.futures.Future`` that the progress
thread completes (``set_result`` / ``set_exception`` from that thread). ``wait()`` waits on the
future and raises its error. (``_create_work_from_future`` would not: its ``wait()`` returns True
for a future that holds an exception.) DDP calls ``broadcast`` (parameters at construction),
``allgather`` (the shape check) and ``allreduce`` (gradient buckets, through ``get_future()``).

Tensors: CPU, strided; a non-contiguous tensor is worked on as a contiguous copy, written back
before the future completes. allreduce takes the numeric dtypes numpy has (not bfloat16) and
ReduceOp.SUM only; broadcast and allgather move any dtype as bytes. A tensor must not change
while its op is pending (as with every backend); the data of each write is copied when posted.
"""
from __future__ import annotations

import atexit
import logging
import threading
import weakref
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from .config import job_from_env, report_fd_from_env
from .engine import Engine
from .segments import AllGatherOp, AllReduceOp, BroadcastOp, Op, barrier_op

log = logging.getLogger(__name__)

BACKEND_NAME = "mrc"
_READY_KEY = "mrc/ready/{gen}/{rank}"
_IDLE_KEY = "mrc/idle/{gen}/{rank}"
_GEN_KEY = "mrc/generation/{rank}"
_GROUPS: "weakref.WeakSet[MRCProcessGroup]" = weakref.WeakSet()


def create(store, rank: int, world_size: int, timeout: timedelta) -> "MRCProcessGroup":
    """The ``mrc`` backend's creator (``register_backend``'s ``func``): this rank's job spec from
    ``TESTBED_MRC_JOB`` (:func:`agents.torch_mrc.config.job_from_env`), its engine started, then a
    store barrier (every rank sets ``mrc/ready/<generation>/<rank>`` in ``store`` and waits for all
    within ``timeout``), so that no rank writes to a peer whose UDP port is not bound yet.
    Raises MRCConfigError / JobSpecError for the configuration, OSError for the socket or the
    samples file, the store's error on a rendezvous timeout."""
    spec = job_from_env(rank, world_size)
    engine = Engine(spec, report_fd=report_fd_from_env())
    engine.start()
    try:
        gen = store.add(_GEN_KEY.format(rank=rank), 1)
        store.set(_READY_KEY.format(gen=gen, rank=rank), b"1")
        store.wait([_READY_KEY.format(gen=gen, rank=r) for r in range(world_size)], timeout)
    except BaseException:
        engine.close(0.0)
        raise
    log.info("mrc backend: rank %d of %d up (%s engine, UDP port %d, slot %d bytes)", rank, world_size,
             spec.engine, engine.channel.endpoint.port, engine.stride)
    return MRCProcessGroup(engine, store, rank, world_size, gen)


class _Work(dist.Work):
    """A pending collective: ``get_future()`` is completed by the progress thread with the op's
    result or its error; ``wait()`` waits for it and raises that error (the backend's MRCError, a
    RuntimeError), or RuntimeError after ``timeout`` (a timedelta; None or 0: no limit)."""

    def __init__(self, future: torch.futures.Future, finished: threading.Event, what: str):
        super().__init__()
        self._future, self._finished, self._what = future, finished, what

    def wait(self, timeout=None) -> bool:
        limit_s = timeout.total_seconds() if isinstance(timeout, timedelta) else None
        if not self._finished.wait(limit_s if limit_s else None):
            raise RuntimeError(f"mrc backend: {self._what} not complete within {limit_s} s")
        self._future.wait()
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return self._finished.is_set()

    def is_success(self) -> bool:
        if not self._finished.is_set():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001 - the op's error: not a success
            return False
        return True


class MRCProcessGroup(dist.ProcessGroup):
    """The ``mrc`` process group of one rank (module docstring); made by :func:`create`."""

    def __init__(self, engine: Engine, store, rank: int, world_size: int, generation: int):
        super().__init__(rank, world_size)
        self._engine, self._store, self._gen = engine, store, generation
        self._rank, self._size = rank, world_size
        _GROUPS.add(self)

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"MRCProcessGroup(rank={self._rank}, size={self._size}, engine={self._engine.spec.engine})"

    # ---- the supported collectives ------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        """Sum ``tensors`` (equal size and dtype) over every rank and over the list; every tensor
        gets the total. NotImplementedError for a ReduceOp other than SUM, TypeError for a dtype
        numpy lacks (bfloat16), ValueError for tensors that differ or are not on the CPU."""
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if reduce_op != dist.ReduceOp.SUM:
            raise NotImplementedError(f"mrc backend: allreduce with {_op_name(reduce_op)} is not supported "
                                      "(ReduceOp.SUM only)")
        if not tensors:
            raise ValueError("mrc backend: allreduce of no tensor")
        staged = [_Staged(t, "allreduce", as_bytes=False) for t in tensors]
        return self._run(lambda done: AllReduceOp([s.array for s in staged], self._size,
                                                  self._engine.stride, done), staged, tensors)

    def broadcast(self, tensors, opts=None):
        """Copy ``tensors[opts.rootTensor]`` of rank ``opts.rootRank`` into every tensor of every
        rank (any dtype, as bytes; equal sizes). ValueError for a bad root or mismatched tensors."""
        root = opts.rootRank if opts is not None else 0
        index = opts.rootTensor if opts is not None else 0
        if not 0 <= index < len(tensors):
            raise ValueError(f"mrc backend: broadcast: rootTensor {index} of {len(tensors)} tensors")
        staged = [_Staged(t, "broadcast", as_bytes=True) for t in tensors]
        src = staged[index]
        others = [s for i, s in enumerate(staged) if i != index]

        def make(done):
            def copy_then(exc):
                if exc is None:
                    for s in others:
                        s.array[:] = src.array
                done(exc)
            _check_sizes(staged, "broadcast")
            return BroadcastOp(src.array, root, self._size, self._engine.stride, copy_then)
        return self._run(make, staged, tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        """``output_tensors[0][c]`` gets rank ``c``'s ``input_tensors[0]`` (one input tensor; every
        output tensor of its size and dtype). ValueError otherwise."""
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise ValueError("mrc backend: allgather takes one input tensor and one list of outputs")
        inp = _Staged(input_tensors[0], "allgather", as_bytes=True)
        outs = [_Staged(t, "allgather", as_bytes=True) for t in output_tensors[0]]
        return self._run(lambda done: AllGatherOp(inp.array, [s.array for s in outs], self._size,
                                                  self._engine.stride, done), outs, output_tensors)

    def all_gather_single(self, output, input, opts=None):
        """``output`` (``world_size`` times ``input``'s elements) gets every rank's ``input`` in
        rank order (``all_gather_into_tensor``). ValueError for mismatched sizes or dtypes."""
        if output.numel() != input.numel() * self._size or output.dtype != input.dtype:
            raise ValueError(f"mrc backend: all_gather_into_tensor: output of {output.numel()} {output.dtype} "
                             f"for {self._size} inputs of {input.numel()} {input.dtype}")
        inp = _Staged(input, "allgather", as_bytes=True)
        out = _Staged(output, "allgather", as_bytes=True)
        return self._run(lambda done: AllGatherOp(inp.array, np.split(out.array, self._size), self._size,
                                                  self._engine.stride, done), [out], [output])

    _allgather_base = all_gather_single

    def barrier(self, opts=None):
        """Complete once every rank has entered the barrier (an all-gather of one byte)."""
        return self._run(lambda done: barrier_op(self._size, done), [], None)

    def _run(self, make, staged: list["_Staged"], result) -> _Work:
        """Make the op (``make(on_done)``), submit it, return its Work. On the progress thread,
        ``on_done`` writes non-contiguous tensors back and completes the future: its callbacks
        (DDP's, a comm hook's ``then``) run there, so they must not wait for another collective."""
        future = torch.futures.Future()
        finished = threading.Event()

        def done(exc):
            try:
                if exc is None:
                    for s in staged:
                        s.write_back()
                    future.set_result(result)
                else:
                    future.set_exception(exc)
            except Exception:  # noqa: BLE001 - a failing callback must not stop the progress thread
                log.exception("mrc backend: completing a future")
            finally:
                finished.set()
        try:
            op: Op = make(done)
        except ValueError as exc:
            raise ValueError(f"mrc backend: {exc}") from None
        self._engine.submit(op)
        return _Work(future, finished, op.name)

    # ---- lifecycle -------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Wait (at most the job spec's ``linger_s``) until this rank's ops are done and its writes
        acknowledged, and until the previous rank says the same of its own (through the store), so
        that no peer is left retransmitting into a closed port; then close the engine. Idempotent;
        also at interpreter exit."""
        engine = self._engine
        if engine.closed:
            return
        linger = timedelta(seconds=engine.spec.linger_s)
        prev = (self._rank - 1) % self._size
        try:
            if engine.drain(linger.total_seconds()):
                self._store.set(_IDLE_KEY.format(gen=self._gen, rank=self._rank), b"1")
                self._store.wait([_IDLE_KEY.format(gen=self._gen, rank=prev)], linger)
        except Exception as exc:  # noqa: BLE001 - a peer or the store gone already: close anyway
            log.info("mrc backend: rank %d: shutdown without rank %d's word: %s", self._rank, prev, exc)
        engine.close(0.0)

    def abort(self) -> None:
        """Close the engine at once (ops pending fail)."""
        self._engine.close(0.0)


UNSUPPORTED = ("reduce", "reduce_scatter", "reduce_scatter_single", "_reduce_scatter_base",
               "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced", "allreduce_coalesced",
               "allgather_coalesced", "all_gather_single_coalesced", "allgather_into_tensor_coalesced",
               "alltoall", "alltoall_base", "all_to_all_single", "gather", "scatter", "send", "recv",
               "recv_anysource", "monitored_barrier", "split_group", "merge_remote_group")
"""ProcessGroup methods the backend refuses with NotImplementedError("mrc backend: <op> is not
supported"); the base class would fail them with "No backend type associated with device type cpu"."""


def _refusal(name: str):
    def refuse(self, *args, **kwargs):
        raise NotImplementedError(f"mrc backend: {name} is not supported")
    refuse.__name__ = name
    return refuse


for _name in UNSUPPORTED:
    setattr(MRCProcessGroup, _name, _refusal(_name))


def _op_name(reduce_op) -> str:
    op = getattr(reduce_op, "op", reduce_op)
    return f"ReduceOp.{getattr(op, 'name', op)}"


def _check_sizes(staged: list["_Staged"], what: str) -> None:
    sizes = {s.array.size for s in staged}
    if len(sizes) > 1:
        raise ValueError(f"{what}: tensors of different sizes {sorted(sizes)} bytes")


class _Staged:
    """A tensor as a 1-D numpy array on its memory (elements, or bytes with ``as_bytes``); a
    non-contiguous tensor through a contiguous copy that :meth:`write_back` copies back."""

    def __init__(self, tensor: torch.Tensor, what: str, *, as_bytes: bool):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"mrc backend: {what}: expected a tensor, got {type(tensor).__name__}")
        if tensor.device.type != "cpu" or tensor.layout != torch.strided:
            raise ValueError(f"mrc backend: {what}: tensors must be dense and on the CPU, got "
                             f"{tensor.layout} on {tensor.device}")
        self.tensor = tensor
        work = tensor.detach()
        self.copy = None if work.is_contiguous() else work.contiguous()
        flat = (work if self.copy is None else self.copy).reshape(-1)
        if as_bytes:
            flat = flat.view(torch.uint8)
        try:
            self.array = flat.numpy()
        except TypeError:
            raise TypeError(f"mrc backend: {what} of {tensor.dtype} is not supported (a dtype numpy lacks)") \
                from None

    def write_back(self) -> None:
        if self.copy is not None:
            with torch.no_grad():
                self.tensor.copy_(self.copy)


@atexit.register
def _shutdown_all() -> None:
    """At interpreter exit (before the engines' own handler: atexit runs in reverse order):
    shut down every group that destroy_process_group did not."""
    for group in list(_GROUPS):
        try:
            group.shutdown()
        except Exception:  # noqa: BLE001 - exit goes on
            log.exception("mrc backend: shutdown at exit")
