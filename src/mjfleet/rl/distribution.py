"""rsl_rl's Gaussian action distribution, sampled without a host synchronisation."""

from __future__ import annotations

import torch
from rsl_rl.modules.distribution import GaussianDistribution as _RslGaussian


class GaussianDistribution(_RslGaussian):
    """Same distribution and parameters as rsl_rl's; only `sample()` differs.

    `torch.normal(mean, std)` with a tensor `std` checks on the host that every std is >= 0, which on a GPU waits
    for the policy's forward pass at every environment step (the CPU can then no longer run ahead and queue the
    next step). The std here is clamped to a positive range already, so `mean + std * N(0, 1)` draws the same
    distribution with no check.
    """

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            mean = self.mean
            return torch.addcmul(mean, self.std, torch.randn_like(mean))
