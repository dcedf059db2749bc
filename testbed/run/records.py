"""The run directory: its file names, the schema of every record file, and their writers.

Layout (DESIGN.md "Scenario run directory")::

    runs/<scenario>-<YYYYmmdd-HHMMSS>[-N]/
        manifest.json            versions, kernel, seed, topology hash, resolved spec,
                                 per-transport status (rewritten atomically as the run goes)
        <transport>/
            events.jsonl         the run's journal (below)
            samples.jsonl        agent flow samples
            links.jsonl          kernel link counters
            cpu.jsonl            host CPU use
            sched.jsonl          the agent processes' scheduler statistics
            jobs/rank<r>.json    the agents' job specs (:mod:`testbed.jobs`)
            agents/rank<r>.log   each agent's stdout and stderr

:func:`testbed.report.render` adds summary.json, CSV files and plots at the top level.

Every JSONL record is one JSON object per line; ``t`` is wall-clock ``time.time()``
seconds. Counters are cumulative (readers take differences).

``events.jsonl``: ``{"t", "kind", ...}`` with ``kind``:

* ``fabric`` ``{"phase": "up", "timings"}``; ``agents`` ``{"phase": "spawned", "pids": {rank: pid}}``;
* ``agent`` ``{"rank", "status": "ready" | "done" | "failed" | "crashed", "summary" | "reason" | "exit"}``;
* ``run`` ``{"phase": "start", "transport", "world"}`` and ``{"phase": "end", "status", "reason",
  "exit_codes": {rank: code | None}}``;
* ``iteration``: an agent's iteration report (:class:`agents.protocol.Iteration` fields,
  ``t`` = ``t_end``);
* ``ev_state`` / ``qp_error``: an agent's event (:class:`agents.protocol.Event` fields);
* ``fault`` ``{"action", "link", "phase": "apply" | "revert", "step", "value", "index"}`` (+ the nft
  drop counters when a loss or blackhole ends; ``action`` "end" and ``step`` "link" / "all"
  with ``nft_drops`` when everything still applied is reverted at the end),
  ``reconverge`` ``{"links_down"}``: written by :class:`testbed.faults.FaultInjector`;
* ``timeline`` ``{"not_reached": [step records], "never_triggered": [event index]}``.

``samples.jsonl``: ``{"t", "rank", "flows": [...], "loop": {"timers", "late_sum_s", "late_max_s"}}``
(an agent's :class:`agents.protocol.Sample`; ``loop``, the agent event loop's timer lateness
in s: ``timers`` fired and ``late_sum_s`` cumulative, ``late_max_s`` the largest since the
rank's previous sample; absent from agents that do not send it).

``links.jsonl``: ``{"t", **record}`` per link end and tick, ``record`` from
:meth:`testbed.counters.LinkCounters.read`.

``cpu.jsonl``: ``{"t", "busy_fraction", "cores": [fraction, ...]}`` per tick
(:class:`testbed.run.sampling.CpuSampler`).

``sched.jsonl``: ``{"t", "ranks": {"<rank>": [cpu_ns, wait_ns, slices]}}`` per tick: each
running agent process's ``/proc/<pid>/schedstat`` (time on a CPU, time waiting on a run
queue, both ns, and timeslices run; cumulative since the process started; an agent that
has exited is left out) (:class:`testbed.run.sampling.SchedSampler`).

``links.jsonl``, ``cpu.jsonl`` and ``sched.jsonl`` are written every
:data:`testbed.run.sampling.LINK_SAMPLE_S` while the workload runs; a tick the runner
could not keep is not made up, so the gap shows in the records' ``t``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import sys
import time
from pathlib import Path

from agents.protocol import Event, Iteration, Sample

from .. import __version__
from ..jobs import host_bandwidth_bps, host_link_rate_bps
from ..kernel import features
from ..spec import Scenario

MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
SAMPLES = "samples.jsonl"
LINKS = "links.jsonl"
CPU = "cpu.jsonl"
SCHED = "sched.jsonl"
JOBS_DIR = "jobs"
AGENT_LOGS_DIR = "agents"
TRANSPORT_FILES = (EVENTS, SAMPLES, LINKS, CPU, SCHED)
"""The JSONL files of every transport's directory."""


