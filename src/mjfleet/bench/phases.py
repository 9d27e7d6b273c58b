"""How each phase is timed (mjfleet.bench.measure runs them in order), and the physics trouble met on the way.

Trouble (NaN resets, solver-limit hits: mjfleet.runs.trouble) is counted where it costs the timings nothing: in
the physics phase, whose figure is the time inside `sim.step()` alone, the env's per-step log vector is added up
on the device between the timed calls and read once after the last block; in the training phase the runner's
iteration records already carry it (the same statistics `train` prints). The env and rollout phases are left as
they were: a per-step addition there would be inside the timed loop.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from mjfleet.runs.trouble import COUNTED, SHARED, combine
from mjfleet.timing import Stopwatch, Timed

WARMUP_STEPS = 5
TROUBLE_KEYS = (*COUNTED, *SHARED)


class TroubleSum:
    """The trouble entries of an env's step log (`extras["log"]`, packed in `extras["log_packed"]`), added up on
    the device step by step and read once: counts as totals, `Metrics/` shares as their mean over the steps."""

    def __init__(self) -> None:
        self.keys: tuple[str, ...] | None = None
        self.total: torch.Tensor | None = None
        self.steps = 0
        self.env_steps = 0

    def add(self, extras: dict, num_envs: int) -> None:
        packed = extras.get("log_packed")
        if packed is None:  # an env without the packed log: nothing cheap to read
            return
        keys = tuple(extras.get("log", {}))
        if self.total is None or keys != self.keys or self.total.shape != packed.shape:
            if self.total is not None:
                return  # the log changed shape mid-phase (no task does): keep what was summed
            self.keys, self.total = keys, torch.zeros_like(packed, dtype=torch.float32)
        self.total.add_(packed)  # on the device: no host synchronisation
        self.steps += 1
        self.env_steps += num_envs

    def record(self) -> dict[str, Any] | None:
        """{"env_steps": ..., "record": {key: value}} with the trouble keys the env logs; None if it logs none."""
        if self.total is None or not self.steps:
            return None
        values = dict(zip(self.keys or (), self.total.tolist(), strict=True))
        found = {k: values[k] / self.steps if k in SHARED else values[k] for k in TROUBLE_KEYS if k in values}
        return {"env_steps": self.env_steps, "record": found} if found else None


def timed_blocks(
    fn: Callable[[], None], job: Any, device: torch.device, world_size: int
) -> tuple[list[float], list[float]]:
    """Wall-clock and process CPU seconds of `job.repeats` blocks of `job.steps` calls, after a warm-up."""
    for _ in range(WARMUP_STEPS):
        fn()
    times, cpu_times = [], []
    for _ in range(job.repeats):
        barrier(device, world_size)
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(job.steps):
            fn()
        sync(device)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return times, cpu_times


def timed_physics(
    env, job: Any, device: torch.device, world_size: int, trouble: TroubleSum
) -> tuple[list[float], list[float], float]:
    """Wall and CPU seconds spent inside `sim.step()` in blocks of env steps with random actions, and its share.

    The physics bound is the physics of the states the environment visits: a contact-rich robot that keeps being
    driven, reset and pushed needs more solver iterations per step than the same worlds replayed alone from one
    state with fixed controls, which settle and get cheap (the flat quadruped needs about three times the solver
    iterations in the env: docs/history/benchmarks-log.md). The env step runs op by op (also where `step()`
    replays a CUDA graph, inside which the physics cannot be timed apart), and a `Timed` simulation synchronises
    the device around every `sim.step()`, so its time is its own. The share (physics time / block time) is
    1 - the env's overhead. `trouble` adds up every step's log, outside the timed `sim.step()`.
    """
    sim = env.sim
    actions = torch.empty(env.num_envs, env.num_actions, device=device)
    times, cpu_times, shares = [], [], []
    stopwatch = Stopwatch(device)
    env.sim = Timed(sim, "step", stopwatch)
    try:
        for _ in range(job.repeats):
            barrier(device, world_size)
            stopwatch.reset()
            start = time.perf_counter()
            for _ in range(job.steps):
                actions.uniform_(-1.0, 1.0)
                trouble.add(env.step_op_by_op(actions)[3], env.num_envs)
            sync(device)
            times.append(stopwatch.seconds)
            cpu_times.append(stopwatch.cpu_seconds)
            shares.append(stopwatch.seconds / (time.perf_counter() - start))
    finally:
        env.sim = sim
    return times, cpu_times, sum(shares) / len(shares)


def timed_rollout(
    job: Any, env, runner, device: torch.device, world_size: int
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
        times = timed_blocks(rollout_step, job, device, world_size)
    if storage is not None:
        storage.clear()
    return times


def timed_training(job: Any, runner, device: torch.device) -> tuple[list[dict[str, float]], dict | None]:
    """collect/update seconds of every timed iteration, with the update's time in the gradient reducer; and the
    physics trouble of all iterations run (warm-up included), from the runner's records (global over workers)."""
    # Untimed: the first iteration (optimizer state, caches) and, where the update's thread count is chosen by
    # measurement, every update until it has tried both counts (as `train` does in its first iterations).
    warmup = max(1, runner.update_threads.opening_updates)
    reducer = runner.alg.gradients.reducer
    stopwatch = Stopwatch(device)
    if reducer is not None:
        runner.alg.gradients.reducer = Timed(reducer, "average", stopwatch)
    iterations: list[dict[str, float]] = []
    records: list[dict[str, Any]] = []  # every iteration's, for its trouble
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
        records.append(dict(rec))
        stopwatch.reset()
        marks["wall"], marks["cpu"] = wall, cpu

    if hasattr(runner.alg, "storage"):
        runner.alg.storage.clear()
    runner.hooks.on_iteration = record
    try:
        # the runner logs no iteration here (log_format "none"); anything else it prints is not bench's output
        with contextlib.redirect_stdout(io.StringIO()):
            runner.learn(warmup + job.iterations, init_at_random_ep_len=job.agent.init_at_random_ep_len)
    finally:
        runner.hooks.on_iteration = None
        if reducer is not None:
            runner.alg.gradients.reducer = reducer
    found = combine(records)
    if not found:
        return iterations[warmup:], None
    per_iteration = runner.agent_cfg.num_steps_per_env * runner.env.num_envs * runner.ctx.world_size
    return iterations[warmup:], {"env_steps": len(records) * per_iteration, "record": found}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        import warp as wp

        wp.synchronize_device(str(device))
        torch.cuda.synchronize(device)


def barrier(device: torch.device, world_size: int) -> None:
    """Start the next block on every worker at once (a tiny all_reduce works on gloo and nccl alike)."""
    sync(device)
    if world_size > 1:
        dist.all_reduce(torch.zeros(1, device=device))
        sync(device)
