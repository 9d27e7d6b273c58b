"""Batched MuJoCo-Warp simulation on one device. Knows nothing of RL."""

from mjfleet.sim.simulation import Simulation

__all__ = ["Simulation"]
