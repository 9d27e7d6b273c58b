"""Settings of the humanoid velocity-tracking tasks (flat and rough): the locomotion settings, re-tuned for a biped."""

from __future__ import annotations

from dataclasses import dataclass, field

from mjfleet.tasks.locomotion.config import (
    CommandConfig,
    EventConfig,
    HeightScanConfig,
    LocomotionConfig,
    LocomotionRewards,
)
from mjfleet.tasks.locomotion.terrain import TerrainConfig


@dataclass
class HumanoidRewards(LocomotionRewards):
    """Reward weights per second of simulated time (each term adds weight * term * step_dt per policy step).

    The quadruped's terms, with weights for a 35-kg biped, plus the terms that keep a humanoid's gait human-like.
    Reasons for every weight: docs/tasks.md, "Humanoid-Velocity-Flat"."""

    torques: float = -1.0e-5
    """Sum of squared torques: a humanoid's knees and hips carry ~10x the quadruped's torques."""
    joint_acc: float = -2.5e-8
    """Sum of squared joint accelerations; at the quadruped's -2.5e-7 this term alone outweighed the tracking
    rewards 4:1 under the initial policy, so every clipped step was worth 0 and nothing was learnt."""
    alive: float = 2.0
    """Term 1 while the episode goes on: a biped's first lesson is not to fall. At weight 1.0 the penalties of the
    initial policy's falls still outweighed everything positive, and with the step total clipped at 0 the
    return stayed ~0.025 with no growth in episode length (measured, 6 iterations)."""
    undesired_contacts: float = -1.0
    """Thighs, shins and hands touching the ground."""
    feet_air_time: float = 0.5
    """Sum over touch-downs of (air time - threshold), while a planar command is given: take real steps."""
    single_stance: float = 0.5
    """1 while exactly one foot is on the ground and a planar command is given: walk, do not shuffle or hop."""
    feet_slide: float = -0.25
    """Horizontal speed (m/s) of the feet that touch the ground: no skating."""
    foot_clearance: float = -10.0
    """Swinging feet below the clearance height: sum of (height - target)^2 x horizontal foot speed."""
    base_height: float = -10.0
    """(pelvis height above the ground - target)^2: no crouching walk."""
    joint_deviation_upper: float = -0.2
    """Sum of |q - default| over the waist and arm joints: arms are not for balancing on flat ground."""
    joint_deviation_hips: float = -0.2
    """Sum of |q - default| over hip roll and yaw: keeps the legs under the body (turning still needs some yaw)."""


@dataclass
class HumanoidConfig(LocomotionConfig):
    """Humanoid velocity tracking: 200 Hz physics, 50 Hz policy, 20 s episodes, as for the quadruped."""

    scale_actions_by_servo: bool = True
    """0.25 x torque limit / kp per joint: 0.04 rad (ankle pitch) to 0.31 rad (wrists) instead of 0.25 rad for
    every joint. The stiff leg servos' exploration noise no longer topples the robot within a second: over 40
    iterations the episodes lengthened much more than with one scale (docs/history/learning-experiments.md)."""
    feet_air_time_threshold: float = 0.3
    """Air time (s) that earns nothing; a biped's steps at 0.5-1 m/s last ~0.3-0.4 s."""
    foot_clearance_height: float = 0.08
    """Target height (m) of a swinging sole above the ground."""
    base_height_target: float = 0.72
    """Pelvis height (m) the base_height term pulls towards: the standing pose settles at ~0.74 m."""
    min_base_height: float = 0.4
    """Episodes end when the pelvis is lower than this above the ground (m): the robot sits or kneels."""
    max_tilt: float = 1.0
    """Episodes end when the pelvis tilts further than this from upright (rad)."""
    commands: CommandConfig = field(
        default_factory=lambda: CommandConfig(
            lin_vel_x=(-1.0, 1.0), lin_vel_y=(-0.5, 0.5), ang_vel_z=(-1.0, 1.0)
        )
    )
    events: EventConfig = field(
        default_factory=lambda: EventConfig(
            added_trunk_mass=(-1.0, 3.0),
            joint_pos=0.1,
            base_lin_vel=0.3,
            base_ang_vel=0.3,
            spawn_height=0.76,
        )
    )
    height_scan: HeightScanConfig = field(default_factory=lambda: HeightScanConfig(offset=0.75))
    rewards: HumanoidRewards = field(default_factory=HumanoidRewards)


def flat_config() -> HumanoidConfig:
    """Humanoid-Velocity-Flat: a plane, no height scan."""
    return HumanoidConfig()


def rough_config() -> HumanoidConfig:
    """Humanoid-Velocity-Rough: generated tiles with a curriculum and a height scan for actor and critic."""
    return HumanoidConfig(
        terrain=TerrainConfig(kind="rough"),
        height_scan=HeightScanConfig(enabled=True, offset=0.75),
        # On slopes a level pelvis and a fixed height are wrong: penalise both lightly.
        rewards=HumanoidRewards(orientation=-0.2, base_height=-2.0),
    )
