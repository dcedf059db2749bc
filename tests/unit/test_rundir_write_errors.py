"""An OS error on the run directory (storage full, read-only, permission denied) is one
RunDirWriteError naming the path and what was being written; what was written before stays
readable, and the runner ends the run instead of printing tracebacks."""
from __future__ import annotations

import errno
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from testbed.commands.run import write_failed
from testbed.model.errors import TestbedFailure
from testbed.rundir.errors import RunDirWriteError
from testbed.rundir.load import load_transport
from testbed.rundir.names import MANIFEST
from testbed.rundir.read import load_manifest
from testbed.rundir.write import TransportWriter, write_manifest
from testbed.rundir import write as rundir_write


class _Full:
    """A buffered file on a full disk: writes are buffered, a flush fails with ENOSPC."""

    def __init__(self, f):
        self.f = f
        self.closed = False

    def write(self, text):
        return len(text)

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self):
        self.closed = True
        self.f.close()


def _event(t: float, **kw) -> dict:
    return {"t": t, "kind": "run", **kw}


def _transport(tmp_path: Path) -> tuple[Path, TransportWriter]:
    run = tmp_path / "run"
    run.mkdir()
    write_manifest(run, {"scenario": {"name": "s"}, "transports": ["mrc"], "spec": {}})
    return run, TransportWriter(run / "mrc")


def test_a_full_disk_is_one_error_naming_the_file_and_the_records_before_stay(tmp_path):
    run, w = _transport(tmp_path)
    w.events.write(_event(1000.0, phase="start", transport="mrc", world=2))
    w.flush()
    w.events._f = _Full(w.events._f)
    w.events.write(_event(1001.0))
    with pytest.raises(RunDirWriteError) as err:
        w.flush()
    path = run / "mrc" / "events.jsonl"
    assert str(err.value) == f"cannot write the events.jsonl records ({path}): No space left on device [ENOSPC]"
    assert isinstance(err.value, TestbedFailure) and err.value.errno == errno.ENOSPC and err.value.path == path
    assert err.value.__cause__ is None and err.value.__suppress_context__   # one error, no chained traceback
    # the run's teardown goes on: every writer of the transport now drops its records, quietly
    w.events.write(_event(1002.0))
    w.samples.write({"t": 1002.0, "rank": 0, "flows": []})
    w.flush()
    w.close()
    tr = load_transport(run, "mrc")
    assert [e["t"] for e in tr.events] == [1000.0]
    assert load_manifest(run)["transports"] == ["mrc"]


class _ReadOnly(_Full):
    """A file on a file system remounted read-only: the write itself fails."""

    def write(self, data):
        raise OSError(errno.EROFS, "Read-only file system")


def test_a_write_that_fails_is_one_error_and_the_writers_then_drop_their_records(tmp_path):
    run, w = _transport(tmp_path)
    w.links.write({"t": 1000.0, "link": "l"})
    w.flush()
    w.links._f = _ReadOnly(w.links._f)
    with pytest.raises(RunDirWriteError) as err:
        w.links.write({"t": 1001.0, "link": "l"})
    path = run / "mrc" / "links.jsonl"
    assert str(err.value) == f"cannot write the links.jsonl records ({path}): Read-only file system [EROFS]"
    assert err.value.__cause__ is None and err.value.__suppress_context__
    w.links.write({"t": 1002.0, "link": "l"})     # dropped, quietly, as by every writer of the transport
    w.events.write(_event(1002.0))
    w.flush()
    w.close()
    assert [json.loads(x)["t"] for x in path.read_text().splitlines()] == [1000.0]
    assert (run / "mrc" / "events.jsonl").read_text() == ""


