"""Reward terms of velocity tracking: plain functions `fn(env) -> (num_envs,) tensor`, weighted by the fields of the
same name in `LocomotionRewards` (per second: the environment scales them by the policy step)."""

from __future__ import annotations

import torch


def track_lin_vel_xy(env) -> torch.Tensor:
    """exp(-|commanded - actual planar velocity|^2 / tracking_sigma): 1 when the command is followed."""
    error = (env.commands[:, :2] - env.base_lin_vel[:, :2]).square().sum(dim=1)
    return torch.exp(-error / env.cfg.tracking_sigma)


def track_ang_vel_z(env) -> torch.Tensor:
    """exp(-(commanded - actual yaw rate)^2 / tracking_sigma)."""
    error = (env.commands[:, 2] - env.base_ang_vel[:, 2]).square()
    return torch.exp(-error / env.cfg.tracking_sigma)


def lin_vel_z(env) -> torch.Tensor:
    """Squared vertical base velocity (bouncing)."""
    return env.base_lin_vel[:, 2].square()


def ang_vel_xy(env) -> torch.Tensor:
    """Squared roll and pitch rates (rocking)."""
    return env.base_ang_vel[:, :2].square().sum(dim=1)


def orientation(env) -> torch.Tensor:
    """Squared horizontal components of gravity in the base frame (0 when level)."""
    return env.gravity_b[:, :2].square().sum(dim=1)


def torques(env) -> torch.Tensor:
    """Sum of squared actuator forces."""
    return env._actuator_force.square().sum(dim=1)


def joint_acc(env) -> torch.Tensor:
    """Sum of squared joint accelerations."""
    return env.sim.qacc[:, env._vj].square().sum(dim=1)


def action_rate(env) -> torch.Tensor:
    """Sum of squared changes of the action from the last step."""
    return (env.actions - env.last_actions).square().sum(dim=1)


def joint_limits(env) -> torch.Tensor:
    """How far the joints are past their soft limits (rad, summed)."""
    q = env.sim.qpos[:, env._qj]
    below = (env.soft_joint_lower - q).clamp(min=0.0)
    above = (q - env.soft_joint_upper).clamp(min=0.0)
    return (below + above).sum(dim=1)


def undesired_contacts(env) -> torch.Tensor:
    """The number of the robot's collision geoms touching anything that are neither feet nor episode-ending
    (`env.leg_geoms`: the quadruped's thighs and calves)."""
    return (env.contact_counts[:, env.leg_geoms] > 0).float().sum(dim=1)


def feet_air_time(env) -> torch.Tensor:
    """At each touch-down, the foot's air time minus the threshold (long steps earn, short ones cost); only while
    the command asks to move."""
    threshold = env.cfg.feet_air_time_threshold
    reward = ((env._touchdown_air_time - threshold) * env.first_contact).sum(dim=1)
    return reward * (env.commands[:, :2].norm(dim=1) > env.cfg.commands.min_speed)


TERMS = {
    "track_lin_vel_xy": track_lin_vel_xy,
    "track_ang_vel_z": track_ang_vel_z,
    "lin_vel_z": lin_vel_z,
    "ang_vel_xy": ang_vel_xy,
    "orientation": orientation,
    "torques": torques,
    "joint_acc": joint_acc,
    "action_rate": action_rate,
    "joint_limits": joint_limits,
    "undesired_contacts": undesired_contacts,
    "feet_air_time": feet_air_time,
}
"""Each reward term by the name of its weight."""
