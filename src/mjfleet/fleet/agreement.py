"""What the ranks agree on once per iteration: whether to stop, and (every few iterations) that they still hold one
policy. Both go through the algorithm's reducer, as every exchange between workers does; the helpers take the
tensors and the exchange they need, not the runner."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from mjfleet.fleet.reduce import Reducer


def agreed_stop(
    local: int, rank: int, world_size: int, device, sum_across_workers: Callable[[torch.Tensor], None]
) -> int:
    """The signal number that asked any rank to stop (0: keep going; `local`: this rank's); identical on every
    rank. Collective when `world_size` > 1."""
    if world_size == 1:
        return local
    # Each rank's signal number in its own slot, summed: every rank sees all of them and takes the largest.
    signals = torch.zeros(world_size, device=device)
    signals[rank] = local
    sum_across_workers(signals)
    return int(signals.max().item())


def parameter_checksum(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """Two float64 numbers that differ when any of `tensors` differs (order-sensitive)."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64)
    return torch.stack([flat.sum(), (flat * weights).sum()])


def check_consistency(tensors: Iterable[torch.Tensor], reducer: Reducer, iteration: int) -> None:
    """Collective: stop with a clear error when the ranks' `tensors` (the algorithm's `consistency_tensors`) are no
    longer identical after `iteration`."""
    gathered = reducer.gather(parameter_checksum(tensors))
    differing = [rank for rank, other in enumerate(gathered) if not torch.equal(other, gathered[0])]
    if differing:
        raise RuntimeError(
            f"policy parameters differ between rank 0 and rank(s) {differing} after iteration {iteration}: the "
            "workers are no longer training one policy (gradient averaging broken or non-deterministic "
            "parameter updates)"
        )
