"""Short flags that stand for nested task settings, one table for train, play and bench, and one rule between them.

`--num-envs 64` sets `--env.num-envs`, `--seed 7` sets `--agent.seed`, and so on. A command declares the aliases
that mean something for it as fields defaulting to None ("not given"), documented "(alias of --env.num-envs)".

Precedence, the same in every command: **a short alias, when given, wins over its nested flag**; giving both is
allowed. The alias is the form the usage lines and docs show, and the rule needs no knowledge of the task's
defaults (a nested flag given at its default value cannot be told apart from one not given).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

ALIASES: dict[str, str] = {
    "num_envs": "env.num_envs",
    "seed": "agent.seed",
    "max_iterations": "agent.max_iterations",
    "run_name": "agent.run_name",
    "save_interval": "agent.save_interval",
    "logger": "agent.logger",
    "wandb_project": "agent.wandb_project",
}
"""Alias field -> the nested setting it stands for (`group.field` of the command's --env / --agent configs)."""


def apply_aliases(flags: Any, sweeps: Collection[str] = ()) -> None:
    """Copy every alias the user gave onto its nested setting (the alias wins).

    ``sweeps`` names aliases the command takes as several values (bench's `--num-envs 64 256`); it applies the
    same rule to each value itself.
    """
    for alias, target in ALIASES.items():
        value = getattr(flags, alias, None)
        if value is None or alias in sweeps:
            continue
        group, field = target.split(".")
        setattr(getattr(flags, group), field, value)
