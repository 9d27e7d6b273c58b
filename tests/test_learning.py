"""Policies actually learn: short fast checks by default, full default-config runs marked slow."""

import pytest
import torch

from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task


def _train(task: str, iterations: int, num_envs: int | None = None) -> tuple[list[float], FleetRunner]:
    spec = get_task(task)
    cfg = spec.env_config()
    cfg.num_envs = num_envs or spec.num_envs_cpu
    agent = spec.agent_config()
    agent.logger = "none"
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg), agent, None, "cpu", log_format="compact")
    returns = []
    for _ in range(iterations):
        returns.append(runner.learn(1, init_at_random_ep_len=not returns)["mean_return"])
    return returns, runner


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
    # Hanging still earns at most 0.3 per step; swinging up and balancing earns close to 1.
    assert returns[-1] >= 0.75 * runner.env.max_episode_length
