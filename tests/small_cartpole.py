"""Small Cartpole-Balance configurations for tests that build a real env and runner in-process or in workers
(a module on the tests' path, so worker processes can import it too)."""

from __future__ import annotations

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
