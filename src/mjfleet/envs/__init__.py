"""Vectorised environments with the rsl_rl VecEnv interface. Know nothing of launching.

`EnvConfig` imports cheaply; `MujocoVecEnv` (which loads mujoco_warp and rsl_rl) is imported on first use, so
the launching process of a multi-worker run can parse configs without paying for the simulator.
"""

from typing import TYPE_CHECKING

from mjfleet.envs.config import EnvConfig
from mjfleet.lazy import lazy_exports

if TYPE_CHECKING:
    from mjfleet.envs.base import NAN_RESETS_KEY, MujocoVecEnv

__getattr__ = lazy_exports(
    __name__, {name: f"mjfleet.envs.base:{name}" for name in ("MujocoVecEnv", "NAN_RESETS_KEY")}
)


__all__ = ["NAN_RESETS_KEY", "EnvConfig", "MujocoVecEnv"]
