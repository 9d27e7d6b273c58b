"""Humanoid velocity tracking: the locomotion task (commands, terrain, curriculum, events, privileged critic) with
a G1-class biped, its gait terms and its terminations (pelvis, torso or head on the ground; too low; self-contact).
"""

from __future__ import annotations

import mujoco
import torch

from mjfleet.robots.mjfleet_humanoid import MJFLEET_HUMANOID
from mjfleet.tasks.humanoid import rewards  # noqa: F401 - registers the humanoid's terms
from mjfleet.tasks.humanoid.config import HumanoidConfig
from mjfleet.tasks.locomotion.env import ROUGH_NCONMAX, ROUGH_NJMAX, LocomotionEnv

SIDES = ("left", "right")
ARM_JOINTS = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll")
# Rough ground: 11 collision geoms against one heightfield (at most 4 contacts each) plus the 5 leg pairs.
HUMANOID_ROUGH_NCONMAX = max(ROUGH_NCONMAX, 11 * 4 + 5 * 4)


class HumanoidEnv(LocomotionEnv):
    """Humanoid-Velocity-Flat / -Rough: follow a commanded (vx, vy, yaw rate) in the pelvis frame."""

    cfg: HumanoidConfig
    robot = MJFLEET_HUMANOID
    trunk = "torso_link"  # the mass randomisation loads the torso (with the arms and head), not the pelvis

    def deployment_rules(self, trained_cfg: dict | None = None) -> dict | None:
        """How an episode runs, for an exported policy's metadata (mjfleet.tasks.humanoid.deploy); None on rough
        ground (its reset and height scan need the terrain's tiles, which the vocabulary cannot state yet)."""
        if self.terrain is not None:
            return None
        from mjfleet.tasks.humanoid.deploy import deployment_rules

        return deployment_rules(self, trained_cfg)

    def simulation_sizes(self) -> dict:
        if self.terrain is None:
            return super().simulation_sizes()
        return {"nconmax": HUMANOID_ROUGH_NCONMAX, "njmax": ROUGH_NJMAX}

    def setup(self) -> None:
        super().setup()
        m, n, dev = self.mj_model, self.num_envs, self.device
        # The gait terms' joints, by name, in actuator order: the waist and arms (posture), the hips' roll and yaw.
        names = self.joint_names
        upper = [i for i, j in enumerate(names) if j.startswith("waist") or any(a in j for a in ARM_JOINTS)]
        hips = [i for i, j in enumerate(names) if "_hip_roll" in j or "_hip_yaw" in j]
        self._upper_joints = torch.tensor(upper, device=dev)
        self._hip_joints = torch.tensor(hips, device=dev)

        # Feet: the sites' bodies (the ankle-roll links); the sole lies a fixed distance below the body's origin
        # (from the keyframe, where the soles are at z = 0).
        feet = self.built.foot_body_ids
        self._foot_bodies = torch.tensor(feet, device=dev)
        data = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, data, m.key(self.built.home_keyframe).id)
        mujoco.mj_kinematics(m, data)
        self.sole_offset = float(data.xpos[feet[0]][2])
        self.foot_pos = torch.zeros(n, len(SIDES), 3, device=dev)
        self.foot_vel_xy = torch.zeros(n, len(SIDES), 2, device=dev)
        self._last_foot_xy = torch.zeros(n, len(SIDES), 2, device=dev)

        # Self-contact: any contact between two robot geoms (only the model's leg pairs can make one).
        self._robot_geom = torch.tensor(m.geom_bodyid != 0, device=dev)
        rows = self._contact_world.shape[0]
        self._self_contact_slots = torch.zeros(n + rows, device=dev)
        self._self_contact_sink = n + torch.arange(rows, device=dev)
        self._row_ones = torch.ones(rows, device=dev)
        self.self_contacts = self._self_contact_slots[:n]

    # ------------------------------------------------------------------ state
    def _update_contacts(self) -> None:
        super()._update_contacts()
        geoms = self._contact_geom.long().clamp(0, self.mj_model.ngeom - 1)
        valid = self._contact_slot.squeeze(1) < self._nacon
        both = valid & self._robot_geom[geoms[:, 0]] & self._robot_geom[geoms[:, 1]]
        index = torch.where(both, self._contact_world.long(), self._self_contact_sink)
        self._self_contact_slots.zero_()
        self._self_contact_slots.index_add_(0, index, self._row_ones)

    def post_physics_step(self) -> None:
        super().post_physics_step()
        # Foot velocity by finite difference over the policy step; 0 on an episode's first step (the previous
        # position belongs to the episode before).
        self.foot_pos = self.sim.xpos[:, self._foot_bodies]
        xy = self.foot_pos[..., :2]
        fresh = (self.episode_length_buf > 1).float().view(-1, 1, 1)
        torch.mul((xy - self._last_foot_xy) / self.step_dt, fresh, out=self.foot_vel_xy)
        self._last_foot_xy.copy_(xy)

    def foot_height(self) -> torch.Tensor:
        """(num_envs, 2) height of each sole above the ground under it (m)."""
        ground = self.terrain_height(self.foot_pos[..., :2])
        return self.foot_pos[..., 2] - self.sole_offset - ground

    def base_height(self) -> torch.Tensor:
        qpos = self.sim.qpos
        return qpos[:, 2] - self.terrain_height(qpos[:, 0:2])

    # ----------------------------------------------------------- terminations
    def compute_terminations(self) -> torch.Tensor:
        too_low = self.base_height() < self.cfg.min_base_height
        return super().compute_terminations() | too_low | (self.self_contacts > 0)

    def finish_step(self, log: dict[str, torch.Tensor], episodes_finished: torch.Tensor) -> None:
        super().finish_step(log, episodes_finished)
        log["Metrics/self_contact"] = (self.self_contacts > 0).float().mean()
