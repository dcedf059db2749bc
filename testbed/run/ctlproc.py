"""The controller's process (:mod:`testbed.controller`) for a transport run: its start and its end.

The I/O half of the runner's controller handling; when to start, restart or give one up is
:class:`testbed.run.state.RunState`'s (with :mod:`testbed.run.ctlwatch`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.run.agents import agent_env
from testbed.rundir.write import private_opener

LOG, DECISIONS = "controller.log", "controller.jsonl"
"""In the transport's directory: the process's output, and its decisions (one JSON line each);
a restarted controller appends to both."""


def spawn_controller(python: str, directory: Path, sock: str, policy: str, *, resync: bool,
                     logs: list) -> subprocess.Popen:
    """``python -m testbed.controller`` for the run in ``directory`` (its ``jobs/``) on control
    socket ``sock`` under ``policy``; ``resync``: a restart (it resynchronises from the agents
    before it decides). Its log file is appended to ``logs`` (the caller closes it). OSError if
    it cannot be started."""
    log_file = open(directory / LOG, "ab", opener=private_opener)
    logs.append(log_file)
    return subprocess.Popen(
        [python, "-m", "testbed.controller", "--socket", sock, "--jobs", str(directory / "jobs"),
         "--policy", policy, "--log", str(directory / DECISIONS)] + (["--resync"] if resync else []),
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=agent_env())


def end_controller(proc) -> int:
    """Its exit status, killing it first if it still runs (a lost controller must not act late)."""
    code = proc.poll()
    if code is None:
        proc.kill()
        code = proc.wait()
    return code
