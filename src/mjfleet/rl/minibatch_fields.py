"""The rollout fields of a feed-forward PPO minibatch, named once for every path that builds minibatches
(`FleetPPO._packed_mini_batches` op by op, `GraphedMinibatch` on CUDA): a new field is added here."""

from __future__ import annotations

import torch
from rsl_rl.storage import RolloutStorage


def transition_fields(storage: RolloutStorage) -> dict[str, torch.Tensor]:
    """Every per-transition tensor of the rollout but the observations, (steps x envs) flattened into one batch
    dimension as rsl_rl's feed-forward generator flattens them (views, not copies)."""
    fields = {
        "actions": storage.actions,
        "values": storage.values,
        "advantages": storage.advantages,
        "returns": storage.returns,
        "actions_log_prob": storage.actions_log_prob,
    }
    for k, p in enumerate(storage.distribution_params or ()):
        fields[f"distribution_{k}"] = p
    return {name: t.flatten(0, 1) for name, t in fields.items()}


def make_batch(observations, fields: dict[str, torch.Tensor]) -> RolloutStorage.Batch:
    """rsl_rl's minibatch from the observations and the rows of `transition_fields` it holds."""
    num_params = sum(name.startswith("distribution_") for name in fields)
    return RolloutStorage.Batch(
        observations=observations,
        actions=fields["actions"],
        values=fields["values"],
        advantages=fields["advantages"],
        returns=fields["returns"],
        old_actions_log_prob=fields["actions_log_prob"],
        old_distribution_params=tuple(fields[f"distribution_{k}"] for k in range(num_params)),
    )
