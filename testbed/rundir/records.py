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
            jobs/rank<r>.json    the agents' job specs (:mod:`testbed.spec.jobs`)
            samples/rank<r>.jsonl  while agents run: each agent's own samples, merged
                                 into samples.jsonl at the end (:func:`merge_samples`)
            agents/rank<r>.log   each agent's stdout and stderr

:func:`testbed.report.render` adds summary.json, CSV files and plots at the top level.

Every JSONL record is one JSON object per line; ``t`` is wall-clock ``time.time()``
seconds. Counters are cumulative (readers take differences).

``events.jsonl``: ``{"t", "kind", ...}`` with ``kind``:

* ``fabric`` ``{"phase": "up", "timings"}``; ``agents`` ``{"phase": "spawned", "pids": {rank: pid}}``;
* ``agent`` ``{"rank", "status": "ready" | "done" | "failed" | "crashed", "summary" | "reason" | "exit"}``;
* ``run`` ``{"phase": "start", "transport", "world"}`` and ``{"phase": "end", "status", "reason",
  "exit_codes": {rank: code | None}, "samples": {"files", "samples", "skipped"}}`` (the merge
  of the agents' samples files, :func:`merge_samples`);
* ``iteration``: an agent's iteration report (:class:`agents.protocol.Iteration` fields,
  ``t`` = ``t_end``);
* ``ev_state`` / ``qp_error``: an agent's event (:class:`agents.protocol.Event` fields);
* ``fault`` ``{"action", "link", "phase": "apply" | "revert", "step", "value", "index"}`` (+ the nft
  drop counters when a loss or blackhole ends; ``action`` "end" and ``step`` "link" / "all"
  with ``nft_drops`` when everything still applied is reverted at the end),
  ``reconverge`` ``{"links_down"}``: written by :class:`testbed.faults.FaultInjector`;
* ``timeline`` ``{"not_reached": [step records], "never_triggered": [event index]}``;
* ``runner`` ``{"cpu_s", "wall_s", "priority"}``: the runner process's own CPU (user +
  system, all threads) from the agents' start to the end of the run, that wall-clock span,
  and how its CPU priority was raised (``"autogroup"``, ``"threads"`` or null; see
  :class:`testbed.run.lifecycle.RunnerPriority`).

``samples.jsonl``: ``{"t", "rank", "flows": [...], "loop": {"timers", "late_sum_s", "late_max_s"}}``
(an agent's :class:`agents.protocol.Sample`; ``loop``, the agent event loop's timer lateness
in s: ``timers`` fired and ``late_sum_s`` cumulative, ``late_max_s`` the largest since the
rank's previous sample; absent from agents that do not send it).

``links.jsonl``: ``{"t", **record}`` per link end and tick, ``record`` from
:meth:`testbed.fabric.counters.LinkCounters.read`.

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

import heapq
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agents.protocol import Event, Iteration, sample_record  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from testbed.spec import Scenario

MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
SAMPLES = "samples.jsonl"
SAMPLES_DIR = "samples"
LINKS = "links.jsonl"
CPU = "cpu.jsonl"
SCHED = "sched.jsonl"
JOBS_DIR = "jobs"
AGENT_LOGS_DIR = "agents"
TRANSPORT_FILES = (EVENTS, SAMPLES, LINKS, CPU, SCHED)
"""The JSONL files of every transport's directory."""
PATHS = "paths.json"
SUMMARY = "summary.json"
DIR_MODE = 0o700            # run directories: other local users kept out
FILE_MODE = 0o600           # the files in them, the ledger, the control socket
SAFE_NAME = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}"
"""A transport name: it names a subdirectory, so no separator, no ``..``."""


