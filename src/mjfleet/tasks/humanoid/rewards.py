"""The humanoid's reward terms beside the locomotion ones (tasks/locomotion/mdp/rewards.py), in the same reward
term library: staying alive, a walking gait (single stance, no sliding feet, lifted swing feet), base height and a
quiet upper body."""

from __future__ import annotations

import torch

from mjfleet.envs.terms import reward_term


@reward_term
def alive(env) -> torch.Tensor:
    """1 for every step that does not end the episode by a fall."""
    return (~env.terminated).float()


@reward_term
def single_stance(env) -> torch.Tensor:
    """1 when exactly one foot is on the ground, while the command asks to move."""
    return (env.foot_contact.sum(dim=1) == 1).float() * _moving(env)


@reward_term
def feet_slide(env) -> torch.Tensor:
    """Horizontal speed of the feet that touch the ground (m/s, summed)."""
    return (env.foot_vel_xy.norm(dim=-1) * env.foot_contact).sum(dim=1)


@reward_term(name="foot_clearance_shortfall")
def foot_clearance(env, height: float = 0.08) -> torch.Tensor:
    """Swing feet below `height` (m, the sole above the ground): squared shortfall times horizontal foot speed,
    summed."""
    shortfall = (height - env.foot_height()).clamp(min=0.0)
    swinging = ~env.foot_contact
    return (shortfall.square() * env.foot_vel_xy.norm(dim=-1) * swinging).sum(dim=1)


@reward_term
def base_height(env, target: float = 0.72) -> torch.Tensor:
    """Squared distance of the pelvis height above the ground from `target` (m)."""
    return (env.base_height() - target).square()


@reward_term
def joint_deviation_upper(env) -> torch.Tensor:
    """Waist and arm joints' distance from the default pose (rad, summed)."""
    return _joint_deviation(env, env._upper_joints)


@reward_term
def joint_deviation_hips(env) -> torch.Tensor:
    """Hip roll and yaw joints' distance from the default pose (rad, summed)."""
    return _joint_deviation(env, env._hip_joints)


def _moving(env) -> torch.Tensor:
    return env.commands[:, :2].norm(dim=1) > env.cfg.commands.min_speed


def _joint_deviation(env, joints: torch.Tensor) -> torch.Tensor:
    q = env.sim.qpos[:, env._qj] - env.default_joint_pos
    return q[:, joints].abs().sum(dim=1)
