"""One PPO minibatch's loss and gradients, recorded once as a CUDA graph and replayed for every minibatch.

On a GPU the PPO update is a few hundred small kernels per minibatch (two MLPs forward and backward, the
distribution, the losses), each launched from Python: the GPU waits for the CPU. Recorded into one CUDA graph a
minibatch is one launch plus the optimizer step.

What the graph holds and what it does not:

- It reads the rollout from static buffers that `load()` fills once per update (rsl_rl's storage assigns new
  tensors for the advantages after every rollout, so the graph cannot read the storage itself), and the
  minibatch's indices from a static index buffer that `run()` fills before each replay. The permutation is drawn
  outside the graph with rsl_rl's own call, so the minibatches are exactly rsl_rl's.
- It runs the function FleetPPO computes a minibatch's gradients with op by op (`AnalyticMinibatch` for MLP
  networks, else the loss, zeroed gradients and autograd's backward pass), which writes them into FleetPPO's
  flat gradient buffer, and adds the loss terms to `loss_sums`.
- The gradient all-reduce, the adaptive learning rate (one host read of the KL, as in the op-by-op update),
  gradient clipping and the optimizer step run outside, op by op: the optimizer, its state and the learning rate
  stay exactly rsl_rl's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from rsl_rl.storage import RolloutStorage

from mjfleet.rl.minibatch_fields import make_batch, transition_fields

WARMUP_REPLAYS = 3
"""Op-by-op runs on a side stream before capture (PyTorch's recipe: lazy initialisation happens outside it)."""


class GraphedMinibatch:
    """`gradients(batch) -> (loss terms, kl)`, which writes the minibatch's gradients, as one CUDA graph over a
    static copy of the rollout."""

    def __init__(
        self,
        storage: RolloutStorage,
        mini_batch_size: int,
        gradients: Callable[[RolloutStorage.Batch], tuple[torch.Tensor, torch.Tensor | None]],
    ) -> None:
        device = storage.actions.device
        self.observations = storage.observations.flatten(0, 1).clone()
        self.fields = {name: t.clone() for name, t in transition_fields(storage).items()}
        self.index = torch.arange(mini_batch_size, device=device)
        self.loss_sums = torch.zeros(3, device=device)

        def body() -> torch.Tensor | None:
            i = self.index
            batch = make_batch(self.observations[i], {name: t[i] for name, t in self.fields.items()})
            terms, kl = gradients(batch)
            self.loss_sums += terms
            return kl

        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_REPLAYS):
                body()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # Captured on the warm-up's stream: autograd's gradient accumulators are bound to the stream they ran on.
        with torch.cuda.graph(self.graph, stream=side):
            self.kl = body()
        self.loss_sums.zero_()

    def load(self, storage: RolloutStorage) -> None:
        """Copy this update's rollout into the graph's input buffers."""
        self.observations.copy_(storage.observations.flatten(0, 1))
        for name, t in transition_fields(storage).items():
            self.fields[name].copy_(t)

    def run(self, indices: torch.Tensor) -> torch.Tensor | None:
        """Forward and backward of the minibatch `indices`; returns the graph's mean-KL tensor (None without one)."""
        self.index.copy_(indices)
        self.graph.replay()
        return self.kl
