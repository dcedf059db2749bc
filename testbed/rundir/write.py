"""Writing a run directory: atomic documents, the JSONL writers, the agents' files.

Every write of a run directory goes through here, and an OS error on it (storage full,
read-only file system, permission denied) becomes one :class:`RunDirWriteError` naming the
path and what was being written (:func:`writing`)."""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import orjson

from agents.protocol import Event, Iteration, sample_record  # noqa: F401 (re-exported)
from testbed.rundir.errors import RunDirWriteError
from testbed.rundir.names import AGENT_LOGS_DIR, CPU, DIR_MODE, EVENTS, FILE_MODE, LINKS, MANIFEST, SAMPLES, SAMPLES_DIR, SCHED

if TYPE_CHECKING:
    from testbed.spec import Scenario


@contextlib.contextmanager
def writing(path, what: str) -> Iterator[None]:
    """Within the block, an OSError becomes a :class:`RunDirWriteError` naming ``path`` and ``what``."""
    try:
        yield
    except RunDirWriteError:
        raise
    except OSError as exc:
        raise RunDirWriteError(path, what, exc) from None


def make_dir(path: Path, what: str = "a run directory", parents: bool = True) -> Path:
    """``path`` created :data:`DIR_MODE` (parents too), if it is not there yet."""
    with writing(path, what):
        Path(path).mkdir(DIR_MODE, parents=parents, exist_ok=True)
    return Path(path)


@contextlib.contextmanager
def atomic_file(path: Path, what: str, mode: int = FILE_MODE, binary: bool = False, newline: str | None = None):
    """A file object whose content replaces ``path`` atomically when the block ends: a
    temporary file in the same directory (created with ``mode``), then renamed (a reader
    sees the old or the new file; the temporary file is removed on any error)."""
    path = Path(path)
    with writing(path, what):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"newline": newline})) as f:
                yield f
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_atomic(path: Path, text: str | bytes, mode: int = FILE_MODE, what: str | None = None) -> None:
    """Replace ``path`` with ``text`` atomically (:func:`atomic_file`)."""
    with atomic_file(path, what or Path(path).name, mode, isinstance(text, bytes)) as f:
        f.write(text)


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
    from agents.protocol import ControlProtocolError, sample_from_record

    d = transport_dir / SAMPLES_DIR
    files = sorted(d.glob("rank*.jsonl")) if d.is_dir() else []
    skipped = 0

    def records(path: Path):
        nonlocal skipped
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    msg = sample_from_record(json.loads(line))
                except (ValueError, ControlProtocolError):
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
    if out.failed:   # not merged: the agents' files stay for a later merge (testbed report)
        return {"files": len(files), "samples": 0, "skipped": skipped, "failed": True}
    for path in files:
        path.unlink()
    if d.is_dir() and not any(d.iterdir()):
        d.rmdir()
    return {"files": len(files), "samples": n, "skipped": skipped}


_JSONL_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


class JsonlWriter:
    """Append-only JSONL file, flushed by :meth:`flush` (the runner flushes every tick).
    Records are encoded by orjson (numpy scalars as numbers, non-string keys as strings,
    NaN as null, as JSON has no NaN): at k=8 the runner writes 768 link records a tick.

    An OS error while writing raises :class:`RunDirWriteError` once; the writer (and every
    writer sharing its ``failed`` list, :class:`TransportWriter`) then drops what it is given,
    so that the run's teardown is not interrupted again (``failed`` holds the error)."""

    def __init__(self, path: Path, failed: list | None = None):
        self.path = Path(path)
        self.failed: list[RunDirWriteError] = [] if failed is None else failed
        with self._writing():
            self._f = open(path, "ab", buffering=1 << 16, opener=private_opener)

    @contextlib.contextmanager
    def _writing(self):
        try:
            with writing(self.path, f"the {self.path.name} records"):
                yield
        except RunDirWriteError as exc:
            self.failed.append(exc)
            raise

    def write(self, record: dict) -> None:
        if self.failed:
            return
        try:   # not self._writing(): a context manager per record costs as much as the encoding
            self._f.write(orjson.dumps(record, option=_JSONL_OPTIONS) + b"\n")
        except OSError as exc:
            error = RunDirWriteError(self.path, f"the {self.path.name} records", exc)
            self.failed.append(error)
            raise error from None

    def flush(self) -> None:
        if self.failed:
            return
        with self._writing():
            self._f.flush()

    def close(self) -> None:
        if self._f.closed:
            return
        if self.failed:   # what is still buffered cannot be written: drop it
            with contextlib.suppress(OSError):
                self._f.close()
            return
        with self._writing():
            self._f.close()


class TransportWriter:
    """The JSONL writers of one transport's directory (created with it), by file. After the
    first write error (:class:`RunDirWriteError`, raised once) every writer drops its records."""

    def __init__(self, directory: Path):
        make_dir(directory, "a transport directory")
        make_dir(directory / AGENT_LOGS_DIR, "the agents' log directory")
        self.failed: list[RunDirWriteError] = []
        self.events = JsonlWriter(directory / EVENTS, self.failed)
        self.samples = JsonlWriter(directory / SAMPLES, self.failed)
        self.links = JsonlWriter(directory / LINKS, self.failed)
        self.cpu = JsonlWriter(directory / CPU, self.failed)
        self.sched = JsonlWriter(directory / SCHED, self.failed)

    @property
    def writers(self) -> tuple[JsonlWriter, ...]:
        return (self.events, self.samples, self.links, self.cpu, self.sched)

    def flush(self) -> None:
        for w in self.writers:
            w.flush()

    def close(self) -> None:
        """Close every writer (each is tried; the first error is raised after)."""
        first = None
        for w in self.writers:
            try:
                w.close()
            except RunDirWriteError as exc:
                first = first or exc
        if first is not None:
            raise first


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
    make_dir(runs_root, "the runs directory")
    base = Path(runs_root) / f"{scenario.name}-{stamp}"
    path, n = base, 1
    while True:
        with writing(path, "the run directory"):
            try:
                path.mkdir(DIR_MODE)
                break
            except FileExistsError:
                n += 1
                path = base.with_name(f"{base.name}-{n}")
    with writing(path, "the run directory"):
        os.chmod(path, DIR_MODE)     # whatever the umask
    return path


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Replace ``run_dir/manifest.json`` atomically (a reader never sees half a file)."""
    write_atomic(Path(run_dir) / MANIFEST, json.dumps(manifest, indent=1, default=str), what="the manifest")


def write_jobs(jobs: list[dict], directory: Path, name: str = "rank{rank}.json") -> list[Path]:
    """Write the agents' job specs (:func:`testbed.spec.jobs.build_all_jobs`) as ``rank<a>.json``
    files into ``directory`` (``a`` the agent id, the rank for a single job; ``name``: another
    pattern of ``{rank}``); returns their paths in list order."""
    make_dir(directory, "the job specs' directory")
    paths = []
    for job in jobs:
        path = Path(directory) / name.format(rank=job.get('agent', job['rank']))
        write_atomic(path, json.dumps(job, indent=1), what="a job spec")
        paths.append(path)
    return paths


def write_text(path: Path, text: str, what: str) -> None:
    """``path`` (created :data:`FILE_MODE`, its directory too) replaced by ``text`` (atomically)."""
    make_dir(Path(path).parent, f"the directory of {what}")
    write_atomic(path, text, what=what)