def agent_log(transport_dir: Path, rank: int) -> Path:
    """Where rank ``rank``'s stdout and stderr go."""
    return transport_dir / AGENT_LOGS_DIR / f"rank{rank}.log"


class JsonlWriter:
    """Append-only JSONL file, flushed by :meth:`flush` (the runner flushes every tick)."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "a", buffering=1 << 16)

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(record, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class TransportRecords:
    """The JSONL writers of one transport's directory (created with it), by file."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / AGENT_LOGS_DIR).mkdir(exist_ok=True)
        self.events = JsonlWriter(directory / EVENTS)
        self.samples = JsonlWriter(directory / SAMPLES)
        self.links = JsonlWriter(directory / LINKS)
        self.cpu = JsonlWriter(directory / CPU)
        self.sched = JsonlWriter(directory / SCHED)

    @property
    def writers(self) -> tuple[JsonlWriter, ...]:
        return (self.events, self.samples, self.links, self.cpu, self.sched)

    def flush(self) -> None:
        for w in self.writers:
            w.flush()

    def close(self) -> None:
        for w in self.writers:
            w.close()


# -- records from the agents' messages ----------------------------------------------
def sample_record(msg: Sample) -> dict:
    """A ``samples.jsonl`` record."""
    rec = {"t": msg.t, "rank": msg.rank, "flows": msg.flows}
    if msg.loop is not None:
        rec["loop"] = msg.loop.as_dict()
    return rec


def iteration_record(msg: Iteration) -> dict:
    """An ``events.jsonl`` record of kind ``iteration``: the report's fields, ``t`` = its ``t_end``."""
    return {"t": msg.t_end, "kind": "iteration", **msg.as_dict()}


def event_record(msg: Event) -> dict:
    """An ``events.jsonl`` record of an agent's event (kind ``ev_state`` or ``qp_error``)."""
    return msg.as_dict()


# -- manifest.json -------------------------------------------------------------------
def versions() -> dict:
    """Versions of the testbed, Python, the kernel and the libraries a run depends on."""
    out = {"testbed": __version__, "python": platform.python_version(), "kernel": platform.release()}
    for mod in ("pyroute2", "numpy", "rich", "yaml"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except ImportError:
            pass
    return out


def new_run_dir(scenario: Scenario, runs_root: Path) -> Path:
    """``runs_root/<scenario>-<YYYYmmdd-HHMMSS>`` (a ``-N`` suffix if it exists), created."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(runs_root) / f"{scenario.name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Replace ``run_dir/manifest.json`` atomically (a reader never sees half a file)."""
    tmp = run_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, default=str))
    tmp.replace(run_dir / MANIFEST)


def base_manifest(scenario: Scenario) -> dict:
    """The manifest before any transport ran: ``transports`` (run so far, in order),
    ``planned_transports``, ``status`` ({transport: {"status", "reason"}}) fill in as it goes."""
    topo_bytes = Path(scenario.topology_path).read_bytes() if Path(scenario.topology_path).is_file() else b""
    hosts = scenario.workload.hosts
    return {
        "scenario": scenario.to_dict(), "transports": [], "planned_transports": list(scenario.transports),
        "world_size": len(hosts), "host_link_rate_bps": host_link_rate_bps(scenario),
        "host_bandwidth_bps": host_bandwidth_bps(scenario),
        "host_nics": min(len(scenario.topology.nics[h]) for h in hosts), "seed": scenario.seed,
        "workload": scenario.to_dict()["workload"],
        "topology_sha256": hashlib.sha256(topo_bytes).hexdigest(),
        "versions": versions(), "kernel_features": dataclasses.asdict(features()), "started_at": time.time(),
        "status": {}, "argv": sys.argv,
    }
