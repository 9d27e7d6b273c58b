"""The measurements, as each worker makes them: physics, environment, rollout and training, timed in blocks.

Every worker runs :func:`bench_worker` (through :func:`mjfleet.launch.launcher.run_workers`). For each
environment count it builds the task's environment and an mjfleet runner, then times, in this order:

physics   ``Simulation.step()`` (one call = ``decimation`` captured physics steps = the physics of one env step),
          timed call by call inside env steps with random actions: the physics of the very states the
          environment visits (op-by-op steps, synchronised around each call on GPU);
env       ``env.step(random actions)``;
rollout   ``alg.act`` + ``env.step`` + ``alg.process_env_step``: data collection without the update;
training  full iterations through ``FleetRunner.learn`` (collection + update; PPO's or SAC's, as the agent
          config says), after one warm-up iteration. For SAC each iteration also counts its gradient steps.

Blocks start together on all workers (a collective acts as barrier) and the device is synchronised
around each, so a block's time on the slowest worker is the time the whole fleet took. Workers return raw
times, and the physics trouble the physics and training phases met (mjfleet.bench.phases says where it is
counted without touching the timings); :mod:`mjfleet.bench.report` turns them into rates and ratios. Rank 0
tells `BenchJob.on_phase` when each phase starts and ends, for the launching process's progress bar.
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mjfleet.bench import machine, report
from mjfleet.bench.phases import (
    WARMUP_STEPS,
    TroubleSum,
    sync,
    timed_blocks,
    timed_physics,
    timed_rollout,
    timed_training,
)
from mjfleet.bench.report import PHASES
from mjfleet.envs import EnvConfig
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.rl import AgentConfig


@dataclass(frozen=True)
class BenchJob:
    """What every worker measures; built once in the launching process."""

    task: str
    env: EnvConfig
    agent: AgentConfig
    plan: WorkerPlan
    sizes: tuple[int, ...]
    """Environments per worker, measured in this order (ascending: where a memory peak cannot be reset, the
    running peak is then the largest count's)."""
    steps: int = 100
    """Policy steps per timed block (physics, env, rollout)."""
    repeats: int = 3
    """Timed blocks per phase; reports use the best block and keep all of them."""
    iterations: int = 3
    """Timed PPO iterations (after one untimed warm-up iteration)."""
    phases: tuple[str, ...] = PHASES
    launch_time: float | None = None
    """time.time() when the launcher started the workers (several workers), for the start-up time."""
    quiet: bool = False
    """No progress lines from rank 0."""
    task_modules: tuple[str, ...] = ()
    """Modules (and a --robot file) that register tasks, imported by each worker before it looks up `task`."""
    on_phase: Callable[[int, str, bool], None] | None = None
    """Called by rank 0 as (env count, phase, finished) when a phase starts and ends ("build" only starts): the
    launching process's progress bar. Only for one worker in the launching process (it is not picklable)."""


def bench_worker(job: BenchJob) -> dict[str, Any] | None:
    """Runs in every worker; returns (on rank 0) every worker's raw measurements and start-up facts."""
    # Where the worker starts: the rendezvous, task imports and warp's initialisation below count as its build.
    startup: dict[str, Any] = {
        "process_age_at_start_s": machine.seconds_since_process_start(),
        "launch_to_worker_start_s": None if job.launch_time is None else time.time() - job.launch_time,
    }
    import warp as wp

    from mjfleet.fleet.context import seed_for, start_worker
    from mjfleet.tasks import get_task
    from mjfleet.tasks.plugins import load_task_modules
    from mjfleet.warp_log import quiet_warp

    quiet_warp()
    load_task_modules(job.task_modules)
    ctx = start_worker(job.plan)
    startup["rank"] = ctx.rank
    device = torch.device(ctx.device)
    spec = get_task(job.task)
    seed = seed_for(job.agent.seed, ctx)
    modules_before = machine.cached_modules()
    points = []
    with wp.ScopedDevice(ctx.device):
        for index, num_envs in enumerate(job.sizes):
            torch.manual_seed(seed)
            cfg = copy.deepcopy(job.env)
            cfg.num_envs = num_envs
            agent = copy.deepcopy(job.agent)
            # Memory peaks of this env count only (an in-process `--num-envs auto` sweep ran larger ones before).
            machine.reset_peak_rss()
            warp_high_before = None
            if device.type == "cuda":
                warp_high_before = machine.warp_mempool_high(ctx.device)
                torch.cuda.reset_peak_memory_stats(device)
            if job.on_phase is not None and ctx.is_main:
                job.on_phase(num_envs, "build", False)
            t_build = time.perf_counter()
            env = spec.make_env(cfg, ctx.device)
            runner = _make_runner(env, agent, ctx, job.plan.update_threads)
            build_s = time.perf_counter() - t_build
            actions = torch.zeros(env.num_envs, env.num_actions, device=device)
            env.step(actions)  # the first env step: start-up ends here
            sync(device)
            if index == 0:
                startup["first_env_step_s"] = machine.seconds_since_process_start()
                startup["launch_to_first_env_step_s"] = (
                    None if job.launch_time is None else time.time() - job.launch_time
                )
                startup["build_s"] = build_s
                startup["modules_compiled"] = len(machine.cached_modules() - modules_before)
            point = _measure_point(job, ctx, env, runner, device)
            point.update(num_envs=num_envs, build_s=build_s, rank=ctx.rank)
            if device.type == "cuda":
                # warp's high-water mark cannot be reset: it is this env count's only if this count raised it
                high = point["gpu_warp_peak_bytes"]
                if high is not None and warp_high_before is not None and high <= warp_high_before:
                    point["gpu_warp_peak_bytes"] = None
            points.append(point)
            if ctx.is_main and not job.quiet:
                print(report.progress_line(job.task, job.steps, point, ctx.world_size), flush=True)
            runner.close()
            del env, runner, actions
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()

    result = {"startup": startup, "points": points, "device": ctx.device, "rank": ctx.rank}
    gathered = _gather(result, ctx)
    if not ctx.is_main:
        return None
    return {
        "workers": ctx.world_size,
        "device": ctx.device,
        "device_name": machine.device_name(ctx.device),
        "threads_per_worker": torch.get_num_threads(),
        "plan": job.plan.describe(),
        "ranks": gathered,
    }


# --------------------------------------------------------------------------------------------- phases
def _measure_point(job: BenchJob, ctx, env, runner, device: torch.device) -> dict[str, Any]:
    notify = job.on_phase if ctx.is_main else None

    def phase(name: str, finished: bool) -> bool:
        if notify is not None and name in job.phases:
            notify(env.num_envs, name, finished)
        return name in job.phases

    point: dict[str, Any] = {
        "decimation": int(env.sim.substeps),
        "steps_per_block": job.steps,
        "steps_per_iteration": runner.agent_cfg.num_steps_per_env * env.num_envs,
        "gradient_reducer": runner.reducer_name,
    }
    n, dev = env.num_envs, device
    random_actions = torch.empty(n, env.num_actions, device=dev)

    def env_step() -> None:
        random_actions.uniform_(-1.0, 1.0)
        env.step(random_actions)

    if "env" in job.phases or "physics" in job.phases:
        for _ in range(WARMUP_STEPS):
            env_step()
    physics_share = None
    trouble = {}
    if phase("physics", False):
        physics_trouble = TroubleSum()
        point["physics_s"], point["physics_cpu_s"], physics_share = timed_physics(
            env, job, dev, ctx.world_size, physics_trouble
        )
        trouble["physics"] = physics_trouble.record()
        phase("physics", True)
    if phase("env", False):
        point["env_s"], point["env_cpu_s"] = timed_blocks(env_step, job, dev, ctx.world_size)
        if env.step_is_graph:  # one CUDA graph: the physics inside it cannot be timed apart
            point["step_is_cuda_graph"] = True
        elif physics_share is not None:
            point["env_physics_share"] = physics_share
        phase("env", True)
    if phase("rollout", False):
        point["rollout_s"], point["rollout_cpu_s"] = timed_rollout(job, env, runner, dev, ctx.world_size)
        phase("rollout", True)
    if phase("training", False):
        point["iterations"], trouble["training"] = timed_training(job, runner, dev)
        phase("training", True)
    # physics trouble per phase: {"env_steps", "record"} (mjfleet.bench.report sums it over workers)
    point["trouble"] = {name: t for name, t in trouble.items() if t is not None}
    point["peak_rss_bytes"] = machine.peak_rss_bytes()
    if dev.type == "cuda":
        point["gpu_torch_peak_bytes"] = torch.cuda.max_memory_allocated(dev)
        point["gpu_warp_peak_bytes"] = machine.warp_mempool_high(str(dev))
    return point


# ------------------------------------------------------------------------------------------- helpers
def _make_runner(env, agent: AgentConfig, ctx, update_threads: int):
    from mjfleet.rl import FleetRunner

    agent.logger = "none"
    agent.consistency_check_interval = 0
    return FleetRunner(env, agent, context=ctx, log_format="none", update_threads=update_threads)


def _gather(result: dict[str, Any], ctx) -> list[dict[str, Any]]:
    """Every worker's measurements (as JSON: nothing a peer sends is unpickled), in rank order."""
    if ctx.world_size == 1:
        return [result]
    from mjfleet.fleet.reduce import gather_json

    return sorted(gather_json(result, ctx.world_size, ctx.group), key=lambda r: r["rank"])
