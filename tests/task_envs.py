"""A task's environment with a few worlds on CPU, seeded: what the task test modules build their fixtures from
(a module on the tests' path)."""

from __future__ import annotations

import torch

from mjfleet.tasks import get_task


def make_task_env(task: str, num_envs: int, seed: int = 0):
    """`task`'s environment with its default settings but `num_envs` worlds, built after seeding torch."""
    spec = get_task(task)
    cfg = spec.env_config()
    cfg.num_envs = num_envs
    torch.manual_seed(seed)
    return spec.make_env(cfg, "cpu")
