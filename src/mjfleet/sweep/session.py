"""A sweep from its checked plan to its report: open the study, recover interrupted trials when resumed or
requeued, run the slots, write the report, say how to continue a stopped sweep."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from mjfleet import atomic
from mjfleet.launch.slurm import requeue_before_time_limit
from mjfleet.progress import Progress
from mjfleet.sweep.checks import SweepPlan
from mjfleet.sweep.report import ranking_table, write_report
from mjfleet.sweep.runner import SweepRunner
from mjfleet.sweep.status import SweepStatus, done_before
from mjfleet.sweep.study import TrialQueue, open_storage, open_study, storage_url

STOPPED_STATUS = 130


def run_session(plan: SweepPlan, argv: list[str], resume: bool, quiet: bool = False) -> None:
    """Run the sweep to its end or its stop. `quiet`: only each trial's line and the final summary."""
    storage = open_storage(plan.storage_url)  # unreachable: one line, before any trial
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    record = plan.sweep_dir / "sweep.json"
    if not record.exists():
        atomic.write_text(record, json.dumps({"argv": argv, "storage": plan.storage_url}, indent=2) + "\n")
    study = open_study(storage, plan.spec.objective, plan.sampler, plan.pruner)
    queue = TrialQueue(study, storage, plan.spec.params, plan.configs, plan.seeds, plan.first_seed)
    requeued = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0
    if resume or requeued:
        again = queue.recover(stale=True)
        if again and not quiet:
            print(
                f"sweep: continuing interrupted trial(s) {', '.join(map(str, again))} from their checkpoints"
            )
    slots = ", ".join(s.name for s in plan.slots)
    if not quiet:
        print(f"sweep: {plan.sweep_dir}: {plan.configs} configuration(s) x {plan.seeds} seed(s) of "
              f"{plan.spec.task} on {len(plan.slots)} slot(s) ({slots}); study: {plan.storage_url}", flush=True)  # fmt: skip
    total = plan.configs * plan.seeds
    status = SweepStatus(total, done_before(study.get_trials(deepcopy=False)), len(plan.slots),
                         plan.spec.iterations, plan.spec.env_steps, plan.spec.minutes, clock=time.monotonic)  # fmt: skip
    # On stdout, where the trials' lines and the ranking go: one stream keeps a log (Slurm's, nohup's) in order.
    bar = Progress("sweep", total=total, unit="trials", done=status.done, quiet=quiet, stream=sys.stdout)
    with bar:
        runner = SweepRunner(plan.spec, plan.slots, queue, prune=plan.prune, bar=bar, status=status)
        stopped = runner.run()
    command = shlex.join(["uv", "run", "sweep", *argv])
    results = write_report(study, plan.spec.objective, plan.sweep_dir, command)
    print(ranking_table(results, plan.spec.objective))
    print(f"sweep: report written to {plan.sweep_dir / 'report'}")
    if stopped:
        print(f"sweep: stopped; continue with: uv run sweep --resume {plan.sweep_dir}", flush=True)
        requeued = requeue_before_time_limit(runner.stop_signal or 0)  # Slurm's time-limit warning
        if requeued is not None:
            print(f"sweep: {requeued}", flush=True)
        raise SystemExit(STOPPED_STATUS)


def report_only(task: str, flags: Any, sweep_dir: Path, argv: list[str]) -> None:
    """The report of a sweep's study as it is now (while it runs, or after)."""
    import optuna

    from mjfleet.sweep.objective import parse_objective
    from mjfleet.sweep.study import STUDY_NAME

    objective = parse_objective(flags.objective, flags.direction)
    storage = open_storage(storage_url(sweep_dir, flags.storage))
    study = optuna.load_study(study_name=STUDY_NAME, storage=storage)
    results = write_report(study, objective, sweep_dir, shlex.join(["uv", "run", "sweep", *argv]))
    print(ranking_table(results, objective))
    print(f"sweep: report written to {sweep_dir / 'report'}")
