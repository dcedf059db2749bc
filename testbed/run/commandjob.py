"""A command job's part of a transport run (:class:`CommandJob`): its launchers and their job specs,
the tracing of Gloo's TCP flows while the job runs and the fault targets resolved on them, and
how far its ranks got when it times out. :class:`testbed.run.transport.TransportRun` owns one per
command-job transport and calls it at those points; the rest of the run is the agents'.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Callable

from testbed.fabric.hoptrace import (HopTracer, job_tcp_bytes, job_tcp_flows, tcp_connections,
                                     unlimit_time_exceeded)
from testbed.faults.targets import resolve_timeline
from testbed.model.errors import TestbedFailure
from testbed.rundir.names import DIR_MODE, JOBS_DIR, PATHS, SAMPLES_DIR
from testbed.rundir.write import samples_file, write_atomic, write_jobs
from testbed.run.agents import start_local_agents
from testbed.spec import Scenario
from testbed.spec.commandjobs import JOB_OUTPUT_DIR, MASTER_PORT, MRC_JOB, build_command_specs, build_mrc_jobs
from testbed.spec.selectors import TargetError


class CommandJobError(TestbedFailure):
    """The testbed could not run the command job as specified (a target, a trace)."""


class CommandJob:
    """The command job of ``scenario`` on ``transport`` (run directory ``transport_dir``).
    ``journal(record)`` and ``say(text)``: the run's; ``resolved``: timeline index -> (event,
    record), the targets on Gloo's flows the gloo-tcp run resolved, shared by the scenario's runs."""

    def __init__(self, scenario: Scenario, transport: str, transport_dir: Path, *, journal: Callable,
                 say: Callable, resolved: dict):
        self.scenario, self.transport, self.dir = scenario, transport, transport_dir
        self.journal, self.say, self.resolved = journal, say, resolved
        self.hosts = list(scenario.workload.hosts)
        #: Gloo's flows are traced at the second step report (its ports are chosen at run time)
        self.trace_pending = transport != "mrc"
        self._tcp_bytes: dict | None = None   # their bytes at the first step report
        self.steps_seen: dict[int, int] = {}  # steps reported, per rank

    # -- start ----------------------------------------------------------------------------
    def start(self, fabric, *, run_id: str, control_socket: str, python: str, qp_overrides: dict | None,
              procs: dict, logs: list) -> list[dict]:
        """One launcher per rank in its host's namespace (:mod:`agents.jobs`), which starts the
        user's command at ``start``; on mrc, with the backend's ring job specs beside. Returns the
        launcher specs."""
        jobs_dir = self.dir / JOBS_DIR
        mrc_paths = None
        if self.transport == "mrc":
            mrc_jobs = build_mrc_jobs(self.scenario, run_id=run_id, control_socket=control_socket,
                                      qp_overrides=qp_overrides)
            (self.dir / SAMPLES_DIR).mkdir(DIR_MODE, exist_ok=True)
            for job in mrc_jobs:   # the backend samples its QPs as the agents do
                job["samples_path"] = str(samples_file(self.dir, job["agent"]).resolve())
            mrc_paths = write_jobs(mrc_jobs, jobs_dir, name=MRC_JOB)
        (self.dir / JOB_OUTPUT_DIR).mkdir(DIR_MODE, exist_ok=True)
        specs = build_command_specs(self.scenario, self.transport, self.dir, run_id=run_id,
                                    control_socket=control_socket, python=python, mrc_jobs=mrc_paths)
        paths = write_jobs(specs, jobs_dir)
        start_local_agents(fabric, specs, paths, self.dir, python=python, processes=None,
                           procs=procs, logs=logs, module="agents.jobs")
        return specs

    # -- fault targets on Gloo's flows -------------------------------------------------------
    def reuse_targets(self, timeline) -> tuple:
        """The timeline with the targets on Gloo's flows replaced by the links the gloo-tcp run
        resolved them to (journaled); CommandJobError if that run has not resolved one."""
        events = list(timeline)
        for i, e in enumerate(events):
            if e.target is None:
                continue
            if i not in self.resolved:
                raise CommandJobError(f"timeline[{i}]: its target ({e.target}) names Gloo's TCP flows, which a "
                                      "gloo-tcp run traces while its job runs: run gloo-tcp before this transport")
            event, rec = self.resolved[i]
            events[i] = dataclasses.replace(event, target=None)   # resolved: nothing more to trace
            self.journal({"kind": "target", **rec, "from": "gloo-tcp"})
            self.say(f"timeline[{i}] {rec['action']}: {rec['target']} -> {rec.get('switch') or rec['link']} "
                     "(resolved on the gloo-tcp run's traced flows)")
        return tuple(events)

    def on_step(self, rank: int, seq: int, fabric, timeline) -> None:
        """A step report of ``rank``, before the run state sees it (so that a target is resolved
        before the step can trigger its fault): the first takes the TCP connections' byte counts
        (the start-up broadcast's), a later one traces the flows busy since then."""
        self.steps_seen[rank] = max(self.steps_seen.get(rank, 0), seq + 1)
        if not self.trace_pending:
            return
        if self._tcp_bytes is None:
            try:
                self._tcp_bytes = job_tcp_bytes(fabric, self.hosts)
            except OSError as exc:
                raise CommandJobError(f"the job's TCP connections: {exc}") from exc
        elif seq >= 1:
            self.trace_pending = False
            self._trace(fabric, timeline)

    def _trace(self, fabric, timeline) -> None:
        """The job's busy TCP flows traced on the running fabric (:mod:`testbed.fabric.hoptrace`)
        into ``paths.json``; the timeline's flow targets not yet fired resolved on them."""
        t0 = time.perf_counter()
        wl = self.scenario.workload
        try:
            flows = job_tcp_flows(fabric, self.hosts, self.transport, wl.name, since=self._tcp_bytes)
            unlimited = unlimit_time_exceeded(fabric)
            traced = HopTracer(fabric).trace(flows)
        except OSError as exc:
            raise CommandJobError(f"tracing the job's TCP flows: {exc}") from exc
        write_atomic(self.dir / PATHS, json.dumps(
            {"transport": self.transport, "flows": [tf.to_dict() for tf in traced]}, indent=1) + "\n")
        delivered = sum(tf.outcome == "delivered" for tf in traced)
        self.journal({"kind": "paths", "flows": len(traced), "delivered": delivered,
                      "data": sum(tf.flow.kind == "data" for tf in traced), "ratemask_switches": unlimited,
                      "seconds": round(time.perf_counter() - t0, 3)})
        self.say(f"traced {len(traced)} TCP flows of the job ({delivered} delivered) in "
                 f"{time.perf_counter() - t0:.1f} s")
        unfired = set(timeline.unfired())
        if not any(e.target is not None for i, e in enumerate(timeline.events) if i in unfired):
            return
        try:
            events, resolved = resolve_timeline(timeline.events, traced, self.scenario.topology,
                                                seed=self.scenario.seed)
        except TargetError as exc:
            raise CommandJobError(f"fault target: {exc}") from None
        for rec in resolved:
            i = rec["index"]
            if i not in unfired:
                continue
            timeline.events[i] = events[i]
            self.resolved[i] = (events[i], rec)
            self.journal({"kind": "target", **rec})
            self.say(f"timeline[{i}] {rec['action']}: {rec['target']} -> {rec.get('switch') or rec['link']} "
                     f"(crossed by {', '.join(rec['flows'])})")

    # -- the end ------------------------------------------------------------------------------
    def progress(self, fabric, done: set[int]) -> str:
        """How far the ranks got: steps reported per unfinished rank, and where to look for a rank
        that reported none (stuck in its start-up, or never at the rendezvous)."""
        seen, world = self.steps_seen, range(len(self.hosts))
        per_rank = ", ".join(f"{r}: {seen.get(r, 0)}" for r in world if r not in done)
        silent = [r for r in world if r not in seen and r not in done]
        text = f"steps reported by the unfinished ranks ({per_rank})"
        if silent:
            away = self._not_at_rendezvous(fabric, silent)
            stuck = away or silent
            text += (f"; rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} reported no step"
                     + (f", and rank{'s' if len(away) > 1 else ''} {', '.join(map(str, away))} never connected to the "
                        f"rendezvous (MASTER_ADDR port {MASTER_PORT})" if away else " (stuck in start-up)")
                     + f": see {self.dir / JOB_OUTPUT_DIR}/rank{stuck[0]}.err")
        return text

    def _not_at_rendezvous(self, fabric, ranks: list[int]) -> list[int]:
        """Which of ``ranks`` hold no TCP connection to rank 0's rendezvous port (torch's TCPStore
        at MASTER_ADDR:MASTER_PORT): they never joined. [] if the sockets cannot be read."""
        master = str(self.scenario.topology.nics[self.hosts[0]][0].address)
        try:
            return [r for r in ranks if not any(t.dst == master and t.dport == MASTER_PORT
                                                for t, _ in tcp_connections(fabric, self.hosts[r]))]
        except OSError:
            return []
