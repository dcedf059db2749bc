"""The mrc backend's progress thread: one rank's QP channel, event loop and op sequence. No torch.

:class:`Engine` opens the ring's :class:`agents.channels.qp.QPChannel` (``open_channel`` with the
rank's JobSpec; ``send_to`` = [r+1], ``recv_from`` = [r-1]) on an
:class:`agents.net.loop.EventLoop` with a receive region of ``2(n-1)`` slots
(:mod:`agents.torch_mrc.sequencer`), and a thread that owns all three and runs continuously, so
that SACKs, retransmissions and EV probes are served while the trainer computes. Callers
:meth:`Engine.submit` ops (:mod:`agents.torch_mrc.segments`) from any thread: the op is queued
and the thread woken through a socketpair registered as a loop reader; the op's ``on_done`` runs
on the progress thread.

The loop is the ``selectors`` one even for the native engine (``engine: native``: the QPs and the
per-packet work in C, :class:`agents.net.native_udp.NativeEndpoint`, served through its reader
and timer callbacks). The native loop's C wait (``agents/mrc/core/mrcn_poller.h``) holds the GIL
while it sleeps in epoll: a pure-Python trainer thread beside it ran at 13% of its speed (measured
here, a progress thread waiting 50 ms at a time), against 100% beside ``selectors``, whose
``select`` releases the GIL. ``rx_hold_s`` applies as in an agent.

Every ``sample_interval_s`` the thread writes a sample, and EV transitions and a QP error are
reported as events (:mod:`agents.torch_mrc.report`). A QP in ERR (OCP MRC 1.0, mrc.h: its
``retry.linear_cnt`` and ``retry.exp_cnt`` exhausted; :class:`QPChannelError`) fails the pending op
and every later one with :class:`MRCError` (a RuntimeError) naming the rank, the peer and the
reason (DDP then raises in the trainer: the "job crash"), after the ``qp_error`` event.

:meth:`Engine.close` (idempotent; also at interpreter exit) lets the thread run until every op is
done and every write acknowledged, for at most ``linger_s``, then writes the last sample and
closes the channel.
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import socket
import threading
import time
import weakref
from collections import deque

import numpy as np

from ..channels import open_channel
from ..channels.qp import QPChannelError
from ..collectives import CollectiveError
from ..collectives.algorithms import Send
from ..jobspec import JobSpec
from ..net.loop import EventLoop
from .config import slot_bytes
from .report import EventReporter, SampleWriter
from .segments import Op
from .sequencer import Sequencer

log = logging.getLogger(__name__)

THREAD_NAME = "mrc-progress"
"""The progress thread's name in the kernel (``comm``, at most 15 bytes)."""
PR_SET_NAME = 15   # prctl(2)
IDLE_WAIT_S = 0.05
"""The longest the progress thread sleeps when nothing is due, s (as an agent's loop)."""
JOIN_GRACE_S = 5.0
"""How much longer than ``linger_s`` :meth:`Engine.close` waits for the thread to end, s."""

_LIVE: "weakref.WeakSet[Engine]" = weakref.WeakSet()


class MRCError(RuntimeError):
    """A collective of the mrc backend failed: a QP entered ERR, a peer sent what the ring cannot
    expect, or the backend was shut down with the op pending."""


