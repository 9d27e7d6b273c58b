"""Runs a sweep's trials on its slots: one thread per slot takes the study's next trial, runs it (trial.py) and
tells the study how it ended, until the study has no more trials or the sweep is stopped.

Ctrl-C (or SIGTERM, or Slurm's time-limit warning): no new trial starts; every running train is asked to stop
(it saves a checkpoint), its trial is marked interrupted (failed, with that reason, in the study) and `sweep
--resume <dir>` continues it from that checkpoint. A second Ctrl-C kills the running trials at once.

While it runs, the main thread (free for the signals) redraws the progress (mjfleet.progress: a bar on a terminal,
a plain line at most every 30 s in a log) from what the running trials have written (sweep/status.py); each trial
that ends gets its line, with its physics trouble (mjfleet.runs.trouble), above the bar.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from mjfleet.progress import Progress
from mjfleet.ranking import ended_early
from mjfleet.runs.trouble import TroubleWatch, describe, shares
from mjfleet.signals import StopSignals
from mjfleet.sweep.slots import Slot
from mjfleet.sweep.status import Running, SweepStatus
from mjfleet.sweep.study import TrialQueue
from mjfleet.sweep.trial import Outcome, SweepSpec, TrialProcess
from mjfleet.sweep.watch import MetricsTail

RETIRE_AFTER = 2
"""A slot whose trials fail this many times in a row before their first iteration (an unreachable host, a GPU that
is gone) takes no more trials; the others go on."""

EVAL_ATTRS = ("mean_return", "std_return", "mean_episode_length", "episodes", "terminations")
"""What a complete trial keeps of its eval.json in the study: the report reads falls from `terminations`."""
SHOW_EVERY = 1.0
"""Seconds between two looks at the running trials for the progress line (the trials write once an iteration)."""


@dataclass
class Pruning:
    """The median pruner's view of one trial: each periodic evaluation reported, then asked about."""

    trial: Any
    key: str

    def __call__(self, iteration: int, value: float) -> bool:
        self.trial.report(value, iteration)
        return self.trial.should_prune()


