"""Humanoid-Velocity-Flat and Humanoid-Velocity-Rough: track commanded planar velocities with a G1-class humanoid."""

from typing import TYPE_CHECKING

from mjfleet.lazy import lazy_exports
from mjfleet.rl import AgentConfig
from mjfleet.robots.mjfleet_humanoid import MJFLEET_HUMANOID
from mjfleet.tasks.humanoid.config import HumanoidConfig, flat_config, humanoid_recipe, rough_config
from mjfleet.tasks.locomotion import velocity_checks
from mjfleet.tasks.locomotion.config import agent_config, play_settings
from mjfleet.tasks.registry import TaskSpec, register

if TYPE_CHECKING:
    from mjfleet.tasks.humanoid.env import HumanoidEnv

# By name: the simulator is imported when an environment is built, not when the task is registered.
ENV_CLASS = "mjfleet.tasks.humanoid.env:HumanoidEnv"

# 512-256-128 ELU, as for the quadruped; the inputs grow from 48 to 81 (23 joints). CPU: 256 environments keep an
# iteration near the quadruped's on 2 cores (its step is costlier: docs/benchmarks.md); 4096 per GPU.
HIDDEN_DIMS = (512, 256, 128)


def humanoid_agent_config(experiment: str, max_iterations: int) -> AgentConfig:
    """The locomotion agent with less exploration noise: a biped's first lesson is not to fall, and random joint
    targets topple it. Over 40 iterations at 256 environments, with the per-servo action scales, std 0.3 and
    entropy 0.002 lengthened the training episodes more than std 0.5 and entropy 0.01
    (docs/history/learning-experiments.md)."""
    agent = agent_config(experiment, HIDDEN_DIMS, max_iterations=max_iterations)
    agent.actor.init_noise_std = 0.3
    agent.ppo.entropy_coef = 0.002
    return agent


register(
    TaskSpec(
        name="Humanoid-Velocity-Flat",
        description="G1-class humanoid (23 joints) tracks commanded (vx, vy, yaw rate) on flat ground; pushes, "
        "friction and mass randomisation.",
        env_class=ENV_CLASS,
        env_config=flat_config,
        agent_config=lambda: humanoid_agent_config("humanoid_velocity_flat", max_iterations=2000),
        num_envs_cpu=256,
        num_envs_gpu=4096,
        play_settings=play_settings,
        check_config=velocity_checks(MJFLEET_HUMANOID, "torso_link", ("mjfleet.tasks.humanoid.rewards",)),
    )
)
register(
    TaskSpec(
        name="Humanoid-Velocity-Rough",
        description="G1-class humanoid tracks commanded velocities on heightfield tiles with a terrain curriculum "
        "and a height scan.",
        env_class=ENV_CLASS,
        env_config=rough_config,
        agent_config=lambda: humanoid_agent_config("humanoid_velocity_rough", max_iterations=4000),
        num_envs_cpu=256,
        num_envs_gpu=4096,
        play_settings=play_settings,
        check_config=velocity_checks(MJFLEET_HUMANOID, "torso_link", ("mjfleet.tasks.humanoid.rewards",)),
    )
)

__getattr__ = lazy_exports(__name__, {"HumanoidEnv": ENV_CLASS})

__all__ = ["HumanoidConfig", "HumanoidEnv", "humanoid_recipe", "flat_config", "rough_config"]
