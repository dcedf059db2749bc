"""Reading a run directory: manifest.json and the per-transport JSONL files.

Small files (``events.jsonl``, ``cpu.jsonl``) are kept as lists of dicts. The two big ones
are turned into columns while they are parsed, so that no per-record dict outlives its line:
``samples.jsonl`` (an agent sample per rank every 10 ms: ~100k lines of nested flows and EVs
in a 16-rank, 60 s run) into a :class:`SampleTable`, ``links.jsonl`` (every link end every
100 ms) into a :class:`LinkTable`. (Keeping them as dicts was most of the cost: besides the
memory, the cyclic garbage collector rescans every live container again and again.)
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import os
import stat
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from testbed.rundir import records as rec
from testbed.rundir.errors import MetricsError, RunDirError

log = logging.getLogger("testbed.metrics")

FlowKey = tuple  # (rank, peer, dir)
_MISSING = object()
_EV_ID = itemgetter("ev_id")
_SCAN_ONCE = json.JSONDecoder().scan_once  # (str, index) -> (value, end index); StopIteration if none

MAX_JSONL_BYTES = 4 << 30     # a JSONL file larger than this is not read (a 60 s k=4 run: ~10 MB)
MAX_JSON_BYTES = 64 << 20     # manifest.json, summary.json, jobs, paths.json
MAX_LINE_BYTES = 16 << 20     # one JSONL record
MAX_SPAN_S = 3 * 3600.0       # records farther than this from a transport's median event are dropped
SPAN_SLACK_S = 600.0          # ... or farther than the scenario timeout plus this (set-up, teardown)
PROBLEMS_PER_FILE = 20        # problems listed per file (then a count)


# -- damage: problems found while reading ----------------------------------------------
class Damage:
    """Problems found while reading a run directory, each ``file[:line]: what is wrong``,
    at most :data:`PROBLEMS_PER_FILE` listed per file (:meth:`lines` adds the counts)."""

    def __init__(self):
        self.problems: list[str] = []
        self._per_file: dict[str, int] = {}

    def add(self, path, line: int | None, what: str) -> None:
        msg = f"{path}:{line}: {what}" if line else f"{path}: {what}"
        key = str(path)
        n = self._per_file.get(key, 0)
        self._per_file[key] = n + 1
        if n < PROBLEMS_PER_FILE and msg not in self.problems:
            self.problems.append(msg)

    def note(self, line: str) -> None:
        """A problem already written as ``file[:line]: what is wrong``."""
        self._per_file[line] = self._per_file.get(line, 0) + 1
        if line not in self.problems:
            self.problems.append(line)

    def __bool__(self) -> bool:
        return bool(self._per_file)

    def lines(self) -> list[str]:
        """Every listed problem, then ``file: N more problems`` for files with more."""
        more = [f"{k}: {n - PROBLEMS_PER_FILE} more problems" for k, n in self._per_file.items()
                if n > PROBLEMS_PER_FILE]
        return self.problems + more


_DAMAGE: contextvars.ContextVar[Damage | None] = contextvars.ContextVar("testbed_metrics_damage", default=None)


def current_damage() -> Damage | None:
    """The :class:`Damage` of the innermost :func:`collecting` block, None outside one."""
    return _DAMAGE.get()


@contextlib.contextmanager
def collecting(damage: Damage | None = None) -> Iterator[Damage]:
    """Within the block, readers skip a bad record, file or key and note it in the
    :class:`Damage` yielded, instead of raising :class:`MetricsError` at the first one."""
    damage = Damage() if damage is None else damage
    token = _DAMAGE.set(damage)
    try:
        yield damage
    finally:
        _DAMAGE.reset(token)


def problem(path, line: int | None, what: str) -> None:
    """A damaged record or file: noted while :func:`collecting`, else MetricsError."""
    damage = _DAMAGE.get()
    if damage is None:
        raise MetricsError(f"{path}:{line}: {what}" if line else f"{path}: {what}")
    damage.add(path, line, what)


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
    :data:`testbed.rundir.records.JSONL_RECORDS` by name, none for other names); a bad line or
    record is a :func:`problem` naming file and line (skipped while :func:`collecting`)."""
    path = Path(path)
    if schema is _MISSING:
        schema = rec.JSONL_RECORDS.get(path.name)
    if not regular_file(path, MAX_JSONL_BYTES):
        return
    events = schema is rec.EVENT
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
            bad = rec.check_record(rec.event_schema(obj) if events else schema, obj)
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
        bad = rec.check_record(schema, doc)
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
                      if p.is_file() and p.parent.is_dir() and rec._safe_name(p.parent.name))
    except OSError:
        return []


