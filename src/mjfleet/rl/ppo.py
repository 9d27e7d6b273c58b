"""The reference PPO: rsl_rl's, with the one change a fleet of workers needs.

After every minibatch the gradients, and the minibatch's mean KL for the adaptive learning rate, are averaged
across workers in one collective (`mjfleet.rl.reduce`): every gradient is a view of one flat buffer with one
extra slot for the KL, and the reducer averages that buffer. Every rank then adapts its learning rate from the
same averaged KL, so no broadcast is needed. rsl_rl issues three collectives per minibatch for the same result.
The observation normalisers' statistics are synchronised through the same reducer (`mjfleet.rl.normalizer`).

Everything else is rsl_rl's PPO: its rollout storage and minibatches, losses, clipping, adaptive schedule and
GAE. tests/test_runner.py checks the update against rsl_rl's own `PPO.update` on the same rollout. An optional
update engine (`UpdateEngine`; for MLP networks `mjfleet.rl.fast`, wired by `mjfleet.rl.build`) computes the same
rollout actions and minibatch gradients with fewer operations; this class stays the one place where the update's
steps are put in order, and it knows the engine only through that protocol.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch
from rsl_rl.algorithms import PPO

from mjfleet.rl.config import PPOConfig
from mjfleet.rl.normalizer import update_model_normalizer
from mjfleet.rl.reduce import Reducer

log = logging.getLogger(__name__)

Gradients = Callable[[Any], tuple[torch.Tensor, torch.Tensor | None]]
"""One minibatch -> (detached [surrogate, value, entropy] losses, mean KL or None), gradients in `flat_grad`."""


class Declined(Exception):
    """An update engine failed where it had not changed anything yet: the reference runs instead."""


class UpdateEngine(Protocol):
    """A faster way to compute what `FleetPPO.act` and `FleetPPO.minibatch_gradients` compute."""

    name: str
    """For the start-up line, e.g. "fast engine"."""

    @property
    def action_std(self) -> torch.Tensor: ...

    def act(self, obs) -> torch.Tensor: ...

    def minibatches(self) -> tuple[Iterable, Gradients]: ...

    def policy_changed(self) -> None: ...


class FleetPPO(PPO):
    """rsl_rl's PPO whose gradients and KL are averaged across workers by one reducer call per minibatch.

    Built by `mjfleet.rl.build.build_ppo` from the agent's `PPOConfig`, which carries the extra settings:
    `gradient_reducer` (chosen into `reducer`), `grad_sync_period` (average and step after every K minibatches,
    their gradients accumulated: one collective per K), `fast_update` / `capture_update` (the `engine`) and
    `tf32` (on CUDA, the update's float32 matrix products on TensorFloat-32 tensor cores, as mjlab trains).
    """

    def __init__(
        self,
        actor,
        critic,
        storage,
        settings: PPOConfig,
        device: str,
        reducer: Reducer | None = None,
    ) -> None:
        super().__init__(
            actor,
            critic,
            storage,
            num_learning_epochs=settings.num_learning_epochs,
            num_mini_batches=settings.num_mini_batches,
            clip_param=settings.clip_param,
            gamma=settings.gamma,
            lam=settings.lam,
            value_loss_coef=settings.value_loss_coef,
            entropy_coef=settings.entropy_coef,
            learning_rate=settings.learning_rate,
            max_grad_norm=settings.max_grad_norm,
            optimizer=settings.optimizer,
            use_clipped_value_loss=settings.use_clipped_value_loss,
            schedule=settings.schedule,
            desired_kl=settings.desired_kl,
            normalize_advantage_per_mini_batch=settings.normalize_advantage_per_mini_batch,
            device=device,
        )
        self.grad_sync_period = settings.grad_sync_period
        self.tf32 = settings.tf32
        if type(self.optimizer) is torch.optim.Adam:  # not a subclass: AdamW decays weights differently
            # torch's fused kernel: one kernel per step for all parameters instead of several per tensor
            # (float32 on CPU and CUDA, the only devices and dtype mjfleet trains on, both have it)
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            self.optimizer = torch.optim.Adam(params, **{**self.optimizer.defaults, "fused": True})

        # Backward accumulates into the existing views in place: zeroing is one operation on the buffer, and the
        # reducer sends the buffer as it is.
        self.trained = [p for m in (self.actor, self.critic) for p in m.parameters() if p.requires_grad]
        sizes = [p.numel() for p in self.trained]
        self.flat_grad = torch.zeros(sum(sizes) + 1, device=self.device)
        for p, g in zip(self.trained, self.flat_grad[:-1].split(sizes), strict=True):
            p.grad = g.view_as(p)
        num_actor = sum(p.numel() for p in self.actor.parameters() if p.requires_grad)
        self._network_grads = (self.flat_grad[:num_actor], self.flat_grad[num_actor:-1])
        self._gradient_sum = torch.zeros_like(self.flat_grad)  # grad_sync_period > 1: the group's running sum
        self._grouped = 0
        self.reducer = reducer
        """Averages gradients (and sums statistics) across workers; None: one worker."""
        self.engine: UpdateEngine | None = None
        """The faster rollout step and minibatch gradients (`attach_engine`); None: the reference runs."""

    def attach_engine(self, engine: UpdateEngine | None) -> None:
        """Use `engine` for rollout actions and minibatch gradients (None: the reference)."""
        self.engine = engine

    @property
    def mini_batch_size(self) -> int:
        """Transitions per minibatch, as rsl_rl's feed-forward generator splits the rollout."""
        st = self.storage
        return st.num_envs * st.num_transitions_per_env // self.num_mini_batches

    @property
    def num_trained_parameters(self) -> int:
        return self.flat_grad.numel() - 1

    @property
    def action_std(self) -> torch.Tensor:
        """The policy's current action standard deviation (per action dimension)."""
        if self.engine is not None:
            return self.engine.action_std
        return self.actor.output_std.detach()

    # ----------------------------------------------------------------- rollout
    def act(self, obs) -> torch.Tensor:
        if self.engine is not None:
            try:
                return self.engine.act(obs)
            except Declined as exc:
                self._decline(exc)
        return super().act(obs)

    # ------------------------------------------------------------------ update
    def update(self) -> dict[str, float]:
        """The optimisation epochs over the stored rollout; returns the mean losses (and the mean KL)."""
        sums = torch.zeros(4, device=self.device)  # surrogate, value, entropy, KL: read once, at the end
        count = 0
        with self.update_precision():  # around the recording of a minibatch graph too: it keeps its kernels
            if self.engine is not None:
                minibatches, gradients = self.engine.minibatches()
            else:
                minibatches = self.storage.mini_batch_generator(
                    self.num_mini_batches, self.num_learning_epochs
                )
                gradients = self.minibatch_gradients
            for batch in minibatches:
                try:
                    terms, kl = gradients(batch)
                except Declined as exc:  # the fast engine's first minibatch: nothing was applied yet
                    self._decline(exc)
                    gradients = self.minibatch_gradients
                    terms, kl = gradients(batch)
                sums[:3] += terms
                if kl is not None:
                    sums[3] += kl
                count += 1
                if self.grad_sync_period > 1:
                    ready, kl = self._accumulate(kl, end_of_epoch=count % self.num_mini_batches == 0)
                    if not ready:
                        continue
                self.apply_gradients(kl)
        obs = self.storage.observations.flatten(0, 1)
        self.update_normalization(obs)
        self.storage.clear()
        self.policy_changed()
        surrogate, value, entropy, kl = (sums / max(count, 1)).tolist()
        losses = {"value": value, "surrogate": surrogate, "entropy": entropy}
        losses["total"] = surrogate + self.value_loss_coef * value - self.entropy_coef * entropy
        if self.desired_kl is not None and self.schedule == "adaptive":
            losses["kl"] = kl
        return losses

    def _accumulate(self, kl: torch.Tensor | None, end_of_epoch: bool) -> tuple[bool, torch.Tensor | None]:
        """Add this minibatch's gradients (and KL) to the running sum of its group of `grad_sync_period`
        minibatches. At the group's end (or the epoch's) their mean goes into the gradient buffer: (True, mean
        KL); before it: (False, None)."""
        total = self._gradient_sum
        total[:-1] += self.flat_grad[:-1]
        if kl is not None:
            total[-1:] += kl.reshape(1)
        self._grouped += 1
        if self._grouped < self.grad_sync_period and not end_of_epoch:
            return False, None
        torch.div(total, self._grouped, out=self.flat_grad)
        total.zero_()
        self._grouped = 0
        return True, self.flat_grad[-1] if kl is not None else None

    def update_normalization(self, obs) -> None:
        """The actor's and critic's observation normalisers learn this rollout, synchronised by the reducer."""
        sync = self.reducer.sum if self.reducer is not None else None
        for model in (self.actor, self.critic):
            update_model_normalizer(model, obs, sync)

    def minibatch_gradients(self, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """rsl_rl's PPO loss on one minibatch, back-propagated into the flat gradient buffer. Returns the detached
        [surrogate, value, entropy] losses and the mean KL (None unless the learning rate adapts to it)."""
        if self.normalize_advantage_per_mini_batch:
            with torch.no_grad():
                batch.advantages = (batch.advantages - batch.advantages.mean()) / (
                    batch.advantages.std() + 1e-8
                )
        actor, critic = self.actor, self.critic
        actor(batch.observations, stochastic_output=True)
        log_prob = actor.get_output_log_prob(batch.actions)
        values = critic(batch.observations)
        entropy = actor.output_entropy.mean()
        kl = None
        if self.desired_kl is not None and self.schedule == "adaptive":
            with torch.no_grad():
                kl = actor.get_kl_divergence(batch.old_distribution_params, actor.output_distribution_params)
                kl = kl.mean()

        # clipped surrogate
        advantages = torch.squeeze(batch.advantages)
        ratio = torch.exp(log_prob - torch.squeeze(batch.old_actions_log_prob))
        clipped_ratio = torch.clamp(ratio, 1.0 - self.clip_param, 1.0 + self.clip_param)
        surrogate_loss = torch.max(-advantages * ratio, -advantages * clipped_ratio).mean()

        # value loss, optionally clipped around the rollout's values
        if self.use_clipped_value_loss:
            clipped = batch.values + (values - batch.values).clamp(-self.clip_param, self.clip_param)
            value_loss = torch.max((values - batch.returns).pow(2), (clipped - batch.returns).pow(2)).mean()
        else:
            value_loss = (batch.returns - values).pow(2).mean()

        loss = surrogate_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        self.flat_grad.zero_()
        loss.backward()
        terms = torch.stack((surrogate_loss.detach(), value_loss.detach(), entropy.detach())).float()
        return terms, kl

    def apply_gradients(self, kl: torch.Tensor | None) -> None:
        """Average the gradients (and the KL) across workers, adapt the learning rate, clip, step."""
        if self.reducer is not None:
            if kl is not None:
                self.flat_grad[-1:].copy_(kl.reshape(1))
            self.reducer.average(self.flat_grad)
            kl = self.flat_grad[-1] if kl is not None else None
        if kl is not None:
            self.adapt_learning_rate(kl.item())  # the update's one host read per minibatch
        # rsl_rl clips the actor's and the critic's gradients to max_grad_norm each (clip_grad_norm_); the same
        # arithmetic on each network's slice of the flat buffer takes a sixth of its operations
        norms = torch.stack([torch.linalg.vector_norm(g) for g in self._network_grads])
        scales = (self.max_grad_norm / (norms + 1e-6)).clamp_(max=1.0)
        for grads, scale in zip(self._network_grads, scales.unbind(), strict=True):
            grads.mul_(scale)
        self.optimizer.step()

    def adapt_learning_rate(self, kl: float) -> None:
        """rsl_rl's adaptive schedule, computed identically on every rank from the averaged KL."""
        if kl > self.desired_kl * 2.0:
            self.learning_rate = max(1e-5, self.learning_rate / 1.5)
        elif 0.0 < kl < self.desired_kl / 2.0:
            self.learning_rate = min(1e-2, self.learning_rate * 1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate

    def update_precision(self) -> contextlib.AbstractContextManager:
        """On CUDA with `tf32`: TensorFloat-32 float32 matrix products for the update only (a minibatch graph
        recorded inside keeps its kernels); otherwise the process's setting."""
        if not (self.tf32 and torch.device(self.device).type == "cuda"):
            return contextlib.nullcontext()
        return _cuda_matmul_precision("tf32")

    # ------------------------------------------------------------ bookkeeping
    def describe(self) -> str:
        """What runs, for the start-up line: update engine, gradient reducer, normaliser synchronisation."""
        update = self.engine.name if self.engine is not None else "reference (autograd)"
        parts = [f"update: {update}"]
        if self.reducer is None:
            parts.append("one worker, nothing averaged")
        else:
            every = "minibatch" if self.grad_sync_period == 1 else f"{self.grad_sync_period} minibatches"
            if self.reducer.name == "none":
                parts.append("gradients not averaged (reducer none)")
            else:
                parts.append(f"gradients averaged after every {every} by {self.reducer.name}")
            if self.actor.obs_normalization or self.critic.obs_normalization:
                sync = "all-reduce" if self.reducer.name == "none" else self.reducer.name
                parts.append(f"observation normaliser synced by {sync}")
        return "; ".join(parts)

    def consistency_extras(self) -> Iterable[torch.Tensor]:
        """Beyond actor and critic, what the consistency check compares across ranks: nothing for PPO."""
        return ()

    def record_entries(self) -> dict[str, Any]:
        """Entries of the iteration's record beside the losses (none: the runner writes PPO's own)."""
        return {}

    def policy_changed(self) -> None:
        """The parameters changed (an update, a load, a broadcast): the fast engine re-reads what it caches."""
        if self.engine is not None:
            self.engine.policy_changed()

    def _decline(self, exc: Declined) -> None:
        log.warning("fast PPO update turned off, %s: the reference update runs from here on", exc)
        self.engine = None

    def broadcast_parameters(self) -> None:
        """Every rank starts from rank 0's networks (parameters and normaliser statistics)."""
        if self.reducer is not None:
            for model in (self.actor, self.critic):
                for tensor in model.state_dict().values():
                    self.reducer.broadcast(tensor)
        self.policy_changed()

    def load(self, *args, **kwargs):
        result = super().load(*args, **kwargs)
        self.policy_changed()
        return result

    def sum_across_workers(self, values: torch.Tensor) -> None:
        """Sum `values` over all workers in place (episode statistics, the stop signal), through the reducer."""
        if self.reducer is not None:
            self.reducer.sum(values)


@contextlib.contextmanager
def _cuda_matmul_precision(precision: str):
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = previous
