"""The scenario runner: build a fabric, start the agents, play the fault timeline, collect, tear down.

One concern per module:

* :mod:`.lifecycle` -- :class:`TransportRun` (one transport on one fresh fabric) and
  :func:`run_scenario` (every transport of a scenario, in order);
* :mod:`.control`   -- the runner's end of the agents' control socket;
* :mod:`.records`   -- the run directory: file names, record schemas, JSONL writer, manifest;
* :mod:`.sampling`  -- what the runner samples itself each tick (link counters, CPU);
* :mod:`.progress`  -- the live display (the only user of rich here).
"""

from .lifecycle import OUTCOMES, RunnerError, RunResult, TransportRun, run_scenario

__all__ = ["OUTCOMES", "RunResult", "RunnerError", "TransportRun", "run_scenario"]
