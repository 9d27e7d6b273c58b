"""Settings of the velocity task for a robot given as a `RobotDescription` (mjfleet.robots): flat ground, the same
terms as Quadruped-Velocity-Flat, with mjlab 1.6's velocity settings where mjfleet has the same setting.

Sources, mjlab 1.6.0: mjlab/tasks/velocity/velocity_env_cfg.py ("mjlab velocity" below: make_velocity_env_cfg) and
mjlab/tasks/velocity/config/go1/env_cfgs.py ("mjlab go1": unitree_go1_flat_env_cfg). Where mjlab has no such
setting, or mjfleet's term differs from mjlab's, the value is Quadruped-Velocity-Flat's (tasks/locomotion/config.py).
"""

from __future__ import annotations

import dataclasses
import math

from mjfleet.envs.terms import Term, with_overrides
from mjfleet.errors import UsageError
from mjfleet.robots.build import mjcf_path
from mjfleet.robots.description import RobotDescription
from mjfleet.tasks.locomotion.config import (
    CommandConfig,
    EventConfig,
    LocomotionConfig,
    NoiseConfig,
)
from mjfleet.tasks.locomotion.recipes import mjlab_velocity_recipe, quadruped_recipe, weights

MJLAB_VELOCITY_STAGES = ((5000 * 24, -1.5, 2.0, -0.7, 0.7), (10000 * 24, -2.0, 3.0, -0.7, 0.7))
"""mjlab velocity's curriculum "command_vel": from iteration 5,000 (24 steps each) vx in [-1.5, 2] and yaw rate in
[-0.7, 0.7], from 10,000 vx in [-2, 3]."""
SPAWN_DROP_M = 0.03
SPAWN_DROP_SPREAD_M = 0.02
"""Episodes start 0.03 +- 0.02 m above the home pose's base height: mjlab velocity's reset_base pose_range z,
(0.01, 0.05) m."""


def legged_recipe() -> dict[str, Term]:
    """The reward of a robot file's velocity task unless it names another: the quadruped's terms, which need no
    body or joint names, with mjlab 1.6's weights where mjlab has the same term (tracking 2.0 each, joint limits
    -1.0, action rate -0.1, no air time)."""
    return weights(
        quadruped_recipe(),
        track_lin_vel_xy=2.0,
        track_ang_vel_z=2.0,
        joint_limits=-1.0,
        action_rate=-0.1,
        feet_air_time=0.0,
    )


def go1_recipe() -> dict[str, Term]:
    """Go1-Velocity-Flat's reward: mjlab 1.6.0's velocity recipe as its Go1 flat task sets it
    (mjlab/tasks/velocity/config/go1/env_cfgs.py): the trunk upright, no body-rate, angular-momentum or air-time
    reward, no collision terms on flat ground (the flat task removes them)."""
    return mjlab_velocity_recipe(
        upright_body="trunk",
        posture={
            "std_standing": {
                r".*(FR|FL|RR|RL)_(hip|thigh)_joint.*": 0.05,
                r".*(FR|FL|RR|RL)_calf_joint.*": 0.1,
            },
            "std_walking": {
                r".*(FR|FL|RR|RL)_(hip|thigh)_joint.*": 0.3,
                r".*(FR|FL|RR|RL)_calf_joint.*": 0.6,
            },
            "std_running": {
                r".*(FR|FL|RR|RL)_(hip|thigh)_joint.*": 0.3,
                r".*(FR|FL|RR|RL)_calf_joint.*": 0.6,
            },
        },
    )


