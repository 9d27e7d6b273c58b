"""On CPU, the PPO update may use the worker's idle cores: whether it pays is measured while training runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch

MIN_MINIBATCH_FLOP = 100e6
"""Below this many floating-point operations per minibatch (forward + backward, ~6 x samples x parameters) the
update stays on one thread: its matrix products are too small to split (measured on Cartpole at 64 and 1,024
envs: docs/history/benchmarks-log.md)."""


class UpdateThreads:
    """Picks torch's intra-op thread count for each PPO update on CPU: `base` or `available`, by measurement.

    A CPU worker collects on `base` threads (1 by default: warp's CPU kernels are single-threaded and the
    collection's small torch ops gain nothing from more). Its update's matrix products, with a large enough
    model, ran faster on two idle cores of the 2-core machine (docs/benchmarks.md). But when another process keeps
    a core busy, OpenMP's barriers wait for a descheduled thread, and the same updates ran several times *slower*
    on two threads than on one. Which of the two holds can change while a run goes on, so it is
    measured: the first updates try both thread counts, later updates use the faster one, and the other is tried
    again now and then (after `probe_every` updates, doubling up to `max_probe_every` while it keeps losing), and
    at once when the update in use becomes much slower than it was. Updates are timed wall-clock, as they run.

    Results do not depend on the choice beyond floating-point summation order (matrix products split over
    threads add in another order); an explicit `--threads N` fixes every thread count instead.
    """

    def __init__(
        self,
        available: int,
        base: int = 1,
        *,
        probe_every: int = 8,
        max_probe_every: int = 64,
        margin: float = 0.9,
        slowdown: float = 1.5,
    ) -> None:
        self.base = max(1, base)
        self.available = max(self.base, available)
        self.probe_every = probe_every
        self.max_probe_every = max_probe_every
        self.margin = margin
        """The other thread count is taken when its update took less than `margin` x the current one's."""
        self.slowdown = slowdown
        """An update this many times slower than the best seen with its thread count triggers a probe."""
        self.current = self.base
        self.last: dict[int, float] = {}
        """The latest update time measured with each thread count (s)."""
        self.best: dict[int, float] = {}
        self.history: list[tuple[int, float]] = []
        """(threads, seconds) of every update (the first two, warm-ups, are not used for choosing)."""
        self._updates = 0
        # One warm-up update per thread count (first-touch allocations; the first parallel update also starts
        # OpenMP's threads and BLAS's per-thread state), then one measured update with each.
        self._opening = (self.base, self.available, self.available, self.base)
        self._warmups = 2
        self._interval = probe_every
        self._next_probe: int | None = None

    @classmethod
    def for_update(
        cls, available: int, minibatch_size: int, num_parameters: int, base: int = 1
    ) -> UpdateThreads:
        """The chooser for an update of this size: pinned to `base` when its minibatches are too small to split."""
        flop = 6.0 * minibatch_size * num_parameters
        return cls(available if flop >= MIN_MINIBATCH_FLOP else base, base)

    @property
    def adaptive(self) -> bool:
        return self.available > self.base

    @property
    def opening_updates(self) -> int:
        """Updates before the first choice: warm-ups and one measured update with each thread count (0 when not
        adaptive)."""
        return len(self._opening) if self.adaptive else 0

    def _other(self, threads: int) -> int:
        return self.available if threads == self.base else self.base

    def choose(self) -> int:
        """Thread count for the next update: warm-ups, one update with each count, then the faster plus probes."""
        n = self._updates
        if n < len(self._opening):
            return self._opening[n]
        if self._next_probe is not None and n >= self._next_probe:
            return self._other(self.current)
        return self.current

    def record(self, threads: int, seconds: float) -> None:
        n = self._updates
        self._updates += 1
        self.history.append((threads, seconds))
        if n < self._warmups:
            return
        self.last[threads] = seconds
        self.best[threads] = min(seconds, self.best.get(threads, seconds))
        if n < len(self._opening) - 1:
            return
        if n == len(self._opening) - 1:  # both measured: take the faster one
            self.current = min(self.last, key=self.last.__getitem__)
            self._next_probe = n + 1 + self._interval
            return
        if threads != self.current:  # a probe of the other thread count
            if seconds < self.margin * self.last[self.current]:
                self.current = threads
                self._interval = self.probe_every
            else:
                self._interval = min(2 * self._interval, self.max_probe_every)
                # The count in use stays; its latest time is its new normal (else a lasting slowdown of both
                # counts would send every other update to probe).
                self.best[self.current] = self.last[self.current]
            self._next_probe = n + 1 + self._interval
        elif seconds > self.slowdown * self.best[threads]:
            self._next_probe = n + 1  # the machine changed: try the other count at once

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Run the enclosed update with the chosen thread count, time it, and restore the collection's count."""
        if not self.adaptive:
            yield
            return
        threads = self.choose()
        torch.set_num_threads(threads)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record(threads, time.perf_counter() - start)
            torch.set_num_threads(self.base)
