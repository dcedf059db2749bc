"""The agent: one rank of one collective job, driven by the runner over the control socket.

Phases: connect control -> build the channel (:func:`agents.channels.open_channel`;
mrc/rc: :class:`QPChannel`, tcp: :class:`TCPChannel`) -> wait until the channel is connected -> send
``ready`` -> wait for ``start`` -> run the :class:`agents.collectives.Workload`
(``collective``, ``targets`` from the job spec) -> when every iteration is
done and every write acknowledged, send ``done`` -> linger (keep
acknowledging the ``recv_from`` peers' retransmissions) until ``stop``, EOF
on the control socket, or ``linger_s``. The messages are in
:mod:`agents.protocol`; their ``rank`` is the job spec's ``agent`` (the
runner's id for this agent, distinct over every job of a run), not the rank
within the job.

One single-threaded loop (:class:`agents.net.loop.EventLoop`) serves the data
path, the control socket and the sample timer; control output is queued
and written without blocking, at most one sample per ``sample_interval_s``.
With ``samples_path`` in the job spec the samples go to that file instead
(JSON lines, flushed every :data:`SAMPLE_FLUSH_S` and at exit), so that the
control socket carries only events and progress: one runner reading every
agent's samples every 20 ms was the bottleneck that ended fat-tree-k8 runs
(issue 10).
Each sample carries the loop's timer lateness (:class:`agents.protocol.LoopStats`),
the agent's view of how starved of CPU the emulation is.
"""
from __future__ import annotations

import logging
import os
import time

from .channels import Channel, open_channel
from .collectives import IterationResult, Workload
from .jobspec import JobSpec
from .net.control import ControlClient, ControlError
from .net.loop import EventLoop
from .protocol import (Command, Done, Event, Failed, Iteration, LoopStats, Message, Query, Ready, Sample, Start,
                       Stop, dumps, sample_record)

log = logging.getLogger(__name__)

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_BAD_JOB = 2
EXIT_STOPPED = 3
POLL_S = 0.0005
"""How soon a channel that polls (TCP with output queued) gets its next turn, s."""
IDLE_WAIT_S = 0.05
"""The longest an agent's loop sleeps when nothing is due, s."""
SAMPLE_FLUSH_S = 0.5
"""How often a samples file is flushed, s (what a SIGKILLed agent can lose)."""


EV_STATS_KEYS = ("ev_id", "sent", "lost", "rtx", "skips", "charged")
"""Per EV in an ``ev_stats`` event: transmissions (retransmissions included), losses,
retransmissions sent on it, SKIPs (congestion signals) and the losses of a cause the QP may
charge to the EV (timeouts, inferred; not trims or NACKs); the controller's drop rate
(:class:`testbed.controller.policy.Counts`)."""

class AgentStopped(Exception):
    """The runner sent ``stop`` (or closed the control socket) before the job was done."""


