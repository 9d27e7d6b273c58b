"""Vectorised environments with the rsl_rl VecEnv interface. Know nothing of launching.

`EnvConfig` imports cheaply; `MujocoVecEnv` (which loads mujoco_warp and rsl_rl) is imported on first use, so
the launching process of a multi-worker run can parse configs without paying for the simulator.
"""

from typing import TYPE_CHECKING

from mjfleet.envs.config import EnvConfig

if TYPE_CHECKING:
    from mjfleet.envs.base import NAN_RESETS_KEY, MujocoVecEnv


def __getattr__(name: str):
    if name in ("MujocoVecEnv", "NAN_RESETS_KEY"):
        from mjfleet.envs import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NAN_RESETS_KEY", "EnvConfig", "MujocoVecEnv"]
