"""A task registered through MJFLEET_TASK_MODULES whose evaluation environments take a long time to reset (rank 0's
periodic evaluation): tests that a long legitimate phase of one rank is not reported as a hang."""

import os
import pathlib
import time

from mjfleet.tasks.cartpole import CartpoleConfig, CartpoleEnv, _agent
from mjfleet.tasks.registry import TaskSpec, register

EVAL_ENVS = 1
"""`train --eval-episodes 1` builds the evaluation environments with 1 env; training uses more."""


class SlowEvaluation(CartpoleEnv):
    def __init__(self, cfg, device="cpu"):
        self._built = False
        super().__init__(cfg, device)  # resets once: not yet the evaluation
        self._built = True

    def reset(self, *args, **kwargs):
        if self._built and self.num_envs == EVAL_ENVS:
            seconds = os.environ.get("MJFLEET_TEST_EVAL_SLEEP_S", "0")
            time.sleep(float(seconds))
            stamp = os.environ.get("MJFLEET_TEST_EVAL_STAMP")
            if stamp:
                pathlib.Path(stamp).write_text(seconds)
        return super().reset(*args, **kwargs)


register(
    TaskSpec(
        name="Test-SlowEvaluation",
        description="Cartpole whose evaluation environments take long to reset (tests only).",
        env_class=SlowEvaluation,
        env_config=CartpoleConfig,
        agent_config=lambda: _agent("test_slow_eval", max_iterations=3),
    )
)
