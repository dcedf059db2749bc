"""The report pipe of a command job, sans-I/O: bytes in, step reports and relayed messages out.

The command (its ``testbed_job.step()`` calls, :mod:`agents.jobs.lib.testbed_job`) and the
``mrc`` backend inside it (:mod:`agents.torch_mrc`) write JSON lines to one pipe:

* ``{"type": "step", "step", "t_start", "t_end", "seconds", ...user fields}``: a training step;
* ``{"type": "event", ...}``: an :class:`agents.protocol.Event` of the mrc backend (EV
  transitions, QP errors), relayed to the runner as the agents' own;
* ``{"type": "backend", "name": "mrc", "rank"}``: the backend was created in this process (the
  launcher of an ``mrc`` run checks that the job really ran on it).

A line that is none of these (not JSON, a step without its fields) is counted in
:attr:`ReportReader.bad` with the first such problem kept, never fatal: the user's job goes on.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from agents.protocol import ControlProtocolError, Event, decode

MAX_LINE_BYTES = 4096
"""Longest report line, bytes (a longer one is cut off and counted bad)."""
STEP_KEYS = ("step", "t_start", "t_end", "seconds")


@dataclass(frozen=True)
class StepReport:
    """One training step: ``step`` index, wall-clock ``t_start``/``t_end`` and ``seconds``, and the
    script's own ``fields`` (e.g. ``{"loss": 0.42}``)."""

    step: int
    t_start: float
    t_end: float
    seconds: float
    fields: dict

    def record(self) -> dict:
        """The ``steps-rank<r>.jsonl`` line of this report."""
        return {"step": self.step, "t_start": self.t_start, "t_end": self.t_end, "seconds": self.seconds,
                **self.fields}


@dataclass(frozen=True)
class BackendSeen:
    """The ``mrc`` backend was created in the command's process."""

    name: str


class ReportReader:
    """Feed the pipe's bytes (:meth:`feed`); get :class:`StepReport`, :class:`agents.protocol.Event`
    and :class:`BackendSeen` items in order."""

    def __init__(self) -> None:
        self._buf = b""
        self.bad = 0
        self.first_bad: str | None = None

    def _reject(self, why: str) -> None:
        self.bad += 1
        if self.first_bad is None:
            self.first_bad = why

    def feed(self, data: bytes) -> list:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > MAX_LINE_BYTES:
            self._reject(f"a line of over {MAX_LINE_BYTES} bytes")
            self._buf = b""
        out = []
        for line in lines:
            if line.strip():
                item = self._parse(line)
                if item is not None:
                    out.append(item)
        return out

    def _parse(self, line: bytes):
        try:
            obj = json.loads(line)
        except ValueError:
            self._reject(f"not JSON: {line[:80]!r}")
            return None
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "step":
            vals = [obj.get(k) for k in STEP_KEYS]
            if not isinstance(vals[0], int) or isinstance(vals[0], bool) or vals[0] < 0 or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals[1:]):
                self._reject(f"a step report without integer step and finite times: {line[:80]!r}")
                return None
            extra = {k: v for k, v in obj.items() if k not in STEP_KEYS and k != "type"}
            return StepReport(vals[0], float(vals[1]), float(vals[2]), float(vals[3]), extra)
        if kind == "event":
            try:
                msg = decode(obj, (Event,))
            except (ControlProtocolError, ValueError) as exc:
                self._reject(f"a bad event: {exc}")
                return None
            return msg
        if kind == "backend" and isinstance(obj.get("name"), str):
            return BackendSeen(obj["name"])
        self._reject(f"unknown report type {kind!r}")
        return None