def test_a_manifest_that_cannot_be_replaced_keeps_the_old_one(tmp_path, monkeypatch):
    run, w = _transport(tmp_path)
    w.close()

    def read_only(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(rundir_write.tempfile, "mkstemp", read_only)
    with pytest.raises(RunDirWriteError, match=r"cannot write the manifest \(.*manifest.json\): "
                                               r"Read-only file system \[EROFS\]"):
        write_manifest(run, {"scenario": {"name": "other"}, "transports": []})
    assert json.loads((run / MANIFEST).read_text())["scenario"] == {"name": "s"}
    assert not [p for p in run.iterdir() if p.name.startswith(".")]   # no temporary file left


def test_a_directory_that_cannot_be_created_names_itself(tmp_path, monkeypatch):
    def denied(self, *a, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))
    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(RunDirWriteError, match=r"cannot write a transport directory \(.*/run/rc\): "
                                               r"Permission denied \[EACCES\]"):
        TransportWriter(tmp_path / "run" / "rc")


def test_the_runner_ends_the_run_on_a_write_error_after_its_teardown(tmp_path):
    from testbed.run.transport import TransportRun
    run = object.__new__(TransportRun)   # the except clause of run(), without a fabric
    run.dir, run.transport, run.status, run.reason = tmp_path / "mrc", "mrc", None, ""
    calls = []

    def bring_up():   # a file the runner opens itself (an agent's log) on a full disk
        raise OSError(errno.ENOSPC, "No space left on device", str(run.dir / "agents" / "rank0.log"))
    run._bring_up, run._finish = bring_up, lambda: calls.append("finish")
    with pytest.raises(RunDirWriteError) as err:
        run.run()
    assert calls == ["finish"] and run.status == "error"
    assert run.reason == str(err.value) == (f"cannot write the run directory ({run.dir / 'agents' / 'rank0.log'}): "
                                            "No space left on device [ENOSPC]")

    def other():   # any other failure ends only this transport, as before
        raise OSError(errno.ENETDOWN, "Network is down")
    run._bring_up = other
    assert run.run() == "error" and run.reason.startswith("OSError")


def test_the_command_prints_the_first_write_error_in_one_line(tmp_path):
    run, w = _transport(tmp_path)
    w.close()
    first = RunDirWriteError(run / "mrc" / "events.jsonl", "the events.jsonl records",
                             OSError(errno.ENOSPC, "No space left on device"))
    try:
        try:
            raise first
        except RunDirWriteError:   # the manifest written on the way out fails too
            raise RunDirWriteError(run / MANIFEST, "the manifest", OSError(errno.ENOSPC, "No space left on device"))
    except RunDirWriteError as exc:
        out = io.StringIO()
        status = write_failed(exc, Console(file=out, width=400, no_color=True))
    text = out.getvalue()
    assert status == 1 and text.count("\n") == 1 and "Traceback" not in text
    assert text == (f"testbed run: cannot write the events.jsonl records ({run}/mrc/events.jsonl): No space left on "
                    f"device [ENOSPC]; the run stopped early, what it wrote is kept (testbed report {run})\n")


def test_run_scenario_ends_the_run_and_keeps_the_manifest(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from testbed.run import scenario as lifecycle
    ran = []

    class FullDisk:   # a transport whose runner could not write its records (after its teardown)
        def __init__(self, scenario, t, run_dir, *a, **kw):
            self.dir, self.reason = run_dir / t, ""
            ran.append(t)

        def run(self):
            raise OSError(errno.ENOSPC, "No space left on device", str(self.dir / "agents" / "rank0.log"))
    wl = SimpleNamespace(hosts=["h0", "h1"], measured_iterations=1, sizes_bytes=(1024,), collective="all_reduce")
    scenario = SimpleNamespace(name="s", workload=wl, transports=["mrc", "tcp"])
    monkeypatch.setattr(lifecycle, "TransportRun", FullDisk)
    monkeypatch.setattr(lifecycle, "base_manifest", lambda sc: {"format": 2, "scenario": {"name": "s"},
                                                                "transports": [], "status": {}})
    with pytest.raises(RunDirWriteError) as err:
        lifecycle.run_scenario(scenario, runs_root=tmp_path, console=Console(file=io.StringIO()), live=False)
    assert ran == ["mrc"]   # the run ended: tcp never started
    assert "No space left on device [ENOSPC]" in str(err.value) and err.value.__cause__ is None
    run_dir = next(tmp_path.iterdir())
    manifest = load_manifest(run_dir)
    assert manifest["status"]["mrc"] == {"status": "error", "reason": str(err.value)}
    assert "finished_at" in manifest