class Engine:
    """The progress of rank ``spec.rank`` (module docstring). ``report_fd``: where events go (None:
    nowhere); ``stride``: the slot stride in bytes (default :func:`agents.torch_mrc.config.slot_bytes`).
    Opens the UDP socket (OSError; ValueError for bad QP parameters) and the samples file (OSError);
    :meth:`start` starts the thread."""

    def __init__(self, spec: JobSpec, *, report_fd: int | None = None, stride: int | None = None):
        self.spec = spec
        n = spec.world_size
        self.stride = stride if stride is not None else slot_bytes(n)
        self.region = np.zeros(2 * (n - 1) * self.stride, dtype=np.uint8)
        self.loop = EventLoop()
        self.loop.hold_s = spec.rx_hold_s
        self.wall_offset_s = time.time() - self.loop.time()
        self.seq = Sequencer(spec.rank, n, self.stride, self.region, post=self._post)
        self.events = EventReporter(report_fd, spec.agent)
        self.events.backend()
        self.failure: MRCError | None = None
        self._inbox: deque[Op] = deque()
        self._lock = threading.Lock()           # failure, closing and the inbox, against submit()
        self._closing_until: float | None = None
        self._closed = False
        self._idle = threading.Event()          # set by the thread when nothing is pending
        self._thread: threading.Thread | None = None
        self.channel = open_channel(self.loop, spec, self.region, on_arrival=self._on_arrival,
                                    on_send_complete=self._on_send_complete, on_ev_event=self._on_ev_event)
        try:
            self.samples = SampleWriter(spec, self.loop, self.channel, self.wall)
            self._wake_r, self._wake_w = socket.socketpair()
        except Exception:
            self.channel.close()
            raise
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self.loop.add_reader(self._wake_r, self._on_wake)

    def wall(self, t_loop: float) -> float:
        """Loop (monotonic) time -> wall-clock seconds (time.time())."""
        return t_loop + self.wall_offset_s

    # ---- the caller's side (any thread) ------------------------------------------------
    def start(self) -> None:
        """Start the progress thread (a daemon: :meth:`close` ends it, at the latest at exit)."""
        self._thread = threading.Thread(target=self._run, name=f"mrc-progress-r{self.spec.rank}", daemon=True)
        _LIVE.add(self)
        self._thread.start()

    def submit(self, op: Op) -> None:
        """Queue ``op`` (after every op submitted before). After a failure or close the op fails
        at once, on the caller's thread."""
        with self._lock:
            refused = self.failure
            if refused is None and self._closing_until is not None:
                refused = MRCError(f"mrc backend: rank {self.spec.rank}: {op.name} after the process "
                                   "group was shut down")
            if refused is None:
                self._idle.clear()
                self._inbox.append(op)
        if refused is not None:
            op.complete(refused)
            return
        self._wake()

    def close(self, linger_s: float | None = None) -> None:
        """Let the thread finish the pending ops and wait for every write's acknowledgement for at
        most ``linger_s`` (default the job spec's), then stop it: it writes the last sample and
        closes the samples file and the channel. Ops still pending then fail. Idempotent."""
        linger_s = self.spec.linger_s if linger_s is None else linger_s
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing_until = self.loop.time() + linger_s
        thread = self._thread
        if thread is None:
            self._shutdown()
            return
        self._wake()
        if thread is not threading.current_thread():
            thread.join(linger_s + JOIN_GRACE_S)
            if thread.is_alive():
                log.warning("mrc backend: rank %d: the progress thread did not end", self.spec.rank)

    def drain(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` until every op submitted so far is done and every write
        acknowledged: True if so, False on timeout or when the engine failed or is closed."""
        if self.failure is not None or self._thread is None or not self._thread.is_alive():
            return False
        self._wake()
        return self._idle.wait(timeout_s) and self.failure is None

    @property
    def closed(self) -> bool:
        """:meth:`close` has been called."""
        return self._closed

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):   # full: the thread is awake already; closed: it is gone
            pass

    # ---- the progress thread -----------------------------------------------------------
    def _run(self) -> None:
        loop = self.loop
        self._as_the_nic()
        try:
            while True:
                now = loop.time()
                loop.run_once(min(IDLE_WAIT_S, max(self.samples.next_due - now, 0.0)))
                now = loop.time()
                self._turn(now)
                with self._lock:
                    idle = self.seq.idle and not self._inbox and self.channel.idle
                    if idle:
                        self._idle.set()
                until = self._closing_until
                if until is not None and (now >= until or idle):
                    break
        except Exception as exc:  # noqa: BLE001 - a bug here must fail the ops, not hang the trainer
            log.exception("mrc backend: rank %d: progress thread failed", self.spec.rank)
            self._fail(MRCError(f"mrc backend: rank {self.spec.rank}: progress thread failed: {exc!r}"))
        finally:
            self._shutdown()

    def _as_the_nic(self) -> None:
        """Name this thread :data:`THREAD_NAME` (the runner's fidelity check reads its scheduling
        delays: :class:`testbed.run.sampling.CommandProcs`) and, with the job spec's ``rt_priority``
        (scenario ``agent_realtime: true``), run it at SCHED_RR: the engine stands in for the NIC's
        hardware, which never waits for the trainer's CPU (as :func:`agents.realtime` does for the
        agents). A refused priority is logged, not fatal."""
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, THREAD_NAME.encode(), 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if self.spec.rt_priority:
            try:
                os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(self.spec.rt_priority))
            except OSError as exc:
                log.warning("mrc backend: rank %d: no SCHED_RR priority %d for the progress thread: %s",
                            self.spec.rank, self.spec.rt_priority, exc)

    def _turn(self, now: float) -> None:
        """Serve the channel (arrivals, completions, EV events) and take the submitted ops."""
        try:
            self.channel.service(now)
            if self.failure is None:
                while self._inbox:
                    self.seq.submit(self._inbox.popleft())
        except QPChannelError as exc:
            self._on_qp_error(exc)
        except CollectiveError as exc:
            self._fail(MRCError(f"mrc backend: rank {self.spec.rank}: {exc}"))
        self.samples.sample(now)

    def _on_qp_error(self, exc: QPChannelError) -> None:
        spec = self.spec
        if self.failure is None:
            self.events.qp_error(str(exc), time.time())
        tx = str(exc).startswith("tx")
        peer = (spec.send_to if tx else spec.recv_from)[0]
        self._fail(MRCError(f"mrc backend: rank {spec.rank} (agent {spec.agent}): the connection "
                            f"{'to' if tx else 'from'} rank {peer.rank} ({peer.host}) failed: {exc}"))

    def _fail(self, exc: MRCError) -> None:
        with self._lock:
            if self.failure is not None:
                return
            self.failure = exc
            ops = list(self._inbox)
            self._inbox.clear()
        log.error("%s", exc)
        self.seq.fail(exc)
        for op in ops:
            op.complete(exc)

    def _shutdown(self) -> None:
        """The end (on the thread, or in close() when it never started): last sample, close."""
        if self.failure is None and self.seq.pending:
            self._fail(MRCError(f"mrc backend: rank {self.spec.rank}: shut down with "
                                f"{self.seq.pending} op(s) pending"))
        try:
            self.samples.sample(self.loop.time(), force=True)
        except Exception:  # noqa: BLE001 - a broken channel must not keep the file open
            log.exception("mrc backend: rank %d: last sample", self.spec.rank)
        self.samples.close()
        self.loop.remove_reader(self._wake_r)
        self.channel.close()
        self.loop.close()
        self._wake_r.close()
        self._wake_w.close()
        _LIVE.discard(self)

    # ---- the channel's callbacks (on the progress thread) --------------------------------
    def _post(self, send: Send) -> None:
        self.channel.post(send)

    def _on_arrival(self, src_rank: int, imm: int) -> None:
        if self.failure is None:
            self.seq.on_arrival(src_rank, imm)

    def _on_send_complete(self, peer: int, imm: int) -> None:
        if self.failure is None:
            self.seq.on_send_complete()

    def _on_ev_event(self, ev, side: str, peer: str) -> None:
        self.events.ev_state(ev, side, peer, self.wall(ev.time))

    def _on_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass


@atexit.register
def _close_all() -> None:
    """At interpreter exit: close every engine still open (each waits at most its ``linger_s``)."""
    for engine in list(_LIVE):
        engine.close()