def load_manifest(run_dir: Path) -> dict:
    """manifest.json of a run (``{}`` if absent or damaged but the directory holds transport
    data), every key checked against :data:`testbed.rundir.records.MANIFEST_FIELDS` (a bad key is
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
    manifest = _checked(path, manifest or {}, rec.MANIFEST_FIELDS)
    for key in ("scenario", "spec"):
        if isinstance(manifest.get(key), dict):
            manifest[key] = _checked(path, manifest[key], rec.SCENARIO_FIELDS, f"{key}.")
    if not manifest.get("transports"):
        manifest["transports"] = _transport_dirs(run_dir)
        if not manifest["transports"]:
            raise RunDirError(f"{run_dir}: no transport data (no <transport>/{rec.EVENTS})")
    for name in manifest["transports"]:
        d = run_dir / name
        if d.exists() and not d.is_dir():
            problem(d, None, "not a directory")
    return manifest


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


def _floats(values: list) -> np.ndarray:
    """float64 array of JSON numbers, None -> NaN (as ``float(v)``, None -> NaN)."""
    return np.array(values, dtype=float) if values else np.zeros(0)


class _FlowColumns:
    """One flow's raw sample values in file order (absolute times).

    EVs: only the last-seen value of each EV id matters (:meth:`SampleTable.flows`), so an
    ``evs`` list is dropped as soon as a later sample (not earlier in time) brings the same
    EV ids; ``ev_lists`` keeps the others, ``ev_last`` the newest, with their row indices."""
    __slots__ = ("t", "bytes", "retransmits", "rtt_s", "cwnd_bytes", "retransmitted_bytes", "has_rtx_bytes",
                 "ev_rows", "ev_lists", "ev_last", "ev_row", "ev_ids", "ev_t")

    def __init__(self):
        self.t: list = []
        self.bytes: list = []
        self.retransmits: list = []
        self.rtt_s: list = []
        self.cwnd_bytes: list = []
        self.retransmitted_bytes: list = []
        self.has_rtx_bytes = False
        self.ev_rows: list = []
        self.ev_lists: list = []
        self.ev_last: list | None = None
        self.ev_row = -1
        self.ev_ids: tuple = ()
        self.ev_t = -math.inf


class SampleTable:
    """Agent samples (``samples.jsonl``) in columns: ``t`` (every sample's wall-clock time,
    file order, shape (nsamples,)), ``ranks`` (set) and per flow ``(rank, peer, dir)`` its
    counters; :meth:`flows` turns them into :class:`testbed.metrics.series.FlowSeries`.
    Build with :meth:`from_records` (raises :class:`MetricsError` on a sample without
    ``t``/``rank``/``flows``)."""

    def __init__(self, t: np.ndarray, ranks: set, flows: dict[FlowKey, _FlowColumns],
                 loop: list[tuple] | None = None):
        self.t, self.ranks, self._flows = t, ranks, flows
        #: (t, rank, late_max_s) of every sample carrying the agent's event-loop stats
        #: (``"loop": {"timers", "late_sum_s", "late_max_s"}``): timer lateness since the last sample
        self.loop = loop or []

    def __len__(self) -> int:
        return len(self.t)

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "SampleTable":
        cols: dict[FlowKey, _FlowColumns] = {}
        ts: list = []
        ranks: set = set()
        loop: list[tuple] = []
        add_t, missing, ev_id = ts.append, _MISSING, _EV_ID
        for n, s in enumerate(records):
            try:
                t, rank, flows = float(s["t"]), s["rank"], s["flows"]
            except (KeyError, TypeError, ValueError) as exc:
                raise MetricsError(f"samples.jsonl record {n + 1}: needs t, rank, flows ({exc})") from exc
            add_t(t)
            ranks.add(rank)
            ls = s.get("loop")
            if ls:
                loop.append((t, rank, float(ls.get("late_max_s") or 0.0)))
            for f in flows:
                key = (rank, f.get("peer"), f.get("dir", "rx"))
                c = cols.get(key)
                if c is None:
                    c = cols[key] = _FlowColumns()
                c.t.append(t)
                c.bytes.append(f.get("bytes"))
                c.retransmits.append(f.get("retransmits"))
                c.rtt_s.append(f.get("rtt_s"))
                c.cwnd_bytes.append(f.get("cwnd_bytes"))
                rb = f.get("retransmitted_bytes", missing)
                c.retransmitted_bytes.append(rb)
                if rb is not missing:
                    c.has_rtx_bytes = True
                evs = f.get("evs")
                if evs:
                    ids = tuple(map(ev_id, evs))
                    if ids != c.ev_ids or t < c.ev_t:   # the previous list still counts
                        if c.ev_last is not None:
                            c.ev_rows.append(c.ev_row)
                            c.ev_lists.append(c.ev_last)
                        c.ev_ids = ids
                    c.ev_last, c.ev_row, c.ev_t = evs, len(c.t) - 1, t
        return cls(np.array(ts, dtype=float), ranks, cols, loop)

    def flows(self, t0_s: float) -> dict:
        """``{(rank, peer, dir): FlowSeries}`` with times relative to ``t0_s``, each flow's
        samples sorted by time (stable); ``evs``: per EV id its last-seen (in that order)
        ``state``, ``sent``, ``lost``."""
        out = {}
        for key, c in self._flows.items():
            t = np.array(c.t, dtype=float) - t0_s
            order = np.argsort(t, kind="stable")
            ordered = bool(np.all(order[1:] > order[:-1]))
            take = (lambda a: a) if ordered else (lambda a: a[order])  # noqa: E731
            rb = None
            if c.has_rtx_bytes:
                rb = take(_floats([None if v is _MISSING else v for v in c.retransmitted_bytes]))
            ev_lists, ev_rows = c.ev_lists, c.ev_rows
            if c.ev_last is not None:
                ev_lists, ev_rows = ev_lists + [c.ev_last], ev_rows + [c.ev_row]
            if not ordered and len(ev_lists) > 1:
                pos = np.empty(len(order), int)
                pos[order] = np.arange(len(order))
                ev_lists = [ev_lists[i] for i in np.argsort(pos[ev_rows], kind="stable")]
            last = {ev["ev_id"]: ev for evs in ev_lists for ev in evs}
            evs = {ev: {"state": v.get("state"), "sent": v.get("sent"), "lost": v.get("lost")}
                   for ev, v in last.items()}
            out[key] = FlowSeries(take(t), np.nan_to_num(take(_floats(c.bytes))),
                                  np.nan_to_num(take(_floats(c.retransmits))), take(_floats(c.rtt_s)),
                                  take(_floats(c.cwnd_bytes)), rb, evs)
        return out


_SWITCH_COUNTERS = ("ecn_marked", "trimmed", "switch_drops")


class LinkTable:
    """Kernel link counters (``links.jsonl``) in columns per link end ``(link, end)``:
    ``{"t", "tx_bytes", "drops", "rate_bps"}`` float arrays sorted by wall-clock time
    (stable), plus ``ecn_marked``, ``trimmed`` and ``switch_drops`` on ends that ran the switch
    program (:mod:`testbed.fabric.switch`); a missing counter is 0, a missing rate NaN. ``t``: every
    record's time."""

    def __init__(self, t: np.ndarray, ends: dict[tuple, dict[str, np.ndarray]]):
        self.t, self.ends = t, ends

    def __len__(self) -> int:
        return len(self.t)

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "LinkTable":
        groups: dict[tuple, tuple] = {}
        ts: list = []
        add_t = ts.append
        for r in records:
            key = (r["link"], r.get("end", "a"))
            g = groups.get(key)
            if g is None:
                g = groups[key] = ([], [], [], [], None)
            t = r["t"]
            add_t(t)
            g[0].append(t)
            g[1].append(r.get("tx_bytes", 0))
            g[2].append(r.get("drops", 0))
            g[3].append(r.get("rate_bps"))
            if "ecn_marked" in r:
                if g[4] is None:
                    g = groups[key] = (*g[:4], ([], [], []))
                for col, name in zip(g[4], _SWITCH_COUNTERS):
                    col.append(r.get(name, 0))
        ends = {}
        for key, (t, tx, drops, rate, sw) in groups.items():
            t = np.array(t, dtype=float)
            order = np.argsort(t, kind="stable")
            ends[key] = {"t": t[order], "tx_bytes": _floats(tx)[order], "drops": _floats(drops)[order],
                         "rate_bps": _floats(rate)[order]}
            if sw is not None and len(sw[0]) == len(t):
                ends[key].update({name: _floats(col)[order] for col, name in zip(sw, _SWITCH_COUNTERS)})
        return cls(np.array(ts, dtype=float), ends)


