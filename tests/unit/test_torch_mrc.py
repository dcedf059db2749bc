"""The ``mrc`` torch.distributed backend end to end: 3 ranks as processes on loopback (::1), each
calling ``init_process_group("mrc")`` with torchrun's environment and its job spec.

Needs torch: skipped without it, unless MRC_TORCH_REQUIRE=1 (CI), where a missing torch fails.
The ranks run this module as a script (``python -m tests.unit.test_torch_mrc <scenario>``) and
print one JSON line of results; the test kills them whatever happens.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

if os.environ.get("MRC_TORCH_REQUIRE") == "1":
    import torch  # noqa: F401 - CI: a missing torch is a failure, not a skip
else:
    pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
WORLD = 3
SLOT_BYTES = 64 << 10
"""The tests' slot stride: a 1 MiB tensor is several segments (192 KiB each on 3 ranks)."""
EPS32 = 2.0 ** -24
"""float32's unit roundoff."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


class Ranks:
    """``world`` rank processes of ``scenario`` (their output in files under ``tmp_path``);
    :meth:`results` waits for them. Every process still running is killed at exit (a context
    manager), so a failing test leaves none."""

    def __init__(self, tmp_path: Path, scenario: str, jobs: list[dict], *, extra_env=None, pass_fds=()):
        self.procs: list[subprocess.Popen] = []
        self.logs: list[tuple[Path, Path]] = []
        port = _free_port()
        try:
            for job in jobs:
                rank = job["rank"]
                path = tmp_path / f"job{rank}.json"
                path.write_text(json.dumps(job))
                env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(len(jobs)),
                       "LOCAL_RANK": "0", "MASTER_ADDR": "::1", "MASTER_PORT": str(port),
                       "TESTBED_MRC_JOB": str(path), "TESTBED_MRC_SLOT_BYTES": str(SLOT_BYTES),
                       "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
                env.update((extra_env or {}).get(rank, {}))
                out, err = tmp_path / f"rank{rank}.out", tmp_path / f"rank{rank}.err"
                self.logs.append((out, err))
                with open(out, "w") as fo, open(err, "w") as fe:
                    self.procs.append(subprocess.Popen(
                        [sys.executable, "-m", "tests.unit.test_torch_mrc", scenario], cwd=REPO, env=env,
                        stdout=fo, stderr=fe, pass_fds=pass_fds, start_new_session=True))
        except BaseException:
            self.__exit__()
            raise

    def results(self, timeout_s: float) -> list[tuple[int | None, dict | None, str]]:
        """Per rank (exit status, its JSON result or None, stderr's tail); ranks still running
        after ``timeout_s`` are killed (status None)."""
        deadline = time.monotonic() + timeout_s
        out = []
        for p, (stdout, stderr) in zip(self.procs, self.logs):
            try:
                status = p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                status = None
            lines = [ln for ln in stdout.read_text().splitlines() if ln.startswith("{")]
            out.append((status, json.loads(lines[-1]) if lines else None, stderr.read_text()[-3000:]))
        self.kill()
        return out

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        for p in self.procs:
            p.wait()


def _jobs(tmp_path: Path, engine: str, world: int = WORLD, **extra) -> list[dict]:
    from tests.unit.test_agent import make_jobs
    return make_jobs(tmp_path, "mrc", world_size=world, engine=engine, linger_s=5.0, **extra)


@pytest.mark.parametrize("engine", ["native", "python"])
def test_three_ranks_collectives_and_ddp(tmp_path, engine):
    from tests.conftest import ipv6_loopback_ok
    if not ipv6_loopback_ok():
        pytest.skip("no IPv6 loopback")
    jobs = _jobs(tmp_path, engine)
    for job in jobs:
        job["samples_path"] = str(tmp_path / f"samples{job['rank']}.jsonl")
    with Ranks(tmp_path, "main", jobs) as ranks:
        results = ranks.results(timeout_s=60)
    for rank, (status, res, err) in enumerate(results):
        assert status == 0 and res is not None, f"rank {rank} exited {status}:\n{err}"
        assert res["registered_on_import"] in (True, False)
        for name, ok in res["exact"].items():
            assert ok, f"rank {rank}: {name} is not exact"
        assert res["unsupported"] == ["mrc backend: reduce is not supported",
                                      "mrc backend: allreduce with ReduceOp.MAX is not supported (ReduceOp.SUM only)",
                                      "mrc backend: all_to_all_single is not supported"]
        # gloo and mrc add the same float32 numbers in different orders: each order is within
        # (n-1) * eps32 * sum|x_i| of the exact sum (n-1 roundings), so the two within twice that
        assert res["f32_rel_diff"] <= 2 * (WORLD - 1) * EPS32 * 1.001, res
        # DDP, 5 SGD steps (lr 0.1) from the same seed on gloo and on mrc: a gradient differs by
        # the bound above (~1e-7 relative), an update by lr times that, and 5 steps of a linear
        # model add those up with hardly any growth: ~1e-7 absolute on parameters of size ~1;
        # 1e-5 leaves a factor of 100 and still catches a wrong average (~1e-2)
        assert res["ddp_max_abs_diff"] <= 1e-5, res
        assert res["ddp_steps"] == 5
        # destroy_process_group closed the engine after the idle handshake (closed_by_destroy), not after
        # linger_s; the time is only a hang bound
        assert res["closed_by_destroy"] and res["shutdown_s"] < 10.0, res   # a hang bound: it takes ~20 ms
    print(json.dumps({engine: {k: results[0][1][k] for k in
                               ("allreduce_1MiB_ms", "f32_rel_diff", "f32_not_bit_identical", "ddp_max_abs_diff",
                                "shutdown_s")}}))
    from agents.protocol import sample_from_record
    for job in jobs:
        lines = Path(job["samples_path"]).read_text().splitlines()
        samples = [sample_from_record(json.loads(ln)) for ln in lines]
        assert samples and {s.rank for s in samples} == {job["agent"]}
        tx = [f for f in samples[-1].flows if f["dir"] == "tx"][0]
        assert tx["peer_rank"] == (job["rank"] + 1) % WORLD and tx["bytes"] > 4 << 20
        assert len(tx["evs"]) == 4


def test_a_dead_peer_fails_the_op_with_its_name_and_a_qp_error_event(tmp_path):
    """Rank 1 dies (no shutdown) after the first allreduce: rank 0's next allreduce fails once its
    QP to rank 1 has exhausted its retries, and the launcher's pipe gets the events: the qp_error,
    and the ev_state of EV 2, a black hole from the start (as test_agent's dead EV)."""
    from tests.conftest import ipv6_loopback_ok
    from tests.unit.test_agent import _kill_ev, _local_unbound_ipv6
    if not ipv6_loopback_ok():
        pytest.skip("no IPv6 loopback")
    jobs = _jobs(tmp_path, "native", world=2)
    dead = _local_unbound_ipv6()
    for job in jobs:   # RTO 16 ms (timeout 14), ERR after 3 linear and 1 exponential retries
        job["qp"].update(timeout=14, retry_linear=3, retry_exp=1)
        if dead is not None:
            _kill_ev(job, 2, dead)
    read_fd, write_fd = os.pipe()
    try:
        with Ranks(tmp_path, "crash", jobs, extra_env={0: {"TESTBED_REPORT_FD": str(write_fd)}},
                   pass_fds=(write_fd,)) as ranks:
            os.close(write_fd)
            write_fd = -1
            results = ranks.results(timeout_s=30)
        os.set_blocking(read_fd, False)
        try:
            events = [json.loads(ln) for ln in os.read(read_fd, 1 << 20).decode().splitlines()]
        except BlockingIOError:
            events = []
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    status, res, err = results[0]
    assert status == 0 and res is not None, err
    assert res["runtime_error"], res
    print(json.dumps(res))
    assert "rank 0" in res["error"] and "rank 1 (h1)" in res["error"] and "entered ERR" in res["error"], res
    assert {"type": "backend", "name": "mrc", "rank": 10} in events   # agent 10: the launcher's check that mrc ran
    errors = [e for e in events if e.get("kind") == "qp_error"]
    assert len(errors) == 1 and errors[0]["rank"] == jobs[0]["agent"] and errors[0]["type"] == "event"
    if dead is not None:
        assert any(e.get("kind") == "ev_state" and (e["peer"], e["dir"], e["ev_id"], e["new"])
                   == ("h1", "tx", 2, "ASSUMED_BAD") for e in events), events
    assert all(abs(e["t"] - time.time()) < 60 for e in events if e["type"] == "event")


def test_autoload_registers_mrc_on_import_torch():
    """The "torch.backends" entry point (pyproject.toml): a fresh interpreter's ``import torch``
    registers the backend; importing agents.torch_mrc alone does not import torch."""
    from importlib.metadata import entry_points
    if not any(ep.name == "mrc" for ep in entry_points(group="torch.backends")):
        pytest.skip("the torch.backends entry point is not installed (pip install -e .)")
    code = ("import sys, agents.torch_mrc; assert 'torch' not in sys.modules; import torch; "
            "print('mrc' in torch.distributed.Backend.backend_list, "
            "torch.distributed.Backend.default_device_backend_map['cpu'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "gloo"]       # registered, and gloo stays the CPU default


# ---- the ranks (run as a script) -----------------------------------------------------------------
def _exact_checks(dist, torch, rank: int, n: int) -> dict:
    """allreduce (float32, float64, int64, several tensors, a size < n, a large one), broadcast
    from rank 1 (float32, bfloat16 and bool, a large one), allgather, all_gather_into_tensor."""
    def data(r, count, dtype, salt):
        g = torch.Generator().manual_seed(1000 * salt + r)
        return torch.randint(-1000, 1000, (count,), generator=g).to(dtype)
    exact = {}
    for salt, (dtype, count) in enumerate([(torch.float32, 1000), (torch.float64, 4097), (torch.int64, 77),
                                           (torch.float32, 2), (torch.float32, (1 << 20) + 3)]):
        t = data(rank, count, dtype, salt)
        dist.all_reduce(t)
        want = sum(data(r, count, dtype, salt).to(torch.float64) for r in range(n)).to(dtype)
        exact[f"allreduce {dtype} x{count}"] = bool(torch.equal(t, want))
    pair = [data(rank, 100, torch.float32, 7), data(rank, 100, torch.float32, 8)]
    dist.distributed_c10d._get_default_group().allreduce(pair).wait()
    want = sum(data(r, 100, torch.float32, s) for r in range(n) for s in (7, 8))
    exact["allreduce of two tensors (gloo's sum over the list)"] = all(torch.equal(p, want) for p in pair)
    odd = data(rank, 64, torch.float32, 9).reshape(8, 8).t()          # not contiguous
    dist.all_reduce(odd)
    exact["allreduce non-contiguous"] = bool(torch.equal(odd, sum(data(r, 64, torch.float32, 9)
                                                                  for r in range(n)).reshape(8, 8).t()))
    for name, make in [("float32", lambda r: data(r, 999, torch.float32, 10)),
                       ("bfloat16", lambda r: data(r, 33, torch.bfloat16, 11)),
                       ("bool", lambda r: data(r, 5, torch.float32, 12) > 0),
                       ("large", lambda r: data(r, 700_001, torch.float32, 13))]:
        t = make(rank) if rank == 1 else torch.zeros_like(make(1))
        dist.broadcast(t, src=1)
        exact[f"broadcast {name}"] = bool(torch.equal(t, make(1)))
    mine = data(rank, 5000, torch.int32, 14)
    outs = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(outs, mine)
    exact["allgather"] = all(torch.equal(outs[r], data(r, 5000, torch.int32, 14)) for r in range(n))
    flat = torch.empty(n * 5000, dtype=torch.int32)
    dist.all_gather_into_tensor(flat, mine)
    exact["all_gather_into_tensor"] = bool(torch.equal(flat, torch.cat(outs)))
    work = dist.all_reduce(torch.ones(10), async_op=True)
    exact["async work"] = work.wait() and bool(torch.equal(work.get_future().value()[0], torch.full((10,), 3.0)))
    dist.barrier()
    return exact


def _unsupported(dist, torch) -> list[str]:
    out = []
    for call in (lambda: dist.reduce(torch.ones(4), dst=0),
                 lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.MAX),
                 lambda: dist.all_to_all_single(torch.ones(3), torch.ones(3))):
        try:
            call()
            out.append("no error")
        except NotImplementedError as exc:
            out.append(str(exc))
    return out


def _gloo_vs_mrc(dist, torch, rank: int) -> dict:
    """float32 allreduce of the same random data on a gloo group and on mrc; DDP on both."""
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    gloo = dist.new_group(backend="gloo")
    x = torch.randn(1 << 18, generator=torch.Generator().manual_seed(rank)) * 10
    by_gloo, by_mrc, mag = x.clone(), x.clone(), x.abs()
    dist.all_reduce(by_gloo, group=gloo)
    dist.all_reduce(by_mrc)
    dist.all_reduce(mag)
    diff = (by_gloo - by_mrc).abs()
    res = {"f32_rel_diff": float((diff / mag).max()), "f32_not_bit_identical": float((diff > 0).float().mean())}
    models = {}
    for name, group in (("gloo", gloo), ("mrc", None)):
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4)), process_group=group)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(5):
            inp, target = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            opt.zero_grad()
            nn.functional.mse_loss(model(inp), target).backward()
            opt.step()
        models[name] = [p.detach().clone() for p in model.parameters()]
    res["ddp_max_abs_diff"] = max(float((a - b).abs().max()) for a, b in zip(models["gloo"], models["mrc"]))
    res["ddp_steps"] = 5
    return res


