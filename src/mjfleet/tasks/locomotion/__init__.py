"""Quadruped-Velocity-Flat and Quadruped-Velocity-Rough: track commanded planar velocities with a Go1-class robot;
Go1-Velocity-Flat and G1-Velocity-Flat: the same task for robots given as descriptions (mjfleet.robots)."""

import re
from functools import partial
from typing import TYPE_CHECKING

from mjfleet.errors import UsageError
from mjfleet.lazy import lazy_exports
from mjfleet.robots.mjfleet_quadruped import MJFLEET_QUADRUPED
from mjfleet.robots.unitree_g1 import UNITREE_G1
from mjfleet.robots.unitree_go1 import UNITREE_GO1
from mjfleet.tasks.locomotion.config import (
    CommandConfig,
    EventConfig,
    HeightScanConfig,
    LocomotionConfig,
    NoiseConfig,
    agent_config,
    flat_config,
    play_settings,
    rough_config,
)
from mjfleet.tasks.locomotion.described_config import check_fetched, velocity_flat_config
from mjfleet.tasks.locomotion.terrain import HeightMap, Terrain, TerrainConfig
from mjfleet.tasks.registry import TaskSpec, register

if TYPE_CHECKING:
    from mjfleet.tasks.locomotion.env import LocomotionEnv

# By name: the simulator is imported when an environment is built, not when the task is registered.
ENV_CLASS = "mjfleet.tasks.locomotion.env:LocomotionEnv"


def velocity_checks(robot, trunk: str | None = None, term_modules: tuple[str, ...] = ()):
    """A TaskSpec's `check_config` for a velocity task on `robot` (tasks/locomotion/checks.py, imported when it runs);
    `term_modules` hold further terms its recipe may name (imported first, which registers them)."""

    def check(cfg) -> None:
        import importlib

        from mjfleet.tasks.locomotion.checks import check_velocity_config

        for module in term_modules:
            importlib.import_module(module)
        check_velocity_config(cfg, robot, trunk)

    return check


# Networks: 512-256-128 ELU (rsl_rl's legged defaults); 4096 envs per GPU. On CPU the flat task trains 2 workers x
# 256 envs (one worker per core beats one worker with 512) with 256-128-64 networks: the smaller PPO update lets a
# 15-minute run hold more iterations, and tracking improved per iteration too (figures: docs/benchmarks.md).
# Rough keeps one worker with 256.
HIDDEN_DIMS = (512, 256, 128)
CPU_HIDDEN_DIMS = (256, 128, 64)

register(
    TaskSpec(
        name="Quadruped-Velocity-Flat",
        description="Go1-class quadruped tracks commanded (vx, vy, yaw rate) on flat ground; pushes, friction and "
        "mass randomisation.",
        env_class=ENV_CLASS,
        env_config=flat_config,
        agent_config=lambda: agent_config("quadruped_velocity_flat", HIDDEN_DIMS, max_iterations=1500),
        agent_config_cpu=lambda: agent_config(
            "quadruped_velocity_flat", CPU_HIDDEN_DIMS, max_iterations=1500
        ),
        num_envs_cpu=256,
        num_envs_gpu=4096,
        cpu_workers=2,
        play_settings=play_settings,
        check_config=velocity_checks(MJFLEET_QUADRUPED),
    )
)
register(
    TaskSpec(
        name="Quadruped-Velocity-Rough",
        description="Go1-class quadruped tracks commanded velocities on heightfield tiles (slopes, rough ground, "
        "stairs, boxes) with a terrain curriculum and a height scan.",
        env_class=ENV_CLASS,
        env_config=rough_config,
        agent_config=lambda: agent_config("quadruped_velocity_rough", HIDDEN_DIMS, max_iterations=3000),
        num_envs_cpu=256,
        num_envs_gpu=4096,
        play_settings=play_settings,
        check_config=velocity_checks(MJFLEET_QUADRUPED),
    )
)

# Described robots (tasks/locomotion/described.py). Networks and PPO: mjlab 1.6.0's Go1 runner
# (mjlab/tasks/velocity/config/go1/rl_cfg.py: 512-256-128 ELU, the same PPO settings as agent_config, 10,000
# iterations) on GPU; on CPU the quadruped's smaller networks and 1500 iterations.


