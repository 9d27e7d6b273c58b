"""Task registry: a name -> (env class, env config, agent config, defaults per device)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from mjfleet.envs import EnvConfig, MujocoVecEnv
from mjfleet.errors import UsageError
from mjfleet.rl import AgentConfig


@dataclass(frozen=True)
class TaskSpec:
    """Everything needed to build and train one task."""

    name: str
    description: str
    env_class: type[MujocoVecEnv]
    env_config: Callable[[], EnvConfig]
    agent_config: Callable[[], AgentConfig]
    num_envs_cpu: int = 1024
    num_envs_gpu: int = 4096

    def default_num_envs(self, device: str) -> int:
        return self.num_envs_gpu if str(device).startswith("cuda") else self.num_envs_cpu

    def make_env(self, cfg: EnvConfig, device: str = "cpu") -> MujocoVecEnv:
        """Build the environment; fills in num_envs for the device when the config leaves it open."""
        if cfg.num_envs is None:
            cfg.num_envs = self.default_num_envs(device)
        return self.env_class(cfg, device=device)


_TASKS: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    if spec.name in _TASKS:
        raise ValueError(f"task {spec.name!r} is registered twice")
    _TASKS[spec.name] = spec
    return spec


def task_names() -> list[str]:
    return sorted(_TASKS)


def get_task(name: str) -> TaskSpec:
    """The task called `name`; an unknown name is a UsageError naming the closest tasks."""
    spec = _TASKS.get(name)
    if spec is not None:
        return spec
    lowered = {n.lower(): n for n in _TASKS}
    if name.lower() in lowered:
        return _TASKS[lowered[name.lower()]]
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.4)
    hint = (
        f"did you mean {', '.join(lowered[c] for c in close)}?"
        if close
        else "run `uv run tasks` to list them."
    )
    raise UsageError(f"unknown task {name!r}: {hint}")