def _timing(dist, torch) -> float:
    t = torch.ones(1 << 18)                   # 1 MiB of float32
    times = []
    for _ in range(7):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def _main(scenario: str) -> None:
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    registered = "mrc" in dist.Backend.backend_list
    if not registered:
        from agents.torch_mrc import register
        register()
    dist.init_process_group("mrc", timeout=timedelta(seconds=30))
    rank, n = dist.get_rank(), dist.get_world_size()
    if scenario == "crash":
        t = torch.ones(1 << 18)
        dist.all_reduce(t)
        if rank == 1:
            os._exit(0)                       # no shutdown, no linger: a crashed rank
        try:
            dist.all_reduce(t)
            res = {"error_type": None, "error": "the allreduce succeeded"}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            res = {"error_type": type(exc).__name__, "runtime_error": isinstance(exc, RuntimeError),
                   "error": str(exc)}
        print(json.dumps(res), flush=True)
        os._exit(0)                           # its peer is gone: the linger has no one to wait for
    res = {"registered_on_import": registered, "exact": _exact_checks(dist, torch, rank, n),
           "unsupported": _unsupported(dist, torch)}
    res.update(_gloo_vs_mrc(dist, torch, rank))
    res["allreduce_1MiB_ms"] = _timing(dist, torch)
    engine = dist.distributed_c10d._get_default_group()._engine
    t0 = time.monotonic()
    dist.destroy_process_group()
    res["shutdown_s"], res["closed_by_destroy"] = time.monotonic() - t0, engine.closed
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1])
