"""The runner's saved state: what a checkpoint file holds, and writing and reading it.

A checkpoint is plain data that `torch.load(..., weights_only=True)` reads: the algorithm's name and state
(`Algorithm.state_dict`: networks, optimiser, normaliser statistics), the iteration and step counts, the settings
as plain dicts, what is needed to rebuild the policy (`infos`) and every rank's torch RNG state, so that a resumed
run continues each rank's random stream. Written atomically (`mjfleet.atomic`: a temporary file, then a rename).

These helpers take what they need (the state, the reducer), not the runner that holds them.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from mjfleet import atomic
from mjfleet.fleet.reduce import Reducer


def write(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write the checkpoint `state` to `path` atomically."""
    with atomic.staged(path) as tmp:
        torch.save(state, tmp)


def read(path: str | os.PathLike, map_location: Any) -> dict[str, Any]:
    """A checkpoint's state, as plain tensors and numbers (never unpickling anything else)."""
    return torch.load(path, weights_only=True, map_location=map_location)


def rng_state(device: str) -> dict[str, torch.Tensor]:
    """This process's torch RNG state (and the device's generator on CUDA)."""
    state = {"torch": torch.get_rng_state()}
    if torch.device(device).type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(torch.device(device))
    return state


def set_rng_state(state: dict[str, torch.Tensor], device: str) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if torch.device(device).type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), torch.device(device))


def gather_rng_states(
    reducer: Reducer | None, device: str, backend: str | None
) -> list[dict[str, torch.Tensor]]:
    """Collective: every rank's `rng_state`, in rank order, exchanged as one uint8 tensor per rank (on `device`
    for nccl, which exchanges CUDA tensors only; on the CPU for gloo)."""
    own = rng_state(device)
    if reducer is None:
        return [own]
    keys = sorted(own)
    sizes = [own[k].numel() for k in keys]
    flat = torch.cat([own[k].reshape(-1) for k in keys]).to(device if backend == "nccl" else "cpu")
    return [
        {k: part.cpu() for k, part in zip(keys, row.split(sizes), strict=True)}
        for row in reducer.gather(flat)
    ]
