"""Cart-pole settings and reward weights (typed dataclasses: tyro turns them into --env.* flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mjfleet.envs.config import EnvConfig


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
    upright_product: float = 0.0
    """upright x (1 + centered)/2 x (4 + small_control)/5 x (1 + small_velocity)/2: the product form (as in the
    DeepMind control suite's cart-pole) is 0 whenever the pole hangs, whatever the other terms, so a hanging,
    resting pole earns nothing. Swing-up uses it alone: with the weighted sum, hanging still earned 0.2-0.3 per
    step and PPO settled there (measured: return stuck at 80-120 of 400 after 150-500 iterations)."""


@dataclass
class CartpoleConfig(EnvConfig):
    """Cart-pole settings. Physics at 100 Hz, policy at 50 Hz."""

    episode_length_s: float = 5.0
    swingup: bool = False
    """Start hanging down (swing-up) instead of near upright (balance)."""
    rail_limit: float = 2.4
    """The episode terminates when the cart leaves [-rail_limit, rail_limit] (unless end_stops)."""
    end_stops: bool = False
    """The rail has end stops instead: the cart stops dead at +-rail_limit and the episode goes on. Swing-up uses
    them: when leaving the rail ended the episode, some seeds learned to shoot off the rail at once (measured:
    episodes of 40 steps, return 3 of 400, for 100+ iterations) instead of learning to pump."""
    max_pole_angle: float = 0.4
    """Balance only: the episode terminates when the pole tilts further than this (rad)."""
    init_angle_range: float = 0.1
    """Initial pole angle offset is uniform in +-this (rad), around upright or hanging."""
    init_position_range: float = 0.2
    init_velocity_range: float = 0.05
    observation_noise: float = 0.0
    """Standard deviation of Gaussian noise added to the actor's observations."""
    rewards: CartpoleRewards = field(default_factory=CartpoleRewards)
