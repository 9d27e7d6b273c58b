"""A task's reward terms bound to their weights: the step's reward, and the penalty curriculum's share.

Two ways to state a task's reward:

- a recipe (mjfleet.envs.terms): a mapping name -> Term(func, weight, params) over the reward term library, as the
  locomotion tasks do; each entry is checked and bound when the environment is built;
- a table and a weights dataclass: the env class lists its terms, plain functions `fn(env) -> (num_envs,) tensor`,
  by name in its `reward_terms` table, and the field of the same name of a weights dataclass weights each one (0
  disables it), as Cartpole does. A weight without a term or a term without a weight fails when the environment is
  built, not silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch

from mjfleet.envs.terms import BoundTerm, bind_recipe

RewardTerm = Callable[[Any], torch.Tensor]
"""A reward term: the environment -> one value per environment, (num_envs,)."""


class WeightedRewards:
    """The enabled reward terms of an environment class, each bound to its weight, summed into one reward per
    environment. No host synchronisation: `compute` is part of the step a CUDA graph records."""

    def __init__(
        self,
        env_class: type,
        terms: Mapping[str, RewardTerm],
        weights: Any,
        device: torch.device,
        env: Any = None,
        where: str = "env.rewards",
    ) -> None:
        if isinstance(weights, Mapping):  # a recipe: bound against the environment itself
            bound = bind_recipe(env, weights, where)
        else:
            names = [f.name for f in dataclasses.fields(weights) if getattr(weights, f.name) != 0.0]
            fns = bind_reward_terms(env_class, terms, weights, names)
            bound = [BoundTerm(n, float(getattr(weights, n)), f) for n, f in zip(names, fns, strict=True)]
        self.weights = {term.name: term.weight for term in bound}
        """The enabled terms' weights by name (what an export states as the task's reward)."""
        self.names = list(self.weights)
        self._terms = [term.call for term in bound]
        self._resets = [term.reset for term in bound if term.reset is not None]
        # Terms are evaluated separately but weighted, summed and accumulated as one (terms, envs) tensor.
        self._weight_column = torch.tensor(list(self.weights.values()), device=device).unsqueeze(1)
        # The penalty curriculum rescales the column in place (a recorded CUDA-graph step reads this very buffer).
        self._full_weights = self._weight_column.clone()
        self.penalty_scale = 1.0
        """The share of their weight the penalties (negative weights) carry now: below 1 only while training's
        penalty curriculum runs."""

    def compute(self, env: Any, episode_sums: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """This step's reward per environment (shaped as `like`); adds each weighted term to its row of
        `episode_sums` (terms, num_envs)."""
        if not self._terms:
            return torch.zeros_like(like)
        terms = torch.stack([term(env) for term in self._terms]) * self._weight_column
        # A diverged world's terms may be NaN or infinite: 0 instead, in the reward and in the episode log
        # (one NaN in the episode sums would make that term's logged mean NaN on every worker).
        terms.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        episode_sums += terms
        return terms.sum(dim=0)

    def reset(self, env: Any, mask: torch.Tensor) -> None:
        """Clear the episode state of the stateful terms (classes with `reset`) for the environments in `mask`."""
        for reset in self._resets:
            reset(env, mask)

    def scale_penalties(self, scale: float) -> None:
        """Weigh the penalties by `scale` of their full weight from now on (rewards keep theirs)."""
        if scale != self.penalty_scale:
            self.penalty_scale = scale
            full = self._full_weights
            torch.where(full < 0.0, full * scale, full, out=self._weight_column)


def penalty_curriculum_scale(cfg: Any, steps_per_env: int) -> float | None:
    """The penalties' share of their weight after `steps_per_env` policy steps of training (EnvConfig's
    penalty_curriculum_*: held at the start share for the delay, then rising linearly to 1); None without a
    curriculum."""
    start, steps = cfg.penalty_curriculum_start, cfg.penalty_curriculum_steps
    if steps <= 0 or start >= 1.0:
        return None
    rising = max(0, steps_per_env - cfg.penalty_curriculum_delay)
    return start + (1.0 - start) * min(1.0, rising / steps)


def bind_reward_terms(
    env_class: type, terms: Mapping[str, RewardTerm], weights: Any, names: list[str]
) -> list[RewardTerm]:
    """The term of each name in `names` (the enabled weights), in that order; a weight without a term or a term
    without a weight (a typo on either side) is a ValueError naming both sides."""
    fields = [f.name for f in dataclasses.fields(weights)]
    cls = env_class.__name__
    missing = [name for name in fields if name not in terms]
    if missing:
        old = [name for name in missing if callable(getattr(env_class, f"_reward_{name}", None))]
        hint = (
            f"; reward terms are functions fn(env) listed in the class's reward_terms table, and a "
            f"_reward_<name> method can be listed as it is: reward_terms = {{{old[0]!r}: _reward_{old[0]}, ...}}"
            if old
            else ""
        )
        raise ValueError(
            f"{cls}: reward weight(s) {', '.join(missing)} of {type(weights).__name__} name no entry of "
            f"{cls}.reward_terms (its terms: {', '.join(terms) or 'none'}){hint}"
        )
    unweighted = [name for name in terms if name not in fields]
    if unweighted:
        raise ValueError(
            f"{cls}: reward term(s) {', '.join(unweighted)} have no weight in {type(weights).__name__} "
            f"(its fields: {', '.join(fields) or 'none'})"
        )
    return [terms[name] for name in names]
