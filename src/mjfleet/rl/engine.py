"""The update engine's protocol: what a faster implementation of FleetPPO's rollout step and minibatch gradients
offers (`mjfleet.rl.fast` for MLP networks), and how it declines before it has changed anything."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

Gradients = Callable[[Any], tuple[torch.Tensor, torch.Tensor | None]]
"""One minibatch -> (detached [surrogate, value, entropy] losses, mean KL or None), gradients in the flat buffer."""


class Declined(Exception):
    """An update engine failed where it had not changed anything yet: the reference runs instead."""


class UpdateEngine(Protocol):
    """A faster way to compute what `FleetPPO.act` and `FleetPPO.minibatch_gradients` compute."""

    name: str
    """For the start-up line, e.g. "fast engine"."""

    @property
    def action_std(self) -> torch.Tensor: ...

    def act(self, obs) -> torch.Tensor: ...

    def minibatches(self) -> tuple[Iterable, Gradients]: ...

    def policy_changed(self) -> None: ...
