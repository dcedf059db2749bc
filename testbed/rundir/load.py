"""One transport's records loaded: :func:`load_transport`, :class:`TransportRecords`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from testbed.rundir import names as rec
from testbed.rundir import schemas
from testbed.rundir.damage import Damage, collecting, problem
from testbed.rundir.read import _in_window, _windowed, iter_jsonl, read_json, time_window
from testbed.rundir.schema import check_record
from testbed.rundir.tables import LinkTable, SampleTable
from testbed.rundir.upgrade import upgrade

MRC_JOBS_GLOB = "mrc-rank*.json"
"""A command job's ``mrc`` backend: the agent job specs it runs on, in ``jobs/`` beside the
launcher's ``rank<r>.json`` (:attr:`TransportRecords.mrc_jobs`)."""
COMMAND_DIR = "job"
"""A command job's own files in the transport directory: ``rank<r>.out``/``.err`` (its stdout and
stderr) and ``steps-rank<r>.jsonl`` (its step reports)."""


@dataclass
class TransportRecords:
    """Parsed records of one transport: ``events``, ``cpu``, ``sched`` (agents' schedstat
    samples) as lists of dicts (as in the files), ``samples`` a :class:`SampleTable`, ``links``
    a :class:`LinkTable` (lists of dicts given here are converted); ``jobs`` the agents' job
    specs in rank order (``jobs/rank<r>.json``) and ``paths`` the traced flows (``paths.json``
    ``flows``), both empty when absent. A command job (``jobs`` of ``"kind": "command"``, the
    launcher's specs) also has ``mrc_jobs``, the agent job specs its ``mrc`` torch.distributed
    backend runs on (``jobs/mrc-rank<r>.json``, by agent; empty for other transports), and
    ``steps``, per rank ``r`` the step reports of ``job/steps-rank<r>.jsonl`` (``{"step", "t_start",
    "t_end", "seconds", ...user fields}``, file order; unchecked here: :mod:`testbed.metrics.steps`
    reads what it needs)."""
    name: str
    events: list[dict] = field(default_factory=list)
    samples: SampleTable | list[dict] = field(default_factory=list)
    links: LinkTable | list[dict] = field(default_factory=list)
    cpu: list[dict] = field(default_factory=list)
    sched: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    paths: list[dict] = field(default_factory=list)
    mrc_jobs: list[dict] = field(default_factory=list)
    steps: dict[int, list[dict]] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.samples, SampleTable):
            self.samples = SampleTable.from_records(self.samples)
        if not isinstance(self.links, LinkTable):
            self.links = LinkTable.from_records(self.links)


def job_names(jobs: list[dict]) -> list[str]:
    """The jobs of a run's job specs, in agent order (``["job0"]`` for a single job)."""
    return list(dict.fromkeys(j["job"] for j in jobs)) or ["job0"]


def _job_filter(jobs: list[dict], job: str):
    """``(keep(record) -> record | None, sched(record) -> record)`` restricting records to the
    agents of ``job`` and renaming their agent ids (``rank`` on the control socket) to the
    job's ranks; records without a ``rank`` (faults, targets, the runner's own) are kept."""
    remap = {j["agent"]: j["rank"] for j in jobs if j["job"] == job}

    def keep(record: dict) -> dict | None:
        if "rank" not in record:
            return record
        rank = remap.get(record["rank"])
        return None if rank is None else {**record, "rank": rank}

    def sched(record: dict) -> dict:
        ranks = record.get("ranks") or {}
        return {**record, "ranks": {str(remap[int(a)]): v for a, v in ranks.items()
                                    if a.isdigit() and int(a) in remap}}
    return keep, sched