G1_STD_WALKING = {
    r".*hip_pitch.*": 0.3, r".*hip_roll.*": 0.15, r".*hip_yaw.*": 0.15, r".*knee.*": 0.35,
    r".*ankle_pitch.*": 0.25, r".*ankle_roll.*": 0.1, r".*waist_yaw.*": 0.2, r".*waist_roll.*": 0.08,
    r".*waist_pitch.*": 0.1, r".*shoulder_pitch.*": 0.15, r".*shoulder_roll.*": 0.15, r".*shoulder_yaw.*": 0.1,
    r".*elbow.*": 0.15, r".*wrist.*": 0.3,
}  # fmt: skip
G1_STD_RUNNING = {
    r".*hip_pitch.*": 0.5, r".*hip_roll.*": 0.2, r".*hip_yaw.*": 0.2, r".*knee.*": 0.6,
    r".*ankle_pitch.*": 0.35, r".*ankle_roll.*": 0.15, r".*waist_yaw.*": 0.3, r".*waist_roll.*": 0.08,
    r".*waist_pitch.*": 0.2, r".*shoulder_pitch.*": 0.5, r".*shoulder_roll.*": 0.2, r".*shoulder_yaw.*": 0.15,
    r".*elbow.*": 0.35, r".*wrist.*": 0.3,
}  # fmt: skip


def g1_recipe() -> dict[str, Term]:
    """G1-Velocity-Flat's reward: mjlab 1.6.0's velocity recipe as its G1 task sets it
    (mjlab/tasks/velocity/config/g1/env_cfgs.py): the torso upright and its roll and pitch rates -0.05, angular
    momentum -0.02, self-collisions -1.0 (substeps with a self-contact above 10 N), the posture widths by joint."""
    return mjlab_velocity_recipe(
        upright_body="torso_link",
        posture={"std_standing": {".*": 0.05}, "std_walking": G1_STD_WALKING, "std_running": G1_STD_RUNNING},
        body_ang_vel=-0.05,
        angular_momentum=-0.02,
        self_collisions=-1.0,
    )


RECIPES = {"legged": legged_recipe, "go1": go1_recipe, "g1": g1_recipe}
"""The reward recipes a robot description may name (`RobotDescription.recipe`; default "legged")."""
CLIPPED = {"legged"}
MJLAB_RECIPES = {"go1", "g1"}
"""Recipes from mjlab's flat tasks: their episodes end on orientation alone."""
"""Recipes whose step reward is clipped at 0 (the quadruped's rule: its penalties outweigh tracking early on);
mjlab's recipes are not clipped."""


