"""One trial: an ordinary `train` run under <sweep dir>/runs/, then `play`'s evaluation of it (eval.json), as
subprocesses, so that a trial that crashes, hangs or is killed takes nothing else with it.

How a trial ends: `complete` (the objective, a finite number, read from eval.json), `pruned` (the median pruner
stopped it on a periodic evaluation), `interrupted` (the sweep was stopped; `sweep --resume` continues the run from
its checkpoint, or evaluates it again when the stop came during its evaluation) or `failed`, with the reason:
train's or play's error line, the signal that killed it (kill -9 of a trial's worker fails that trial; it is not
retried), or an objective that is NaN or missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mjfleet.runs import plots
from mjfleet.runs.checkpoints import checkpoints_in
from mjfleet.sweep.objective import Objective, usable
from mjfleet.sweep.params import Param
from mjfleet.sweep.slots import Slot
from mjfleet.sweep.watch import MetricsTail

POLL_S = 0.5
"""How often a running trial's process, its metrics and the sweep's stop are looked at."""


@dataclass(frozen=True)
class SweepSpec:
    """Everything every trial of a sweep shares."""

    task: str
    params: tuple[Param, ...]
    objective: Objective
    sweep_dir: Path
    train_flags: tuple[str, ...]
    """Fixed `train` flags for every trial (what follows `--` on the sweep's command line) and the budget's."""
    minutes: float | None = None
    """Per-trial wall-clock budget: train is stopped (checkpoint saved) and evaluated after this long."""
    eval_flags: tuple[str, ...] = ()
    """`play` flags of the evaluation (episodes, environments, seed)."""
    prune_interval: int = 0
    """With the median pruner: train --eval-interval, whose evaluations the pruner judges. 0: no pruning."""
    iterations: int | None = None
    """Each trial's budget in iterations (--iterations, else the task's); None when --env-steps sets it."""
    env_steps: int | None = None
    """Each trial's budget in env steps (--env-steps): its iterations follow from its first metrics record."""

    @property
    def runs_root(self) -> Path:
        return self.sweep_dir / "runs"


@dataclass
class Outcome:
    """How a trial ended (see the module's docstring) and what it left."""

    state: str
    value: float | None = None
    reason: str = ""
    run_dir: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    iterations: int = 0
    trained: bool = False
    """Train reached its budget (an interrupted evaluation: a continuation only evaluates)."""


def python_command(module: str) -> list[str]:
    return [sys.executable, "-m", module]


