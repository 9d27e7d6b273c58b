"""Cart-pole: balance the pole upright, or swing it up from hanging and then balance it.

The reward is a weighted sum of terms that each lie in [0, 1] and whose weights sum to 1, so one policy step
earns at most 1 and the best possible return equals the episode length in policy steps.
"""

from __future__ import annotations

import mujoco
import torch

from mjfleet.assets import asset_path
from mjfleet.envs import MujocoVecEnv
from mjfleet.tasks.cartpole import rewards
from mjfleet.tasks.cartpole.config import CartpoleConfig

OBSERVATION_TERMS = (
    "cart_position",
    "cos_pole_angle",
    "sin_pole_angle",
    "cart_velocity",
    "pole_angular_velocity",
)
"""The observation's columns, in order (m, -, -, m/s, rad/s; pole angle 0 = upright)."""


class CartpoleEnv(MujocoVecEnv):
    """Cart on a rail with a free pole; one action: the force on the cart."""

    cfg: CartpoleConfig
    action_meaning = (
        "force on the cart along the rail: the motor's ctrl = action_scale * action, clipped to ctrlrange [-1, 1], "
        "times its gear 10 N (so +-10 N at most)"
    )
    reward_terms = rewards.TERMS  # each in [0, 1]

    def build_model(self) -> mujoco.MjModel:
        self.mj_spec = mujoco.MjSpec.from_file(str(asset_path("cartpole.xml")))  # an export writes it as MJCF
        return self.mj_spec.compile()

    def deployment_rules(self, trained_cfg: dict | None = None) -> dict:
        """How an episode runs, for an exported policy's metadata (mjfleet.tasks.cartpole.deploy)."""
        from mjfleet.tasks.cartpole.deploy import deployment_rules

        return deployment_rules(self, trained_cfg)

    def setup(self) -> None:
        cfg = self.cfg
        center = torch.pi if cfg.swingup else 0.0
        half = torch.tensor(
            [cfg.init_position_range, cfg.init_angle_range, cfg.init_velocity_range, cfg.init_velocity_range],
            device=self.device,
        )
        self._init_low = torch.tensor([0.0, center, 0.0, 0.0], device=self.device) - half
        self._init_width = 2.0 * half
        # Views of the state, made once: the simulation's buffers never move, and every indexing operation
        # saved is about a microsecond of each step.
        qpos, qvel = self.sim.qpos, self.sim.qvel
        self._x, self._theta, self._x_dot, self._theta_dot = qpos[:, 0], qpos[:, 1], qvel[:, 0], qvel[:, 1]
        self._action = self.actions[:, 0]  # the clipped action (the force is action x action_scale x gear)
        self._tilt_limits = torch.tensor([cfg.rail_limit, cfg.max_pole_angle], device=self.device)

    # Observations, rewards and terminations read qpos/qvel only: no extra forward pass needed.
    def compute_observations(self) -> dict[str, torch.Tensor]:
        theta = self._theta
        # The columns of OBSERVATION_TERMS, in that order.
        state = torch.stack(
            (self._x, torch.cos(theta), torch.sin(theta), self._x_dot, self._theta_dot), dim=1
        )
        actor = state
        if self.cfg.observation_noise > 0:
            actor = state + self.cfg.observation_noise * torch.randn_like(state)
        return {"actor": actor, "critic": state}

    def observation_terms(self) -> dict[str, list[tuple[str, int]]]:
        terms = [(name, 1) for name in OBSERVATION_TERMS]
        return {"actor": terms, "critic": terms}

    def post_physics_step(self) -> None:
        if self.cfg.end_stops:
            # An inelastic stop, written into the simulation state in place (batched, no host sync).
            self._x_dot.masked_fill_(self._x.abs() >= self.cfg.rail_limit, 0.0)
            self._x.clamp_(-self.cfg.rail_limit, self.cfg.rail_limit)

    def compute_terminations(self) -> torch.Tensor:
        if self.cfg.swingup:
            return self._x.abs() > self.cfg.rail_limit
        # Off the rail or tilted too far: both limits in one comparison.
        return (self.sim.qpos.abs() > self._tilt_limits).any(dim=1)

    def randomize_reset_state(self, mask: torch.Tensor) -> None:
        # Uniform in [low, low + width) per column of (x, theta, x_dot, theta_dot): one draw for all four.
        initial = torch.addcmul(
            self._init_low, torch.rand(self.num_envs, 4, device=self.device), self._init_width
        )
        m = mask.unsqueeze(1)
        self.sim.qpos.copy_(torch.where(m, initial[:, :2], self.sim.qpos))
        self.sim.qvel.copy_(torch.where(m, initial[:, 2:], self.sim.qvel))
