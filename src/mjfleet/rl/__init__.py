"""Learning: PPO settings and the rsl_rl runner mjfleet uses everywhere.

The settings import cheaply; `FleetRunner` (rsl_rl, tensordict) is imported on first use.
"""

from typing import TYPE_CHECKING

from mjfleet.rl.config import ActorConfig, AgentConfig, PolicyConfig, PPOConfig

if TYPE_CHECKING:
    from mjfleet.rl.runner import FleetRunner


def __getattr__(name: str):
    if name == "FleetRunner":
        from mjfleet.rl.runner import FleetRunner

        return FleetRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ActorConfig", "AgentConfig", "FleetRunner", "PPOConfig", "PolicyConfig"]
