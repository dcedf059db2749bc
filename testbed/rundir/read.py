"""Reading a run directory's files: bounded reads of JSON and JSONL files checked against
their schemas, the time window of a transport's records, and manifest.json."""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from testbed.rundir import names as rec
from testbed.rundir import schemas
from testbed.rundir.damage import problem
from testbed.rundir.errors import RunDirError
from testbed.rundir.schema import check_record
from testbed.rundir.upgrade import upgrade

log = logging.getLogger("testbed.metrics")

_MISSING = object()
_SCAN_ONCE = json.JSONDecoder().scan_once  # (str, index) -> (value, end index); StopIteration if none

MAX_JSONL_BYTES = 4 << 30     # a JSONL file larger than this is not read (a 60 s k=4 run: ~10 MB)
MAX_JSON_BYTES = 64 << 20     # manifest.json, summary.json, jobs, paths.json
MAX_LINE_BYTES = 16 << 20     # one JSONL record
MAX_SPAN_S = 3 * 3600.0       # records farther than this from a transport's median event are dropped
SPAN_SLACK_S = 600.0          # ... or farther than the scenario timeout plus this (set-up, teardown)


def regular_file(path: Path, max_bytes: int) -> bool:
    """True if ``path`` is a regular file (symlinks followed) of at most ``max_bytes``; a
    missing file is False silently, anything else is a :func:`problem`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        problem(path, None, f"cannot read: {exc.strerror}")
        return False
    if stat.S_ISDIR(st.st_mode):
        problem(path, None, "is a directory, expected a file")
        return False
    if not stat.S_ISREG(st.st_mode):
        problem(path, None, "not a regular file")
        return False
    if st.st_size > max_bytes:
        problem(path, None, f"{st.st_size} bytes, more than {max_bytes} (not read)")
        return False
    return True


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, last line?) of a text file, read as UTF-8 one line at a time; a bad
    line (not UTF-8, too long) is a :func:`problem` and skipped."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        problem(path, None, f"cannot read: {exc.strerror}")
        return
    with f:
        i, nxt = 0, f.readline(MAX_LINE_BYTES + 1)
        while nxt:
            raw, i = nxt, i + 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                problem(path, i, f"line longer than {MAX_LINE_BYTES} bytes")
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(MAX_LINE_BYTES + 1)
                nxt = f.readline(MAX_LINE_BYTES + 1)
                continue
            nxt = f.readline(MAX_LINE_BYTES + 1)
            try:
                text = raw.decode()
            except UnicodeDecodeError as exc:
                problem(path, i, f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
                continue
            yield i, text.rstrip("\r\n"), not nxt


def _decode(line: str):
    """One JSON value of a line; ValueError (with the reason) if it is none."""
    try:
        obj, end = _SCAN_ONCE(line, 0)
    except (StopIteration, ValueError, RecursionError):
        end = -1
    if end == len(line):
        return obj
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None


def iter_jsonl(path: Path, schema=_MISSING) -> Iterator[dict]:
    """Records of a JSONL file, one JSON decode per line; a missing file is empty. Blank
    lines are skipped; a truncated last line (crashed writer) is skipped with a warning. Every
    record is checked against ``schema`` (default: the file's in
    :data:`testbed.rundir.schemas.JSONL_RECORDS` by name, none for other names); a bad line or
    record is a :func:`problem` naming file and line (skipped while :func:`collecting`)."""
    path = Path(path)
    if schema is _MISSING:
        schema = schemas.JSONL_RECORDS.get(path.name)
    if not regular_file(path, MAX_JSONL_BYTES):
        return
    events = schema is schemas.EVENT
    for i, line, last in _lines(path):
        try:
            obj = _decode(line)
        except ValueError as exc:
            if not line.strip():
                continue
            if last:
                log.warning("%s:%d: truncated last line skipped", path, i)
                return
            problem(path, i, str(exc))
            continue
        if schema is not None:
            bad = check_record(schemas.event_schema(obj) if events else schema, obj)
            if bad is not None:
                problem(path, i, bad)
                continue
        yield obj


def load_jsonl(path: Path) -> list[dict]:
    """Records of a JSONL file as a list of dicts (see :func:`iter_jsonl` for bad lines);
    ``events.jsonl`` records far from the file's median time are dropped (:func:`time_window`)."""
    out = list(iter_jsonl(path))
    if Path(path).name == rec.EVENTS and out:
        lo, hi = time_window(out)
        out = _in_window(out, lo, hi, path)
    return out


def read_json(path: Path, default, schema=None):
    """A JSON document (regular file, at most :data:`MAX_JSON_BYTES`, UTF-8), ``default`` if
    it is missing or damaged (a :func:`problem`); ``schema``: checked as a whole."""
    path = Path(path)
    if not regular_file(path, MAX_JSON_BYTES):
        return default
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError as exc:
        problem(path, None, f"not UTF-8 (byte at offset {exc.start})")
        return default
    except OSError as exc:
        problem(path, None, f"cannot read: {exc.strerror}")
        return default
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        problem(path, exc.lineno, f"not JSON: {exc.msg}")
        return default
    except RecursionError:
        problem(path, None, "not JSON: nested too deeply")
        return default
    if schema is not None:
        bad = check_record(schema, doc)
        if bad is not None:
            problem(path, _line_of(text, bad), bad)
            return default
    return doc


