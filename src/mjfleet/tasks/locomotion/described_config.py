"""Settings of the velocity task for a robot given as a `RobotDescription` (mjfleet.robots): flat ground, the same
terms as Quadruped-Velocity-Flat, with mjlab 1.6's velocity settings where mjfleet has the same setting.

Sources, mjlab 1.6.0: mjlab/tasks/velocity/velocity_env_cfg.py ("mjlab velocity" below: make_velocity_env_cfg) and
mjlab/tasks/velocity/config/go1/env_cfgs.py ("mjlab go1": unitree_go1_flat_env_cfg). Where mjlab has no such
setting, or mjfleet's term differs from mjlab's, the value is Quadruped-Velocity-Flat's (tasks/locomotion/config.py).
"""

from __future__ import annotations

import dataclasses
import math

from mjfleet.errors import UsageError
from mjfleet.robots.build import mjcf_path
from mjfleet.robots.description import RobotDescription
from mjfleet.tasks.locomotion.config import (
    CommandConfig,
    EventConfig,
    LocomotionConfig,
    LocomotionRewards,
    NoiseConfig,
)

SPAWN_DROP_M = 0.03
"""Episodes start this much above the home pose's base height: the middle of mjlab velocity's reset_base
pose_range z, (0.01, 0.05) m."""

REWARDS = LocomotionRewards(
    # mjlab velocity: track_linear_velocity and track_angular_velocity, weight 2.0 each (their kernels: exp(-error /
    # std^2) with std^2 0.25 and 0.5; mjfleet has one width, tracking_sigma 0.25, for both)
    track_lin_vel_xy=2.0,
    track_ang_vel_z=2.0,
    joint_limits=-1.0,  # mjlab velocity: dof_pos_limits (beyond the soft limits, 0.9 of the range: go1_constants)
    action_rate=-0.1,  # mjlab velocity: action_rate_l2
    feet_air_time=0.0,  # mjlab go1: air_time weight 0.0
    # lin_vel_z, ang_vel_xy, orientation, torques, joint_acc, undesired_contacts: mjlab's flat Go1 has no such
    # term (its upright, pose, foot and collision terms are not mjfleet's): Quadruped-Velocity-Flat's weights
)

G1_REWARDS = dataclasses.replace(
    REWARDS,
    # mjlab/tasks/velocity/config/g1/env_cfgs.py ("mjlab g1"): body_ang_vel -0.05 (the torso's roll and pitch rates;
    # mjfleet's term takes the base's, the pelvis')
    ang_vel_xy=-0.05,
    # The published G1 recipe has no such terms: its vertical velocity sits inside the linear tracking kernel, and
    # staying upright is paid by a positive kernel (upright), not a penalty; it has no torque, acceleration or
    # limb-contact penalty. Its upright, pose, foot and self-collision terms have no mjfleet counterpart
    # (docs/tasks.md, "G1-Velocity-Flat beside mjlab's G1").
    lin_vel_z=0.0,
    orientation=0.0,
    torques=0.0,
    joint_acc=0.0,
    undesired_contacts=0.0,
)
"""Reward weights of G1-Velocity-Flat: mjlab 1.6's G1 weights where mjfleet has the same term, 0 elsewhere."""


def velocity_flat_config(
    description: RobotDescription,
    foot_friction: tuple[float, float] = (0.3, 1.2),
    rewards: LocomotionRewards = REWARDS,
    only_positive_rewards: bool = True,
) -> LocomotionConfig:
    """The flat-ground velocity task for `description`; `foot_friction`: the range the feet's sliding friction is
    drawn from (mjlab velocity: foot_friction (0.3, 1.2)); `rewards`: the task's weights, under the description's
    own; `only_positive_rewards`: clip each step's total at 0 (the quadruped's; mjlab does not clip)."""
    home = description.home
    if home.base_height is None:  # a keyframe's height is known only once the MJCF is read
        raise ValueError(
            f"{description.name}: the velocity task needs home.base_height (not a keyframe) for now"
        )
    rewards = _with_description_weights(description, rewards)
    return LocomotionConfig(
        # mjlab velocity: decimation 4, episode_length_s 20.0, timestep 0.005 (set on the model: described.py)
        decimation=4,
        episode_length_s=20.0,
        # the description's per-joint scales are the action scales (described.py); these two are not read
        action_scale=0.25,
        scale_actions_by_servo=False,
        max_tilt=math.radians(70.0),  # mjlab go1: fell_over, bad_orientation limit_angle 70 degrees
        commands=CommandConfig(
            # mjlab velocity: twist ranges and rel_standing_envs 0.1; it redraws every 3-8 s (uniform), mjfleet
            # at a fixed interval: the quadruped's 5 s. No heading commands here (mjlab's rel_heading_envs 0.3).
            lin_vel_x=(-1.0, 1.0),
            lin_vel_y=(-1.0, 1.0),
            ang_vel_z=(-0.5, 0.5),
            standing_fraction=0.1,
        ),
        events=EventConfig(
            foot_friction=foot_friction,
            # mjlab velocity: reset_robot_joints position_range and velocity_range (0, 0); reset_base
            # velocity_range {} (none); pose x, y in +-0.5 m, yaw uniform
            joint_pos=0.0,
            joint_vel=0.0,
            base_lin_vel=0.0,
            base_ang_vel=0.0,
            spawn_xy=0.5,
            spawn_height=home.base_height + SPAWN_DROP_M,
            # mjlab velocity: push_robot every 1-3 s, x and y velocity in +-0.5 m/s (mjlab also pushes z, roll,
            # pitch and yaw; mjfleet's push is horizontal only)
            push_interval_s=(1.0, 3.0),
            push_velocity=0.5,
            # added_trunk_mass: the quadruped's (-1, 2) kg on the base body (mjlab offsets the base's centre of
            # mass instead)
        ),
        # mjlab velocity: base_lin_vel noise +-0.5 m/s and encoder_bias +-0.015 rad; the other noise ranges
        # (ang_vel 0.2, gravity 0.05, joint_pos 0.01, joint_vel 1.5) are the quadruped's already
        noise=NoiseConfig(lin_vel=0.5, joint_pos_bias=0.015),
        rewards=rewards,
        only_positive_rewards=only_positive_rewards,
    )


def _with_description_weights(description: RobotDescription, rewards: LocomotionRewards) -> LocomotionRewards:
    """`rewards` with the description's own `reward_weights` over them (each must name a term of the task)."""
    known = {f.name for f in dataclasses.fields(LocomotionRewards)}
    unknown = sorted(set(description.reward_weights) - known)
    if unknown:
        raise UsageError(
            f"{description.name}: reward_weights {', '.join(unknown)} are no terms of the velocity task "
            f"(its terms: {', '.join(sorted(known))})"
        )
    return dataclasses.replace(rewards, **description.reward_weights)


def check_fetched(description: RobotDescription) -> None:
    """A UsageError (one line: which `robots fetch` to run) when the description's MJCF is not here."""
    mjcf_path(description)
