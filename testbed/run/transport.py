"""One transport of a scenario on one fresh fabric (:class:`TransportRun`); the whole scenario

is :func:`testbed.run.scenario.run_scenario`. This is the thin driver: the decisions (the
barrier, the timeline's playback, the controller relay, the outcome) are
:class:`testbed.run.state.RunState`'s, sans-I/O; here they are carried out.

For each transport:

1. build the fabric (:class:`testbed.fabric.local.Fabric`, or a fabric over servers from
   ``fabric_factory``) and probe the ring's paths;
2. listen on a Unix control socket in the run directory (:mod:`testbed.run.control`) and
   start the agents: host runtimes (``python -m agents --job rank<a>.json --netns ...``
   per agent; one runtime per core by default, ``agent_processes`` in the scenario), or one
   process per agent in its host's namespace (``agent_processes: per-host``). On a fabric
   over servers the servers' workers start them and relay their control channel
   (:class:`testbed.cluster.remote_agents.RemoteAgents`);
3. when every rank is ``ready``, send ``start`` (the barrier; time zero of the
   timeline) and play the timeline (:mod:`testbed.faults.timeline`): every typed step (link
   down/up, loss, blackhole, rate, routing reconvergence after ``reconverge_after``)
   goes through the transport's :class:`testbed.faults.FaultInjector`, which owns the
   fault state and journals each change in ``events.jsonl`` with its wall-clock time;
4. meanwhile record agent samples, iterations and EV events, and what the runner samples
   itself every :data:`testbed.run.sampling.LINK_SAMPLE_S` (:mod:`testbed.run.sampling`),
   and show live progress (:mod:`testbed.run.progress`);
5. stop when every rank is done, one fails, an agent dies, the scenario timeout
   passes or the user interrupts; then revert every fault still applied, stop the
   agents and tear the fabric down, keeping everything gathered.

The run directory and its record formats are in :mod:`testbed.rundir.schemas`.

Outcomes per transport (``status``): ``done`` (every rank finished), ``failed`` (an
agent reported a failure, e.g. a QP in ERR: the job would crash), ``timeout``,
``crashed`` (an agent exited without a report), ``error`` (the testbed failed, e.g.
a fault could not be applied; or the scenario's controller said no hello within
:data:`testbed.run.ctlwatch.HELLO_TIMEOUT_S`), ``interrupted``. A controller lost after its
hello (exited, disconnected, silent) ends nothing: it is journaled ``controller_lost`` and the
agents go on with their own remedies (:mod:`testbed.run.ctlwatch`); with ``controller: {restart:
true}`` a new controller starts (journaled ``controller`` phase ``restart``) and resynchronises
from the agents before it decides (journaled phase ``resynced``). Ctrl-C or a crash still
tears down and keeps partial results.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
import sys
import time
from pathlib import Path
from typing import Callable

from agents.protocol import Iteration, Message, Sample, Start, Stop

from testbed.fabric.backend import FabricBackend
from testbed.fabric.kernel import features
from testbed.fabric.local import Fabric
from testbed.faults import FaultInjector, Reconverge
from testbed.faults.timeline import Step, Timeline, sweep_warmups
from testbed.model.errors import TestbedFailure
from testbed.model.topology import Topology
from testbed.run.agents import default_agent_processes, start_local_agents
from testbed.run.control import CONTROLLER, ControlServer, control_socket_path
from testbed.run.ctlproc import LOG, end_controller, spawn_controller
from testbed.run.commandjob import CommandJob, CommandJobError
from testbed.run.ctlwatch import Restarts
from testbed.run.priority import RunnerPriority
from testbed.run.progress import Display, Progress
from agents.torch_mrc.engine import THREAD_NAME as MRC_THREAD
from testbed.run.sampling import LINK_SAMPLE_S, CommandProcs, CpuSampler, SchedSampler, Ticker
from testbed.run.state import (Abort, Action, Apply, Begin, Journal, LoseController, RunState, Say, Send,
                               SpawnController)
from testbed.rundir.errors import RunDirWriteError
from testbed.rundir.names import DIR_MODE, PATHS, SAMPLES_DIR
from testbed.rundir.write import (TransportWriter, agent_log, merge_samples, sample_record, samples_file,
                                  write_atomic, write_jobs)
from testbed.spec import Scenario, transport_variant
from testbed.spec.jobs import AGENT_RT_PRIORITY, build_all_jobs
from testbed.spec.scenfile import PER_HOST

log = logging.getLogger(__name__)

STOP_GRACE_S = 3.0          # agents get this long to exit after "stop", s
OUTCOMES = ("done", "failed", "timeout", "crashed", "error", "interrupted")


class RunnerError(TestbedFailure):
    """The testbed (not the transport under test) failed during a run."""


EV_STATS_S = 0.25
"""How often an MRC agent reports its EVs' packet counts when a controller runs (s): four
reports a second from 16 agents is 64 control messages/s, and a 20% drop rate shows within
a few reports at 10 Mbit/s."""


def _own_cpu_s() -> float:
    """CPU seconds (user + system, every thread) the runner process has used so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime



