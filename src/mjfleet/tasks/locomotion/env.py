"""Quadruped velocity tracking on flat ground or generated rough terrain (legged_gym-style task, vectorised).

Per policy step (50 Hz; 4 physics steps of 5 ms): actions are offsets from the default joint pose, written as
position-servo targets; the base state is read from qpos/qvel, foot contact from the feet's touch sensors and
other contacts (trunk, thighs, calves) from the simulation's contact list, scattered per world on device.
Everything is batched over environments with torch: no per-environment Python, no host synchronisation.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import torch
import warp as wp
from mujoco_warp import OverflowType

from mjfleet.assets import asset_path
from mjfleet.envs import NAN_RESETS_KEY, MujocoVecEnv
from mjfleet.tasks.locomotion.config import LocomotionConfig
from mjfleet.tasks.locomotion.math import projected_gravity, quat_from_yaw, quat_rotate_inverse, yaw_from_quat
from mjfleet.tasks.locomotion.terrain import HeightMap, Terrain

LEGS = ("FR", "FL", "RR", "RL")
JOINT_NAMES = tuple(f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "thigh", "calf"))
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
    per_env_model_fields = ("geom_friction", "body_mass")
    # The constraint solver or its line search stopping at an iteration limit is not a buffer overflow: the step is
    # still taken (a slightly less converged constraint solve). Printing it on every occurrence flooded the console
    # during training (the solver's limit: on rough ground, 72 lines in the first 40 iterations at 4,096 worlds on
    # a GPU); both are logged instead, as Metrics/sim_solver_limit and Metrics/sim_linesearch_limit.
    silenced_overflow_warnings = _ITERATIONS_BIT | _LS_ITERATIONS_BIT

    # The robot, by the names in its model; another legged robot (tasks/humanoid) overrides these.
    asset = "quadruped.xml"
    joint_names: tuple[str, ...] = JOINT_NAMES
    """Actuated joints, in actuator order (contiguous in qpos after the free joint)."""
    feet: tuple[str, ...] = LEGS
    """Foot prefixes: geom "<foot>_foot" and touch sensor "<foot>_foot_touch"."""
    trunk: str = "trunk"
    """The body whose mass is randomised."""
    base_contact_geoms: tuple[str, ...] = ("trunk",)
    """Geoms whose contact with anything ends the episode."""
    undesired_contact_geoms: tuple[str, ...] = tuple(
        f"{leg}_{part}" for leg in LEGS for part in ("thigh", "calf")
    )
    """Geoms whose contacts the undesired_contacts term counts."""

    # ------------------------------------------------------------------ model
    def build_model(self) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(asset_path(self.asset)))
        self.terrain: Terrain | None = None
        if self.cfg.terrain.kind == "rough":
            self.terrain = Terrain(self.cfg.terrain)
            self.terrain.add_to_spec(spec, geom_name="floor")
        elif self.cfg.terrain.kind != "flat":
            raise ValueError(f"terrain.kind must be 'flat' or 'rough', got {self.cfg.terrain.kind!r}")
        self.mj_spec = spec  # an export writes the MJCF this model was compiled from
        return spec.compile()

    def deployment_rules(self, trained_cfg: dict | None = None) -> dict | None:
        """How an episode runs, for an exported policy's metadata (mjfleet.tasks.locomotion.deploy)."""
        from mjfleet.tasks.locomotion.deploy import deployment_rules

        return deployment_rules(self, trained_cfg)

    def simulation_sizes(self) -> dict:
        if self.terrain is None:
            return {"nconmax": int(self.mj_model.nconmax), "njmax": int(self.mj_model.njmax)}
        return {"nconmax": ROUGH_NCONMAX, "njmax": ROUGH_NJMAX}

    def reward_config(self):
        """Weights are per second: scaled by the policy step so returns do not depend on the control rate."""
        w = self.cfg.rewards
        return dataclasses.replace(
            w, **{f.name: getattr(w, f.name) * self.step_dt for f in dataclasses.fields(w)}
        )

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        cfg, m, n, dev = self.cfg, self.mj_model, self.num_envs, self.device
        if self.num_actions != len(self.joint_names):
            raise ValueError(f"expected {len(self.joint_names)} actuators, the model has {self.num_actions}")

        # Actuators drive the joints in order; their qpos/qvel entries are contiguous after the free joint.
        joint_ids = [m.joint(name).id for name in self.joint_names]
        if list(m.actuator_trnid[:, 0]) != joint_ids:
            raise ValueError("actuators must drive the joints in the order " + ", ".join(self.joint_names))
        qpos_adr, dof_adr = int(m.jnt_qposadr[joint_ids[0]]), int(m.jnt_dofadr[joint_ids[0]])
        self._qj = slice(qpos_adr, qpos_adr + len(joint_ids))
        self._vj = slice(dof_adr, dof_adr + len(joint_ids))
        home = m.key("home")
        self.default_joint_pos = torch.tensor(home.qpos[self._qj], dtype=torch.float32, device=dev)
        joint_range = torch.tensor(m.jnt_range[joint_ids], dtype=torch.float32, device=dev)
        self.joint_lower, self.joint_upper = joint_range[:, 0], joint_range[:, 1]
        mid, half = joint_range.mean(dim=1), 0.5 * (joint_range[:, 1] - joint_range[:, 0])
        self.soft_joint_lower = mid - cfg.soft_joint_limit * half
        self.soft_joint_upper = mid + cfg.soft_joint_limit * half
        scale = torch.full((len(joint_ids),), cfg.action_scale, device=dev)
        if cfg.scale_actions_by_servo:
            torque_limit, kp = m.actuator_forcerange[:, 1], m.actuator_gainprm[:, 0]
            if not m.actuator_forcelimited.all() or (kp <= 0).any():
                raise ValueError("scale_actions_by_servo needs every servo to have a forcerange and kp > 0")
            scale = scale * torch.tensor(torque_limit / kp, dtype=torch.float32, device=dev)
        self.joint_action_scale = scale
        """Per joint (rad per unit action): targets = default_joint_pos + joint_action_scale * action."""

        self.trunk_geom = m.geom(self.base_contact_geoms[0]).id
        self.base_geoms = torch.tensor([m.geom(g).id for g in self.base_contact_geoms], device=dev)
        self.foot_geoms = [m.geom(f"{foot}_foot").id for foot in self.feet]
        self.leg_geoms = torch.tensor([m.geom(g).id for g in self.undesired_contact_geoms], device=dev)
        self.trunk_body = m.body(self.trunk).id
        self._touch_adr = torch.tensor(
            [int(m.sensor_adr[m.sensor(f"{foot}_foot_touch").id]) for foot in self.feet], device=dev
        )

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
        # anywhere shared (say slot 0) made thousands of GPU atomics wait on one address (0.41 ms of a 3.1 ms
        # quadruped step at 4,096 worlds on an H100).
        self._geom_contacts = torch.zeros(n * m.ngeom + 2 * rows, device=dev)
        self._stale_contact_index = n * m.ngeom + torch.arange(2 * rows, device=dev).view(rows, 2)
        self._ones = torch.ones(2 * rows, device=dev)
        self.contact_counts = self._geom_contacts[: n * m.ngeom].view(n, m.ngeom)

        # Task state.
        self.commands = torch.zeros(n, 3, device=dev)
        self._command_steps = torch.zeros(n, dtype=torch.long, device=dev)
        self.command_resample_steps = max(1, round(cfg.commands.resampling_time_s / self.step_dt))
        self._push_steps = self._draw_push_steps()
        nfeet = len(self.feet)
        self.feet_air_time = torch.zeros(n, nfeet, device=dev)
        self.foot_contact = torch.zeros(n, nfeet, dtype=torch.bool, device=dev)
        self._last_foot_contact = torch.zeros_like(self.foot_contact)
        self._touchdown_air_time = torch.zeros(n, nfeet, device=dev)
        self.first_contact = torch.zeros(n, nfeet, dtype=torch.bool, device=dev)
        self._lin_vel_error = torch.zeros(n, device=dev)
        self._ang_vel_error = torch.zeros(n, device=dev)
        self._mean_base_vel = torch.zeros(3, device=dev)
        self.base_lin_vel = torch.zeros(n, 3, device=dev)
        self.base_ang_vel = torch.zeros(n, 3, device=dev)
        self.gravity_b = torch.zeros(n, 3, device=dev)
        self._root_xy = torch.zeros(n, 2, device=dev)

        self._setup_terrain()
        self._setup_height_scan()
        self._randomize_physics()
        self._actor_noise = self._noise_vector()

    def _setup_terrain(self) -> None:
        n, dev, tcfg = self.num_envs, self.device, self.cfg.terrain
        self.env_origins = torch.zeros(n, 3, device=dev)
        self.curriculum = self.terrain is not None and tcfg.curriculum
        if self.terrain is None:
            self.height_map = None
            return
        self.height_map = HeightMap(self.terrain.heights, tcfg.horizontal_scale, dev)
        self.tile_origins = torch.as_tensor(self.terrain.origins, dtype=torch.float32, device=dev)
        self.num_levels = tcfg.num_levels
        self.terrain_types = torch.arange(n, device=dev) % tcfg.num_cols
        top = min(tcfg.max_init_level, tcfg.num_levels - 1) if self.curriculum else tcfg.num_levels - 1
        self.terrain_levels = torch.randint(0, top + 1, (n,), device=dev)
        self.env_origins[:] = self.tile_origins[self.terrain_levels, self.terrain_types]
        self._root_xy[:] = self.env_origins[:, :2]
        margin = 1.0  # metres from the map's edge at which an episode ends as a time-out
        self._map_low = margin
        self._map_high = torch.tensor(
            [self.terrain.length_x - margin, self.terrain.length_y - margin], device=dev
        )

    def _setup_height_scan(self) -> None:
        scan = self.cfg.height_scan
        if not scan.enabled:
            self.scan_points = None
            return
        if self.terrain is None:
            raise ValueError(
                "height_scan.enabled needs terrain.kind='rough' (flat ground has nothing to scan)"
            )
        nx = round(scan.size[0] / scan.resolution) + 1
        ny = round(scan.size[1] / scan.resolution) + 1
        xs = torch.linspace(-scan.size[0] / 2, scan.size[0] / 2, nx, device=self.device)
        ys = torch.linspace(-scan.size[1] / 2, scan.size[1] / 2, ny, device=self.device)
        gx, gy = torch.meshgrid(xs, ys, indexing="ij")
        self.scan_points = torch.stack((gx.reshape(-1), gy.reshape(-1)), dim=1)  # (P, 2), base-heading frame

    def _randomize_physics(self) -> None:
        """Start-up randomisation, once per environment: foot friction and added trunk mass."""
        ev, n, dev = self.cfg.events, self.num_envs, self.device
        friction = self.sim.model_view("geom_friction")  # (n, ngeom, 3), one copy per world
        if ev.foot_friction is None:  # nominal: the model's own (what the critic observes, too)
            self.foot_friction = friction[:, self.foot_geoms[0], 0].clone()
        else:
            self.foot_friction = _uniform_range((n,), ev.foot_friction, dev)
            friction[:, self.foot_geoms, 0] = self.foot_friction.unsqueeze(1)
        if ev.added_trunk_mass is None:  # nominal: the model's own mass
            self.added_mass = torch.zeros(n, device=dev)
        else:
            self.added_mass = _uniform_range((n,), ev.added_trunk_mass, dev)
        mass = self.sim.model_view("body_mass")  # (n, nbody)
        mass[:, self.trunk_body] += self.added_mass
        self.sim.set_constants()  # the subtree masses and inverse weights of each world's heavier or lighter trunk

    def _noise_vector(self) -> torch.Tensor:
        """The actor's noise half-range per observation column, from the terms `compute_observations` uses."""
        nz = self.cfg.noise
        parts = [(noise, value.shape[1]) for _, value, noise in self._proprio_terms()]
        if self.scan_points is not None and self.cfg.height_scan.in_actor:
            parts.append((nz.height_scan, self.scan_points.shape[0]))
        scale = torch.cat([torch.full((k,), float(v)) for v, k in parts]).to(self.device)
        return scale if nz.enabled else torch.zeros_like(scale)

    # ---------------------------------------------------------------- actions
    def apply_actions(self, actions: torch.Tensor) -> None:
        torch.addcmul(self.default_joint_pos, actions, self.joint_action_scale, out=self.sim.ctrl)

    # ------------------------------------------------------------------ state
    def _update_base_state(self) -> None:
        quat = self.sim.qpos[:, 3:7]
        # Free joint: qvel[0:3] is the world-frame linear velocity, qvel[3:6] the body-frame angular velocity.
        self.base_lin_vel = quat_rotate_inverse(quat, self.sim.qvel[:, 0:3])
        self.base_ang_vel = self.sim.qvel[:, 3:6].clone()
        self.gravity_b = projected_gravity(quat)

    def _update_contacts(self) -> None:
        """Contacts per (world, geom) from the pooled contact list, and foot contact from the touch sensors."""
        ngeom = self.mj_model.ngeom
        index = torch.where(
            self._contact_slot < self._nacon,  # rows past nacon are stale
            self._contact_world.long().unsqueeze(1) * ngeom + self._contact_geom.long(),
            self._stale_contact_index,
        )
        self._geom_contacts.zero_()
        self._geom_contacts.index_add_(0, index.reshape(-1), self._ones)
        touch = self.sim.sensordata[:, self._touch_adr]
        torch.gt(touch, self.cfg.foot_contact_force, out=self.foot_contact)

    def post_physics_step(self) -> None:
        cfg, dt = self.cfg, self.step_dt
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

        torch.norm(self.commands[:, :2] - self.base_lin_vel[:, :2], dim=1, out=self._lin_vel_error)
        torch.abs(self.commands[:, 2] - self.base_ang_vel[:, 2], out=self._ang_vel_error)
        # What the robots did, to hold against a fixed evaluation command: the mean base-frame (vx, vy, wz).
        achieved = torch.cat((self.base_lin_vel[:, :2], self.base_ang_vel[:, 2:3]), dim=1)
        torch.mean(achieved.nan_to_num(0.0, 0.0, 0.0), dim=0, out=self._mean_base_vel)

        # Commands: redrawn every resampling interval, counted in policy steps since the last draw (the draw itself
        # waits for `before_observations`: this step's reward and curriculum judge the command the policy saw).
        self._command_steps += 1

        # Pushes: add a random horizontal velocity to the base when an environment's timer runs out.
        if cfg.events.push_velocity > 0:
            self._push_steps -= 1
            push = self._push_steps <= 0
            dv = (torch.rand(self.num_envs, 2, device=self.device) * 2 - 1) * cfg.events.push_velocity
            self.sim.qvel[:, 0:2] += dv * push.unsqueeze(1)
            self._push_steps.copy_(torch.where(push, self._draw_push_steps(), self._push_steps))

        self._root_xy.copy_(self.sim.qpos[:, 0:2])
        if self.terrain is not None:
            # Walking off the map ends the episode as a time-out (the policy did nothing wrong).
            off_map = ((self._root_xy < self._map_low) | (self._root_xy > self._map_high)).any(dim=1)
            self.episode_length_buf.masked_fill_(off_map, self.max_episode_length)

    def before_observations(self) -> None:
        self._resample_commands(self._command_steps >= self.command_resample_steps)

    def _resample_commands(self, mask: torch.Tensor) -> None:
        c, n, dev = self.cfg.commands, self.num_envs, self.device
        new = torch.stack(
            (
                _uniform_range((n,), c.lin_vel_x, dev),
                _uniform_range((n,), c.lin_vel_y, dev),
                _uniform_range((n,), c.ang_vel_z, dev),
            ),
            dim=1,
        )
        standing = torch.rand(n, device=dev) < c.standing_fraction
        new[:, :2] *= (new[:, :2].norm(dim=1, keepdim=True) >= c.min_speed).float()
        new *= (~standing).float().unsqueeze(1)
        self.commands.copy_(torch.where(mask.unsqueeze(1), new, self.commands))
        self._command_steps.masked_fill_(mask, 0)

    def _draw_push_steps(self) -> torch.Tensor:
        """Policy steps until the next push, drawn for every environment (callers pick with a mask)."""
        low, high = (t / self.step_dt for t in self.cfg.events.push_interval_s)
        steps = low + torch.rand(self.num_envs, device=self.device) * (high - low)
        return steps.long().clamp(min=1)

    def terrain_height(self, xy: torch.Tensor) -> torch.Tensor:
        """Ground height under world points `xy` (..., 2): 0 on flat ground."""
        if self.height_map is None:
            return torch.zeros(xy.shape[:-1], device=self.device)
        return self.height_map(xy)

    def height_scan(self) -> torch.Tensor:
        """(num_envs, P) base height above the terrain at the scan points, minus the offset, clipped to [-1, 1]."""
        if self.scan_points is None:
            raise RuntimeError("height_scan() needs height_scan.enabled (and rough terrain)")
        yaw = yaw_from_quat(self.sim.qpos[:, 3:7])
        c, s = torch.cos(yaw).unsqueeze(1), torch.sin(yaw).unsqueeze(1)
        px, py = self.scan_points[:, 0], self.scan_points[:, 1]
        world = torch.stack(
            (self.sim.qpos[:, 0:1] + c * px - s * py, self.sim.qpos[:, 1:2] + s * px + c * py), dim=-1
        )
        heights = self.terrain_height(world)
        scan = self.sim.qpos[:, 2:3] - heights - self.cfg.height_scan.offset
        return scan.clamp(-1.0, 1.0)

    # ----------------------------------------------------------- observations
    def _proprio_terms(self) -> list[tuple[str, torch.Tensor, float]]:
        """The proprioceptive observation terms in order: (name, value, the half-range of the uniform noise the
        actor sees on it (0: exact)). The observations, their names and the noise vector are all built from this
        list."""
        nz, qpos, qvel = self.cfg.noise, self.sim.qpos, self.sim.qvel
        return [
            ("base_lin_vel", self.base_lin_vel, nz.lin_vel),
            ("base_ang_vel", self.base_ang_vel, nz.ang_vel),
            ("projected_gravity", self.gravity_b, nz.gravity),
            ("command", self.commands, 0.0),
            ("joint_pos", qpos[:, self._qj] - self.default_joint_pos, nz.joint_pos),
            ("joint_vel", qvel[:, self._vj], nz.joint_vel),
            ("actions", self.last_actions, 0.0),
        ]

    def _privileged_terms(self) -> list[tuple[str, torch.Tensor]]:
        """The critic's extra terms, in order, after the proprioceptive ones: (name, value)."""
        qpos = self.sim.qpos
        return [
            ("foot_contact", self.foot_contact.float()),
            ("foot_friction", self.foot_friction.unsqueeze(1)),
            ("added_trunk_mass", self.added_mass.unsqueeze(1)),
            ("base_height", (qpos[:, 2] - self.terrain_height(qpos[:, 0:2])).unsqueeze(1)),
        ]

    def observation_terms(self) -> dict[str, list[tuple[str, int]]]:
        proprio = [(name, value.shape[1]) for name, value, _ in self._proprio_terms()]
        privileged = [(name, value.shape[1]) for name, value in self._privileged_terms()]
        scan = [] if self.scan_points is None else [("height_scan", self.scan_points.shape[0])]
        actor_scan = scan if self.cfg.height_scan.in_actor else []
        return {"actor": proprio + actor_scan, "critic": proprio + privileged + scan}

    def compute_observations(self) -> dict[str, torch.Tensor]:
        self._update_base_state()  # environments may have just been reset
        proprio = torch.cat([value for _, value, _ in self._proprio_terms()], dim=1)
        privileged = [value for _, value in self._privileged_terms()]
        actor_clean, critic = proprio, [proprio, *privileged]
        if self.scan_points is not None:
            scan = self.height_scan()
            critic.append(scan)
            if self.cfg.height_scan.in_actor:
                actor_clean = torch.cat((proprio, scan), dim=1)
        noise = (torch.rand_like(actor_clean) * 2 - 1) * self._actor_noise
        return {"actor": actor_clean + noise, "critic": torch.cat(critic, dim=1)}

    # ----------------------------------------------------------- terminations
    def compute_terminations(self) -> torch.Tensor:
        trunk_contact = (self.contact_counts[:, self.base_geoms] > 0).any(dim=1)
        tilted = self.gravity_b[:, 2] > -math.cos(self.cfg.max_tilt)
        return trunk_contact | tilted

    # ----------------------------------------------------------------- resets
    def randomize_reset_state(self, mask: torch.Tensor) -> None:
        ev, n, dev = self.cfg.events, self.num_envs, self.device
        if self.curriculum:
            self._update_curriculum(mask)
        offset = _uniform((n, 2), ev.spawn_xy, dev)
        xy = self.env_origins[:, :2] + offset
        if self.height_map is not None:
            # Stand above the highest ground under the robot's footprint, whatever its heading.
            grid = torch.linspace(-0.3, 0.3, 5, device=dev)
            footprint = torch.stack(torch.meshgrid(grid, grid, indexing="ij"), dim=-1).reshape(-1, 2)
            ground = self.height_map(xy.unsqueeze(1) + footprint).amax(dim=1)
        else:
            ground = torch.zeros(n, device=dev)
        yaw = (torch.rand(n, device=dev) * 2 - 1) * math.pi
        nj = len(self.joint_names)
        joints = self.default_joint_pos + _uniform((n, nj), ev.joint_pos, dev)
        joints = torch.maximum(torch.minimum(joints, self.joint_upper), self.joint_lower)
        qpos = torch.cat((xy, (ground + ev.spawn_height).unsqueeze(1), quat_from_yaw(yaw), joints), dim=1)
        qvel = torch.cat(
            (
                _uniform((n, 3), ev.base_lin_vel, dev),
                _uniform((n, 3), ev.base_ang_vel, dev),
                _uniform((n, nj), ev.joint_vel, dev),
            ),
            dim=1,
        )
        m = mask.unsqueeze(1)
        self.sim.qpos.copy_(torch.where(m, qpos, self.sim.qpos))
        self.sim.qvel.copy_(torch.where(m, qvel, self.sim.qvel))
        self._root_xy.copy_(torch.where(m, xy, self._root_xy))

    def _update_curriculum(self, mask: torch.Tensor) -> None:
        """Robots that walked past their tile's edge move a level up; those that covered less than half the
        distance their command asked for move a level down. Robots beyond the top level restart at a random one."""
        distance = (self._root_xy - self.env_origins[:, :2]).norm(dim=1)
        move_up = distance > 0.5 * self.cfg.terrain.tile_size
        asked = self.commands[:, :2].norm(dim=1) * self.cfg.episode_length_s
        move_down = (distance < 0.5 * asked) & ~move_up
        levels = self.terrain_levels + mask.long() * (move_up.long() - move_down.long())
        levels = torch.where(
            levels >= self.num_levels, torch.randint_like(levels, self.num_levels), levels.clamp(min=0)
        )
        self.terrain_levels.copy_(levels)
        self.env_origins.copy_(self.tile_origins[levels, self.terrain_types])

    def on_reset(self, mask: torch.Tensor) -> None:
        self._resample_commands(mask)
        m = mask.unsqueeze(1)
        self.feet_air_time.masked_fill_(m, 0.0)
        self._touchdown_air_time.masked_fill_(m, 0.0)
        self.foot_contact.masked_fill_(m, False)
        self._last_foot_contact.masked_fill_(m, False)

    # ------------------------------------------------------------------- step
    def finish_step(self, log: dict[str, torch.Tensor], episodes_finished: torch.Tensor) -> None:
        if self.cfg.only_positive_rewards:
            self.rewards.clamp_(min=0.0)  # the per-term episode logs stay unclipped
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

    # ---------------------------------------------------------------- rewards
    def _reward_track_lin_vel_xy(self) -> torch.Tensor:
        error = (self.commands[:, :2] - self.base_lin_vel[:, :2]).square().sum(dim=1)
        return torch.exp(-error / self.cfg.tracking_sigma)

    def _reward_track_ang_vel_z(self) -> torch.Tensor:
        error = (self.commands[:, 2] - self.base_ang_vel[:, 2]).square()
        return torch.exp(-error / self.cfg.tracking_sigma)

    def _reward_lin_vel_z(self) -> torch.Tensor:
        return self.base_lin_vel[:, 2].square()

    def _reward_ang_vel_xy(self) -> torch.Tensor:
        return self.base_ang_vel[:, :2].square().sum(dim=1)

    def _reward_orientation(self) -> torch.Tensor:
        return self.gravity_b[:, :2].square().sum(dim=1)

    def _reward_torques(self) -> torch.Tensor:
        return self._actuator_force.square().sum(dim=1)

    def _reward_joint_acc(self) -> torch.Tensor:
        return self.sim.qacc[:, self._vj].square().sum(dim=1)

    def _reward_action_rate(self) -> torch.Tensor:
        return (self.actions - self.last_actions).square().sum(dim=1)

    def _reward_joint_limits(self) -> torch.Tensor:
        q = self.sim.qpos[:, self._qj]
        below = (self.soft_joint_lower - q).clamp(min=0.0)
        above = (q - self.soft_joint_upper).clamp(min=0.0)
        return (below + above).sum(dim=1)

    def _reward_undesired_contacts(self) -> torch.Tensor:
        return (self.contact_counts[:, self.leg_geoms] > 0).float().sum(dim=1)

    def _reward_feet_air_time(self) -> torch.Tensor:
        threshold = self.cfg.feet_air_time_threshold
        reward = ((self._touchdown_air_time - threshold) * self.first_contact).sum(dim=1)
        return reward * (self.commands[:, :2].norm(dim=1) > self.cfg.commands.min_speed)


def _uniform(shape, half_range: float, device) -> torch.Tensor:
    return (torch.rand(shape, device=device) * 2.0 - 1.0) * half_range


def _uniform_range(shape, bounds: tuple[float, float], device) -> torch.Tensor:
    return bounds[0] + torch.rand(shape, device=device) * (bounds[1] - bounds[0])
