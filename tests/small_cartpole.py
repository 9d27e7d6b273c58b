"""Small Cartpole-Balance configurations for tests that build a real env and runner in-process or in workers
(a module on the tests' path, so worker processes can import it too)."""

from __future__ import annotations

import torch

from mjfleet.tasks import get_task


def cartpole_configs(num_envs: int = 16, steps: int = 8, episode_length_s: float | None = None):
    """(task spec, env config, agent config) of Cartpole-Balance with `num_envs` envs, `steps`-step rollouts and
    no dashboard logger; `episode_length_s` shortens episodes so several finish in each rollout."""
    spec = get_task("Cartpole-Balance")
    env_cfg = spec.env_config()
    env_cfg.num_envs = num_envs
    if episode_length_s is not None:
        env_cfg.episode_length_s = episode_length_s
    agent = spec.agent_config()
    agent.num_steps_per_env = steps
    agent.logger = "none"
    return spec, env_cfg, agent


def rollout(runner, returns: bool = False):
    """One rollout of the runner's `num_steps_per_env` steps into its storage, exactly as FleetRunner.learn
    collects it; with `returns`, the algorithm's returns computed from it as its update begins. Returns the last
    observations."""
    obs = runner.env.get_observations()
    with torch.inference_mode():
        for _ in range(runner.agent_cfg.num_steps_per_env):
            obs, rewards, dones, extras = runner.env.step(runner.alg.act(obs))
            runner.alg.process_env_step(obs, rewards, dones, extras)
        if returns:
            runner.alg.compute_returns(obs)
    return obs
