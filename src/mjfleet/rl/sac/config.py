"""Typed SAC settings that tyro turns into `--agent.sac.*` flags (a light module: no torch).

The recipe is the massively parallel one (FastTD3 / FastSAC, Seo et al. 2025): many environments feed one replay
buffer per worker held on the worker's device, large batches, several gradient steps per environment step, twin
critics with Polyak-averaged targets, an automatic entropy temperature, n-step returns that bootstrap through
time-outs but not through terminations, observation normalisation and a random-action warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass
class SACConfig:
    """Soft Actor-Critic hyper-parameters (mjfleet.rl.sac)."""

    updates_per_step: float = 1.0
    """Gradient steps (critic + actor + temperature) per environment step of the vectorised environment. Each
    iteration collects `num_steps_per_env` steps, then runs round(num_steps_per_env x updates_per_step) gradient
    steps: the update-to-data ratio, the main knob trading wall clock for sample efficiency."""
    batch_size: int = 4096
    """Transitions per gradient step and worker (the averaged gradient sees world_size x batch_size). Large
    batches are what let thousands of parallel environments pay off."""
    buffer_size: int = 1_000_000
    """Transitions kept per worker (rounded down to a multiple of num_envs), on the worker's device. The buffer
    is not checkpointed: a resumed run warms up again."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 3
    """Rewards summed before bootstrapping from the target critics. >1 propagates reward faster from large
    batches of short-horizon data; the small off-policy bias is accepted, as FastTD3 does."""
    tau: float = 0.05
    """Polyak rate of the target critics (target <- (1 - tau) target + tau critic) per gradient step. Larger
    than the classic 0.005 because many gradient steps run per unit of new data."""
    policy_delay: int = 1
    """The actor and the temperature step once every this many gradient steps, the critics every step (TD3's
    delayed policy update: the actor follows a critic that has settled a little; FastTD3 uses 2, a tuned SAC for
    Isaac Lab's quadrupeds 8). The other steps skip the actor's loss entirely, so they cost less. 1: every step."""
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    alpha_learning_rate: float = 3e-4
    """Adam learning rates of the actor, the twin critics and the log-temperature."""
    init_alpha: float = 0.1
    """The entropy temperature at the start (and for ever with auto_alpha off)."""
    auto_alpha: bool = True
    """Tune the temperature so the policy's entropy tracks target_entropy (SAC's standard choice)."""
    target_entropy_per_action: float = -1.0
    """Target entropy = this x action dimensions (-1: the usual -action_dim)."""
    max_grad_norm: float = 0.0
    """Clip each network's gradient norm to this after averaging (0: no clipping)."""
    random_steps: int = 10
    """Environment steps (of every environment) with uniformly random actions before the policy acts and the
    first gradient step: the buffer starts with broad data instead of the untrained policy's. A resumed run (its
    buffer starts empty) warms up as long, but with the checkpoint's policy: random data would be all the
    restored critic and actor learnt from in their first gradient steps."""
    actor_hidden_dims: tuple[int, ...] = (256, 256)
    critic_hidden_dims: tuple[int, ...] = (256, 256)
    activation: str = "elu"
    """Hidden-layer activation of actor and critics (torch.nn name, lower case: elu, relu, tanh, silu)."""
    critic_layer_norm: bool = False
    """A LayerNorm after every hidden linear layer of the critics (before the activation). It bounds the critics'
    features, which many gradient steps on large batches and bootstrapped targets otherwise let drift (the critics
    of FastTD3 / FastSAC use it)."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW) of the actor's and critics' weights, per optimizer step; not the temperature.
    Keeps the weights small under a high update-to-data ratio (FastSAC uses 0.001). 0: plain Adam."""
    obs_normalization: bool = True
    """Normalise actor and critic inputs with running mean/std, learnt from every iteration's new observations
    and averaged across workers (rsl_rl's EmpiricalNormalization). The buffer keeps raw observations."""
    asymmetric_critic: bool = True
    """Critics read the task's `critic` observation group (privileged state where the task has one); off: the
    actor's group. The actor always reads `actor`, which is all a deployed policy sees."""
    action_bound: float = 0.0
    """Actions are squashed into [-action_bound, action_bound] (tanh of a Gaussian sample, scaled). 0: the
    environment's own bounds (`action_bounds()`: the joint limits around the default pose for locomotion tasks,
    else the clip range)."""
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    """Per-action bounds (one value per action, both given or neither); they win over action_bound. Bounds
    fitted to what a trained policy uses (e.g. the 2.5th and 97.5th percentiles of a PPO policy's actions,
    Raffin's recipe for SAC on massively parallel locomotion tasks) need not be symmetric about action 0."""
    noise_repeat: int = 1
    """Hold each environment's exploration noise for this many env steps (the policy's standard-normal draw,
    scaled by its current std): temporally consistent exploration, the simplest form of gSDE. 1: a new draw
    every step (classic SAC). Per-step noise on joint targets at 50 Hz mostly jitters in place."""
    capture_update: bool = True
    """On CUDA: record one gradient step's gradients (actor, twin critics and temperature, forward and backward) as
    a CUDA graph and replay it for every step; batches, noise, averaging and the optimizer step stay outside, so
    the steps are those of the plain path with far fewer kernel launches."""
    gradient_reducer: Literal["auto", "all-reduce", "all-gather", "shared-memory", "none"] = "auto"
    """Several workers: how gradients are averaged after every gradient step (mjfleet.fleet.reduce; as PPO's)."""
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    """The actor's log standard deviation is squashed into [min, max]: no collapse, no runaway exploration."""
    init_std: float | None = None
    """The actor's pre-squash standard deviation at the start, in every state (its output layer's log-std half
    initialised to it); None: what the network's random initialisation gives (about 0.22). A small one lets
    wide action bounds start near the default pose (RSL-RL-SAC's choice); the temperature then grows it."""

    def check(self, num_envs: int) -> None:
        """UsageError (one line) for settings no SAC run can use."""
        from mjfleet.errors import UsageError

        positive = {
            "batch-size": self.batch_size,
            "n-step": self.n_step,
            "buffer-size": self.buffer_size,
        }
        for name, value in positive.items():
            if value < 1:
                raise UsageError(f"--agent.sac.{name} must be >= 1, got {value}")
        if self.buffer_size < num_envs * (self.n_step + 1):
            raise UsageError(
                f"--agent.sac.buffer-size {self.buffer_size} holds fewer than n-step + 1 = {self.n_step + 1} "
                f"steps of {num_envs} environments"
            )
        if not 0.0 < self.tau <= 1.0 or not 0.0 < self.gamma <= 1.0:
            raise UsageError(
                f"--agent.sac.tau and --agent.sac.gamma must be in (0, 1], got {self.tau}, {self.gamma}"
            )
        std_range = math.exp(self.log_std_min), math.exp(self.log_std_max)
        if self.init_std is not None and not std_range[0] < self.init_std < std_range[1]:
            raise UsageError(
                f"--agent.sac.init-std must be between exp(log-std-min) and exp(log-std-max), got {self.init_std}"
            )
        if len(self.action_low) != len(self.action_high) or any(
            lo >= hi for lo, hi in zip(self.action_low, self.action_high, strict=False)
        ):
            raise UsageError(
                "--agent.sac.action-low and --agent.sac.action-high need one value per action each, low < high"
            )
        if self.policy_delay < 1:
            raise UsageError(f"--agent.sac.policy-delay must be >= 1, got {self.policy_delay}")
        if self.noise_repeat < 1:
            raise UsageError(f"--agent.sac.noise-repeat must be >= 1, got {self.noise_repeat}")
        if self.weight_decay < 0:
            raise UsageError(f"--agent.sac.weight-decay must be >= 0, got {self.weight_decay}")
        if self.updates_per_step < 0 or self.random_steps < 0 or self.init_alpha <= 0:
            raise UsageError(
                "--agent.sac.updates-per-step and --agent.sac.random-steps must be >= 0 and "
                "--agent.sac.init-alpha > 0"
            )
