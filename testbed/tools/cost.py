"""What one emulated packet costs: CPU per delivered data packet of a finished run, and a
sampling profile of the agents' processes attributed per category.

``packet_cost(transport_dir)`` reads a transport's run records (``sched.jsonl``: each agent
process's ``/proc/PID/schedstat``; ``cpu.jsonl``: the machine's busy fraction every 100 ms;
``samples.jsonl``: the agents' flow counters) and returns the CPU the agents' processes and
the whole machine (agents, kernel forwarding, runner) spent per delivered data packet.

``Profiler`` attaches py-spy (PyPI ``py-spy``: samples native and Python frames from outside,
no instrumentation) to every agent process whose command line names a given path, and
``categorize`` splits its collapsed stacks into syscalls, event loop, timers, protocol
logic, samples/logging, buffers and the rest (:data:`CATEGORIES`).
"""
from __future__ import annotations

import collections
import os
import shutil
import subprocess
import threading
from pathlib import Path

from testbed.rundir.read import iter_jsonl

PAYLOAD_BYTES = 4096
"""Data bytes per packet of mrc and rc (``agents.mrc``: MRC's default payload, as RoCE's 4 KiB
MTU); tcp's bytes are counted in packets of this size, for comparison only."""


def packet_cost(transport_dir: Path) -> dict:
    """CPU per delivered data packet over a transport's whole run (connect to exit).

    Returns ``{"data_packets", "agent_cpu_s", "machine_cpu_s", "seconds", "agent_us_per_packet",
    "machine_us_per_packet", "packets_per_s"}``: ``data_packets`` the data packets every
    requester sent minus those it declared lost (mrc, rc: the per-EV ``sent``/``lost``
    counters of each rank's last sample; tcp: received bytes / :data:`PAYLOAD_BYTES`);
    ``agent_cpu_s`` the run time (user + system, schedstat) of the distinct agent processes,
    last record minus first; ``machine_cpu_s`` the busy fraction x cores integrated over the
    same span (each record's fraction covers the time since the previous one). Raises ValueError when a record file is missing or empty."""
    d = Path(transport_dir)
    last: dict[int, dict] = {}
    for rec in iter_jsonl(d / "samples.jsonl"):
        last[rec["rank"]] = rec
    packets, rx_bytes = 0, 0
    for rec in last.values():
        for f in rec.get("flows", []):
            if f.get("dir") == "tx":
                packets += sum(ev["sent"] - ev["lost"] for ev in f.get("evs") or [])
            elif f.get("dir") == "rx":
                rx_bytes += f.get("bytes", 0)
    if packets == 0:
        packets = rx_bytes // PAYLOAD_BYTES
    sched = list(iter_jsonl(d / "sched.jsonl"))
    if len(sched) < 2 or packets == 0:
        raise ValueError(f"{d}: no agent CPU records or no delivered packets")
    # the ranks of one host runtime carry its process's figures (read once per record): count
    # each process once
    first = {r: v for r, v in sched[0]["ranks"].items()}
    end = sched[-1]["ranks"]
    seen, agent_ns = set(), 0
    for rank, v0 in first.items():
        if rank in end and tuple(v0) not in seen:
            seen.add(tuple(v0))
            agent_ns += end[rank][0] - v0[0]
    t0, t1 = sched[0]["t"], sched[-1]["t"]
    machine, prev = 0.0, None
    for rec in iter_jsonl(d / "cpu.jsonl"):   # a record's fraction is of the time since the previous one
        if prev is not None:
            overlap = min(rec["t"], t1) - max(prev, t0)
            if overlap > 0:
                machine += rec["busy_fraction"] * len(rec["cores"]) * overlap
        prev = rec["t"]
    agent_s = agent_ns / 1e9
    return {"data_packets": packets, "agent_cpu_s": agent_s, "machine_cpu_s": machine, "seconds": t1 - t0,
            "agent_us_per_packet": agent_s / packets * 1e6, "machine_us_per_packet": machine / packets * 1e6,
            "packets_per_s": packets / (t1 - t0) if t1 > t0 else None}


CATEGORIES = ("syscalls", "event loop", "timers", "protocol", "samples and logging", "buffers",
              "collective", "other")
"""Where a profile sample's busy time goes (:func:`categorize`); samples waiting in
``epoll_wait`` or asleep (the receive hold) are counted apart as ``waiting`` (py-spy's
``--native`` mode records them)."""

