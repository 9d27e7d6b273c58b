"""Slurm around a run: the allocation's hosts (`--hosts slurm`, in hosts.py), the job a run belongs to, and the
requeue before the time limit that lets the job continue its run. A task of an srun step joining as a worker is
fleet/srun.py's.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from mjfleet.fleet.srun import SlurmError, count, scontrol


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job this process runs in."""

    job_id: str
    step_id: str | None
    """The srun step (0, 1, ... in the order the batch script starts them; None in the batch script itself)."""
    restart_count: int
    """How many times Slurm requeued the job (SLURM_RESTART_COUNT, 0 on the first start)."""

    def run_fields(self) -> dict[str, str | int | None]:
        """What params/run.yaml records of the job, to find the run again after a requeue."""
        return {
            "slurm_job_id": self.job_id,
            "slurm_step_id": self.step_id,
            "slurm_restart_count": self.restart_count,
        }


def current_job(environ: Mapping[str, str] | None = None) -> SlurmJob | None:
    """The job this process runs in, or None outside Slurm."""
    env = os.environ if environ is None else environ
    job_id = (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip()
    if not job_id:
        return None
    step = (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "").strip() or None
    return SlurmJob(job_id, step, count(env, "SLURM_RESTART_COUNT", default=0))


WARNING_SIGNAL = signal.SIGUSR1
"""The signal scripts/slurm/train.sbatch asks Slurm to send before the time limit (`--signal=B:USR1@...`): the
workers save and stop as on SIGTERM, and then the job requeues itself, so that it continues this run."""


def requeue_before_time_limit(signum: int, environ: Mapping[str, str] | None = None) -> str | None:
    """After a stop by :data:`WARNING_SIGNAL` inside a Slurm job: `scontrol requeue` this job and return a line
    saying so (or why not); None for any other stop, or outside Slurm."""
    job = current_job(environ)
    if signum != WARNING_SIGNAL or job is None:
        return None
    try:
        scontrol("requeue", job.job_id)
    except SlurmError as exc:
        return f"could not requeue Slurm job {job.job_id} ({exc}); resubmit it to continue"
    return f"requeued Slurm job {job.job_id}: when it starts again it continues this run from its latest checkpoint"
