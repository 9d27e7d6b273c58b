"""Learning: PPO settings and the rsl_rl runner mjfleet uses everywhere.

The settings import cheaply; `FleetRunner` (rsl_rl, tensordict) is imported on first use.
"""

from typing import TYPE_CHECKING

from mjfleet.lazy import lazy_exports
from mjfleet.rl.config import ActorConfig, AgentConfig, PolicyConfig, PPOConfig

if TYPE_CHECKING:
    from mjfleet.rl.runner import FleetRunner

__getattr__ = lazy_exports(__name__, {"FleetRunner": "mjfleet.rl.runner:FleetRunner"})

__all__ = ["ActorConfig", "AgentConfig", "FleetRunner", "PPOConfig", "PolicyConfig"]
