"""Worker functions for tests/test_distributed.py: run inside real torchrunx worker processes."""

from __future__ import annotations

import dataclasses
import pathlib
import signal
from types import SimpleNamespace

import torch
import torch.distributed as dist
import warp as wp
from small_cartpole import cartpole_configs, rollout

from mjfleet.fleet.context import WorkerContext, seed_for, start_worker
from mjfleet.rl import FleetRunner
from mjfleet.rl.episode_stats import EpisodeStats

NUM_ENVS = 16
STEPS = 8


def build_runner(
    num_envs: int,
    seed: int,
    ctx: WorkerContext | None = None,
    *,
    reducer: str = "auto",
    compiled: bool = True,
    single_update: bool = False,
    sync: int = 1,
    algorithm: str = "ppo",
    teacher: str = "",
):
    spec, cfg, agent = cartpole_configs(num_envs, STEPS, episode_length_s=0.1 if teacher else None)
    agent.consistency_check_interval = 1
    agent.algorithm_name = algorithm
    if algorithm == "sac":  # small and quick: one warm-up iteration of random actions, then gradient steps
        agent.sac.gradient_reducer = reducer
        agent.sac.batch_size = 64
        agent.sac.random_steps = STEPS
        agent.sac.actor_hidden_dims = agent.sac.critic_hidden_dims = (32, 32)
    if algorithm == "distillation":  # a GRU student, two truncated-backpropagation steps per update
        agent.distillation.teacher, agent.distillation.gradient_reducer = teacher, reducer
        agent.distillation.gradient_length = STEPS // 2
        agent.actor.rnn, agent.actor.rnn_hidden_dim = "gru", 16
    agent.ppo.gradient_reducer = reducer
    agent.ppo.compile_update = compiled
    if single_update:  # one full-batch gradient step: comparable with one process holding all the data
        agent.ppo.num_learning_epochs = 1
        agent.ppo.num_mini_batches = sync  # with grad_sync_period = sync: the mean of all, one step
        agent.ppo.grad_sync_period = sync
        agent.ppo.schedule = "fixed"
    torch.manual_seed(seed)
    wp.config.log_level = wp.LOG_WARNING
    env = spec.make_env(cfg, "cpu")
    return FleetRunner(env, agent, context=ctx, log_format="compact")


def in_sequence(plan, calls: list[tuple[str, tuple]]) -> list:
    """Each `(name of a function of this module, its arguments after the plan)`, one after another in the same
    two worker processes: the tests share one launch (process start, imports, process group) between them."""
    return [globals()[name](plan, *args) for name, args in calls]


def _gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor)
    return out


def train_and_compare(plan, reducer: str) -> dict:
    """Train 3 iterations on each rank; report whether parameters and environment data match across ranks."""
    ctx = start_worker(plan)
    runner = build_runner(NUM_ENVS, seed_for(0, ctx), ctx, reducer=reducer)
    first_obs = runner.env.get_observations()["critic"].clone()
    if reducer == "none":
        runner.agent_cfg.consistency_check_interval = 0  # drifting apart is the point of this run
    runner.learn(3)
    params = torch.cat([p.detach().reshape(-1) for p in runner.policy_parameters()])
    all_params, all_obs = _gather(params), _gather(first_obs)
    # The runner's per-iteration exchanges (through shared memory on one host): episode statistics summed over
    # the ranks, and a stop signal that only rank 1 received, agreed on by both.
    stats = EpisodeStats(4, "cpu")
    dones = torch.tensor([True, False, True, ctx.rank == 1])
    log = {"Metrics/rank": torch.tensor(float(ctx.rank))}
    stats.update(torch.full((4,), ctx.rank + 1.0), dones, {"log": log, "episodes_finished": dones.sum()})
    episodes = stats.collect(runner.alg.gradients.sum_across_workers)
    runner.stop = SimpleNamespace(signum=signal.SIGTERM if ctx.rank == 1 else None)
    stop = runner.agreed_stop()
    return {
        "episodes": episodes,
        "agreed_stop": stop,
        "reducer": runner.reducer_name,
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "params_identical": all(torch.equal(p, all_params[0]) for p in all_params),
        "env_data_identical": all(torch.equal(o, all_obs[0]) for o in all_obs),
        "seeds": [int(s) for s in _gather(torch.tensor([seed_for(0, ctx)]))],
    }


