"""Plain-text output: aligned tables and progress reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO


def table(rows: list[list[str]], headers: list[str], right: Sequence[int] = ()) -> str:
    """``rows`` under ``headers`` in columns two spaces apart, the columns ``right``
    right-aligned; no trailing spaces and no final newline."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            last = i == len(cells) - 1
            if i in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell if last else cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


class Progress:
    """Progress of work done in steps. On a terminal, one line updated in place (``\\r``)
    after every step, ended by :meth:`done`; otherwise (a log, a pipe) a line only each
    time another tenth of the total is done, so 60 batches write 10 lines, not 60.
    Nothing at all when the work fits in one ``step``."""

    width = 30
    #: Lines a report that is not on a terminal writes at most.
    log_lines = 10

    def __init__(self, total: int, stream: TextIO, verb: str, step: int) -> None:
        self.total, self.stream, self.verb = total, stream, verb
        self.tty = stream.isatty()
        self.shown = total > step  # one batch needs no progress report
        self.logged = 0  # tenths reported (not on a terminal)

    def update(self, n: int) -> None:
        """Report ``n`` of the total done."""
        if not self.shown:
            return
        frac = n / self.total
        if self.tty:
            bar = "#" * int(frac * self.width)
            self.stream.write(f"\r[{bar:<{self.width}}] {n}/{self.total} {self.verb}")
        else:
            tenths = int(frac * self.log_lines)
            if tenths <= self.logged:
                return
            self.logged = tenths
            self.stream.write(f"{self.verb} {n}/{self.total} ({frac:.0%})\n")
        self.stream.flush()

    def done(self) -> None:
        """End the bar's line (on a terminal)."""
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()
