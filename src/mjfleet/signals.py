"""Telling a second stop request from an echo of the first."""

from __future__ import annotations

import time

ECHO_WINDOW_S = 1.0
"""A repeat of the first signal within this time is the same request: `uv run` passes on a Ctrl-C that its
whole process group already received (measured: the copy arrives 0.2 s after the original)."""


class StopSignals:
    """The stop signals a process receives: the first, then repeats that mean "now" (not echoes of the first)."""

    def __init__(self) -> None:
        self.first: int | None = None
        self._first_at = 0.0

    def arrived(self, signum: int) -> bool:
        """Record `signum`; whether it is a new request (the first signal, or a repeat that is not an echo)."""
        now = time.monotonic()
        if self.first is None:
            self.first, self._first_at = signum, now
            return True
        return not (signum == self.first and now - self._first_at < ECHO_WINDOW_S)
