"""Typed PPO / runner settings that tyro turns into flags; `check` validates them (the one place), and
`to_rsl_rl()` writes them as rsl_rl's config dict (kept in checkpoints, which play and export rebuild from)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from mjfleet.errors import UsageError
from mjfleet.rl.sac.config import SACConfig


@dataclass
class PolicyConfig:
    """An MLP actor or critic."""

    hidden_dims: tuple[int, ...] = (128, 128, 128)
    activation: str = "elu"
    obs_normalization: bool = False
    """Normalise inputs with running mean/std (statistics are averaged across workers)."""


@dataclass
class ActorConfig(PolicyConfig):
    """The stochastic policy: an MLP for the mean and a state-independent Gaussian standard deviation."""

    init_noise_std: float = 1.0
    noise_std_type: Literal["scalar", "log"] = "scalar"
    obs_groups: tuple[str, ...] = ("actor",)
    """The observation groups the actor reads (PPO): `actor` (the default), or `policy` for the deployable set a
    robot measures (locomotion tasks; docs/tasks.md lists each group's terms)."""
    rnn: Literal["none", "gru", "lstm"] = "none"
    """A recurrent actor (PPO): the observations pass a GRU or LSTM before the MLP, its hidden state reset per
    environment when an episode ends; trained by truncated backpropagation over each rollout (rsl_rl's RNNModel).
    none: a feed-forward MLP."""
    rnn_hidden_dim: int = 256
    rnn_num_layers: int = 1


@dataclass
class PPOConfig:
    """Proximal Policy Optimisation hyper-parameters (rsl_rl's PPO)."""

    optimizer: Literal["adam", "adamw", "sgd", "rmsprop"] = "adam"
    """rsl_rl's optimizer choice (torch's, default settings); Adam runs as torch's fused kernel."""
    learning_rate: float = 1e-3
    schedule: Literal["adaptive", "fixed"] = "adaptive"
    """adaptive: scale the learning rate to keep the policy KL divergence near desired_kl."""
    desired_kl: float = 0.01
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    clip_param: float = 0.2
    gamma: float = 0.99
    lam: float = 0.95
    value_loss_coef: float = 1.0
    entropy_coef: float = 0.005
    max_grad_norm: float = 1.0
    use_clipped_value_loss: bool = True
    normalize_advantage_per_mini_batch: bool = False
    """Normalise advantages within each minibatch instead of once over the whole rollout (rsl_rl's option)."""
    critic_warmup_iterations: int = 25
    """PPO fine-tuning a distilled student (whose critic starts fresh): the first this many iterations train only
    the critic (the actor, its noise and normaliser stay the student's; the learning rate does not adapt); then,
    with the adaptive schedule, the actor's steps start from its smallest learning rate, raised as the KL allows.
    0: neither (docs/runs.md says why both). Other runs: no effect."""
    gradient_reducer: Literal["auto", "all-reduce", "all-gather", "shared-memory", "none"] = "auto"
    """Several workers: how gradients are averaged after every minibatch (mjfleet.fleet.reduce). auto: all-reduce on
    GPUs, shared memory between CPU workers of one host, else all-gather (gloo, <= 4 workers) or all-reduce.
    none: no averaging, each worker trains its own policy from the same start (for experiments and tests that
    show what averaging does; statistics and the stop signal are still shared)."""
    grad_sync_period: int = 1
    """Several workers: each accumulates this many minibatches' gradients (their mean), then one averaged
    collective and one optimizer step (1: after every minibatch). For slow links between hosts: K times fewer
    collectives, at the cost of K times fewer optimizer steps per epoch. At most num_mini_batches; an epoch's
    last group may be shorter."""
    compile_update: bool = True
    """Feed-forward networks: run each minibatch's loss compiled by torch.compile (the same function, its
    operations fused; 1.00-1.16x the loss as written on 2 CPU cores, docs/benchmarks.md). The first process to
    compile a network's loss spends seconds on it (cached afterwards under /tmp/torchinductor_<user>); a compile
    that fails falls back to the loss as written. `--agent.ppo.no-compile-update` runs it as written."""
    tf32: bool = True
    """On CUDA: the update's float32 matrix products on TensorFloat-32 tensor cores (inputs rounded to a 10-bit
    mantissa, float32 sums), as mjlab's train does; `--agent.ppo.no-tf32` keeps IEEE float32. Rollouts
    and environments always use IEEE float32; no effect on a CPU."""


@dataclass
class DistillationConfig:
    """A student trained to act as a trained teacher acts (DAgger: the student drives, the teacher labels every
    step); the student's network is `AgentConfig.actor` (an MLP, or recurrent with `--agent.actor.rnn`)."""

    teacher: str = ""
    """The teacher: a checkpoint, or a run directory (its latest checkpoint), trained on this task with PPO or SAC
    (alias --teacher). Required for a new run; a resumed run keeps the teacher its checkpoint holds."""
    student_obs: tuple[str, ...] = ()
    """The observation groups the student reads (the teacher reads those it was trained on). Default: `policy`,
    the deployable set, where the environment has it (locomotion tasks), else `actor`."""
    num_learning_epochs: int = 1
    """Passes over each rollout per update."""
    gradient_length: int = 8
    """Environment steps whose losses make one averaged gradient step (truncated backpropagation through a
    recurrent student's time)."""
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    """Clip the student's gradient norm to this (0: no clipping)."""
    loss: Literal["mse", "huber"] = "mse"
    gradient_reducer: Literal["auto", "all-reduce", "all-gather", "shared-memory", "none"] = "auto"
    """Several workers: how the student's gradients are averaged (as --agent.ppo.gradient-reducer)."""

    def check(self) -> None:
        if self.num_learning_epochs < 1 or self.gradient_length < 1:
            raise UsageError("--agent.distillation.num-learning-epochs and gradient-length must be >= 1")


@dataclass
class AgentConfig:
    """Everything about learning: PPO or SAC, networks, rollout length, iterations, checkpoints, logging."""

    algorithm_name: Literal["ppo", "sac", "distillation"] = "ppo"
    """The learning algorithm: ppo (on-policy: `actor`, `critic`, `ppo`) or sac (off-policy, a replay
    buffer per worker: `sac`) or distillation (a student imitating a trained teacher: `distillation`).
    `train --algorithm sac` sets it. Each name is an entry of `mjfleet.rl.algorithm.ALGORITHMS`."""

    experiment_name: str = "default"
    """Runs are written to logs/<experiment_name>/<timestamp>[_<run_name>]/."""
    run_name: str = ""
    seed: int = 42
    """Base seed; worker k uses seed + k, k its global rank."""
    num_steps_per_env: int = 24
    """Rollout length per environment and iteration."""
    max_iterations: int = 300
    save_interval: int = 50
    """Save a checkpoint every this many iterations (and always at the end)."""
    consistency_check_interval: int = 50
    """Several workers: every this many iterations, check that all ranks hold identical policy parameters
    (0 disables)."""
    init_at_random_ep_len: bool = True
    """Start environments at random points of their first episode, so resets do not all happen at once."""
    logger: Literal["tensorboard", "wandb", "none"] = "tensorboard"
    """metrics.jsonl is always written; this picks the extra dashboard."""
    wandb_project: str = "mjfleet"
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO's settings (with --algorithm ppo); `--agent.algorithm.*`, their name before 2026-11-28, still works."""
    sac: SACConfig = field(default_factory=SACConfig)
    """SAC's settings (with --algorithm sac); a task sets its own defaults here, as it does PPO's."""
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    """Distillation's settings (with --algorithm distillation); the student's network is `actor`."""

    def check(self, num_envs: int) -> None:
        """UsageError (one line) for settings no run can use, `num_envs` environments per worker."""
        if self.max_iterations < 1:
            raise UsageError(f"--max-iterations must be >= 1, got {self.max_iterations}")
        if self.save_interval < 1:
            raise UsageError(f"--agent.save-interval must be >= 1, got {self.save_interval}")
        if self.num_steps_per_env < 1:
            raise UsageError(f"--agent.num-steps-per-env must be >= 1, got {self.num_steps_per_env}")
        check_directory_name("--agent.experiment-name", self.experiment_name)
        check_directory_name("--run-name", self.run_name, empty_ok=True)  # the alias users type
        if self.algorithm_name == "sac":
            self.sac.check(num_envs)
            return
        if self.algorithm_name == "distillation":
            self.distillation.check()
            return
        ppo = self.ppo
        if self.actor.rnn != "none" and not 1 <= ppo.num_mini_batches <= num_envs:
            raise UsageError(
                f"--agent.ppo.num-mini-batches must be in [1, num_envs = {num_envs}] with a recurrent actor "
                "(its minibatches are whole environments' trajectories)"
            )
        if self.actor.rnn_hidden_dim < 1 or self.actor.rnn_num_layers < 1:
            raise UsageError("--agent.actor.rnn-hidden-dim and --agent.actor.rnn-num-layers must be >= 1")
        batch = num_envs * self.num_steps_per_env
        if ppo.num_mini_batches < 1 or batch < ppo.num_mini_batches:
            raise UsageError(
                f"--agent.ppo.num-mini-batches must be in [1, num_envs x num_steps_per_env = {batch}]"
            )
        if ppo.critic_warmup_iterations < 0:
            raise UsageError("--agent.ppo.critic-warmup-iterations must be >= 0")
        if not 1 <= ppo.grad_sync_period <= ppo.num_mini_batches:
            raise UsageError(
                f"--agent.ppo.grad-sync-period must be in [1, num-mini-batches = {ppo.num_mini_batches}], "
                f"got {ppo.grad_sync_period}"
            )

    def actor_recurrence(self) -> dict:
        """rsl_rl RNNModel's arguments for a recurrent actor (none for an MLP)."""
        actor = self.actor
        if actor.rnn == "none":
            return {}
        return {
            "rnn_type": actor.rnn,
            "rnn_hidden_dim": actor.rnn_hidden_dim,
            "rnn_num_layers": actor.rnn_num_layers,
        }

    def to_rsl_rl(self) -> dict:
        """The nested dict rsl_rl's OnPolicyRunner expects."""
        algorithm = dataclasses.asdict(self.ppo)
        return {
            "num_steps_per_env": self.num_steps_per_env,
            "save_interval": self.save_interval,
            "seed": self.seed,
            "obs_groups": {"actor": list(self.actor.obs_groups), "critic": ["critic"]},
            "check_for_nan": False,  # environments reset diverged worlds themselves
            # rsl_rl's PPO with one collective per minibatch (mjfleet.rl.ppo); the same mathematics.
            "algorithm": {"class_name": "mjfleet.rl.ppo:FleetPPO", **algorithm},
            "actor": {
                "class_name": "MLPModel" if self.actor.rnn == "none" else "RNNModel",
                "hidden_dims": list(self.actor.hidden_dims),
                "activation": self.actor.activation,
                "obs_normalization": self.actor.obs_normalization,
                "distribution_cfg": {
                    "class_name": "mjfleet.rl.distribution:GaussianDistribution",
                    "init_std": self.actor.init_noise_std,
                    "std_type": self.actor.noise_std_type,
                },
                **self.actor_recurrence(),
            },
            "critic": {
                "class_name": "MLPModel",
                "hidden_dims": list(self.critic.hidden_dims),
                "activation": self.critic.activation,
                "obs_normalization": self.critic.obs_normalization,
            },
        }


def check_directory_name(flag: str, name: str, empty_ok: bool = False) -> None:
    """A name that becomes one directory of the run's path: no separators, not '.' or '..', not empty."""
    if (not name and not empty_ok) or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise UsageError(f"{flag} {name!r}: it names one directory (no '/', '\\', '.' or '..')")
