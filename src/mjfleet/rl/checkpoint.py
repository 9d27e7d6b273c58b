"""What a runner's checkpoint holds, and writing and reading it.

A checkpoint is plain data that `torch.load(..., weights_only=True)` reads: rsl_rl's state dicts (policy, critic,
optimizer; the normalisers' statistics are part of the first two), the iteration and step counts, the settings as
plain dicts, what is needed to rebuild the policy (`infos`) and every rank's torch RNG state, so that a resumed
run continues each rank's random stream. Written atomically (a temporary file, then a rename).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import TYPE_CHECKING, Any

import torch

from mjfleet.runs.run_dir import to_plain

if TYPE_CHECKING:
    from mjfleet.rl.runner import FleetRunner


def save(
    runner: FleetRunner, path: str | os.PathLike, infos: dict | None = None, rng_states: list | None = None
):
    """Write `runner`'s checkpoint to `path` atomically (this rank's RNG state unless `rng_states` is given)."""
    path = pathlib.Path(path)
    state = runner.alg.save()
    state["iter"] = runner.current_learning_iteration
    state["env_steps"] = runner.env_steps
    state["infos"] = {**runner.checkpoint_info, "world_size": runner.ctx.world_size, **(infos or {})}
    state["agent_cfg"] = to_plain(dataclasses.asdict(runner.agent_cfg))
    if "algorithm" not in state:  # PPO: what rsl_rl (and play) rebuild the policy from; SAC names itself
        state["rsl_rl_cfg"] = to_plain(runner.agent_cfg.to_rsl_rl())
    state["rng_states"] = rng_states if rng_states is not None else [rng_state(runner.device)]
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load(runner: FleetRunner, path, strict: bool = True, map_location=None, restore_rng: bool = True) -> dict:
    """Restore policy, critic, optimizer (and normaliser statistics), iteration and step count, and this rank's
    torch RNG state when the checkpoint has one for it; returns the checkpoint's `infos`."""
    loaded = torch.load(path, weights_only=True, map_location=map_location or runner.device)
    if runner.alg.load(loaded, None, strict):
        runner.current_learning_iteration = loaded["iter"]
        runner.env_steps = loaded.get("env_steps", 0)
        runner.saved_iteration = runner.current_learning_iteration
    rng_states = loaded.get("rng_states") or []
    if restore_rng and runner.ctx.rank < len(rng_states):
        set_rng_state(rng_states[runner.ctx.rank], runner.device)
    return loaded.get("infos") or {}


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


def gather_rng_states(runner: FleetRunner) -> list[dict[str, torch.Tensor]]:
    """Collective: every rank's `rng_state`, in rank order, exchanged as one uint8 tensor per rank."""
    own = rng_state(runner.device)
    reducer = runner.alg.reducer
    if reducer is None:
        return [own]
    keys = sorted(own)
    sizes = [own[k].numel() for k in keys]
    flat = torch.cat([own[k].reshape(-1) for k in keys]).to(_exchange_device(runner))
    return [
        {k: part.cpu() for k, part in zip(keys, row.split(sizes), strict=True)}
        for row in reducer.gather(flat)
    ]


def _exchange_device(runner: FleetRunner) -> Any:
    """nccl exchanges CUDA tensors only; gloo either."""
    return runner.device if runner.ctx.backend == "nccl" else "cpu"