STORAGE_FIELDS = ("actions", "rewards", "dones", "values", "actions_log_prob", "returns", "advantages")


def averaged_update(plan, out_dir: str, reducer: str, compiled: bool, sync: int = 1) -> dict:
    """Each rank: rollout, save its data and the initial parameters, do one PPO update with averaging through
    `reducer`, the loss compiled or as written; with `sync` > 1, `sync` minibatches accumulated per step."""
    ctx = start_worker(plan)
    runner = build_runner(
        NUM_ENVS, seed_for(0, ctx), ctx, reducer=reducer, compiled=compiled, single_update=True, sync=sync
    )
    assert (runner.alg.compiled_loss is not None) == compiled
    runner.alg.broadcast_parameters()
    rollout(runner, returns=True)
    storage = runner.alg.storage
    saved = {name: getattr(storage, name).clone() for name in STORAGE_FIELDS}
    saved["observations"] = storage.observations.clone()
    saved["distribution_params"] = tuple(p.clone() for p in storage.distribution_params)
    saved["initial_actor"] = {k: v.clone() for k, v in runner.alg.get_policy().state_dict().items()}
    saved["initial_critic"] = {k: v.clone() for k, v in runner.alg.critic.state_dict().items()}
    runner.alg.optimize()
    saved["final_actor"] = runner.alg.get_policy().state_dict()
    saved["reducer"] = runner.reducer_name
    torch.save(saved, pathlib.Path(out_dir) / f"rank{ctx.rank}.pt")
    dist.barrier()
    return {"rank": ctx.rank}


DISTILLATION_FIELDS = ("observations", "privileged_actions", "dones")


def distillation_update(plan, out_dir: str, teacher: str, reducer: str) -> dict:
    """Each rank: a recurrent student's rollout (episodes end within it), its data and initial student saved, then
    one distillation update averaged through `reducer`."""
    ctx = start_worker(plan)
    runner = build_runner(
        NUM_ENVS, seed_for(0, ctx), ctx, reducer=reducer, algorithm="distillation", teacher=teacher
    )
    alg = runner.alg
    alg.broadcast_parameters()
    saved = {"initial": {k: v.clone() for k, v in alg.student.state_dict().items()}}
    rollout(runner)
    saved.update({name: getattr(alg.storage, name).clone() for name in DISTILLATION_FIELDS})
    alg.update(runner.env.get_observations())
    saved["final"] = alg.student.state_dict()
    saved["reducer"] = runner.reducer_name
    torch.save(saved, pathlib.Path(out_dir) / f"rank{ctx.rank}.pt")
    dist.barrier()
    return {"rank": ctx.rank}


def shared_memory_rounds(plan, rounds: int) -> dict:
    """`rounds` shared-memory sums of rank-dependent buffers of varying sizes (up to the mapping's 1,000 elements),
    the ranks arriving out of step; every rank's result."""
    import random
    import time

    from mjfleet.fleet.reduce import SharedMemory

    ctx = start_worker(plan)
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
    from mjfleet.fleet.reduce import gather_json

    return gather_json({"wrong": wrong, "timed_out": timed_out}, ctx.world_size)


def diverge_after_one_iteration(plan, algorithm: str = "ppo") -> dict:
    """Train with a consistency check after every iteration (build_runner's interval: 1); after the first
    iteration rank 1's policy is changed behind the averaging's back."""
    ctx = start_worker(plan)
    runner = build_runner(NUM_ENVS, seed_for(0, ctx), ctx, algorithm=algorithm)

    def corrupt(record: dict) -> None:
        if ctx.rank == 1 and record["iteration"] == 0:
            with torch.no_grad():
                next(runner.alg.actor.parameters()).add_(1e-3)

    runner.hooks.on_iteration = corrupt
    runner.learn(6)  # must stop at the first check after it
    return {"iterations": runner.current_learning_iteration}


