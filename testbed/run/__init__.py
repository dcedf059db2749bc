"""The scenario runner: build a fabric, start the agents, play the fault timeline, collect, tear down.

One concern per module:

* :mod:`.scenario`  -- :func:`run_scenario` (every transport of a scenario, in order);
* :mod:`.transport` -- :class:`TransportRun` (one transport on one fresh fabric): the driver;
* :mod:`.state`     -- its decisions, sans-I/O (barrier, timeline playback, relay, outcome);
* :mod:`.ctlwatch`, :mod:`.ctlproc` -- the controller's health and restarts; its process;
* :mod:`.sendq`     -- the bounded, never-blocking send queue of each control connection;
* :mod:`.agents`    -- how agents start on this machine (per agent or host runtimes);
* :mod:`.priority`  -- the runner's CPU share while the agents run;
* :mod:`.control`   -- the runner's end of the agents' control socket;
* :mod:`.manifest`  -- the run directory's manifest;
* :mod:`.sampling`  -- what the runner samples itself each tick (link counters, CPU, the
  agents' scheduler statistics) and the tick itself;
* :mod:`.progress`  -- the live display (the only user of rich here).

The run directory's files and record formats are :mod:`testbed.rundir`'s.
"""

from testbed.run.scenario import RunResult, run_scenario
from testbed.run.transport import OUTCOMES, RunnerError, TransportRun

__all__ = ["OUTCOMES", "RunResult", "RunnerError", "TransportRun", "run_scenario"]