# -- the schema: one definition of every record, used by the writers' tests and the readers --
# A check is a callable ``(value, where) -> list of problems`` ("where: what is wrong"); the
# readers (:mod:`testbed.rundir.loading`) drop a record with problems and report them with
# file and line. Objects accept unknown keys (newer writers add fields); the keys a reader
# uses are typed here, with bounds that keep every allocation a reader sizes by them small.
def _show(v) -> str:
    text = json.dumps(v, default=repr) if not isinstance(v, float) or math.isfinite(v) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_num(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return -2**63 <= v < 2**64
    return isinstance(v, float) and math.isfinite(v)


class Check:
    """A type with bounds: ``what`` it must be, ``test(value) -> bool``. Every check has
    :meth:`ok` (fast, for the good records) and is called as ``check(value, where)`` for the
    list of problems (at most one per check)."""

    def __init__(self, what: str, test):
        self.what, self.ok = what, test

    def __call__(self, v, where: str = "") -> list[str]:
        return [] if self.ok(v) else [f"{where or 'value'}: expected {self.what}, got {_show(v)}"]


def Num(lo: float = -math.inf, hi: float = math.inf, what: str = "a finite number") -> Check:
    """A finite JSON number (not a boolean) in ``[lo, hi]``."""
    bounds = "" if (lo, hi) == (-math.inf, math.inf) else f" in [{lo:g}, {hi:g}]"
    return Check(what + bounds, lambda v: _is_num(v) and lo <= v <= hi)


def Int(lo: int = -2**63, hi: int = 2**63, what: str = "an integer") -> Check:
    """A JSON integer (not a boolean) in ``[lo, hi]``."""
    bounds = "" if (lo, hi) == (-2**63, 2**63) else f" in [{lo}, {hi}]"
    return Check(what + bounds, lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi)


NUM = Num()
COUNTER = Num(0, 2**64, "a counter")
TIME = Num(0, 1e11, "a wall-clock time in s")
RANK = Int(0, 1 << 20, "a rank")
STR = Check("a string", lambda v: isinstance(v, str))
BOOL = Check("true or false", lambda v: isinstance(v, bool))
ANY = Check("anything", lambda v: True)
KEY = Check("a string, an integer or null", lambda v: v is None or isinstance(v, str)
            or (isinstance(v, int) and not isinstance(v, bool)))
"""Values used as dictionary keys by the readers (peer, dir, ev_id): hashable JSON scalars."""


class Opt:
    """``check`` or null."""

    def __init__(self, check):
        self.check = check

    def ok(self, v) -> bool:
        return v is None or self.check.ok(v)

    def __call__(self, v, where: str = "") -> list[str]:
        return [] if v is None else self.check(v, where)


class ListOf:
    """A JSON array of ``min_len`` to ``max_len`` items, each ``item``."""

    def __init__(self, item, max_len: int = 1 << 20, min_len: int = 0):
        self.item, self.max_len, self.min_len = item, max_len, min_len

    def ok(self, v) -> bool:
        item = self.item.ok
        return isinstance(v, list) and self.min_len <= len(v) <= self.max_len and all(map(item, v))

    def __call__(self, v, where: str = "") -> list[str]:
        if not isinstance(v, list):
            return [f"{where}: expected an array, got {_show(v)}"]
        if not self.min_len <= len(v) <= self.max_len:
            return [f"{where}: {len(v)} items, expected {self.min_len} to {self.max_len}"]
        for i, x in enumerate(v):
            if not self.item.ok(x):
                return self.item(x, f"{where}[{i}]")
        return []


class MapOf:
    """A JSON object of any keys, at most ``max_len``, each value ``value``."""

    def __init__(self, value, max_len: int = 1 << 20):
        self.value, self.max_len = value, max_len

    def ok(self, v) -> bool:
        return isinstance(v, dict) and len(v) <= self.max_len and all(map(self.value.ok, v.values()))

    def __call__(self, v, where: str = "") -> list[str]:
        if not isinstance(v, dict):
            return [f"{where}: expected an object, got {_show(v)}"]
        if len(v) > self.max_len:
            return [f"{where}: {len(v)} keys, more than {self.max_len}"]
        for k, x in v.items():
            if not self.value.ok(x):
                return self.value(x, f"{where}.{k}")
        return []


class Obj:
    """A JSON object: ``required`` and ``optional`` keys with their checks (others allowed).
    ``check(value, where)`` returns the first problem; :meth:`problems` one per bad key."""

    def __init__(self, required: dict | None = None, optional: dict | None = None):
        self.required, self.optional = dict(required or {}), dict(optional or {})
        self._req = tuple((k, c.ok) for k, c in self.required.items())
        self._opt = tuple((k, c.ok) for k, c in self.optional.items())

    def extend(self, required: dict | None = None, optional: dict | None = None) -> "Obj":
        return Obj({**self.required, **(required or {})}, {**self.optional, **(optional or {})})

    def ok(self, v) -> bool:
        if type(v) is not dict:
            return False
        for k, ok in self._req:
            if k not in v or not ok(v[k]):
                return False
        for k, ok in self._opt:
            if k in v and not ok(v[k]):
                return False
        return True

    def problems(self, v, where: str = "") -> list[str]:
        pre = f"{where}." if where else ""
        if not isinstance(v, dict):
            return [f"{where or 'record'}: expected an object, got {_show(v)}"]
        out = [f"{pre}{k}: missing" for k in self.required if k not in v]
        for k, check in (*self.required.items(), *self.optional.items()):
            if k in v:
                out += check(v[k], pre + k)[:1]
        return out

    def __call__(self, v, where: str = "") -> list[str]:
        return self.problems(v, where)[:1]


def check_record(schema, value) -> str | None:
    """The first problem of ``value`` against ``schema`` (an :class:`Obj` or a check), None if good."""
    if schema.ok(value):
        return None
    p = schema(value, "")
    return p[0].lstrip(".") if p else None


# events.jsonl: every record has t and kind; the kinds the readers use have their fields.
EVENT = Obj({"t": TIME, "kind": STR})
_EV_FIELDS = {"peer": KEY, "dir": Opt(STR), "qpn": Opt(Int()), "ev_id": KEY, "old": Opt(STR), "new": Opt(STR),
              "cause": Opt(STR), "reason": Opt(STR)}
EVENT_KINDS = {
    "iteration": EVENT.extend({"rank": RANK, "size": Int(0, 1 << 40, "a size in bytes"), "iter": Int(0, 1 << 31),
                               "t_start": TIME, "t_end": TIME, "seconds": Num(0, 1e9)},
                              {"seq": Opt(Int()), "warmup": Opt(BOOL), "wrong": Opt(Int(0, 1 << 62))}),
    "ev_state": EVENT.extend({"rank": RANK}, _EV_FIELDS),
    "qp_error": EVENT.extend({"rank": RANK}, _EV_FIELDS),
    "agent": EVENT.extend({"rank": RANK}, {"status": Opt(STR)}),
    "run": EVENT.extend({}, {"phase": Opt(STR), "status": Opt(STR), "reason": Opt(STR)}),
    "fault": EVENT.extend({}, {"action": Opt(STR), "link": Opt(STR), "phase": Opt(STR)}),
}
"""``events.jsonl`` by ``kind`` (others: :data:`EVENT`)."""

_EV = Obj({"ev_id": KEY}, {"state": Opt(STR), "sent": Opt(COUNTER), "lost": Opt(COUNTER)})
FLOW = Obj({}, {"peer": KEY, "dir": KEY, "bytes": Opt(COUNTER), "retransmits": Opt(COUNTER),
                "rtt_s": Opt(NUM), "cwnd_bytes": Opt(NUM), "retransmitted_bytes": Opt(COUNTER),
                "evs": Opt(ListOf(_EV, 1 << 16))})
SAMPLE = Obj({"t": TIME, "rank": RANK, "flows": ListOf(FLOW, 1 << 16)},
             {"loop": Opt(Obj({}, {"late_max_s": Opt(NUM), "late_sum_s": Opt(NUM), "timers": Opt(NUM)}))})
"""``samples.jsonl`` (:class:`agents.protocol.Sample`)."""
LINK = Obj({"t": TIME, "link": STR}, {"end": STR, "tx_bytes": Opt(COUNTER), "drops": Opt(COUNTER),
                                      "rate_bps": Opt(NUM), "ecn_marked": Opt(COUNTER), "trimmed": Opt(COUNTER),
                                      "switch_drops": Opt(COUNTER)})
"""``links.jsonl`` (:meth:`testbed.fabric.counters.LinkCounters.read` + ``t``)."""
CPU_RECORD = Obj({"t": TIME, "busy_fraction": Num(0, 1e6)}, {"cores": Opt(ListOf(NUM, 1 << 16)), "server": Opt(STR)})
"""``cpu.jsonl`` (``server``: a fabric's server, sampled by its worker; absent: the runner's machine)."""
SCHED_RECORD = Obj({"t": TIME}, {"ranks": MapOf(ListOf(COUNTER, 3, 3), 1 << 20)})
"""``sched.jsonl``."""
JSONL_RECORDS = {EVENTS: EVENT, SAMPLES: SAMPLE, LINKS: LINK, CPU: CPU_RECORD, SCHED: SCHED_RECORD}
"""The schema of every JSONL file of a transport directory, by file name."""


def event_schema(record) -> Obj:
    """The schema of one ``events.jsonl`` record (by its ``kind``)."""
    kind = record.get("kind") if isinstance(record, dict) else None
    return EVENT_KINDS.get(kind, EVENT) if isinstance(kind, str) else EVENT


_EV_PATH = Obj({"ev_id": KEY}, {"links": Opt(ListOf(STR, 1 << 10))})
_PEER = Obj({}, {"evs": ListOf(_EV_PATH, 1 << 16), "host": STR, "rank": RANK})
JOB = Obj({"rank": RANK}, {"world": ListOf(STR, 1 << 20), "next": _PEER, "prev": _PEER,
                           "send_to": ListOf(_PEER, 1 << 16), "recv_from": ListOf(_PEER, 1 << 16),
                           "collective": STR, "job": STR, "agent": RANK,
                           "qp": Obj({}, {"cc_params": Obj({}, {"base_rtt_s": Opt(Num(0, 1e6))})})})
"""``jobs/rank<r>.json`` (:mod:`testbed.spec.jobs`; the keys the metrics read)."""
PATH_FLOW = Obj({"src_rank": RANK, "dst_rank": RANK}, {"kind": Opt(STR), "links": ListOf(STR, 1 << 10),
                                                       "job": STR})
PATHS_DOC = Obj({}, {"flows": ListOf(ANY, 1 << 20)})
"""``paths.json``: ``{"transport", "flows": [PATH_FLOW]}`` (:mod:`testbed.fabric.paths`)."""

MAX_WORLD = 1 << 15         # ranks: one per host NIC at most (testbed.spec.MAX_HOST_NICS)
MAX_SIZE_BYTES = 1 << 40
_WORKLOAD = Obj({"min_bytes": Int(1, MAX_SIZE_BYTES), "max_bytes": Int(1, MAX_SIZE_BYTES),
                 "factor": Int(2, 1 << 20), "iterations": Int(0, 1 << 24)}, {"warmup": Opt(Int(0, 1 << 24))})
MANIFEST_FIELDS = {
    "scenario": Check("an object or a string", lambda v: isinstance(v, (dict, str))),
    "transports": ListOf(Check(f"a transport name ({SAFE_NAME})", lambda v: isinstance(v, str)
                               and _safe_name(v)), 64),
    "world_size": Opt(Int(1, MAX_WORLD)), "host_link_rate_bps": Opt(Num(1, 1e15)),
    "host_bandwidth_bps": Opt(Num(1, 1e18)), "host_nics": Opt(Int(1, MAX_WORLD)), "workload": Opt(_WORKLOAD),
    "spec": Check("an object", lambda v: isinstance(v, dict)), "seed": Opt(Int()), "status": Opt(MapOf(ANY)), "planned_transports": Opt(ListOf(STR, 64)),
    "started_at": Opt(TIME), "finished_at": Opt(TIME),
}
"""``manifest.json`` by top-level key (:func:`base_manifest`); the readers drop a bad key and go on.
``scenario`` and ``spec`` (older runs), when objects, are checked as :data:`SCENARIO_FIELDS`."""
SCENARIO_FIELDS = {"name": STR, "workload": _WORKLOAD, "timeout_s": Num(0, 1e9)}
SUMMARY_DOC = Obj({"transports": MapOf(Obj({"transport": STR, "completion": Obj({}), "iteration_s": Obj({})}), 64),
                   "comparison": ListOf(Obj({}), 64)}, {"damage": ListOf(STR, 1 << 16)})
"""``summary.json`` (written by :func:`testbed.report.write_outputs`; the keys every table reads)."""


def _safe_name(v: str) -> bool:
    import re
    return re.fullmatch(SAFE_NAME, v) is not None and v not in (".", "..")


# -- writing -------------------------------------------------------------------------
def write_atomic(path: Path, text: str | bytes, mode: int = FILE_MODE) -> None:
    """Replace ``path`` with ``text`` atomically: a temporary file in the same directory
    (created with ``mode``), flushed, then renamed (a reader sees the old or the new file)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def private_opener(path, flags):
    """``open`` opener: files created ``FILE_MODE``."""
    return os.open(path, flags, FILE_MODE)


def agent_log(transport_dir: Path, rank: int) -> Path:
    """Where rank ``rank``'s stdout and stderr go."""
    return transport_dir / AGENT_LOGS_DIR / f"rank{rank}.log"


def samples_file(transport_dir: Path, rank: int) -> Path:
    """Where agent ``rank`` writes its samples while it runs (the job spec's ``samples_path``)."""
    return transport_dir / SAMPLES_DIR / f"rank{rank}.jsonl"


def merge_samples(transport_dir: Path, writer: JsonlWriter | None = None, world: int | None = None) -> dict:
    """Merge the agents' samples files (``samples/rank<r>.jsonl``) into ``samples.jsonl`` in time
    order (each file is in time order: a k-way merge), then delete them.

    Every line is validated as on the control socket (:func:`agents.protocol.sample_from_record`);
    a line that is not a sample (a SIGKILLed agent's torn last line) or names a rank outside
    ``range(world)`` is skipped and counted. ``writer``: the open samples.jsonl writer (else
    the file is appended to). Returns ``{"files", "samples", "skipped"}``. Safe to call
    again (nothing left to merge: zeros), so a report can finish a run the runner did not.
    """
    from agents.protocol import ProtocolError, sample_from_record

    d = transport_dir / SAMPLES_DIR
    files = sorted(d.glob("rank*.jsonl")) if d.is_dir() else []
    skipped = 0

    def records(path: Path):
        nonlocal skipped
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    msg = sample_from_record(json.loads(line))
                except (ValueError, ProtocolError):
                    skipped += 1
                    continue
                if world is not None and not 0 <= msg.rank < world:
                    skipped += 1
                    continue
                yield msg.t, sample_record(msg)

    own = writer is None
    out = writer or JsonlWriter(transport_dir / SAMPLES)
    n = 0
    try:
        for _, rec in heapq.merge(*(records(p) for p in files), key=lambda tr: tr[0]):
            out.write(rec)
            n += 1
        out.flush()
    finally:
        if own:
            out.close()
    for path in files:
        path.unlink()
    if d.is_dir() and not any(d.iterdir()):
        d.rmdir()
    return {"files": len(files), "samples": n, "skipped": skipped}


class JsonlWriter:
    """Append-only JSONL file, flushed by :meth:`flush` (the runner flushes every tick)."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "a", buffering=1 << 16, opener=private_opener)

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
        directory.mkdir(DIR_MODE, parents=True, exist_ok=True)
        (directory / AGENT_LOGS_DIR).mkdir(DIR_MODE, exist_ok=True)
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
def iteration_record(msg: Iteration) -> dict:
    """An ``events.jsonl`` record of kind ``iteration``: the report's fields, ``t`` = its ``t_end``."""
    return {"t": msg.t_end, "kind": "iteration", **msg.as_dict()}


def event_record(msg: Event) -> dict:
    """An ``events.jsonl`` record of an agent's event (kind ``ev_state`` or ``qp_error``)."""
    return msg.as_dict()




def new_run_dir(scenario: Scenario, runs_root: Path) -> Path:
    """``runs_root/<scenario>-<YYYYmmdd-HHMMSS>`` (a ``-N`` suffix if it exists), created
    :data:`DIR_MODE` (``runs_root`` itself, when created, too)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    Path(runs_root).mkdir(DIR_MODE, parents=True, exist_ok=True)
    base = Path(runs_root) / f"{scenario.name}-{stamp}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(DIR_MODE)
            break
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")
    os.chmod(path, DIR_MODE)     # whatever the umask
    return path


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Replace ``run_dir/manifest.json`` atomically (a reader never sees half a file)."""
    write_atomic(Path(run_dir) / MANIFEST, json.dumps(manifest, indent=1, default=str))


