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
times only; :mod:`mjfleet.bench.report` turns them into rates and ratios.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from mjfleet.bench import machine, report
from mjfleet.envs import EnvConfig
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.rl import AgentConfig
from mjfleet.timing import Stopwatch, Timed

PHASES = ("physics", "env", "rollout", "training")
WARMUP_STEPS = 5


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
            t_build = time.perf_counter()
            env = spec.make_env(cfg, ctx.device)
            runner = _make_runner(env, agent, ctx, job.plan.update_threads)
            build_s = time.perf_counter() - t_build
            actions = torch.zeros(env.num_envs, env.num_actions, device=device)
            env.step(actions)  # the first env step: start-up ends here
            _sync(device)
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
    if "physics" in job.phases:
        point["physics_s"], point["physics_cpu_s"], physics_share = _timed_physics(
            env, job, dev, ctx.world_size
        )
    if "env" in job.phases:
        point["env_s"], point["env_cpu_s"] = _timed_blocks(env_step, job, dev, ctx.world_size)
        if env.step_is_graph:  # one CUDA graph: the physics inside it cannot be timed apart
            point["step_is_cuda_graph"] = True
        elif physics_share is not None:
            point["env_physics_share"] = physics_share
    if "rollout" in job.phases:
        point["rollout_s"], point["rollout_cpu_s"] = _timed_rollout(job, env, runner, dev, ctx.world_size)
    if "training" in job.phases:
        point["iterations"] = _timed_training(job, runner, dev)
    point["peak_rss_bytes"] = machine.peak_rss_bytes()
    if dev.type == "cuda":
        point["gpu_torch_peak_bytes"] = torch.cuda.max_memory_allocated(dev)
        point["gpu_warp_peak_bytes"] = machine.warp_mempool_high(str(dev))
    return point


def _timed_blocks(
    fn: Callable[[], None], job: BenchJob, device: torch.device, world_size: int
) -> tuple[list[float], list[float]]:
    """Wall-clock and process CPU seconds of `job.repeats` blocks of `job.steps` calls, after a warm-up."""
    for _ in range(WARMUP_STEPS):
        fn()
    times, cpu_times = [], []
    for _ in range(job.repeats):
        _barrier(device, world_size)
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(job.steps):
            fn()
        _sync(device)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return times, cpu_times


def _timed_physics(
    env, job: BenchJob, device: torch.device, world_size: int
) -> tuple[list[float], list[float], float]:
    """Wall and CPU seconds spent inside `sim.step()` in blocks of env steps with random actions, and its share.

    The physics bound is the physics of the states the environment visits: a contact-rich robot that keeps being
    driven, reset and pushed needs more solver iterations per step than the same worlds replayed alone from one
    state with fixed controls, which settle and get cheap (the flat quadruped needs about three times the solver
    iterations in the env: docs/history/benchmarks-log.md). The env step runs op by op (also where `step()`
    replays a CUDA graph, inside which the physics cannot be timed apart), and a `Timed` simulation synchronises
    the device around every `sim.step()`, so its time is its own. The share (physics time / block time) is
    1 - the env's overhead.
    """
    sim = env.sim
    actions = torch.empty(env.num_envs, env.num_actions, device=device)
    times, cpu_times, shares = [], [], []
    stopwatch = Stopwatch(device)
    env.sim = Timed(sim, "step", stopwatch)
    try:
        for _ in range(job.repeats):
            _barrier(device, world_size)
            stopwatch.reset()
            start = time.perf_counter()
            for _ in range(job.steps):
                actions.uniform_(-1.0, 1.0)
                env.step_op_by_op(actions)
            _sync(device)
            times.append(stopwatch.seconds)
            cpu_times.append(stopwatch.cpu_seconds)
            shares.append(stopwatch.seconds / (time.perf_counter() - start))
    finally:
        env.sim = sim
    return times, cpu_times, sum(shares) / len(shares)


