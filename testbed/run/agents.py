"""How the runner starts agents on this machine: one process per agent or host runtimes
(agents dealt round-robin onto them), their command line and environment.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from testbed.rundir.names import AGENT_LOGS_DIR
from testbed.rundir.write import agent_log, private_opener

REPO = Path(__file__).resolve().parents[2]


def default_agent_processes() -> int:
    """One host runtime per core this process may run on (``sched_getaffinity``): fewer
    processes than agents cost less CPU at the same link rate, and one per core keeps every
    core busy (``make bench``, fabric ceiling, compares the two)."""
    return max(1, len(os.sched_getaffinity(0)))


def agent_env() -> dict:
    """The environment of agent processes: this one's, with the repository on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def agent_command(python: str, fabric, jobs: list[dict], paths: list, members: list[int], *,
                  runtime: bool, module: str = "agents") -> list[str]:
    """argv of the process that runs ``jobs[m]`` (job files ``paths[m]``) for ``members``: one
    agent (``runtime`` False, one member), or a host runtime, each job with its host's
    namespace (``/proc/<pid of the host's shell>/ns/net`` on ``fabric``). ``module``: ``agents``, or
    ``agents.jobs`` for a command job's launchers (one per rank, never a runtime)."""
    argv = [python, "-m", module]
    for m in members:
        argv += ["--job", str(paths[m])]
        if runtime:
            argv += ["--netns", f"/proc/{fabric.host_pid(jobs[m]['host'])}/ns/net"]
    return argv


def runtime_groups(agents: int, processes: int) -> list[list[int]]:
    """Agents 0..agents-1 dealt round-robin onto ``min(processes, agents)`` host runtimes
    (agent ``a`` to runtime ``a % processes``): the list of each runtime's agents."""
    n = max(1, min(processes, agents))
    return [list(range(i, agents, n)) for i in range(n)]


def start_local_agents(fabric, jobs: list[dict], paths: list[Path], transport_dir: Path, *, python: str,
                       processes: int | None, procs: dict, logs: list, module: str = "agents") -> list[list[int]]:
    """Start ``jobs``' agents (job files ``paths``) in their hosts' namespaces on ``fabric``: one
    process per agent (``processes`` None) or ``processes`` host runtimes (:func:`runtime_groups`),
    each with its log in ``transport_dir`` (a runtime's agents' logs link to the runtime's).
    ``procs`` ({agent: process}) and ``logs`` (open log files) are filled as processes start, so
    the caller stops and closes what started even if a later start fails. Returns the groups
    of job indexes, one per process. ``module``: see :func:`agent_command`."""
    kw = dict(stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO), env=agent_env())
    groups = [[a] for a in range(len(jobs))] if processes is None else runtime_groups(len(jobs), processes)
    for i, members in enumerate(groups):
        argv = agent_command(python, fabric, jobs, [p.resolve() for p in paths], members,
                             runtime=processes is not None, module=module)
        log_path = (agent_log(transport_dir, jobs[members[0]]["agent"]) if processes is None
                    else transport_dir / AGENT_LOGS_DIR / f"runtime{i}.log")
        logf = open(log_path, "wb", opener=private_opener)
        logs.append(logf)
        proc = fabric.popen(jobs[members[0]]["host"], argv, stdout=logf, **kw)
        for a in members:
            if processes is not None:   # each rank's log is its runtime's
                agent_log(transport_dir, jobs[a]["agent"]).symlink_to(log_path.name)
            procs[jobs[a]["agent"]] = proc
    return groups
