"""Telling a second stop request from an echo of the first."""

from __future__ import annotations

import time
from typing import Literal

ECHO_WINDOW_S = 1.0
"""A repeat of the first signal within this time is the same request: `uv run` passes on a Ctrl-C that its
whole process group already received, and the copy arrives well within this window (docs/runs.md)."""


class StopSignals:
    """The stop signals a process receives: the first, then repeats that mean "now" (not echoes of the first)."""

    def __init__(self) -> None:
        self.first: int | None = None
        self._first_at = 0.0

    def arrived(self, signum: int) -> Literal["first", "echo", "repeat"]:
        """Record `signum` and say what it is: the first stop signal, an echo of it, or a repeat that means "now"."""
        now = time.monotonic()
        if self.first is None:
            self.first, self._first_at = signum, now
            return "first"
        return "echo" if signum == self.first and now - self._first_at < ECHO_WINDOW_S else "repeat"
