"""What the mrc backend tells the testbed: samples to the job spec's ``samples_path`` and events
to the launcher's pipe, in the agents' formats (:mod:`agents.protocol`), so that the runner's
flow KPIs, EV plots and failure-detection metrics read a real job as they read an agent.

* :class:`SampleWriter`: one :class:`agents.protocol.Sample` record a line (``sample_record``,
  ``dumps``), at most one per ``sample_interval_s``, flushed every
  :data:`agents.agent.SAMPLE_FLUSH_S` and at close, exactly as :class:`agents.agent.Agent` writes
  its samples file.
* :class:`EventReporter`: one :class:`agents.protocol.Event` a line (``encode``: the control
  socket's wire form, ``{"type": "event", ...}\\n``), each with a single ``os.write`` of fewer than
  :data:`PIPE_BUF` bytes, so that lines of several writers never interleave (POSIX: a write of at
  most PIPE_BUF bytes to a pipe is atomic).
"""
from __future__ import annotations

import logging
import os

from ..agent import SAMPLE_FLUSH_S
from ..protocol import Event, LoopStats, Sample, dumps, encode, sample_record

log = logging.getLogger(__name__)

PIPE_BUF = 4096
"""Linux's PIPE_BUF, bytes: the longest write to a pipe that is atomic."""
REASON_MAX_CHARS = 2048
"""A qp_error's reason is cut to this, so that its line stays under PIPE_BUF."""


class SampleWriter:
    """The samples file of ``spec`` (its ``samples_path``; nothing when empty): :meth:`sample`
    with the loop's clock ``now``, ``wall(now)`` for the record's ``t``. OSError if the file cannot
    be opened (mode 0600, truncated)."""

    def __init__(self, spec, loop, channel, wall):
        self.spec, self.loop, self.channel, self.wall = spec, loop, channel, wall
        self._file = None
        if spec.samples_path:
            self._file = open(spec.samples_path, "wb", opener=lambda path, flags: os.open(path, flags, 0o600))
        self.next_due = loop.time() if self._file is not None else float("inf")
        self._next_flush = 0.0

    def sample(self, now: float, force: bool = False) -> None:
        """Write a sample if one is due (or ``force``); flush every SAMPLE_FLUSH_S (and on ``force``)."""
        f = self._file
        if f is None or (not force and now < self.next_due):
            return
        self.next_due = now + self.spec.sample_interval_s
        loop = self.loop
        sample = Sample(self.spec.agent, self.wall(now), self.channel.flows(),
                        LoopStats(loop.timers_fired, loop.timer_late_sum_s, loop.take_timer_late_max_s()))
        f.write(dumps(sample_record(sample)) + b"\n")
        if force or now >= self._next_flush:
            f.flush()
            self._next_flush = now + SAMPLE_FLUSH_S

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self.next_due = float("inf")


class EventReporter:
    """Events of agent id ``agent`` to descriptor ``fd`` (None: dropped). A write that fails
    (the launcher has gone, a full non-blocking pipe) is logged and counted in ``dropped``."""

    def __init__(self, fd: int | None, agent: int):
        self.fd, self.agent = fd, agent
        self.sent = 0
        self.dropped = 0

    def backend(self) -> None:
        """Tell the launcher that the mrc backend runs in this process (``{"type": "backend", "name":
        "mrc", "rank"}``, :mod:`agents.jobs.reports`): its run checks that the job did not run on another."""
        if self.fd is None:
            return
        try:
            os.write(self.fd, dumps({"type": "backend", "name": "mrc", "rank": self.agent}) + b"\n")
        except OSError as exc:
            self.dropped += 1
            log.warning("mrc backend: cannot tell the launcher it runs: %s", exc)

    def ev_state(self, ev, side: str, peer: str, t: float) -> None:
        """An EV transition (``agents.mrc.EVEvent`` ``ev`` of the ``side`` "tx"/"rx" connection with
        host ``peer``) at wall-clock ``t``, as :meth:`agents.agent.Agent._on_ev_event` reports it."""
        self.emit(Event(self.agent, t, "ev_state", peer=peer, dir=side, qpn=ev.qpn, ev_id=ev.ev,
                        old=ev.old.name, new=ev.new.name, cause=ev.cause.value, drop_count=ev.drop_count,
                        loss_cause=ev.loss_cause))

    def qp_error(self, reason: str, t: float) -> None:
        """A QP in ERR (the "job crash"), as :meth:`agents.agent.Agent._report_failure` reports it."""
        if len(reason) > REASON_MAX_CHARS:
            reason = reason[:REASON_MAX_CHARS - 3] + "..."
        self.emit(Event(self.agent, t, "qp_error", reason=reason))

    def emit(self, event: Event) -> None:
        """One line, one write (ValueError if the line would not be atomic)."""
        if self.fd is None:
            return
        line = encode(event)
        if len(line) >= PIPE_BUF:
            raise ValueError(f"a {event.kind} event of {len(line)} bytes would not be written atomically")
        try:
            os.write(self.fd, line)
            self.sent += 1
        except OSError as exc:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("mrc backend: events to descriptor %d are lost: %s", self.fd, exc)
