"""What a velocity task's settings must satisfy, checked in the launching process before any worker starts (train's
checks): the reward recipe against the term library and against the robot's compiled model, and the mass
randomisation against the body it loads. Light on purpose: MuJoCo and torch, no mujoco_warp (the launching process
of a multi-worker run never imports the simulator)."""

from __future__ import annotations

from mjfleet.envs.terms import check_against_model, check_recipe
from mjfleet.errors import UsageError
from mjfleet.robots import RobotDescription, build_robot
from mjfleet.tasks.locomotion.mdp import events, gait_rewards, rewards  # noqa: F401 - the terms a recipe may name


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
    check_imu_site(built, robot)


def check_imu_site(built, robot: RobotDescription) -> None:
    """The description's `imu_site` is a site on the base body."""
    if robot.imu_site is None:
        return
    m = built.model
    sites = [m.site(i).name for i in range(m.nsite)]
    if robot.imu_site not in sites:
        raise UsageError(
            f"{robot.name}: imu_site = {robot.imu_site!r}: no such site (its sites: {', '.join(sites)})"
        )
    if m.site_bodyid[m.site(robot.imu_site).id] != built.base_body_id:
        raise UsageError(f"{robot.name}: imu_site = {robot.imu_site!r}: the site is not on the base body")
