"""A task registered through MJFLEET_TASK_MODULES whose rank-1 worker raises: tests fail-fast launching."""

import os
import pathlib
import time

from mjfleet.tasks.cartpole import CartpoleConfig, CartpoleEnv, _agent
from mjfleet.tasks.registry import TaskSpec, register


class FailOnRank1(CartpoleEnv):
    def __init__(self, cfg, device="cpu"):
        if os.environ.get("RANK") == "1":
            stamp = os.environ.get("MJFLEET_TEST_FAILURE_STAMP")
            if stamp:  # when the failure happened, for the test's "train ends soon after" check
                pathlib.Path(stamp).write_text(repr(time.time()))
            raise RuntimeError("deliberate failure on rank 1")
        super().__init__(cfg, device)


register(
    TaskSpec(
        name="Test-FailOnRank1",
        description="Cartpole whose rank-1 worker raises while building its environment (tests only).",
        env_class=FailOnRank1,
        env_config=CartpoleConfig,
        agent_config=lambda: _agent("test_fail", max_iterations=5),
    )
)
