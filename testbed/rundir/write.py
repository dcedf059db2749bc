"""Writing a run directory: atomic documents, the JSONL writers, the agents' files."""

from __future__ import annotations

import heapq
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agents.protocol import Event, Iteration, sample_record  # noqa: F401 (re-exported)
from testbed.rundir.names import AGENT_LOGS_DIR, CPU, DIR_MODE, EVENTS, FILE_MODE, LINKS, MANIFEST, SAMPLES, SAMPLES_DIR, SCHED

if TYPE_CHECKING:
    from testbed.spec import Scenario


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


class TransportWriter:
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


