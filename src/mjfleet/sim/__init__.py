"""Batched MuJoCo-Warp simulation on one device. Knows nothing of RL."""

from mjfleet.sim.simulation import Simulation, needs_no_constraint_buffers

__all__ = ["Simulation", "needs_no_constraint_buffers"]
