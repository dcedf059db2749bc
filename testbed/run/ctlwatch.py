"""The runner's view of its controller process, sans-I/O: when it is lost, and why.

In a deployment the NICs keep carrying traffic when the fabric controller dies; only EV
management stops. So a controller that exits or stops answering after it said ``hello`` does
not end the run: it is *lost* (journaled ``controller_lost`` with the reason; the agents keep
their own remedies: retire, probe). A controller that never says ``hello`` is a broken setup,
not a fault under test: the run errs at once, naming its log, instead of waiting for the
scenario's timeout. With ``controller: {restart: true}`` a lost controller is restarted (at most
:data:`MAX_RESTARTS` times a run, :class:`Restarts`); the new one resynchronises from the agents
(:meth:`testbed.controller.policy.Controller.resync`), and a restart that says no hello is lost
again, not an error (the setup was proven by the first).

:class:`ControllerWatch` takes times and observations (the process's exit status, whether its
connection is up, how long its send queue has waited unread) and returns a verdict; the runner
(:mod:`testbed.run.transport`) does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

HELLO_TIMEOUT_S = 10.0
"""Spawn -> ``hello`` (s): a Python start and the job specs' read take well under a second
alone; 10 s allows for a machine busy bringing up a fabric and its agents."""
SILENCE_S = 5.0
"""A controller whose socket takes nothing for this long while messages wait is lost (s):
at four ev_stats a second per agent, five seconds unread is hundreds of messages behind."""
MAX_RESTARTS = 3
"""Restarts of a lost controller per transport run: a controller that dies at every start is a
bug to read in its log, not something to retry for the rest of the run."""
CLOSE_GRACE_S = 1.0
"""A closed connection waits this long for the process's exit (s), so that a killed controller
is reported by its exit status, not by the EOF that comes first."""


@dataclass(frozen=True)
class Lost:
    """The controller is gone; the run goes on without it. ``reason`` for the journal."""

    reason: str


@dataclass(frozen=True)
class NoHello:
    """The controller never connected: the run cannot start as specified."""

    reason: str


class Restarts:
    """Whether a lost controller is restarted: ``enabled`` (the scenario's ``controller.restart``),
    at most ``limit`` times."""

    def __init__(self, enabled: bool, limit: int = MAX_RESTARTS):
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self.enabled, self.limit, self.done = enabled, limit, 0

    def after_loss(self) -> str | None:
        """A controller was just lost: None to restart it now (counted), else why not."""
        if not self.enabled:
            return "restart is off (controller: {restart: true} turns it on)"
        if self.done >= self.limit:
            return f"the limit of {self.limit} restarts is reached"
        self.done += 1
        return None


class ControllerWatch:
    """One controller, spawned at ``spawned_s`` (monotonic s); ``restarted``: it replaces a lost one
    (no hello within the timeout is then a loss, not an error)."""

    def __init__(self, spawned_s: float, *, restarted: bool = False, hello_timeout_s: float = HELLO_TIMEOUT_S,
                 silence_s: float = SILENCE_S):
        self.spawned_s, self.restarted = spawned_s, restarted
        self.hello_timeout_s, self.silence_s = hello_timeout_s, silence_s
        self.hello_s: float | None = None
        self.lost: Lost | None = None
        self._closed_s: float | None = None   # when its connection was first seen closed

    @property
    def live(self) -> bool:
        """Connected and not lost: messages go to it."""
        return self.hello_s is not None and self.lost is None

    def on_hello(self, now: float) -> None:
        if self.hello_s is None:
            self.hello_s = now

    def check(self, now: float, *, exit_code: int | None, connected: bool,
              stalled_s: float) -> Lost | NoHello | None:
        """The verdict at ``now``, once (None: nothing new). ``exit_code``: the process's, None
        while it runs; ``connected``: its control connection is open; ``stalled_s``: how long
        messages for it have waited without a byte read."""
        if self.lost is not None:
            return None
        if self.hello_s is None:
            why = None
            if exit_code is not None:
                why = f"exited with status {exit_code} before it said hello"
            elif now - self.spawned_s >= self.hello_timeout_s:
                why = f"said no hello within {self.hello_timeout_s:g} s of its start"
            if why is None or not self.restarted:
                return None if why is None else NoHello(f"the controller {why}")
            self.lost = Lost(f"restarted, {why}")
            return self.lost
        if exit_code is not None:
            self.lost = Lost(f"exited with status {exit_code}")
        elif not connected:
            self._closed_s = now if self._closed_s is None else self._closed_s
            if now - self._closed_s >= CLOSE_GRACE_S:
                self.lost = Lost("closed its control connection")
        elif stalled_s >= self.silence_s:
            self.lost = Lost(f"silent: read nothing for {stalled_s:.1f} s with messages waiting")
        return self.lost
