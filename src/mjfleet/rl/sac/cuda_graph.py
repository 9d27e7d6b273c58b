"""One SAC gradient step's gradients, recorded once as a CUDA graph and replayed for every gradient step.

A gradient step is a few hundred small kernels (the actor twice, the twin critics three times, the target critics,
forward and backward), each launched from Python: on a GPU the device waits for the host. Recorded, the step is
one launch. As for PPO's minibatch (`mjfleet.rl.fast.cuda_graph`), only the gradients are recorded: the batch and
the policy's noise are drawn outside and copied into the graph's static inputs; averaging across workers, clipping,
the optimizer step and the target update run outside, exactly as on the plain path, so a replayed step equals a
plain one given the same batch and noise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mjfleet.rl.gradients import record
from mjfleet.rl.sac.replay import Batch


class GraphedGradients:
    """`gradients(batch, noise) -> loss terms`, which writes one step's gradients, as one CUDA graph."""

    def __init__(
        self,
        batch: Batch,
        noise: tuple[torch.Tensor, torch.Tensor],
        gradients: Callable[[Batch, tuple[torch.Tensor, torch.Tensor]], torch.Tensor],
    ) -> None:
        self.batch = Batch(*(t.clone() for t in batch.tensors()))
        self.noise = tuple(t.clone() for t in noise)
        self.graph, self.terms = record(lambda: gradients(self.batch, self.noise), batch.obs.device)

    def run(self, batch: Batch, noise: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Gradients of `batch` with the policy's draws `noise`; the loss terms (a tensor the graph rewrites)."""
        for static, t in zip((*self.batch.tensors(), *self.noise), (*batch.tensors(), *noise), strict=True):
            static.copy_(t)
        self.graph.replay()
        return self.terms
