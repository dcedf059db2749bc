"""Cleanup ledger: every process, namespace and interface the testbed creates, per run.

A ledger is a JSON file in :data:`LEDGER_DIR` (tmpfs: it lives exactly as long
as the namespaces it describes). ``testbed clean`` removes what a crashed run
left, from its ledger only: processes by PID *and* start time (a recycled PID
is never killed), interfaces and named namespaces by recorded name. Nothing is
ever matched by name pattern. The ledger directory is 0700 and every ledger 0600: it names
PIDs that ``testbed clean`` kills, so no other local user may read or plant one.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

LEDGER_DIR = Path(os.environ.get("MRC_TESTBED_LEDGER_DIR", "/run/mrc-testbed/ledger"))
DIR_MODE = 0o700
FILE_MODE = 0o600


def proc_starttime(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (/proc/PID/stat field 22), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


def pid_alive(pid: int, starttime: int | None) -> bool:
    """True if ``pid`` runs and is the same process that was recorded; a zombie (exited, not
    yet reaped by its parent) holds nothing and cannot be killed: not alive."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0] not in ("Z", "X") and (starttime is None or int(fields[19]) == starttime)


@dataclass
class Ledger:
    """What one run created. Writes through to its file on every change."""

    run_id: str
    path: Path
    owner_pid: int = field(default_factory=os.getpid)
    processes: list[dict] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)  # root-namespace interfaces
    netns: list[str] = field(default_factory=list)       # named namespaces (ip netns)
    label: str = ""

    @classmethod
    def create(cls, label: str, directory: Path = LEDGER_DIR) -> "Ledger":
        directory.mkdir(DIR_MODE, parents=True, exist_ok=True)
        if directory.stat().st_uid == os.geteuid():
            os.chmod(directory, DIR_MODE)   # also a directory made before ledgers were private
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        ledger = cls(run_id, directory / f"{run_id}.json", label=label)
        ledger.save()
        return ledger

    @classmethod
    def load(cls, path: Path) -> "Ledger":
        data = json.loads(path.read_text())
        return cls(data["run_id"], path, data["owner_pid"], data["processes"],
                   data["interfaces"], data["netns"], data.get("label", ""))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"run_id": self.run_id, "owner_pid": self.owner_pid,
                                "owner_starttime": proc_starttime(self.owner_pid),
                                "label": self.label, "processes": self.processes,
                                "interfaces": self.interfaces, "netns": self.netns}, indent=1))
        os.replace(tmp, self.path)

    def add_processes(self, entries: list[tuple[int, str, str]]) -> None:
        """Record (pid, node, role) triples, e.g. a node's shell or an agent."""
        for pid, node, role in entries:
            self.processes.append({"pid": pid, "starttime": proc_starttime(pid), "node": node, "role": role})
        self.save()

    def owner_alive(self) -> bool:
        data = json.loads(self.path.read_text())
        return pid_alive(data["owner_pid"], data.get("owner_starttime"))

    def kill_processes(self, timeout_s: float = 5.0) -> list[int]:
        """SIGKILL every recorded process that is still the recorded one; wait for them.

        Returns the PIDs killed. Children we spawned are reaped by their Popen
        owners; here we only wait for /proc to show them gone (or zombie).
        """
        killed = []
        for entry in self.processes:
            pid = entry["pid"]
            if pid_alive(pid, entry["starttime"]):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        for pid in killed:
            while time.monotonic() < deadline and _running(pid):
                time.sleep(0.005)
        return killed

    def remove_resources(self) -> None:
        for ifname in self.interfaces:
            subprocess.run(["ip", "link", "del", "dev", ifname], capture_output=True)
        for name in self.netns:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def ledgers(directory: Path = LEDGER_DIR) -> list[Ledger]:
    if not directory.is_dir():
        return []
    return [Ledger.load(p) for p in sorted(directory.glob("*.json"))]


def clean(*, include_live: bool = False, directory: Path = LEDGER_DIR) -> list[tuple[str, int]]:
    """Remove what every orphaned ledger recorded; returns [(run_id, processes killed)].

    A ledger whose owner process still runs is skipped unless ``include_live``.
    """
    done = []
    for ledger in ledgers(directory):
        if ledger.owner_alive() and not include_live:
            log.info("skipping %s: its owner (pid %d) still runs", ledger.run_id, ledger.owner_pid)
            continue
        killed = ledger.kill_processes()
        ledger.remove_resources()
        ledger.discard()
        done.append((ledger.run_id, len(killed)))
    return done
