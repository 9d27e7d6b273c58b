"""`uv run train <Task> [flags]`: train a task with PPO, in one process or on several workers."""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

import tyro

from mjfleet.cli.common import quiet_warp, split_task, user_errors, with_task_configs
from mjfleet.envs import EnvConfig
from mjfleet.errors import UsageError
from mjfleet.launch.devices import WorkerPlan, make_plan, parse_gpu_ids
from mjfleet.launch.launcher import run_workers
from mjfleet.rl import AgentConfig
from mjfleet.runs import RunDir

PROG = "train"
USAGE = """usage: train <Task> [flags]

Train a policy with PPO on a MuJoCo-Warp task.
  train Cartpole-Balance                           GPU 0 if there is one, else CPU
  train Cartpole-Balance --gpu-ids 0 1             one worker per GPU (or: all)
  train Cartpole-Balance --gpu-ids None --cpu-workers 2   CPU data-parallel (gloo)
  train <Task> --help                              every flag of that task"""


@dataclass
class TrainFlags:
    """Train a policy with PPO. Every env and agent setting of the task is a flag (--env.*, --agent.*)."""

    gpu_ids: tuple[str, ...] = ("auto",)
    """GPUs to train on, one worker each: `0 1`, `"[0, 1]"`, `all`, or `None`/`cpu` for CPU. auto: GPU 0 if
    CUDA is available, else CPU. Ids index into CUDA_VISIBLE_DEVICES when it is set."""
    cpu_workers: int = 1
    """With --gpu-ids None: number of CPU worker processes (gloo data-parallel)."""
    hosts: tuple[str, ...] = ("localhost",)
    """Machines to run on (`h1 h2`, or `slurm`); each runs one worker per selected GPU. See docs/distributed.md."""
    num_envs: int | None = None
    """Environments per worker (alias of --env.num-envs). Default: the task's default for the device."""
    seed: int | None = None
    """Base seed (alias of --agent.seed); worker k uses seed + k."""
    max_iterations: int | None = None
    """PPO iterations (alias of --agent.max-iterations)."""
    run_name: str | None = None
    """Suffix of the run directory (alias of --agent.run-name)."""
    logs_root: str = "logs"
    """Run directories go to <logs-root>/<experiment>/<timestamp>[_<run-name>]/."""
    log_format: Literal["block", "compact"] = "block"
    """Console progress: a short block per iteration, or one line with ETA."""
    torchrunx_log_dir: str | None = None
    """Worker log files (several workers only). Default: $TORCHRUNX_LOG_DIR, else <run_dir>/torchrunx. "" disables."""


@dataclass(frozen=True)
class TrainJob:
    """Everything a worker needs, resolved once in the launching process."""

    task: str
    env: EnvConfig
    agent: AgentConfig
    plan: WorkerPlan
    run_dir: RunDir
    log_format: str = "block"


def parse_args(argv: list[str]) -> tuple[str, Any]:
    """(task name, parsed flags) from the command line."""
    from mjfleet.tasks import get_task

    task_name, rest = split_task(argv, PROG, USAGE)
    spec = get_task(task_name)
    flags_type = with_task_configs(TrainFlags, spec.env_config(), spec.agent_config(), "TrainConfig")
    flags = tyro.cli(flags_type, args=rest, prog=f"{PROG} {spec.name}", description=spec.description)
    return spec.name, flags


