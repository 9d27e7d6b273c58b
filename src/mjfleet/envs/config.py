"""Settings every environment has (a light module: importing it does not load the simulator)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EnvConfig:
    """Settings every environment has. Tasks extend this dataclass with their own fields."""

    num_envs: int | None = None
    """Environments per worker. None: the task's default for the device (small on CPU, large on GPU)."""
    decimation: int = 2
    """Physics steps per policy step: policy rate = 1 / (timestep * decimation)."""
    episode_length_s: float = 10.0
    """Episode time limit in seconds; reaching it is reported as a time-out, not a termination."""
    clip_actions: float = 1.0
    """Policy outputs are clipped to [-clip_actions, clip_actions] before scaling."""
    action_scale: float = 1.0
    """Clipped actions are multiplied by this before they are written to the actuators."""
    capture_graphs: bool = True
    """Replay captured warp graphs for the physics' step/forward/reset (much faster; results are identical)."""
    capture_step: bool = True
    """On CUDA (with capture_graphs): record the whole environment step, physics and torch code, into one CUDA
    graph at the second step and replay it from then on (one launch per step; results agree to float32)."""
    penalty_curriculum_start: float = 1.0
    """Training weighs the penalties (reward terms with a negative weight) by this share of their weight at first,
    rising linearly to the full weight over `penalty_curriculum_steps` (Hwangbo et al. 2019 raised a factor on their
    cost terms over training likewise): a policy learns to move before the costs of moving count in full.
    1: full weights from the start. Evaluation (play, periodic evaluation) always uses the full weights."""
    penalty_curriculum_steps: int = 0
    """Policy steps per environment over which the penalties reach their full weight (counted from the run's start,
    after `penalty_curriculum_delay`; --resume continues the count). 0: no curriculum."""
    penalty_curriculum_delay: int = 0
    """Policy steps per environment at the starting share before the rise begins: time to find a gait while
    moving is (nearly) free, which SAC needed (docs/history/sac-quadruped-probes.md)."""
