"""Task registry: a name -> (env class, env config, agent config, defaults per device)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mjfleet.envs.config import EnvConfig
from mjfleet.errors import UsageError
from mjfleet.lazy import import_object
from mjfleet.rl.config import AgentConfig

if TYPE_CHECKING:
    from mjfleet.envs.base import MujocoVecEnv


@dataclass(frozen=True)
class TaskSpec:
    """Everything needed to build and train one task."""

    name: str
    description: str
    env_class: type[MujocoVecEnv] | str
    """The environment class, or its "package.module:Class" name: then the module (and with it the simulator)
    is imported only when an environment is built, which keeps `tasks`, `--help` and the launching process of
    a multi-worker run light."""
    env_config: Callable[[], EnvConfig]
    agent_config: Callable[[], AgentConfig]
    agent_config_cpu: Callable[[], AgentConfig] | None = None
    """The agent defaults `train` and `bench` use on CPU when they differ from `agent_config` (which then holds the
    GPU defaults): e.g. smaller networks, which learn more per second of a few cores. None: `agent_config`
    everywhere. Flags given on the command line win over either."""
    num_envs_cpu: int = 1024
    num_envs_gpu: int = 4096
    cpu_workers: int = 1
    """Worker processes `train` starts on CPU unless --cpu-workers is given (each with num_envs_cpu
    environments; gloo data-parallel), at most one per usable core."""
    play_settings: Callable[[EnvConfig], None] | None = None
    """Changes `play` makes to the env config (in place) unless --train-env: evaluate the policy, not the domain
    randomisation (e.g. no pushes, no observation noise, nominal friction and mass). None: play as trained."""
    requires: Callable[[], None] | None = None
    """Raises a UsageError when the task cannot be built on this machine, saying what to do (e.g. a robot not
    fetched yet): `train`, `play` and `bench` call it once their flags are parsed, before anything is written."""
    check_config: Callable[[Any], None] | None = None
    """Checks of an env config in the launching process (no simulator imported): a UsageError where it does not
    fit (a recipe's terms, the body and joint names they resolve, a mass range)."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment class besides the config and device (a described robot's task passes
    its description: one class serves every robot, no subclass per robot)."""
    for_robot: Callable[[Any], TaskSpec] | None = None
    """A task for any described robot (`train Velocity-Flat --robot my_robot.py`): given the RobotDescription,
    the task for that robot. Such a task has no robot of its own and cannot be built without one."""

    def check_ready(self) -> None:
        """`requires`, where the task has one."""
        if self.requires is not None:
            self.requires()

    def default_num_envs(self, device: str) -> int:
        return self.num_envs_gpu if str(device).startswith("cuda") else self.num_envs_cpu

    def default_agent_config(self, device: str) -> AgentConfig:
        """The agent defaults for `device` ("cpu", "cuda:0", ...)."""
        if self.agent_config_cpu is not None and not str(device).startswith("cuda"):
            return self.agent_config_cpu()
        return self.agent_config()

    def play_env_config(self) -> EnvConfig:
        """The env config `play` starts from: the training config with the task's play settings applied."""
        cfg = self.env_config()
        if self.play_settings is not None:
            self.play_settings(cfg)
        return cfg

    def env_type(self) -> type[MujocoVecEnv]:
        """The environment class (imported now if it was given by name)."""
        return import_object(self.env_class) if isinstance(self.env_class, str) else self.env_class

    def check_env_config(self, cfg: EnvConfig) -> None:
        """`check_config`, where the task has one: what its settings must satisfy, checked before any environment is
        built (a recipe's terms and the names they resolve), as a UsageError."""
        if self.check_config is not None:
            self.check_config(cfg)

    def make_env(self, cfg: EnvConfig, device: str = "cpu") -> MujocoVecEnv:
        """Build the environment; fills in num_envs for the device when the config leaves it open."""
        if cfg.num_envs is None:
            cfg.num_envs = self.default_num_envs(device)
        return self.env_type()(cfg, device=device, **self.env_kwargs)


_TASKS: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task to the registry (at import time of the module that defines it)."""
    if isinstance(spec.env_class, str) and ":" not in spec.env_class:
        raise ValueError(f"task {spec.name!r}: env_class {spec.env_class!r} must read 'package.module:Class'")
    if spec.name in _TASKS:
        raise UsageError(
            f"task {spec.name!r} is registered twice (by two task plug-ins, or modules in MJFLEET_TASK_MODULES?)"
        )
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
        else "run `uv run tasks` to list them (a task defined outside mjfleet needs its package installed, or its "
        "module in MJFLEET_TASK_MODULES)."
    )
    raise UsageError(f"unknown task {name!r}: {hint}")
