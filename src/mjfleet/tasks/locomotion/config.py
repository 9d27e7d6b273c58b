"""Settings of the quadruped velocity-tracking tasks (flat and rough), as typed dataclasses (tyro flags)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Literal

from mjfleet.envs import EnvConfig
from mjfleet.envs.terms import Term
from mjfleet.rl import ActorConfig, AgentConfig, PolicyConfig, PPOConfig
from mjfleet.rl.sac import SACConfig
from mjfleet.tasks.locomotion.recipes import quadruped_recipe, weights
from mjfleet.tasks.locomotion.terrain import TerrainConfig


@dataclass
class CommandConfig:
    """Planar velocity commands (base frame), drawn uniformly per environment and redrawn at an interval; shares of
    them standing still, forward only or heading-controlled (tasks/locomotion/mdp/commands.py)."""

    resampling_time_s: float = 5.0
    """Every environment draws a new command this often (and at every reset), unless a range is given."""
    resampling_time_range_s: tuple[float, float] | None = None
    """Draw each environment's time to its next command uniformly in this range (s) instead (mjlab: 3-8)."""
    lin_vel_x: tuple[float, float] = (-1.0, 1.0)
    """Forward velocity range (m/s)."""
    lin_vel_y: tuple[float, float] = (-0.6, 0.6)
    """Sideways velocity range (m/s)."""
    ang_vel_z: tuple[float, float] = (-1.0, 1.0)
    """Yaw rate range (rad/s)."""
    standing_fraction: float = 0.1
    """Share of draws that command standing still (all zeros)."""
    min_speed: float = 0.1
    """Planar commands slower than this (m/s) are set to zero: too small to walk, they only blur the task."""
    forward_fraction: float = 0.0
    """Share of draws that walk straight ahead: vx = max(|vx|, forward_min_speed), no sideways or yaw command."""
    forward_min_speed: float = 0.3
    """The slowest forward-only command (m/s)."""
    heading_fraction: float = 0.0
    """Share of draws whose yaw rate steers to a random heading: heading_stiffness x the heading error, clipped to
    ang_vel_z, at every step."""
    heading_stiffness: float = 0.5
    """Yaw rate per radian of heading error (1/s)."""
    heading: tuple[float, float] = (-math.pi, math.pi)
    """Range of the heading targets (rad, world frame)."""
    velocity_stages: tuple[tuple[float, float, float, float, float], ...] = ()
    """The velocity curriculum: (policy steps per environment, vx low, vx high, yaw-rate low, yaw-rate high), each
    replacing the vx and yaw-rate ranges once training has taken that many steps (mjlab: iterations 5,000 and
    10,000 of 24 steps)."""

    def fix(self, vx: float, vy: float, wz: float) -> None:
        """Command (vx, vy, wz) in every episode, never standing still, forward-only or heading-controlled (e.g.
        to evaluate tracking); a planar command slower than `min_speed` still becomes zero."""
        self.lin_vel_x, self.lin_vel_y, self.ang_vel_z = (vx, vx), (vy, vy), (wz, wz)
        self.standing_fraction = self.forward_fraction = self.heading_fraction = 0.0


@dataclass
class NoiseConfig:
    """Uniform noise (half-ranges, physical units) added to the actor's observations; the critic sees none."""

    enabled: bool = True
    lin_vel: float = 0.1
    ang_vel: float = 0.2
    gravity: float = 0.05
    joint_pos: float = 0.01
    joint_vel: float = 1.5
    height_scan: float = 0.1
    joint_pos_bias: float = 0.02
    """The `policy` group's encoder offsets (rad): one per environment and joint, drawn at each reset and held
    for the episode, as a joint encoder's calibration error is (the `mjlab` layout: the actor's too)."""
    joint_pos_bias_per_episode: bool = True
    """Draw the encoder offsets at every reset; False: once per environment, at start-up (mjlab's encoder_bias)."""


@dataclass
class HeightScanConfig:
    """Terrain heights on a grid around the base (aligned with its heading), read from the known height map."""

    enabled: bool = False
    size: tuple[float, float] = (1.6, 1.0)
    """Grid extent along the base's x (forward) and y (left) axes (m), centred on the base."""
    resolution: float = 0.1
    """Grid spacing (m): (1.6, 1.0) at 0.1 gives 17 x 11 = 187 points."""
    in_actor: bool = True
    """Also give the scan to the actor (the critic always gets it when enabled)."""
    offset: float = 0.25
    """Values are base height - terrain height - offset, then clipped: about 0 when standing on flat ground."""
    clip: tuple[float, float] = (-1.0, 1.0)
    """The range each value is clipped to (m): a hole or a wall beyond it reads as the bound. Part of the
    observation spec (`observation_clips`), so an export states it (policy.json's input.terms, mjlab's
    observation_terms_clip)."""


