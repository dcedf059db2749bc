"""The live display of a scenario run: one table row per transport, and a line per notable event.

The only module of :mod:`testbed.run` that uses rich. The runner hands it plain text
(escaped here, so an agent's reason can never be read as markup); the table is redrawn
at most every :data:`PROGRESS_S` and only on a terminal (``live``); lines are printed
on any console (the e2e tests keep them in a file).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from agents.protocol import Iteration

from testbed.model.nccl import bandwidths

PROGRESS_S = 0.25           # live display refresh, s


def phrase_lines(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters (continuations, printed 2 further in:
    ``width - 2``), broken only between phrases: after ", ", "; " or ": ", before " (" or
    " -> ". A phrase longer than a line is not broken."""
    import re
    lines: list[str] = []
    for piece in (p for p in re.split(r"(?<=[,;:] )|(?= \(| -> )", text) if p):
        if lines and len(lines[-1]) + len(piece.rstrip()) <= (width if len(lines) == 1 else width - 2):
            lines[-1] += piece
        else:
            lines.append(piece.lstrip())
    return [line.rstrip() for line in lines] or [""]


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
    collective: str = "all_reduce"

    def iteration(self, msg: Iteration) -> None:
        """Count an agent's iteration report."""
        self.wrong += msg.wrong
        if msg.warmup:
            return
        self.measured_done[msg.rank] = self.measured_done.get(msg.rank, 0) + 1
        key = (msg.size, msg.iter)
        secs = self.per_iter.setdefault(key, [])
        secs.append(float(msg.seconds))
        if len(secs) == self.world:       # slowest rank, as metrics does (nccl-tests -a 3)
            self.last_busbw_mbit = bandwidths(msg.size, max(secs), self.world, self.collective)["busbw_mbit_per_s"]
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


class Display:
    """The console of a run: ``rows`` in a live table (on a terminal, if ``live``) and lines.

    ``console``: a rich Console (default: stdout's). :meth:`refresh` is cheap to call often.
    """

    def __init__(self, rows: list[Progress], console: Console | None = None, *, live: bool = True):
        self.rows = rows
        self.console = console or Console()
        self._live = Live(progress_table(rows), console=self.console, refresh_per_second=4, transient=False,
                          auto_refresh=False) if live and self.console.is_terminal else None
        self._last = 0.0

    def start(self) -> None:
        if self._live is not None:
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self.refresh(force=True)
            self._live.stop()

    def refresh(self, force: bool = False) -> None:
        """Redraw the table if it is live and :data:`PROGRESS_S` passed (or ``force``)."""
        if self._live is not None and (force or time.monotonic() - self._last >= PROGRESS_S):
            self._last = time.monotonic()
            self._live.update(progress_table(self.rows), refresh=True)

    def note(self, text: str) -> None:
        """A plain line (e.g. where the run directory is)."""
        self.console.print(escape(text), highlight=False)

    def say(self, transport: str, elapsed_s: float | None, text: str, *, head: str | None = None,
            head_style: str = "bold") -> None:
        """``<transport> <elapsed>s <head> <text>``: ``head`` (e.g. a fault's action) in ``head_style``."""
        t = "" if elapsed_s is None else f"{elapsed_s:7.3f}s "
        prefix = f"  {transport:>4} {t}"
        body = ("" if head is None else head + " ") + text
        lines = phrase_lines(body, self.console.width - len(prefix))
        for i, line in enumerate(lines):   # wrapped at phrase boundaries, continuations indented
            lead = "" if i or head is None else f"[{head_style}]{escape(head)}[/]"
            rest = line[len(head):] if i == 0 and head is not None else line
            self.console.print((prefix if i == 0 else " " * (len(prefix) + 2)) + lead + escape(rest),
                               highlight=False, soft_wrap=True)

    def outcome(self, transport: str, status: str, reason: str) -> None:
        """``<transport>: <status> - <reason>``, green if done, red otherwise."""
        colour = "green" if status == "done" else "red"
        self.console.print(f"[{colour}]{transport}: {status}[/]" + (f" - {escape(reason)}" if reason else ""))
