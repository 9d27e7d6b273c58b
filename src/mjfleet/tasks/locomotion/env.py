"""Quadruped velocity tracking on flat ground or generated rough terrain (legged_gym-style task, vectorised).

Per policy step (50 Hz; 4 physics steps of 5 ms): actions are offsets from the default joint pose, written as
position-servo targets; the base state is read from qpos/qvel, foot contact from the feet's touch sensors and
other contacts (trunk, thighs, calves) from the simulation's contact list, scattered per world on device.
Everything is batched over environments with torch: no per-environment Python, no host synchronisation.

The robot is data: `robot`, a `RobotDescription` (mjfleet.robots.mjfleet_quadruped), built with `build_robot`;
the joints, feet, touch sensors and contact geoms come from the built robot (tasks/locomotion/robot.py).

The task's terms are plain functions of the environment in tasks/locomotion/mdp/ (commands, events, observations,
rewards); this class holds the model, the buffers and the contact and base state, and calls the terms from its hooks.
"""

from __future__ import annotations

import math

import mujoco
import torch
import warp as wp
from mujoco_warp import OverflowType

from mjfleet.envs import NAN_RESETS_KEY, MujocoVecEnv
from mjfleet.envs.terms import Term, scaled
from mjfleet.robots import BuiltRobot, RobotDescription, build_robot
from mjfleet.robots.mjfleet_quadruped import MJFLEET_QUADRUPED
from mjfleet.tasks.locomotion.config import LocomotionConfig
from mjfleet.tasks.locomotion.math import projected_gravity, quat_rotate_inverse, velocities_at
from mjfleet.tasks.locomotion.mdp import commands, events, gait_rewards, observations, rewards  # noqa: F401 - registers the reward terms
from mjfleet.tasks.locomotion.robot import (
    imu_site_frame,
    joint_slices,
    robot_collision_geoms,
    touch_sensor_adr,
)
from mjfleet.tasks.locomotion.terrain import Terrain

# Contact-buffer sizes per world. Flat: the model's own <size> (worst case 24 contacts, 108 rows). Heightfield:
# mujoco_warp keeps at most 4 contacts per hfield-geom pair, so 13 robot geoms give at most 52 contacts and
# 52 x 4 pyramidal rows + 12 joint limits = 220 rows. Measurements: docs/tasks.md; overflow is logged as
# Metrics/sim_overflow.
ROUGH_NCONMAX = 64
ROUGH_NJMAX = 256
_LS_ITERATIONS_BIT = int(OverflowType.LS_ITERATIONS)
_ITERATIONS_BIT = int(OverflowType.ITERATIONS)
_OVERFLOW_BITS = int(
    OverflowType.NEFC | OverflowType.BROADPHASE | OverflowType.NARROWPHASE | OverflowType.HFIELD
)