def train_with_bogus_rank_variables(plan) -> dict:
    """A runner built from an explicit context trains as that context says, whatever RANK/WORLD_SIZE hold: after the
    context is read, the variables are set to nonsense that a runner reading them would fail on."""
    import os

    ctx = start_worker(plan)
    os.environ.update(RANK="7", WORLD_SIZE="9", LOCAL_RANK="5")
    runner = build_runner(NUM_ENVS, seed_for(0, ctx), ctx)
    first_obs = runner.env.get_observations()["critic"].clone()
    runner.learn(1)
    params = torch.cat([p.detach().reshape(-1) for p in runner.policy_parameters()])
    all_params, all_obs = _gather(params), _gather(first_obs)
    return {
        "rank": ctx.rank,
        "world_size": runner.ctx.world_size,
        "reducer": runner.reducer_name,
        "startup": runner.describe(),
        "params_identical": all(torch.equal(p, all_params[0]) for p in all_params),
        "env_data_identical": all(torch.equal(o, all_obs[0]) for o in all_obs),
    }


def normaliser_statistics(plan, reducer: str) -> dict:
    """Each rank updates an observation normaliser with data of its own, synchronised through `reducer`, and with
    rsl_rl's own update (its all_reduce calls); rank 0 also updates one over both ranks' data in one process."""
    from rsl_rl.modules import EmpiricalNormalization

    from mjfleet.rl.normalizer import update_normalizer

    ctx = start_worker(plan)
    sums = _averaged_gradients(ctx, reducer)
    generator = torch.Generator().manual_seed(0)
    batches = [
        torch.randn(2, 64, 5, generator=generator) * (1 + i) + i for i in range(3)
    ]  # 3 updates, 2 ranks
    ours, theirs, single = EmpiricalNormalization(5), EmpiricalNormalization(5), EmpiricalNormalization(5)
    for batch in batches:
        sums.update_normalizer(ours, batch[ctx.rank])
        theirs.update(batch[ctx.rank])  # rsl_rl's: all_reduce on the default group
        update_normalizer(single, batch.reshape(-1, 5), None)
    stats = {
        name: torch.cat([norm._mean.view(-1), norm._var.view(-1), norm.count.view(1).float()])
        for name, norm in (("ours", ours), ("theirs", theirs), ("single", single))
    }
    gathered = _gather(stats["ours"])
    return {
        "reducer": sums.reducer_name,
        "identical_on_ranks": all(torch.equal(g, gathered[0]) for g in gathered),
        "equal_to_rsl_rl": torch.equal(stats["ours"], stats["theirs"]),
        "max_difference_to_one_process": float((stats["ours"] - stats["single"]).abs().max()),
    }


# ------------------------------------------------------------------------------------------ the averaged step
def _networks(seed: int = 0) -> dict[str, torch.nn.Module]:
    torch.manual_seed(seed)
    return {
        "actor": torch.nn.Linear(5, 3),
        "critic": torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Linear(8, 1)),
    }


def _averaged_gradients(ctx, reducer: str, networks: dict | None = None, **kwargs):
    """An AveragedGradients over `networks` (two small ones by default), its reducer `reducer` for `ctx`."""
    from mjfleet.rl.gradients import AveragedGradients

    networks = networks if networks is not None else _networks()
    params = {name: list(net.parameters()) for name, net in networks.items()}
    groups = [{"params": p, "lr": 0.01 * (i + 1)} for i, p in enumerate(params.values())]
    grads = AveragedGradients(params, torch.optim.AdamW(groups, weight_decay=0.1), **kwargs)
    grads.connect(reducer, ctx)
    return grads


def _rank_gradients(grads, rank: int) -> None:
    """Rank-dependent gradients (large enough for clipping to act) and extra slot."""
    generator = torch.Generator().manual_seed(100 + rank)
    grads.flat.copy_(torch.randn(grads.flat.shape, generator=generator) * (3 + 5 * rank))


