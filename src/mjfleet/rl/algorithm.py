"""The contract between the runner and a learning algorithm, and the algorithms mjfleet knows by name.

The runner (`mjfleet.rl.runner`), checkpoints (`mjfleet.rl.saved_state`), the ranks' consistency check
(`mjfleet.fleet.agreement`), `bench` and `play` use an algorithm only through `Algorithm`; none of them imports an
algorithm's class. An iteration is: `act` and `process_env_step` once per environment step, then `update` with the
observation after the rollout's last step. What differs between on-policy and off-policy learning lives inside
`update`: PPO computes its returns and runs its epochs over the rollout; SAC takes its gradient steps on samples
of its replay buffer.

A new algorithm is one module implementing `Algorithm` (its losses; the averaged step is `AveragedGradients`), a
settings dataclass on `AgentConfig`, and an entry in `ALGORITHMS` (docs/architecture.md shows one).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from mjfleet.errors import UsageError

if TYPE_CHECKING:
    from tensordict import TensorDict

    from mjfleet.fleet.context import WorkerContext
    from mjfleet.rl.config import AgentConfig
    from mjfleet.rl.gradients import AveragedGradients


class Algorithm(Protocol):
    """What the runner, checkpoints, the consistency check, `bench` and `play` need from a learning algorithm."""

    name: str
    """Its name in `ALGORITHMS`, written into every checkpoint (loading one of another algorithm is refused)."""
    gradients: AveragedGradients
    """Its averaged-gradient step. Every exchange between workers goes through its reducer: the runner's episode
    statistics and stop signal, the consistency check and checkpoints' random states too."""

    # --------------------------------------------------------------- acting
    def act(self, obs: TensorDict) -> torch.Tensor:
        """Actions for a training step (exploring), remembered for `process_env_step`."""
        ...

    def process_env_step(
        self, obs: TensorDict, rewards: torch.Tensor, dones: torch.Tensor, extras: dict
    ) -> None:
        """Store the transition the last `act` began (`obs`: the observation after the step)."""
        ...

    # ------------------------------------------------------------- learning
    def update(self, obs: TensorDict) -> dict[str, float]:
        """An iteration's update after its rollout (`obs`: the observation after the rollout's last step);
        returns the mean losses, read from the device once."""
        ...

    def record(self) -> dict[str, Any]:
        """The iteration's record entries beside the losses: at least `learning_rate` and `Policy/action_std`."""
        ...

    @property
    def mini_batch_size(self) -> int:
        """Rows per gradient computation (the CPU update's thread count is chosen by it)."""
        ...

    def describe(self) -> str:
        """The start-up line: what the update does and how it averages across workers."""
        ...

    # -------------------------------------------------------------- workers
    def broadcast_parameters(self) -> None:
        """Every rank takes rank 0's trained state (collective; the start of training)."""
        ...

    def consistency_tensors(self) -> Iterable[torch.Tensor]:
        """What must stay identical on every rank, in a fixed order (the consistency check compares it)."""
        ...

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Plain tensors and numbers for a checkpoint (`torch.load(weights_only=True)` reads them)."""
        ...

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Restore what `state_dict` wrote."""
        ...

    # --------------------------------------------------------------- policy
    def get_policy(self) -> torch.nn.Module:
        """The actor: called on observations in eval mode it returns the deterministic action (evaluation,
        export). The same module `ALGORITHMS[name].actor_from_checkpoint` rebuilds for `play`."""
        ...

    def train_mode(self) -> None: ...

    def eval_mode(self) -> None: ...


@dataclass(frozen=True)
class AlgorithmEntry:
    """Where an algorithm's pieces are, as "module:function", imported on first use."""

    build: str
    """(observations, env, agent settings, worker context) -> the `Algorithm`, its reducer connected."""
    actor_from_checkpoint: str
    """(checkpoint state, observations, number of actions, device) -> its actor in eval mode (`play`, export)."""
    starts_from: tuple[tuple[str, str], ...] = ()
    """(algorithm, "module:function") pairs: checkpoints of that algorithm this one can continue from, and the
    function (this algorithm, checkpoint state) that takes over their actor (PPO fine-tuning a distilled
    student). Everything else of such a checkpoint (its losses, its optimiser) stays behind."""


ALGORITHMS: dict[str, AlgorithmEntry] = {
    "ppo": AlgorithmEntry(
        "mjfleet.rl.build:build_ppo",
        "mjfleet.rl.build:ppo_actor_from_checkpoint",
        starts_from=(("distillation", "mjfleet.rl.build:ppo_from_student"),),
    ),
    "sac": AlgorithmEntry(
        "mjfleet.rl.sac.build:build_sac", "mjfleet.rl.sac.networks:build_actor_from_checkpoint"
    ),
    "distillation": AlgorithmEntry(
        "mjfleet.rl.distillation:build_distillation", "mjfleet.rl.build:ppo_actor_from_checkpoint"
    ),
}
"""`--algorithm` names: what `AgentConfig.algorithm_name` may be and checkpoints say they are."""


def _resolve(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def build_algorithm(obs: TensorDict, env, agent: AgentConfig, ctx: WorkerContext) -> Algorithm:
    """The algorithm `agent.algorithm_name` names, for `env` on `ctx.device`, averaging across `ctx`'s workers."""
    return _resolve(ALGORITHMS[agent.algorithm_name].build)(obs, env, agent, ctx)


def trained_with(state: dict[str, Any]) -> str:
    """The algorithm a checkpoint was trained with (those written before the name was recorded are PPO's)."""
    return str(state.get("algorithm", "ppo"))


def check_trained_with(state: dict[str, Any], name: str, source: object = "the checkpoint") -> None:
    """UsageError (one line) when `name` can neither continue the checkpoint `state` (trained by `name`) nor
    start from it (`AlgorithmEntry.starts_from`)."""
    algorithm = trained_with(state)
    if algorithm != name and algorithm not in dict(ALGORITHMS[name].starts_from):
        raise UsageError(
            f"{source} was trained with {algorithm}, not {name}: pass --algorithm {algorithm}, or start a new run"
        )


def load_checkpoint_state(
    alg: Algorithm, state: dict[str, Any], strict: bool = True, source: object = "the checkpoint"
) -> None:
    """Restore `alg` from a checkpoint of its own algorithm, or take over the actor of one it starts from; any
    other is a UsageError naming `source`."""
    algorithm = trained_with(state)
    check_trained_with(state, alg.name, source)
    if algorithm == alg.name:
        alg.load_state_dict(state, strict)
    else:
        _resolve(dict(ALGORITHMS[alg.name].starts_from)[algorithm])(alg, state)


def actor_from_checkpoint(state: dict[str, Any], obs: TensorDict, num_actions: int, device="cpu"):
    """The actor a checkpoint holds, rebuilt by the algorithm that trained it, in eval mode on `device`."""
    algorithm = trained_with(state)
    if algorithm not in ALGORITHMS:
        raise UsageError(f"the checkpoint names algorithm {algorithm!r}, which this mjfleet does not know")
    return _resolve(ALGORITHMS[algorithm].actor_from_checkpoint)(state, obs, num_actions, device)
