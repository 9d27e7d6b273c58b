"""How long work shows that it is alive: one helper for `sweep`, `bench`, `play` and `robots fetch`.

On a terminal it is rich's redrawn bar (what was done of how much, elapsed, ETA and a status text); where the
stream is not a terminal (CI, a Slurm log, `nohup`) it is a plain line when the work starts, at most one every
`every` seconds while it goes on, and one when it ends, so that a log stays readable; with `quiet` it is nothing.
It writes to stderr: stdout keeps a command's results (bench's table, a JSON on `-`).

    with Progress("play", total=64, unit="episodes", quiet=args.quiet) as bar:
        for ...:
            bar.update(advance=1, status="return 231.4")
            bar.log("a line that stays")       # printed above a bar, or as is in a log

Progress never hides an error: leaving the block by an exception (Ctrl-C included) stops the bar first, which
puts the cursor back, then lets the exception go on. It is safe to call from several threads (sweep's slots).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

EVERY = 30.0
"""Seconds between two plain lines in a log: often enough to see a run is alive, rare enough to read the log."""


def duration(seconds: float) -> str:
    """`42 s`, `7 min`, `1 h 05 min`: the unit a person reads an ETA in."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """What was done of `total` (None: unknown) `unit`s, shown as a bar on a terminal and as lines elsewhere."""

    def __init__(
        self,
        what: str,
        total: float | None = None,
        unit: str = "",
        *,
        quiet: bool = False,
        done: float = 0,
        stream: TextIO | None = None,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.quiet, self.every, self.clock = quiet, every, clock
        self.stream = stream if stream is not None else sys.stderr
        self.done = float(done)
        """Already done when the work starts (a resumed sweep's finished trials): counts, but not in the rate."""
        self._done_at_start = self.done
        self.status = ""
        self.eta: float | None = None
        """Seconds left as the caller knows them (sweep: from the trials' iteration budgets); None: from the rate."""
        self._lock = threading.RLock()
        self._bar = None
        self._task = None
        self._started = self._last_line = 0.0
        self._dirty = False

    @property
    def interactive(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def __enter__(self) -> Progress:
        self._started = self.clock()
        if self.quiet:
            return self
        if self.interactive:
            try:
                self._start_bar()
            except BaseException:
                # Ctrl-C while the bar starts: stop what started, or the cursor stays hidden
                if self._bar is not None:
                    self._bar.stop()
                    self._bar = None
                raise
        else:
            self._line()
        return self

    def __exit__(self, kind, _exc, _tb) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()  # before the exception goes on: the cursor and the terminal's state come back
                self._bar = None
            elif not self.quiet and self._dirty:  # a line that says nothing new is not printed twice
                self._line(ended=kind is None)

    def update(
        self,
        done: float | None = None,
        *,
        advance: float = 0,
        total: float | None = None,
        status: str | None = None,
        eta: float | None = None,
    ) -> None:
        """Record progress; redraw the bar, or print a plain line if `every` seconds have passed since the last."""
        with self._lock:
            if total is not None:
                self.total = total
            self.done = (self.done if done is None else done) + advance
            if status is not None:
                self.status = status
            if eta is not None:
                self.eta = eta
            self._dirty = True
            if self.quiet:
                return
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done, total=self.total, status=self._status())
            elif self.clock() - self._last_line >= self.every:
                self._line()

    def log(self, line: str) -> None:
        """A line that stays: above the bar on a terminal, as is in a log. Printed even when quiet."""
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(line, highlight=False, markup=False)
            else:
                print(line, file=self.stream, flush=True)

    def seconds_left(self) -> float | None:
        """The caller's ETA if it gave one, else what the rate so far gives; None before any progress."""
        if self.eta is not None:
            return self.eta
        elapsed = self.clock() - self._started
        done_here = self.done - self._done_at_start
        if not self.total or done_here <= 0 or elapsed <= 0:
            return None
        return elapsed * (self.total - self.done) / done_here

    def _status(self) -> str:
        left = self.seconds_left() if self.done < (self.total or 0) else None
        return "  ".join(s for s in (self.status, f"ETA {duration(left)}" if left is not None else "") if s)

    def _line(self, ended: bool = False) -> None:
        count = f"{self.done:g}" + (f" of {self.total:g}" if self.total is not None else "")
        parts = [f"{self.what}: {count} {self.unit}".rstrip()]
        if self.status:
            parts.append(self.status)
        parts.append(duration(self.clock() - self._started))
        left = None if ended else self.seconds_left()
        if left is not None and self.done < (self.total or 0):
            parts.append(f"ETA {duration(left)}")
        print(", ".join(parts), file=self.stream, flush=True)
        self._last_line, self._dirty = self.clock(), False

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        console = Console(file=self.stream, force_terminal=True)
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
        if self.unit:
            columns.append(TextColumn(self.unit))
        columns += [TimeElapsedColumn(), TextColumn("{task.fields[status]}")]  # the status ends with the ETA
        self._bar = Bar(*columns, console=console, refresh_per_second=4)
        self._bar.start()
        self._task = self._bar.add_task(
            self.what, total=self.total, completed=self.done, status=self._status()
        )
