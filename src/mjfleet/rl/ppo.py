"""The reference PPO: rsl_rl's, with the one change a fleet of workers needs.

After every minibatch the gradients, and the minibatch's mean KL for the adaptive learning rate, are averaged
across workers in one collective by the averaged-gradient step (`mjfleet.rl.gradients`): the KL rides in one
extra slot of the flat gradient buffer, so every rank adapts its learning rate from the same averaged KL (rsl_rl
issues three collectives per minibatch for it). The observation normalisers synchronise through the same reducer.
Everything else is rsl_rl's PPO (storage, minibatches, losses, clipping, schedule, GAE): tests/test_runner.py
checks the update against rsl_rl's own `PPO.update` on the same rollout.

`minibatch_loss` is the loss, read it top to bottom; every setting it reads is a field of `PPOLoss`. By default
(`compile_update`, feed-forward networks) each minibatch runs it compiled by `torch.compile`, the same function
with its operations fused; a compile that fails at the first minibatch falls back, once and loudly, to the loss
as written (tests/test_compiled_update.py checks the two equal). On 2 CPU cores the compiled loss trains at
95-99% of the hand-derived gradients it replaced, 1.00-1.16x the loss as written (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from rsl_rl.algorithms import PPO

from mjfleet.errors import first_line
from mjfleet.rl.config import PPOConfig
from mjfleet.rl.gradients import AveragedGradients, cuda_matmul_precision
from mjfleet.rl.normalizer import model_normalizer_input

log = logging.getLogger(__name__)

ALGORITHM = "ppo"
MIN_LEARNING_RATE = 1e-5
"""The adaptive schedule's floor (rsl_rl's)."""


@dataclasses.dataclass(frozen=True)
class PPOLoss:
    """Every setting the PPO loss reads: what a faster implementation of it must reproduce, and what a recorded
    minibatch holds as constants (a change records it again)."""

    clip_param: float
    value_loss_coef: float
    entropy_coef: float
    use_clipped_value_loss: bool
    normalize_advantage_per_mini_batch: bool
    adaptive_kl: bool
    """Compute the minibatch's mean KL (the adaptive learning-rate schedule reads it)."""