@dataclass
class TransportRecords:
    """Parsed records of one transport: ``events``, ``cpu``, ``sched`` (agents' schedstat
    samples) as lists of dicts (as in the files), ``samples`` a :class:`SampleTable`, ``links``
    a :class:`LinkTable` (lists of dicts given here are converted); ``jobs`` the agents' job
    specs in rank order (``jobs/rank<r>.json``) and ``paths`` the traced flows (``paths.json``
    ``flows``), both empty when absent."""
    name: str
    events: list[dict] = field(default_factory=list)
    samples: SampleTable | list[dict] = field(default_factory=list)
    links: LinkTable | list[dict] = field(default_factory=list)
    cpu: list[dict] = field(default_factory=list)
    sched: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    paths: list[dict] = field(default_factory=list)

    def __post_init__(self):
        if not isinstance(self.samples, SampleTable):
            self.samples = SampleTable.from_records(self.samples)
        if not isinstance(self.links, LinkTable):
            self.links = LinkTable.from_records(self.links)


def job_names(jobs: list[dict]) -> list[str]:
    """The jobs of a run's job specs, in agent order (``["job0"]`` for a single job)."""
    return list(dict.fromkeys(j.get("job", "job0") for j in jobs)) or ["job0"]


def _job_filter(jobs: list[dict], job: str):
    """``(keep(record) -> record | None, sched(record) -> record)`` restricting records to the
    agents of ``job`` and renaming their agent ids (``rank`` on the control socket) to the
    job's ranks; records without a ``rank`` (faults, targets, the runner's own) are kept."""
    remap = {j.get("agent", j["rank"]): j["rank"] for j in jobs if j.get("job", "job0") == job}

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
    empty), every record checked against its schema (:mod:`testbed.rundir.records`) and dropped
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

    jobs, paths = _jobs(d / rec.JOBS_DIR), _paths(d / rec.PATHS)
    samples, sched = recs(rec.SAMPLES), list(recs(rec.SCHED))
    if job is not None:
        keep, sched_of = _job_filter(jobs, job)
        events = [r for r in map(keep, events) if r is not None]
        samples = (r for r in map(keep, samples) if r is not None)
        sched = [sched_of(r) for r in sched]
        jobs = sorted((j for j in jobs if j.get("job", "job0") == job), key=lambda j: j["rank"])
        paths = [f for f in paths if f.get("job", "job0") == job]
    return TransportRecords(name, events, SampleTable.from_records(samples),
                            LinkTable.from_records(recs(rec.LINKS)), list(recs(rec.CPU)), sched, jobs, paths)


