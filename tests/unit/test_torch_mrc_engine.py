"""The mrc backend below torch: its configuration, its event lines, and three engines (progress
threads with their QP channels) in one process on loopback. No torch needed."""
from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

from agents.jobspec import JobSpecError, parse_job
from agents.mrc import EVEvent, EVState
from agents.mrc.ev import EVCause
from agents.protocol import LineFramer, sample_from_record
from agents.torch_mrc import MRCConfigError
from agents.torch_mrc.config import ENV_JOB, ENV_REPORT_FD, ENV_SLOT_BYTES, job_from_env, report_fd_from_env, \
    slot_bytes
from agents.torch_mrc.engine import Engine, MRCError
from agents.torch_mrc.report import PIPE_BUF, EventReporter
from agents.torch_mrc.segments import AllGatherOp, AllReduceOp, BroadcastOp, barrier_op
from tests.conftest import ipv6_loopback_ok
from tests.unit.test_agent import make_jobs


def _write(tmp_path, job: dict) -> str:
    path = tmp_path / f"job{job['rank']}.json"
    path.write_text(json.dumps(job))
    return str(path)


def test_job_from_env_names_the_variable_the_file_and_the_mismatch(tmp_path):
    with pytest.raises(MRCConfigError, match=f"{ENV_JOB} is not set"):
        job_from_env(0, 3, environ={})
    with pytest.raises(MRCConfigError, match="at least 2 ranks"):
        job_from_env(0, 1, environ={})
    job = make_jobs(tmp_path, "mrc", world_size=3)[1]
    path = _write(tmp_path, job)
    assert job_from_env(1, 3, environ={ENV_JOB: path}).rank == 1
    with pytest.raises(MRCConfigError, match=r"rank 1 of 3 ranks, but torch.distributed has rank 2 of 3"):
        job_from_env(2, 3, environ={ENV_JOB: path})
    tcp = _write(tmp_path, {**make_jobs(tmp_path, "tcp", world_size=3)[1], "rank": 1})
    with pytest.raises(MRCConfigError, match="transport 'tcp'"):
        job_from_env(1, 3, environ={ENV_JOB: tcp})
    with pytest.raises(JobSpecError, match="nowhere.json"):
        job_from_env(1, 3, environ={ENV_JOB: str(tmp_path / "nowhere.json")})


def test_report_fd_and_slot_variables():
    assert report_fd_from_env({}) is None
    with pytest.raises(MRCConfigError, match=ENV_REPORT_FD):
        report_fd_from_env({ENV_REPORT_FD: "x"})
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(MRCConfigError, match="not an open file descriptor"):
        report_fd_from_env({ENV_REPORT_FD: str(w)})
    os.close(r)
    assert slot_bytes(3, {}) == 1 << 20
    assert slot_bytes(129, {}) == (64 << 20) // 256          # 2(n-1) slots fit 64 MiB
    assert slot_bytes(3, {ENV_SLOT_BYTES: "1001"}) == 1000
    with pytest.raises(MRCConfigError, match=ENV_SLOT_BYTES):
        slot_bytes(3, {ENV_SLOT_BYTES: "4"})


def test_events_are_protocol_lines_written_whole():
    r, w = os.pipe()
    try:
        rep = EventReporter(w, 17)
        rep.ev_state(EVEvent(5.0, 0x102, 3, EVState.GOOD, EVState.ASSUMED_BAD, EVCause.LOSS, 2), "tx", "h2", 1e9)
        rep.qp_error("x" * 10_000, 1e9 + 1)
        data = os.read(r, 1 << 16)
    finally:
        os.close(r)
        os.close(w)
    lines = data.split(b"\n")[:-1]
    assert len(lines) == 2 and all(len(ln) < PIPE_BUF for ln in lines)
    ev, err = LineFramer().feed(data)              # the runner's framer reads them
    assert (ev.kind, ev.rank, ev.peer, ev.dir, ev.ev_id, ev.old, ev.new, ev.cause, ev.drop_count) == \
        ("ev_state", 17, "h2", "tx", 3, "GOOD", "ASSUMED_BAD", "loss", 2)
    assert err.kind == "qp_error" and err.reason.endswith("...") and rep.sent == 2


@pytest.fixture
def engines(tmp_path, request):
    if not ipv6_loopback_ok():
        pytest.skip("no IPv6 loopback")
    jobs = make_jobs(tmp_path, "mrc", world_size=3, engine=request.param, linger_s=3.0)
    for job in jobs:
        job["samples_path"] = str(tmp_path / f"samples{job['rank']}.jsonl")
    made = [Engine(parse_job(job), stride=4096) for job in jobs]
    for e in made:
        e.start()
    yield made
    for e in made:
        e.close(0.0)


def _run(engines, make_op, timeout_s=20.0) -> list:
    """Submit ``make_op(rank, on_done)`` on every engine; the ops' errors (None: success)."""
    errors: list = [...] * len(engines)
    done = [threading.Event() for _ in engines]
    for r, e in enumerate(engines):
        def on_done(exc, r=r):
            errors[r] = exc
            done[r].set()
        e.submit(make_op(r, on_done))
    assert all(d.wait(timeout_s) for d in done), errors
    return errors


@pytest.mark.parametrize("engines", ["native", "python"], indirect=True)
def test_three_engines_run_every_collective(engines, tmp_path):
    n, stride = 3, engines[0].stride
    data = [np.arange(100_000, dtype=np.float64) * (r + 1) for r in range(n)]
    assert _run(engines, lambda r, done: AllReduceOp([data[r]], n, stride, done)) == [None] * n
    assert all(np.array_equal(d, np.arange(100_000) * 6.0) for d in data)
    blobs = [np.arange(300_001, dtype=np.uint32).view(np.uint8) if r == 2 else np.zeros(1_200_004, np.uint8)
             for r in range(n)]
    assert _run(engines, lambda r, done: BroadcastOp(blobs[r], 2, n, stride, done)) == [None] * n
    assert all(np.array_equal(b, blobs[2]) for b in blobs)
    outs = [[np.zeros(1000, np.int16) for _ in range(n)] for _ in range(n)]
    assert _run(engines, lambda r, done: AllGatherOp(np.full(1000, r, np.int16), outs[r], n, stride, done)) \
        == [None] * n
    assert all(np.array_equal(outs[r][c], np.full(1000, c)) for r in range(n) for c in range(n))
    assert _run(engines, lambda r, done: barrier_op(n, done)) == [None] * n
    assert all(e.drain(5.0) for e in engines)
    for e in engines:
        e.close()
    assert all(e.closed for e in engines)
    late = _run(engines, lambda r, done: barrier_op(n, done))
    assert all(isinstance(exc, MRCError) and "shut down" in str(exc) for exc in late)
    for r in range(n):
        lines = (tmp_path / f"samples{r}.jsonl").read_text().splitlines()
        samples = [sample_from_record(json.loads(ln)) for ln in lines]
        assert samples[-1].rank == 10 + r and samples[-1].loop is not None
        tx = next(f for f in samples[-1].flows if f["dir"] == "tx")
        assert tx["bytes"] >= 800_000 * 2 * (n - 1) // n and not tx["busy"]     # the allreduce's share
