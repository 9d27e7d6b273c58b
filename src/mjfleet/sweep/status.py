"""The sweep's progress line: trials done, running and left of the sweep's N, each running trial's iteration and
latest training return, and the time left, estimated from the budget.

The ETA is work left over the slots. A trial's work is its start-up (until its first iteration is read), its
iteration budget times the measured seconds per iteration, and what follows training (saving, the evaluation),
each measured on this sweep's own trials as they go; a running trial has left what its budget has left. Before any
trial has run two iterations there is no estimate, and none is shown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mjfleet.sweep.watch import MetricsTail

SHOWN = 3
"""Running trials named on the line (the others are counted): a line per slot would not fit a terminal."""


@dataclass
class Running:
    """What the status needs of one running trial: its number, when it started, what it has written."""

    number: int
    started: float
    tail: MetricsTail
    counted: bool = False
    """Its start-up is in SweepStatus.startups."""


@dataclass
class SweepStatus:
    """Counts and measurements of the sweep's trials, turned into the bar's status text and ETA."""

    total: int
    """The sweep's trials: configurations x seeds."""
    done: int
    """Trials that ended for good (complete, pruned, failed) before this process started (a resumed sweep)."""
    slots: int
    iterations: int | None
    """Each trial's iteration budget; None when --env-steps sets it (see `budget`)."""
    env_steps: int | None = None
    minutes: float | None = None
    clock: Callable[[], float] = field(default=lambda: 0.0)
    startups: list[float] = field(default_factory=list)
    """Seconds from a trial's start to its first iteration, per trial."""
    rates: list[float] = field(default_factory=list)
    """Seconds per iteration of finished trials."""
    endings: list[float] = field(default_factory=list)
    """Seconds from a trial's last iteration to its end (saving, the evaluation)."""
    steps_per_iteration: float | None = None

    def budget(self, tail: MetricsTail | None = None) -> int | None:
        """A trial's iterations: --iterations (or the task's), or --env-steps over its steps per iteration."""
        if self.iterations is not None:
            return self.iterations
        per = (tail.steps_per_iteration() if tail else None) or self.steps_per_iteration
        return math.ceil(self.env_steps / per) if self.env_steps and per else None

    def seen(self, trial: Running) -> None:
        """Note what a trial's first iteration tells about all of them (start-up, steps per iteration)."""
        tail = trial.tail
        if tail.first_seen is not None and not trial.counted:
            trial.counted = True
            self.startups.append(tail.first_seen - trial.started)
            self.steps_per_iteration = tail.steps_per_iteration() or self.steps_per_iteration

    def ended(self, trial: Running, for_good: bool) -> None:
        """A trial ended: `for_good` unless it was interrupted (a resumed sweep continues it)."""
        self.seen(trial)
        self.done += for_good
        rate = trial.tail.seconds_per_iteration()
        if rate is not None:
            self.rates.append(rate)
        if trial.tail.last_seen is not None and for_good:
            self.endings.append(max(0.0, self.clock() - trial.tail.last_seen))

    def _rate(self, running: Mapping[int, Running]) -> float | None:
        rates = self.rates + [
            r for t in running.values() if (r := t.tail.seconds_per_iteration()) is not None
        ]
        return statistics.median(rates) if rates else None

    def _ending(self) -> float:
        return statistics.mean(self.endings) if self.endings else 0.0

    def _trial_seconds(self, rate: float, budget: int) -> float:
        startup = statistics.mean(self.startups) if self.startups else 0.0
        training = budget * rate
        if self.minutes is not None:
            training = min(training, self.minutes * 60)
        return startup + training + self._ending()

    def seconds_left(self, running: Mapping[int, Running]) -> float | None:
        """The work left over the slots (see the module's docstring); None before it can be estimated."""
        rate, budget = self._rate(running), self.budget()
        if rate is None or budget is None:
            return None
        whole = self._trial_seconds(rate, budget)
        now, ending = self.clock(), self._ending()
        left_running = []
        for t in running.values():
            trial_budget = self.budget(t.tail) or budget
            if t.tail.records:
                trained = (trial_budget - t.tail.iterations_done) * rate
                if self.minutes is not None:
                    trained = min(trained, max(0.0, t.started + self.minutes * 60 - now))
                left_running.append(max(0.0, trained) + ending)
            else:
                left_running.append(max(0.0, whole - (now - t.started)))
        queued = max(0, self.total - self.done - len(running))
        work = sum(left_running) + queued * whole
        return max(work / max(1, self.slots), max(left_running, default=0.0))

    def text(self, running: Mapping[int, Running]) -> str:
        """`2 running, 5 left; trial 3 it 12/50 return 231.4; trial 4 starting`."""
        queued = max(0, self.total - self.done - len(running))
        parts = [f"{len(running)} running, {queued} left"]
        for number in sorted(running)[:SHOWN]:
            t = running[number]
            budget = self.budget(t.tail)
            if not t.tail.records:
                parts.append(f"trial {number} starting")
                continue
            of = f"/{budget}" if budget else ""
            ret = t.tail.mean_return
            shown = f" return {ret:.4g}" if ret is not None else ""
            parts.append(f"trial {number} it {t.tail.iterations_done}{of}{shown}")
        if len(running) > SHOWN:
            parts.append(f"+{len(running) - SHOWN} more")
        return "; ".join(parts)


def done_before(trials: list[Any]) -> int:
    """Trials of a study that ended for good (not interrupted: those are continued), one per configuration and
    seed: what a resumed sweep has done already."""
    from optuna.trial import TrialState

    ended = set()
    for t in trials:
        finished = t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
            t.state == TrialState.FAIL and not t.user_attrs.get("interrupted")
        )
        if finished and "config" in t.user_attrs:
            ended.add((t.user_attrs["config"], t.user_attrs.get("seed")))
    return len(ended)