def _quiet_timeout(manifest) -> float | None:
    if not isinstance(manifest, dict):
        return None
    s = manifest.get("scenario")
    t = s.get("timeout_s") if isinstance(s, dict) else None
    return None if rec.SCENARIO_FIELDS["timeout_s"](t) else float(t)


def _first_times(d: Path) -> list[float]:
    """The first good record's ``t`` of samples, links and cpu (a run without events)."""
    out = []
    for fname in (rec.SAMPLES, rec.LINKS, rec.CPU):
        with collecting(Damage()):   # reported when the file is read for real
            first = next(iter(iter_jsonl(d / fname)), None)
        if first is not None:
            out.append(first["t"])
    return out


def _jobs(d: Path) -> list[dict]:
    """The job specs ``jobs/rank<a>.json`` in agent order (:data:`testbed.rundir.records.JOB`;
    ``a`` the agent id, the rank for a single job)."""
    if not d.is_dir():
        if d.exists():
            problem(d, None, "not a directory")
        return []
    jobs = [read_json(p, None, rec.JOB) for p in sorted(d.glob("rank*.json"))]
    return sorted((j for j in jobs if j is not None), key=lambda j: j.get("agent", j["rank"]))


def _paths(path: Path) -> list[dict]:
    """``flows`` of paths.json, each checked (:data:`testbed.rundir.records.PATH_FLOW`)."""
    doc = read_json(path, {}, rec.PATHS_DOC)
    out = []
    for i, f in enumerate(doc.get("flows", [])):
        bad = rec.check_record(rec.PATH_FLOW, f)
        if bad is None:
            out.append(f)
        else:
            problem(path, None, f"flows[{i}].{bad}")
    return out


@dataclass
class FlowSeries:
    """One flow's raw samples (t_s relative, sorted) as arrays of shape (nsamples,)."""
    t_s: np.ndarray
    bytes: np.ndarray
    retransmits: np.ndarray
    rtt_s: np.ndarray
    cwnd_bytes: np.ndarray
    retransmitted_bytes: np.ndarray | None
    evs: dict  # ev_id -> last seen {"state", "sent", "lost"}
