"""FleetSAC: Soft Actor-Critic that trains as one of a fleet of workers, with the runner interface FleetPPO has.

Each worker collects into its own replay buffer (`mjfleet.rl.sac.replay`) and samples its own batches; after every
gradient step the critics', the actor's and the temperature's gradients are averaged across workers in ONE
collective by the run's reducer (`mjfleet.rl.reduce`), as FleetPPO averages its minibatches, so every rank applies
the same averaged gradients to the same parameters and the ranks stay identical.

One gradient step computes all three losses from the parameters as they were at its start (the actor's loss uses
the critics before their step, the temperature's loss the actor's log-probabilities before its step), so that the
three gradients can travel in one buffer; the steps of classic SAC update the critics first. With a policy delay
of k, only every k-th step computes and applies the actor's and the temperature's; the others step the critics
alone. The n-step target ignores the entropy bonus of its intermediate steps (only the bootstrapped value carries
one), as n-step SAC implementations commonly do.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from mjfleet.errors import first_line
from mjfleet.rl.normalizer import update_normalizer
from mjfleet.rl.reduce import Reducer
from mjfleet.rl.sac.config import SACConfig
from mjfleet.rl.sac.networks import SquashedGaussianActor, TargetCritic, TwinCritic
from mjfleet.rl.sac.replay import Batch, ReplayBuffer

log = logging.getLogger(__name__)

ALGORITHM = "sac"
"""What a SAC checkpoint says it is (`state["algorithm"]`): `play` and `--resume` read it."""


class FleetSAC:
    """SAC's state and steps: networks, target critics, temperature, one fused Adam, the replay buffer."""

    name = ALGORITHM

    def __init__(
        self,
        actor: SquashedGaussianActor,
        critic: TwinCritic,
        buffer: ReplayBuffer,
        settings: SACConfig,
        device: str,
        critic_group: str = "critic",
        reducer: Reducer | None = None,
    ) -> None:
        self.actor, self.critic, self.buffer, self.cfg = actor, critic, buffer, settings
        self.device = device
        self.critic_group = critic_group
        self.target = TargetCritic(critic)
        action_dim = actor.action_dim
        self.log_alpha = torch.nn.Parameter(torch.tensor([float(settings.init_alpha)], device=device).log())
        self.target_entropy = settings.target_entropy_per_action * action_dim
        # Every trained parameter's .grad is a view of one flat buffer: critics, actor, log-temperature. The
        # reducer averages it in one collective per gradient step.
        self.groups = {
            "critic": [p for p in critic.parameters() if p.requires_grad],
            "actor": [p for p in actor.parameters() if p.requires_grad],
            "alpha": [self.log_alpha],
        }
        sizes = {name: sum(p.numel() for p in params) for name, params in self.groups.items()}
        self.flat_grad = torch.zeros(sum(sizes.values()), device=device)
        slices, start = {}, 0
        for name, params in self.groups.items():
            slices[name] = self.flat_grad[start : start + sizes[name]]
            start += sizes[name]
            for p, g in zip(params, slices[name].split([p.numel() for p in params]), strict=True):
                p.grad = g.view_as(p)
        self._network_grads = slices
        learning_rates = {
            "critic": settings.critic_learning_rate,
            "actor": settings.actor_learning_rate,
            "alpha": settings.alpha_learning_rate,
        }
        if not settings.auto_alpha:
            learning_rates["alpha"] = 0.0
        # AdamW with weight_decay 0 is Adam; the temperature is never decayed.
        self._group_settings = [
            {"lr": learning_rates[name], "weight_decay": settings.weight_decay if name != "alpha" else 0.0}
            for name in self.groups
        ]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": params, **group}
                for params, group in zip(self.groups.values(), self._group_settings, strict=True)
            ],
            fused=True,
        )
        self.reducer = reducer
        """Averages gradients (and sums statistics) across workers; None: one worker."""
        self.env_steps = 0
        """Vectorised steps collected by this process (the warm-up counts them; a resumed run starts at 0)."""
        self.resumed = False
        """Restored from a checkpoint (`load`): the warm-up then acts with the trained policy, not at random."""
        self._rows_since_update = 0
        self._last_obs = None
        self._last_actions: torch.Tensor | None = None
        self._noise: torch.Tensor | None = None
        self._action_std = torch.zeros(action_dim, device=device)
        self._mean_q = 0.0
        self._gradient_steps = 0
        self._steps_taken = 0
        """Gradient steps this process has taken: every `policy_delay`-th one updates the actor too."""
        self.capture = settings.capture_update and torch.device(device).type == "cuda"
        """Replay each gradient step's gradients as a recorded CUDA graph (`mjfleet.rl.sac.cuda_graph`)."""
        self.graphs: dict[bool, Any] = {}
        """The recorded steps, by whether they update the actor (`policy_delay` > 1 records both kinds)."""

    # ----------------------------------------------------------- runner API
    @property
    def learning_rate(self) -> float:
        """The actor's learning rate (what the runner's record shows as `learning_rate`)."""
        return self.cfg.actor_learning_rate

    @property
    def action_std(self) -> torch.Tensor:
        """The pre-squash standard deviation of the policy at the last gradient step, per action dimension."""
        return self._action_std

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    @property
    def mini_batch_size(self) -> int:
        return self.cfg.batch_size

    @property
    def num_trained_parameters(self) -> int:
        return self.flat_grad.numel()

    @property
    def in_warmup(self) -> bool:
        return self.env_steps < self.cfg.random_steps

    def consistency_extras(self):
        """Beyond actor and critics, what must stay identical across ranks: the targets and the temperature."""
        yield from self.target.parameters()
        yield self.log_alpha

    def get_policy(self) -> SquashedGaussianActor:
        return self.actor

    def train_mode(self) -> None:
        for module in (self.actor, self.critic, self.target):
            module.train()

    def eval_mode(self) -> None:
        for module in (self.actor, self.critic, self.target):
            module.eval()

    def describe(self) -> str:
        """The start-up line: what averages, how often, and the warm-up."""
        parts = [
            f"SAC: {self.cfg.updates_per_step:g} gradient step{'' if self.cfg.updates_per_step == 1 else 's'} "
            f"per env step, batch {self.cfg.batch_size}"
        ]
        if self.cfg.policy_delay > 1:
            parts.append(f"the actor and temperature step every {self.cfg.policy_delay} of them")
        if self.capture:
            parts.append("each step's gradients a replayed CUDA graph")
        if self.reducer is None:
            parts.append("one worker, nothing averaged")
        else:
            parts.append(f"gradients averaged after every gradient step by {self.reducer.name}")
        buffer = self.buffer
        parts.append(
            f"replay buffer {buffer.length * buffer.num_envs:,} transitions per worker "
            f"({buffer.nbytes / 2**30:.2g} GiB on {buffer.obs.device.type})"
        )
        return "; ".join(parts)

    def record_entries(self) -> dict[str, Any]:
        """Entries of the iteration's record beside the losses."""
        return {
            "Policy/alpha": float(self.alpha),
            "Policy/mean_q": self._mean_q,
            "Replay/transitions": self.buffer.num_transitions,
            "Perf/gradient_steps": self._gradient_steps,
        }

    def act(self, obs) -> torch.Tensor:
        """A sampled action (uniformly random during a fresh run's warm-up); remembered for `process_env_step`."""
        if self.in_warmup and not self.resumed:
            actions = self.actor.random_actions(obs.batch_size[0])
        else:
            noise = self._exploration_noise(obs.batch_size[0])
            actions = self.actor.sample(obs[self.actor.obs_group], noise)[0]
        self._last_obs, self._last_actions = obs, actions
        return actions

    def _exploration_noise(self, num_envs: int) -> torch.Tensor | None:
        """The standard-normal draw the acting policy scales by its std: a new one every step, or with
        `noise_repeat` > 1 one per environment held for that many steps (None: `sample` draws)."""
        repeat = self.cfg.noise_repeat
        if repeat <= 1:
            return None
        if self._noise is None or self.env_steps % repeat == 0:
            self._noise = torch.randn(num_envs, self.actor.action_dim, device=self.device)
        return self._noise

    def process_env_step(self, obs, rewards, dones, extras) -> None:
        """Store the step's transitions; a finished environment's next observation is its pre-reset one."""
        final = extras.get("final_observations")
        if final is None:
            raise RuntimeError(
                "SAC needs the observation before an environment's reset (extras['final_observations']); "
                "set env.record_final_observations = True (MujocoVecEnv supports it)"
            )
        done = dones.bool()
        time_outs = extras.get("time_outs")
        terminated = done & ~time_outs.bool() if time_outs is not None else done
        mask = done.unsqueeze(1)
        actor_group, critic_group = self.actor.obs_group, self.critic_group
        prev = self._last_obs
        self.buffer.add(
            prev[actor_group],
            prev[critic_group],
            self._last_actions,
            rewards,
            torch.where(mask, final[actor_group], obs[actor_group]),
            torch.where(mask, final[critic_group], obs[critic_group]),
            terminated,
            done,
        )
        self.env_steps += 1
        self._rows_since_update += 1

    def compute_returns(self, obs) -> None:
        """Nothing to do at the end of a rollout: n-step targets are computed when a batch is sampled."""

    def sum_across_workers(self, values: torch.Tensor) -> None:
        """Sum `values` over all workers in place (episode statistics, the stop signal), through the reducer."""
        if self.reducer is not None:
            self.reducer.sum(values)

    # ------------------------------------------------------------------ update
    def update(self) -> dict[str, float]:
        """The normalisers learn the new data; then round(new steps x updates_per_step) gradient steps (none
        during the warm-up). Returns the mean losses, read once."""
        new_rows = self._rows_since_update
        self._rows_since_update = 0
        self.update_normalization(new_rows)
        num_updates = 0 if self.in_warmup else round(new_rows * self.cfg.updates_per_step)
        self._gradient_steps = num_updates
        sums = torch.zeros(5, device=self.device)  # critic, actor, alpha losses, entropy, mean Q
        actor_steps = 0
        for _ in range(num_updates):
            update_actor = self._steps_taken % self.cfg.policy_delay == 0
            self._steps_taken += 1
            actor_steps += update_actor
            batch = self.buffer.sample(self.cfg.batch_size, self.cfg.n_step, self.cfg.gamma)
            sums += self.gradient_step(batch, self.draw_noise(self.cfg.batch_size), update_actor)
        counts = torch.tensor([max(num_updates, 1)] + [max(actor_steps, 1)] * 4, device=self.device)
        critic, actor, alpha, entropy, self._mean_q = (sums / counts).tolist()
        return {"critic": critic, "actor": actor, "alpha": alpha, "entropy": entropy}

    def update_normalization(self, new_rows: int) -> None:
        """The actor's and critics' normalisers learn the observations of the last `new_rows` steps."""
        if new_rows == 0:
            return
        buffer = self.buffer
        rows = (buffer.position - 1 - torch.arange(min(new_rows, buffer.size))) % buffer.length
        rows = rows.to(buffer.obs.device)
        sync = self.reducer.sum if self.reducer is not None else None
        if self.actor.obs_normalization:
            update_normalizer(self.actor.obs_normalizer, buffer.obs[rows].flatten(0, 1), sync)
        if self.critic.obs_normalization:
            update_normalizer(self.critic.obs_normalizer, buffer.critic_obs[rows].flatten(0, 1), sync)

    def draw_noise(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's standard-normal draws for a step's next and current observations. Drawn before the
        gradients on both paths, so a recorded step consumes the random stream as a plain one does."""
        return tuple(torch.randn(2, batch_size, self.actor.action_dim, device=self.device).unbind(0))

    def gradient_step(
        self, batch: Batch, noise: tuple[torch.Tensor, torch.Tensor], update_actor: bool = True
    ) -> torch.Tensor:
        """One averaged step of the critics and, with `update_actor`, the actor and the temperature; returns the
        detached losses (the actor's terms 0 without it)."""
        terms = self.gradients(batch, noise, update_actor)
        self.apply_gradients(update_actor)
        return terms

    def gradients(
        self, batch: Batch, noise: tuple[torch.Tensor, torch.Tensor], update_actor: bool = True
    ) -> torch.Tensor:
        """`compute_gradients`, replayed from a recorded CUDA graph where `capture` is on; a failed recording
        warns once and goes on op by op (compute_gradients zeroes the gradients first, so nothing half-written
        survives)."""
        if self.capture:
            try:
                graph = self.graphs.get(update_actor)
                if graph is None or graph.batch.obs.shape != batch.obs.shape:
                    from mjfleet.rl.sac.cuda_graph import GraphedGradients

                    self.graphs.pop(update_actor, None)
                    graph = self.graphs[update_actor] = GraphedGradients(
                        batch, noise, lambda b, n: self.compute_gradients(b, n, update_actor)
                    )
                return graph.run(batch, noise)
            except Exception as exc:  # an optimisation: go on op by op, loudly, once
                torch.cuda.synchronize(self.device)
                self.capture, self.graphs = False, {}
                log.warning("the SAC gradient step could not be recorded as a CUDA graph (%s); op by op",
                            first_line(exc))  # fmt: skip
        return self.compute_gradients(batch, noise, update_actor)

    def compute_gradients(
        self, batch: Batch, noise: tuple[torch.Tensor, torch.Tensor] | None = None, update_actor: bool = True
    ) -> torch.Tensor:
        """The losses on `batch`, back-propagated into `flat_grad` (this worker's gradients only): the critics',
        and with `update_actor` the actor's and the temperature's (else their gradients and terms are 0).
        `noise`: the policy's standard-normal draws for the next and the current observations (tests replaying an
        update); None draws them."""
        actor, critic = self.actor, self.critic
        alpha = self.alpha
        next_noise, noise_now = noise if noise is not None else (None, None)
        with torch.no_grad():
            next_actions, next_log_prob, _ = actor.sample(batch.next_obs, next_noise)
            next_value = self.target(batch.next_critic_obs, next_actions, critic) - alpha * next_log_prob
            target_q = batch.returns + batch.bootstrap * next_value
        q1, q2 = critic(batch.critic_obs, batch.actions)
        critic_loss = (q1 - target_q).square().mean() + (q2 - target_q).square().mean()
        if not update_actor:
            self.flat_grad.zero_()
            critic_loss.backward()
            return torch.cat((critic_loss.detach().view(1), critic_loss.new_zeros(4)))

        actions, log_prob, std = actor.sample(batch.obs, noise_now)
        # The actor's gradient must not reach the critics: they are frozen for this part of the graph.
        critic.requires_grad_(False)
        q_new = torch.minimum(*critic(batch.critic_obs, actions))
        critic.requires_grad_(True)
        actor_loss = (alpha * log_prob - q_new).mean()
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()

        self.flat_grad.zero_()
        (critic_loss + actor_loss + alpha_loss).backward()
        self._action_std = std.detach().mean(dim=0)
        return torch.stack(
            (critic_loss.detach(), actor_loss.detach(), alpha_loss.detach(), -log_prob.detach().mean(),
             q_new.detach().mean())
        )  # fmt: skip

    def apply_gradients(self, update_actor: bool = True) -> None:
        """Average across workers, clip each network if asked, step (the critics alone without `update_actor`),
        move the targets."""
        if self.reducer is not None:
            self.reducer.average(self.flat_grad)
        if self.cfg.max_grad_norm > 0:
            for name in ("critic", "actor") if update_actor else ("critic",):
                grads = self._network_grads[name]
                scale = (self.cfg.max_grad_norm / (torch.linalg.vector_norm(grads) + 1e-6)).clamp(max=1.0)
                grads.mul_(scale)
        if update_actor:
            self.optimizer.step()
        else:
            self._step_critics_only()
        self.target.update_from(self.cfg.tau)

    def _step_critics_only(self) -> None:
        """One optimizer step of the critics. Adam skips parameters without a gradient, so the actor's and the
        temperature's gradient views are taken away for the step (their weights, moments and decay stay as they
        are) and given back after it."""
        hidden = self.groups["actor"] + self.groups["alpha"]
        views = [p.grad for p in hidden]
        for p in hidden:
            p.grad = None
        try:
            self.optimizer.step()
        finally:
            for p, view in zip(hidden, views, strict=True):
                p.grad = view

    # ------------------------------------------------------------ bookkeeping
    def broadcast_parameters(self) -> None:
        """Every rank starts from rank 0's networks, targets, temperature and normaliser statistics."""
        if self.reducer is None:
            return
        for module in (self.actor, self.critic, self.target):
            for tensor in module.state_dict().values():
                self.reducer.broadcast(tensor)
        self.reducer.broadcast(self.log_alpha.data)

    def save(self) -> dict[str, Any]:
        """The trained state (not the replay buffer: too large, and refilled quickly by many environments)."""
        return {
            "algorithm": ALGORITHM,
            "actor_state_dict": self.actor.state_dict(),
            "critic_state_dict": self.critic.state_dict(),
            "target_state_dict": self.target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "optimizer_state_dict": self.optimizer.state_dict(),
        }

    def load(self, loaded: dict[str, Any], load_cfg: Any = None, strict: bool = True) -> bool:
        """Restore what `save` wrote; a checkpoint of another algorithm is a ValueError. Returns True (the
        iteration counts are restored too, as rsl_rl's `load` signals)."""
        algorithm = loaded.get("algorithm", "ppo")
        if algorithm != ALGORITHM:
            raise ValueError(
                f"it was trained with {algorithm}, not {ALGORITHM} (pass --algorithm {algorithm})"
            )
        self.actor.load_state_dict(loaded["actor_state_dict"], strict=strict)
        self.critic.load_state_dict(loaded["critic_state_dict"], strict=strict)
        self.target.load_state_dict(loaded["target_state_dict"], strict=strict)
        with torch.no_grad():
            self.log_alpha.copy_(loaded["log_alpha"])
        self.optimizer.load_state_dict(loaded["optimizer_state_dict"])
        # The moments are the checkpoint's; learning rates and decay are this run's settings (its flags win).
        for group, settings in zip(self.optimizer.param_groups, self._group_settings, strict=True):
            group.update(settings)
        self.resumed = True
        return True
