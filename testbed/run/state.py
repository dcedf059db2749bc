"""The runner's barrier and outcome as a sans-I/O state machine (the QP's treatment, for the runner).

:class:`RunState` takes what the driver (:class:`testbed.run.transport.TransportRun`) observes:
the agents' ``ready``, ``done`` and ``failed`` messages, their processes' exits, the
controller's ``hello`` and time; it answers when to start (the barrier) and when the run is
over, with which outcome. No socket, no process, no clock here: the barrier and the outcome
rules are tested without root (``tests/unit/test_run_state.py``).

Outcomes (``status``): ``done`` every rank finished; ``failed`` a rank reported a failure (the
first one reported names the run's reason); ``crashed`` an agent exited without a report;
``timeout`` not done within the scenario's timeout, counted from :meth:`RunState.begin`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from testbed.run.ctlwatch import ControllerWatch


@dataclass(frozen=True)
class Outcome:
    """How a transport run ended: ``status`` (see the module docstring) and ``reason``."""

    status: str
    reason: str = ""


class RunState:
    """One transport run of ``world`` (the host of every agent id). ``controller``: the watch of
    the scenario's controller (its ``hello`` is part of the barrier), None without one;
    ``log_of(rank)``: where an agent's log is, for a crash's reason."""

    def __init__(self, world: list[str], *, timeout_s: float, controller: ControllerWatch | None = None,
                 log_of: Callable[[int], str] = lambda rank: f"rank {rank}'s log"):
        self.world, self.timeout_s, self.controller, self.log_of = world, timeout_s, controller, log_of
        self.ready: set[int] = set()
        self.done: set[int] = set()
        self.failed: dict[int, str] = {}
        self.started = False
        self.deadline: float | None = None
        self.outcome: Outcome | None = None

    def begin(self, now: float) -> None:
        """The driver's loop starts: the scenario's timeout runs from here."""
        self.deadline = now + self.timeout_s

    # -- inputs: each returns True when the barrier has just passed (send start now) ---------
    def on_ready(self, rank: int) -> bool:
        self.ready.add(rank)
        return self._barrier()

    def on_hello(self, now: float) -> bool:
        if self.controller is not None:
            self.controller.on_hello(now)
        return self._barrier()

    def _barrier(self) -> bool:
        """Every rank ready and the controller (if any) has said hello: start, once."""
        if self.started or len(self.ready) < len(self.world):
            return False
        if self.controller is not None and self.controller.hello_s is None:
            return False
        self.started = True
        return True

    def on_done(self, rank: int) -> None:
        self.done.add(rank)
        if len(self.done) == len(self.world):
            self._end(Outcome("done"))

    def on_failed(self, rank: int, reason: str) -> None:
        self.failed.setdefault(rank, reason)
        rank, why = next(iter(self.failed.items()))
        self._end(Outcome("failed", f"rank {rank} ({self.world[rank]}): {why}"))

    def on_exit(self, rank: int, code: int) -> bool:
        """Agent ``rank``'s process exited with ``code``; True if that is a crash (no report)."""
        if rank in self.done or rank in self.failed:
            return False
        self._end(Outcome("crashed", f"rank {rank} ({self.world[rank]}) exited with status {code} without "
                                     f"a report; see {self.log_of(rank)}"))
        return True

    def on_time(self, now: float) -> None:
        if self.deadline is not None and now >= self.deadline:
            self._end(Outcome("timeout", f"not done within the scenario timeout ({self.timeout_s:g} s)"))

    def _end(self, outcome: Outcome) -> None:
        if self.outcome is None:       # the first outcome stands
            self.outcome = outcome
