"""The velocity task for a third-party robot given as a `RobotDescription` (mjfleet.robots): `LocomotionEnv`,
which builds its robot with `build_robot` (mjfleet's own quadruped and humanoid too), with mjlab's velocity physics
options, the description's action scales, and contacts counted against the floor.

A robot's task passes its description (TaskSpec.env_kwargs) or names it (`robot = UNITREE_GO1`). What the
description gives, the environment takes from the built robot: the model, the actuated joints (in actuator order), their default pose
(the home keyframe) and per-joint action scales (target = default + scale x action), the base body (its mass is
randomised), the feet (their collision geoms: contact, air time, friction randomisation) and the bodies whose
contact with the ground ends an episode. The rewards, observations, commands, events and the other terminations are
LocomotionEnv's. Contacts count against the floor only (a described robot may collide with itself), and a foot is
in contact when one of its collision geoms touches the floor (as mjlab's feet_ground_contact sensor: found).
"""

from __future__ import annotations

from typing import ClassVar

import mujoco
import torch

from mjfleet.robots import RobotDescription
from mjfleet.robots.mjcf import as_written
from mjfleet.robots.unitree_g1 import UNITREE_G1
from mjfleet.robots.unitree_go1 import UNITREE_GO1
from mjfleet.tasks.locomotion.env import LocomotionEnv
from mjfleet.tasks.locomotion.gait import GaitState, add_gait_sensors, history_columns

PHYSICS = {
    # mjlab 1.6.0 mjlab/tasks/velocity/velocity_env_cfg.py (make_velocity_env_cfg): sim.mujoco
    "timestep": 0.005,
    "iterations": 10,
    "ls_iterations": 20,
    "integrator": mujoco.mjtIntegrator.mjINT_IMPLICITFAST,  # mjlab/sim/sim.py MujocoCfg default
    "solver": mujoco.mjtSolver.mjSOL_NEWTON,  # mjlab/sim/sim.py MujocoCfg default
    "ccd_iterations": 50,  # mjlab go1 and g1 env_cfgs.py, flat: sim.mujoco.ccd_iterations 50
}
"""Physics options set on every described robot's model (the MJCF's own <option> is overridden)."""
NCONMAX = 64
"""Contacts per world: a described robot may touch the floor with every collision geom (Go1: 29 geoms, boxes
and capsules up to 4 and 2 contacts each) and itself; overflows are logged (Metrics/sim_overflow)."""
NJMAX = 300
"""Constraint rows per world (mjlab 1.6.0 mjlab/tasks/velocity/config/go1/env_cfgs.py, flat: sim.njmax 300)."""


