"""A stopwatch for `bench`: it times the calls its `Timed` stand-ins pass on (the simulation step, the reducer)."""

from __future__ import annotations

import time

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