def resolve(task_name: str, flags: Any) -> TrainJob:
    """Apply aliases and device defaults, check values, pick the run directory."""
    from mjfleet.tasks import get_task

    spec = get_task(task_name)
    gpu_tokens = None if list(flags.gpu_ids) == ["auto"] else list(flags.gpu_ids)
    plan = make_plan(parse_gpu_ids(gpu_tokens), cpu_workers=flags.cpu_workers, hosts=list(flags.hosts))
    if plan.notice:
        print(plan.notice)
    env, agent = flags.env, flags.agent
    for alias, target, field in (
        (flags.num_envs, env, "num_envs"),
        (flags.seed, agent, "seed"),
        (flags.max_iterations, agent, "max_iterations"),
        (flags.run_name, agent, "run_name"),
    ):
        if alias is not None:
            setattr(target, field, alias)
    if env.num_envs is None:
        env.num_envs = spec.default_num_envs(plan.devices[0])
    if env.num_envs < 1:
        raise UsageError(f"--num-envs must be >= 1, got {env.num_envs}")
    if agent.max_iterations < 1:
        raise UsageError(f"--max-iterations must be >= 1, got {agent.max_iterations}")
    if env.decimation < 1:
        raise UsageError(f"--env.decimation must be >= 1, got {env.decimation}")
    if agent.save_interval < 1:
        raise UsageError(f"--agent.save-interval must be >= 1, got {agent.save_interval}")
    batch = env.num_envs * agent.num_steps_per_env
    if agent.algorithm.num_mini_batches < 1 or batch < agent.algorithm.num_mini_batches:
        raise UsageError(
            f"--agent.algorithm.num-mini-batches must be in [1, num_envs x num_steps_per_env = {batch}]"
        )
    run_dir = RunDir.new(agent.experiment_name, agent.run_name, root=flags.logs_root)
    return TrainJob(spec.name, env, agent, plan, run_dir, flags.log_format)


def train_worker(job: TrainJob) -> dict[str, Any]:
    """Runs in every worker: build the simulation on this worker's device, train, return rank 0's summary."""
    import torch
    import warp as wp

    from mjfleet.launch.worker import WorkerContext, seed_for, setup_worker
    from mjfleet.rl import FleetRunner
    from mjfleet.tasks import get_task

    quiet_warp()
    ctx = WorkerContext.from_env(job.plan)
    setup_worker(ctx, job.plan)
    seed = seed_for(job.agent.seed, ctx)
    torch.manual_seed(seed)
    spec = get_task(job.task)
    if ctx.is_main:
        print(
            f"{job.task}: {ctx.world_size} worker{'s' if ctx.world_size > 1 else ''} x {job.env.num_envs} envs = "
            f"{ctx.world_size * job.env.num_envs} envs on {job.plan.describe()}; run dir {job.run_dir.path}",
            flush=True,
        )
    with wp.ScopedDevice(ctx.device):
        wp.rand_init(seed)
        env = spec.make_env(job.env, ctx.device)
        runner = FleetRunner(
            env,
            job.agent,
            job.run_dir if ctx.is_main else None,
            ctx.device,
            extra_checkpoint_info={"task": job.task, "env_cfg": dataclasses.asdict(job.env)},
            log_format=job.log_format,
        )
        if ctx.is_main:
            job.run_dir.create()
            job.run_dir.write_params(
                env=job.env,
                agent=job.agent,
                run={
                    "task": job.task,
                    "world_size": ctx.world_size,
                    "devices": list(job.plan.devices),
                    "hosts": list(job.plan.hosts),
                    "seed": job.agent.seed,
                    "command": sys.argv,
                },
            )
        start = time.perf_counter()
        try:
            record = runner.learn(
                job.agent.max_iterations, init_at_random_ep_len=job.agent.init_at_random_ep_len
            )
        finally:
            runner.close()
    return {
        "iterations": runner.current_learning_iteration,
        "env_steps": runner.env_steps,
        "train_time_s": time.perf_counter() - start,
        "mean_return": record.get("mean_return"),
        "mean_episode_length": record.get("mean_episode_length"),
        "run_dir": str(job.run_dir.path),
    }


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    quiet_warp()
    task_name, flags = parse_args(sys.argv[1:] if argv is None else argv)
    job = resolve(task_name, flags)
    log_dir = flags.torchrunx_log_dir
    if log_dir is None:
        log_dir = str(job.run_dir.path / "torchrunx")
    start = time.perf_counter()
    summary = run_workers(job.plan, train_worker, job, log_dir=log_dir)
    wall = time.perf_counter() - start
    print(
        f"done: {summary['iterations']} iterations, {summary['env_steps']:,} env steps in {wall:.1f} s "
        f"(training {summary['train_time_s']:.1f} s); final mean return {summary['mean_return']:.2f}, "
        f"mean episode length {summary['mean_episode_length']:.1f}; run written to {summary['run_dir']}"
    )


if __name__ == "__main__":
    main()
