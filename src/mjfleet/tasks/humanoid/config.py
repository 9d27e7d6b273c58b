"""Settings of the humanoid velocity-tracking tasks (flat and rough): the locomotion settings, re-tuned for a biped."""

from __future__ import annotations

from dataclasses import dataclass, field

from mjfleet.envs.terms import Term
from mjfleet.tasks.locomotion.config import (
    CommandConfig,
    EventConfig,
    HeightScanConfig,
    LocomotionConfig,
)
from mjfleet.tasks.locomotion.recipes import quadruped_recipe, weights
from mjfleet.tasks.locomotion.terrain import TerrainConfig


def humanoid_recipe() -> dict[str, Term]:
    """Humanoid-Velocity-Flat's reward, per second of simulated time: the quadruped's terms with weights for a 35-kg
    biped, plus the terms that keep a humanoid's gait human-like. Reasons for every weight: docs/tasks.md,
    "Humanoid-Velocity-Flat"."""
    recipe = weights(
        quadruped_recipe(),
        # a humanoid's knees and hips carry ~10x the quadruped's torques
        torques=-1.0e-5,
        # at the quadruped's -2.5e-7 this term alone outweighed the tracking rewards 4:1 under the initial policy,
        # so every clipped step was worth 0 and nothing was learnt
        joint_acc=-2.5e-8,
        undesired_contacts=-1.0,  # thighs, shins and hands touching the ground
        feet_air_time=0.5,  # take real steps
    )
    # a biped's steps at 0.5-1 m/s last ~0.3-0.4 s: that air time earns nothing
    recipe["feet_air_time"].params["threshold"] = 0.3
    return {
        **recipe,
        # A biped's first lesson is not to fall. At weight 1.0 the penalties of the initial policy's falls still
        # outweighed everything positive, and with the step total clipped at 0 the return stayed ~0.025 with no
        # growth in episode length (measured, 6 iterations).
        "alive": Term("alive", 2.0),
        "single_stance": Term("single_stance", 0.5),  # walk, do not shuffle or hop
        "feet_slide": Term("feet_slide", -0.25),  # no skating
        "foot_clearance": Term("foot_clearance_shortfall", -10.0, {"height": 0.08}),
        # the standing pose settles at ~0.74 m: no crouching walk
        "base_height": Term("base_height", -10.0, {"target": 0.72}),
        # arms are not for balancing on flat ground
        "joint_deviation_upper": Term("joint_deviation_upper", -0.2),
        # keeps the legs under the body (turning still needs some yaw)
        "joint_deviation_hips": Term("joint_deviation_hips", -0.2),
    }


@dataclass
class HumanoidConfig(LocomotionConfig):
    """Humanoid velocity tracking: 200 Hz physics, 50 Hz policy, 20 s episodes, as for the quadruped."""

    scale_actions_by_servo: bool = True
    """0.25 x torque limit / kp per joint: 0.04 rad (ankle pitch) to 0.31 rad (wrists) instead of 0.25 rad for
    every joint. The stiff leg servos' exploration noise no longer topples the robot within a second: over 40
    iterations the episodes lengthened much more than with one scale (docs/history/learning-experiments.md)."""
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
    rewards: dict[str, Term] = field(default_factory=humanoid_recipe)


def flat_config() -> HumanoidConfig:
    """Humanoid-Velocity-Flat: a plane, no height scan."""
    return HumanoidConfig()


def rough_config() -> HumanoidConfig:
    """Humanoid-Velocity-Rough: generated tiles with a curriculum and a height scan for actor and critic."""
    return HumanoidConfig(
        terrain=TerrainConfig(kind="rough"),
        height_scan=HeightScanConfig(enabled=True, offset=0.75),
        # On slopes a level pelvis and a fixed height are wrong: penalise both lightly.
        rewards=weights(humanoid_recipe(), orientation=-0.2, base_height=-2.0),
    )
