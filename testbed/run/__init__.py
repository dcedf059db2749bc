"""The scenario runner: build a fabric, start the agents, play the fault timeline, collect, tear down.

One concern per module:

* :mod:`.lifecycle` -- :class:`TransportRun` (one transport on one fresh fabric) and
  :func:`run_scenario` (every transport of a scenario, in order);
* :mod:`.control`   -- the runner's end of the agents' control socket;
* :mod:`.records`   -- the run directory: file names, record schemas, JSONL writer, manifest;
* :mod:`.sampling`  -- what the runner samples itself each tick (link counters, CPU, the
  agents' scheduler statistics) and the tick itself;
* :mod:`.progress`  -- the live display (the only user of rich here).

Importing :mod:`.records` alone stays light (no fabric, no rich, no metrics): the names
below load :mod:`.lifecycle` on first use, so :mod:`testbed.metrics` may use the record
names without an import cycle.
"""

__all__ = ["OUTCOMES", "RunResult", "RunnerError", "TransportRun", "run_scenario"]


def __getattr__(name: str):
    if name in __all__:
        from testbed.run import lifecycle
        return getattr(lifecycle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