@dataclass
class EventConfig:
    """Randomisation: start-up (per-environment physics), reset (initial state) and interval (pushes)."""

    foot_friction: tuple[float, float] | None = (0.4, 1.25)
    """Per-environment sliding friction of the feet (it wins over the terrain's: the feet have priority 1).
    None: the model's own (nominal) friction in every environment."""
    added_trunk_mass: tuple[float, float] | None = (-1.0, 2.0)
    """Per-environment mass added to the trunk (kg). None: the model's own (nominal) mass."""
    joint_pos: float = 0.2
    """Initial joint angles: default + uniform in +-this (rad), clipped to the joint range."""
    joint_vel: float = 0.5
    """Initial joint velocities: uniform in +-this (rad/s)."""
    base_lin_vel: float = 0.5
    """Initial base linear velocity: each component uniform in +-this (m/s)."""
    base_ang_vel: float = 0.5
    """Initial base angular velocity: each component uniform in +-this (rad/s)."""
    spawn_xy: float = 0.5
    """Initial base position: uniform in +-this around the environment's origin (m); heading uniform."""
    spawn_height: float = 0.31
    """Initial trunk height above the ground under it (m): the keyframe's 0.285 plus a small drop."""
    spawn_height_spread: float = 0.0
    """The initial height is uniform in spawn_height +- this (m) (mjlab: 0.01-0.05 m above the keyframe)."""
    push_interval_s: tuple[float, float] = (10.0, 15.0)
    """Each environment is pushed after a random time in this range, then again after a new draw."""
    push_velocity: float = 0.5
    """A push adds uniform +-this (m/s) to the base's horizontal velocity; 0 disables pushes."""
    push_velocity_range: tuple[float, float, float, float, float, float] | None = None
    """A push adds uniform +-these to the base's world-frame velocity instead: x, y, z (m/s), roll, pitch, yaw
    (rad/s) (mjlab's push_by_setting_velocity: 0.5, 0.5, 0.4, 0.52, 0.52, 0.78). None: horizontal pushes of
    push_velocity."""
    com_offset: tuple[float, float, float] | None = None
    """Per-environment offset of `com_body`'s centre of mass, uniform in +-these (m, body frame), at start-up
    (mjlab's body_com_offset: 0.025, 0.025, 0.03). None: the model's own."""
    com_body: str | None = None
    """The body whose centre of mass is offset; None: the trunk (the body whose mass is randomised)."""


