"""The body of every training worker: build the environment on this worker's device, wire the job's hooks into a
`FleetRunner`, train, and return rank 0's summary."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from mjfleet.fleet.context import WorkerContext, seed_for, start_worker
from mjfleet.launch.launcher import Interrupted
from mjfleet.runs import RunDir
from mjfleet.train.job import TrainJob


def train_worker(job: TrainJob) -> dict[str, Any]:
    """Entry point of a worker that `run_workers` started: this worker's context, then `train`."""
    from mjfleet.warp_log import quiet_warp

    quiet_warp()
    return train(job, start_worker(job.plan))


def train(job: TrainJob, ctx: WorkerContext) -> dict[str, Any]:
    """Train `job` as the worker `ctx`; returns the summary `train` reports (rank 0's counts it).

    SIGINT/SIGTERM make every rank finish its iteration; rank 0 saves, and each worker raises
    :class:`Interrupted` (in a torchrunx worker that ends the process at once, with status 128 + the signal).
    """
    import torch
    import warp as wp

    from mjfleet.rl.runner import FleetRunner
    from mjfleet.rl.stop import StopRequest
    from mjfleet.runs.plots import plot_run
    from mjfleet.sim.simulation import compile_notices
    from mjfleet.tasks import get_task
    from mjfleet.tasks.plugins import load_task_modules
    from mjfleet.train.hooks import JobHooks

    load_task_modules(job.task_modules)
    torch.manual_seed(seed_for(job.agent.seed, ctx))
    spec = get_task(job.task)
    num_envs = job.env.num_envs
    assert num_envs is not None  # resolve() filled in the device default
    # From here on a signal asks for a clean stop after the current iteration (one iteration at least runs).
    stop = StopRequest(abort_on_repeat=job.plan.in_process, announce=ctx.is_main)
    with stop, wp.ScopedDevice(ctx.device), compile_notices(ctx.is_main):
        env = _make_env(spec, job, ctx.device)
        if ctx.is_main:  # only once the environment stands: a model that cannot be simulated names no run dir
            print(
                f"{job.task}: {ctx.world_size} worker{'s' if ctx.world_size > 1 else ''} x {num_envs} envs = "
                f"{ctx.world_size * num_envs} envs on {job.plan.describe()}; run dir {job.run_dir.path}",
                flush=True,
            )
        hooks = JobHooks(job, ctx, spec, env)
        runner = FleetRunner(
            env,
            job.agent,
            job.run_dir if ctx.is_main else None,
            context=ctx,
            hooks=hooks.runner_hooks,
            stop=stop,
            log_format=job.log_format,
            update_threads=job.plan.update_threads,
            checkpoint_info={"task": job.task, "env_cfg": dataclasses.asdict(job.env)},
        )
        hooks.attach(runner)
        if job.resume_from is not None:
            runner.load(job.resume_from, map_location=runner.device)
        start_iteration, start_env_steps = runner.current_learning_iteration, runner.env_steps
        if ctx.is_main:
            print(runner.describe(), flush=True)
            _write_run_params(job, ctx, runner.reducer_name, start_iteration)
        start = time.perf_counter()
        try:
            record = runner.learn(
                job.agent.max_iterations - start_iteration,
                init_at_random_ep_len=job.agent.init_at_random_ep_len,
            )
        finally:
            runner.close()
        if ctx.is_main:
            plot_run(job.run_dir)
    if runner.interrupted is not None:
        raise Interrupted(runner.interrupted)
    return {
        "iterations": runner.current_learning_iteration,
        "start_iteration": start_iteration,  # > 0 when resumed: the counts below include the checkpoint's
        "env_steps": runner.env_steps,
        "start_env_steps": start_env_steps,
        "train_time_s": time.perf_counter() - start,
        "mean_return": record.get("mean_return"),
        "mean_episode_length": record.get("mean_episode_length"),
        "run_dir": str(job.run_dir.path),
    }


def _make_env(spec, job: TrainJob, device: str):
    """The job's environment. A model MuJoCo-Warp cannot simulate (a robot file's solver, integrator, actuator or
    geom type it lacks: mujoco_warp.put_model's NotImplementedError) is the user's to change: a UsageError."""
    from mjfleet.errors import UsageError, first_line

    try:
        return spec.make_env(job.env, device)
    except NotImplementedError as exc:
        raise UsageError(f"{job.task}: MuJoCo-Warp cannot simulate this model: {first_line(exc)}") from None


def _write_run_params(job: TrainJob, ctx: WorkerContext, reducer: str | None, start_iteration: int) -> None:
    """Rank 0: create the run directory and write params/*.yaml (settings, the run's facts, versions, git)."""
    job.run_dir.create()
    _write_provenance(job.run_dir)
    job.run_dir.write_params(
        env=job.env,
        agent=job.agent,
        run={
            "task": job.task,
            "world_size": ctx.world_size,
            "devices": list(job.plan.devices),
            "hosts": list(job.plan.hosts),
            "gradient_reducer": reducer,
            "seed": job.agent.seed,
            "resumed_from": job.resume_from,
            "start_iteration": start_iteration,
            "keep_last": job.retention.keep_last,
            "keep_every": job.retention.keep_every,
            "command": list(job.command) if job.command else sys.argv,
            **(job.slurm or {}),
        },
    )


def _write_provenance(run_dir: RunDir) -> None:
    """params/versions.yaml, and inside a git repository params/git.yaml (commit, dirty) and params/git.diff."""
    from mjfleet.runs.provenance import git_state, versions

    state = git_state()
    if state is not None:
        run_dir.write_params(git=state[0])
        if state[0]["dirty"]:
            (run_dir.path / "params" / "git.diff").write_text(state[1])
    run_dir.write_params(versions=versions())
