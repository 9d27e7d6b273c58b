"""The fast update engine beside the reference PPO (`mjfleet.rl.ppo`): same minibatches, same reducer, clipping
and optimizer step, fewer operations per minibatch.

- MLP policies (every task's default): rollout actions and each minibatch's loss and gradients are written out
  layer by layer instead of run through module calls and autograd (`mlp.py`);
- on CUDA, each minibatch's gradients are one replayed CUDA graph (`cuda_graph.py`).

`FastUpdate.build` returns None, with one warning, for networks it does not write out; a failure at the first
rollout step or the first minibatch (a changed library, say) raises `Declined` before anything was applied, and
FleetPPO then runs the reference instead. A failed CUDA-graph recording falls back to the op-by-op engine.
tests/test_fast_update.py checks it equal to the reference.

The engine depends on FleetPPO's public pieces (its settings, storage, flat gradient buffer, `Declined`); FleetPPO
knows it only as an `UpdateEngine` that `mjfleet.rl.build` attaches.
"""

from __future__ import annotations

import logging

import torch

from mjfleet.errors import first_line
from mjfleet.rl.fast.mlp import MlpGradients, Unsupported
from mjfleet.rl.ppo import Declined, FleetPPO

log = logging.getLogger(__name__)


def minibatch_indices(alg) -> list[torch.Tensor]:
    """The rows of each minibatch of an update, in order, as rsl_rl's feed-forward generator draws them: one
    permutation, cut into `num_mini_batches` slices, the same slices every epoch."""
    size = alg.mini_batch_size
    permutation = torch.randperm(alg.num_mini_batches * size, device=alg.device)
    return list(permutation.split(size)) * alg.num_learning_epochs


class FastUpdate:
    """FleetPPO's rollout step and minibatch gradients for MLP networks."""

    def __init__(self, alg: FleetPPO, capture: bool) -> None:
        self.alg = alg
        self.gradients = MlpGradients(alg)
        self.capture = capture and torch.device(alg.device).type == "cuda"
        """Replay each minibatch as a recorded CUDA graph."""
        self.graph = None
        self._graph_key: tuple = ()
        self._proven: set[str] = set()

    @property
    def name(self) -> str:
        """What runs, for the start-up line."""
        return "fast engine, each minibatch a replayed CUDA graph" if self.capture else "fast engine"

    @property
    def action_std(self) -> torch.Tensor:
        """The policy's action standard deviation, as the rollout uses it."""
        return self.gradients.rollout_std[0]

    @classmethod
    def build(cls, alg: FleetPPO, capture: bool = True) -> FastUpdate | None:
        """The engine for `alg`'s networks, or None (with a warning) where the reference must run."""
        try:
            return cls(alg, capture)
        except Unsupported as exc:
            log.warning("fast PPO update not used (%s): the reference update runs", exc)
            return None

    def _first_call(self, what: str, fn, *args):
        """`fn(*args)`; the first call of each `what` raises `Declined` instead of failing."""
        if what in self._proven:
            return fn(*args)
        try:
            result = fn(*args)
        except Exception as exc:
            raise Declined(f"its {what} failed: {first_line(exc)}") from exc
        self._proven.add(what)
        return result

    def act(self, obs) -> torch.Tensor:
        """rsl_rl's `PPO.act`: sample actions and fill the transition with them, the values, log-probabilities,
        distribution parameters and observations."""
        t = self.alg.transition
        t.actions, t.values, t.actions_log_prob, t.distribution_params = self._first_call(
            "rollout step", self.gradients.act, obs
        )
        t.hidden_states = (None, None)
        t.observations = obs
        return t.actions

    def policy_changed(self) -> None:
        """Re-read what the rollout caches (the std terms, the normalisers' statistics)."""
        self.gradients.refresh()

    def minibatches(self):
        """(minibatches, gradients) for FleetPPO's minibatch loop: rsl_rl's minibatches and this engine's
        gradients; on CUDA those minibatches' rows and a replayed graph."""
        alg = self.alg
        # What the engine copies from the networks is read afresh: the parameters may have been loaded directly
        # (a state dict), without FleetPPO.policy_changed.
        self.gradients.refresh()
        if self.capture:
            try:
                return self._graphed_minibatches()
            except Exception as exc:  # an optimisation: go on op by op, loudly, once
                torch.cuda.synchronize(alg.device)
                self.capture = False
                log.warning(
                    "the PPO minibatch could not be recorded as a CUDA graph (%s); op by op", first_line(exc)
                )
        batches = alg.storage.mini_batch_generator(alg.num_mini_batches, alg.num_learning_epochs)
        return batches, lambda batch: self._first_call("first minibatch", self.gradients, batch)

    def _graphed_minibatches(self):
        from mjfleet.rl.fast.cuda_graph import GraphedMinibatch

        alg = self.alg
        size = alg.mini_batch_size
        indices = minibatch_indices(alg)
        key = (
            alg.clip_param,
            alg.value_loss_coef,
            alg.entropy_coef,
            alg.desired_kl,
            alg.schedule,
            alg.normalize_advantage_per_mini_batch,
            alg.use_clipped_value_loss,
            alg.tf32,
            size,
        )
        if self.graph is None or key != self._graph_key:  # the graph holds these as constants: record again
            self.graph = None
            self.graph = GraphedMinibatch(alg.storage, size, self.gradients)
            self._graph_key = key
        self.graph.load(alg.storage)
        return indices, self.graph.run