class SweepRunner:
    """The slots' threads, the stop and the study's bookkeeping of every trial's end."""

    def __init__(self, spec: SweepSpec, slots: list[Slot], queue: TrialQueue, prune: bool = False,
                 bar: Progress | None = None, status: SweepStatus | None = None) -> None:  # fmt: skip
        self.spec, self.slots, self.queue, self.prune = spec, slots, queue, prune
        self.bar = bar if bar is not None else Progress("sweep", quiet=True)  # quiet: the trials' lines only
        self.status = status
        self.stop = threading.Event()
        self.running: dict[int, TrialProcess] = {}
        self.live: dict[int, Running] = {}
        self._shown = float("-inf")
        self.lock = threading.Lock()
        self.ended: dict[str, int] = {}
        self._signals = StopSignals()
        self.stop_signal: int | None = None
        """The signal that stopped the sweep (SIGUSR1: Slurm's time-limit warning, after which it requeues)."""

    def run(self) -> bool:
        """Run until done or stopped; True when it was stopped (Ctrl-C, SIGTERM)."""
        previous = {
            s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
        }
        threads = [
            threading.Thread(target=self._slot_loop, args=(slot,), name=slot.name, daemon=True)
            for slot in self.slots
        ]
        try:
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.2)  # short waits: the main thread must be free to take the signals
                self._show()
            self._show(last=True)  # the count the sweep ended at, not the one a second before
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return self.stop.is_set()

    def _show(self, last: bool = False) -> None:
        if self.status is None or (time.monotonic() - self._shown < SHOW_EVERY and not last):
            return
        self._shown = time.monotonic()
        with self.lock:
            live = dict(self.live)
        for trial in live.values():
            self.status.seen(trial)
        self.bar.update(
            done=self.status.done, status=self.status.text(live), eta=self.status.seconds_left(live)
        )

    def _on_signal(self, signum: int, _frame: Any) -> None:
        with self.lock:
            running = list(self.running.values())
        # `uv run` passes on the Ctrl-C the terminal already sent to the whole group: one Ctrl-C arrives twice.
        arrived = self._signals.arrived(signum)
        if arrived == "first":
            self.stop_signal = signum
            self.stop.set()
            name = signal.Signals(signum).name
            print(f"sweep: {name}: stopping; the {len(running)} running trial(s) save a checkpoint "
                  "(again to kill them now)", file=sys.stderr, flush=True)  # fmt: skip
            # Slurm signals every process of the job: a train that gets Slurm's SIGTERM and a SIGINT from here
            # takes the second as "stop at once", without a checkpoint; the same signal twice is one request.
            forwarded = signal.SIGTERM if signum == signal.SIGTERM else signal.SIGINT
            for proc in running:
                proc.stop(signum=forwarded)
        elif arrived == "repeat":
            for proc in running:
                proc.kill()

    def _slot_loop(self, slot: Slot) -> None:
        failures_before_start = 0
        while not self.stop.is_set():
            nxt = self.queue.next()
            if nxt is None:
                return
            trial = nxt.trial
            proc = TrialProcess(self.spec, slot, trial.number, nxt.config, nxt.seed, dict(trial.params),
                                nxt.resume_run, nxt.evaluate_only)  # fmt: skip
            started = time.monotonic()
            with self.lock:
                self.running[trial.number] = proc
                self.live[trial.number] = Running(trial.number, started, proc.tail)
            if self.stop.is_set():  # stopped while this trial was being asked for
                proc.stopping.set()
            trial.set_user_attr("slot", slot.name)
            key = self.spec.objective.periodic_key() if self.prune else None
            try:
                outcome = (
                    Outcome("interrupted", reason="interrupted before it started")
                    if proc.stopping.is_set()
                    else proc.run(
                        lambda path, t=trial: t.set_user_attr("run_dir", path),
                        Pruning(trial, key) if key else None,
                    )
                )
            except Exception as exc:  # a trial's own failure must not end the other slots' trials
                outcome = Outcome("failed", reason=f"{type(exc).__name__}: {exc}")
            finally:
                with self.lock:
                    self.running.pop(trial.number, None)
                    running = self.live.pop(trial.number)
            if self.status is not None:
                with self.lock:
                    self.status.ended(running, for_good=outcome.state != "interrupted")
            self._tell(trial, outcome, nxt.config, nxt.seed, slot, time.monotonic() - started, proc.tail)
            failures_before_start = (
                failures_before_start + 1 if outcome.state == "failed" and not outcome.iterations else 0
            )
            if failures_before_start >= RETIRE_AFTER:
                print(f"sweep: slot {slot.name} takes no more trials: {RETIRE_AFTER} failed before their first "
                      f"iteration (last: {outcome.reason})", file=sys.stderr, flush=True)  # fmt: skip
                return

    def _tell(self, trial: Any, outcome: Outcome, config: int, seed: int, slot: Slot, seconds: float,
              tail: MetricsTail) -> None:  # fmt: skip
        from optuna.trial import TrialState

        if outcome.run_dir:
            trial.set_user_attr("run_dir", outcome.run_dir)
        trial.set_user_attr("seconds", round(seconds, 1))
        record, env_steps = tail.trouble()
        trouble = shares(record, env_steps)
        if trouble:  # before the study is told: a finished trial takes no more attributes
            trial.set_user_attr("trouble", trouble)
        label = f"trial {trial.number} (config {config}, seed {seed}) on {slot.name}"
        if outcome.state == "complete":
            trial.set_user_attr("eval", {k: outcome.summary.get(k) for k in EVAL_ATTRS})
            self.queue.study.tell(trial, outcome.value)
            early, ended = ended_early(outcome.summary.get("terminations"))
            falls = f", {early} of {ended} episodes ended early" if early else ""
            line = f"{label}: {self.spec.objective.name} {outcome.value:.4g}{falls} ({seconds:.0f} s)"
        else:
            trial.set_user_attr("fail_reason", outcome.reason)
            if outcome.state == "interrupted":
                trial.set_user_attr("interrupted", True)
            if outcome.trained:
                trial.set_user_attr("trained", True)
            state = TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL
            self.queue.study.tell(trial, state=state)
            line = f"{label}: {outcome.state}: {outcome.reason}"
        if trouble:
            line += f"; {describe(record, env_steps)}"
        with self.lock:
            self.ended[outcome.state] = self.ended.get(outcome.state, 0) + 1
        self.bar.log(f"sweep: {line}")
        for warning in TroubleWatch(f"sweep: trial {trial.number}").warnings(
            record, env_steps, "over its run"
        ):
            self.bar.log(warning)
