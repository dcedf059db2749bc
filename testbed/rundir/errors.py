"""Errors of reading a run directory (the :class:`testbed.model.errors.RecordsError` family)."""

from __future__ import annotations

from testbed.model.errors import RecordsError


class MetricsError(RecordsError):
    """Records that cannot be parsed or lack a required field (message names file and line)."""


class RunDirError(MetricsError):
    """The path is not a scenario run directory (no manifest.json, no transport data)."""

    exit_code = 2
