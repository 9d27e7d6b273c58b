"""What a velocity task's settings must satisfy, checked in the launching process before any worker starts (train's
checks): the reward recipe against the term library and against the robot's compiled model, and the mass
randomisation against the body it loads. Light on purpose: MuJoCo and torch, no mujoco_warp (the launching process
of a multi-worker run never imports the simulator)."""

from __future__ import annotations

from mjfleet.envs.terms import check_against_model, check_recipe
from mjfleet.robots import RobotDescription, build_robot
from mjfleet.tasks.locomotion.mdp import events, gait_rewards, rewards  # noqa: F401 - the terms a recipe may name
from mjfleet.tasks.locomotion.robot import imu_site_frame


def check_velocity_config(cfg, robot: RobotDescription, trunk: str | None = None) -> None:
    """A UsageError naming the field and the robot where `cfg` does not fit the library or `robot`; `trunk`: the body
    whose mass is randomised (None: the robot's base body)."""
    prefix = f"{robot.name}: "
    check_recipe(cfg.rewards, "env.rewards", prefix=prefix)
    built = build_robot(robot)
    check_against_model(cfg.rewards, built.model, built.joint_names, "env.rewards", prefix)
    body = built.base_body_id if trunk is None else built.model.body(trunk).id
    events.check_added_mass(built.model, body, cfg.events.added_trunk_mass, prefix)
    events.check_com_body(built.model, cfg.events, prefix)
    imu_site_frame(built)