class Agent:
    """Run ``spec`` (a validated JobSpec). :meth:`run` returns the exit status.

    Runtime failures (peer unreachable, QP ERR, control socket lost) are
    reported as ``failed`` when the control socket still works, logged, and
    give EXIT_FAILED; ``stop`` before done gives EXIT_STOPPED.
    """

    def __init__(self, spec: JobSpec, loop: EventLoop | None = None):
        self.spec = spec
        self._own_loop = loop is None
        if loop is None:
            loop = EventLoop(native=spec.engine == "native")
            loop.hold_s = spec.rx_hold_s
        self.loop = loop
        self.wall_offset_s = time.time() - self.loop.time()
        self.control: ControlClient | None = None
        self.channel: Channel | None = None
        self.workload: Workload | None = None
        self.started = False
        self.stop_requested = False
        self.ev_transitions = 0
        self._per_size_index: dict[tuple[int, bool], int] = {}
        self._next_sample = 0.0
        self._next_ev_stats = 0.0
        self._samples_file = None
        self._next_flush = 0.0
        self._run_gen = None
        self._wait: tuple | None = None
        self._timeout_s: float | None = None

    # ---- helpers -------------------------------------------------------------
    def wall(self, t_loop: float) -> float:
        """Loop (monotonic) time -> wall-clock seconds (time.time())."""
        return t_loop + self.wall_offset_s

    def send(self, msg: Message) -> None:
        self.control.send(msg)

    def _on_control(self) -> None:
        self.control.on_readable()
        while self.control.inbox:
            msg = self.control.inbox.popleft()
            if isinstance(msg, Start):
                self.started = True
            elif isinstance(msg, Stop):
                self.stop_requested = True
            elif isinstance(msg, Command):
                self._on_command(msg)
            elif isinstance(msg, Query):
                self._on_query(msg)
        if self.control.closed:
            self.stop_requested = True

    def _on_ev_event(self, ev, side: str, peer: str) -> None:
        self.ev_transitions += 1
        self.send(Event(self.spec.agent, self.wall(ev.time), "ev_state", peer=peer, dir=side,
                        qpn=ev.qpn, ev_id=ev.ev, old=ev.old.name, new=ev.new.name,
                        cause=ev.cause.value, drop_count=ev.drop_count, loss_cause=ev.loss_cause))

    def _ev_stats(self, flows: list[dict], now: float) -> None:
        """Per MRC tx connection, its EVs' cumulative packet counts, for the controller."""
        if self.spec.transport != "mrc":
            return
        t = self.wall(now)
        for f in flows:
            if f["dir"] == "tx" and f["evs"]:
                self.send(Event(self.spec.agent, t, "ev_stats", peer=f["peer"],
                                evs=[{k: e[k] for k in EV_STATS_KEYS if k in e} for e in f["evs"]]))

    def _on_command(self, cmd: Command) -> None:
        """A controller command on this agent's connection to ``cmd.peer``; the outcome goes back
        as an ``ev_command`` event ("ok", or why the profile refused it)."""
        now = self.loop.time()
        result = self.channel.command(cmd.peer, cmd.op, cmd.ev_id, cmd.new_ev_id, now) \
            if self.channel is not None else "no channel yet"
        self.send(Event(self.spec.agent, self.wall(now), "ev_command", peer=cmd.peer, ev_id=cmd.ev_id,
                        cause=cmd.op, reason=result, new_ev_id=cmd.new_ev_id))

    def _on_query(self, query: Query) -> None:
        """A restarted controller's query of the connection to ``query.peer``: its profile's EVs
        and their states go back as an ``ev_query`` event (evs empty and the reason if none)."""
        now = self.loop.time()
        if self.channel is None:
            evs, reason = [], "no channel yet"
        else:
            evs, reason = self.channel.query(query.peer)
        self.send(Event(self.spec.agent, self.wall(now), "ev_query", peer=query.peer, evs=evs, reason=reason))

    def _on_iteration(self, r: IterationResult) -> None:
        key = (r.size_bytes, r.warmup)
        idx = self._per_size_index.get(key, 0)
        self._per_size_index[key] = idx + 1
        self.send(Iteration(self.spec.agent, size=r.size_bytes, iter=idx, seq=r.iteration, warmup=r.warmup,
                            t_start=r.t_start, t_end=r.t_end, seconds=r.seconds, wrong=r.wrong))

    def _sample(self, now: float, force: bool = False) -> None:
        if not force and now < self._next_sample:
            return
        self._next_sample = now + self.spec.sample_interval_s
        loop = self.loop
        flows = self.channel.flows()
        if self.spec.ev_stats_s and now >= self._next_ev_stats:
            self._next_ev_stats = now + self.spec.ev_stats_s
            self._ev_stats(flows, now)
        sample = Sample(self.spec.agent, self.wall(now), flows,
                        LoopStats(loop.timers_fired, loop.timer_late_sum_s, loop.take_timer_late_max_s()))
        f = self._samples_file
        if f is None:
            self.send(sample)
            return
        f.write(dumps(sample_record(sample)) + b"\n")
        if force or now >= self._next_flush:
            f.flush()
            self._next_flush = now + SAMPLE_FLUSH_S

    def _make_channel(self) -> Channel:
        return open_channel(self.loop, self.spec, self.workload.recv_region,
                            on_arrival=self._on_arrival, on_send_complete=self._on_send_complete,
                            on_ev_event=self._on_ev_event)

    def _on_arrival(self, src_rank: int, imm: int) -> None:
        self.workload.on_arrival(src_rank, imm, time.time())

    def _on_send_complete(self, peer: int, imm: int) -> None:
        self.workload.on_send_complete(peer, imm, time.time())

    def wait_s(self) -> float:
        """How long this agent's own loop may sleep before it needs a turn (:meth:`next_due`,
        at most :data:`IDLE_WAIT_S`), s."""
        now = self.loop.time()
        due = self.next_due(now)
        return IDLE_WAIT_S if due is None else min(IDLE_WAIT_S, max(due - now, 0.0))

    def next_due(self, now: float) -> float | None:
        """The next time (the loop's clock) this agent needs a turn although nothing of its
        fires: its next sample while it runs, its wait's deadline, and :data:`POLL_S` from
        ``now`` while its channel polls or control output is queued; None if none of these."""
        times = []
        if self.started:
            times.append(self._next_sample)
        if self._wait is not None and self._wait[1] is not None:
            times.append(self._wait[1] + 1e-6)
        if (self.channel is not None and self.channel.wants_poll) or (self.control is not None
                                                                       and self.control.pending_bytes):
            times.append(now + POLL_S)
        return min(times) if times else None

    @property
    def connecting(self) -> bool:
        """Before the channel is connected: turns may open sockets (in the host's namespace)."""
        return self.channel is None or not self.channel.connected

    def advance(self, now: float) -> int | None:
        """One turn after the loop ran: serve the channel, the samples and the control output,
        and move the run on (:meth:`_phases`) as far as it can go now. Returns None while
        it runs, its exit status once it has ended; raises what the run raises
        (:meth:`outcome` turns that into a status)."""
        gen = self._run_gen
        try:
            if self._wait is None:
                self._set_wait(next(gen), now)
            try:
                channel = self.channel
                if channel is not None:
                    channel.service(now)
                if self.started:
                    self._sample(now)
                self.control.flush()
            except Exception as exc:  # noqa: BLE001 - raised into the run where it waits
                self._set_wait(gen.throw(exc), now)
            while True:
                until, deadline, what = self._wait
                if until():
                    self._set_wait(gen.send(None), now)
                elif self.stop_requested:
                    self._set_wait(gen.throw(AgentStopped()), now)
                elif deadline is not None and now > deadline:
                    self._set_wait(gen.throw(TimeoutError(f"{what} not reached within {self._timeout_s} s")), now)
                else:
                    return None
        except StopIteration as stop:
            return stop.value

    def _set_wait(self, wait: tuple, now: float) -> None:
        until, timeout_s, what = wait
        self._timeout_s = timeout_s
        self._wait = (until, None if timeout_s is None else now + timeout_s, what)

    # ---- the run -----------------------------------------------------------
    def open(self) -> int | None:
        """Connect the control socket and open the samples file: None, or the exit status if
        the control socket cannot be reached."""
        spec = self.spec
        try:
            self.control = ControlClient(spec.control_socket)
        except ControlError as exc:
            log.error("rank %d: %s", spec.rank, exc)
            return EXIT_FAILED
        self.loop.add_reader(self.control.sock, self._on_control)
        if spec.samples_path:
            try:
                self._samples_file = open(spec.samples_path, "wb",
                                          opener=lambda path, flags: os.open(path, flags, 0o600))
            except OSError as exc:   # reported as the job's failure, like any other
                reason = f"samples file: {exc}"
                log.error("rank %d: job failed: %s", spec.rank, reason)
                self._report_failure(exc, reason)
                return self.close(EXIT_FAILED)
        self._run_gen = self._phases()
        return None

    def run(self) -> int:
        """The whole run on this agent's own loop (one agent per process); the exit status."""
        status = self.open()
        if status is not None:
            return status

        def alone() -> int:
            loop = self.loop
            while True:
                status = self.advance(loop.time())
                if status is not None:
                    return status
                loop.run_once(self.wait_s())
        return self.close(self.outcome(alone))

    def outcome(self, turn) -> int | None:
        """``turn()`` (a turn or the whole run) with every failure turned into an exit status:
        stopped before done, control socket lost, or a job failure (reported as ``failed``)."""
        spec = self.spec
        try:
            return turn()
        except AgentStopped:
            log.info("rank %d: stopped by the runner before done", spec.rank)
            return EXIT_STOPPED
        except ControlError as exc:
            log.error("rank %d: %s", spec.rank, exc)
            return EXIT_FAILED
        except Exception as exc:  # noqa: BLE001 - every failure must reach the runner
            reason = f"{type(exc).__name__}: {exc}"
            log.error("rank %d: job failed: %s", spec.rank, reason)
            self._report_failure(exc, reason)
            return EXIT_FAILED

    def close(self, status: int) -> int:
        """Close the samples file, the channel, the control socket (and an own loop); ``status``."""
        if self._samples_file is not None:
            self._samples_file.close()
            self._samples_file = None
        if self.channel is not None:
            self.channel.close()
        if self.control is not None:
            self.loop.remove_reader(self.control.sock)
            self.control.close()
        if self._own_loop:
            self.loop.close()
        return status

    def _report_failure(self, exc: Exception, reason: str) -> None:
        try:
            from .channels.qp import QPChannelError
            if isinstance(exc, QPChannelError):
                self.send(Event(self.spec.agent, time.time(), "qp_error", reason=str(exc)))
            self.send(Failed(self.spec.agent, reason))
            self.control.flush_blocking(1.0)
        except (ControlError, OSError) as cexc:
            log.error("rank %d: could not report the failure: %s", self.spec.rank, cexc)

    def _phases(self):
        """The run, as the waits between its steps: each ``yield (until, timeout_s, what)``
        resumes once ``until()`` holds; a stop is thrown in as AgentStopped, a timeout as
        TimeoutError. Returns the exit status."""
        spec = self.spec
        self.workload = Workload(spec.rank, spec.world_size, list(spec.sizes), spec.iterations,
                                 spec.warmup, spec.seed, post=lambda s: self.channel.post(s),
                                 report=self._on_iteration, clock=time.time,
                                 collective=spec.collective,
                                 targets=list(spec.targets) if spec.targets else None)
        self.channel = self._make_channel()
        yield (lambda: self.channel.connected, spec.connect_timeout_s + 1, "connections to the peers")
        self.send(Ready(spec.agent))
        yield (lambda: self.started, None, "start")
        log.info("rank %d: start", spec.rank)
        self.workload.start(time.time())
        yield (lambda: self.workload.done and self.channel.idle, None, "done")
        self._sample(self.loop.time(), force=True)
        self.send(Done(spec.agent, self.summary()))
        self.started = False                       # no samples after done
        self.control.flush_blocking()
        log.info("rank %d: done", spec.rank)
        try:
            yield (lambda: False, spec.linger_s, "stop")
        except (AgentStopped, TimeoutError):
            pass
        except Exception as exc:  # noqa: BLE001 - the job is done; a late peer error is moot
            log.info("rank %d: after done: %s", spec.rank, exc)
        return EXIT_DONE

    def summary(self) -> dict:
        """The ``done`` summary: job, collective, workload per size (nccl-tests fields) and
        transport counters."""
        spec = self.spec
        return {"job": spec.job, "collective": spec.collective, "transport": spec.transport,
                "qps": spec.qps, "host": spec.host, "job_rank": spec.rank,
                **self.workload.summary(), "ev_transitions": self.ev_transitions,
                "qp_errors": 0, "channel": self.channel.summary()}
