"""Damage: the problems found while reading a run directory, collected or raised."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

from testbed.rundir.errors import MetricsError

PROBLEMS_PER_FILE = 20        # problems listed per file (then a count)


class Damage:
    """Problems found while reading a run directory, each ``file[:line]: what is wrong``,
    at most :data:`PROBLEMS_PER_FILE` listed per file (:meth:`lines` adds the counts)."""

    def __init__(self):
        self.problems: list[str] = []
        self._per_file: dict[str, int] = {}

    def add(self, path, line: int | None, what: str) -> None:
        msg = f"{path}:{line}: {what}" if line else f"{path}: {what}"
        key = str(path)
        n = self._per_file.get(key, 0)
        self._per_file[key] = n + 1
        if n < PROBLEMS_PER_FILE and msg not in self.problems:
            self.problems.append(msg)

    def note(self, line: str) -> None:
        """A problem already written as ``file[:line]: what is wrong``."""
        self._per_file[line] = self._per_file.get(line, 0) + 1
        if line not in self.problems:
            self.problems.append(line)

    def __bool__(self) -> bool:
        return bool(self._per_file)

    def lines(self) -> list[str]:
        """Every listed problem, then ``file: N more problems`` for files with more."""
        more = [f"{k}: {n - PROBLEMS_PER_FILE} more problems" for k, n in self._per_file.items()
                if n > PROBLEMS_PER_FILE]
        return self.problems + more


_DAMAGE: contextvars.ContextVar[Damage | None] = contextvars.ContextVar("testbed_metrics_damage", default=None)


def current_damage() -> Damage | None:
    """The :class:`Damage` of the innermost :func:`collecting` block, None outside one."""
    return _DAMAGE.get()


@contextlib.contextmanager
def collecting(damage: Damage | None = None) -> Iterator[Damage]:
    """Within the block, readers skip a bad record, file or key and note it in the
    :class:`Damage` yielded, instead of raising :class:`MetricsError` at the first one."""
    damage = Damage() if damage is None else damage
    token = _DAMAGE.set(damage)
    try:
        yield damage
    finally:
        _DAMAGE.reset(token)


def problem(path, line: int | None, what: str) -> None:
    """A damaged record or file: noted while :func:`collecting`, else MetricsError."""
    damage = _DAMAGE.get()
    if damage is None:
        raise MetricsError(f"{path}:{line}: {what}" if line else f"{path}: {what}")
    damage.add(path, line, what)

