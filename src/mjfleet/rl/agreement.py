"""What the ranks agree on once per iteration: whether to stop, and (every few iterations) that they still hold one
policy. Both go through the algorithm's reducer, as every exchange between workers does."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mjfleet.rl.runner import FleetRunner


def agreed_stop(runner: FleetRunner) -> int:
    """The signal number that asked any rank to stop (0: keep going); identical on every rank."""
    local = (runner.stop.signum or 0) if runner.stop is not None else 0
    ctx = runner.ctx
    if not ctx.is_distributed:
        return local
    # Each rank's signal number in its own slot, summed: every rank sees all of them and takes the largest.
    signals = torch.zeros(ctx.world_size, device=runner.device)
    signals[ctx.rank] = local
    runner.alg.sum_across_workers(signals)
    return int(signals.max().item())


def parameter_checksum(runner: FleetRunner) -> torch.Tensor:
    """Two float64 numbers that differ when any actor/critic parameter differs (order-sensitive)."""
    flat = torch.cat([p.detach().reshape(-1).double() for p in runner.policy_parameters()])
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64)
    return torch.stack([flat.sum(), (flat * weights).sum()])


def check_consistency(runner: FleetRunner) -> None:
    """Stop with a clear error when the ranks' policy parameters are no longer identical."""
    gathered = runner.alg.reducer.gather(parameter_checksum(runner))
    differing = [rank for rank, other in enumerate(gathered) if not torch.equal(other, gathered[0])]
    if differing:
        raise RuntimeError(
            f"policy parameters differ between rank 0 and rank(s) {differing} after iteration "
            f"{runner.current_learning_iteration}: the workers are no longer training one policy "
            "(gradient averaging broken or non-deterministic parameter updates)"
        )
