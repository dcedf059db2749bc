"""A worker's agents: started in its shard's hosts, their control channel relayed to the runner.

:class:`AgentRelay` runs on each server (inside ``testbed worker``). It starts the agents of
the jobs whose hosts are on this server, with the same job specs the runner writes, but
with ``control_socket`` and ``samples_path`` pointing into a private work directory on
this server. The agents talk to a :class:`testbed.run.control.ControlServer` there, which
keeps its peer checks (``SO_PEERCRED``: this uid, and a process this relay started). A
thread relays every agent message to the runner as a pushed line on the worker's channel,
``{"push": "agent", "line": <the message as on the control socket>}``, and every agent exit
as ``{"push": "exit", "rank", "code"}`` (after the messages the agent sent before it exited).
The runner's messages (start, stop) go the other way through :meth:`AgentRelay.send`.

While the workload runs (after the runner's start) the same thread samples this server's
CPU and its agents' scheduler statistics every :data:`testbed.run.sampling.LINK_SAMPLE_S`,
as the runner does on one machine (``cpu.jsonl``, ``sched.jsonl`` formats). :meth:`collect`
returns the records (samples files, logs, CPU, scheduler) for the runner to file; clocks are
this server's (the runner shifts them by the offset it measured).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 3.0          # an agent still running at stop gets SIGTERM, then SIGKILL after this
MAX_LOG_BYTES = 1 << 20     # of each agent's log returned by collect (the tail)


class AgentRelay:
    """The agents of ``jobs`` (job spec dicts, :func:`testbed.spec.jobs.build_all_jobs`; each
    ``host`` on ``fabric``) in ``workdir``; ``emit(obj)`` writes one pushed line to the runner
    (thread-safe)."""

    def __init__(self, fabric, workdir: Path, emit: Callable[[dict], None], *, python: str = sys.executable):
        from testbed.run.control import ControlServer
        self.fabric, self.workdir, self.emit, self.python = fabric, Path(workdir), emit, python
        self.procs: dict[int, subprocess.Popen] = {}
        self.logs: list = []
        self.exited: dict[int, int] = {}
        self.log_of: dict[int, Path] = {}
        self.started = False
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for sub in ("jobs", "samples", "logs"):
            (self.workdir / sub).mkdir(mode=0o700, exist_ok=True)
        self.server = ControlServer(str(self.workdir / "control.sock"),
                                    allowed_pids=lambda: [p.pid for p in list(self.procs.values())])
        self._thread = threading.Thread(target=self._run, name="agent-relay", daemon=True)

    def start(self, jobs: list[dict], processes: int | None = None) -> dict[int, int]:
        """Spawn the agents of ``jobs``: one process per job in its host's namespace
        (``processes`` None), else that many host runtimes (:mod:`agents.runtime`; 0: one per
        core of this server); returns {agent id: pid}. Raises KeyError if a job's host is not
        on this server (nothing spawned then)."""
        from testbed.run.agents import agent_command, agent_env, runtime_groups
        for job in jobs:
            if not self.fabric.is_local(job["host"]):
                raise KeyError(f"{job['host']} (agent {job['agent']}) is not on this server")
        paths = []
        for job in jobs:
            rank = job["agent"]
            job = {**job, "control_socket": self.server.path,
                   "samples_path": str(self.workdir / "samples" / f"rank{rank}.jsonl")}
            paths.append(self.workdir / "jobs" / f"rank{rank}.json")
            paths[-1].write_text(json.dumps(job))
        if processes == 0:
            processes = len(os.sched_getaffinity(0))
        groups = [[i] for i in range(len(jobs))] if processes is None else runtime_groups(len(jobs), processes)
        for members in groups:
            argv = agent_command(self.python, self.fabric, jobs, paths, members, runtime=processes is not None)
            logf = open(self.workdir / "logs" / f"proc{len(self.logs)}.log", "wb")
            self.logs.append(logf)
            proc = self.fabric.popen(jobs[members[0]]["host"], argv, stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=str(REPO), env=agent_env())
            for i in members:
                self.procs[jobs[i]["agent"]] = proc
                self.log_of[jobs[i]["agent"]] = Path(logf.name)
        self._thread.start()
        return {rank: p.pid for rank, p in self.procs.items()}

    def send(self, line: str, rank: int | None = None) -> None:
        """Send the runner's message ``line`` (as on the control socket) to agent ``rank``, or
        to every agent; a start also starts the sampling."""
        self._outbox.put((rank, line))
        self.server.wakeup()

    # -- the relay thread ------------------------------------------------------------
    def _run(self) -> None:
        from agents.protocol import RUNNER_MESSAGES, LineFramer, Start, encode
        from testbed.run.sampling import LINK_SAMPLE_S, CpuSampler, SchedSampler, Ticker
        framer = LineFramer(RUNNER_MESSAGES)
        cpu, sched = CpuSampler(), SchedSampler(self.procs)
        with open(self.workdir / "cpu.jsonl", "w", buffering=1) as cpu_f, \
                open(self.workdir / "sched.jsonl", "w", buffering=1) as sched_f:   # whole lines for collect
            tick = Ticker(LINK_SAMPLE_S, time.monotonic())
            while not self._stop.is_set():
                try:
                    msgs = self.server.poll(max(0.0, tick.next - time.monotonic()))
                except Exception as exc:  # noqa: BLE001 - the relay keeps going; the runner sees exits
                    log.warning("agent relay: %s", exc)
                    msgs = []
                self._relay(msgs, encode)
                while True:
                    try:
                        rank, line = self._outbox.get_nowait()
                    except queue.Empty:
                        break
                    for msg in framer.feed(line.encode()):
                        if isinstance(msg, Start) and not self.started:
                            self.started = True
                            cpu.sample()   # the CPU window starts at the start
                        if rank is None:
                            self.server.broadcast(msg)
                        else:
                            self.server.send(rank, msg)
                self._exits(encode)
                if tick.due(time.monotonic()) and self.started:
                    cpu_f.write(json.dumps(cpu.sample()) + "\n")
                    sched_f.write(json.dumps(sched.sample()) + "\n")

    def _relay(self, msgs, encode) -> None:
        for msg in msgs:
            self.emit({"push": "agent", "line": encode(msg).decode()})

    def _exits(self, encode) -> None:
        for rank, proc in self.procs.items():
            if rank in self.exited:
                continue
            code = proc.poll()
            if code is None:
                continue
            self._relay(self.server.poll(0), encode)   # what it sent before it exited comes first
            self.exited[rank] = code
            self.emit({"push": "exit", "rank": rank, "code": code})

    # -- the end -----------------------------------------------------------------------
    def collect(self) -> dict:
        """This server's records: ``{"ranks": {agent id: {"samples": text, "log": text}},
        "cpu": text, "sched": text}`` (the logs' last :data:`MAX_LOG_BYTES`)."""
        def text(path: Path, tail: int | None = None) -> str:
            try:
                with open(path, "rb") as f:
                    if tail is not None:
                        f.seek(max(0, os.fstat(f.fileno()).st_size - tail))
                    return f.read().decode(errors="replace")
            except FileNotFoundError:
                return ""
        for f in self.logs:
            f.flush()
        return {"ranks": {rank: {"samples": text(self.workdir / "samples" / f"rank{rank}.jsonl"),
                                 "log": text(self.log_of[rank], MAX_LOG_BYTES)}
                          for rank in self.procs},
                "cpu": text(self.workdir / "cpu.jsonl"), "sched": text(self.workdir / "sched.jsonl")}

    def stop(self) -> None:
        """End the relay thread; SIGTERM the agents still running, SIGKILL after
        :data:`STOP_GRACE_S`; close the control socket. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.server.wakeup()
        if self._thread.is_alive():
            self._thread.join(5.0)
        procs = list({id(p): p for p in self.procs.values()}.values())   # a runtime serves several
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.server.close()
        for f in self.logs:
            f.close()
        self.logs.clear()
