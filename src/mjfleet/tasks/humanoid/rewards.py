"""The humanoid's reward terms beside the locomotion ones (tasks/locomotion/mdp/rewards.py): staying alive, a
walking gait (single stance, no sliding feet, lifted swing feet), base height and a quiet upper body."""

from __future__ import annotations

import torch

from mjfleet.tasks.locomotion.mdp import rewards as locomotion


def alive(env) -> torch.Tensor:
    """1 for every step that does not end the episode by a fall."""
    return (~env.terminated).float()


def single_stance(env) -> torch.Tensor:
    """1 when exactly one foot is on the ground, while the command asks to move."""
    return (env.foot_contact.sum(dim=1) == 1).float() * _moving(env)


def feet_slide(env) -> torch.Tensor:
    """Horizontal speed of the feet that touch the ground (m/s, summed)."""
    return (env.foot_vel_xy.norm(dim=-1) * env.foot_contact).sum(dim=1)


def foot_clearance(env) -> torch.Tensor:
    """Swing feet below the clearance height: squared shortfall times horizontal foot speed, summed."""
    shortfall = (env.cfg.foot_clearance_height - env.foot_height()).clamp(min=0.0)
    swinging = ~env.foot_contact
    return (shortfall.square() * env.foot_vel_xy.norm(dim=-1) * swinging).sum(dim=1)


def base_height(env) -> torch.Tensor:
    """Squared distance of the pelvis height above the ground from its target."""
    return (env.base_height() - env.cfg.base_height_target).square()


def joint_deviation_upper(env) -> torch.Tensor:
    """Waist and arm joints' distance from the default pose (rad, summed)."""
    return _joint_deviation(env, env._upper_joints)


def joint_deviation_hips(env) -> torch.Tensor:
    """Hip roll and yaw joints' distance from the default pose (rad, summed)."""
    return _joint_deviation(env, env._hip_joints)


def _moving(env) -> torch.Tensor:
    return env.commands[:, :2].norm(dim=1) > env.cfg.commands.min_speed


def _joint_deviation(env, joints: torch.Tensor) -> torch.Tensor:
    q = env.sim.qpos[:, env._qj] - env.default_joint_pos
    return q[:, joints].abs().sum(dim=1)


TERMS = {
    **locomotion.TERMS,
    "alive": alive,
    "single_stance": single_stance,
    "feet_slide": feet_slide,
    "foot_clearance": foot_clearance,
    "base_height": base_height,
    "joint_deviation_upper": joint_deviation_upper,
    "joint_deviation_hips": joint_deviation_hips,
}
"""Each reward term by the name of its weight: the locomotion terms and the humanoid's own."""