class TransportRun:
    """One transport of a scenario on a fresh fabric; :meth:`run` returns the outcome."""

    def __init__(self, scenario: Scenario, transport: str, run_dir: Path, display: Display,
                 progress: Progress, *, python: str = sys.executable, qp_overrides: dict | None = None,
                 fabric_factory: Callable[[Topology, bool], FabricBackend] | None = None,
                 agent_processes: int | str | None = None, resolved_targets: dict | None = None):
        self.scenario, self.transport, self.display = scenario, transport, display
        #: timeline index -> (event, record): a command job's targets on Gloo's flows, resolved in
        #: the gloo-tcp run and reused by the transports after it (one dict for the whole scenario)
        self.resolved_targets = resolved_targets if resolved_targets is not None else {}
        #: (topology, have_netem) -> an unstarted fabric; default :class:`Fabric` on this machine
        #: (a :class:`testbed.cluster.sharded.ShardedFabric` spreads it over servers)
        self.fabric_factory = fabric_factory or (lambda topo, netem: Fabric(topo, have_netem=netem))
        self.dir = run_dir / transport
        self.records = TransportWriter(self.dir)
        self.progress = progress
        self.python, self.qp_overrides = python, qp_overrides
        self.agent_processes_override = agent_processes
        #: the host of every agent, by agent id (job after job; a single job: its ranks)
        self.world = [h for wl in scenario.all_jobs for h in wl.hosts]
        self.primary = len(scenario.workload.hosts)   # agents 0..primary-1 run the first job
        self.events, self.samples = self.records.events, self.records.samples
        #: a command job's part (launchers, Gloo's traced flows), None for the agents'
        self.job = (CommandJob(scenario, transport, self.dir, journal=self.journal, say=self.say,
                               resolved=self.resolved_targets) if scenario.workload.is_command else None)
        self.fabric: Fabric | None = None
        self.faults: FaultInjector | None = None
        self.server: ControlServer | None = None
        #: the agents on other servers (a fabric with ``start_agents``), else None
        self.remote = None
        self.procs: dict[int, object] = {}
        #: the controller process (:mod:`testbed.controller`) on an mrc run of a scenario with one
        self.controller = None
        self._ctl_socket: str | None = None
        self._drops_journaled = 0
        self.ticker: Ticker | None = None
        self.logs: list = []
        #: the decisions (sans-I/O): barrier, timeline, relay, controller, outcome
        self.state = RunState(self.world, timeout_s=scenario.timeout_s, timeline=self._timeline(scenario.timeline),
                              primary=self.primary, restarts=Restarts(scenario.controller_restart),
                              log_of=lambda r: str(agent_log(self.dir, r)))
        self.status: str | None = None
        self.reason = ""
        self._t_wall_start: float | None = None
        self._cpu_start: float | None = None
        self._link_set_said: tuple | None = None    # (index, planned_s, phase) of the link set last shown
        self.priority = RunnerPriority()

    def _timeline(self, events) -> Timeline:
        wl = self.scenario.workload
        return Timeline(events, sweep_warmups(len(wl.sizes_bytes), wl.iterations, wl.warmup),
                        reconverge_after_s=self.scenario.reconverge_after_s)

    def journal(self, record: dict) -> None:
        self.events.write({"t": time.time(), **record})

    def say(self, text: str, **kw) -> None:
        t = None if self._t_wall_start is None else time.time() - self._t_wall_start
        self.display.say(self.transport, t, text, **kw)

    def refresh(self) -> None:
        self.display.refresh()

    # -- lifecycle ---------------------------------------------------------------------
    def run(self) -> str:
        try:
            self._bring_up()
            self._start_agents()
            self._loop()
        except KeyboardInterrupt:
            self.status, self.reason = "interrupted", "interrupted by the user"
            raise
        except Exception as exc:  # noqa: BLE001 - any testbed failure ends this transport, keeps data
            log.debug("transport %s", self.transport, exc_info=True)
            self.status, self.reason = "error", f"{type(exc).__name__}: {exc}"
            write_error = RunDirWriteError.of(exc, self.dir)
            if write_error is not None:   # the run directory cannot be written: the whole run ends
                self.reason = str(write_error)
                raise write_error from None
        finally:
            self._finish()
        return self.status

    def _bring_up(self) -> None:
        self.progress.status = "building"
        self.refresh()
        self.fabric = self.fabric_factory(self.scenario.topology, features().netem)
        self.fabric.start()
        self.journal({"kind": "fabric", "phase": "up", "backend": getattr(self.fabric, "backend_name", None),
                      "timings": self.fabric.timings,
                      **({"placement": self.fabric.placement.summary(self.scenario.topology)}
                         if self.fabric.placement is not None else {})})
        pairs = {(wl.hosts[a], wl.hosts[b]) for wl in self.scenario.all_jobs for a, b in wl.connections}
        pairs |= {(b, a) for a, b in pairs}
        reach = self.fabric.probe(sorted(pairs), srv6=transport_variant(self.transport)[0] == "mrc")
        if reach.lost:
            raise RunnerError(f"fabric check: {len(reach.lost)} peer paths unreachable before the run "
                              f"(e.g. {sorted(reach.lost)[0]})")
        self._trace_paths()
        self.faults = FaultInjector(self.fabric, record=self.journal)
        self.counters = self.fabric.link_counters()

    def _trace_paths(self) -> None:
        """Trace the ring's flows on the quiet fabric into ``paths.json`` (:mod:`testbed.fabric.paths`)
        and resolve the flow-aimed fault targets (:mod:`testbed.faults.targets`); journaled."""
        from testbed.spec.selectors import TargetError
        from testbed.faults.targets import trace_and_resolve
        t0 = time.perf_counter()
        scenario = self.scenario
        if self.job is not None and self.job.trace_pending:
            # Gloo picks its TCP ports at run time: its flows are traced at the second step report
            write_atomic(self.dir / PATHS, json.dumps({"transport": self.transport, "flows": []}) + "\n")
            return
        if self.job is not None:
            scenario = dataclasses.replace(scenario, timeline=self.job.reuse_targets(scenario.timeline))
        try:
            events, traced, resolved = trace_and_resolve(self.fabric, scenario, self.transport)
        except TargetError as exc:
            raise RunnerError(f"fault target: {exc}") from None
        write_atomic(self.dir / PATHS, json.dumps(
            {"transport": self.transport, "flows": [tf.to_dict() for tf in traced]}, indent=1) + "\n")
        for rec in resolved:
            self.journal({"kind": "target", **rec})
            aim = rec.get("switch") or rec["link"]
            self.say(f"timeline[{rec['index']}] {rec['action']}: {rec['target']} -> {aim} "
                     f"(crossed by {', '.join(rec['flows'])})")
        self.journal({"kind": "paths", "flows": len(traced), "seconds": round(time.perf_counter() - t0, 3)})
        self.state.timeline = self._timeline(events)

    def _start_agents(self) -> None:
        self.progress.status = "starting agents"
        self.refresh()
        sock = control_socket_path(self.dir, self.transport)
        run_id = f"{self.dir.parent.name}/{self.transport}"
        if self.job is not None:
            if not isinstance(self.fabric, Fabric):
                raise RunnerError("a command job runs on this machine's fabric only (not over servers)")
            # no controller: the loader refuses one for a command job (its backend has no control socket)
            self.server = ControlServer(sock, allowed_pids=lambda: [p.pid for p in self.procs.values()])
            specs = self.job.start(self.fabric, run_id=run_id, control_socket=sock, python=self.python,
                                   qp_overrides=self.qp_overrides, procs=self.procs, logs=self.logs)
            self.journal({"kind": "agents", "phase": "spawned", "command": list(specs[0]["argv"]),
                          "pids": {r: p.pid for r, p in self.procs.items()}})
            return
        jobs = build_all_jobs(self.scenario, self.transport, run_id=run_id, control_socket=sock,
                              qp_overrides=self.qp_overrides)
        (self.dir / SAMPLES_DIR).mkdir(DIR_MODE, exist_ok=True)
        for job in jobs:   # samples go to files: the control socket carries events and progress
            job["samples_path"] = str(samples_file(self.dir, job["agent"]).resolve())
            if self.scenario.controller:
                job["ev_stats_s"] = EV_STATS_S
        paths = write_jobs(jobs, self.dir / "jobs")
        explicit = self.agent_processes_override or self.scenario.agent_processes
        remote = self.fabric.start_agents(jobs, None if explicit == PER_HOST else (explicit or 0))
        if remote is not None:   # the servers' workers start them, relay their messages
            if self.scenario.controller and transport_variant(self.transport)[0] == "mrc":
                # never run without the controller the scenario asks for (the CLI refuses first)
                raise RunnerError(f"the MRC controller (policy {self.scenario.controller}) does not run on a "
                                  "fabric over servers")
            self.server = self.remote = remote
            self.procs = self.remote.procs
            self.journal({"kind": "clocks", "servers": self.fabric.clocks})
            self.journal({"kind": "agents", "phase": "spawned", "pids": {r: p.pid for r, p in self.procs.items()},
                          "servers": {r: p.server for r, p in self.procs.items()}})
            return
        self.server = ControlServer(sock, allowed_pids=lambda: [p.pid for p in self.procs.values()]
                                    + ([self.controller.pid] if self.controller else []))
        if self.scenario.controller and transport_variant(self.transport)[0] == "mrc":
            self._start_controller(sock)
        n = self.agent_processes
        groups = start_local_agents(self.fabric, jobs, paths, self.dir, python=self.python, processes=n,
                                    procs=self.procs, logs=self.logs)
        self.journal({"kind": "agents", "phase": "spawned", "pids": {r: p.pid for r, p in self.procs.items()},
                      **({"runtimes": [[jobs[a]["agent"] for a in members] for members in groups]}
                         if n is not None else {})})

    def _start_controller(self, sock: str, *, restart: str | None = None) -> None:
        """The controller process, its own log ``controller.log`` and decisions ``controller.jsonl``
        (both appended to by a restart); ``restart``: why its predecessor was lost (the new one
        resynchronises before it decides)."""
        self._ctl_socket = sock
        self.controller = spawn_controller(self.python, self.dir, sock, self.scenario.controller,
                                           resync=restart is not None, logs=self.logs)
        self.state.controller_spawned(time.monotonic(), restarted=restart is not None)
        if restart is None:
            self.journal({"kind": "controller", "phase": "spawned", "pid": self.controller.pid,
                          "policy": self.scenario.controller})
            return
        self.journal({"kind": "controller", "phase": "restart", "pid": self.controller.pid,
                      "attempt": self.state.restarts.done, "after": restart})
        self.say(f"restarted (attempt {self.state.restarts.done}, pid {self.controller.pid}): it resynchronises "
                 "from the agents before it decides", head="controller")

    @property
    def agent_processes(self) -> int | None:
        """Host runtimes to serve the agents: the run's override, else the scenario's, else
        :func:`default_agent_processes`; None for ``per-host`` (one process per agent)."""
        n = self.agent_processes_override or self.scenario.agent_processes or default_agent_processes()
        return None if n == PER_HOST else int(n)

    def _loop(self) -> None:
        self.priority.raise_(realtime=AGENT_RT_PRIORITY + 1 if self.scenario.agent_realtime else 0)
        procs = self.procs
        if self.job is not None:   # the commands (the mrc backend's progress thread), not their launchers
            procs = CommandProcs(self.procs, MRC_THREAD if self.transport == "mrc" else None)
        cpu, sched = CpuSampler(), SchedSampler({} if self.remote else procs)   # remote: their workers
        t0 = time.monotonic()
        self.state.begin(t0)
        tick = self.ticker = Ticker(LINK_SAMPLE_S, t0)
        self.progress.status = "connecting"
        while True:
            now = time.monotonic()
            self._do(self.state.on_time(now))
            if self._ended():
                return
            if tick.due(now):
                self._check_processes()
                if self.started:
                    self._sample_links()
                    self.records.cpu.write(cpu.sample())
                    self.records.sched.write(sched.sample())
                else:
                    cpu.sample()
                self.records.flush()
                self.refresh()
                if self._ended():
                    return
            wake = min(tick.next, self.state.wake_at())
            for msg in self.server.poll(wake - time.monotonic()):
                self._on_message(msg)
            if self._ended():
                return

    def _ended(self) -> bool:
        """The run state has an outcome: it becomes the transport's status and reason (a command
        job's timeout says how far each rank got)."""
        if self.state.outcome is None:
            return False
        self.status, self.reason = self.state.outcome.status, self.state.outcome.reason
        if self.status == "timeout" and self.job is not None:
            self.reason += "; " + self.job.progress(self.fabric, self.state.done)
        return True

    @property
    def started(self) -> bool:
        return self.state.started

    def _on_message(self, msg: Message) -> None:
        """One control message: its samples filed here, the rest decided by the run state."""
        if isinstance(msg, Sample) and 0 <= msg.rank < len(self.world):   # an agent without samples_path
            self.samples.write(sample_record(msg))
            return
        if isinstance(msg, Iteration) and self.job is not None:   # before it can trigger a targeted fault
            try:
                self.job.on_step(msg.rank, msg.seq, self.fabric, self.state.timeline)
            except CommandJobError as exc:
                raise RunnerError(str(exc)) from exc
        self._do(self.state.on_message(msg, time.monotonic()))
        if isinstance(msg, Iteration) and msg.rank < self.primary:   # the display follows the first job
            self.progress.iteration(msg)

    @property
    def controller_live(self) -> bool:
        """A controller runs, has said hello and is not lost: events and actions go to it."""
        return self.state.controller_live

    def _do(self, actions: list[Action]) -> None:
        """Carry out the run state's actions, in order (:mod:`testbed.run.state`)."""
        for a in actions:
            if isinstance(a, Journal):
                self.journal(a.record) if a.stamp else self.events.write(a.record)
            elif isinstance(a, Say):
                self.say(a.text, head=a.head, **({"head_style": a.style} if a.style else {}))
            elif isinstance(a, Send):
                sent = self.server.send(a.to, a.msg)
                if a.record is not None:
                    self.journal({**a.record, "sent": sent})
                if a.say is not None:
                    self.say(a.say.text + ("" if sent else a.say.unsent), head=a.say.head)
            elif isinstance(a, Begin):
                self._start()
            elif isinstance(a, Apply):
                self._apply(a.step)
            elif isinstance(a, LoseController):
                self._lose_controller(a.reason)
            elif isinstance(a, SpawnController):
                self._restart_controller(a.after)
            elif isinstance(a, Abort):
                raise RunnerError(f"{a.reason}; see {self.dir / LOG}")

    def _start(self) -> None:
        self._t_wall_start = time.time()
        self._cpu_start = _own_cpu_s()
        self.journal({"kind": "run", "phase": "start", "transport": self.transport, "world": self.world})
        self.server.broadcast(Start())
        self.state.workload_started(time.monotonic())
        self.progress.t_start = time.monotonic()
        self.progress.status = "running"
        self.say("all ranks ready: start")

    def _sample_links(self) -> None:
        t = time.time()
        for rec in self.counters.read():
            self.records.links.write({"t": t, **rec})

    def _check_controller(self, now: float) -> None:
        """The controller's health into the run state (:meth:`RunState.check_controller`): no hello
        ends the run (RunnerError naming its log); a loss is journaled and the run goes on
        without it, or with a new one if the scenario restarts it."""
        if self.state.controller is None:
            return
        self._do(self.state.check_controller(now, exit_code=self.controller.poll(),
                                             connected=self.server.has_controller,
                                             stalled_s=self.server.stalled_s(CONTROLLER)))

    def _restart_controller(self, after: str) -> None:
        """A new controller after a loss; one that cannot be started ends nothing (journaled)."""
        try:
            self._start_controller(self._ctl_socket, restart=after)
        except OSError as exc:
            self.journal({"kind": "controller", "phase": "not_restarted", "reason": f"cannot start it: {exc}"})
            self.say(f"not restarted: {exc}", head="controller", head_style="red")

    def _lose_controller(self, reason: str) -> None:
        """Disconnect a lost controller, kill it if it still runs (so it cannot act late), journal it."""
        self.server.disconnect(CONTROLLER)
        code = end_controller(self.controller)
        self.journal({"kind": "controller_lost", "reason": reason, "exit": code, "pid": self.controller.pid})
        self.say(f"controller lost ({reason}): the agents go on with their own remedies; "
                 f"see {self.dir / LOG}", head="controller", head_style="red")

    def _journal_drops(self) -> None:
        """The relay's ev_stats drops (back-pressure from a slow controller), when they grew."""
        dropped = self.server.dropped if isinstance(self.server, ControlServer) else 0
        if dropped > self._drops_journaled:
            self._drops_journaled = dropped
            self.journal({"kind": "relay", "to": "controller", "dropped_ev_stats": dropped})

    def _check_processes(self) -> None:
        self._check_controller(time.monotonic())
        self._journal_drops()
        for rank, proc in self.procs.items():
            code = proc.poll()
            if code is not None and self.state.on_exit(rank, code):
                self.journal({"kind": "agent", "rank": rank, "status": "crashed", "exit": code})
                return

    def _collect_remote(self) -> None:
        """The servers' records into this run directory (samples files and logs per agent), their
        CPU and agent scheduler records into ``cpu.jsonl`` and ``sched.jsonl`` (CPU tagged with its
        ``server``); all on this machine's clock."""
        try:
            got = self.remote.collect(self.dir)
        except Exception as exc:  # noqa: BLE001 - what was gathered here stays
            log.warning("%s: records from the servers: %s", self.transport, exc)
            return
        for name, recs in got.items():
            for rec in recs["cpu"]:
                self.records.cpu.write(rec)
            for rec in recs["sched"]:
                self.records.sched.write(rec)
        self.journal({"kind": "records", "servers": {name: {k: len(v) for k, v in recs.items()}
                                                     for name, recs in got.items()}})

    # -- faults ------------------------------------------------------------------------
    def _apply(self, step: Step) -> None:
        """Apply a due fault step through the injector (which journals it) and show it."""
        change = step.change
        self.faults.apply_step(step)
        if isinstance(change, Reconverge):
            self.say(f"routing reconverged around {', '.join(sorted(self.faults.links_down)) or 'no failed link'}")
            return
        self.state.step_applied(step, time.monotonic())
        event = self.state.timeline.events[step.index] if step.index is not None else None
        if event is not None and event.selector and event.links:
            # a link set: one line and one fault for its steps of one instant, not one per link
            if (key := (step.index, step.planned_s, step.phase)) != self._link_set_said:
                self._link_set_said = key
                self.progress.faults += step.phase == "apply"
                self.say(f"{event.selector} ({len(event.links)} links): {change.describe()} ({step.phase})",
                         head=step.action)
            return
        self.progress.faults += step.phase == "apply"
        self.say(f"{change.link}: {change.describe()} ({step.phase})", head=step.action)

    def _revert_all(self) -> None:
        """Undo every fault still applied (journaled by the injector as phase revert, action end)."""
        if self.faults is None:
            return
        try:
            self.faults.revert_all()
        except Exception as exc:  # noqa: BLE001 - teardown follows anyway
            log.warning("revert faults: %s", exc)

    # -- the end -------------------------------------------------------------------------
    def _finish(self) -> None:
        status = self.status or "interrupted"
        if self.job is not None:
            self.job.trace_pending = False   # late step reports trace nothing
        if self.ticker is not None and self.ticker.skipped:
            log.warning("%s: the runner missed %d sampling ticks of %g s (starved; the records' t show the gaps)",
                        self.transport, self.ticker.skipped, LINK_SAMPLE_S)
        try:
            if self.server is not None:
                self.server.broadcast(Stop())
                if self.controller_live:
                    self.server.to_controller(Stop())
                deadline = time.monotonic() + STOP_GRACE_S
                while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
                    for msg in self.server.poll(0.05):
                        try:
                            self._on_message(msg)
                        except Exception:  # noqa: BLE001 - late records are best effort
                            pass
            if self.server is not None:
                self._journal_drops()
            if (record := self.state.timeline_record()) is not None:
                self.journal(record)
            if self._cpu_start is not None:
                self.journal({"kind": "runner", "cpu_s": round(_own_cpu_s() - self._cpu_start, 3),
                              "wall_s": round(time.time() - self._t_wall_start, 3),
                              "priority": self.priority.how})
            self._revert_all()
            if self.remote is not None:
                self._collect_remote()
            merged = merge_samples(self.dir, self.samples, len(self.world))
            if merged["skipped"]:
                log.warning("%s: %d lines of the agents' samples files were not samples (skipped)",
                            self.transport, merged["skipped"])
            self.journal({"kind": "run", "phase": "end", "status": status, "reason": self.reason,
                          "exit_codes": {r: p.poll() for r, p in self.procs.items()},
                          "samples": merged})
        finally:
            self.priority.restore()
            self.records.close()
            if self.server is not None:
                self.server.close()
            if self.fabric is not None:
                self.fabric.stop()
            for f in self.logs:
                f.close()
            self.progress.status = status
            self.refresh()
