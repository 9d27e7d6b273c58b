"""The fast update engine beside the reference PPO (`mjfleet.rl.ppo`): same minibatches, same averaged step
(reducer, clipping, optimiser), fewer operations per minibatch.

- MLP policies (every task's default): rollout actions and each minibatch's loss and gradients are written out
  layer by layer instead of run through module calls and autograd (`mlp.py`);
- on CUDA, each minibatch's gradients are one replayed CUDA graph (`cuda_graph.py`), recorded again whenever the
  loss's settings (`PPOLoss`), the precision or the minibatch size change.

The reference's `FleetPPO.minibatch_gradients` is the loss; this engine is checked equal to it and never trusted
beyond that check. `WRITTEN_OUT` names the `PPOLoss` settings `mlp.py` writes out, and tests/test_fast_update.py
checks losses, KL and every gradient against the reference's autograd with each of them changed: a loss setting
added to `PPOLoss` without being written out here, a subclass of FleetPPO with its own loss, or networks `mlp.py`
does not write out make `FastUpdate.build` return no engine (with the reason and one warning), and the reference runs. A failure at the
first rollout step or the first minibatch (a changed library, say) raises `Declined` before anything was applied,
and FleetPPO then runs the reference instead. A failed CUDA-graph recording falls back to the op-by-op engine.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from mjfleet.errors import first_line
from mjfleet.rl.engine import Declined
from mjfleet.rl.fast.mlp import MlpGradients, Unsupported
from mjfleet.rl.gradients import RecordedGradients
from mjfleet.rl.ppo import FleetPPO, PPOLoss

WRITTEN_OUT = frozenset(
    {
        "clip_param",
        "value_loss_coef",
        "entropy_coef",
        "use_clipped_value_loss",
        "normalize_advantage_per_mini_batch",
        "adaptive_kl",
    }
)
"""The `PPOLoss` settings `mlp.py` writes out (tests/test_fast_update.py changes each of them)."""

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
        self.recorded: RecordedGradients = RecordedGradients("PPO minibatch", alg.device, capture)
        """Each minibatch replayed from a recorded CUDA graph (on CUDA, `capture_update`)."""
        self._proven: set[str] = set()

    @property
    def capture(self) -> bool:
        """Whether minibatches replay a recorded CUDA graph (off after a failed recording)."""
        return self.recorded.enabled

    @capture.setter
    def capture(self, on: bool) -> None:
        self.recorded.enabled = on

    @property
    def graph(self):
        """The recorded minibatch (`cuda_graph.GraphedMinibatch`), None before the first."""
        return next(iter(self.recorded.graphs.values()), None)

    @property
    def name(self) -> str:
        """What runs, for the start-up line."""
        return "fast engine, each minibatch a replayed CUDA graph" if self.capture else "fast engine"

    @property
    def action_std(self) -> torch.Tensor:
        """The policy's action standard deviation, as the rollout uses it."""
        return self.gradients.rollout_std[0]

    @classmethod
    def build(cls, alg: FleetPPO, capture: bool = True) -> tuple[FastUpdate | None, str | None]:
        """(The engine for `alg`'s loss and networks, None), or (None, why not) with a warning where the reference
        must run."""
        fields = {f.name for f in dataclasses.fields(PPOLoss)}
        if (
            type(alg).minibatch_gradients is not FleetPPO.minibatch_gradients
            or type(alg).minibatch_loss is not FleetPPO.minibatch_loss
        ):
            reason = f"{type(alg).__name__} changes the loss"
        elif fields != WRITTEN_OUT:
            reason = f"PPOLoss settings {sorted(fields - WRITTEN_OUT)} are not written out"
        else:
            try:
                return cls(alg, capture), None
            except Unsupported as exc:
                reason = str(exc)
        log.warning("fast PPO update not used (%s): the reference update runs", reason)
        return None, reason

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

        def op_by_op():
            batches = alg.storage.mini_batch_generator(alg.num_mini_batches, alg.num_learning_epochs)
            return batches, lambda batch: self._first_call("first minibatch", self.gradients, batch)

        def graphed(graph):
            graph.load(alg.storage)
            return minibatch_indices(alg), graph.run

        # The graph holds the loss's settings, the precision and the minibatch size as constants.
        key = (alg.loss, alg.tf32, alg.mini_batch_size)
        return self.recorded(key, self._record, graphed, op_by_op)

    def _record(self):
        from mjfleet.rl.fast.cuda_graph import GraphedMinibatch

        return GraphedMinibatch(self.alg.storage, self.alg.mini_batch_size, self.gradients)
