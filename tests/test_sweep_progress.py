"""What `sweep` shows while it runs, without training: a running trial's metrics read as they are appended, the
status line and its ETA from the budget, and each trial's line with its physics trouble. The real sweep under a
terminal and a pipe is in tests/test_sweep_run.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import needs_infrastructure

from mjfleet.progress import Progress
from mjfleet.sweep.status import Running, SweepStatus
from mjfleet.sweep.watch import MetricsTail

try:
    import optuna
except ImportError:  # the sweep extra is not installed: tests that need it skip (fail under CI)
    optuna = None
NEEDS_OPTUNA = needs_infrastructure(
    lambda: None if optuna else "the sweep extra is missing: uv sync --extra sweep"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(iteration: int, steps_per_iteration: int = 1000, **extra: float) -> dict:
    return {"iteration": iteration, "env_steps": (iteration + 1) * steps_per_iteration,
            "mean_return": 10.0 * iteration, **extra}  # fmt: skip


def append(run_dir: Path, text: str) -> None:
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write(text)


def test_a_running_trials_metrics_are_read_once_each_and_a_half_written_line_waits(tmp_path):
    clock, tail = Clock(), MetricsTail()
    tail.clock = clock
    assert tail.poll(tmp_path) == 0 and tail.iterations_done == 0  # train has not written yet
    first, second = json.dumps(record(0)), json.dumps(record(1))
    append(tmp_path, first + "\n" + second[:20])
    assert tail.poll(tmp_path) == 1 and tail.iterations_done == 1
    clock.now += 4.0
    append(tmp_path, second[20:] + "\n")
    assert tail.poll(tmp_path) == 1 and tail.iterations_done == 2 and tail.mean_return == 10.0
    assert tail.poll(tmp_path) == 0 and tail.records == 2
    assert tail.seconds_per_iteration() == pytest.approx(4.0)


def test_the_eta_is_the_budgets_work_left_over_the_slots():
    clock = Clock()
    status = SweepStatus(total=6, done=1, slots=2, iterations=10, clock=clock)
    status.startups, status.endings = [5.0], [15.0]  # measured on earlier trials
    tail = MetricsTail(clock)
    running = {3: Running(3, started=clock.now, tail=tail)}
    assert status.seconds_left(running) is None  # no iteration timed yet: no estimate shown
    for i in range(4):  # iterations 0..3, 2 s apart
        clock.now += 2.0
        tail._add(record(i))
    # running: 6 iterations x 2 s + 15 s after training; 4 queued: 5 + 10 x 2 + 15 s each; over 2 slots
    assert status.seconds_left(running) == pytest.approx((6 * 2 + 15 + 4 * (5 + 20 + 15)) / 2)
    assert status.text(running) == "1 running, 4 left; trial 3 it 4/10 return 30"


def test_an_env_step_budget_becomes_iterations_from_the_trials_steps_per_iteration():
    status = SweepStatus(total=1, done=0, slots=1, iterations=None, env_steps=10_000)
    tail = MetricsTail()
    tail._add(record(0, steps_per_iteration=3000))
    assert status.budget(tail) == 4


@NEEDS_OPTUNA
def test_a_trials_line_names_its_physics_trouble_and_warns_when_it_passes_the_threshold(tmp_path):
    from mjfleet.sweep.objective import parse_objective
    from mjfleet.sweep.runner import SweepRunner
    from mjfleet.sweep.slots import Slot
    from mjfleet.sweep.study import TrialQueue
    from mjfleet.sweep.trial import Outcome, SweepSpec

    append(tmp_path, "".join(json.dumps(r) + "\n" for r in [
        record(0, **{"Sim/nan_resets": 5.0, "Metrics/sim_solver_limit": 0.0}),
        record(1, **{"Sim/nan_resets": 0.0, "Metrics/sim_solver_limit": 0.0006}),
        record(2, **{"Sim/nan_resets": 10.0, "Metrics/sim_solver_limit": 0.0}),
    ]))  # fmt: skip
    tail = MetricsTail()
    tail.poll(tmp_path)
    study = optuna.create_study(direction="maximize")
    queue = TrialQueue(study, None, [], configs=1, seeds=1, seed=0)
    spec = SweepSpec("Cartpole-Balance", (), parse_objective("mean_return", "auto"), tmp_path, ())
    slot, log = Slot("cpu0", (), ()), io.StringIO()
    runner = SweepRunner(spec, [slot], queue, bar=Progress("sweep", stream=log, quiet=True))
    nxt = queue.next()
    runner._tell(nxt.trial, Outcome("complete", value=231.0), 0, 0, slot, 12.0, tail)
    first, warning = log.getvalue().splitlines()
    # 15 NaN resets in 3 iterations of 1,000 env steps; the solver at its limit in 0.02 % of steps on average
    assert first == (
        "sweep: trial 0 (config 0, seed 0) on cpu0: mean_return 231 (12 s); nan_resets 15 (0.50%)  solver_limit 0.02%"
    )
    assert warning.startswith(
        "sweep: trial 0: warning: nan_resets in 0.50% of env steps over its run: the physics"
    )
    assert study.trials[0].user_attrs["trouble"] == {
        "nan_resets": 0.005,
        "solver_limit": pytest.approx(0.0002),
    }
