"""Errors of a run directory: reading it (the :class:`testbed.model.errors.RecordsError`
family) and writing it (:class:`RunDirWriteError`, a :class:`testbed.model.errors.TestbedFailure`)."""

from __future__ import annotations

import errno as _errno
from pathlib import Path

from testbed.model.errors import RecordsError, TestbedFailure


class MetricsError(RecordsError):
    """Records that cannot be parsed or lack a required field (message names file and line)."""


class RunDirError(MetricsError):
    """The path is not a scenario run directory (no manifest.json, no transport data)."""

    exit_code = 2


class RunDirWriteError(TestbedFailure):
    """The operating system refused a write to a run directory (storage full, read-only file
    system, permission denied, ...): ``path`` the file or directory, ``what`` was being written,
    ``errno`` the OS error number. The testbed failed, not the records: what was written before
    stays readable. Raised once per writer: a :class:`testbed.rundir.write.JsonlWriter` that
    failed drops what it is given afterwards (the run is ending)."""

    def __init__(self, path, what: str, exc: OSError):
        self.path, self.what, self.errno = Path(path), what, exc.errno
        name = _errno.errorcode.get(exc.errno or 0)
        self.strerror = exc.strerror or str(exc) or type(exc).__name__
        super().__init__(f"cannot write {what} ({self.path}): {self.strerror}" + (f" [{name}]" if name else ""))

    @staticmethod
    def of(exc: BaseException, directory) -> "RunDirWriteError | None":
        """``exc`` as a write error of ``directory``: itself if it is one, a RunDirWriteError
        for an OSError on a path inside ``directory`` (a file the caller opened itself), else None."""
        if isinstance(exc, RunDirWriteError):
            return exc
        if isinstance(exc, OSError) and exc.filename is not None:
            path, d = Path(exc.filename), Path(directory)
            if path == d or d in path.parents:
                return RunDirWriteError(path, "the run directory", exc)
        return None

    def first(self) -> "RunDirWriteError":
        """The first write error of a chain (an error raised while handling this one, such as
        the manifest written on the way out of a failed run, names a consequence, not the cause)."""
        first, exc = self, self.__context__
        while exc is not None:
            if isinstance(exc, RunDirWriteError):
                first = exc
            exc = exc.__context__
        return first