def averaged_step(plan, reducer: str) -> dict:
    """Each rank: two networks broadcast from rank 0 (rank 1 starts elsewhere), then three averaged steps of
    rank-dependent gradients through `reducer` (clip, fused AdamW step). Each rank also runs the same three steps
    in one process on the mean of both ranks' gradients (on its own, for reducer "none")."""
    ctx = start_worker(plan)
    networks = _networks(seed=ctx.rank)  # different on each rank until the broadcast
    grads = _averaged_gradients(ctx, reducer, networks, extra_slots=1)
    grads.broadcast(*networks.values())
    after_broadcast = torch.cat(
        [p.detach().reshape(-1) for net in networks.values() for p in net.parameters()]
    )
    extras = []
    for _ in range(3):
        _rank_gradients(grads, ctx.rank)
        grads.average()
        extras.append(float(grads.extra[0]))
        grads.clip(1.0)
        grads.step()
    mine = torch.cat([p.detach().reshape(-1) for net in networks.values() for p in net.parameters()])
    single = _networks(seed=0)
    one = _averaged_gradients(WorkerContext.single("cpu"), reducer, single, extra_slots=1)
    assert one.reducer is None
    mean_extras = []
    for _ in range(3):
        ranks = []
        for r in range(ctx.world_size):
            _rank_gradients(one, r)
            ranks.append(one.flat.clone())
        one.flat.copy_(ranks[ctx.rank] if reducer == "none" else torch.stack(ranks).mean(0))
        mean_extras.append(float(one.extra[0]))
        one.clip(1.0)
        one.step()
    expected = torch.cat([p.detach().reshape(-1) for net in single.values() for p in net.parameters()])
    everyone, broadcast = _gather(mine), _gather(after_broadcast)
    return {
        "reducer": grads.reducer_name,
        "broadcast_identical": all(torch.equal(b, broadcast[0]) for b in broadcast),
        "identical_on_ranks": all(torch.equal(p, everyone[0]) for p in everyone),
        "max_difference_to_one_process": float((mine - expected).abs().max()),
        "extra_difference": max(abs(a - b) for a, b in zip(extras, mean_extras, strict=True)),
        "moved": not torch.equal(mine, after_broadcast),
    }


# ------------------------------------------------------------------------------------------------------------ SAC
def sac_parameters(runner: FleetRunner) -> torch.Tensor:
    """Every SAC tensor that must agree across ranks: actor, critics, targets, temperature, normalisers."""
    alg = runner.alg
    states = [alg.actor.state_dict(), alg.critic.state_dict(), alg.target.state_dict()]
    return torch.cat([t.reshape(-1).float() for s in states for t in s.values()] + [alg.log_alpha.detach()])


def sac_snapshot(alg) -> dict:
    """Copies of the networks' and targets' state and the log-temperature."""
    nets = {"actor": alg.actor, "critic": alg.critic, "target": alg.target}
    snap = {name: {k: v.clone() for k, v in net.state_dict().items()} for name, net in nets.items()}
    snap["log_alpha"] = alg.log_alpha.detach().clone()
    return snap


def sac_train_and_compare(plan, reducer: str) -> dict:
    """Train SAC 3 iterations (the first a warm-up) with the consistency check after each; report whether every
    SAC tensor matches across ranks while the environments' data differ."""
    ctx = start_worker(plan)
    runner = build_runner(NUM_ENVS, seed_for(0, ctx), ctx, reducer=reducer, algorithm="sac")
    first_obs = runner.env.get_observations()["critic"].clone()
    before = sac_parameters(runner).clone()
    runner.learn(3)
    params = sac_parameters(runner)
    all_params, all_obs = _gather(params), _gather(first_obs)
    return {
        "reducer": runner.reducer_name,
        "startup": runner.describe(),
        "moved": not torch.equal(before, params),
        "params_identical": all(torch.equal(p, all_params[0]) for p in all_params),
        "env_data_identical": all(torch.equal(o, all_obs[0]) for o in all_obs),
    }


def sac_averaged_update(plan, out_dir: str, reducer: str) -> dict:
    """Each rank: collect, sample a batch and the policy's noise, save them with the initial state, do ONE
    averaged SAC gradient step, save the result (the test replays both ranks' data in one process)."""
    ctx = start_worker(plan)
    runner = build_runner(NUM_ENVS, seed_for(0, ctx), ctx, reducer=reducer, algorithm="sac")
    alg = runner.alg
    alg.broadcast_parameters()
    rollout(runner)
    alg.update_normalization(STEPS)  # synchronised: identical statistics on both ranks
    batch = alg.buffer.sample(alg.cfg.batch_size, alg.cfg.n_step, alg.cfg.gamma)
    noise = (
        torch.randn(alg.cfg.batch_size, alg.actor.action_dim),
        torch.randn(alg.cfg.batch_size, alg.actor.action_dim),
    )
    saved = {"batch": dataclasses.asdict(batch), "noise": noise, "reducer": runner.reducer_name}
    saved["initial"] = sac_snapshot(alg)
    alg.compute_gradients(batch, noise)
    alg.apply_gradients()
    saved["final"] = sac_snapshot(alg)
    torch.save(saved, pathlib.Path(out_dir) / f"rank{ctx.rank}.pt")
    dist.barrier()
    return {"rank": ctx.rank}
