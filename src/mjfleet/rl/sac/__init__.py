"""Soft Actor-Critic beside PPO: settings (cheap to import), and the algorithm, networks and replay buffer
(imported on first use)."""

from typing import TYPE_CHECKING

from mjfleet.lazy import lazy_exports
from mjfleet.rl.sac.config import SACConfig

if TYPE_CHECKING:
    from mjfleet.rl.sac.algorithm import FleetSAC

__getattr__ = lazy_exports(__name__, {"FleetSAC": "mjfleet.rl.sac.algorithm:FleetSAC"})

__all__ = ["FleetSAC", "SACConfig"]
