"""Training as one worker of an external launcher (torchrun, or srun with RANK, WORLD_SIZE, MASTER_ADDR set)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

from mjfleet.errors import UsageError
from mjfleet.fleet.context import start_worker
from mjfleet.fleet.external import leave_together
from mjfleet.launch.devices import external_plan, parse_gpu_ids
from mjfleet.train.job import TrainJob, reserve_run_dir, resolve


def train_under_external_launcher(
    task_name: str,
    flags: Any,
    argv: list[str],
    run_and_report: Callable[[TrainJob, Callable[[], dict[str, Any]], bool], None],
) -> None:
    """`torchrun --nproc_per_node N $(which train) ...`: this process is one worker of the launcher's process group.
    Rank 0 resolves the job and reserves the run directory; every rank trains that same job, so there is one run
    directory with one writer, as with `--cpu-workers`. `run_and_report(job, run, is_main)` runs and reports."""
    import torch.distributed as dist

    from mjfleet.train.worker import train

    tokens = None if list(flags.gpu_ids) == ["auto"] else list(flags.gpu_ids)
    if flags.workers_per_gpu != 1:
        raise UsageError(
            "--workers-per-gpu does not apply under a launcher such as torchrun: it placed the workers"
        )
    cpu_workers = 1 if flags.cpu_workers is None else flags.cpu_workers
    plan = external_plan(parse_gpu_ids(tokens), cpu_workers, list(flags.hosts), flags.threads)
    ctx = start_worker(plan)
    try:
        job = _agree_on_job(ctx, plan, task_name, flags, argv)
        try:
            run_and_report(job, lambda: train(job, ctx), ctx.is_main)
        except SystemExit as exc:
            if isinstance(exc.code, int) and exc.code >= 128:  # stopped by a signal
                leave_together()  # no rank exits (and gets srun to kill rank 0) before rank 0 has saved
            raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if not ctx.is_main:
        # A finished rank can abort at interpreter exit in torch's C++ teardown ("terminate called without an
        # active exception", exit 134: under Slurm on 2026-11-26, after the run's last iteration), which turns a
        # completed job into a failed one. This rank writes no files and has nothing left to do at exit.
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)


def _agree_on_job(ctx, plan, task_name: str, flags: Any, argv: list[str]) -> TrainJob:
    """Rank 0 resolves the job (its run directory, its resume choice); the others resolve the same flags without
    choosing or reserving anything, then take rank 0's run directory and checkpoint, sent as JSON. A usage error
    on rank 0 ends every rank (rank 0 says why)."""
    from mjfleet.fleet.reduce import broadcast_json

    agreed: dict[str, Any] = {}
    if ctx.is_main:
        if plan.notice:
            print(plan.notice)
        try:
            job = reserve_run_dir(dataclasses.replace(resolve(task_name, flags, plan), command=tuple(argv)))
            agreed = {"run_dir": str(job.run_dir.path), "resume_from": job.resume_from}
        except UsageError as exc:
            agreed = {"error": str(exc)}
            error = exc
    agreed = broadcast_json(agreed, ctx.group)
    if "error" in agreed:
        if ctx.is_main:
            raise error
        raise SystemExit(2)  # rank 0 says why
    if ctx.is_main:
        return job
    return _same_job(task_name, flags, plan, argv, agreed)


def _same_job(task_name: str, flags: Any, plan, argv: list[str], agreed: dict[str, Any]) -> TrainJob:
    """The job rank 0 resolved, rebuilt from the same flags on this rank, resuming from the checkpoint file rank 0
    chose (so that the networks take its shapes alike) and writing to rank 0's run directory; quietly (rank 0
    printed the notices)."""
    import contextlib
    import io
    import pathlib

    from mjfleet.runs import RunDir

    resume_from = agreed["resume_from"]
    same = dataclasses.replace(
        flags, resume=resume_from is not None, load_run=None, checkpoint=resume_from, wandb_run_path=None
    )
    with contextlib.redirect_stdout(io.StringIO()):
        job = resolve(task_name, same, plan)
    return dataclasses.replace(
        job,
        run_dir=RunDir(pathlib.Path(agreed["run_dir"])),
        resume_from=resume_from,
        command=tuple(argv),
    )
