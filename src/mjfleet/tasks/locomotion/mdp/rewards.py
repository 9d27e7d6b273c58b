"""Reward terms of velocity tracking, in the reward term library (mjfleet.envs.terms): functions
`fn(env, **params) -> (num_envs,) tensor`, chosen, weighted and parametrised by a recipe (tasks/locomotion/recipes.py;
weights per second: the environment scales them by the policy step)."""

from __future__ import annotations

import torch

from mjfleet.envs.terms import reward_term


@reward_term(positive=("sigma",))
def track_lin_vel_xy(env, sigma: float = 0.25) -> torch.Tensor:
    """exp(-|commanded - actual planar velocity|^2 / sigma): 1 when the command is followed (sigma: a variance,
    (m/s)^2)."""
    error = (env.commands[:, :2] - env.base_lin_vel[:, :2]).square().sum(dim=1)
    return torch.exp(-error / sigma)


@reward_term(positive=("sigma",))
def track_ang_vel_z(env, sigma: float = 0.25) -> torch.Tensor:
    """exp(-(commanded - actual yaw rate)^2 / sigma) (sigma: a variance, (rad/s)^2)."""
    error = (env.commands[:, 2] - env.base_ang_vel[:, 2]).square()
    return torch.exp(-error / sigma)


@reward_term
def lin_vel_z(env) -> torch.Tensor:
    """Squared vertical base velocity (bouncing)."""
    return env.base_lin_vel[:, 2].square()


@reward_term
def ang_vel_xy(env) -> torch.Tensor:
    """Squared roll and pitch rates (rocking)."""
    return env.base_ang_vel[:, :2].square().sum(dim=1)


@reward_term
def orientation(env) -> torch.Tensor:
    """Squared horizontal components of gravity in the base frame (0 when level)."""
    return env.gravity_b[:, :2].square().sum(dim=1)


@reward_term
def torques(env) -> torch.Tensor:
    """Sum of squared actuator forces."""
    return env._actuator_force.square().sum(dim=1)


@reward_term
def joint_acc(env) -> torch.Tensor:
    """Sum of squared joint accelerations."""
    return env.sim.qacc[:, env._vj].square().sum(dim=1)


@reward_term
def action_rate(env) -> torch.Tensor:
    """Sum of squared changes of the action from the last step."""
    return (env.actions - env.last_actions).square().sum(dim=1)


@reward_term
def joint_limits(env) -> torch.Tensor:
    """How far the joints are past their soft limits (rad, summed)."""
    q = env.sim.qpos[:, env._qj]
    below = (env.soft_joint_lower - q).clamp(min=0.0)
    above = (q - env.soft_joint_upper).clamp(min=0.0)
    return (below + above).sum(dim=1)


@reward_term
def undesired_contacts(env) -> torch.Tensor:
    """The number of the robot's collision geoms touching anything that are neither feet nor episode-ending
    (`env.leg_geoms`: the quadruped's thighs and calves)."""
    return (env.contact_counts[:, env.leg_geoms] > 0).float().sum(dim=1)


@reward_term
def feet_air_time(env, threshold: float = 0.5) -> torch.Tensor:
    """At each touch-down, the foot's air time minus `threshold` (s: long steps earn, short ones cost); only while
    the command asks to move."""
    reward = ((env._touchdown_air_time - threshold) * env.first_contact).sum(dim=1)
    return reward * (env.commands[:, :2].norm(dim=1) > env.cfg.commands.min_speed)
