"""What a running trial has written so far, read as it goes: its run directory's metrics.jsonl, followed from the
last byte read (a poll reads only the lines added since the one before, so watching costs the trial nothing and
the sweep little, however long the run).

From it: the trial's latest iteration and training return (the sweep's progress line), the seconds an iteration
takes (its ETA), and its physics trouble over the whole run (mjfleet.runs.trouble: NaN resets summed over the
iterations and divided by the env steps they cover; the solver's shares averaged over the iterations).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mjfleet.runs.trouble import COUNTED, SHARED


class MetricsTail:
    """One trial's metrics.jsonl, read incrementally; the numbers the sweep shows of it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.path: Path | None = None
        self._offset = 0
        self._partial = b""
        self.first: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.records = 0
        self.first_seen: float | None = None
        """When the first record was read (clock): the trial's start-up ends about then."""
        self.last_seen: float | None = None
        self._counts = {key: 0.0 for key in COUNTED}
        self._shares = {key: [0.0, 0] for key in SHARED}

    def poll(self, run_dir: Path | None) -> int:
        """Read what was appended to `run_dir`'s metrics.jsonl since the last poll; the records read."""
        if run_dir is None:
            return 0
        path = Path(run_dir) / "metrics.jsonl"
        if path != self.path:  # a new run directory (never expected mid-trial): start from its beginning
            self.path, self._offset, self._partial = path, 0, b""
        try:
            with path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        self._offset += len(chunk)
        # the last piece is a line still being written: kept for the next poll
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        read = 0
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "iteration" in record:
                self._add(record)
                read += 1
        return read

    def _add(self, record: dict[str, Any]) -> None:
        now = self.clock()
        if self.first is None:
            self.first, self.first_seen = record, now
        self.last, self.last_seen = record, now
        self.records += 1
        for key in COUNTED:
            value = record.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._counts[key] += value
        for key in SHARED:
            value = record.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._shares[key][0] += value
                self._shares[key][1] += 1

    @property
    def iterations_done(self) -> int:
        """Iterations the run has finished (counting those before the checkpoint it continues)."""
        return int(self.last["iteration"]) + 1 if self.last else 0

    @property
    def mean_return(self) -> float | None:
        value = self.last.get("mean_return") if self.last else None
        return value if isinstance(value, (int, float)) and math.isfinite(value) else None

    def steps_per_iteration(self) -> float | None:
        """Env steps of one iteration (every worker's), from the first record: a run's steps are cumulative."""
        if not self.first or not self.first.get("env_steps"):
            return None
        return float(self.first["env_steps"]) / (int(self.first["iteration"]) + 1)

    def seconds_per_iteration(self) -> float | None:
        """Wall seconds per iteration between the first record read and the last (None before two)."""
        if self.records < 2 or self.first_seen is None or self.last_seen is None:
            return None
        iterations = int(self.last["iteration"]) - int(self.first["iteration"])  # type: ignore[index]
        seconds = self.last_seen - self.first_seen
        return seconds / iterations if iterations > 0 and seconds > 0 else None

    def trouble(self) -> tuple[dict[str, float], float]:
        """(a record of the run's trouble as mjfleet.runs.trouble reads one, the env steps it covers): the NaN
        resets of every iteration read, summed; the solver's shares, averaged over the iterations."""
        record: dict[str, float] = dict(self._counts)
        for key, (total, count) in self._shares.items():
            if count:
                record[key] = total / count
        per_iteration = self.steps_per_iteration() or 0.0
        return record, per_iteration * self.records