def _timed_rollout(
    job: BenchJob, env, runner, device: torch.device, world_size: int
) -> tuple[list[float], list[float]]:
    alg = runner.alg
    storage = getattr(alg, "storage", None)  # PPO's rollout storage; SAC's replay buffer is a ring
    obs = {"obs": env.get_observations().to(device)}

    def rollout_step() -> None:
        if storage is not None and storage.step >= storage.num_transitions_per_env:
            storage.clear()
        actions = alg.act(obs["obs"])
        next_obs, rewards, dones, extras = env.step(actions.to(env.device))
        alg.process_env_step(next_obs, rewards, dones, extras)
        obs["obs"] = next_obs

    alg.train_mode()
    with torch.inference_mode():
        times = _timed_blocks(rollout_step, job, device, world_size)
    if storage is not None:
        storage.clear()
    return times


def _timed_training(job: BenchJob, runner, device: torch.device) -> list[dict[str, float]]:
    """collect/update seconds of every timed iteration, with the update's time in the gradient reducer."""
    # Untimed: the first iteration (optimizer state, caches) and, where the update's thread count is chosen by
    # measurement, every update until it has tried both counts (as `train` does in its first iterations).
    warmup = max(1, runner.update_threads.opening_updates)
    reducer = runner.alg.gradients.reducer
    stopwatch = Stopwatch(device)
    if reducer is not None:
        runner.alg.gradients.reducer = Timed(reducer, "average", stopwatch)
    iterations: list[dict[str, float]] = []
    marks = {"wall": time.perf_counter(), "cpu": time.process_time()}

    def record(rec: dict[str, Any]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        iterations.append(
            {
                # from the previous iteration's record to this one's: everything an iteration costs in `train`
                # (collection, update, statistics, the stop agreement, logging), wall-clock and CPU time
                "wall_s": wall - marks["wall"],
                "cpu_s": cpu - marks["cpu"],
                "collect_s": float(rec["collect_time"]),
                "update_s": float(rec["learn_time"]),
                "grad_allreduce_s": stopwatch.seconds if reducer is not None else 0.0,
                # torch threads of this iteration's update (on CPU chosen by measurement; see UpdateThreads)
                "update_threads": int(rec.get("Perf/update_threads", torch.get_num_threads())),
            }
        )
        if "Perf/gradient_steps" in rec:  # SAC: the gradient steps this iteration's update ran
            iterations[-1]["gradient_steps"] = int(rec["Perf/gradient_steps"])
        stopwatch.reset()
        marks["wall"], marks["cpu"] = wall, cpu

    if hasattr(runner.alg, "storage"):
        runner.alg.storage.clear()
    runner.hooks.on_iteration = record
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the runner's per-iteration lines
            runner.learn(warmup + job.iterations, init_at_random_ep_len=job.agent.init_at_random_ep_len)
    finally:
        runner.hooks.on_iteration = None
        if reducer is not None:
            runner.alg.gradients.reducer = reducer
    return iterations[warmup:]


# ------------------------------------------------------------------------------------------- helpers
def _make_runner(env, agent: AgentConfig, ctx, update_threads: int):
    from mjfleet.rl import FleetRunner

    agent.logger = "none"
    agent.consistency_check_interval = 0
    return FleetRunner(env, agent, context=ctx, log_format="compact", update_threads=update_threads)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        import warp as wp

        wp.synchronize_device(str(device))
        torch.cuda.synchronize(device)


def _barrier(device: torch.device, world_size: int) -> None:
    """Start the next block on every worker at once (a tiny all_reduce works on gloo and nccl alike)."""
    _sync(device)
    if world_size > 1:
        dist.all_reduce(torch.zeros(1, device=device))
        _sync(device)


def _gather(result: dict[str, Any], ctx) -> list[dict[str, Any]]:
    """Every worker's measurements (as JSON: nothing a peer sends is unpickled), in rank order."""
    if ctx.world_size == 1:
        return [result]
    from mjfleet.fleet.reduce import gather_json

    return sorted(gather_json(result, ctx.world_size, ctx.group), key=lambda r: r["rank"])
