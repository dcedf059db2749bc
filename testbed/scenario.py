"""The scenario runner: one fresh fabric per transport, agents on every host, a fault timeline.

For each transport of the scenario, in order and with the same seed:

1. build the fabric (:class:`testbed.fabric.Fabric`) and probe the ring's paths;
2. listen on a Unix control socket in the run directory and start one agent
   (``python -m agents --job rank<r>.json``) in each ring host's namespace;
3. when every rank is ``ready``, send ``start`` (the barrier; time zero of the
   timeline) and play the timeline (:mod:`testbed.timeline`): link state through
   the fabric, loss / blackhole / rate through :mod:`testbed.faults`, routing
   reconvergence after ``reconverge_after``; every change is journaled in
   ``events.jsonl`` with its wall-clock time;
4. meanwhile record agent samples, iterations and EV events, kernel link counters
   (:mod:`testbed.counters`, every :data:`LINK_SAMPLE_S`) and host CPU use
   (``/proc/stat``), and show live progress;
5. stop when every rank is done, one fails, an agent dies, the scenario timeout
   passes or the user interrupts; then revert every fault still applied, stop the
   agents and tear the fabric down, keeping everything gathered.

Run directory (DESIGN.md "Scenario run directory"): ``manifest.json`` (versions,
kernel, seed, topology hash, resolved spec, per-transport status) and per transport
``<transport>/{events,samples,links,cpu}.jsonl``, ``jobs/``, ``agents/rank<r>.log``;
:func:`testbed.report.render` adds summary.json, CSV files and plots.

Outcomes per transport (``status``): ``done`` (every rank finished), ``failed`` (an
agent reported a failure, e.g. a QP in ERR: the job would crash), ``timeout``,
``crashed`` (an agent exited without a report), ``error`` (the testbed failed, e.g.
a fault could not be applied), ``interrupted``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from . import __version__
from .counters import LinkCounters
from .fabric import Fabric
from .faults import LinkFaults
from .jobs import build_jobs, host_bandwidth_bps, host_link_rate_bps, write_jobs
from .kernel import features
from .metrics import bandwidths
from .spec import Scenario
from .timeline import Step, Timeline, sweep_warmups

log = logging.getLogger(__name__)

LINK_SAMPLE_S = 0.100       # kernel link counters and CPU, s (metrics.LINK_BIN_S)
PROGRESS_S = 0.25           # live display refresh, s
STOP_GRACE_S = 3.0          # agents get this long to exit after "stop", s
SUN_PATH_MAX = 107          # sockaddr_un.sun_path without the NUL (unix(7))
OUTCOMES = ("done", "failed", "timeout", "crashed", "error", "interrupted")


class RunnerError(RuntimeError):
    """The testbed (not the transport under test) failed during a run."""


# -- helpers ---------------------------------------------------------------------
class JsonlWriter:
    """Append-only JSONL file, flushed by :meth:`flush` (the runner flushes every tick)."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "a", buffering=1 << 16)

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(record, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class CpuSampler:
    """Host CPU busy fraction from ``/proc/stat`` deltas (proc(5)): busy = 1 - (idle + iowait) / total,
    over all cores, and per core."""

    def __init__(self):
        self._last = self._read()

    @staticmethod
    def _read() -> list[list[int]]:
        with open("/proc/stat") as f:
            return [list(map(int, line.split()[1:9])) for line in f if line.startswith("cpu")]

    def sample(self) -> dict:
        now = self._read()
        fracs = []
        for a, b in zip(self._last, now):
            total = sum(b) - sum(a)
            idle = (b[3] + b[4]) - (a[3] + a[4])
            fracs.append(round(1.0 - idle / total, 4) if total > 0 else 0.0)
        self._last = now
        return {"t": time.time(), "busy_fraction": fracs[0], "cores": fracs[1:]}


class ControlServer:
    """The runner's end of the agents' control channel (:mod:`agents.control`): a Unix stream
    listener; newline-delimited JSON both ways. Ranks are learned from their messages."""

    def __init__(self, path: str):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(256)
        self.listener.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.buffers: dict[socket.socket, bytearray] = {}
        self.by_rank: dict[int, socket.socket] = {}

    def poll(self, timeout_s: float) -> list[dict]:
        """Messages that arrive within ``timeout_s`` (after the first readiness, no waiting)."""
        out: list[dict] = []
        for key, _ in self.sel.select(max(timeout_s, 0.0)):
            if key.fileobj is self.listener:
                try:
                    conn, _ = self.listener.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                self.buffers[conn] = bytearray()
                self.sel.register(conn, selectors.EVENT_READ)
                continue
            self._read(key.fileobj, out)
        return out

    def _read(self, conn: socket.socket, out: list[dict]) -> None:
        buf = self.buffers[conn]
        try:
            data = conn.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        buf += data
        *lines, rest = bytes(buf).split(b"\n")
        self.buffers[conn] = bytearray(rest)
        for line in lines:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                log.warning("control: bad line %r", line[:80])
                continue
            if isinstance(msg, dict) and isinstance(msg.get("rank"), int):
                self.by_rank.setdefault(msg["rank"], conn)
                out.append(msg)

    def _drop(self, conn: socket.socket) -> None:
        self.sel.unregister(conn)
        self.buffers.pop(conn, None)
        for r in [r for r, c in self.by_rank.items() if c is conn]:
            del self.by_rank[r]
        conn.close()

    def send(self, rank: int, msg: dict) -> bool:
        conn = self.by_rank.get(rank)
        if conn is None:
            return False
        try:
            conn.setblocking(True)
            conn.settimeout(1.0)
            conn.sendall(json.dumps(msg).encode() + b"\n")
            conn.setblocking(False)
            return True
        except OSError:
            return False

    def broadcast(self, msg: dict) -> None:
        for rank in list(self.by_rank):
            self.send(rank, msg)

    def close(self) -> None:
        for conn in list(self.buffers):
            self._drop(conn)
        self.sel.close()
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def control_socket_path(directory: Path, transport: str) -> str:
    """``directory/control.sock``, or a short path under /run when that exceeds sun_path."""
    path = str((directory / "control.sock").resolve())
    if len(path.encode()) <= SUN_PATH_MAX:
        return path
    short = Path("/run/mrc-testbed") / f"ctl-{os.getpid()}-{transport}.sock"
    short.parent.mkdir(parents=True, exist_ok=True)
    return str(short)


def _versions() -> dict:
    out = {"testbed": __version__, "python": platform.python_version(), "kernel": platform.release()}
    for mod in ("pyroute2", "numpy", "rich", "yaml"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except ImportError:
            pass
    return out


def new_run_dir(scenario: Scenario, runs_root: Path) -> Path:
    """``runs_root/<scenario>-<YYYYmmdd-HHMMSS>`` (a ``-N`` suffix if it exists), created."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(runs_root) / f"{scenario.name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def write_manifest(run_dir: Path, manifest: dict) -> None:
    tmp = run_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, default=str))
    tmp.replace(run_dir / "manifest.json")


def base_manifest(scenario: Scenario) -> dict:
    topo_bytes = Path(scenario.topology_path).read_bytes() if Path(scenario.topology_path).is_file() else b""
    hosts = scenario.workload.hosts
    return {
        "scenario": scenario.to_dict(), "transports": [], "planned_transports": list(scenario.transports),
        "world_size": len(hosts), "host_link_rate_bps": host_link_rate_bps(scenario),
        "host_bandwidth_bps": host_bandwidth_bps(scenario),
        "host_nics": min(len(scenario.topology.nics[h]) for h in hosts), "seed": scenario.seed,
        "workload": scenario.to_dict()["workload"],
        "topology_sha256": hashlib.sha256(topo_bytes).hexdigest(),
        "versions": _versions(), "kernel_features": dataclasses.asdict(features()), "started_at": time.time(), "status": {}, "argv": sys.argv,
    }


# -- progress ----------------------------------------------------------------------
@dataclass
class Progress:
    """What the live display shows for one transport."""
    transport: str
    world: int
    measured_total: int
    sizes: list[int]
    status: str = "building"
    t_launch: float = field(default_factory=time.monotonic)
    t_start: float | None = None
    measured_done: dict[int, int] = field(default_factory=dict)   # rank -> measured iterations done
    per_iter: dict[tuple, list[float]] = field(default_factory=dict)
    last_busbw_mbit: float | None = None
    faults: int = 0
    wrong: int = 0

    def iteration(self, msg: dict) -> None:
        self.wrong += int(msg.get("wrong") or 0)
        if msg.get("warmup"):
            return
        rank = msg["rank"]
        self.measured_done[rank] = self.measured_done.get(rank, 0) + 1
        key = (msg["size"], msg["iter"])
        secs = self.per_iter.setdefault(key, [])
        secs.append(float(msg["seconds"]))
        if len(secs) == self.world:       # slowest rank, as metrics does (nccl-tests -a 3)
            self.last_busbw_mbit = bandwidths(msg["size"], max(secs), self.world)["busbw_mbit_per_s"]
            del self.per_iter[key]

    def row(self) -> list[str]:
        now = time.monotonic()
        elapsed = f"{now - self.t_launch:5.1f}s"
        if self.t_start is not None:
            elapsed += f" (run {now - self.t_start:.1f}s)"
        done = min(self.measured_done.values()) if len(self.measured_done) == self.world else 0
        busbw = "-" if self.last_busbw_mbit is None else f"{self.last_busbw_mbit:.2f}"
        wrong = f"[red]{self.wrong}[/]" if self.wrong else "0"
        return [self.transport, self.status, elapsed, f"{done}/{self.measured_total}", busbw,
                str(self.faults), wrong]


def progress_table(rows: list[Progress]) -> Table:
    table = Table(title="scenario run", expand=False)
    for col, justify in (("transport", "left"), ("status", "left"), ("elapsed", "right"),
                         ("iterations", "right"), ("busbw Mbit/s", "right"), ("faults", "right"),
                         ("#wrong", "right")):
        table.add_column(col, justify=justify)
    for p in rows:
        table.add_row(*p.row())
    return table


# -- one transport -------------------------------------------------------------------
class TransportRun:
    """One transport of a scenario on a fresh fabric; :meth:`run` returns the outcome."""

    def __init__(self, scenario: Scenario, transport: str, run_dir: Path, console: Console,
                 progress: Progress, refresh, *, python: str = sys.executable,
                 qp_overrides: dict | None = None):
        self.scenario, self.transport, self.console = scenario, transport, console
        self.dir = run_dir / transport
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "agents").mkdir(exist_ok=True)
        self.progress, self.refresh = progress, refresh
        self.python, self.qp_overrides = python, qp_overrides
        self.world = list(scenario.workload.hosts)
        self.events = JsonlWriter(self.dir / "events.jsonl")
        self.samples = JsonlWriter(self.dir / "samples.jsonl")
        self.links = JsonlWriter(self.dir / "links.jsonl")
        self.cpu = JsonlWriter(self.dir / "cpu.jsonl")
        wl = scenario.workload
        self.timeline = Timeline(scenario.timeline, sweep_warmups(len(wl.sizes_bytes), wl.iterations, wl.warmup),
                                 reconverge_after_s=scenario.reconverge_after_s)
        self.fabric: Fabric | None = None
        self.faults = None
        self.server: ControlServer | None = None
        self.procs: dict[int, object] = {}
        self.logs: list = []
        self.ready: set[int] = set()
        self.done: set[int] = set()
        self.failed: dict[int, str] = {}
        self.started = False
        self.status: str | None = None
        self.reason = ""
        self._t_wall_start: float | None = None

    def journal(self, record: dict) -> None:
        self.events.write({"t": time.time(), **record})

    def say(self, text: str) -> None:
        t = "" if self._t_wall_start is None else f"{time.time() - self._t_wall_start:7.3f}s "
        self.console.print(f"  {self.transport:>4} {t}{text}", highlight=False)

    # -- lifecycle ---------------------------------------------------------------------
    def run(self) -> str:
        try:
            self._bring_up()
            self._start_agents()
            self._loop()
        except KeyboardInterrupt:
            self.status, self.reason = "interrupted", "interrupted by the user"
            raise
        except Exception as exc:  # noqa: BLE001 - any testbed failure ends this transport, keeps data
            log.debug("transport %s", self.transport, exc_info=True)
            self.status, self.reason = "error", f"{type(exc).__name__}: {exc}"
        finally:
            self._finish()
        return self.status

    def _bring_up(self) -> None:
        from .verify import probe
        self.progress.status = "building"
        self.refresh()
        self.fabric = Fabric(self.scenario.topology, have_netem=features().netem)
        self.fabric.start()
        self.journal({"kind": "fabric", "phase": "up", "timings": self.fabric.timings})
        n = len(self.world)
        pairs = {(self.world[r], self.world[(r + 1) % n]) for r in range(n)}
        pairs |= {(b, a) for a, b in pairs}
        reach = probe(self.fabric, sorted(pairs), srv6=self.transport == "mrc")
        if reach.lost:
            raise RunnerError(f"fabric check: {len(reach.lost)} ring paths unreachable before the run "
                              f"(e.g. {sorted(reach.lost)[0]})")
        self.faults = LinkFaults(self.fabric)
        self.counters = LinkCounters(self.fabric)

    def _start_agents(self) -> None:
        self.progress.status = "starting agents"
        self.refresh()
        sock = control_socket_path(self.dir, self.transport)
        self.server = ControlServer(sock)
        run_id = f"{self.dir.parent.name}/{self.transport}"
        jobs = build_jobs(self.scenario, self.transport, run_id=run_id, control_socket=sock,
                          qp_overrides=self.qp_overrides)
        paths = write_jobs(jobs, self.dir / "jobs")
        repo = Path(__file__).resolve().parents[1]
        env = {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        for job, path in zip(jobs, paths):
            logf = open(self.dir / "agents" / f"rank{job['rank']}.log", "wb")
            self.logs.append(logf)
            self.procs[job["rank"]] = self.fabric.popen(
                job["host"], [self.python, "-m", "agents", "--job", str(path.resolve())],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(repo), env=env)
        self.journal({"kind": "agents", "phase": "spawned", "pids": {r: p.pid for r, p in self.procs.items()}})

    def _loop(self) -> None:
        cpu = CpuSampler()
        n = len(self.world)
        t0 = time.monotonic()
        deadline = t0 + self.scenario.timeout_s
        next_tick = t0
        self.progress.status = "connecting"
        while True:
            now = time.monotonic()
            if now >= deadline:
                self.status = "timeout"
                self.reason = f"not done within the scenario timeout ({self.scenario.timeout_s:g} s)"
                return
            for step in self.timeline.due(now):
                self._apply(step)
            if now >= next_tick:
                next_tick = max(next_tick + LINK_SAMPLE_S, now)
                if self.started:
                    self._sample_links()
                    self.cpu.write(cpu.sample())
                else:
                    cpu.sample()
                self._check_processes()
                for w in (self.events, self.samples, self.links, self.cpu):
                    w.flush()
                self.refresh()
                if self.status:
                    return
            wake = min(next_tick, deadline, self.timeline.next_time() or deadline)
            for msg in self.server.poll(wake - time.monotonic()):
                self._on_message(msg)
            if len(self.done) == n:
                self.status = "done"
                return
            if self.failed:
                rank, reason = next(iter(self.failed.items()))
                self.status, self.reason = "failed", f"rank {rank} ({self.world[rank]}): {reason}"
                return
            if self.status:
                return

    def _on_message(self, msg: dict) -> None:
        kind, rank = msg.get("type"), msg["rank"]
        if kind == "sample":
            self.samples.write({"t": msg["t"], "rank": rank, "flows": msg.get("flows", [])})
        elif kind == "iteration":
            rec = {k: v for k, v in msg.items() if k != "type"}
            self.events.write({"t": msg["t_end"], "kind": "iteration", **rec})
            self.progress.iteration(msg)
            self.timeline.iteration_done(int(msg["seq"]), time.monotonic())
        elif kind == "event":
            rec = {k: v for k, v in msg.items() if k != "type"}
            self.events.write(rec)
            if rec.get("kind") == "qp_error":
                self.say(f"[red]QP error[/] rank {rank}: {escape(str(rec.get('reason')))}")
        elif kind == "ready":
            self.ready.add(rank)
            self.journal({"kind": "agent", "rank": rank, "status": "ready"})
            if len(self.ready) == len(self.world) and not self.started:
                self._start()
        elif kind == "done":
            self.done.add(rank)
            self.journal({"kind": "agent", "rank": rank, "status": "done", "summary": msg.get("summary")})
        elif kind == "failed":
            self.failed[rank] = str(msg.get("reason"))
            self.journal({"kind": "agent", "rank": rank, "status": "failed", "reason": msg.get("reason")})
        else:
            log.warning("rank %d: unknown control message %r", rank, kind)

    def _start(self) -> None:
        self.started = True
        self._t_wall_start = time.time()
        self.journal({"kind": "run", "phase": "start", "transport": self.transport, "world": self.world})
        self.server.broadcast({"type": "start"})
        self.timeline.start(time.monotonic())
        self.progress.t_start = time.monotonic()
        self.progress.status = "running"
        self.say("all ranks ready: start")

    def _sample_links(self) -> None:
        t = time.time()
        for rec in self.counters.read():
            self.links.write({"t": t, **rec})

    def _check_processes(self) -> None:
        for rank, proc in self.procs.items():
            code = proc.poll()
            if code is not None and rank not in self.done and rank not in self.failed:
                self.status = "crashed"
                self.reason = (f"rank {rank} ({self.world[rank]}) exited with status {code} without a report; "
                               f"see {self.dir / 'agents' / f'rank{rank}.log'}")
                self.journal({"kind": "agent", "rank": rank, "status": "crashed", "exit": code})
                return

    # -- faults ------------------------------------------------------------------------
    def _nft_drops(self, link: str) -> dict:
        """The nftables drop counters of ``link`` (before its rules change), {} if none."""
        try:
            return self.faults.counters().get(link, {})
        except Exception as exc:  # noqa: BLE001 - a counter read never stops a run
            log.warning("fault counters of %s: %s", link, exc)
            return {}

    def _apply(self, step: Step) -> None:
        fab, faults = self.fabric, self.faults
        extra = self._nft_drops(step.link) if step.kind in ("loss", "blackhole") and step.phase == "revert" else {}
        if step.kind == "link":
            fab.set_link(step.link, up=step.value)
            self.timeline.link_changed(time.monotonic())
        elif step.kind == "loss":
            faults.set_loss(step.link, step.value) if step.value else faults.clear_loss(step.link)
        elif step.kind == "rate":
            faults.set_rate(step.link, step.value)
        elif step.kind == "blackhole":
            faults.set_blackhole(step.link, bool(step.value))
        elif step.kind == "reconverge":
            fab.reconverge()
            self.journal({"kind": "reconverge", "links_down": sorted(fab.links_down)})
            self.say(f"routing reconverged around {', '.join(sorted(fab.links_down)) or 'no failed link'}")
            return
        self.journal({"kind": "fault", "action": step.action, "link": step.link, "phase": step.phase,
                      "step": step.kind, "value": step.value, "index": step.index, **extra})
        self.progress.faults += step.phase == "apply"
        what = {"link": "up" if step.value else "down", "loss": f"loss {step.value}%" if step.value else "loss off",
                "rate": f"rate {step.value / 1e6:g} Mbit/s" if step.value else "rate restored",
                "blackhole": "blackhole on" if step.value else "blackhole off"}[step.kind]
        self.say(f"[bold]{step.action}[/] {step.link}: {what} ({step.phase})")

    def _revert_all(self) -> None:
        """Undo every fault still applied (journaled as phase revert, action end)."""
        if self.fabric is None:
            return
        for link in sorted(self.fabric.links_down):
            try:
                self.fabric.set_link(link, up=True)
                self.journal({"kind": "fault", "action": "end", "link": link, "phase": "revert", "step": "link",
                              "value": True})
            except Exception as exc:  # noqa: BLE001 - teardown follows anyway
                log.warning("revert %s: %s", link, exc)
        if self.faults is not None:
            try:
                drops = self.faults.counters() if self.faults.active else {}
                self.faults.revert_all()
                self.journal({"kind": "fault", "action": "end", "link": None, "phase": "revert", "step": "all",
                              "nft_drops": drops})
            except Exception as exc:  # noqa: BLE001
                log.warning("revert faults: %s", exc)

    # -- the end -------------------------------------------------------------------------
    def _finish(self) -> None:
        status = self.status or "interrupted"
        try:
            if self.server is not None:
                self.server.broadcast({"type": "stop"})
                deadline = time.monotonic() + STOP_GRACE_S
                while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
                    for msg in self.server.poll(0.05):
                        try:
                            self._on_message(msg)
                        except Exception:  # noqa: BLE001 - late records are best effort
                            pass
            pending = self.timeline.pending()
            unfired = self.timeline.unfired()
            if pending or unfired:
                self.journal({"kind": "timeline", "not_reached": [vars(s) for s in pending
                                                                   if s.kind != "reconverge"],
                              "never_triggered": unfired})
            self._revert_all()
            self.journal({"kind": "run", "phase": "end", "status": status, "reason": self.reason,
                          "exit_codes": {r: p.poll() for r, p in self.procs.items()}})
        finally:
            for w in (self.events, self.samples, self.links, self.cpu):
                w.close()
            if self.server is not None:
                self.server.close()
            if self.fabric is not None:
                self.fabric.stop()
            for f in self.logs:
                f.close()
            self.progress.status = status
            self.refresh()


# -- the whole scenario ----------------------------------------------------------------
@dataclass
class RunResult:
    run_dir: Path
    status: dict[str, str]
    reasons: dict[str, str]
    interrupted: bool = False


def run_scenario(scenario: Scenario, *, runs_root: Path = Path("runs"), console: Console | None = None,
                 transports: list[str] | None = None, qp_overrides: dict | None = None,
                 live: bool = True) -> RunResult:
    """Run every transport of ``scenario`` (or ``transports``), each on a fresh fabric; write the
    run directory. Ctrl-C / SIGTERM stop the run after tearing down and keep what was gathered
    (``interrupted`` True). Raises nothing for transport outcomes (see the module docstring)."""
    console = console or Console()
    run_dir = new_run_dir(scenario, runs_root)
    manifest = base_manifest(scenario)
    write_manifest(run_dir, manifest)
    wl = scenario.workload
    rows = [Progress(t, len(wl.hosts), wl.measured_iterations, list(wl.sizes_bytes), status="waiting")
            for t in (transports or scenario.transports)]
    result = RunResult(run_dir, {}, {})
    console.print(f"run directory: {run_dir}")
    old_term = signal.signal(signal.SIGTERM, _sigterm)
    display = Live(progress_table(rows), console=console, refresh_per_second=4, transient=False,
                   auto_refresh=False) if live and console.is_terminal else None
    last = [0.0]

    def refresh(force: bool = False):
        if display is not None and (force or time.monotonic() - last[0] >= PROGRESS_S):
            last[0] = time.monotonic()
            display.update(progress_table(rows), refresh=True)

    try:
        if display is not None:
            display.start()
        for row in rows:
            t = row.transport
            manifest["transports"].append(t)
            write_manifest(run_dir, manifest)
            row.t_launch = time.monotonic()
            runner = TransportRun(scenario, t, run_dir, console, row, refresh, qp_overrides=qp_overrides)
            try:
                status = runner.run()
            except KeyboardInterrupt:
                result.interrupted = True
                status = "interrupted"
            result.status[t], result.reasons[t] = status, runner.reason
            manifest["status"][t] = {"status": status, "reason": runner.reason}
            write_manifest(run_dir, manifest)
            colour = "green" if status == "done" else "red"
            console.print(f"[{colour}]{t}: {status}[/]" + (f" - {escape(runner.reason)}" if runner.reason else ""))
            if result.interrupted:
                break
    finally:
        manifest["finished_at"] = time.time()
        write_manifest(run_dir, manifest)
        if display is not None:
            refresh(True)
            display.stop()
        signal.signal(signal.SIGTERM, old_term)
    return result


def _sigterm(signum, frame):
    raise KeyboardInterrupt
