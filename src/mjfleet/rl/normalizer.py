"""The observation normalisers' update, with their statistics synchronised through the run's reducer.

rsl_rl's `EmpiricalNormalization.update` calls `torch.distributed.all_reduce` itself whenever a process group
exists, beside whatever averages the gradients. Here the same arithmetic runs with its sums taken by the reducer
(`mjfleet.fleet.reduce`, through `mjfleet.rl.gradients`), so every exchange between workers goes through one object: the batch's count and
mean-sum in one call, then the variance-sum around the global mean in a second (rsl_rl makes three calls). The
result is the one rsl_rl computes: identical statistics on every rank, those of one process holding every
rank's batch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from rsl_rl.modules import EmpiricalNormalization


def update_normalizer(
    norm: EmpiricalNormalization, x: torch.Tensor, sum_across_workers: Callable[[torch.Tensor], None] | None
) -> None:
    """`norm.update(x)`, its sums over the workers taken by `sum_across_workers` (None: one worker)."""
    if not norm.training or (norm.until is not None and norm.count >= norm.until):
        return
    var_x = torch.var(x, dim=0, unbiased=False, keepdim=True)
    mean_x = torch.mean(x, dim=0, keepdim=True)
    count_x = torch.tensor(x.shape[0], dtype=norm.count.dtype, device=norm.count.device)
    if sum_across_workers is not None:
        # Global mean first, then the local variances combined around it (rsl_rl's arithmetic). The count
        # travels as a float beside the mean-sum: exact up to 2**24 samples per update and worker set.
        local_mean_x = mean_x
        counted = torch.cat(
            (torch.tensor([float(x.shape[0])], device=x.device), (mean_x * x.shape[0]).view(-1))
        )
        sum_across_workers(counted)
        count_x = counted[0].round().to(norm.count.dtype).to(norm.count.device)
        mean_x = (counted[1:] / counted[0]).view_as(mean_x)
        var_sum_x = x.shape[0] * (var_x + (local_mean_x - mean_x).square())
        sum_across_workers(var_sum_x)
        var_x = var_sum_x / count_x
    norm.count += count_x
    rate = count_x / norm.count
    delta_mean = mean_x - norm._mean
    norm._mean += rate * delta_mean
    norm._var += rate * (var_x - norm._var + delta_mean * (mean_x - norm._mean))
    # in place (rsl_rl assigns a new tensor): a recorded CUDA graph reads the buffer it saw when recorded
    torch.sqrt(norm._var, out=norm._std)


def model_normalizer_input(model, obs) -> torch.Tensor:
    """What rsl_rl's `MLPModel.update_normalization(obs)` feeds its normaliser: the model's observation groups
    side by side. Only `EmpiricalNormalization` is synchronised here; another normaliser is a TypeError."""
    if not isinstance(model.obs_normalizer, EmpiricalNormalization):
        raise TypeError(
            f"observation normaliser {type(model.obs_normalizer).__name__}: mjfleet synchronises EmpiricalNormalization"
        )
    return torch.cat([obs[group] for group in model.obs_groups], dim=-1)
