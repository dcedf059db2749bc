"""Property: ``testbed report`` on any damaged run directory either succeeds or reports the
damage as the project's own error naming the file (and the line, for JSONL), within a time
and memory bound; never a traceback, a hang or unbounded memory.

A small synthetic run (:func:`testbed.metrics.synthetic.write_run`: 2 transports, 4 ranks,
2 s, with job specs, paths.json and sched.jsonl) is written once and reported once (so
summary.json and the CSV files exist too); every example copies it, applies one drawn
damage and runs ``testbed report`` in-process (exit 0, 2 or 3, see
:mod:`testbed.commands.report`). The damages are the ones a user produces by accident: a
file replaced by junk, truncated, swapped with a directory, a FIFO or /dev/zero; a JSON
document of the wrong shape; one JSONL line or one key of a record or document replaced by
a value of another type or an absurd one. ``data/damaged/cases.json`` keeps every damage
that once crashed the report (regression corpus, replayed by
:func:`test_damage_that_once_crashed`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed import cli
from testbed.metrics import synthetic

CASES = Path(__file__).parent / "data" / "damaged" / "cases.json"
MEMORY_BOUND_BYTES = 1 << 30        # address space a report may add
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "120"))
"""Examples per run; the unit tier replays the same ones (derandomized) unless FUZZ_EXAMPLES is set,
then they are random (a longer campaign: ``FUZZ_EXAMPLES=2000 pytest tests/unit/test_fuzz_rundir.py``)."""


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    run = synthetic.write_run(tmp_path_factory.mktemp("fuzz") / "base", ("mrc", "tcp"), world_size=4,
                              duration_s=2.0, extras=True)
    assert report(run, "--recompute")[0] == 0
    return run


def files_of(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())


# -- applying one damage -------------------------------------------------------------------
def _set_path(doc, path: list, value):
    """``doc`` with the item at ``path`` (keys / indices) set to ``value`` (or deleted: None path end)."""
    if not path:
        return value
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    if value is _DELETE:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


_DELETE = object()


def _paths_in(doc, depth: int = 3, prefix: tuple = ()) -> list[tuple]:
    """Every key / index path into ``doc`` up to ``depth`` levels (first 4 items of lists)."""
    out = []
    if depth == 0:
        return out
    items = doc.items() if isinstance(doc, dict) else enumerate(doc[:4]) if isinstance(doc, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out += _paths_in(v, depth - 1, prefix + (k,))
    return out


def apply(run: Path, case: dict) -> None:
    """Apply one damage ``{"file", "op", ...}`` to the copy ``run`` (see the module docstring)."""
    path = run / case["file"]
    op = case["op"]
    if op == "bytes":
        path.unlink(missing_ok=True)
        path.write_bytes(bytes.fromhex(case["hex"]))
    elif op == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * case["fraction"])])
    elif op == "to_dir":
        path.unlink()
        path.mkdir()
    elif op == "dir_to_file":
        shutil.rmtree(path)
        path.write_text("not a directory\n")
    elif op == "remove":
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    elif op == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif op == "symlink":
        path.unlink()
        path.symlink_to(case["target"])
    elif op == "json_value":         # a JSON document: one key path set (or deleted)
        doc = json.loads(path.read_text())
        value = _DELETE if case.get("delete") else case["value"]
        path.write_text(json.dumps(_set_path(doc, list(case["path"]), value)))
    elif op == "jsonl_line":         # a JSONL line replaced, or one key path of its record set
        lines = path.read_text().split("\n")
        i = case["line"] % max(1, len(lines) - 1)
        if "path" in case:
            doc = json.loads(lines[i])
            value = _DELETE if case.get("delete") else case["value"]
            lines[i] = json.dumps(_set_path(doc, list(case["path"]), value))
        else:
            lines[i] = case["text"]
        path.write_text("\n".join(lines))
    else:
        raise ValueError(f"unknown damage {op!r}")


# -- running the report under bounds ---------------------------------------------------------
def report(run: Path, *args: str) -> tuple[int, str, float]:
    """(exit status, stderr, seconds) of ``testbed report RUN --no-plots *args`` in-process,
    with at most MEMORY_BOUND_BYTES more address space (a MemoryError fails the test)."""
    err = io.StringIO()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes + MEMORY_BOUND_BYTES, hard))
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = cli.main(["report", str(run), "--no-plots", *args])
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return rc, err.getvalue(), time.monotonic() - t0


def check_outcome(run: Path, case: dict, args: tuple[str, ...]) -> None:
    rc, err, seconds = report(run, *args)
    assert rc in (0, 2, 3), (case, rc, err)
    if rc:
        assert str(run) in err, (case, err)      # the damaged file (or the directory) is named
    if rc == 3:
        problems = [line.strip() for line in err.splitlines()[1:] if line.startswith("  ")]
        assert problems and all(p.startswith(str(run)) for p in problems), (case, err)


# -- strategies -------------------------------------------------------------------------------
ABSURD = st.sampled_from([None, True, False, 0, -1, 10**9, 10**12, 2**63, 10**400, 1e12, -1e12, 1e300,
                          float("nan"), float("inf"), "", "x", "../../etc", [], [1, 2], {}, {"a": 1},
                          [[[[]]]], "GOOD"])
VALUES = st.one_of(ABSURD, st.integers(-2**70, 2**70), st.floats(), st.text(max_size=6),
                   st.lists(st.integers(-5, 5), max_size=3))
JUNK = st.one_of(st.binary(max_size=48), st.sampled_from([b"", b"[]", b"[1, 2]", b"5", b"null", b'"x"', b"{",
                                                          b"\xff\xfe\x00\x00", b"\x1f\x8b\x08\x00", b"NaN",
                                                          b"[" * 5000 + b"]" * 5000, b'{"t": 1e999}']))


@st.composite
def damages(draw, files: list[str]) -> dict:
    f = draw(st.sampled_from(files))
    op = draw(st.sampled_from(["bytes", "truncate", "to_dir", "dir_to_file", "remove", "fifo", "symlink",
                               "value", "value", "value", "value"]))
    if op == "bytes":
        return {"file": f, "op": op, "hex": draw(JUNK).hex()}
    if op == "truncate":
        return {"file": f, "op": op, "fraction": draw(st.floats(0, 0.999))}
    if op in ("to_dir", "fifo", "remove"):
        return {"file": f, "op": op}
    if op == "dir_to_file":
        return {"file": draw(st.sampled_from(["mrc", "tcp", "mrc/jobs", "tcp/jobs"])), "op": op}
    if op == "symlink":
        return {"file": f, "op": op, "target": draw(st.sampled_from(["/dev/zero", "/dev/null", "/nonexistent",
                                                                     "/etc/passwd", "."]))}
    return {"file": f, "op": "value"}     # resolved against the file's content in the test


def resolve_value(draw, run: Path, case: dict) -> dict:
    """Turn a ``value`` damage into a concrete ``json_value`` / ``jsonl_line`` one."""
    path = run / case["file"]
    if path.suffix == ".jsonl":
        lines = path.read_text().split("\n")
        line = draw(st.integers(0, len(lines) - 2))
        if draw(st.booleans()):
            text = draw(st.one_of(VALUES.map(lambda v: json.dumps(v)), JUNK.map(lambda b: b.decode("latin-1"))))
            return {"file": case["file"], "op": "jsonl_line", "line": line, "text": text}
        paths = _paths_in(json.loads(lines[line]))
        return {"file": case["file"], "op": "jsonl_line", "line": line, "path": list(draw(st.sampled_from(paths))),
                "value": draw(VALUES), "delete": draw(st.booleans())}
    if path.suffix == ".json":
        paths = _paths_in(json.loads(path.read_text())) or [()]
        p = draw(st.sampled_from(paths))
        return {"file": case["file"], "op": "json_value", "path": list(p), "value": draw(VALUES),
                "delete": bool(p) and draw(st.booleans())}
    return {"file": case["file"], "op": "bytes", "hex": draw(JUNK).hex()}   # CSV, logs


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize="FUZZ_EXAMPLES" not in os.environ,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_damage_is_reported_never_a_traceback(base_run, tmp_path_factory, data):
    run = tmp_path_factory.mktemp("case") / "run"
    shutil.copytree(base_run, run, symlinks=True)
    case = data.draw(damages(files_of(base_run)))
    if case["op"] == "value":
        case = resolve_value(data.draw, run, case)
    apply(run, case)
    args = data.draw(st.sampled_from([(), ("--recompute",), ("--format", "json"), ("--recompute", "--format",
                                                                                   "json")]))
    check_outcome(run, case, args)
    shutil.rmtree(run, ignore_errors=True)


def regression_cases() -> list[dict]:
    return json.loads(CASES.read_text())


@pytest.mark.parametrize("case", regression_cases(), ids=lambda c: c["name"])
def test_damage_that_once_crashed(base_run, tmp_path, case):
    """Each damage of the regression corpus: reported with file (and line), nothing crashes;
    ``expect`` (if given) is a fragment of the reported problem."""
    run = tmp_path / "run"
    shutil.copytree(base_run, run, symlinks=True)
    apply(run, case)
    check_outcome(run, case, ())
    rc, err, seconds = report(run, "--recompute")
    if "expect" in case:
        assert case["expect"] in err, err
    assert rc == case.get("status", 3), err