class TrialProcess:
    """Runs one trial's train and play; `stop()` asks it to end (train saves a checkpoint), `kill()` ends it now."""

    def __init__(self, spec: SweepSpec, slot: Slot, number: int, config: int, seed: int, values: dict[str, Any],
                 resume_run: str | None, evaluate_only: bool = False) -> None:  # fmt: skip
        self.spec, self.slot, self.number, self.seed = spec, slot, number, seed
        self.values, self.resume_run, self.evaluate_only = values, resume_run, evaluate_only
        self.run_name = f"t{number:04d}_c{config:04d}_s{seed}"
        self.log = spec.sweep_dir / "logs" / f"trial_{number:04d}.log"
        self.proc: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.sweep_stopped = False
        self.killed = False
        self.run_dir: Path | None = None
        self.tail = MetricsTail()
        """What train has written so far (the sweep's progress line and the trial's trouble)."""

    def train_command(self) -> list[str]:
        cmd = [
            *python_command("mjfleet.cli.train"),
            self.spec.task,
            *self.spec.train_flags,
            *self.slot.train_flags,
        ]
        for p in self.spec.params:
            cmd += p.flags(self.values[p.path])
        cmd += [
            "--seed",
            str(self.seed),
            "--logs-root",
            str(self.spec.runs_root),
            "--run-name",
            self.run_name,
        ]
        if self.spec.prune_interval:
            cmd += ["--eval-interval", str(self.spec.prune_interval)]
        if self.resume_run:
            cmd += ["--load-run", self.resume_run]
        return cmd

    def play_command(self, run_dir: Path) -> list[str]:
        return [*python_command("mjfleet.cli.play"), self.spec.task, "--load-run", str(run_dir),
                *self.slot.play_flags, *self.spec.eval_flags]  # fmt: skip

    def stop(self, by_sweep: bool = True, signum: int = signal.SIGINT) -> None:
        """Ask train to stop after its current iteration (SIGINT or SIGTERM: it saves a checkpoint), once.
        `by_sweep`: the sweep is stopping (not this trial's budget or pruner), so an evaluation that it ends leaves
        the trial interrupted, to be evaluated again on resume, not failed."""
        self.sweep_stopped = self.sweep_stopped or by_sweep
        if not self.stopping.is_set():
            self.stopping.set()
            self._signal(signum)

    def kill(self) -> None:
        self.killed = True
        self._signal(signal.SIGKILL, group=True)

    def _signal(self, signum: int, group: bool = False) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signum) if group else proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def _start(self, cmd: list[str]) -> subprocess.Popen:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("a")
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # Restarted, a Slurm job's train continues that job's newest run on its own (runs/continuation.py): in a
        # requeued sweep every trial would continue the same one. The sweep continues its trials itself.
        env.pop("SLURM_RESTART_COUNT", None)
        # A session of its own: the terminal's Ctrl-C reaches the sweep only, which stops its trials itself.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.close()
        self.proc = proc
        return proc

    def find_run_dir(self) -> Path | None:
        if self.run_dir is None:
            found = sorted(self.spec.runs_root.glob(f"*/*_{self.run_name}"))
            self.run_dir = found[-1] if found else None
        return self.run_dir

    def run(self, on_run_dir=None, prune=None) -> Outcome:
        """Train, then evaluate. `on_run_dir(path)` is told the run directory once it exists; `prune(iteration,
        value) -> bool` judges each periodic evaluation (True: stop the trial as pruned)."""
        if self.evaluate_only and self.resume_run:
            # Its evaluation was interrupted after train reached the budget: train would refuse to go on ("already
            # at iteration N"), and there is nothing to train; the same run is evaluated again.
            run_dir = Path(self.resume_run)
            if on_run_dir is not None:
                on_run_dir(str(run_dir))
            return self._evaluate(
                run_dir, {"run_dir": str(run_dir), "iterations": len(read_metrics(run_dir))}
            )
        started = time.monotonic()
        proc = self._start(self.train_command())
        deadline = started + self.spec.minutes * 60 if self.spec.minutes else None
        budget_stop = pruned = False
        reported = 0
        while proc.poll() is None:
            time.sleep(POLL_S)
            if self.run_dir is None and self.find_run_dir() is not None and on_run_dir is not None:
                on_run_dir(str(self.run_dir))
            self.tail.poll(self.run_dir)
            if deadline is not None and time.monotonic() > deadline and not self.stopping.is_set():
                budget_stop = True
                self.stop(by_sweep=False)
            if prune is not None and self.run_dir is not None and not self.stopping.is_set():
                records = read_metrics(self.run_dir)
                for record in records[reported:]:
                    value = record.get(prune.key)
                    if value is not None and prune(int(record["iteration"]), float(value)):
                        pruned = True
                        self.stop(by_sweep=False)
                reported = len(records)
        rc = proc.returncode
        run_dir = self.find_run_dir()
        self.tail.poll(run_dir)
        if run_dir is not None and on_run_dir is not None:
            on_run_dir(str(run_dir))
        iterations = len(read_metrics(run_dir)) if run_dir is not None else 0
        base = {"run_dir": str(run_dir) if run_dir else None, "iterations": iterations}
        if self.killed:
            return Outcome("interrupted", reason="interrupted: the sweep was stopped twice (killed)", **base)
        if pruned:
            return Outcome("pruned", reason="pruned by the median pruner", **base)
        stopped_by_us = self.stopping.is_set() and rc in (128 + signal.SIGINT, 0)
        if self.stopping.is_set() and not budget_stop and rc != 0:
            return Outcome("interrupted", reason="interrupted: the sweep was stopped", **base)
        if rc != 0 and not (budget_stop and stopped_by_us):
            return Outcome("failed", reason=f"train {exit_reason(rc)}: {last_error_line(self.log)}", **base)
        if run_dir is None or not checkpoints_in(run_dir):
            return Outcome("failed", reason="train ended without a checkpoint to evaluate", **base)
        return self._evaluate(run_dir, base)

    def _evaluate(self, run_dir: Path, base: dict[str, Any]) -> Outcome:
        proc = self._start(self.play_command(run_dir))
        rc = proc.wait()
        # Ctrl-C reaches play through stop(); Slurm's SIGTERM (a requeue) reaches it directly, with the sweep's.
        if self.killed or (rc != 0 and self.sweep_stopped):
            return Outcome("interrupted", reason="interrupted during its evaluation", trained=True, **base)
        if rc != 0:
            return Outcome("failed", reason=f"play {exit_reason(rc)}: {last_error_line(self.log)}", **base)
        summary = json.loads((run_dir / "eval.json").read_text())
        value = self.spec.objective.value(summary)
        if not usable(value):
            shown = "missing" if value is None else str(value)
            return Outcome(
                "failed",
                reason=f"the evaluation's {self.spec.objective.name} is {shown}",
                summary=summary,
                **base,
            )
        assert value is not None
        return Outcome("complete", value=value, summary=summary, **base)


def read_metrics(run_dir: Path | None) -> list[dict[str, Any]]:
    """metrics.jsonl's complete lines (runs.plots.read_metrics); none while train has not written it yet."""
    if run_dir is None or not (run_dir / "metrics.jsonl").exists():
        return []
    return plots.read_metrics(run_dir)


def exit_reason(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    if rc > 128 and rc - 128 in set(signal.Signals):
        return f"ended by {signal.Signals(rc - 128).name}"
    return f"exited with status {rc}"


def last_error_line(log: Path) -> str:
    """The line of a trial's log that says what went wrong: the last `<prog>: error:` line, else the last line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if ": error:" in line:
            return line
    return lines[-1] if lines else "(no output)"
