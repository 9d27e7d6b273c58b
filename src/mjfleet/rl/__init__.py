"""Learning: PPO settings and the rsl_rl runner mjfleet uses everywhere."""

from mjfleet.rl.config import ActorConfig, AgentConfig, PolicyConfig, PPOConfig
from mjfleet.rl.runner import FleetRunner

__all__ = ["ActorConfig", "AgentConfig", "FleetRunner", "PPOConfig", "PolicyConfig"]
