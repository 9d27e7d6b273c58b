"""What acts in `play`: a trained checkpoint's policy (found, read and rebuilt) or a zero/random baseline."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mjfleet.errors import UsageError, first_line


@dataclass(frozen=True)
class PolicySource:
    """Where the acting policy comes from, and where its evaluation's outputs go."""

    checkpoint: pathlib.Path | None
    """The checkpoint file; None for a baseline (zero or random actions)."""
    state: dict[str, Any] | None
    """The checkpoint's contents, read on the CPU."""
    out_dir: pathlib.Path
    """The checkpoint's run directory, or <logs-root>/<experiment>/baseline_<policy>/."""
    label: str
    """How the summary names the policy."""


def choose_policy(flags: Any, experiment_name: str, task: str) -> PolicySource:
    """The checkpoint `flags` choose (--checkpoint, --load-run, --wandb-run-path, --pretrained), or the baseline
    of --agent."""
    from mjfleet.runs.checkpoints import (
        checkpoint_run_dir,
        find_checkpoint,
        find_wandb_checkpoint,
        read_checkpoint,
    )

    if flags.policy != "checkpoint":
        out_dir = pathlib.Path(flags.logs_root) / experiment_name / f"baseline_{flags.policy}"
        return PolicySource(None, None, out_dir, f"{flags.policy} actions")
    if flags.pretrained:
        return _pretrained_source(flags, experiment_name, task)
    if flags.wandb_run_path is not None:
        checkpoint = find_wandb_checkpoint(flags.wandb_run_path, flags.logs_root, flags.checkpoint)
    else:
        experiment = pathlib.Path(flags.logs_root) / experiment_name
        checkpoint = find_checkpoint(experiment, flags.load_run, flags.checkpoint)
    state = read_checkpoint(checkpoint, map_location="cpu")
    label = f"{checkpoint.name} (iteration {state['iter']})"
    return PolicySource(checkpoint, state, checkpoint_run_dir(checkpoint), label)


def _pretrained_source(flags: Any, experiment_name: str, task: str) -> PolicySource:
    """The policy that ships for `task`; its outputs go under <logs-root>, never into the installed package."""
    from mjfleet.deploy.pretrained import describe, pretrained_checkpoint, read_provenance
    from mjfleet.runs.checkpoints import read_checkpoint

    checkpoint = pretrained_checkpoint(task)
    state = read_checkpoint(checkpoint, map_location="cpu")
    provenance = read_provenance(task)
    if provenance.get("trained_on"):  # what it was trained for, where that is narrower than the task
        print(f"pretrained policy of {task}: trained on {provenance['trained_on']}")
    label = f"pretrained policy (iteration {state['iter']}, {describe(provenance)})"
    out_dir = pathlib.Path(flags.logs_root) / experiment_name / "pretrained"
    return PolicySource(checkpoint, state, out_dir, label)


def build_checkpoint_actor(source: PolicySource, obs: Any, env: Any, device: str, task: str) -> Any:
    """The checkpoint's actor network for `env`, or None for a baseline; a checkpoint that does not fit the
    environment is the user's error."""
    if source.state is None:
        return None
    from mjfleet.deploy.export import build_actor

    try:
        return build_actor(source.state, obs, env.num_actions, device)
    except (RuntimeError, KeyError, ValueError) as exc:
        first = first_line(exc)
        raise UsageError(f"{source.checkpoint} does not fit {task}'s environment: {first}") from None


def act_fn(actor: Any, flags: Any, env: Any) -> Callable:
    """observations -> actions: the actor's (mean, or sampled with --stochastic), else the baseline's."""
    if actor is not None:
        from mjfleet.evaluation import ActorPolicy

        return ActorPolicy(actor, flags.stochastic)
    return baseline_policy(flags.policy, env, flags.agent.seed)


def baseline_policy(name: str, env: Any, seed: int) -> Callable:
    """Zero actions, or uniform random actions from a generator seeded with `seed`."""
    from mjfleet.evaluation import random_policy, zero_policy

    return zero_policy(env) if name == "zero" else random_policy(env, seed)