def load_transport(run_dir: Path, name: str, job: str | None = None) -> TransportRecords:
    """The JSONL files, job specs and traced paths of transport ``name`` (missing files are
    empty), every record checked against its schema (:mod:`testbed.rundir.schemas`) and dropped
    when it is dated outside :func:`time_window`; a bad record is a :func:`problem`.
    ``job``: only that job's agents, under their ranks in the job (a run of several jobs,
    :func:`job_names`); links and CPU are the whole fabric's."""
    run_dir = Path(run_dir)
    d = run_dir / name
    if not d.is_dir():
        if d.exists():
            problem(d, None, "not a directory")
        return TransportRecords(name)
    with collecting(Damage()):   # the manifest's own problems are reported by load_manifest
        manifest = read_json(run_dir / rec.MANIFEST, {})
        timeout = _quiet_timeout(manifest)
    path = d / rec.EVENTS
    events = list(iter_jsonl(path))
    lo, hi = time_window(events, timeout, _first_times(d) if not events else ())
    events = _in_window(events, lo, hi, path)

    def recs(fname: str) -> Iterator[dict]:
        return _windowed(iter_jsonl(d / fname), lo, hi, d / fname)

    manifest = manifest if isinstance(manifest, dict) else {}
    jobs, paths = _jobs(d / rec.JOBS_DIR, manifest), read_paths(d / rec.PATHS)
    mrc_jobs = _jobs(d / rec.JOBS_DIR, manifest, MRC_JOBS_GLOB)
    samples, sched = recs(rec.SAMPLES), list(recs(rec.SCHED))
    if job is not None:
        keep, sched_of = _job_filter(jobs, job)
        events = [r for r in map(keep, events) if r is not None]
        samples = (r for r in map(keep, samples) if r is not None)
        sched = [sched_of(r) for r in sched]
        jobs = sorted((j for j in jobs if j["job"] == job), key=lambda j: j["rank"])
        mrc_jobs = sorted((j for j in mrc_jobs if j["job"] == job), key=lambda j: j["rank"])
        paths = [f for f in paths if f.get("job", "job0") == job]
    return TransportRecords(name, events, SampleTable.from_records(samples),
                            LinkTable.from_records(recs(rec.LINKS)), list(recs(rec.CPU)), sched, jobs, paths,
                            mrc_jobs, _steps(d / COMMAND_DIR))


def _quiet_timeout(manifest) -> float | None:
    if not isinstance(manifest, dict):
        return None
    s = manifest.get("scenario")
    t = s.get("timeout_s") if isinstance(s, dict) else None
    return None if schemas.SCENARIO_FIELDS["timeout_s"](t) else float(t)


def _first_times(d: Path) -> list[float]:
    """The first good record's ``t`` of samples, links and cpu (a run without events)."""
    out = []
    for fname in (rec.SAMPLES, rec.LINKS, rec.CPU):
        with collecting(Damage()):   # reported when the file is read for real
            first = next(iter(iter_jsonl(d / fname)), None)
        if first is not None:
            out.append(first["t"])
    return out


def _jobs(d: Path, manifest: dict, pattern: str = "rank*.json") -> list[dict]:
    """The job specs ``jobs/rank<a>.json`` (``pattern``) in agent order (``a`` the agent id, the
    rank for a single job), brought to the current format (:func:`testbed.rundir.upgrade.upgrade`,
    by the run's ``manifest``) and then checked (:data:`testbed.rundir.schemas.JOB`)."""
    if not d.is_dir():
        if d.exists() and pattern == "rank*.json":   # reported once
            problem(d, None, "not a directory")
        return []
    raw = [(p, read_json(p, None)) for p in sorted(d.glob(pattern))]
    for p, j in raw:
        if j is not None and not (isinstance(j, dict) and isinstance(j.get("rank"), int)):
            problem(p, None, check_record(schemas.JOB, j) or "rank: expected a rank")
    raw = [(p, j) for p, j in raw if isinstance(j, dict) and isinstance(j.get("rank"), int)]
    jobs = upgrade(manifest, [j for _, j in raw])[1]
    good = []
    for (p, _), j in zip(raw, jobs):
        bad = check_record(schemas.JOB, j)
        if bad is None:
            good.append(j)
        else:
            problem(p, None, bad)
    return sorted(good, key=lambda j: j["agent"])


def _steps(d: Path) -> dict[int, list[dict]]:
    """``{rank: [step report]}`` of a command job's ``job/steps-rank<r>.jsonl`` (JSON objects; a
    bad line is a :func:`problem`); {} without the directory."""
    if not d.is_dir():
        return {}
    out = {}
    for p in sorted(d.glob("steps-rank*.jsonl")):
        r = p.name[len("steps-rank"):-len(".jsonl")]
        if r.isdigit():
            out[int(r)] = [x for x in iter_jsonl(p, None) if isinstance(x, dict)]
    return out


def read_paths(path: Path) -> list[dict]:
    """``flows`` of paths.json, each checked (:data:`testbed.rundir.schemas.PATH_FLOW`); a bad
    flow is a :func:`problem` and left out; [] if the file is missing."""
    doc = read_json(path, {}, schemas.PATHS_DOC)
    out = []
    for i, f in enumerate(doc.get("flows", []) if isinstance(doc, dict) else []):
        bad = check_record(schemas.PATH_FLOW, f)
        if bad is None:
            out.append(f)
        else:
            problem(path, None, f"flows[{i}].{bad}")
    return out


