"""Human-readable progress on rank 0's console: each iteration's line (or block), and physics trouble on it."""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Callable
from typing import Any

from mjfleet.runs.trouble import TroubleWatch, describe


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def format_iteration(
    record: dict[str, Any],
    total_iterations: int,
    eta_s: float,
    style: str = "block",
    iteration_env_steps: float = 0,
) -> str:
    """One line (`compact`) or a short block (`block`) describing an iteration. Physics trouble (NaN resets,
    solver-limit hits: `mjfleet.runs.trouble`) ends the first line when there was any, as shares of the
    `iteration_env_steps` the iteration took."""
    it = record["iteration"]
    eta = datetime.timedelta(seconds=int(max(eta_s, 0)))
    head = (
        f"it {it + 1}/{total_iterations}  steps {record['env_steps']:,}  "
        f"{record['env_steps_per_s']:,.0f} steps/s  return {_fmt(record['mean_return'])}  "
        f"ep_len {_fmt(record['mean_episode_length'])}  ETA {eta}"
    )
    trouble = describe(record, iteration_env_steps)
    if trouble:
        head += "  " + trouble
    if style == "compact":
        return head
    lines = [head]
    timing = f"collect {record['collect_time']:.2f}s  learn {record['learn_time']:.2f}s"
    losses = "  ".join(f"{k.split('/')[-1]} {_fmt(v)}" for k, v in record.items() if k.startswith("Loss/"))
    lines.append(f"    {timing}  {losses}  action_std {_fmt(record['Policy/action_std'])}")
    terms = [f"{k.split('/', 1)[-1]} {_fmt(v)}" for k, v in record.items() if k.startswith("Episode_")]
    for i in range(0, len(terms), 4):
        lines.append("    " + "  ".join(terms[i : i + 4]))
    return "\n".join(lines)


class IterationConsole:
    """What rank 0 prints while training (style "block", "compact", or "none" for nothing): each iteration as
    `format_iteration` writes it (ETA from the mean time of the iterations so far), then a warning the first time
    a kind of trouble passes its share of steps (`TroubleWatch`), on stderr, so that a log of the run says what
    went wrong and where."""

    def __init__(
        self,
        start_iteration: int,
        total_iterations: int,
        iteration_env_steps: int,
        style: str = "block",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.start, self.total, self.steps, self.style = (
            start_iteration,
            total_iterations,
            iteration_env_steps,
            style,
        )
        self.clock = clock
        self.started = clock()
        self.watch = TroubleWatch("train")

    def show(self, record: dict[str, Any]) -> None:
        if self.style == "none":  # a runner driven by another command (bench), which reports trouble itself
            return
        it = record["iteration"]
        done = it + 1 - self.start
        eta = (self.clock() - self.started) / max(done, 1) * (self.total - it - 1)
        print(format_iteration(record, self.total, eta, self.style, self.steps), flush=True)
        for line in self.watch.warnings(record, self.steps, where=f"at iteration {it + 1}"):
            print(line, file=sys.stderr, flush=True)
