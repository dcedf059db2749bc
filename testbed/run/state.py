"""The runner as a sans-I/O state machine (the QP's treatment, for the runner): messages and time
in, actions out.

:class:`RunState` takes what the driver (:class:`testbed.run.transport.TransportRun`) observes:
every control message (the agents' and the controller's), the agents' process exits, the
controller's health and time. It answers with actions (:data:`Action`) for the driver to carry
out, in order: journal a record, show a line, send a message (to an agent or the controller),
start the workload (the barrier), apply a fault step, lose or restart the controller, abort.
No socket, no process, no clock here: the barrier, the timeline's playback, the outcome and the
controller relay are tested without root (``tests/unit/test_run_state.py``).

* Barrier: every rank ``ready`` and the controller's ``hello`` (when one runs) -> :class:`Begin`,
  once; the driver starts the workload and calls :meth:`RunState.workload_started`.
* Timeline: :meth:`RunState.on_time` plays the due steps (:class:`testbed.faults.timeline.Timeline`):
  a fault step -> :class:`Apply` (the driver applies it and calls :meth:`RunState.step_applied`);
  an EV action -> an ``operator`` message to the controller, or journaled unsent without one.
  The first job's iteration reports trigger ``at_iteration`` steps.
* Relay: agent events are journaled (``ev_stats`` is not: telemetry) and forwarded to a live
  controller (``qp_error`` is not); the controller's commands and queries go to their agent,
  journaled with whether they went; its ``synced`` is journaled.
* Controller: its watch (:class:`testbed.run.ctlwatch.ControllerWatch`) gives the verdict; a lost
  controller is :class:`LoseController` and, if the scenario restarts it
  (:class:`testbed.run.ctlwatch.Restarts`), :class:`SpawnController`; no hello is :class:`Abort`.

Outcomes (``status``): ``done`` every rank finished; ``failed`` a rank reported a failure (the
first one reported names the run's reason); ``crashed`` an agent exited without a report;
``timeout`` not done within the scenario's timeout, counted from :meth:`RunState.begin`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Union

from agents.protocol import Command, Done, Event, Failed, Hello, Iteration, Message, Operator, Query, Ready, Synced
from testbed.faults import EVAction, LinkState
from testbed.faults.timeline import Step, Timeline
from testbed.run.control import CONTROLLER
from testbed.run.ctlwatch import ControllerWatch, Lost, Restarts
from testbed.rundir.write import event_record, iteration_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """How a transport run ended: ``status`` (see the module docstring) and ``reason``."""

    status: str
    reason: str = ""


# -- actions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Say:
    """Show ``text`` on the live display (``head``, ``style``: its label); after a :class:`Send`
    that did not go, with ``unsent`` appended."""

    text: str
    head: str | None = None
    style: str | None = None
    unsent: str = ""


@dataclass(frozen=True)
class Journal:
    """Write ``record`` to ``events.jsonl``; ``stamp``: with the wall-clock ``t`` of now first
    (records that carry their own ``t``, an agent's, are written as they are)."""

    record: dict
    stamp: bool = True


@dataclass(frozen=True)
class Send:
    """Send ``msg`` to agent ``to`` (or :data:`testbed.run.control.CONTROLLER`); then journal
    ``record`` with ``"sent"``: whether it went, and show ``say``."""

    to: int
    msg: Message
    record: dict | None = None
    say: Say | None = None


@dataclass(frozen=True)
class Begin:
    """The barrier passed: start the workload (broadcast ``start``), then :meth:`RunState.workload_started`."""


@dataclass(frozen=True)
class Apply:
    """Apply a fault step through the injector, then :meth:`RunState.step_applied`."""

    step: Step


@dataclass(frozen=True)
class LoseController:
    """The controller is lost (``reason``): disconnect it, kill it if it runs, journal ``controller_lost``."""

    reason: str


@dataclass(frozen=True)
class SpawnController:
    """Start a new controller with ``--resync``, its predecessor lost ``after`` this; then
    :meth:`RunState.controller_spawned`."""

    after: str


@dataclass(frozen=True)
class Abort:
    """The run cannot go on as specified (the controller said no hello): the testbed's error."""

    reason: str


Action = Union[Say, Journal, Send, Begin, Apply, LoseController, SpawnController, Abort]


class RunState:
    """One transport run of ``world`` (the host of every agent id). ``primary``: agents
    0..primary-1 run the first job (its iterations drive ``at_iteration``; default all);
    ``timeline``: the fault schedule (default: empty); ``controller``: the watch of the
    scenario's controller (its ``hello`` is part of the barrier), None without one (the driver
    sets it by :meth:`controller_spawned`); ``restarts``: whether a lost controller is restarted;
    ``log_of(rank)``: where an agent's log is, for a crash's reason."""

    def __init__(self, world: list[str], *, timeout_s: float, timeline: Timeline | None = None,
                 primary: int | None = None, controller: ControllerWatch | None = None,
                 restarts: Restarts | None = None, log_of: Callable[[int], str] = lambda rank: f"rank {rank}'s log"):
        self.world, self.timeout_s, self.controller, self.log_of = world, timeout_s, controller, log_of
        self.timeline = timeline if timeline is not None else Timeline([], [])
        self.primary = len(world) if primary is None else primary
        self.restarts = restarts if restarts is not None else Restarts(False)
        self.ready: set[int] = set()
        self.done: set[int] = set()
        self.failed: dict[int, str] = {}
        self.started = False
        self.deadline: float | None = None
        self.outcome: Outcome | None = None

    def begin(self, now: float) -> None:
        """The driver's loop starts: the scenario's timeout runs from here."""
        self.deadline = now + self.timeout_s

    def wake_at(self) -> float | None:
        """When :meth:`on_time` next has something to do (the timeout or the next step)."""
        times = [t for t in (self.deadline, self.timeline.next_time()) if t is not None]
        return min(times, default=None)

    # -- messages -------------------------------------------------------------------------
    def on_message(self, msg: Message, now: float) -> list[Action]:
        """A control message from an agent or the controller (samples are the driver's to file)."""
        if isinstance(msg, Hello):
            return [Journal({"kind": "controller", "phase": "connected"})] + self._begin_if(self.on_hello(now))
        if isinstance(msg, (Command, Query)):
            return self._relay(msg)
        if isinstance(msg, Synced):
            return [Journal({"kind": "controller", "phase": "resynced", **msg.as_dict()}),
                    Say(f"resynced from the agents: {msg.answered} of {msg.connections} connections answered; "
                        f"EVs found replaced {msg.replaced}, denied {msg.denied}, ASSUMED_BAD {msg.assumed_bad}",
                        head="controller")]
        if not 0 <= msg.rank < len(self.world):
            log.warning("control message from agent %d, not one of this run's: %r", msg.rank, msg)
            return []
        if isinstance(msg, Ready):
            return [Journal({"kind": "agent", "rank": msg.rank, "status": "ready"})] + \
                self._begin_if(self.on_ready(msg.rank))
        if isinstance(msg, Event):
            return self._on_event(msg)
        if isinstance(msg, Iteration):
            if msg.rank < self.primary:   # at_iteration follows the first job
                self.timeline.iteration_done(msg.seq, now)
            return [Journal(iteration_record(msg), stamp=False)]
        if isinstance(msg, Done):
            self.on_done(msg.rank)
            return [Journal({"kind": "agent", "rank": msg.rank, "status": "done", "summary": msg.summary})]
        if isinstance(msg, Failed):
            self.on_failed(msg.rank, msg.reason)
            return [Journal({"kind": "agent", "rank": msg.rank, "status": "failed", "reason": msg.reason})]
        return []   # a sample: the driver files it

    def _on_event(self, msg: Event) -> list[Action]:
        """Journaled (not ``ev_stats``: the controller's telemetry), forwarded to a live controller
        (not ``qp_error``), a QP error shown."""
        if msg.kind == "ev_stats":
            return [Send(CONTROLLER, msg)] if self.controller_live else []
        out: list[Action] = [Journal(event_record(msg), stamp=False)]
        if self.controller_live and msg.kind != "qp_error":
            out.append(Send(CONTROLLER, msg))
        if msg.kind == "qp_error":
            out.append(Say(f"rank {msg.rank}: {msg.reason}", head="QP error", style="red"))
        return out

    def _relay(self, cmd: Command | Query) -> list[Action]:
        """A controller command or query to its agent, journaled with whether it went."""
        if isinstance(cmd, Query):
            record, say = {"kind": "controller", "op": "query", "rank": cmd.rank, "peer": cmd.peer}, None
        else:
            record = {"kind": "controller", "op": cmd.op, "rank": cmd.rank, "peer": cmd.peer, "ev_id": cmd.ev_id,
                      "new_ev_id": cmd.new_ev_id, "reason": cmd.reason}
            say = Say(f"rank {cmd.rank} -> {cmd.peer}: {cmd.op} EV {cmd.ev_id}"
                      + (f" by EV {cmd.new_ev_id}" if cmd.new_ev_id is not None else "") + f" ({cmd.reason})",
                      head="controller")
        if 0 <= cmd.rank < len(self.world):
            return [Send(cmd.rank, cmd, record, say)]
        return [Journal({**record, "sent": False})] + ([say] if say else [])

    # -- the barrier and the outcome ----------------------------------------------------------
    def on_ready(self, rank: int) -> bool:
        """Rank ``rank`` is ready; True when the barrier has just passed (start now)."""
        self.ready.add(rank)
        return self._barrier()

    def on_hello(self, now: float) -> bool:
        """The controller said hello; True when the barrier has just passed."""
        if self.controller is not None:
            self.controller.on_hello(now)
        return self._barrier()

    def _barrier(self) -> bool:
        """Every rank ready and the controller (if any) has said hello or is lost (a restart that
        never came up: the data path does not wait for it): start, once."""
        if self.started or len(self.ready) < len(self.world):
            return False
        if self.controller is not None and self.controller.hello_s is None and self.controller.lost is None:
            return False
        self.started = True
        return True

    @staticmethod
    def _begin_if(passed: bool) -> list[Action]:
        return [Begin()] if passed else []

    def workload_started(self, now: float) -> None:
        """The driver broadcast ``start`` at ``now``: the timeline's clock starts."""
        self.timeline.start(now)

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

    def _end(self, outcome: Outcome) -> None:
        if self.outcome is None:       # the first outcome stands
            self.outcome = outcome

    # -- time and the timeline -------------------------------------------------------------------
    def on_time(self, now: float) -> list[Action]:
        """The timeout, then the timeline's steps due at ``now`` (none once the run is over)."""
        if self.deadline is not None and now >= self.deadline:
            self._end(Outcome("timeout", f"not done within the scenario timeout ({self.timeout_s:g} s)"))
        if self.outcome is not None:
            return []
        out: list[Action] = []
        for step in self.timeline.due(now):
            out += self._ev_action(step) if isinstance(step.change, EVAction) else [Apply(step)]
        return out

    def _ev_action(self, step: Step) -> list[Action]:
        """A timeline EV action for the controller; without a live one, journaled unsent."""
        change = step.change
        record = {"kind": "controller", "source": "timeline", "action": step.action, "link": change.link,
                  "index": step.index}
        missing = " (controller lost)" if self.controller is not None else " (no controller on this run)"
        text = f"{change.link}: {change.describe()}"
        if self.controller_live:
            return [Send(CONTROLLER, Operator(change.op, change.link, step.index), record,
                         Say(text, head=step.action, unsent=missing))]
        return [Journal({**record, "sent": False}), Say(text + missing, head=step.action)]

    def step_applied(self, step: Step, now: float) -> None:
        """The driver applied ``step`` at ``now``: a link state change schedules reconvergence."""
        if isinstance(step.change, LinkState):
            self.timeline.link_changed(now)

    def timeline_record(self) -> dict | None:
        """At the end, the steps never reached and the events never triggered (None: all were)."""
        pending, unfired = self.timeline.pending(), self.timeline.unfired()
        if not pending and not unfired:
            return None
        return {"kind": "timeline", "not_reached": [s.record() for s in pending if s.kind != "reconverge"],
                "never_triggered": unfired}

    # -- the controller ---------------------------------------------------------------------
    @property
    def controller_live(self) -> bool:
        """A controller runs, has said hello and is not lost: events and actions go to it."""
        return self.controller is not None and self.controller.live

    def controller_spawned(self, now: float, *, restarted: bool = False) -> None:
        """The driver started a controller at ``now`` (``restarted``: after a loss); the barrier
        waits for its hello."""
        self.controller = ControllerWatch(now, restarted=restarted)

    def check_controller(self, now: float, *, exit_code: int | None, connected: bool,
                         stalled_s: float) -> list[Action]:
        """The controller's health at ``now`` (see :meth:`ControllerWatch.check`): nothing, an
        :class:`Abort` (no hello), or a loss and, if the scenario restarts it, a new controller."""
        if self.controller is None:
            return []
        verdict = self.controller.check(now, exit_code=exit_code, connected=connected, stalled_s=stalled_s)
        if verdict is None:
            return []
        if not isinstance(verdict, Lost):
            return [Abort(verdict.reason)]
        out: list[Action] = [LoseController(verdict.reason)]
        why_not = self.restarts.after_loss()
        if why_not is None:
            return out + [SpawnController(verdict.reason)]
        if self.restarts.enabled:
            out.append(Journal({"kind": "controller", "phase": "not_restarted", "reason": why_not}))
        return out + self._begin_if(self._barrier())   # the ranks may have been waiting for its hello
