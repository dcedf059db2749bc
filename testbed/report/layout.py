"""Tables that fit any console width without cutting a value.

Rich's tables shrink columns that do not fit and cut their words with "…" (at 80 columns,
or when stdout is piped and rich falls back to 80, "3328.24" printed as "332…").
:class:`Grid` decides at render time, for the width it is given:

1. the table at its natural width, if that fits;
2. else the same table with column widths chosen here: every column at least as wide as its
   longest word (a value never breaks; cells wrap at spaces), the rest of the width shared
   in proportion to what each column lacks of its natural width;
3. else a vertical layout: one two-column table (label, value) per row or per column.

Every cell is a :class:`rich.text.Text`, never markup: link names, reasons and scenario names
such as "[x]" or ":x:" print as written. Columns fold (never "…") as a last resort, at widths
where even the vertical layout cannot hold a word.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

_WIDE = 100_000     # "unlimited" width for measuring natural sizes


def as_text(cell) -> Text:
    """A cell as plain Text (a str is not parsed as markup; None -> "-")."""
    if isinstance(cell, Text):
        return cell
    return Text("-" if cell is None else str(cell))


def _fill(spare: int, lo: list[int], hi: list[int]) -> list[int]:
    """Widths from ``lo`` up to at most ``hi`` using at most ``spare`` more in total, by water-
    filling: the narrowest columns widen first, so that columns of one kind (a transport each)
    end up equally wide."""
    w = list(lo)
    while spare > 0:
        open_ = [i for i in range(len(w)) if w[i] < hi[i]]
        if not open_:
            break
        level = min(w[i] for i in open_)
        for i in [i for i in open_ if w[i] == level]:
            if spare <= 0:
                break
            w[i] += 1
            spare -= 1
    return w


class Grid:
    """A titled table of text cells that always fits the width it is rendered at.

    ``headers``: one per column; ``rows``: lists of cells (str, Text or None) as long as
    ``headers``; ``split``: the vertical layout, "rows" (one record per row, titled by its
    first cell, labels from the headers: a list of things with attributes; a blank first
    cell continues the row above) or "columns" (one record per column after the first,
    titled by its header, labels from the first column: attributes side by side);
    ``justify``: per column (default: first left, others right); ``caption``: a note under
    the table; ``shrink_first``: columns that wrap before the others get any width beyond
    their longest word (labels, so that values stay on one line)."""

    def __init__(self, title, headers: list, rows: list[list], *, split: str = "rows",
                 justify: list[str] | None = None, caption=None, shrink_first: tuple[int, ...] = ()):
        if split not in ("rows", "columns"):
            raise ValueError(f"split must be 'rows' or 'columns', got {split!r}")
        self.title = as_text(title)
        self.headers = [as_text(h) for h in headers]
        self.rows = [[as_text(c) for c in r] for r in rows]
        if any(len(r) != len(self.headers) for r in self.rows):
            raise ValueError("every row needs one cell per header")
        self.split = split
        self.justify = justify or ["left"] + ["right"] * (len(headers) - 1)
        self.caption = None if caption is None else as_text(caption)
        self.shrink_first = tuple(shrink_first)

    def table(self, widths: list[int] | None = None) -> Table:
        """The horizontal table; ``widths``: fixed content width per column (None: natural)."""
        t = Table(title=self.title, caption=self.caption)
        for i, (h, j) in enumerate(zip(self.headers, self.justify)):
            t.add_column(h, justify=j, overflow="fold", width=widths[i] if widths else None)
        for r in self.rows:
            t.add_row(*r)
        return t

    def records(self) -> list[tuple[Text, list[tuple[Text, Text]]]]:
        """The vertical layout's records: (title, [(label, value), ...])."""
        if self.split == "rows":
            out, title = [], Text("")
            for r in self.rows:
                title = r[0] if r[0].plain else title      # a blank first cell continues the one above
                out.append((title, list(zip(self.headers[1:], r[1:]))))
            return out
        return [(h, [(r[0], r[i]) for r in self.rows]) for i, h in enumerate(self.headers) if i]

    def _record_tables(self) -> list[Table]:
        """The vertical layout: a two-column table per record; consecutive records with the same
        title (a blank first cell continuing a row) share one table, a rule between them."""
        out: list[Table] = []
        last = None
        for title, pairs in self.records():
            if title.plain != last:
                name = self.title.copy()
                name.append(": ")
                name.append_text(title)
                out.append(Table(title=name, show_header=False))
                out[-1].add_column(overflow="fold")
                out[-1].add_column(overflow="fold", justify="right")
            elif out[-1].row_count:
                out[-1].rows[-1].end_section = True
            last = title.plain
            for label, value in pairs:
                out[-1].add_row(label, value)
        return out

    def _column_ranges(self, console: Console, options: ConsoleOptions) -> list[Measurement]:
        wide = options.update_width(_WIDE)
        out = []
        for i, h in enumerate(self.headers):
            ms = [Measurement.get(console, wide, c) for c in [h] + [r[i] for r in self.rows]]
            out.append(Measurement(max(m.minimum for m in ms), max(m.maximum for m in ms)))
        return out

    def layout(self, console: Console, options: ConsoleOptions) -> list[Table]:
        """The tables to print at ``options.max_width`` (see the module docstring)."""
        width = options.max_width
        natural = self.table()
        total = Measurement.get(console, options.update_width(_WIDE), natural)
        if total.maximum <= width:
            return [natural]
        cols = self._column_ranges(console, options)
        overhead = total.maximum - sum(c.maximum for c in cols)
        spare = width - overhead - sum(c.minimum for c in cols)
        if spare >= 0:
            return [self.table(self._widths(console, cols, spare))]
        return self._record_tables()

    def _cost(self, console: Console, widths: list[int]) -> int:
        """Lines the rows take with these column content widths (cells wrap at spaces), plus the
        extra lines of cells outside ``shrink_first`` again: a wrapped value reads worse than a
        wrapped label."""
        cost = 0
        for r in self.rows:
            lines = [len(c.wrap(console, w)) for c, w in zip(r, widths)]
            cost += max(lines) + max([n - 1 for i, n in enumerate(lines) if i not in self.shrink_first], default=0)
        return cost

    def _widths(self, console: Console, cols: list[Measurement], spare: int) -> list[int]:
        """Content widths: every column's longest word plus a share of ``spare``; the columns
        in ``shrink_first`` get the width (from 0 to all they lack) of the lowest :meth:`_cost`,
        the others share the rest (:func:`_fill`)."""
        lo, hi = [c.minimum for c in cols], [c.maximum for c in cols]
        first = [i for i in self.shrink_first if 0 <= i < len(cols)]
        rest = [i for i in range(len(cols)) if i not in first]
        best: tuple | None = None
        for extra in range(min(spare, sum(hi[i] - lo[i] for i in first)) + 1):
            widths = list(lo)
            for i, v in zip(first, _fill(extra, [lo[i] for i in first], [hi[i] for i in first])):
                widths[i] = v
            for i, v in zip(rest, _fill(spare - extra, [lo[i] for i in rest], [hi[i] for i in rest])):
                widths[i] = v
            key = (self._cost(console, widths), -extra)
            if best is None or key < best[0]:
                best = (key, widths)
            if not first:
                break
        return best[1]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.layout(console, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        total = Measurement.get(console, options.update_width(_WIDE), self.table())
        return Measurement(min(total.minimum, options.max_width), min(total.maximum, options.max_width))
