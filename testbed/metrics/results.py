"""The "many runs" results file: trials (``trials.json``) and sweeps (``sweep.json``), one format.

A results document is::

    {"format": "mrc-testbed-results", "version": 1,
     "kind": "run" | "trials" | "sweep",
     "scenario": "<name>",
     "swept": ["workload.evs", ...],          # key paths, [] unless a sweep
     "kpis": ["busbw_mbit_per_s", ...],       # the KPI keys aggregated (testbed.metrics.trials.KPIS)
     "points": [{
         "label": "workload.evs=8",           # "" for trials and single runs
         "values": {"workload.evs": 8},       # each swept key's value at this point, as YAML read it
         "dir": "p01_evs-8",                  # this point's directory, relative to the file ("" here)
         "trials": 3, "seeds": [1, 2, 3],
         "faulted_link": {"<link>": trials},
         "transports": {"<transport>": {"<kpi>": {"median", "min", "max", "n", "missing"}, ...,
                                        "faulted_link": {...},
                                        "validity": {"valid", "invalid", "reasons"}}}}]}

A point is :func:`testbed.metrics.trials.aggregate`'s result (minus ``scenario``) plus
``label``, ``values`` and ``dir``; trials are one point, a single run's summary.json is one
point of one trial (:func:`from_summary`). :func:`load` also reads the ``trials.json`` of
earlier versions (an aggregate without ``format``) and directories holding any of these files,
so ``testbed report``, ``testbed compare`` and ``testbed reproduce`` read one format.
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.metrics.trials import KPIS, aggregate
from testbed.rundir.write import write_atomic

FORMAT = "mrc-testbed-results"
VERSION = 1
KINDS = ("run", "trials", "sweep")
#: File names, in the order :func:`load` looks for them in a directory.
SWEEP_FILE, TRIALS_FILE, SUMMARY_FILE = "sweep.json", "trials.json", "summary.json"


class ResultsError(ValueError):
    """Not a results file (or a directory holding none): the message says why."""


def point(agg: dict, values: dict | None = None, label: str = "", dir: str = "") -> dict:
    """One point from an :func:`aggregate` of its trials."""
    out = {"label": label, "values": dict(values or {}), "dir": dir}
    out.update({k: v for k, v in agg.items() if k not in ("scenario", *out)})
    return out


def document(kind: str, scenario: str | None, points: list[dict], swept: list[str] | None = None) -> dict:
    """A results document (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    return {"format": FORMAT, "version": VERSION, "kind": kind, "scenario": scenario,
            "swept": list(swept or []), "kpis": list(KPIS), "points": list(points)}


def from_trials(summaries: list[dict]) -> dict:
    """The document of trials of one scenario (summary.json dicts, each with its ``seed``)."""
    agg = aggregate(summaries)
    return document("trials", agg.get("scenario"), [point(agg)])


def from_summary(summary: dict) -> dict:
    """A single run's summary.json as a document of one point of one trial."""
    s = dict(summary)
    s.setdefault("seed", (summary.get("manifest") or {}).get("seed"))
    agg = aggregate([s])
    return document("run", agg.get("scenario"), [point(agg)])


def upgrade(doc: dict) -> dict:
    """A document of this version from what an earlier version wrote (a trials.json that is a
    bare aggregate). Raises ResultsError for anything else."""
    if not isinstance(doc, dict):
        raise ResultsError("not a results document (expected a JSON object)")
    if doc.get("format") == FORMAT:
        if doc.get("version") != VERSION:
            raise ResultsError(f"results format version {doc.get('version')!r}; this testbed reads {VERSION}")
        problems = check(doc)
        if problems:
            raise ResultsError("; ".join(problems))
        return doc
    if isinstance(doc.get("transports"), dict) and "trials" in doc:   # trials.json before the format
        return document("trials", doc.get("scenario"), [point(doc)])
    raise ResultsError("not a results document (no 'format' key)")


def check(doc: dict) -> list[str]:
    """What is wrong with a document's shape ([] when nothing)."""
    out = []
    if doc.get("kind") not in KINDS:
        out.append(f"kind {doc.get('kind')!r} is not one of {', '.join(KINDS)}")
    if not isinstance(doc.get("swept"), list):
        out.append("swept: expected a list")
    points = doc.get("points")
    if not isinstance(points, list) or not points:
        return out + ["points: expected a non-empty list"]
    for i, p in enumerate(points):
        if not isinstance(p, dict) or not isinstance(p.get("transports"), dict):
            out.append(f"points[{i}]: expected an object with 'transports'")
            continue
        for name, t in p["transports"].items():
            if not isinstance(t, dict):
                out.append(f"points[{i}].transports.{name}: expected an object")
                continue
            for kpi, st in t.items():
                if kpi not in ("faulted_link", "validity", "completion") and not (isinstance(st, dict) and "median" in st and "n" in st):
                    out.append(f"points[{i}].transports.{name}.{kpi}: expected median, min, max, n")
    return out


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, default=str) + "\n"


def loads(text: str) -> dict:
    try:
        return upgrade(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"not JSON: {exc}") from None


def write(path: Path, doc: dict) -> Path:
    """Write ``doc`` atomically, private (0600) like every file of a run directory."""
    write_atomic(Path(path), dumps(doc), what=f"the results file {Path(path).name}")
    return Path(path)


def find(path: Path) -> Path:
    """The results file of ``path``: the file itself, or a directory's sweep.json, trials.json
    or summary.json (the first there). Raises ResultsError."""
    path = Path(path)
    if path.is_dir():
        for name in (SWEEP_FILE, TRIALS_FILE, SUMMARY_FILE):
            if (path / name).is_file():
                return path / name
        raise ResultsError(f"{path}: no {SWEEP_FILE}, {TRIALS_FILE} or {SUMMARY_FILE} in it")
    if not path.is_file():
        raise ResultsError(f"{path}: no such file or directory")
    return path


def load(path: Path, summary: dict | None = None) -> dict:
    """The results document of ``path`` (:func:`find`); a summary.json is one run
    (:func:`from_summary`; ``summary``, when given, is used instead of reading it).
    Raises ResultsError."""
    found = find(path)
    try:
        data = summary if summary is not None else json.loads(found.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{found}: {exc}") from None
    if found.name == SUMMARY_FILE or (isinstance(data, dict) and "comparison" in data and "format" not in data):
        if not isinstance(data, dict) or not isinstance(data.get("transports"), dict):
            raise ResultsError(f"{found}: not a run summary")
        return from_summary(data)
    try:
        return upgrade(data)
    except ResultsError as exc:
        raise ResultsError(f"{found}: {exc}") from None