class RobotVelocityEnv(LocomotionEnv):
    """Velocity tracking on flat ground for the robot `robot` describes: given as an argument (a task registered
    for a description passes it: TaskSpec.env_kwargs), or set by a subclass."""

    robot: RobotDescription
    physics: ClassVar[dict] = {}
    """Physics options beyond PHYSICS for this robot (e.g. the friction cone)."""

    def __init__(
        self, cfg, device: str = "cpu", robot: RobotDescription | None = None, physics: dict | None = None
    ) -> None:
        if robot is not None:
            self.robot = robot
        if physics is not None:
            self.physics = physics
        super().__init__(cfg, device)

    def physics_options(self) -> dict:
        return {**PHYSICS, **self.physics, **self.robot.physics}

    def build_model(self) -> mujoco.MjModel:
        if self.cfg.terrain.kind != "flat":
            raise ValueError(f"{type(self).__name__} is flat-ground only (terrain.kind 'flat')")
        self.terrain = None
        spec = self.build_robot_spec()
        # The feet's friction wins against the floor's (MuJoCo takes the higher priority's), so that randomising it
        # acts (as the quadruped's MJCF does; mjlab 1.6.0 go1_constants FULL_COLLISION: feet priority 1).
        feet = {g for geoms in self.built.foot_geom_ids for g in geoms}
        for geom in spec.geoms:
            if geom.id in feet:
                geom.priority = 1
        add_gait_sensors(spec, self.built)
        # Trained as its MJCF says (6 significant digits), so that the export's model.xml is this model exactly.
        self.mj_spec = as_written(spec)
        return self.mj_spec.compile()

    def simulation_sizes(self) -> dict:
        columns = history_columns(self.mj_model, self.built)
        return {"nconmax": NCONMAX, "njmax": NJMAX, "sensor_history": columns}

    def setup(self) -> None:
        super().setup()
        self.gait = GaitState(self)
        """The feet's contacts, forces, air times and velocities, self-contacts and angular momentum
        (tasks/locomotion/gait.py): what mjlab's velocity terms read."""

    def post_physics_step(self) -> None:
        super().post_physics_step()
        self.gait.update(self)

    def on_reset(self, mask: torch.Tensor) -> None:
        super().on_reset(mask)
        self.gait.reset(mask)

    def deployment_rules(self, trained_cfg: dict | None = None) -> dict | None:
        """How an episode runs, for an exported policy (tasks/locomotion/deploy.py): the quadruped's rules with
        contacts counted against the floor, as this task counts them; the reward terms that read the gait sensors
        (tasks/locomotion/gait.py) are listed as not stated."""
        from mjfleet.tasks.locomotion.deploy import deployment_rules, floor_contact_rules

        return deployment_rules(self, trained_cfg, contacts=floor_contact_rules(self), partial_rewards=True)

    def _setup_robot(self) -> None:
        super()._setup_robot()
        self.joint_action_scale = torch.tensor(
            self.built.action_scale, dtype=torch.float32, device=self.device
        )

    def _setup_contact_geoms(self, robot_geoms: list[int]) -> None:
        """Contacts are counted against the floor (`_update_contacts`), feet by their collision geoms."""
        b, m, dev = self.built, self.mj_model, self.device
        foot_geoms = {g for geoms in b.foot_geom_ids for g in geoms}
        self.foot_geoms = sorted(foot_geoms)
        terminating = [g for g in robot_geoms if m.geom_bodyid[g] in b.terminate_body_ids]
        self.base_geoms = torch.tensor(terminating, dtype=torch.long, device=dev)
        # undesired_contacts: every collision geom of the robot but the feet's touching the floor
        self.leg_geoms = torch.tensor(
            [g for g in robot_geoms if g not in foot_geoms], dtype=torch.long, device=dev
        )
        # (foot, k) -> the foot's k-th collision geom, each foot's row padded with its first
        width = max(len(geoms) for geoms in b.foot_geom_ids)
        rows = [list(geoms) + [geoms[0]] * (width - len(geoms)) for geoms in b.foot_geom_ids]
        self._foot_geom_table = torch.tensor(rows, dtype=torch.long, device=dev)

    def _update_contacts(self) -> None:
        """Contacts with the floor per (world, geom), from the pooled contact list; a foot touches the floor when
        one of its collision geoms does."""
        geoms = self._contact_geom.long()
        self._count_geom_contacts(geoms, keep=(geoms == self.built.floor_geom_id).any(dim=1, keepdim=True))
        torch.any(self.contact_counts[:, self._foot_geom_table] > 0, dim=2, out=self.foot_contact)


class Go1VelocityEnv(RobotVelocityEnv):
    """Go1-Velocity-Flat: the Unitree Go1 (`uv run robots fetch unitree-go1`)."""

    robot = UNITREE_GO1
    # mjlab 1.6.0 mjlab/tasks/velocity/config/go1/env_cfgs.py: sim.mujoco impratio 10, cone elliptic. Line search
    # iterations 50, not mjlab's 20: with elliptic cones MuJoCo C's line search stopped at 20 short of the step
    # MuJoCo-Warp's found as the feet landed (2026-11-28, tests/test_described_sim2sim.py: 1.6 cm apart in one
    # policy step), so an export ran another robot; with 50 both agree. Warp's search ends as it converges.
    physics = {"impratio": 10.0, "cone": mujoco.mjtCone.mjCONE_ELLIPTIC, "ls_iterations": 50}


class G1VelocityEnv(RobotVelocityEnv):
    """G1-Velocity-Flat: the Unitree G1 (`uv run robots fetch unitree-g1`)."""

    robot = UNITREE_G1
    # 50 line-search iterations, not mjlab's 20, as the Go1's: with mjlab's contact settings MuJoCo C's search
    # stopped short of MuJoCo-Warp's step as a foot landed (tests/test_described_sim2sim.py: the actions of an
    # export parted by 5e-4 at step 39 of 50, 2026-11-29); with 50 they agree to 1e-4.
    physics = {"ls_iterations": 50}
