"""The whole scenario (:func:`run_scenario`): every transport in turn, each on a fresh fabric
(:class:`testbed.run.transport.TransportRun`) with the same seed, into one run directory;
Ctrl-C and SIGTERM tear down and keep what was gathered.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from testbed.run.manifest import base_manifest
from testbed.run.progress import Display, Progress
from testbed.run.transport import TransportRun
from testbed.rundir.errors import RunDirWriteError
from testbed.rundir.write import new_run_dir, write_manifest
from testbed.spec import Scenario


@dataclass
class RunResult:
    run_dir: Path
    status: dict[str, str]
    reasons: dict[str, str]
    interrupted: bool = False
    signal: int | None = None
    """The signal that interrupted the run (SIGINT for Ctrl-C, SIGTERM), None if none did."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stop as for Ctrl-C (teardown, partial results), exit 143 not 130."""
    signum = signal.SIGTERM


def run_scenario(scenario: Scenario, *, runs_root: Path = Path("runs"), console=None,
                 transports: list[str] | None = None, qp_overrides: dict | None = None,
                 live: bool = True, fabric_factory: Callable | None = None,
                 agent_processes: int | str | None = None) -> RunResult:
    """Run every transport of ``scenario`` (or ``transports``), each on a fresh fabric; write the
    run directory. ``console``: a rich Console (default: stdout); ``live``: a live progress
    table when it is a terminal. Ctrl-C / SIGTERM stop the run after tearing down and keep
    what was gathered (``interrupted`` True). Raises nothing for transport outcomes
    (:mod:`testbed.run.transport`). ``fabric_factory``: see :class:`TransportRun`; ``agent_processes``:
    host runtimes instead of the scenario's ``agent_processes``."""
    run_dir = new_run_dir(scenario, runs_root)
    manifest = base_manifest(scenario)
    write_manifest(run_dir, manifest)
    wl = scenario.workload
    rows = [Progress(t, len(wl.hosts), wl.measured_iterations, list(wl.sizes_bytes), status="waiting",
                     collective=wl.collective)
            for t in (transports or scenario.transports)]
    result = RunResult(run_dir, {}, {})
    resolved_targets: dict = {}   # a command job's targets on Gloo's flows, for the transports after gloo-tcp
    display = Display(rows, console, live=live)
    display.note(f"run directory: {run_dir}")
    old_term = signal.signal(signal.SIGTERM, _sigterm)
    try:
        display.start()
        for row in rows:
            t = row.transport
            manifest["transports"].append(t)
            write_manifest(run_dir, manifest)
            row.t_launch = time.monotonic()
            runner = TransportRun(scenario, t, run_dir, display, row, qp_overrides=qp_overrides,
                                  fabric_factory=fabric_factory, agent_processes=agent_processes,
                                  resolved_targets=resolved_targets)
            try:
                status = runner.run()
            except (RunDirWriteError, OSError) as exc:   # the run ends; what was written stays readable
                write_error = RunDirWriteError.of(exc, run_dir)
                if write_error is None:
                    raise
                manifest["status"][t] = {"status": "error", "reason": str(write_error)}
                raise write_error from None
            except KeyboardInterrupt as exc:
                result.interrupted = True
                result.signal = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
                status = "interrupted"
            result.status[t], result.reasons[t] = status, runner.reason
            manifest["status"][t] = {"status": status, "reason": runner.reason}
            write_manifest(run_dir, manifest)
            display.outcome(t, status, runner.reason)
            if result.interrupted:
                break
    finally:
        manifest["finished_at"] = time.time()
        display.stop()
        signal.signal(signal.SIGTERM, old_term)
        write_manifest(run_dir, manifest)
    return result


def _sigterm(signum, frame):
    raise Terminated