# libc entry points of system calls and the vDSO: a native leaf frame "name (libc.so.6)"
_SYSCALLS = frozenset({"send", "sendto", "sendmsg", "sendmmsg", "recv", "recvfrom", "recvmsg", "recvmmsg",
                       "write", "read", "__write", "__read", "setns", "clock_gettime", "__clock_gettime",
                       "epoll_ctl", "close", "ioctl", "fstat", "openat"})
_WAITS = frozenset({"epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "poll", "ppoll", "pselect", "clock_nanosleep",
                    "nanosleep", "__clock_nanosleep"})

# (category, substrings of a collapsed-stack frame "function (file:line)"), tried from the leaf
# frame up: the first frame that matches any rule decides the sample
_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("timers", ("call_at (", "call_later (", "run_due (", "TimerHandle", "heappush", "heappop",
                "agents/mrc/rto.py", "Endpoint._arm", "Endpoint._on_timer (", "get_timer (",
                # the native engine (agents/mrc/core): its timer entry points and deadline heap
                "mrcn_ep_on_timer", "mrcn_ep_next_deadline", "mrcn_qp_handle_timer", "mrcn_qp_get_timer",
                "mrcn_rtt", "NativeEndpoint._rearm", "NativeEndpoint._on_timer")),
    ("samples and logging", ("_sample (", "logging/", "json/", "flow_stats", "progress", "sample_")),
    ("buffers", ("numpy", "agents/collectives/data.py")),
    ("collective", ("agents/collectives/",)),
    # the native endpoint's own work (recvmmsg/sendmmsg batching, QPN demultiplexing) is the
    # event loop's job done in C; the rest of mrcn_* (and ISA-L's CRC) is the protocol
    ("event loop", ("mrcn_ep_", "mrcn_endpoint.c")),
    ("protocol", ("agents/mrc/", "agents/channels/", "mrcn_", "_core.pyx", "crc32_gzip_refl")),
    ("event loop", ("agents/net/", "agents/runtime.py", "selectors.py", "agents/agent.py")),
)


def categorize(collapsed: str) -> dict[str, int]:
    """Samples per :data:`CATEGORIES` entry, plus ``waiting``, of py-spy's ``--format raw``
    output (one ``frame;frame;...;leaf COUNT`` line per distinct stack, root first; a frame is
    ``function (file:line)`` or, native, ``function (library)``)."""
    out: collections.Counter = collections.Counter({c: 0 for c in (*CATEGORIES, "waiting")})
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        out[_category(stack.split(";"))] += int(count)
    return dict(out)


def _category(frames: list[str]) -> str:
    leaf = frames[-1]
    name, _, where = leaf.partition(" (")
    if where.startswith(("libc", "[vdso]")) or leaf.startswith("0x") and "[vdso]" in leaf:
        if name in _WAITS:
            return "waiting"
        if name in _SYSCALLS or "[vdso]" in leaf:
            return "syscalls"
    for frame in reversed(frames):
        for cat, keys in _RULES:
            if any(k in frame for k in keys):
                return cat
    return "other"


class Profiler:
    """py-spy ``record`` on every process whose command line contains ``marker`` and runs
    ``-m agents`` (checked every 0.2 s while active), raw collapsed stacks into ``out_dir``.

    Use as a context manager around a run; on exit it waits for the recorders (each stops
    when its process exits) and :meth:`categories` sums the files. Raises FileNotFoundError
    if py-spy is not installed (``pip install py-spy``)."""

    def __init__(self, marker: str, out_dir: Path, rate_hz: int = 100):
        exe = shutil.which("py-spy") or str(Path(os.sys.executable).with_name("py-spy"))
        if not Path(exe).exists():
            raise FileNotFoundError("py-spy not found (pip install py-spy)")
        self.exe, self.marker, self.out_dir, self.rate = exe, marker, Path(out_dir), rate_hz
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._procs: dict[int, subprocess.Popen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Profiler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for p in self._procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            for pid in self._agent_pids():
                if pid not in self._procs:
                    self._procs[pid] = subprocess.Popen(
                        [self.exe, "record", "--pid", str(pid), "--rate", str(self.rate),
                         "--native", "--format", "raw", "--output", str(self.out_dir / f"agents-{pid}.txt")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _agent_pids(self) -> list[int]:
        pids = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"agents" in argv and b"-m" in argv and any(self.marker.encode() in a for a in argv):
                pids.append(int(entry.name))
        return pids

    def categories(self) -> dict[str, int]:
        """Samples per category over every recorded process."""
        total: collections.Counter = collections.Counter({c: 0 for c in (*CATEGORIES, "waiting")})
        for f in self.out_dir.glob("agents-*.txt"):
            total.update(categorize(f.read_text()))
        return dict(total)
