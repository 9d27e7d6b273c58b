"""FleetSAC: Soft Actor-Critic that trains as one of a fleet of workers (an `mjfleet.rl.algorithm.Algorithm`).

Each worker collects into its own replay buffer (`mjfleet.rl.sac.replay`) and samples its own batches; after every
gradient step the critics', the actor's and the temperature's gradients are averaged across workers in ONE
collective by the averaged-gradient step (`mjfleet.rl.gradients`) PPO's minibatches go through too, so every rank
applies the same averaged gradients to the same parameters and the ranks stay identical.

One gradient step computes all three losses from the parameters as they were at its start (the actor's loss uses
the critics before their step, the temperature's loss the actor's log-probabilities before its step), so that the
three gradients can travel in one buffer; the steps of classic SAC update the critics first. With a policy delay
of k, only every k-th step computes and applies the actor's and the temperature's; the others step the critics
alone. The n-step target ignores the entropy bonus of its intermediate steps (only the bootstrapped value carries
one), as n-step SAC implementations commonly do.
"""

from __future__ import annotations

from typing import Any

import torch

from mjfleet.rl.gradients import AveragedGradients, RecordedGradients
from mjfleet.rl.sac.config import SACConfig
from mjfleet.rl.sac.networks import SquashedGaussianActor, TargetCritic, TwinCritic
from mjfleet.rl.sac.replay import Batch, ReplayBuffer

