"""The schema of every record file of a run directory (the checks: :mod:`testbed.rundir.schema`).

Every JSONL record is one JSON object per line; ``t`` is wall-clock ``time.time()``
seconds. Counters are cumulative (readers take differences).

``events.jsonl``: ``{"t", "kind", ...}`` with ``kind``:

* ``fabric`` ``{"phase": "up", "backend", "timings"}`` (``backend``: the registered name of the fabric that
  built it, :func:`testbed.fabric.backend.backend`); ``agents`` ``{"phase": "spawned", "pids": {rank: pid}}``;
* ``agent`` ``{"rank", "status": "ready" | "done" | "failed" | "crashed", "summary" | "reason" | "exit"}``;
* ``run`` ``{"phase": "start", "transport", "world"}`` and ``{"phase": "end", "status", "reason",
  "exit_codes": {rank: code | None}, "samples": {"files", "samples", "skipped"}}`` (the merge
  of the agents' samples files, :func:`merge_samples`);
* ``iteration``: an agent's iteration report (:class:`agents.protocol.Iteration` fields,
  ``t`` = ``t_end``);
* ``ev_state`` / ``qp_error`` / ``ev_command`` / ``ev_query``: an agent's event
  (:class:`agents.protocol.Event` fields; ``ev_query``: its answer to a restarted controller);
* ``fault`` ``{"action", "link", "phase": "apply" | "revert", "step", "value", "index", "planned_s"}``
  (``planned_s``: when the timeline scheduled it, s since the workload start; + the nft drop
  counters when a loss or blackhole ends; ``action`` "end" and ``step`` "link" / "all" with
  ``nft_drops`` when everything still applied is reverted at the end),
  ``reconverge`` ``{"links_down"}``: written by :class:`testbed.faults.FaultInjector`;
* ``controller`` (``phase`` spawned, connected, ``restart`` ``{"pid", "attempt", "after"}``,
  ``resynced`` (:class:`agents.protocol.Synced` fields), ``not_restarted`` ``{"reason"}``; timeline
  actions, relayed commands and queries);
  ``controller_lost`` ``{"reason", "exit", "pid"}``: the controller exited, closed its connection
  or stopped reading after its hello; the run went on without it (:mod:`testbed.run.ctlwatch`);
  ``relay`` ``{"to": "controller", "dropped_ev_stats"}``: ev_stats dropped so far for back-pressure
  (:mod:`testbed.run.sendq`), written when the count grows;
* ``timeline`` ``{"not_reached": [step records], "never_triggered": [event index]}``;
* ``runner`` ``{"cpu_s", "wall_s", "priority"}``: the runner process's own CPU (user +
  system, all threads) from the agents' start to the end of the run, that wall-clock span,
  and how its CPU priority was raised (``"autogroup"``, ``"threads"`` or null; see
  :class:`testbed.run.priority.RunnerPriority`).

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

import dataclasses

from agents.jobspec import EVSpec, JobSpec, PeerSpec
from testbed.rundir.names import CPU, EVENTS, LINKS, SAFE_NAME, SAMPLES, SCHED, safe_name
from testbed.rundir.schema import ANY, BOOL, COUNTER, KEY, NUM, RANK, STR, TIME, Check, Int, ListOf, MapOf, Num, Obj, Opt


EVENT = Obj({"t": TIME, "kind": STR})
_EV_FIELDS = {"peer": KEY, "dir": Opt(STR), "qpn": Opt(Int()), "ev_id": KEY, "old": Opt(STR), "new": Opt(STR),
              "cause": Opt(STR), "reason": Opt(STR), "loss_cause": Opt(STR)}
EVENT_KINDS = {
    "iteration": EVENT.extend({"rank": RANK, "size": Int(0, 1 << 40, "a size in bytes"), "iter": Int(0, 1 << 31),
                               "t_start": TIME, "t_end": TIME, "seconds": Num(0, 1e9)},
                              {"seq": Opt(Int()), "warmup": Opt(BOOL), "wrong": Opt(Int(0, 1 << 62))}),
    "ev_state": EVENT.extend({"rank": RANK}, _EV_FIELDS),
    "qp_error": EVENT.extend({"rank": RANK}, _EV_FIELDS),
    "agent": EVENT.extend({"rank": RANK}, {"status": Opt(STR)}),
    "run": EVENT.extend({}, {"phase": Opt(STR), "status": Opt(STR), "reason": Opt(STR)}),
    "fault": EVENT.extend({}, {"action": Opt(STR), "link": Opt(STR), "phase": Opt(STR), "index": Opt(Int()),
                               "planned_s": Opt(NUM)}),
    "controller_lost": EVENT.extend({"reason": STR}, {"exit": Opt(Int()), "pid": Opt(Int())}),
    "relay": EVENT.extend({"to": STR, "dropped_ev_stats": COUNTER}),
}
"""``events.jsonl`` by ``kind`` (others: :data:`EVENT`)."""

_EV = Obj({"ev_id": KEY}, {"state": Opt(STR), "sent": Opt(COUNTER), "lost": Opt(COUNTER)})
FLOW = Obj({}, {"peer": KEY, "dir": KEY, "bytes": Opt(COUNTER), "retransmits": Opt(COUNTER),
                "rtt_s": Opt(NUM), "cwnd_bytes": Opt(NUM), "retransmitted_bytes": Opt(COUNTER),
                "busy": Opt(BOOL), "evs": Opt(ListOf(_EV, 1 << 16))})
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


def _fields_of(cls, schema: Obj) -> Obj:
    """``schema``, after checking that every key it types is a field of the dataclass ``cls``
    (the job spec is defined once, in :mod:`agents.jobspec`: a renamed or dropped key fails here)."""
    stale = set(schema.required) | set(schema.optional)
    stale -= {f.name for f in dataclasses.fields(cls)}
    if stale:
        raise AssertionError(f"job spec schema: {sorted(stale)} are not {cls.__name__} fields")
    return schema


_EV_PATH = _fields_of(EVSpec, Obj({"ev_id": KEY}, {"links": Opt(ListOf(STR, 1 << 10))}))
_PEER = _fields_of(PeerSpec, Obj({}, {"evs": ListOf(_EV_PATH, 1 << 16), "host": STR, "rank": RANK}))
JOB = _fields_of(JobSpec, Obj({"rank": RANK, "job": STR, "agent": RANK},
                              {"world": ListOf(STR, 1 << 20), "send_to": ListOf(_PEER, 1 << 16),
                               "recv_from": ListOf(_PEER, 1 << 16), "collective": STR, "transport": STR,
                               "qp": Obj({}, {"cc_params": Obj({}, {"base_rtt_s": Opt(Num(0, 1e6))})})}))
"""``jobs/rank<r>.json``: an :class:`agents.jobspec.JobSpec` (``to_dict``), the keys the metrics
read typed; checked after :func:`testbed.rundir.upgrade.upgrade` (format 1's ``next``/``prev``
are gone by then)."""
PATH_FLOW = Obj({"src_rank": RANK, "dst_rank": RANK}, {"kind": Opt(STR), "links": ListOf(STR, 1 << 10),
                                                       "job": STR})
PATHS_DOC = Obj({}, {"flows": ListOf(ANY, 1 << 20)})
"""``paths.json``: ``{"transport", "flows": [PATH_FLOW]}`` (:mod:`testbed.fabric.paths`)."""

def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


MAX_WORLD = 1 << 15         # ranks: one per host NIC at most (testbed.spec.MAX_HOST_NICS)
MAX_SIZE_BYTES = 1 << 40
_WORKLOAD = Obj({"min_bytes": Int(1, MAX_SIZE_BYTES), "max_bytes": Int(1, MAX_SIZE_BYTES),
                 "factor": Int(2, 1 << 20), "iterations": Int(0, 1 << 24)}, {"warmup": Opt(Int(0, 1 << 24))})
MANIFEST_FIELDS = {
    "scenario": Check("an object or a string", lambda v: isinstance(v, (dict, str))),
    "transports": ListOf(Check(f"a transport name ({SAFE_NAME})", lambda v: isinstance(v, str)
                               and safe_name(v)), 64),
    "world_size": Opt(Int(1, MAX_WORLD)), "host_link_rate_bps": Opt(Num(1, 1e15)),
    "host_bandwidth_bps": Opt(Num(1, 1e18)), "host_nics": Opt(Int(1, MAX_WORLD)), "workload": Opt(_WORKLOAD),
    "payload_bytes": Opt(Int(1, 65535)),
    "regime": Opt(MapOf(Check("a number, [low, high] or null", lambda v: v is None or _number(v) or (
        isinstance(v, list) and len(v) == 2 and all(_number(x) for x in v))))),
    "engines": Opt(MapOf(Check("python, native or kernel", lambda v: v in ("python", "native", "kernel")))),
    "spec": Check("an object", lambda v: isinstance(v, dict)), "seed": Opt(Int()), "status": Opt(MapOf(ANY)), "planned_transports": Opt(ListOf(STR, 64)),
    "started_at": Opt(TIME), "finished_at": Opt(TIME), "format": Opt(Int(1, 1 << 16, "a format number")),
    "kernel_fallbacks": Opt(ListOf(STR, 64)),
}
"""``manifest.json`` by top-level key (:func:`base_manifest`); the readers drop a bad key and go on.
``scenario`` and ``spec`` (format 1), when objects, are checked as :data:`SCENARIO_FIELDS`;
``format``: :data:`testbed.rundir.upgrade.FORMAT` (absent: 1, :func:`testbed.rundir.upgrade.upgrade`)."""
SCENARIO_FIELDS = {"name": STR, "workload": _WORKLOAD, "timeout_s": Num(0, 1e9),
                   "defaults": MapOf(Check("a number or a name", lambda v: isinstance(v, (int, float, str))
                                           and not isinstance(v, bool)))}
"""``defaults``: the values absent optional keys took (:attr:`testbed.spec.Scenario.defaults`)."""
SUMMARY_DOC = Obj({"transports": MapOf(Obj({"transport": STR, "completion": Obj({}), "iteration_s": Obj({})}), 64),
                   "comparison": ListOf(Obj({}), 64)}, {"damage": ListOf(STR, 1 << 16)})
"""``summary.json`` (written by :func:`testbed.report.write_outputs`; the keys every table reads)."""