def velocity_flat_config(
    description: RobotDescription,
    foot_friction: tuple[float, float] = (0.3, 1.2),
    rewards: dict[str, Term] | None = None,
    only_positive_rewards: bool | None = None,
) -> LocomotionConfig:
    """The flat-ground velocity task for `description`; `foot_friction`: the range the feet's sliding friction is
    drawn from (mjlab velocity: foot_friction (0.3, 1.2)); `rewards`: the task's recipe (default: the one the
    description names, else the Go1's), under the description's own weights and parameters; `only_positive_rewards`: clip each step's total at 0 (None: as the recipe says, `CLIPPED`)."""
    home = description.home
    if home.base_height is None:  # a keyframe's height is known only once the MJCF is read
        raise ValueError(
            f"{description.name}: the velocity task needs home.base_height (not a keyframe) for now"
        )
    if only_positive_rewards is None:
        only_positive_rewards = rewards is None and (description.recipe or "legged") in CLIPPED
    rewards = description_recipe(description, rewards)
    cfg = LocomotionConfig(
        # mjlab velocity: decimation 4, episode_length_s 20.0, timestep 0.005 (set on the model: described.py)
        decimation=4,
        episode_length_s=20.0,
        # the description's per-joint scales are the action scales (described.py); these two are not read
        action_scale=0.25,
        scale_actions_by_servo=False,
        max_tilt=math.radians(70.0),  # mjlab go1: fell_over, bad_orientation limit_angle 70 degrees
        # mjlab's flat tasks end episodes on orientation alone (the Go1's rough task adds illegal_contact on the
        # thighs); a robot file's task ("legged") keeps the description's contact terminations
        contact_terminations=(description.recipe or "legged") not in MJLAB_RECIPES,
        commands=CommandConfig(
            # mjlab velocity: commands "twist" (UniformVelocityCommandCfg) and curriculum "command_vel"
            lin_vel_x=(-1.0, 1.0),
            lin_vel_y=(-1.0, 1.0),
            ang_vel_z=(-0.5, 0.5),
            resampling_time_range_s=(3.0, 8.0),
            standing_fraction=0.1,
            heading_fraction=0.3,
            heading_stiffness=0.5,
            forward_fraction=0.2,
            forward_min_speed=0.3,
            min_speed=0.0,  # mjlab keeps slow planar commands
            velocity_stages=MJLAB_VELOCITY_STAGES,
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
            spawn_height_spread=SPAWN_DROP_SPREAD_M,
            # mjlab velocity: push_robot every 1-3 s, velocity_range x, y +-0.5 m/s, z +-0.4, roll, pitch +-0.52, yaw
            # +-0.78 rad/s (push_by_setting_velocity)
            push_interval_s=(1.0, 3.0),
            push_velocity=0.5,
            push_velocity_range=(0.5, 0.5, 0.4, 0.52, 0.52, 0.78),
            # mjlab velocity: base_com (body_com_offset, add) +-0.025, +-0.025, +-0.03 m on the robot's body (the
            # description's events name it: the G1's torso, the Go1's trunk); no mass randomisation
            added_trunk_mass=None,
            com_offset=(0.025, 0.025, 0.03),
        ),
        # mjlab velocity: base_lin_vel noise +-0.5 m/s and encoder_bias +-0.015 rad, drawn at start-up; the other
        # noise ranges (ang_vel 0.2, gravity 0.05, joint_pos 0.01, joint_vel 1.5) are the quadruped's already
        noise=NoiseConfig(lin_vel=0.5, joint_pos_bias=0.015, joint_pos_bias_per_episode=False),
        # mjlab velocity: observations, actor_terms and critic_terms (the actor's joint positions biased)
        observation_layout="mjlab",
        rewards=rewards,
        only_positive_rewards=only_positive_rewards,
    )
    cfg.events = with_event_settings(cfg.events, description)
    return cfg


def with_event_settings(events: EventConfig, description: RobotDescription) -> EventConfig:
    """`events` with the description's own `events` settings over them, by EventConfig field name (a robot's
    randomisation set once in its file)."""
    known = {f.name for f in dataclasses.fields(EventConfig)}
    unknown = sorted(set(description.events) - known)
    if unknown:
        raise UsageError(
            f"{description.name}: events[{unknown[0]!r}]: no setting of the velocity task's events "
            f"(its settings: {', '.join(sorted(known))})"
        )
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in description.events.items()}
    return dataclasses.replace(events, **values)


def check_recipe_name(description: RobotDescription) -> None:
    name = description.recipe or "legged"
    if name not in RECIPES:
        raise UsageError(
            f"{description.name}: recipe = {name!r}: no such recipe (known: {', '.join(sorted(RECIPES))})"
        )


def description_recipe(
    description: RobotDescription, recipe: dict[str, Term] | None = None
) -> dict[str, Term]:
    """`recipe` (default: the recipe the description names, else the Go1's) with the description's
    `reward_weights` and `reward_params` over it. Unknown recipe or term names are one line naming the field."""
    check_recipe_name(description)
    if recipe is None:
        name = description.recipe or "legged"
        recipe = RECIPES[name]()
    # the library's terms, for names the description adds
    import mjfleet.tasks.locomotion.mdp.gait_rewards  # noqa: F401
    import mjfleet.tasks.locomotion.mdp.rewards  # noqa: F401

    return with_overrides(
        recipe,
        description.reward_weights,
        description.reward_params,
        prefix=f"{description.name}: ",
    )


def check_fetched(description: RobotDescription) -> None:
    """A UsageError (one line: which `robots fetch` to run) when the description's MJCF is not here."""
    mjcf_path(description)
