"""Scenario + transport -> one launcher spec per rank of a command job (pure): the dicts of
:class:`agents.jobs.spec.CommandSpec`, and for ``mrc`` the ring job spec its backend uses.

A rank's environment (:func:`command_env`) is torchrun's contract (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` 0 and ``LOCAL_WORLD_SIZE`` 1: one process per host, ``GROUP_RANK``,
``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``MASTER_ADDR`` = rank 0's fabric (ECMP) address, IPv6,
``MASTER_PORT`` :data:`MASTER_PORT`, and ``OMP_NUM_THREADS`` 1 as torchrun sets it for several
processes on one machine), ``GLOO_SOCKET_IFNAME`` (the host's first NIC: its namespace has
no resolvable host name, so Gloo is told its interface), ``PYTHONUNBUFFERED``, ``PYTHONPATH``
(``agents/jobs/lib`` for ``testbed_job`` and the repository for the ``mrc`` backend), and
the testbed's own: ``TESTBED_RUN_DIR`` (the transport's directory), ``TESTBED_TRANSPORT``,
``TESTBED_HOST``, ``TESTBED_ADDRESSES`` (the rank's NIC addresses, comma-separated, plane
order), ``TESTBED_DIST_BACKEND`` (``gloo`` or ``mrc``: what to pass to
``init_process_group``) and, on mrc, ``TESTBED_MRC_JOB`` (the backend's job spec). The
scenario's ``env`` comes last and cannot change any of these (the loader refuses it).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from testbed.spec.commandfile import PYTHON_NAMES
from testbed.spec.common import JOB_BACKENDS
from testbed.spec.model import Scenario

REPO = Path(__file__).resolve().parents[2]
JOB_LIB = REPO / "agents" / "jobs" / "lib"
MASTER_PORT = 29500
"""torchrun's default rendezvous port (``--master-port``)."""
MRC_JOB = "mrc-rank{rank}.json"
"""The mrc backend's job spec of rank ``rank``, beside the launcher specs."""
JOB_OUTPUT_DIR = "job"
"""The transport directory's folder of the command's output and step reports."""


def command_env(scenario: Scenario, transport: str, rank: int, transport_dir: Path,
                mrc_job: Path | None = None) -> dict[str, str]:
    """The variables rank ``rank`` of the scenario's command job gets on ``transport`` (see the
    module docstring), as strings."""
    wl, topo = scenario.workload, scenario.topology
    hosts = wl.hosts
    host = hosts[rank]
    nics = topo.nics[host]
    n = len(hosts)
    env = {"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "GROUP_RANK": str(rank), "GROUP_WORLD_SIZE": str(n), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(n),
           "ROLE_NAME": "default", "MASTER_ADDR": str(topo.nics[hosts[0]][0].address),
           "MASTER_PORT": str(MASTER_PORT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": nics[0].ifname,
           "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(JOB_LIB), str(REPO)] + ([os.environ["PYTHONPATH"]]
                                                                       if os.environ.get("PYTHONPATH") else [])),
           "TESTBED_RUN_DIR": str(transport_dir.resolve()), "TESTBED_TRANSPORT": transport, "TESTBED_HOST": host,
           "TESTBED_ADDRESSES": ",".join(str(nic.address) for nic in nics),
           "TESTBED_DIST_BACKEND": JOB_BACKENDS[transport]}
    if mrc_job is not None:
        env["TESTBED_MRC_JOB"] = str(mrc_job.resolve())
    env.update(dict(wl.env))
    return env


def build_command_specs(scenario: Scenario, transport: str, transport_dir: Path, *, run_id: str,
                        control_socket: str, python: str, mrc_jobs: list[Path] | None = None) -> list[dict]:
    """Launcher specs (:meth:`agents.jobs.spec.CommandSpec.to_dict`) of every rank, in rank order.
    ``python`` replaces a ``python``/``python3`` program; ``mrc_jobs``: the backend's job spec
    file of each rank (transport ``mrc``). Raises ValueError for a transport that is not a
    command job's (:data:`testbed.spec.common.JOB_BACKENDS`)."""
    from agents.jobs.spec import CommandSpec
    wl = scenario.workload
    if transport not in JOB_BACKENDS:
        raise ValueError(f"{transport!r} is not a command job's transport ({', '.join(JOB_BACKENDS)})")
    argv = list(wl.command)
    if argv[0] in PYTHON_NAMES:
        argv[0] = python
    out_dir = transport_dir / JOB_OUTPUT_DIR
    specs = []
    for rank, host in enumerate(wl.hosts):
        mrc_job = mrc_jobs[rank] if mrc_jobs else None
        spec = CommandSpec(run_id=run_id, job=wl.name, rank=rank, agent=rank, world_size=len(wl.hosts), host=host,
                           transport=transport, backend=JOB_BACKENDS[transport], control_socket=control_socket,
                           argv=tuple(argv), cwd=wl.cwd, stdout=str((out_dir / f"rank{rank}.out").resolve()),
                           stderr=str((out_dir / f"rank{rank}.err").resolve()),
                           steps_path=str((out_dir / f"steps-rank{rank}.jsonl").resolve()),
                           env=command_env(scenario, transport, rank, transport_dir, mrc_job), steps=wl.steps)
        specs.append(spec.to_dict())
    return specs


def build_mrc_jobs(scenario: Scenario, *, run_id: str, control_socket: str,
                   qp_overrides: dict | None = None) -> list[dict]:
    """The mrc backend's job specs, one per rank: the agents' ring all-reduce specs
    (:func:`testbed.spec.jobs.build_job_specs`; EVs, QP parameters and engine from the scenario as
    for the agents), so the timeline and the controller act on the backend's QPs as on theirs."""
    from testbed.spec.jobs import build_job_specs
    return [dataclasses.replace(spec, job=scenario.workload.name).to_dict()
            for spec in build_job_specs(scenario, "mrc", run_id=run_id, control_socket=control_socket,
                                        qp_overrides=qp_overrides)]
