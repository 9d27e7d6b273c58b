"""Policies actually learn: short fast checks by default, full default-config runs marked slow.

Each test trains, then judges the trained policy by an evaluation of its own (fresh environments, deterministic
actions, not the training log) against the trivial policies, zero and random actions, evaluated alike: a policy
that learned nothing must fail. MJFLEET_LEARNING_TEST_POLICY=zero swaps zero actions in for the trained policy
(training is skipped then), to see these tests fail as they should.
"""

import copy
import os

import pytest
import torch

from mjfleet.evaluation import early_terminations, evaluate, random_policy, zero_policy
from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task

SWAP_IN_ZERO_POLICY = os.environ.get("MJFLEET_LEARNING_TEST_POLICY") == "zero"


def _train_records(task: str, iterations: int, num_envs: int | None = None) -> tuple[list[dict], FleetRunner]:
    """Train `iterations` iterations with the task's defaults; one record per iteration."""
    spec = get_task(task)
    cfg = spec.env_config()
    cfg.num_envs = (
        num_envs or spec.num_envs_cpu * spec.cpu_workers
    )  # in one process: the CPU run's whole batch
    agent = spec.agent_config()
    agent.logger = "none"
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg), agent, None, "cpu", log_format="compact")
    records: list[dict] = []
    for _ in range(0 if SWAP_IN_ZERO_POLICY else iterations):
        records.append(dict(runner.learn(1, init_at_random_ep_len=not records)))
    return records, runner


def _against_baselines(task: str, runner: FleetRunner, episodes: int = 32, num_envs: int = 16, seed: int = 1,
                       prepare=None) -> dict[str, dict]:  # fmt: skip
    """Evaluate the runner's deterministic policy, zero actions and random actions alike: each on fresh
    environments built and reset from the same seed (same physics draws, initial states and commands).
    `prepare(cfg)` may change the task's default env config first."""
    spec = get_task(task)
    cfg = spec.env_config()
    cfg.num_envs = num_envs
    if prepare is not None:
        prepare(cfg)
    trained = runner.get_inference_policy()
    results = {}
    for name in ("trained", "zero", "random"):
        torch.manual_seed(seed)
        env = spec.make_env(copy.deepcopy(cfg))
        if name == "random":
            policy = random_policy(env, seed)
        elif name == "zero" or SWAP_IN_ZERO_POLICY:
            policy = zero_policy(env)
        else:
            policy = trained
        torch.manual_seed(seed)
        results[name] = evaluate(env, policy, episodes)
    print({name: _brief(r) for name, r in results.items()})  # shown by pytest when an assertion fails
    return results


def _brief(result: dict) -> dict:
    return {
        "return": round(result["mean_return"], 3),
        "length": round(result["mean_episode_length"], 1),
        **{k: round(v, 3) for k, v in result["metrics"].items() if not k.startswith("sim_")},
        "ended_early": early_terminations(result),
        "ended": result["episodes_ended"],
    }


def _train(task: str, iterations: int, num_envs: int | None = None) -> tuple[list[float], FleetRunner]:
    records, runner = _train_records(task, iterations, num_envs)
    return [r["mean_return"] for r in records], runner


def test_cartpole_balance_beats_zero_and_random_actions_after_30_iterations():
    _, runner = _train("Cartpole-Balance", iterations=30, num_envs=256)
    results = _against_baselines("Cartpole-Balance", runner)
    max_return = runner.env.max_episode_length  # one reward point per step at most
    best_baseline = max(results["zero"]["mean_return"], results["random"]["mean_return"])
    assert results["trained"]["mean_return"] > best_baseline + 0.2 * max_return


@pytest.mark.slow
def test_cartpole_balance_defaults_reach_95_percent_of_the_maximum_return():
    spec = get_task("Cartpole-Balance")
    returns, runner = _train("Cartpole-Balance", iterations=spec.agent_config().max_iterations)
    results = _against_baselines("Cartpole-Balance", runner)
    assert results["trained"]["mean_return"] >= 0.95 * runner.env.max_episode_length
    best_baseline = max(results["zero"]["mean_return"], results["random"]["mean_return"])
    assert results["trained"]["mean_return"] > best_baseline + 0.2 * runner.env.max_episode_length
    assert returns[-1] >= 0.95 * runner.env.max_episode_length


@pytest.mark.slow
def test_cartpole_swingup_defaults_swing_up_and_balance():
    spec = get_task("Cartpole-Swingup")
    returns, runner = _train("Cartpole-Swingup", iterations=spec.agent_config().max_iterations)
    env = runner.env
    # Hanging earns 0 per step, a pole balanced upright at the centre about 1; the swing-up itself takes ~2 s of
    # the 8 s episode, so about 300 of 400 is near the best possible.
    results = _against_baselines("Cartpole-Swingup", runner)
    best_baseline = max(results["zero"]["mean_return"], results["random"]["mean_return"])
    assert results["trained"]["mean_return"] > best_baseline + 0.2 * env.max_episode_length
    assert returns[-1] >= 0.6 * env.max_episode_length
    # And the deterministic policy, started hanging, ends its episodes with the pole up and nearly still.
    policy = runner.get_inference_policy()
    obs, _ = env.reset()
    with torch.inference_mode():
        for _ in range(env.max_episode_length - 2):
            obs, _, _, _ = env.step(policy(obs))
    up = (torch.cos(env.sim.qpos[:, 1]) > 0.95) & (env.sim.qvel[:, 1].abs() < 1.0)
    assert up.float().mean() > 0.9


# Fixed evaluation commands (vx, vy, wz): walking forward and backward, which the CPU defaults learn first.
QUADRUPED_COMMANDS = ((0.6, 0.0, 0.0), (-0.5, 0.0, 0.0))
QUADRUPED_ITERATIONS = 300


@pytest.mark.slow
def test_quadruped_flat_defaults_track_velocity_commands_better_than_standing_still():
    _, runner = _train_records("Quadruped-Velocity-Flat", iterations=QUADRUPED_ITERATIONS)
    for command in QUADRUPED_COMMANDS:

        def fixed_command(cfg, command=command):
            cfg.episode_length_s = 10.0
            cfg.commands.fix(*command)

        results = _against_baselines("Quadruped-Velocity-Flat", runner, episodes=16, prepare=fixed_command)
        trained, zero, random = (results[k] for k in ("trained", "zero", "random"))
        # Standing still (zero actions hold the default pose) misses by the commanded speed, and survives: the
        # trained robot must close a clear part of that gap without falling more often.
        error = trained["metrics"]["lin_vel_error"]
        assert error < 0.6 * zero["metrics"]["lin_vel_error"], command
        assert error < 0.6 * random["metrics"]["lin_vel_error"], command
        assert early_terminations(trained) <= early_terminations(zero), command
