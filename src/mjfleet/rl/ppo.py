"""rsl_rl's PPO with one collective per minibatch and one host read (the KL, for the adaptive learning rate) per
minibatch at most."""

from __future__ import annotations

import contextlib
import functools
import logging

import torch
import torch.distributed as dist
from rsl_rl.algorithms import PPO

from mjfleet.rl.analytic_gradients import AnalyticMinibatch, RolloutSlot
from mjfleet.rl.graphed_update import GraphedMinibatch
from mjfleet.rl.minibatch_fields import make_batch, transition_fields
from mjfleet.rl.shm_reduce import SharedMemoryReduce

log = logging.getLogger(__name__)

GATHER_REDUCE_MAX_WORKERS = 4
"""Up to this many gloo workers, gradients are averaged by an all-gather and a local sum (see reduce_parameters)."""


class FusedAdamStep:
    """`optimizer.step()` of torch's fused Adam, as its kernel calls without torch.optim's Python around them.

    On a CPU the per-step bookkeeping of `Adam.step` (grouping tensors by device, reading the state, the profiler
    hook) took 45 of its 79 us for Cartpole's 13 parameters. This increments the step counters (views of one
    vector: one add) and calls the same `_fused_adam_` with the same arguments, on the optimizer's own state
    tensors and current learning rate (14 us): the result is bit-identical (tests/test_ppo_steps.py). `build`
    returns None unless every assumption holds (one parameter group, plain fused Adam with float
    hyperparameters, state already created by a first step).
    """

    def __init__(self, group: dict, params: list, grads: list, state: list[dict]) -> None:
        self.group = group
        self.params = [p.detach() for p in params]
        self.grads = grads
        self.exp_avgs = [s["exp_avg"] for s in state]
        self.exp_avg_sqs = [s["exp_avg_sq"] for s in state]
        # The step counters (one 0-d tensor per parameter, all equal) become views of one vector: one add per
        # step instead of `_foreach_add_`, which on a CPU adds and converts tensor by tensor (20 us for 13).
        self.step_counts = torch.stack([s["step"] for s in state])
        self.steps = list(self.step_counts.unbind())
        for s, step in zip(state, self.steps, strict=True):
            s["step"] = step

    @classmethod
    def build(cls, optimizer: torch.optim.Optimizer, grads: list[torch.Tensor]) -> FusedAdamStep | None:
        """For `optimizer` whose parameters' gradients are `grads` (in parameter order), or None."""
        if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
            return None
        group = optimizer.param_groups[0]
        plain = not any(
            group.get(k) for k in ("amsgrad", "maximize", "differentiable", "decoupled_weight_decay")
        )
        floats = all(
            type(v) in (float, int)
            for v in (group["lr"], group["eps"], group["weight_decay"], *group["betas"])
        )
        params = group["params"]
        state = [optimizer.state.get(p, {}) for p in params]
        if not (group.get("fused") and plain and floats and len(grads) == len(params)):
            return None
        if not all({"step", "exp_avg", "exp_avg_sq"} <= s.keys() for s in state):
            return None
        if any(p.grad is not g for p, g in zip(params, grads, strict=True)):
            return None
        return cls(group, params, grads, state)

    def __call__(self) -> None:
        group = self.group
        beta1, beta2 = group["betas"]
        self.step_counts.add_(1)
        torch._fused_adam_(
            self.params,
            self.grads,
            self.exp_avgs,
            self.exp_avg_sqs,
            [],
            self.steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )


@contextlib.contextmanager
def cuda_matmul_precision(precision: str):
    """torch.backends.cuda.matmul.fp32_precision set to `precision` ("tf32" or "ieee") inside, restored after."""
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = previous


