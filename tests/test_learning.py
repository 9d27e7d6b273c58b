"""Policies actually learn: short fast checks by default, full default-config runs marked slow."""

import pytest
import torch

from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task


def _train_records(task: str, iterations: int, num_envs: int | None = None) -> tuple[list[dict], FleetRunner]:
    """Train `iterations` iterations with the task's defaults; one record per iteration."""
    spec = get_task(task)
    cfg = spec.env_config()
    cfg.num_envs = num_envs or spec.num_envs_cpu
    agent = spec.agent_config()
    agent.logger = "none"
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg), agent, None, "cpu", log_format="compact")
    records: list[dict] = []
    for _ in range(iterations):
        records.append(dict(runner.learn(1, init_at_random_ep_len=not records)))
    return records, runner


def _train(task: str, iterations: int, num_envs: int | None = None) -> tuple[list[float], FleetRunner]:
    records, runner = _train_records(task, iterations, num_envs)
    return [r["mean_return"] for r in records], runner


def _mean(records: list[dict], key: str) -> float:
    return sum(r[key] for r in records) / len(records)


def test_cartpole_balance_return_rises_within_30_iterations():
    returns, runner = _train("Cartpole-Balance", iterations=30, num_envs=256)
    max_return = runner.env.max_episode_length
    assert returns[0] < 0.3 * max_return
    assert max(returns[-5:]) > 0.5 * max_return


@pytest.mark.slow
def test_cartpole_balance_defaults_reach_95_percent_of_the_maximum_return():
    spec = get_task("Cartpole-Balance")
    returns, runner = _train("Cartpole-Balance", iterations=spec.agent_config().max_iterations)
    assert returns[-1] >= 0.95 * runner.env.max_episode_length


@pytest.mark.slow
def test_cartpole_swingup_defaults_swing_up_and_balance():
    spec = get_task("Cartpole-Swingup")
    returns, runner = _train("Cartpole-Swingup", iterations=spec.agent_config().max_iterations)
    env = runner.env
    # Hanging earns 0 per step, a pole balanced upright at the centre about 1; the swing-up itself takes ~2 s of
    # the 8 s episode, so about 300 of 400 is near the best possible.
    assert returns[-1] >= 0.6 * env.max_episode_length
    # And the deterministic policy, started hanging, ends its episodes with the pole up and nearly still.
    policy = runner.get_inference_policy()
    obs, _ = env.reset()
    with torch.inference_mode():
        for _ in range(env.max_episode_length - 2):
            obs, _, _, _ = env.step(policy(obs))
    up = (torch.cos(env.sim.qpos[:, 1]) > 0.95) & (env.sim.qvel[:, 1].abs() < 1.0)
    assert up.float().mean() > 0.9


@pytest.mark.slow
def test_quadruped_flat_episode_length_and_velocity_tracking_rise_within_30_iterations():
    records, _ = _train_records("Quadruped-Velocity-Flat", iterations=30, num_envs=128)
    first, last = records[:5], records[-5:]
    # Random actions fall over within a couple of seconds; a learning policy stays up longer and tracks better.
    assert _mean(last, "mean_episode_length") > 1.5 * _mean(first, "mean_episode_length")
    track = "Episode_Reward/track_lin_vel_xy"
    assert _mean(last, track) > 1.5 * _mean(first, track)
    assert _mean(last, "Metrics/lin_vel_error") < _mean(first, "Metrics/lin_vel_error")
