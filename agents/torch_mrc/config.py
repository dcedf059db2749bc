"""The mrc backend's configuration: its environment variables, the job spec of this rank, the
receive region's slot stride. No torch here.

* ``TESTBED_MRC_JOB`` (:data:`ENV_JOB`, required): path of this rank's job spec, JSON read by
  :func:`agents.jobspec.load_job`: transport ``mrc`` (or ``rc``), collective ``all_reduce``
  (the ring's peers: ``send_to`` = [rank+1], ``recv_from`` = [rank-1]), the EVs, ``engine``,
  ``samples_path``, ``sample_interval_s``, ``agent``, ``qp``, ``linger_s``, ``rx_hold_s``.
* ``TESTBED_REPORT_FD`` (:data:`ENV_REPORT_FD`, optional): a file descriptor (a pipe the
  launcher reads) that gets one JSON line per event (:mod:`agents.torch_mrc.report`).
* ``TESTBED_MRC_SLOT_BYTES`` (:data:`ENV_SLOT_BYTES`, optional): the slot stride in bytes
  (default :func:`slot_bytes`), rounded down to a multiple of 8; a smaller slot cuts a
  collective into more segments (tests use it).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:                      # the job spec's module imports the QP engine: not at autoload
    from ..jobspec import JobSpec

ENV_JOB = "TESTBED_MRC_JOB"
ENV_REPORT_FD = "TESTBED_REPORT_FD"
ENV_SLOT_BYTES = "TESTBED_MRC_SLOT_BYTES"
TRANSPORTS = ("mrc", "rc")
"""Transports the backend runs (both are :class:`agents.channels.qp.QPChannel`s)."""
SLOT_MAX_BYTES = 1 << 20
"""The slot stride when the region allows it: one write of a segment is at most 1 MiB."""
REGION_MAX_BYTES = 64 << 20
"""The receive region's size that the stride shrinks to fit from 33 ranks up (2(n-1) slots)."""
SLOT_MIN_BYTES = 64 << 10
SLOT_ALIGN = 8
"""Slots start at multiples of 8 bytes: every dtype's elements are aligned in them."""


class MRCConfigError(ValueError):
    """The mrc backend cannot start: a missing or invalid variable, job spec or world."""


def job_from_env(rank: int, world_size: int, environ=os.environ) -> "JobSpec":
    """This rank's job spec, from the file named by ``TESTBED_MRC_JOB``, checked against
    torch.distributed's ``rank`` and ``world_size``.

    Raises :class:`MRCConfigError` for a world of fewer than 2 ranks, an unset variable, a
    transport other than mrc/rc, a collective other than all_reduce (another ring), or a rank
    or world size that differs from torch's; :class:`agents.jobspec.JobSpecError` (a
    ValueError naming the file and every problem) for an unreadable or invalid file.
    """
    if world_size < 2:
        raise MRCConfigError(f"the mrc backend needs at least 2 ranks (a ring), got world size {world_size}")
    path = environ.get(ENV_JOB)
    if not path:
        raise MRCConfigError(f"{ENV_JOB} is not set: the mrc backend needs the path of this rank's "
                             "job spec (JSON, agents.jobspec)")
    from ..jobspec import load_job
    spec = load_job(path)
    problems = []
    if spec.transport not in TRANSPORTS:
        problems.append(f"transport {spec.transport!r}: the mrc backend runs {' or '.join(TRANSPORTS)} QPs")
    if spec.collective != "all_reduce":
        problems.append(f"collective {spec.collective!r}: the mrc backend needs the ring's peers "
                        "(collective all_reduce)")
    if (spec.rank, spec.world_size) != (rank, world_size):
        problems.append(f"rank {spec.rank} of {spec.world_size} ranks, but torch.distributed has rank "
                        f"{rank} of {world_size} (RANK, WORLD_SIZE)")
    if problems:
        raise MRCConfigError(f"{ENV_JOB}={path}: " + "; ".join(problems))
    return spec


def report_fd_from_env(environ=os.environ) -> int | None:
    """The descriptor in ``TESTBED_REPORT_FD``, None when unset or empty. MRCConfigError if it is
    not a number or not an open descriptor."""
    raw = environ.get(ENV_REPORT_FD, "").strip()
    if not raw:
        return None
    try:
        fd = int(raw)
        os.fstat(fd)
    except (ValueError, OSError) as exc:
        raise MRCConfigError(f"{ENV_REPORT_FD}={raw!r} is not an open file descriptor ({exc})") from None
    return fd


def slot_bytes(world_size: int, environ=os.environ) -> int:
    """The receive region's slot stride in bytes for ``world_size`` ranks: ``TESTBED_MRC_SLOT_BYTES``
    if set (at least 8), else :data:`SLOT_MAX_BYTES` shrunk so that the region's ``2(n-1)`` slots
    fit :data:`REGION_MAX_BYTES` (but not below :data:`SLOT_MIN_BYTES`); a multiple of 8.
    MRCConfigError for a bad variable."""
    raw = environ.get(ENV_SLOT_BYTES, "").strip()
    if raw:
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < SLOT_ALIGN:
            raise MRCConfigError(f"{ENV_SLOT_BYTES}={raw!r}: expected a number of bytes >= {SLOT_ALIGN}")
    else:
        size = max(SLOT_MIN_BYTES, min(SLOT_MAX_BYTES, REGION_MAX_BYTES // (2 * (world_size - 1))))
    return size - size % SLOT_ALIGN
