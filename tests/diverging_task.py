"""A task registered through MJFLEET_TASK_MODULES whose physics diverge in every fourth world (tests only).

Cartpole, whose reset gives the pole of worlds 0, 4, 8, ... an angular velocity of 1e20 rad/s: the centripetal force
overflows float32 in the first physics step, the state goes NaN, and the environment resets the world (counted in
Sim/nan_resets), which starts it spinning again. The other worlds are ordinary Cartpole.
"""

import torch

from mjfleet.tasks.cartpole import CartpoleConfig, CartpoleEnv, _agent
from mjfleet.tasks.registry import TaskSpec, register

SPIN = 1e20
"""rad/s: finite in float32, its square is not."""


class DivergingCartpole(CartpoleEnv):
    def randomize_reset_state(self, mask: torch.Tensor) -> None:
        super().randomize_reset_state(mask)
        spinning = mask & (torch.arange(self.num_envs, device=self.device) % 4 == 0)
        self.sim.qvel[:, 1] = torch.where(spinning, SPIN, self.sim.qvel[:, 1])


register(
    TaskSpec(
        name="Test-Diverging",
        description="Cartpole whose every fourth world diverges at each reset (tests only).",
        env_class=DivergingCartpole,
        env_config=CartpoleConfig,
        agent_config=lambda: _agent("test_diverging", max_iterations=2),
    )
)