class FleetPPO(PPO):
    """rsl_rl's PPO whose gradients and KL are averaged across workers by one reducer call per minibatch; an
    `mjfleet.rl.algorithm.Algorithm`.

    Built by `mjfleet.rl.build.build_ppo` from the agent's `PPOConfig`, which carries the extra settings:
    `gradient_reducer` (the `gradients`' reducer), `grad_sync_period` (average and step after every K minibatches,
    their gradients accumulated: one collective per K), `compile_update` (the loss under torch.compile) and
    `tf32` (on CUDA, the update's float32 matrix products on TensorFloat-32 tensor cores, as mjlab trains).
    """

    name = ALGORITHM

    def __init__(
        self, actor, critic, storage, settings: PPOConfig, device: str, policy_cfg: dict | None = None
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
        self.tf32 = settings.tf32
        self.policy_cfg = policy_cfg
        """rsl_rl's config of the networks (`AgentConfig.to_rsl_rl`), kept in checkpoints: play rebuilds from it."""
        # The minibatch's KL rides in one extra slot of the gradient buffer.
        self.gradients = AveragedGradients(
            {"actor": self.actor.parameters(), "critic": self.critic.parameters()},
            self.optimizer,
            extra_slots=1,
            sync_period=settings.grad_sync_period,
        )
        self.optimizer = self.gradients.optimizer
        self.trained = [p for params in self.gradients.params.values() for p in params]
        self.compiled_loss = None
        """`minibatch_loss` under torch.compile; None: the loss runs as written."""
        self.not_compiled: str | None = None
        """Why the loss runs as written although `compile_update` asked otherwise, for the start-up line."""
        if settings.compile_update and self.recurrent:
            # not measured compiled: its minibatches replay whole trajectories op by op
            self.not_compiled = "a recurrent network"
        elif settings.compile_update:
            self.compiled_loss = torch.compile(self.minibatch_loss)
        self._compiled_ran = False
        self.critic_warmup_iterations, self.critic_only_updates = settings.critic_warmup_iterations, 0
        """Updates left that train only the critic (`ppo_from_student` sets it): the actor is held meanwhile."""

    @property
    def loss(self) -> PPOLoss:
        """The loss's settings as they are now (rsl_rl keeps them as attributes)."""
        return PPOLoss(
            clip_param=self.clip_param,
            value_loss_coef=self.value_loss_coef,
            entropy_coef=self.entropy_coef,
            use_clipped_value_loss=self.use_clipped_value_loss,
            normalize_advantage_per_mini_batch=self.normalize_advantage_per_mini_batch,
            adaptive_kl=self.desired_kl is not None and self.schedule == "adaptive",
        )

    @property
    def recurrent(self) -> bool:
        """A recurrent actor or critic: minibatches are whole environments' trajectories (rsl_rl's recurrent
        generator), replayed from the hidden states the rollout saved."""
        return self.actor.is_recurrent or self.critic.is_recurrent

    @property
    def mini_batch_size(self) -> int:
        """Transitions per minibatch, as rsl_rl's generators split the rollout."""
        st = self.storage
        if self.recurrent:
            return st.num_envs // self.num_mini_batches * st.num_transitions_per_env
        return st.num_envs * st.num_transitions_per_env // self.num_mini_batches

    @property
    def action_std(self) -> torch.Tensor:
        """The policy's current action standard deviation (per action dimension)."""
        return self.actor.output_std.detach()

    # ------------------------------------------------------------------ update
    def update(self, obs) -> dict[str, float]:
        """The iteration's update: returns and advantages from the rollout (`obs`: after its last step), then
        `optimize`."""
        with torch.inference_mode():
            self.compute_returns(obs)
        return self.optimize()

    def optimize(self) -> dict[str, float]:
        """The optimisation epochs over the stored rollout, its returns computed; returns the mean losses (and
        the mean KL)."""
        grads = self.gradients
        critic_only = self.critic_only_updates > 0
        sums = torch.zeros(4, device=self.device)  # surrogate, value, entropy, KL: read once, at the end
        count = 0
        with self.update_precision():  # around the recording of a minibatch graph too: it keeps its kernels
            for terms, kl in self._each_minibatch():
                sums[:3] += terms
                count += 1
                if kl is None:
                    grads.extra.zero_()
                else:
                    sums[3] += kl
                    grads.extra.copy_(kl.reshape(1))
                if grads.accumulate(end_of_group=count % self.num_mini_batches == 0):  # an epoch's end
                    self.apply_gradients(critic_only)
        rollout = self.storage.observations.flatten(0, 1)  # once, for both normalisers
        for model in (self.critic,) if critic_only else (self.actor, self.critic):
            if model.obs_normalization:
                grads.update_normalizer(model.obs_normalizer, model_normalizer_input(model, rollout))
        if critic_only:
            self.critic_only_updates -= 1
            if self.critic_only_updates == 0 and self.loss.adaptive_kl:
                # A fresh Adam's first steps move every actor weight by the full rate, whatever the gradient's
                # size: from the floor, the schedule raises the rate only as far as the KL allows.
                self.set_learning_rate(MIN_LEARNING_RATE)
        self.storage.clear()
        surrogate, value, entropy, kl = (sums / max(count, 1)).tolist()
        losses = {"value": value, "surrogate": surrogate, "entropy": entropy}
        losses["total"] = surrogate + self.value_loss_coef * value - self.entropy_coef * entropy
        if self.loss.adaptive_kl:
            losses["kl"] = kl
        return losses

    def _each_minibatch(self) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
        """Each minibatch's gradients written into the flat buffer, yielding (loss terms, KL)."""
        split = (
            self.storage.recurrent_mini_batch_generator
            if self.recurrent
            else self.storage.mini_batch_generator
        )
        for batch in split(self.num_mini_batches, self.num_learning_epochs):
            yield self.minibatch_gradients(batch)

    def minibatch_gradients(self, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The loss (compiled, or as written) back-propagated into the flat gradient buffer; its terms and KL."""
        if self.compiled_loss is not None:
            try:
                result = self._backward(self.compiled_loss, batch)
                self._compiled_ran = True
                return result
            except Exception as exc:
                if self._compiled_ran:  # it worked before: this is not the compiler's failure
                    raise
                self.not_compiled, self.compiled_loss = f"torch.compile failed: {first_line(exc)}", None
                log.warning(
                    "torch.compile of the PPO loss failed (%s): the loss runs as written", first_line(exc)
                )
        return self._backward(self.minibatch_loss, batch)

    def _backward(self, loss_fn, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        loss, terms, kl = loss_fn(batch)
        self.gradients.zero_()
        loss.backward()
        return terms, kl

    def minibatch_loss(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """rsl_rl's PPO loss on one minibatch: (the loss, its detached [surrogate, value, entropy] terms, the mean
        KL or None)."""
        loss_cfg = self.loss
        advantages = batch.advantages
        if loss_cfg.normalize_advantage_per_mini_batch:
            with torch.no_grad():
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        advantages = torch.squeeze(advantages)
        actor, critic = self.actor, self.critic
        actor_state, critic_state = batch.hidden_states  # recurrent: the states at each trajectory's start
        actor(batch.observations, masks=batch.masks, hidden_state=actor_state, stochastic_output=True)
        log_prob = actor.get_output_log_prob(batch.actions)
        values = critic(batch.observations, masks=batch.masks, hidden_state=critic_state)
        entropy = actor.output_entropy.mean()
        kl = None
        if loss_cfg.adaptive_kl:
            with torch.no_grad():
                kl = actor.get_kl_divergence(batch.old_distribution_params, actor.output_distribution_params)
                kl = kl.mean()

        # clipped surrogate
        clip = loss_cfg.clip_param
        ratio = torch.exp(log_prob - torch.squeeze(batch.old_actions_log_prob))
        clipped_ratio = torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
        surrogate_loss = torch.max(-advantages * ratio, -advantages * clipped_ratio).mean()

        # value loss, optionally clipped around the rollout's values
        if loss_cfg.use_clipped_value_loss:
            clipped = batch.values + (values - batch.values).clamp(-clip, clip)
            value_loss = torch.max((values - batch.returns).pow(2), (clipped - batch.returns).pow(2)).mean()
        else:
            value_loss = (batch.returns - values).pow(2).mean()

        loss = surrogate_loss + loss_cfg.value_loss_coef * value_loss - loss_cfg.entropy_coef * entropy
        terms = torch.stack((surrogate_loss.detach(), value_loss.detach(), entropy.detach())).float()
        return loss, terms, kl

    def apply_gradients(self, critic_only: bool = False) -> None:
        """Average the gradients (and the KL) across workers, adapt the learning rate, clip each network, step
        (`critic_only`: the critic alone, at the learning rate as it is)."""
        grads = self.gradients
        grads.average()
        if critic_only:
            grads.clip(self.max_grad_norm, ["critic"])
            grads.step(["critic"])
            return
        if self.loss.adaptive_kl:
            self.adapt_learning_rate(grads.extra[0].item())  # the update's one host read per minibatch
        grads.clip(self.max_grad_norm)  # rsl_rl clips the actor and the critic to max_grad_norm each
        grads.step()

    def adapt_learning_rate(self, kl: float) -> None:
        """rsl_rl's adaptive schedule, computed identically on every rank from the averaged KL."""
        if kl > self.desired_kl * 2.0:
            self.set_learning_rate(max(MIN_LEARNING_RATE, self.learning_rate / 1.5))
        elif 0.0 < kl < self.desired_kl / 2.0:
            self.set_learning_rate(min(1e-2, self.learning_rate * 1.5))

    def set_learning_rate(self, learning_rate: float) -> None:
        """The learning rate of every network's optimiser group."""
        self.learning_rate = learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    def update_precision(self) -> contextlib.AbstractContextManager:
        """On CUDA with `tf32`: TensorFloat-32 float32 matrix products for the update only (a minibatch graph
        recorded inside keeps its kernels); otherwise the process's setting."""
        if not (self.tf32 and torch.device(self.device).type == "cuda"):
            return contextlib.nullcontext()
        return cuda_matmul_precision("tf32")

    # ------------------------------------------------------------ bookkeeping
    def describe(self) -> str:
        """What runs, for the start-up line: the loss, gradient reducer, normaliser synchronisation."""
        if self.compiled_loss is not None:
            update = "PPO loss compiled (torch.compile)"
        else:
            update = "PPO loss as written" + (
                f" (not compiled: {self.not_compiled})" if self.not_compiled else ""
            )
        period = self.gradients.sync_period
        every = "minibatch" if period == 1 else f"{period} minibatches"
        normalised = self.actor.obs_normalization or self.critic.obs_normalization
        parts = [f"update: {update}", *self.gradients.describe(every, normalised)]
        if self.critic_only_updates:
            parts.append(f"the first {self.critic_only_updates} iterations train only the new critic")
        return "; ".join(parts)

    def record(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "Policy/action_std": float(self.action_std.mean())}

    def consistency_tensors(self) -> Iterable[torch.Tensor]:
        """The actor's and the critic's parameters."""
        yield from self.actor.parameters()
        yield from self.critic.parameters()

    def broadcast_parameters(self) -> None:
        """Every rank starts from rank 0's networks (parameters and normaliser statistics)."""
        self.gradients.broadcast(self.actor, self.critic)

    def state_dict(self) -> dict[str, Any]:
        """rsl_rl's state (networks, optimizer) and the networks' config, from which play rebuilds the actor."""
        state = self.save()
        if self.policy_cfg is not None:
            state["rsl_rl_cfg"] = self.policy_cfg
        return state

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        self.load(state, None, strict)