class FleetPPO(PPO):
    """PPO whose update is cheaper to run on several workers; the mathematics is rsl_rl's.

    Per minibatch rsl_rl issues three collectives (gradient all-reduce, KL all-reduce, learning-rate broadcast)
    and four host reads (`.item()` of the new learning rate and of three losses). On CPU workers a gloo
    collective costs about a millisecond whatever its size, so at small minibatches the collectives dominated
    the update. Here:

    - the policy's mean KL travels in the same buffer as the gradients: one collective per minibatch (an
      all-reduce; on gloo with a few workers an all-gather and a local sum, see `reduce_parameters`);
    - every rank adapts the learning rate from that identical averaged KL, so no broadcast is needed and the
      ranks keep identical learning rates (the new rate is applied before the optimizer step, as in rsl_rl);
    - the gradients are views of one flat buffer: the collective sends it as it is, clipping is two norms;
    - losses are summed on device and read once, after the last minibatch;
    - Adam uses torch's fused kernel (one kernel per step for all parameters instead of one per tensor), called
      directly after the first step of an update (`FusedAdamStep`);
    - MLP networks get their gradients layer by layer without autograd (`analytic_gradients`);
    - on CUDA each minibatch's loss and gradients are one replayed CUDA graph (`capture_update`), its matrix
      products in TF32 unless `tf32=False` (as mjlab trains).

    Recurrent policies, RND and symmetry augmentation fall back to rsl_rl's own update.
    """

    def __init__(
        self,
        *args,
        capture_update: bool = True,
        tf32: bool = True,
        analytic_gradients: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.capture_update = capture_update
        """On CUDA: record a minibatch's loss and gradients once and replay them (mjfleet.rl.graphed_update)."""
        self.tf32 = tf32
        """On CUDA: the update's float32 matrix products in TF32 (`update_precision`)."""
        self._graphed: GraphedMinibatch | None = None
        self._graphed_key: tuple = ()
        """`_graph_key()` when `_graphed` was recorded."""
        self._capture_failed = False
        if type(self.optimizer) is torch.optim.Adam:  # not a subclass (AdamW decays weights differently)
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            d = self.optimizer.defaults
            try:
                self.optimizer = torch.optim.Adam(
                    params,
                    lr=self.learning_rate,
                    betas=d["betas"],
                    eps=d["eps"],
                    weight_decay=d["weight_decay"],
                    amsgrad=d["amsgrad"],
                    fused=True,
                )
            except (RuntimeError, ValueError):  # a device or dtype without a fused kernel: keep the default
                pass
        self._setup_flat_gradients()
        self._slot_written = False
        """`act` wrote the storage's next row (actions, values, log-probabilities, distribution)."""
        self._optimizer_step: FusedAdamStep | None = None
        """The optimizer step without torch.optim's Python around it; rebuilt after the first step of each update."""
        self._analytic: AnalyticMinibatch | None = None
        """Minibatches run op by op: loss and gradients without autograd (mjfleet.rl.analytic_gradients)."""
        if analytic_gradients and type(self).loss_is_fleet_ppos():
            self._analytic = AnalyticMinibatch.build(self, dict(zip(self._trained, self._grads, strict=True)))

    LOSS_METHODS = ("_minibatch_loss", "_surrogate_loss", "_value_loss", "_normalize_advantages")
    """What `AnalyticMinibatch` writes out by hand: a subclass that overrides one keeps autograd."""

    @classmethod
    def loss_is_fleet_ppos(cls) -> bool:
        """Whether this class computes FleetPPO's loss (a variant that changes it must not get the hand-written
        gradients of the original)."""
        return all(getattr(cls, name) is getattr(FleetPPO, name) for name in cls.LOSS_METHODS)

    # -------------------------------------------------------------- gradients
    def _setup_flat_gradients(self) -> None:
        """Every trained parameter's `.grad` becomes a view of one flat buffer, which has one more slot (the KL).

        Backward accumulates into existing `.grad` tensors in place, so the buffer is zeroed (one operation)
        instead of the gradients being set to None. Clipping is then a norm and a scale per network, and the
        all-reduce sends the buffer itself: no per-parameter packing and unpacking.
        """
        self._trained = [p for m in (self.actor, self.critic) for p in m.parameters() if p.requires_grad]
        first = self._trained[0]
        sizes = [p.numel() for p in self._trained]
        self._flat = torch.zeros(sum(sizes) + 1, dtype=first.dtype, device=first.device)
        views = self._flat[:-1].split(sizes)
        self._grads = [g.view_as(p) for g, p in zip(views, self._trained, strict=True)]
        num_actor = sum(p.numel() for p in self.actor.parameters() if p.requires_grad)
        # Clipped separately, as rsl_rl clips the actor's and the critic's gradients.
        self._grad_segments = (self._flat[:num_actor], self._flat[num_actor:-1])
        self._attach_gradients()

    @property
    def num_trained_parameters(self) -> int:
        """Parameters the optimizer trains (actor and critic): the flat gradient buffer less its KL slot."""
        return self._flat.numel() - 1

    @property
    def mini_batch_size(self) -> int:
        """Transitions per minibatch, as rsl_rl's feed-forward sampler splits the rollout."""
        st = self.storage
        return st.num_envs * st.num_transitions_per_env // self.num_mini_batches

    def _attach_gradients(self) -> None:
        """(Re)point every `.grad` at its view of the flat buffer (anything may have set them to None)."""
        for p, g in zip(self._trained, self._grads, strict=True):
            if p.grad is not g:
                p.grad = g

    def _zero_gradients(self) -> None:
        self._flat.zero_()

    def _clip_gradients(self) -> None:
        """torch's clip_grad_norm_ for the actor's and the critic's gradients, on their slices of the buffer:
        both norms in one operation, both scale factors in one tensor."""
        segments = self._grad_segments
        norms = torch.stack(torch._foreach_norm(segments))
        scales = norms.add_(1e-6).reciprocal_().mul_(self.max_grad_norm).clamp_(max=1.0)
        torch._foreach_mul_(segments, scales.unbind())

    # -------------------------------------------------------------- collectives
    def reduce_parameters(self, extra: torch.Tensor | None = None) -> torch.Tensor | None:
        """Average every gradient (and `extra`, a one-element tensor: the KL) across workers: one collective.

        Returns the averaged `extra`, or None without one. Gradients are updated in place. CPU workers that
        share a host sum through shared memory (mjfleet.rl.shm_reduce; 0.3 ms mean where gloo's all-gather took
        1.9 ms between two busy workers). Otherwise, on gloo with a few workers, the buffers are all-gathered and
        summed locally (in rank order, so every rank gets the same bits): gloo's ring all-reduce exchanges
        several rounds of messages, and on 2 CPU workers it took 1.9-2.5 ms for a 9,300-float buffer against
        0.9-1.0 ms for the all-gather and the sum.
        """
        if any(p.grad is not g for p, g in zip(self._trained, self._grads, strict=True)):
            # rsl_rl's own update (see `uses_rsl_rl_update`) set the gradients to None and back-propagated into
            # new tensors: its reduction, which also covers RND's parameters.
            super().reduce_parameters()
            return extra
        if extra is not None:
            self._flat[-1:].copy_(extra.reshape(-1))
        world = self.gpu_world_size
        host_reduce = self._host_reduce
        if host_reduce is not None:
            host_reduce.reduce(self._flat)
        elif (gathered := self._gather_buffer) is not None:
            dist.all_gather_into_tensor(gathered, self._flat)
            torch.sum(gathered.view(world, -1), dim=0, out=self._flat)
        else:
            dist.all_reduce(self._flat, op=dist.ReduceOp.SUM)
        self._flat /= world
        return self._flat[-1:].view_as(extra) if extra is not None else None

    def sum_across_workers(self, values: torch.Tensor) -> None:
        """Sum `values` over all workers, in place (collective). Through the shared-memory exchange where the
        gradients go that way (for the gradients: 0.33 ms mean between two busy workers, gloo 1.9 ms), otherwise
        one all-reduce."""
        host = self._host_reduce
        if host is not None and values.dtype == host.dtype and values.numel() <= host.numel:
            host.reduce(values)
        else:
            dist.all_reduce(values, op=dist.ReduceOp.SUM)

    @functools.cached_property
    def _host_reduce(self) -> SharedMemoryReduce | None:
        """CPU workers all on one host: reduce_parameters sums through shared memory (mjfleet.rl.shm_reduce)."""
        if torch.device(self.device).type != "cpu" or not SharedMemoryReduce.available(
            self._flat.numel(), self._flat.dtype
        ):
            return None
        return SharedMemoryReduce(self._flat.numel(), self._flat.dtype)

    @functools.cached_property
    def _gather_buffer(self) -> torch.Tensor | None:
        """reduce_parameters' all-gather buffer on gloo with a few workers; None: it all-reduces."""
        if dist.get_backend() != "gloo" or self.gpu_world_size > GATHER_REDUCE_MAX_WORKERS:
            return None
        return self._flat.new_empty(self.gpu_world_size * self._flat.numel())

    def _policy_changed(self) -> None:
        """The parameters may have changed without their version counters saying so (fused optimizer steps,
        collectives): values cached for the rollout are recomputed."""
        if self._analytic is not None:
            self._analytic.policy_changes += 1

    def broadcast_parameters(self) -> None:
        super().broadcast_parameters()
        self._policy_changed()

    def load(self, *args, **kwargs):
        result = super().load(*args, **kwargs)
        self._policy_changed()
        return result

    # ----------------------------------------------------------------- rollout
    def act(self, obs):
        """rsl_rl's act (sample, value, log-probability, distribution parameters into the transition); for MLP
        networks computed by `AnalyticMinibatch.act`, without the module calls and distribution objects, and
        written straight into the rollout storage's next row (`process_env_step` then stores the observations
        act saw, the rewards and the dones)."""
        if self._analytic is None:
            return super().act(obs)
        slot = self._rollout_slot()
        t = self.transition
        t.hidden_states = (None, None)
        t.actions, t.values, t.actions_log_prob, t.distribution_params = self._analytic.act(obs, out=slot)
        t.observations = obs
        self._slot_written = slot is not None
        return t.actions

    def _rollout_slot(self) -> RolloutSlot | None:
        """Views of the storage row the next transition goes to; None when the storage is full (rsl_rl's
        add_transition then raises its overflow error as usual) or with RND (whose rewards rsl_rl's
        process_env_step adds)."""
        st = self.storage
        if st.step >= st.num_transitions_per_env or self.rnd is not None:
            return None
        i = st.step
        if st.distribution_params is None:  # rsl_rl creates them at the first transition: mean and std
            st.distribution_params = (torch.zeros_like(st.actions), torch.zeros_like(st.actions))
        mean, std = st.distribution_params
        return RolloutSlot(st.actions[i], st.values[i], st.actions_log_prob[i], mean[i], std[i])

    def process_env_step(self, obs, rewards, dones, extras) -> None:
        """rsl_rl's process_env_step; after `act` wrote its row, only the observations `act` saw, the rewards
        (bootstrapped on time-outs as rsl_rl does: r + gamma * V * time_out) and the dones remain to be stored."""
        if not self._slot_written:
            return super().process_env_step(obs, rewards, dones, extras)
        self._slot_written = False
        st = self.storage
        i = st.step
        for key, value in self.transition.observations.items():  # the observations `act` saw
            st.observations[key][i].copy_(value)
        row = st.rewards[i]
        time_outs = extras.get("time_outs")
        if time_outs is None:
            row.copy_(rewards.view(-1, 1))
        else:
            torch.mul(st.values[i], time_outs.unsqueeze(1).to(self.device), out=row)
            row.mul_(self.gamma).add_(rewards.view(-1, 1))
        st.dones[i].copy_(dones.view(-1, 1))
        st.step = i + 1
        self.transition.clear()

    @property
    def action_std(self) -> torch.Tensor:
        """The policy's current action standard deviation (per action dimension)."""
        if self._analytic is not None:
            return self._analytic.std_terms()[0]
        return self.actor.output_std.detach()

    def compute_returns(self, obs) -> None:
        """rsl_rl's GAE returns and advantages, with the same arithmetic in the same order, but every term that
        does not depend on the next step's advantage computed for the whole rollout at once: two operations per
        step instead of about ten (Cartpole, 64 envs x 24 steps: 0.71 -> 0.20 ms)."""
        if self.critic.is_recurrent:
            return super().compute_returns(obs)
        st = self.storage
        last_values = self.critic(obs).detach()
        next_values = torch.cat((st.values[1:], last_values.unsqueeze(0)))
        discount = (1.0 - st.dones.float()) * self.gamma  # 0 after a terminal step
        delta = st.rewards + discount * next_values - st.values
        trace = discount * self.lam
        advantages = torch.empty_like(delta)
        carried = torch.empty_like(delta[0])
        advantage = delta[-1]  # the advantage after the rollout counts as 0
        advantages[-1] = advantage
        for step in range(st.num_transitions_per_env - 2, -1, -1):
            torch.mul(trace[step], advantage, out=carried)
            advantage = torch.add(delta[step], carried, out=advantages[step])
        st.returns.copy_(advantages + st.values)
        st.advantages = st.returns - st.values
        if not self.normalize_advantage_per_mini_batch:
            st.advantages = (st.advantages - st.advantages.mean()) / (st.advantages.std() + 1e-8)

    # ------------------------------------------------------------------ update
    def update(self) -> dict[str, float]:
        """Run the optimisation epochs over the stored rollout; returns the mean losses."""
        with self.update_precision():
            losses = super().update() if self.uses_rsl_rl_update() else self._update_feed_forward()
        self._policy_changed()
        return losses

    def uses_rsl_rl_update(self) -> bool:
        """Recurrent networks, RND and symmetry augmentation: rsl_rl's own update (its minibatches, autograd,
        its gradient reduction); everything else: this class's (`_update_feed_forward`)."""
        return bool(self.rnd or self.symmetry or self.actor.is_recurrent or self.critic.is_recurrent)

    def update_precision(self) -> contextlib.AbstractContextManager:
        """The precision of the update's float32 matrix products: on CUDA with `tf32`, TensorFloat-32 (cuBLAS
        reads the setting at every call, and a minibatch graph recorded inside keeps the kernels it chose);
        otherwise the process's setting, IEEE float32 by default."""
        if self.tf32 and torch.device(self.device).type == "cuda":
            return cuda_matmul_precision("tf32")
        return contextlib.nullcontext()

    def _update_feed_forward(self) -> dict[str, float]:
        self._attach_gradients()
        self._optimizer_step = None  # the optimizer or its state may have been replaced (a checkpoint loaded)
        on_cuda = torch.device(self.device).type == "cuda"
        if self.capture_update and on_cuda and not self._capture_failed:
            loss_sums, num_updates = self._update_graphed()
        else:
            loss_sums, num_updates = self._update_op_by_op()

        obs = self.storage.observations.flatten(0, 1)
        self._update_normalization(obs)
        self.storage.clear()
        surrogate, value, entropy_mean = (loss_sums / max(num_updates, 1)).tolist()
        return {"value": value, "surrogate": surrogate, "entropy": entropy_mean}

    def _update_op_by_op(self, indices: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, int]:
        """Minibatch by minibatch, launched op by op: by `AnalyticMinibatch` where it applies, otherwise by autograd;
        over the minibatches `indices` when already drawn (a failed CUDA-graph capture goes on with the ones it
        drew), else the same rows rsl_rl's generator would draw."""
        gradients = self._gradients_function()
        if self._analytic is not None or indices is not None:
            batches = self._packed_mini_batches(indices)
        else:
            batches = self.storage.mini_batch_generator(self.num_mini_batches, self.num_learning_epochs)
        loss_sums = torch.zeros(3, device=self.device)  # surrogate, value, entropy
        num_updates = 0
        for batch in batches:
            terms, kl = gradients(batch)
            self._apply_gradients(kl)
            loss_sums += terms
            num_updates += 1
        return loss_sums, num_updates

    def _gradients_function(self):
        """How a minibatch's gradients are computed (op by op and inside the CUDA graph): `AnalyticMinibatch`
        where it applies (it writes every gradient: nothing to zero), otherwise autograd."""
        return self._analytic_gradients if self._analytic is not None else self._autograd_gradients

    def _autograd_gradients(self, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        loss, terms, kl = self._minibatch_loss(batch)
        self._zero_gradients()
        loss.backward()
        return terms, kl

    def _analytic_gradients(self, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert self._analytic is not None
        return self._analytic(self._normalize_advantages(batch))

    def _minibatch_indices(self) -> list[torch.Tensor]:
        """rsl_rl's feed-forward minibatches as row indices into the flattened rollout, in update order: one
        permutation (its randperm call), cut into `num_mini_batches` slices, the same slices every epoch."""
        size = self.mini_batch_size
        permutation = torch.randperm(self.num_mini_batches * size, device=self.device)
        return list(permutation.split(size)) * self.num_learning_epochs

    def _packed_mini_batches(self, indices: list[torch.Tensor] | None = None):
        """rsl_rl's feed-forward minibatches (the same rows; `indices` from `_minibatch_indices`, drawn here if
        None), each gathered by one index_select from one matrix that holds every field side by side, instead of
        one indexing operation per field (the observations a plain dict of its groups)."""
        st = self.storage
        if indices is None:
            indices = self._minibatch_indices()
        rows = st.num_envs * st.num_transitions_per_env
        groups = list(st.observations.keys())
        fields = transition_fields(st)
        columns = [st.observations[g].reshape(rows, -1) for g in groups]
        columns += [f.reshape(rows, -1) for f in fields.values()]
        packed = torch.cat(columns, dim=1)
        widths = [c.shape[1] for c in columns]
        n = len(groups)
        for index in indices:
            parts = packed.index_select(0, index).split(widths, dim=1)
            observations = dict(zip(groups, parts[:n], strict=True))
            yield make_batch(observations, dict(zip(fields, parts[n:], strict=True)))

    def _update_graphed(self) -> tuple[torch.Tensor, int]:
        """rsl_rl's minibatches (its permutation call, drawn first), each replayed as one recorded CUDA graph."""
        st = self.storage
        indices = self._minibatch_indices()
        key = self._graph_key()
        if self._graphed is not None and self._graphed_key != key:
            self._graphed = None  # a setting the recorded kernels hold has changed: record again
        if self._graphed is None:  # recorded at the first update, from its rollout
            # The actor keeps its last distribution, and so the autograd graph of the last op-by-op minibatch (if
            # one ran), whose gradient accumulators are bound to another stream than the capture's: setting it
            # from a forward pass without gradients releases it (and draws no random numbers).
            with torch.no_grad():
                actor = self.actor
                actor.distribution.update(actor.mlp(actor.get_latent(st.observations[0])))
            self._graphed_key = key
            try:
                self._graphed = GraphedMinibatch(st, self.mini_batch_size, self._gradients_function())
            except Exception as exc:  # an optimisation: run op by op instead, loudly, once
                torch.cuda.synchronize(self.device)
                self._capture_failed = True
                log.warning("the PPO minibatch could not be captured as a CUDA graph (%s); op by op", exc)
                return self._update_op_by_op(indices)
        graphed = self._graphed
        graphed.load(st)
        graphed.loss_sums.zero_()
        for index in indices:
            self._apply_gradients(graphed.run(index))
        return graphed.loss_sums.clone(), len(indices)

    def _graph_key(self) -> tuple:
        """The settings a recorded minibatch holds as constants or fixed branches (and its batch size): the graph
        is recorded again when one changes (an entropy or clip schedule, say), as the op-by-op update follows it."""
        return (
            self.clip_param,
            self.value_loss_coef,
            self.entropy_coef,
            self.desired_kl,
            self.schedule,
            self.normalize_advantage_per_mini_batch,
            self.use_clipped_value_loss,
            self.tf32,
            self.mini_batch_size,
            self._analytic is not None,
        )

    def _minibatch_loss(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Forward pass of one minibatch: (loss, [surrogate, value, entropy] detached, mean KL or None)."""
        # rsl_rl's Batch declares every field optional; the feed-forward generator fills all of these.
        assert batch.advantages is not None and batch.actions is not None
        assert batch.old_distribution_params is not None
        batch = self._normalize_advantages(batch)
        with torch.amp.autocast(
            device_type=torch.device(self.device).type,
            enabled=self.use_mixed_precision,
            dtype=torch.bfloat16,
        ):
            self.actor(batch.observations, stochastic_output=True)
            log_prob = self.actor.get_output_log_prob(batch.actions)
            values = self.critic(batch.observations)
            entropy = self.actor.output_entropy.mean()
            kl = None
            if self.desired_kl is not None and self.schedule == "adaptive":
                with torch.no_grad():
                    kl = self.actor.get_kl_divergence(
                        batch.old_distribution_params, self.actor.output_distribution_params
                    ).mean()
            surrogate_loss = self._surrogate_loss(log_prob, batch)
            value_loss = self._value_loss(values, batch)
            loss = surrogate_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        terms = torch.stack((surrogate_loss.detach(), value_loss.detach(), entropy.detach())).float()
        return loss, terms, kl

    def _normalize_advantages(self, batch):
        """The batch, its advantages normalised over the minibatch where configured (rsl_rl's option)."""
        if self.normalize_advantage_per_mini_batch:
            with torch.no_grad():
                batch.advantages = (batch.advantages - batch.advantages.mean()) / (
                    batch.advantages.std() + 1e-8
                )
        return batch

    def _apply_gradients(self, kl: torch.Tensor | None) -> None:
        """Average gradients across workers, adapt the learning rate, clip, and step the optimizer."""
        if self.is_multi_gpu:
            kl = self.reduce_parameters(kl)
        if kl is not None:
            self._adapt_learning_rate(float(kl))  # the update's one host read per minibatch
        self._clip_gradients()
        if self._optimizer_step is not None:
            self._optimizer_step()
        else:
            self.optimizer.step()
            self._optimizer_step = FusedAdamStep.build(self.optimizer, self._grads)

    def _update_normalization(self, obs) -> None:
        for model in (self.actor, self.critic):
            normalizer = getattr(model, "obs_normalizer", None)
            std = getattr(normalizer, "_std", None)
            model.update_normalization(obs)
            # rsl_rl's normaliser assigns a new std tensor; a recorded minibatch reads the old one: keep it.
            if isinstance(std, torch.Tensor) and normalizer._std is not std:
                std.copy_(normalizer._std)
                normalizer._std = std

    def _surrogate_loss(self, log_prob: torch.Tensor, batch) -> torch.Tensor:
        ratio = torch.exp(log_prob - torch.squeeze(batch.old_actions_log_prob))
        advantages = torch.squeeze(batch.advantages)
        surrogate = -advantages * ratio
        clipped = -advantages * torch.clamp(ratio, 1.0 - self.clip_param, 1.0 + self.clip_param)
        return torch.max(surrogate, clipped).mean()

    def _value_loss(self, values: torch.Tensor, batch) -> torch.Tensor:
        if not self.use_clipped_value_loss:
            return (batch.returns - values).pow(2).mean()
        clipped = batch.values + (values - batch.values).clamp(-self.clip_param, self.clip_param)
        return torch.max((values - batch.returns).pow(2), (clipped - batch.returns).pow(2)).mean()

    def _adapt_learning_rate(self, kl: float) -> None:
        """rsl_rl's adaptive schedule, computed identically on every rank from the averaged KL."""
        if kl > self.desired_kl * 2.0:
            self.learning_rate = max(1e-5, self.learning_rate / 1.5)
        elif 0.0 < kl < self.desired_kl / 2.0:
            self.learning_rate = min(1e-2, self.learning_rate * 1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate
