"""One PPO minibatch's gradients, recorded once as a CUDA graph and replayed for every minibatch.

On a GPU a minibatch is a few hundred small kernels (two MLPs forward and backward, the distribution, the
losses), each launched from Python, so the GPU waits for the CPU; recorded, a minibatch is one launch.

The graph reads the rollout from static copies that `load()` refreshes once per update (rsl_rl's storage assigns
new advantage tensors after every rollout, so the graph cannot read the storage itself) and the minibatch's rows
from a static index buffer that `run()` fills before each replay. The permutation is drawn outside, exactly as
rsl_rl's generator draws it. The reducer, the adaptive learning rate, clipping and the optimizer step run outside
the graph, as in the reference.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from rsl_rl.storage import RolloutStorage

from mjfleet.rl.gradients import record


def rollout_fields(storage: RolloutStorage) -> dict[str, torch.Tensor]:
    """The rollout's per-transition tensors, (steps x envs) flattened as rsl_rl's feed-forward generator does."""
    fields = {
        "observations": storage.observations,
        "actions": storage.actions,
        "values": storage.values,
        "advantages": storage.advantages,
        "returns": storage.returns,
        "old_actions_log_prob": storage.actions_log_prob,
    }
    fields.update({f"old_distribution_{k}": p for k, p in enumerate(storage.distribution_params or ())})
    return {name: t.flatten(0, 1) for name, t in fields.items()}


def minibatch(fields: dict[str, torch.Tensor], index: torch.Tensor) -> RolloutStorage.Batch:
    """The rows `index` of `rollout_fields` as rsl_rl's feed-forward generator yields them."""
    rows = {name: t[index] for name, t in fields.items()}
    params = tuple(rows.pop(name) for name in fields if name.startswith("old_distribution_"))
    return RolloutStorage.Batch(**rows, old_distribution_params=params)


class GraphedMinibatch:
    """`gradients(batch) -> (loss terms, kl)`, which writes the minibatch's gradients, as one CUDA graph."""

    def __init__(
        self,
        storage: RolloutStorage,
        mini_batch_size: int,
        gradients: Callable[[RolloutStorage.Batch], tuple[torch.Tensor, torch.Tensor | None]],
    ) -> None:
        device = storage.actions.device
        self.fields = {name: t.clone() for name, t in rollout_fields(storage).items()}
        self.index = torch.arange(mini_batch_size, device=device)
        self.terms = torch.zeros(3, device=device)

        def body() -> torch.Tensor | None:
            rows = {name: t[self.index] for name, t in self.fields.items()}
            params = tuple(
                rows.pop(f"old_distribution_{k}") for k in range(len(storage.distribution_params or ()))
            )
            terms, kl = gradients(RolloutStorage.Batch(**rows, old_distribution_params=params))
            self.terms.copy_(terms)
            return kl

        self.graph, self.kl = record(body, device)

    def load(self, storage: RolloutStorage) -> None:
        """Copy this update's rollout into the graph's input buffers."""
        for name, t in rollout_fields(storage).items():
            self.fields[name].copy_(t)

    def run(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Gradients of the minibatch `indices`; its loss terms and mean KL (tensors the graph rewrites)."""
        self.index.copy_(indices)
        self.graph.replay()
        return self.terms, self.kl