ALGORITHM = "sac"


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
    ) -> None:
        self.actor, self.critic, self.buffer, self.cfg = actor, critic, buffer, settings
        self.device = device
        self.critic_group = critic_group
        self.target = TargetCritic(critic)
        action_dim = actor.action_dim
        self.log_alpha = torch.nn.Parameter(torch.tensor([float(settings.init_alpha)], device=device).log())
        self.target_entropy = settings.target_entropy_per_action * action_dim
        learning_rates = {
            "critic": settings.critic_learning_rate,
            "actor": settings.actor_learning_rate,
            "alpha": settings.alpha_learning_rate if settings.auto_alpha else 0.0,
        }
        networks = {"critic": critic.parameters(), "actor": actor.parameters(), "alpha": [self.log_alpha]}
        # AdamW with weight_decay 0 is Adam; the temperature is never decayed.
        self._group_settings = [
            {"lr": learning_rates[name], "weight_decay": settings.weight_decay if name != "alpha" else 0.0}
            for name in networks
        ]
        groups = [
            {"params": [q for q in p if q.requires_grad], **g}
            for p, g in zip(networks.values(), self._group_settings, strict=True)
        ]
        # Critics, actor and log-temperature in one flat buffer: one collective per gradient step.
        self.gradients = AveragedGradients(
            {name: group["params"] for name, group in zip(networks, groups, strict=True)},
            torch.optim.AdamW(groups, fused=True),
        )
        self.optimizer = self.gradients.optimizer
        self.env_steps = 0
        """Vectorised steps collected by this process (the warm-up counts them; a resumed run starts at 0)."""
        self.resumed = False
        """Restored from a checkpoint (`load_state_dict`): the warm-up then acts with the trained policy, not at random."""
        self._rows_since_update = 0
        self._last_obs = None
        self._last_actions: torch.Tensor | None = None
        self._noise: torch.Tensor | None = None
        self._action_std = torch.zeros(action_dim, device=device)
        self._mean_q = 0.0
        self._gradient_steps = 0
        self._steps_taken = 0
        """Gradient steps this process has taken: every `policy_delay`-th one updates the actor too."""
        self.recorded: RecordedGradients = RecordedGradients(
            "SAC gradient step", device, settings.capture_update, keep=2
        )
        """Each gradient step's gradients replayed from a recorded CUDA graph (`mjfleet.rl.sac.cuda_graph`), one
        graph by whether the step updates the actor (`policy_delay` > 1 records both kinds)."""

    # ----------------------------------------------------------- runner API
    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    @property
    def mini_batch_size(self) -> int:
        return self.cfg.batch_size

    @property
    def in_warmup(self) -> bool:
        return self.env_steps < self.cfg.random_steps

    def consistency_tensors(self):
        """What must stay identical across ranks: actor, critics, their targets and the temperature."""
        for module in (self.actor, self.critic, self.target):
            yield from module.parameters()
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
        if self.recorded.enabled:
            parts.append("each step's gradients a replayed CUDA graph")
        parts += self.gradients.describe("gradient step")
        buffer = self.buffer
        parts.append(
            f"replay buffer {buffer.length * buffer.num_envs:,} transitions per worker "
            f"({buffer.nbytes / 2**30:.2g} GiB on {buffer.obs.device.type})"
        )
        return "; ".join(parts)

    def record(self) -> dict[str, Any]:
        """The iteration's record beside the losses: the actor's learning rate and the temperature among them."""
        return {
            "learning_rate": self.cfg.actor_learning_rate,
            "Policy/action_std": float(self._action_std.mean()),
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

    # ------------------------------------------------------------------ update
    def update(self, obs=None) -> dict[str, float]:
        """The iteration's update: the normalisers learn the new data, then round(new steps x updates_per_step)
        gradient steps on samples of the buffer (none during the warm-up; n-step targets are computed as batches
        are sampled, so the rollout's last observation `obs` is not needed). Returns the mean losses, read once."""
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
        if self.actor.obs_normalization:
            self.gradients.update_normalizer(self.actor.obs_normalizer, buffer.obs[rows].flatten(0, 1))
        if self.critic.obs_normalization:
            self.gradients.update_normalizer(
                self.critic.obs_normalizer, buffer.critic_obs[rows].flatten(0, 1)
            )

    def draw_noise(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's standard-normal draws for a step's next and current observations. Drawn before the
        gradients on both paths, so a recorded step consumes the random stream as a plain one does."""
        return tuple(torch.randn(2, batch_size, self.actor.action_dim, device=self.device).unbind(0))

    def gradient_step(
        self, batch: Batch, noise: tuple[torch.Tensor, torch.Tensor], update_actor: bool = True
    ) -> torch.Tensor:
        """One averaged step of the critics and, with `update_actor`, the actor and the temperature; returns the
        detached losses (the actor's terms 0 without it)."""
        terms = self.step_gradients(batch, noise, update_actor)
        self.apply_gradients(update_actor)
        return terms

    def step_gradients(
        self, batch: Batch, noise: tuple[torch.Tensor, torch.Tensor], update_actor: bool = True
    ) -> torch.Tensor:
        """`compute_gradients`, replayed from a recorded CUDA graph where recording is on (`recorded`)."""

        def build():
            from mjfleet.rl.sac.cuda_graph import GraphedGradients

            return GraphedGradients(batch, noise, lambda b, n: self.compute_gradients(b, n, update_actor))

        return self.recorded(
            (update_actor, tuple(batch.obs.shape)),
            build,
            lambda graph: graph.run(batch, noise),
            lambda: self.compute_gradients(batch, noise, update_actor),
        )

    def compute_gradients(
        self, batch: Batch, noise: tuple[torch.Tensor, torch.Tensor] | None = None, update_actor: bool = True
    ) -> torch.Tensor:
        """The losses on `batch`, back-propagated into the flat gradient buffer (this worker's gradients only): the critics',
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
            self.gradients.zero_()
            critic_loss.backward()
            return torch.cat((critic_loss.detach().view(1), critic_loss.new_zeros(4)))

        actions, log_prob, std = actor.sample(batch.obs, noise_now)
        # The actor's gradient must not reach the critics: they are frozen for this part of the graph.
        critic.requires_grad_(False)
        q_new = torch.minimum(*critic(batch.critic_obs, actions))
        critic.requires_grad_(True)
        actor_loss = (alpha * log_prob - q_new).mean()
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()

        self.gradients.zero_()
        (critic_loss + actor_loss + alpha_loss).backward()
        self._action_std = std.detach().mean(dim=0)
        return torch.stack(
            (critic_loss.detach(), actor_loss.detach(), alpha_loss.detach(), -log_prob.detach().mean(),
             q_new.detach().mean())
        )  # fmt: skip

    def apply_gradients(self, update_actor: bool = True) -> None:
        """Average across workers, clip each network if asked, step (the critics alone without `update_actor`),
        move the targets."""
        grads = self.gradients
        grads.average()
        networks = ("critic", "actor") if update_actor else ("critic",)
        if self.cfg.max_grad_norm > 0:
            grads.clip(self.cfg.max_grad_norm, networks)
        grads.step(None if update_actor else networks)
        self.target.update_from(self.cfg.tau)

    # ------------------------------------------------------------ bookkeeping
    def broadcast_parameters(self) -> None:
        """Every rank starts from rank 0's networks, targets, temperature and normaliser statistics."""
        self.gradients.broadcast(self.actor, self.critic, self.target, self.log_alpha.data)

    def state_dict(self) -> dict[str, Any]:
        """The trained state (not the replay buffer: too large, and refilled quickly by many environments)."""
        return {
            "actor_state_dict": self.actor.state_dict(),
            "critic_state_dict": self.critic.state_dict(),
            "target_state_dict": self.target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "optimizer_state_dict": self.optimizer.state_dict(),
        }

    def load_state_dict(self, loaded: dict[str, Any], strict: bool = True) -> None:
        """Restore what `state_dict` wrote; acting then starts with this policy, not at random."""
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
