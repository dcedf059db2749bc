"""Run directories of older formats brought to the current one as they are read.

``manifest.json`` carries ``format`` (:data:`FORMAT`, written by
:func:`testbed.run.manifest.base_manifest`); a manifest without it is format 1. The readers
(:func:`testbed.rundir.read.load_manifest`, :func:`testbed.rundir.load.load_transport`) call
:func:`upgrade` once, so everything downstream (:mod:`testbed.metrics`) assumes the current
format. Format 1 -> 2:

* manifest ``workload`` (the first job's sweep), absent in format 1: from ``scenario.workload``,
  else the older ``spec.workload``;
* manifest ``host_bandwidth_bps`` (a host's NICs together), absent: ``host_link_rate_bps``;
* manifest ``host_nics``, absent: 1;
* job specs ``send_to`` / ``recv_from`` (lists of peers), absent in the job specs from before
  multi-peer jobs: the single ``next`` / ``prev`` peer;
* job specs ``job``, absent in runs from before multi-job runs: ``"job0"``; ``agent`` (the
  agent id, a rank in the whole run): the ``rank``.
"""

from __future__ import annotations

FORMAT = 2
"""The run directory format this version writes (manifest ``format``)."""

_SWEEP = ("min_bytes", "max_bytes", "factor", "iterations")


def manifest_format(manifest) -> int:
    """The format of a manifest (1 when it has none, or no manifest at all)."""
    f = manifest.get("format") if isinstance(manifest, dict) else None
    return f if isinstance(f, int) and not isinstance(f, bool) and f >= 1 else 1


def upgrade(manifest: dict, jobs: list[dict] | None = None) -> tuple[dict, list[dict]]:
    """``manifest`` and a transport's ``jobs`` (job specs) of a run of any format, in the
    current :data:`FORMAT` (new objects; a current run's are returned as they are)."""
    fmt = manifest_format(manifest)
    jobs = list(jobs or ())
    if fmt >= FORMAT:
        return manifest, jobs
    manifest = dict(manifest)
    if "workload" not in manifest:
        for where in (manifest.get("scenario"), manifest.get("spec")):
            w = where.get("workload") if isinstance(where, dict) else None
            if isinstance(w, dict) and set(_SWEEP) <= w.keys():
                manifest["workload"] = w
                break
    if manifest.get("host_bandwidth_bps") is None and manifest.get("host_link_rate_bps") is not None:
        manifest["host_bandwidth_bps"] = manifest["host_link_rate_bps"]
    manifest.setdefault("host_nics", 1)
    manifest["format"] = FORMAT
    return manifest, [_job_v2(j) for j in jobs]


def _job_v2(job: dict) -> dict:
    job = dict(job)
    for side, old in (("send_to", "next"), ("recv_from", "prev")):
        if not job.get(side) and isinstance(job.get(old), dict):
            job[side] = [job[old]]
        job.pop(old, None)
    job.setdefault("job", "job0")
    if "rank" in job:
        job.setdefault("agent", job["rank"])
    return job
