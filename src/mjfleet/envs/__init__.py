"""Vectorised environments with the rsl_rl VecEnv interface. Know nothing of launching."""

from mjfleet.envs.base import EnvConfig, MujocoVecEnv

__all__ = ["EnvConfig", "MujocoVecEnv"]