def _line_of(text: str, bad: str) -> int | None:
    """Line of the key a problem names (``key.sub: ...``): its first ``"key":`` in the text."""
    key = bad.split(":", 1)[0].split(".")[-1].split("[")[0]
    at = text.find(f'"{key}":')
    return text.count("\n", 0, at) + 1 if at >= 0 else None


# -- time: records far from the run are dropped ----------------------------------------
def time_window(events: list[dict], timeout_s: float | None = None,
                ts: Iterable[float] = ()) -> tuple[float, float]:
    """Wall-clock bounds of a transport's plausible records: its median event time (else the
    median of ``ts``) +- the scenario timeout (capped at :data:`MAX_SPAN_S`) + :data:`SPAN_SLACK_S`.
    The bins of the metrics are sized by the records' span: an absurd date must not size them."""
    times = [e["t"] for e in events] or list(ts)
    if not times:
        return -math.inf, math.inf
    mid = float(np.median(times))
    span = min(MAX_SPAN_S, timeout_s if timeout_s is not None else MAX_SPAN_S) + SPAN_SLACK_S
    return mid - span, mid + span


def _in_window(records: list[dict], lo: float, hi: float, path) -> list[dict]:
    out = []
    for r in records:
        t = (r["t"], r.get("t_start", r["t"]), r.get("t_end", r["t"])) if r.get("kind") == "iteration" else (r["t"],)
        if lo <= min(t) and max(t) <= hi:
            out.append(r)
        else:
            problem(path, None, f"record dated {max(t, key=lambda x: abs(x - (lo + hi) / 2)):.6f}: "
                                f"outside the run ({lo:.0f} .. {hi:.0f} s)")
    return out


def _windowed(records: Iterable[dict], lo: float, hi: float, path) -> Iterator[dict]:
    for r in records:
        if lo <= r["t"] <= hi:
            yield r
        else:
            problem(path, None, f"record dated {r['t']:.6f}: outside the run ({lo:.0f} .. {hi:.0f} s)")


# -- manifest.json -----------------------------------------------------------------------
def is_run_dir(run_dir: Path) -> bool:
    """True if ``run_dir`` has a manifest.json or a transport subdirectory with events.jsonl."""
    run_dir = Path(run_dir)
    return run_dir.is_dir() and ((run_dir / rec.MANIFEST).exists() or bool(_transport_dirs(run_dir)))


def _transport_dirs(run_dir: Path) -> list[str]:
    """Subdirectories with a regular events.jsonl, by name (safe names only)."""
    try:
        return sorted(p.parent.name for p in run_dir.glob(f"*/{rec.EVENTS}")
                      if p.is_file() and p.parent.is_dir() and rec.safe_name(p.parent.name))
    except OSError:
        return []


def load_manifest(run_dir: Path) -> dict:
    """manifest.json of a run (``{}`` if absent or damaged but the directory holds transport
    data), every key checked against :data:`testbed.rundir.schemas.MANIFEST_FIELDS` (a bad key is
    a :func:`problem` and dropped); ``transports`` filled from the subdirectories when missing
    (a listed transport without its directory never started: it reads as empty). Raises :class:`RunDirError` if
    ``run_dir`` is no run directory."""
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):
        raise RunDirError(f"{run_dir}: not a run directory (no manifest.json and no <transport>/events.jsonl)")
    path = run_dir / rec.MANIFEST
    manifest = read_json(path, None)
    if manifest is not None and not isinstance(manifest, dict):
        problem(path, 1, f"expected an object, got {type(manifest).__name__}")
        manifest = None
    manifest = _checked(path, manifest or {}, schemas.MANIFEST_FIELDS)
    for key in ("scenario", "spec"):
        if isinstance(manifest.get(key), dict):
            manifest[key] = _checked(path, manifest[key], schemas.SCENARIO_FIELDS, f"{key}.")
    if not manifest.get("transports"):
        manifest["transports"] = _transport_dirs(run_dir)
        if not manifest["transports"]:
            raise RunDirError(f"{run_dir}: no transport data (no <transport>/{rec.EVENTS})")
    for name in manifest["transports"]:
        d = run_dir / name
        if d.exists() and not d.is_dir():
            problem(d, None, "not a directory")
    return upgrade(manifest)[0]


def _checked(path: Path, doc: dict, fields: dict, prefix: str = "") -> dict:
    """``doc`` without the keys that fail their check in ``fields`` (each a :func:`problem`)."""
    out = dict(doc)
    text = None
    for key, check in fields.items():
        if key in out:
            bad = check(out[key], prefix + key)
            if bad:
                if text is None:
                    text = _text(path)
                problem(path, _line_of(text, bad[0]), bad[0])
                del out[key]
    return out


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace") if regular_file(path, MAX_JSON_BYTES) else ""
    except OSError:
        return ""


def scenario_name(manifest: dict) -> str:
    s = manifest.get("scenario")
    return s.get("name", "?") if isinstance(s, dict) else str(s or "?")

