"""Worker functions for tests/test_distributed.py: run inside real torchrunx worker processes."""

from __future__ import annotations

import pathlib
import signal
from types import SimpleNamespace

import torch
import torch.distributed as dist
import warp as wp
from small_cartpole import cartpole_configs

from mjfleet.launch.worker import WorkerContext, seed_for, setup_worker
from mjfleet.rl import FleetRunner
from mjfleet.rl.episode_stats import EpisodeStats

NUM_ENVS = 16
STEPS = 8


def build_runner(
    num_envs: int,
    seed: int,
    *,
    reducer: str = "auto",
    fast: bool = True,
    single_update: bool = False,
    sync: int = 1,
):
    spec, cfg, agent = cartpole_configs(num_envs, STEPS)
    agent.consistency_check_interval = 1
    agent.algorithm.gradient_reducer = reducer
    agent.algorithm.fast_update = fast
    if single_update:  # one full-batch gradient step: comparable with one process holding all the data
        agent.algorithm.num_learning_epochs = 1
        agent.algorithm.num_mini_batches = sync  # with grad_sync_period = sync: the mean of all, one step
        agent.algorithm.grad_sync_period = sync
        agent.algorithm.schedule = "fixed"
    torch.manual_seed(seed)
    wp.config.log_level = wp.LOG_WARNING
    env = spec.make_env(cfg, "cpu")
    return FleetRunner(env, agent, None, "cpu", log_format="compact")


def _gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor)
    return out


def train_and_compare(plan, reducer: str) -> dict:
    """Train 3 iterations on each rank; report whether parameters and environment data match across ranks."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    runner = build_runner(NUM_ENVS, seed_for(0, ctx), reducer=reducer)
    first_obs = runner.env.get_observations()["critic"].clone()
    if reducer == "none":
        runner.agent_cfg.consistency_check_interval = 0  # drifting apart is the point of this run
    runner.learn(3)
    params = torch.cat([p.detach().reshape(-1) for p in runner._policy_parameters()])
    all_params, all_obs = _gather(params), _gather(first_obs)
    # The runner's per-iteration exchanges (through shared memory on one host): episode statistics summed over
    # the ranks, and a stop signal that only rank 1 received, agreed on by both.
    stats = EpisodeStats(4, "cpu")
    dones = torch.tensor([True, False, True, ctx.rank == 1])
    log = {"Metrics/rank": torch.tensor(float(ctx.rank))}
    stats.update(torch.full((4,), ctx.rank + 1.0), dones, {"log": log, "episodes_finished": dones.sum()})
    episodes = stats.collect(runner.alg.sum_across_workers)
    runner.stop = SimpleNamespace(signum=signal.SIGTERM if ctx.rank == 1 else None)
    agreed_stop = runner._agreed_stop()
    return {
        "episodes": episodes,
        "agreed_stop": agreed_stop,
        "reducer": runner.reducer_name,
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "params_identical": all(torch.equal(p, all_params[0]) for p in all_params),
        "env_data_identical": all(torch.equal(o, all_obs[0]) for o in all_obs),
        "seeds": [int(s) for s in _gather(torch.tensor([seed_for(0, ctx)]))],
    }


def rollout(runner: FleetRunner) -> None:
    """One rollout into the runner's storage, exactly as FleetRunner.learn collects it."""
    obs = runner.env.get_observations()
    with torch.inference_mode():
        for _ in range(STEPS):
            actions = runner.alg.act(obs)
            obs, rewards, dones, extras = runner.env.step(actions)
            runner.alg.process_env_step(obs, rewards, dones, extras)
        runner.alg.compute_returns(obs)


STORAGE_FIELDS = ("actions", "rewards", "dones", "values", "actions_log_prob", "returns", "advantages")


def averaged_update(plan, out_dir: str, reducer: str, fast: bool, sync: int = 1) -> dict:
    """Each rank: rollout, save its data and the initial parameters, do one PPO update with averaging through
    `reducer`, by the fast engine or the reference; with `sync` > 1, `sync` minibatches accumulated per step."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    runner = build_runner(
        NUM_ENVS, seed_for(0, ctx), reducer=reducer, fast=fast, single_update=True, sync=sync
    )
    assert (runner.alg.fast is not None) == fast
    runner.alg.broadcast_parameters()
    rollout(runner)
    storage = runner.alg.storage
    saved = {name: getattr(storage, name).clone() for name in STORAGE_FIELDS}
    saved["observations"] = storage.observations.clone()
    saved["distribution_params"] = tuple(p.clone() for p in storage.distribution_params)
    saved["initial_actor"] = {k: v.clone() for k, v in runner.alg.get_policy().state_dict().items()}
    saved["initial_critic"] = {k: v.clone() for k, v in runner.alg.critic.state_dict().items()}
    runner.alg.update()
    saved["final_actor"] = runner.alg.get_policy().state_dict()
    saved["reducer"] = runner.reducer_name
    torch.save(saved, pathlib.Path(out_dir) / f"rank{ctx.rank}.pt")
    dist.barrier()
    return {"rank": ctx.rank}


def shared_memory_rounds(plan, rounds: int) -> dict:
    """`rounds` shared-memory sums of rank-dependent buffers of varying sizes (up to the mapping's 1,000 elements),
    the ranks arriving out of step; every rank's result."""
    import random
    import time

    from mjfleet.rl.reduce import SharedMemory

    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    assert SharedMemory.available(1000, torch.float32)
    reduce = SharedMemory(ctx.world_size, 1000, torch.float32)
    jitter = random.Random(ctx.rank)
    wrong = 0
    for i in range(rounds):
        time.sleep(jitter.random() * 1e-3)  # arrive early or late: a rank may be a whole round ahead
        size = 1000 if i % 3 == 0 else 1 + (37 * i) % 1000  # the same on every rank
        buffer = torch.arange(size, dtype=torch.float32) * (ctx.rank + 1) + i
        reduce.sum(buffer)
        expected = torch.arange(size, dtype=torch.float32) * 3 + 2 * i  # ranks 0 and 1: factors 1 + 2
        wrong += int(not torch.equal(buffer, expected))
    late = SharedMemory(ctx.world_size, 10, torch.float32, timeout_s=0.5)
    timed_out = ""
    if ctx.rank == 1:  # rank 0 never comes: rank 1 must give up with a clear error, not hang
        try:
            late.sum(torch.zeros(10))
        except RuntimeError as exc:
            timed_out = str(exc)
    results: list = [None] * dist.get_world_size()
    dist.all_gather_object(results, {"wrong": wrong, "timed_out": timed_out})
    return results


def diverge_after_one_iteration(plan) -> dict:
    """Train with a consistency check after every iteration (build_runner's interval: 1); after the first
    iteration rank 1's policy is changed behind the averaging's back."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    runner = build_runner(NUM_ENVS, seed_for(0, ctx))

    def corrupt(record: dict) -> None:
        if ctx.rank == 1 and record["iteration"] == 0:
            with torch.no_grad():
                next(runner.alg.actor.parameters()).add_(1e-3)

    runner.on_iteration = corrupt
    runner.learn(6)  # must stop at the first check after it
    return {"iterations": runner.current_learning_iteration}
