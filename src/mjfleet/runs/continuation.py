"""Continuing a run after its Slurm job was requeued (preemption, `scontrol requeue`, a requeue before the time
limit): the same job id, restarted, finds the run directory it started and that run's latest checkpoint.

Keyed on the job, not on "the newest run": a requeued job must never pick up another job's run, and the same
batch script, unchanged, must start fresh on its first start. Slurm counts restarts (SLURM_RESTART_COUNT), so a
first start never continues anything, even when an earlier command of the same job trained the same experiment.
"""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass

import yaml

from mjfleet import atomic
from mjfleet.runs.checkpoints import checkpoints_in, runs_in


@dataclass(frozen=True)
class Continuation:
    """The run a restarted job continues, and where."""

    run_path: pathlib.Path
    checkpoint: pathlib.Path | None
    """Its latest checkpoint; None when the job stopped before the first save (the run starts over in it)."""


def find_job_run(
    experiment_dir: str | os.PathLike, job_id: str, step_id: str | None = None
) -> Continuation | None:
    """The newest run of the experiment whose params/run.yaml records Slurm job `job_id` (and step `step_id`,
    when both know theirs), or None."""
    for run in reversed(runs_in(experiment_dir)):
        recorded = _run_yaml(run)
        if str(recorded.get("slurm_job_id")) != str(job_id):
            continue
        recorded_step = recorded.get("slurm_step_id")
        if step_id is not None and recorded_step is not None and str(recorded_step) != str(step_id):
            continue
        found = checkpoints_in(run)
        return Continuation(run.resolve(), found[-1][1].resolve() if found else None)
    return None


def trim_metrics(metrics_file: pathlib.Path, before_iteration: int) -> int:
    """Drop the records of iterations at or after `before_iteration` (trained after the checkpoint the run
    continues from, so trained again); returns how many were dropped. A cut-off last line goes too."""
    if not metrics_file.exists():
        return 0
    kept, dropped = [], 0
    for line in metrics_file.read_text().splitlines():
        try:
            iteration = int(json.loads(line)["iteration"])
        except (ValueError, KeyError, TypeError):
            dropped += 1
            continue
        if iteration < before_iteration:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        atomic.write_text(metrics_file, "".join(f"{line}\n" for line in kept))
    return dropped


def _run_yaml(run: pathlib.Path) -> dict:
    try:
        data = yaml.safe_load((run / "params" / "run.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def continuation_for(experiment_dir: str | os.PathLike, job) -> Continuation | None:
    """The run a restarted Slurm `job` (a :class:`mjfleet.launch.slurm.SlurmJob`, or None outside Slurm)
    continues, announced in one line; None on a first start, outside Slurm, or when the job saved no run yet."""
    if job is None or job.restart_count < 1:
        return None
    found = find_job_run(experiment_dir, job.job_id, job.step_id)
    restarted = (
        f"Slurm job {job.job_id} restarted ({job.restart_count} time{'s' if job.restart_count > 1 else ''})"
    )
    if found is None:
        print(f"{restarted}: it wrote no run of this experiment yet, so this is a fresh run", flush=True)
        return None
    start = f"from {found.checkpoint}" if found.checkpoint else "from iteration 0 (it saved no checkpoint)"
    print(f"continuing run {found.run_path}: {restarted}; resuming {start}", flush=True)
    return found
