"""Step reports from a training script to the mrc-testbed: ``testbed_job.step(loss=...)``.

Standard library only, so that any interpreter can import it (the testbed puts this
directory on ``PYTHONPATH`` of a command job). Call :func:`step` once at the end of every
training step::

    import testbed_job
    for i in range(steps):
        ...                                  # forward, backward, optimizer step
        testbed_job.step(loss=loss.item())   # the one added line

Each call writes one JSON line ``{"type": "step", "step", "t_start", "t_end", "seconds", ...}``
(wall-clock seconds; extra keyword fields must be JSON numbers, strings or booleans) to the
file descriptor in ``TESTBED_REPORT_FD``, a pipe the rank's launcher reads
(:mod:`agents.jobs.launcher`). A step runs from the previous call (the first: from the import
of this module, so step 0 includes the script's set-up) to this one. Outside the testbed
(``TESTBED_REPORT_FD`` unset) it does nothing, so the script runs unchanged under torchrun.
"""
from __future__ import annotations

import json
import os
import time

__all__ = ["step", "enabled"]

MAX_LINE_BYTES = 4096
"""A pipe write of at most PIPE_BUF (4096 bytes on Linux) bytes is atomic: a line never
interleaves with another thread's (the mrc backend reports on the same pipe)."""

_fd = os.environ.get("TESTBED_REPORT_FD")
_fd = int(_fd) if _fd and _fd.isdigit() else None
_state = {"step": 0, "t": time.time()}


def enabled() -> bool:
    """True when running under the testbed (the launcher passed a report descriptor)."""
    return _fd is not None


def step(**fields) -> int:
    """Report that a training step ended now; ``fields`` (e.g. ``loss=0.42``) go with it.
    Returns the step's index (0, 1, ...). Raises ValueError for a field that is not a JSON
    scalar or a line over :data:`MAX_LINE_BYTES`; OSError if the testbed's pipe is gone."""
    now = time.time()
    index, t_start = _state["step"], _state["t"]
    _state["step"], _state["t"] = index + 1, now
    if _fd is None:
        return index
    for key, value in fields.items():
        if not isinstance(value, (int, float, str, bool)) or key in ("type", "step", "t_start", "t_end", "seconds"):
            raise ValueError(f"testbed_job.step: field {key!r} must be a number, string or bool and not a "
                             f"reserved name, got {type(value).__name__}")
    line = json.dumps({"type": "step", "step": index, "t_start": t_start, "t_end": now,
                       "seconds": now - t_start, **fields}, allow_nan=True).encode() + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"testbed_job.step: report of {len(line)} bytes, at most {MAX_LINE_BYTES}")
    os.write(_fd, line)
    return index
