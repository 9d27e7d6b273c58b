"""A stopwatch for `bench`: it times the calls its `Timed` stand-ins pass on (the simulation step, the reducer)."""

from __future__ import annotations

import time
from typing import Any

import torch


class Stopwatch:
    """Adds up the wall-clock and process CPU seconds spent inside `with stopwatch:` blocks.

    On a CUDA device it synchronises the device at both ends of a block, so that the work queued inside is counted
    where it runs (this slows the timed code down a little: only benchmarks switch it on).
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self._start = self._cpu_start = 0.0

    def reset(self) -> None:
        self.seconds = self.cpu_seconds = 0.0

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self) -> Stopwatch:
        self._synchronize()
        self._start, self._cpu_start = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self._synchronize()
        self.seconds += time.perf_counter() - self._start
        self.cpu_seconds += time.process_time() - self._cpu_start


class Timed:
    """`target` with every call of its method `method` timed by `stopwatch`; everything else is `target`'s. Bench
    puts it in place of the simulation (its `step`) and of the gradient reducer (its `average`, the wait for the
    slowest worker included) while it measures, so the measured classes carry no timers of their own."""

    def __init__(self, target: Any, method: str, stopwatch: Stopwatch) -> None:
        self._target, self._method, self._stopwatch = target, method, stopwatch
        timed = getattr(target, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            with stopwatch:
                return timed(*args, **kwargs)

        self._call = call

    def __getattr__(self, name: str) -> Any:
        if name == self._method:
            return self._call
        return getattr(self._target, name)