def described_task(
    name: str,
    robot,
    description: str,
    env_class: str = "RobotVelocityEnv",
    experiment: str | None = None,
    **config,
) -> TaskSpec:
    """The flat velocity task of a described robot (`robot`, a RobotDescription), with the settings above;
    `config` goes to velocity_flat_config. The environment class gets the description (TaskSpec.env_kwargs)."""
    experiment = experiment or name.lower().replace("-", "_")
    return TaskSpec(
        name=name,
        description=description,
        env_class=f"mjfleet.tasks.locomotion.described:{env_class}",
        env_config=partial(velocity_flat_config, robot, **config),
        agent_config=lambda: agent_config(experiment, HIDDEN_DIMS, max_iterations=10_000),
        agent_config_cpu=lambda: agent_config(experiment, CPU_HIDDEN_DIMS, max_iterations=1500),
        num_envs_cpu=256,
        num_envs_gpu=4096,
        play_settings=play_settings,
        requires=partial(check_fetched, robot),
        check_config=velocity_checks(robot),
        env_kwargs={"robot": robot},
    )


def register_described(name: str, robot, env_class: str, description: str, **config) -> None:
    """Register `described_task` (a robot mjfleet knows by name: one environment subclass per robot)."""
    register(described_task(name, robot, description, env_class, **config))


def velocity_flat_for(robot) -> TaskSpec:
    """Velocity-Flat for the robot of a file (`--robot my_robot.py`): the task named `Velocity-Flat:<robot name>`,
    its runs under `logs/<robot name>_velocity_flat/`."""
    experiment = re.sub(r"\W+", "_", robot.name.lower()).strip("_") + "_velocity_flat"
    return described_task(
        f"Velocity-Flat:{robot.name}",
        robot,
        f"{robot.name} (a robot file) tracks commanded (vx, vy, yaw rate) on flat ground.",
        experiment=experiment,
    )


def _needs_robot(*_args):
    raise UsageError("Velocity-Flat trains the robot a file describes: give --robot path/to/robot.py")


register(
    TaskSpec(
        name="Velocity-Flat",
        description="The robot a file describes (--robot my_robot.py, docs/bring-your-robot.md) tracks commanded "
        "(vx, vy, yaw rate) on flat ground; mjlab's velocity settings, the reward its `recipe` names.",
        env_class="mjfleet.tasks.locomotion.described:RobotVelocityEnv",
        env_config=_needs_robot,
        agent_config=_needs_robot,
        num_envs_cpu=256,
        num_envs_gpu=4096,
        play_settings=play_settings,
        requires=_needs_robot,
        for_robot=velocity_flat_for,
    )
)


register_described(
    "Go1-Velocity-Flat",
    UNITREE_GO1,
    "Go1VelocityEnv",
    "Unitree Go1 (`robots fetch unitree-go1`) tracks commanded (vx, vy, yaw rate) on flat ground; "
    "mjlab 1.6's velocity recipe, term for term (docs/tasks.md).",
    foot_friction=(0.3, 1.5),  # mjlab 1.6.0 go1 env_cfgs.py: foot_friction_slide (0.3, 1.5)
)
register_described(
    "G1-Velocity-Flat",
    UNITREE_G1,
    "G1VelocityEnv",
    "Unitree G1 (`robots fetch unitree-g1`, 29 joints) tracks commanded (vx, vy, yaw rate) on flat ground; "
    "mjlab 1.6's G1 velocity recipe, term for term (docs/tasks.md).",
    # mjlab 1.6.0 g1 env_cfgs.py and velocity_env_cfg.py: its recipe (the description names it), its unclipped
    # step reward
    only_positive_rewards=False,
)

__getattr__ = lazy_exports(__name__, {"LocomotionEnv": ENV_CLASS})


__all__ = [
    "CommandConfig",
    "EventConfig",
    "HeightMap",
    "HeightScanConfig",
    "LocomotionConfig",
    "LocomotionEnv",
    "NoiseConfig",
    "Terrain",
    "TerrainConfig",
    "agent_config",
    "flat_config",
    "play_settings",
    "rough_config",
]