class LocomotionEnv(MujocoVecEnv):
    """Quadruped-Velocity-Flat / -Rough: follow a commanded (vx, vy, yaw rate) in the base frame."""

    cfg: LocomotionConfig
    action_meaning = (
        "joint position targets (rad) of the position servos, in joint_names order: "
        "target = default_joint_pos + action_scale * action, action_scale per joint (the offset is the default pose)"
    )
    per_env_model_fields = ("geom_friction", "body_mass", "body_ipos")
    # The constraint solver or its line search stopping at an iteration limit is not a buffer overflow: the step is
    # still taken (a slightly less converged constraint solve). Printing it on every occurrence flooded the console
    # during training (the solver's limit: on rough ground, 72 lines in the first 40 iterations at 4,096 worlds on
    # a GPU); both are logged instead, as Metrics/sim_solver_limit and Metrics/sim_linesearch_limit.
    silenced_overflow_warnings = _ITERATIONS_BIT | _LS_ITERATIONS_BIT

    robot: RobotDescription = MJFLEET_QUADRUPED
    """The robot, as data (mjfleet.robots): its model and the facts the task reads from it, through `build_robot`
    (tasks/humanoid gives its own; tasks/locomotion/described.py a third-party robot's)."""
    trunk: str | None = None
    """The body whose mass is randomised; None: the robot's base body."""

    # ------------------------------------------------------------------ model
    def physics_options(self) -> dict:
        """MuJoCo <option> settings over the MJCF's: the description's (a third-party robot's task adds its own)."""
        return dict(self.robot.physics)

    def build_robot_spec(self) -> mujoco.MjSpec:
        """The robot built from its description (`self.built`), with `physics_options` set: the spec to compile."""
        self.built: BuiltRobot = build_robot(self.robot)
        spec = self.built.spec
        for name, value in self.physics_options().items():
            setattr(spec.option, name, value)
        return spec

    def build_model(self) -> mujoco.MjModel:
        spec = self.build_robot_spec()
        self.terrain: Terrain | None = None
        if self.cfg.terrain.kind == "rough":
            self.terrain = Terrain(self.cfg.terrain)
            self.terrain.add_to_spec(spec, geom_name=self.built.model.geom(self.built.floor_geom_id).name)
        elif self.cfg.terrain.kind != "flat":
            raise ValueError(f"terrain.kind must be 'flat' or 'rough', got {self.cfg.terrain.kind!r}")
        self.mj_spec = spec  # an export writes the MJCF this model was compiled from
        return spec.compile()

    def deployment_rules(self, trained_cfg: dict | None = None) -> dict | None:
        """How an episode runs, for an exported policy's metadata (mjfleet.tasks.locomotion.deploy); None where
        that vocabulary cannot state it: a subclass with terms of its own that does not override this (the
        humanoid does), or rough ground (its reset and height scan need the terrain's tiles)."""
        if type(self) is not LocomotionEnv or self.terrain is not None:
            return None
        from mjfleet.tasks.locomotion.deploy import deployment_rules

        return deployment_rules(self, trained_cfg)

    def simulation_sizes(self) -> dict:
        if self.terrain is None:
            return {"nconmax": int(self.mj_model.nconmax), "njmax": int(self.mj_model.njmax)}
        return {"nconmax": ROUGH_NCONMAX, "njmax": ROUGH_NJMAX}

    def reward_config(self) -> dict[str, Term]:
        """The recipe, its weights per second scaled by the policy step (returns then ignore the control rate)."""
        return scaled(self.cfg.rewards, self.step_dt)

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        cfg, m, n, dev = self.cfg, self.mj_model, self.num_envs, self.device
        self._setup_robot()
        mid, half = 0.5 * (self.joint_lower + self.joint_upper), 0.5 * (self.joint_upper - self.joint_lower)
        self.soft_joint_lower = mid - cfg.soft_joint_limit * half
        self.soft_joint_upper = mid + cfg.soft_joint_limit * half

        # Zero-copy views of simulation state this task reads every step.
        self._actuator_force = self.sim.data_view("actuator_force")
        self._overflow = self.sim.data_view("overflow")
        contact = self.sim.data.contact
        self._contact_geom = wp.to_torch(contact.geom)  # (naconmax, 2)
        self._contact_world = wp.to_torch(contact.worldid)  # (naconmax,)
        self._nacon = wp.to_torch(self.sim.data.nacon)  # (1,)
        rows = self._contact_world.shape[0]
        self._contact_slot = torch.arange(rows, device=dev).unsqueeze(1)
        # Counts per (environment, geom), then one private slot per entry of a stale contact row: adding those
        # anywhere shared (say slot 0) made thousands of GPU atomics wait on one address (docs/history/benchmarks-log.md).
        self._geom_contacts = torch.zeros(n * m.ngeom + 2 * rows, device=dev)
        self._stale_contact_index = n * m.ngeom + torch.arange(2 * rows, device=dev).view(rows, 2)
        self._ones = torch.ones(2 * rows, device=dev)
        self.contact_counts = self._geom_contacts[: n * m.ngeom].view(n, m.ngeom)

        # Task state.
        commands.setup(self)
        self._push_steps = events.draw_push_steps(self)
        nfeet = len(self.feet)
        self.feet_air_time = torch.zeros(n, nfeet, device=dev)
        self.foot_contact = torch.zeros(n, nfeet, dtype=torch.bool, device=dev)
        self._last_foot_contact = torch.zeros_like(self.foot_contact)
        self._touchdown_air_time = torch.zeros(n, nfeet, device=dev)
        self.first_contact = torch.zeros(n, nfeet, dtype=torch.bool, device=dev)
        self._lin_vel_error = torch.zeros(n, device=dev)
        self._ang_vel_error = torch.zeros(n, device=dev)
        self._mean_base_vel = torch.zeros(3, device=dev)
        self._update_base_state()  # base_lin_vel, base_ang_vel, gravity_b, imu_lin_vel, imu_ang_vel
        self._root_xy = torch.zeros(n, 2, device=dev)

        events.place_on_terrain(self)
        self.scan_points = observations.height_scan_points(
            self.cfg.height_scan, self.terrain is not None, dev
        )
        """The height scan's grid (P, 2) in the base-heading frame; None without a scan."""
        self.joint_pos_bias = torch.zeros_like(self.default_joint_pos).expand(n, -1).clone()
        """The encoder offsets (the `policy` group's; the mjlab layout's actor's too), drawn per environment at each
        reset, or once at start-up (`noise.joint_pos_bias_per_episode`)."""
        events.randomize_physics(self)
        self._actor_noise = observations.actor_noise_scale(self)
        self._policy_noise = observations.actor_noise_scale(self, deployable=True)

    def _setup_robot(self) -> None:
        """The robot's facts, from its built description: joint slices, default pose (the home keyframe), joint
        limits, action scales, the terminating and undesired contact geoms, the randomised body and the feet (their
        collision geoms, and the touch sensors on their sites that say when they touch)."""
        cfg, b, m, dev = self.cfg, self.built, self.mj_model, self.device
        self._qj, self._vj = joint_slices(b, m, self.num_actions)
        self.joint_names = b.joint_names
        self.default_joint_pos = torch.tensor(b.default_joint_pos, dtype=torch.float32, device=dev)
        joint_range = torch.tensor(m.jnt_range[[m.joint(n).id for n in b.joint_names]], dtype=torch.float32)
        self.joint_lower, self.joint_upper = joint_range[:, 0].to(dev), joint_range[:, 1].to(dev)
        scale = torch.full((len(b.joint_names),), cfg.action_scale, device=dev)
        if cfg.scale_actions_by_servo:
            scale = scale * torch.tensor(b.effort_limit / b.kp, dtype=torch.float32, device=dev)
        self.joint_action_scale = scale
        """Per joint (rad per unit action): targets = default_joint_pos + joint_action_scale * action."""

        self.feet = self.robot.feet
        imu = imu_site_frame(b)  # (position, orientation) in the base frame of the robot's IMU site, or None
        self._imu = imu and [torch.tensor(a, dtype=torch.float32, device=dev) for a in imu]
        self.trunk_body = b.base_body_id if self.trunk is None else m.body(self.trunk).id
        self._setup_contact_geoms(robot_collision_geoms(m))

    def _setup_contact_geoms(self, robot_geoms: list[int]) -> None:
        """The feet's geoms and touch sensors, the geoms whose contact ends an episode and the undesired ones."""
        b, m, dev = self.built, self.mj_model, self.device
        self.foot_geoms = [g for geoms in b.foot_geom_ids for g in geoms]
        base_geoms = [g for g in robot_geoms if m.geom_bodyid[g] in b.terminate_body_ids]
        self.trunk_geom = base_geoms[0]
        self.base_geoms = torch.tensor(base_geoms, device=dev)
        # undesired_contacts: the robot's collision geoms but the feet's and those whose contact ends an episode
        others = [g for g in robot_geoms if g not in self.foot_geoms and g not in base_geoms]
        self.leg_geoms = torch.tensor(others, device=dev)
        self._touch_adr = torch.tensor(touch_sensor_adr(m, b), device=dev)

    # ---------------------------------------------------------------- actions
    def action_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The actions whose joint targets (default pose + scale x action) stay within the joint limits: a bounded
        policy then spans each joint's whole range, and no more (the clip range, 100, is no bound at all)."""
        clip = float(self.cfg.clip_actions)
        low = ((self.joint_lower - self.default_joint_pos) / self.joint_action_scale).clamp(-clip, clip)
        high = ((self.joint_upper - self.default_joint_pos) / self.joint_action_scale).clamp(-clip, clip)
        return low.cpu(), high.cpu()

    def apply_actions(self, actions: torch.Tensor) -> None:
        torch.addcmul(self.default_joint_pos, actions, self.joint_action_scale, out=self.sim.ctrl)

    # ------------------------------------------------------------------ state
    def _update_base_state(self) -> None:
        quat = self.sim.qpos[:, 3:7]
        # Free joint: qvel[0:3] is the world-frame linear velocity, qvel[3:6] the body-frame angular velocity.
        self.base_lin_vel = quat_rotate_inverse(quat, self.sim.qvel[:, 0:3])
        self.base_ang_vel = self.sim.qvel[:, 3:6].clone()
        self.gravity_b = projected_gravity(quat)
        (
            self.imu_lin_vel,
            self.imu_ang_vel,
        ) = (  # what the observations give: an IMU's, where the robot has one
            (self.base_lin_vel, self.base_ang_vel)
            if self._imu is None
            else velocities_at(self.base_lin_vel, self.base_ang_vel, *self._imu)
        )

    def _update_contacts(self) -> None:
        """Contacts per (world, geom) from the pooled contact list, and foot contact from the touch sensors."""
        self._count_geom_contacts(self._contact_geom.long())
        touch = self.sim.sensordata[:, self._touch_adr]
        torch.gt(touch, self.cfg.foot_contact_force, out=self.foot_contact)

    def _count_geom_contacts(self, geoms: torch.Tensor, keep: torch.Tensor | None = None) -> None:
        """Contacts per (world, geom) into `contact_counts`, from the pooled contact list's (contact, 2) `geoms`;
        `keep` (contact, 1) leaves out the rows it marks False."""
        valid = self._contact_slot < self._nacon  # rows past nacon are stale
        index = torch.where(
            valid if keep is None else valid & keep,
            self._contact_world.long().unsqueeze(1) * self.mj_model.ngeom + geoms,
            self._stale_contact_index,
        )
        self._geom_contacts.zero_()
        self._geom_contacts.index_add_(0, index.reshape(-1), self._ones)

    def post_physics_step(self) -> None:
        dt = self.step_dt
        self._update_base_state()
        self._update_contacts()

        # Feet air time: a touch-down is the first step with contact (either this step or the last, which filters
        # single-step bounces) after time in the air; its air time is what the reward reads.
        contact = self.foot_contact | self._last_foot_contact
        self._last_foot_contact.copy_(self.foot_contact)
        torch.logical_and(self.feet_air_time > 0, contact, out=self.first_contact)
        self.feet_air_time += dt
        torch.mul(self.feet_air_time, self.first_contact, out=self._touchdown_air_time)
        self.feet_air_time *= ~contact

        commands.update_tracking_metrics(self)

        # Commands: redrawn every resampling interval, counted in policy steps since the last draw (the draw itself
        # waits for `before_observations`: this step's reward and curriculum judge the command the policy saw).
        self._command_steps += 1

        events.push_robots(self)

        self._root_xy.copy_(self.sim.qpos[:, 0:2])
        if self.terrain is not None:
            # Walking off the map ends the episode as a time-out (the policy did nothing wrong).
            off_map = ((self._root_xy < self._map_low) | (self._root_xy > self._map_high)).any(dim=1)
            self.episode_length_buf.masked_fill_(off_map, self.max_episode_length)

    def fix_commands(self, vx: float, vy: float, wz: float) -> None:
        """Command (vx, vy, wz) from now on (the browser viewer's joystick): mdp/commands.py's `fix`."""
        commands.fix(self, vx, vy, wz)

    def set_training_progress(self, steps_per_env: int) -> dict[str, float]:
        return {
            **super().set_training_progress(steps_per_env),
            **commands.follow_curriculum(self, steps_per_env),
        }

    def before_observations(self) -> None:
        commands.resample_due_commands(self)

    def terrain_height(self, xy: torch.Tensor) -> torch.Tensor:
        """Ground height under world points `xy` (..., 2): 0 on flat ground."""
        if self.height_map is None:
            return torch.zeros(xy.shape[:-1], device=self.device)
        return self.height_map(xy)

    # ----------------------------------------------------------- observations
    observation_terms = observations.observation_terms
    observation_clips = observations.observation_clips

    def compute_observations(self) -> dict[str, torch.Tensor]:
        self._update_base_state()  # environments may have just been reset
        return observations.compute_observations(self)

    # ----------------------------------------------------------- terminations
    def compute_terminations(self) -> torch.Tensor:
        tilted = self.gravity_b[:, 2] > -math.cos(self.cfg.max_tilt)
        if not self.cfg.contact_terminations:
            return tilted
        trunk_contact = (self.contact_counts[:, self.base_geoms] > 0).any(dim=1)
        return trunk_contact | tilted

    # ----------------------------------------------------------------- resets
    def randomize_reset_state(self, mask: torch.Tensor) -> None:
        if self.curriculum:
            events.update_terrain_levels(self, mask)
        events.reset_robot_state(self, mask)

    def on_reset(self, mask: torch.Tensor) -> None:
        commands.resample_commands(self, mask)
        m = mask.unsqueeze(1)
        if self.cfg.noise.joint_pos_bias_per_episode:
            events.draw_encoder_offsets(self, m)
        self.feet_air_time.masked_fill_(m, 0.0)
        self._touchdown_air_time.masked_fill_(m, 0.0)
        self.foot_contact.masked_fill_(m, False)
        self._last_foot_contact.masked_fill_(m, False)

    # ------------------------------------------------------------------- step
    def finish_step(self, log: dict[str, torch.Tensor], episodes_finished: torch.Tensor) -> None:
        if self.cfg.only_positive_rewards:
            self.rewards.clamp_(min=0.0)  # the per-term episode logs stay unclipped
        if self.cfg.termination_penalty:
            self.rewards.add_(self.terminated.float(), alpha=self.cfg.termination_penalty)
        # Worlds whose physics diverged are terminated too; they are counted in Sim/nan_resets, not as falls, and
        # their velocity errors (NaN) count as 0 in the means.
        fell = self.terminated.sum() - log[NAN_RESETS_KEY]
        log["Episode_Termination/fell"] = fell / episodes_finished.clamp(min=1)
        log["Metrics/lin_vel_error"] = self._lin_vel_error.nan_to_num(0.0, 0.0, 0.0).mean()
        log["Metrics/ang_vel_error"] = self._ang_vel_error.nan_to_num(0.0, 0.0, 0.0).mean()
        vx, vy, wz = self._mean_base_vel.unbind()
        log["Metrics/base_lin_vel_x"], log["Metrics/base_lin_vel_y"], log["Metrics/base_ang_vel_z"] = (
            vx,
            vy,
            wz,
        )
        log["Metrics/sim_overflow"] = ((self._overflow & _OVERFLOW_BITS) != 0).float().mean()
        log["Metrics/sim_solver_limit"] = ((self._overflow & _ITERATIONS_BIT) != 0).float().mean()
        log["Metrics/sim_linesearch_limit"] = ((self._overflow & _LS_ITERATIONS_BIT) != 0).float().mean()
        if self.curriculum:
            log["Metrics/terrain_level"] = self.terrain_levels.float().mean()
