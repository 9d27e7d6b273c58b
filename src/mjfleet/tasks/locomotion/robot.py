"""What the velocity task reads from a built robot (mjfleet.robots.BuiltRobot), for LocomotionEnv and its
subclasses: the joint layout it writes states in, the robot's collision geoms, the feet's touch sensors."""

from __future__ import annotations

import mujoco
import numpy as np

from mjfleet.errors import UsageError
from mjfleet.robots import BuiltRobot


def joint_slices(built: BuiltRobot, m: mujoco.MjModel, num_actions: int) -> tuple[slice, slice]:
    """(qpos, qvel) slices of the actuated joints; ValueError unless the model is the base's free joint, then the
    actuated joints in actuator order (events.reset_robot_state writes qpos as base position, orientation, joints)."""
    nj = len(built.joint_names)
    if num_actions != nj:
        raise ValueError(f"{built.mjcf.name} has {num_actions} actuators, the description drives {nj} joints")
    qpos0, dof0 = int(built.qpos_adr[0]), int(built.dof_adr[0])
    free = m.body_jntadr[built.base_body_id]
    if m.nq != 7 + nj or qpos0 != 7 or m.jnt_qposadr[free] != 0 or (np.diff(built.qpos_adr) != 1).any():
        raise ValueError(
            f"{built.mjcf.name}: the velocity task needs the base's free joint, then the actuated joints"
        )
    return slice(qpos0, qpos0 + nj), slice(dof0, dof0 + nj)


def robot_collision_geoms(m: mujoco.MjModel) -> list[int]:
    """The robot's geoms that collide (contype or conaffinity set), in the model's order: not the world's."""
    return [
        g for g in range(m.ngeom) if m.geom_bodyid[g] != 0 and (m.geom_contype[g] or m.geom_conaffinity[g])
    ]


def touch_sensor_adr(m: mujoco.MjModel, built: BuiltRobot) -> list[int]:
    """The sensordata address of the touch sensor on each foot's site: what says a foot touches (its force above
    LocomotionConfig.foot_contact_force). ValueError for a foot without one."""
    touch = {
        int(m.sensor_objid[s]): int(m.sensor_adr[s])
        for s in range(m.nsensor)
        if m.sensor_type[s] == mujoco.mjtSensor.mjSENS_TOUCH
    }
    sites = built.foot_ids if built.foot_kind == "site" else ()
    missing = [
        name for i, name in enumerate(built.description.feet) if i >= len(sites) or sites[i] not in touch
    ]
    if missing:
        raise ValueError(
            f"feet {', '.join(missing)}: LocomotionEnv needs each foot a site with a touch sensor"
        )
    return [touch[site] for site in sites]


def imu_site_frame(built: BuiltRobot) -> tuple[np.ndarray, np.ndarray] | None:
    """(position, orientation (w, x, y, z)) in the base frame of the description's `imu_site`; None without one. A
    site the model lacks, or one not on the base body, is a UsageError naming the field."""
    robot, m = built.description, built.model
    if robot.imu_site is None:
        return None
    sites = [m.site(i).name for i in range(m.nsite)]
    if robot.imu_site not in sites:
        raise UsageError(
            f"{robot.name}: imu_site = {robot.imu_site!r}: no such site (its sites: {', '.join(sites)})"
        )
    site = m.site(robot.imu_site).id
    if m.site_bodyid[site] != built.base_body_id:
        raise UsageError(f"{robot.name}: imu_site = {robot.imu_site!r}: the site is not on the base body")
    return m.site_pos[site].copy(), m.site_quat[site].copy()
