"""Graceful stop: SIGINT/SIGTERM ask training to finish its iteration, save and stop, instead of dying mid-write."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

from mjfleet.signals import StopSignals

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
"""SIGUSR1: the warning Slurm sends before the time limit (scripts/slurm/train.sbatch), handled like SIGTERM."""


class StopRequest:
    """While entered, SIGINT/SIGTERM set `signum` instead of raising; the runner checks it once per iteration.

    `abort_on_repeat`: a second signal restores the default behaviour and raises KeyboardInterrupt at once (the
    in-process case, where the user's second Ctrl-C means "now"; an echo of the first within
    `mjfleet.signals.ECHO_WINDOW_S`, as `uv run` sends, is not a second one). Workers started by the launcher keep
    ignoring repeats, since they receive the launcher's relayed signal and their agent's SIGTERM; the launcher
    itself kills them on a second Ctrl-C.
    """

    def __init__(self, abort_on_repeat: bool = True, announce: bool = True) -> None:
        self.abort_on_repeat = abort_on_repeat
        self.announce = announce
        self._signals = StopSignals()
        self._previous: dict[int, object] = {}

    @property
    def signum(self) -> int | None:
        """The first stop signal received, or None."""
        return self._signals.first

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        kind = self._signals.arrived(signum)
        if kind == "echo":
            return
        if kind == "first":
            if self.announce:
                again = " (again to stop at once)" if self.abort_on_repeat else ""
                # os.write, not print: a handler that prints while the interrupted code prints to stderr too
                # raises "reentrant call" inside training
                notice = f"{signal.Signals(signum).name}: finishing this iteration, then saving a checkpoint{again}\n"
                os.write(2, notice.encode())
            return
        if self.abort_on_repeat:
            self.__exit__()
            raise KeyboardInterrupt