@dataclass
class LocomotionConfig(EnvConfig):
    """Quadruped velocity tracking. Physics at 200 Hz (model timestep 5 ms), policy at 50 Hz (decimation 4)."""

    decimation: int = 4
    episode_length_s: float = 20.0
    action_scale: float = 0.25
    """Joint targets are default pose + scale * action (rad): scale = action_scale, the same for every joint
    (or per joint, with scale_actions_by_servo)."""
    scale_actions_by_servo: bool = False
    """Scale each joint's action by action_scale x its servo's torque limit / kp (the target offset at which the
    servo saturates): a unit action asks every joint for the same share of its torque, so stiff joints with small
    torque limits (ankles) move less than weak, light ones (arms)."""
    clip_actions: float = 100.0
    """Effectively unclipped: the servos' ctrlrange (the joint range) limits the targets."""
    soft_joint_limit: float = 0.9
    """The joint-limit penalty starts at this fraction of each joint's range (about its middle)."""
    foot_contact_force: float = 1.0
    """A foot is in contact when its touch sensor reads more than this (N)."""
    observation_layout: Literal["legged_gym", "mjlab"] = "legged_gym"
    """The observation groups' terms and order. legged_gym: base velocities, gravity, command, joints, last action;
    the critic adds foot contacts, foot friction, added mass and base height. mjlab (1.6's velocity task): base
    velocities, gravity, joints (the actor's with the encoder offsets), last action, command; the critic adds the
    feet's heights, air times, contacts and log-scaled contact forces (needs the gait sensors: described robots)."""
    only_positive_rewards: bool = True
    """Clip each step's total reward at 0 (legged_gym): with penalties outweighing tracking early in training,
    negative steps teach the policy to fall on purpose (episodes collapsed without it: docs/history/learning-experiments.md)."""
    termination_penalty: float = 0.0
    """Added once to the reward of a step that ends its episode by a termination (a fall, or physics that diverged;
    not a time-out), after the clip at 0. With the clip off, a policy whose steps earn less than nothing ends its
    episodes early on purpose (SAC lunged forward: docs/history/sac-quadruped-probes.md); a penalty larger than the
    rest of a bad episode's return takes that way out."""
    max_tilt: float = 1.2
    """Episodes terminate when the base tilts further than this from upright (rad), or the trunk touches ground."""
    contact_terminations: bool = True
    """A contact of the robot's terminating bodies (the trunk; a description's terminate_on_contact) ends the
    episode; False: only the tilt does (mjlab's flat tasks: fell_over alone)."""
    commands: CommandConfig = field(default_factory=CommandConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    height_scan: HeightScanConfig = field(default_factory=HeightScanConfig)
    events: EventConfig = field(default_factory=EventConfig)
    terrain: TerrainConfig = field(default_factory=TerrainConfig)
    rewards: dict[str, Term] = field(default_factory=quadruped_recipe)
    """The reward recipe: name -> Term(func, weight per second, params) over the reward term library
    (mjfleet.envs.terms); `--env.rewards.<name>.weight`, `--env.rewards.<name>.params.<param>`."""


def flat_config() -> LocomotionConfig:
    """Quadruped-Velocity-Flat: a plane, no height scan."""
    return LocomotionConfig()


def rough_config() -> LocomotionConfig:
    """Quadruped-Velocity-Rough: generated tiles with a curriculum and a height scan for actor and critic."""
    return LocomotionConfig(
        terrain=TerrainConfig(kind="rough"),
        height_scan=HeightScanConfig(enabled=True),
        # On slopes a level base is wrong: penalise tilt only lightly; reward steps less (stairs need short ones).
        rewards=weights(quadruped_recipe(), orientation=-0.2, feet_air_time=0.125),
    )


def play_settings(cfg: LocomotionConfig) -> None:
    """What `play` evaluates (unless --train-env): the policy on the nominal robot, not the domain randomisation
    that made it robust. No pushes, no observation noise, the model's own foot friction and trunk mass. Commands,
    initial states and terrain stay as in training.

    The noise is off by its half-ranges, every one 0 (encoder offsets included), not by `noise.enabled`: eval.json's
    env_cfg then states the noise play ran with, and an `--env.noise.*` flag adds just the noise it names."""
    cfg.events.push_velocity = 0.0
    cfg.events.push_velocity_range = None
    cfg.events.foot_friction = None
    cfg.events.added_trunk_mass = None
    cfg.events.com_offset = None
    half_ranges = [f.name for f in fields(NoiseConfig) if f.type in ("float", float)]  # not the switches
    cfg.noise = dataclasses.replace(cfg.noise, **dict.fromkeys(half_ranges, 0.0))


def agent_config(experiment: str, hidden_dims: tuple[int, ...], max_iterations: int) -> AgentConfig:
    """PPO settings known to work for legged velocity tracking (rsl_rl / legged_gym defaults)."""
    return AgentConfig(
        experiment_name=experiment,
        num_steps_per_env=24,
        max_iterations=max_iterations,
        save_interval=50,
        actor=ActorConfig(
            hidden_dims=hidden_dims, activation="elu", obs_normalization=True, init_noise_std=1.0
        ),
        critic=PolicyConfig(hidden_dims=hidden_dims, activation="elu", obs_normalization=True),
        ppo=PPOConfig(
            learning_rate=1e-3,
            schedule="adaptive",
            desired_kl=0.01,
            num_learning_epochs=5,
            num_mini_batches=4,
            entropy_coef=0.01,
            gamma=0.99,
            lam=0.95,
            clip_param=0.2,
            value_loss_coef=1.0,
            max_grad_norm=1.0,
        ),
        # --algorithm sac, chosen by short runs on the 2-core CPU (2 workers x 256 envs, 2026-11-25; docs/sac.md):
        # - action_bound 1 (joint targets within +-0.25 rad of the default pose, as far as PPO's first actions
        #   reach): bounded by the joint limits, random and early actions flail, every step's reward clips to 0
        #   and the policy learnt to stand still.
        # - init_alpha 1e-3 with a 10x faster temperature: a step's reward is at most ~0.03 (terms scaled by the
        #   policy's dt), so an entropy bonus of 0.01 x entropy outweighed walking until alpha came down.
        # - gamma 0.97 and half a gradient step per env step with batches of 2048: the update costs about as
        #   much as the collection on a CPU core, so a 15-minute run holds as many env steps as PPO's.
        sac=SACConfig(
            action_bound=1.0,
            init_alpha=1e-3,
            alpha_learning_rate=3e-3,
            gamma=0.97,
            updates_per_step=0.5,
            batch_size=2048,
            actor_hidden_dims=(256, 128, 64),
            critic_hidden_dims=(256, 256),
        ),
    )
