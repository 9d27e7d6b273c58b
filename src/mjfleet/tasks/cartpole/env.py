"""Cart-pole: balance the pole upright, or swing it up from hanging and then balance it.

The reward is a weighted sum of terms that each lie in [0, 1] and whose weights sum to 1, so one policy step
earns at most 1 and the best possible return equals the episode length in policy steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import torch

from mjfleet.assets import asset_path
from mjfleet.envs import EnvConfig, MujocoVecEnv


@dataclass
class CartpoleRewards:
    """Weights of the reward terms (each term is in [0, 1]; keep the weights summing to 1)."""

    upright: float = 0.7
    """(1 + cos(pole angle)) / 2: 1 when upright, 0 when hanging."""
    centered: float = 0.1
    """exp(-cart_position^2): stay near the middle of the rail."""
    small_control: float = 0.1
    """exp(-action^2): do not push harder than needed."""
    small_velocity: float = 0.1
    """exp(-pole_angular_velocity^2 / 4): come to rest."""


@dataclass
class CartpoleConfig(EnvConfig):
    """Cart-pole settings. Physics at 100 Hz, policy at 50 Hz."""

    episode_length_s: float = 5.0
    swingup: bool = False
    """Start hanging down (swing-up) instead of near upright (balance)."""
    rail_limit: float = 2.4
    """The episode terminates when the cart leaves [-rail_limit, rail_limit]."""
    max_pole_angle: float = 0.4
    """Balance only: the episode terminates when the pole tilts further than this (rad)."""
    init_angle_range: float = 0.1
    """Initial pole angle offset is uniform in +-this (rad), around upright or hanging."""
    init_position_range: float = 0.2
    init_velocity_range: float = 0.05
    observation_noise: float = 0.0
    """Standard deviation of Gaussian noise added to the actor's observations."""
    rewards: CartpoleRewards = field(default_factory=CartpoleRewards)


class CartpoleEnv(MujocoVecEnv):
    """Cart on a rail with a free pole; one action: the force on the cart."""

    cfg: CartpoleConfig

    def build_model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))

    # Observations, rewards and terminations read qpos/qvel only: no extra forward pass needed.
    def compute_observations(self) -> dict[str, torch.Tensor]:
        x, theta = self.sim.qpos[:, 0], self.sim.qpos[:, 1]
        x_dot, theta_dot = self.sim.qvel[:, 0], self.sim.qvel[:, 1]
        state = torch.stack((x, torch.cos(theta), torch.sin(theta), x_dot, theta_dot), dim=1)
        actor = state
        if self.cfg.observation_noise > 0:
            actor = state + self.cfg.observation_noise * torch.randn_like(state)
        return {"actor": actor, "critic": state}

    def compute_terminations(self) -> torch.Tensor:
        off_rail = self.sim.qpos[:, 0].abs() > self.cfg.rail_limit
        if self.cfg.swingup:
            return off_rail
        return off_rail | (self.sim.qpos[:, 1].abs() > self.cfg.max_pole_angle)

    def randomize_reset_state(self, mask: torch.Tensor) -> None:
        cfg = self.cfg
        n = self.num_envs
        center = torch.pi if cfg.swingup else 0.0
        qpos = torch.stack(
            (
                _uniform(n, cfg.init_position_range, self.device),
                center + _uniform(n, cfg.init_angle_range, self.device),
            ),
            dim=1,
        )
        qvel = _uniform((n, 2), cfg.init_velocity_range, self.device)
        m = mask.unsqueeze(1)
        self.sim.qpos.copy_(torch.where(m, qpos, self.sim.qpos))
        self.sim.qvel.copy_(torch.where(m, qvel, self.sim.qvel))

    # Reward terms, each in [0, 1].
    def _reward_upright(self) -> torch.Tensor:
        return 0.5 * (1.0 + torch.cos(self.sim.qpos[:, 1]))

    def _reward_centered(self) -> torch.Tensor:
        return torch.exp(-self.sim.qpos[:, 0].square())

    def _reward_small_control(self) -> torch.Tensor:
        return torch.exp(-self.actions[:, 0].square())

    def _reward_small_velocity(self) -> torch.Tensor:
        return torch.exp(-0.25 * self.sim.qvel[:, 1].square())


def _uniform(shape, half_range: float, device) -> torch.Tensor:
    return (torch.rand(shape, device=device) * 2.0 - 1.0) * half_range
