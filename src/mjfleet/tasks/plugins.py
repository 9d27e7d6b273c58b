"""Tasks defined outside mjfleet: installed plug-ins (entry-point group `mjfleet.tasks`) and MJFLEET_TASK_MODULES.

An installed distribution declares, in its pyproject.toml,

    [project.entry-points."mjfleet.tasks"]
    pendulum = "pendulum"                 # a module: importing it registers its tasks
    more = "my_tasks.setup:register_all"  # or a callable, called once with no arguments

Both are loaded whenever `mjfleet.tasks` is imported, so `tasks`, `train`, `play` and `bench` see the same tasks;
a training job also carries the MJFLEET_TASK_MODULES list its command saw (`TrainJob.task_modules`), and every
worker imports those modules itself, whatever environment the launcher gave it. A plug-in that fails to load is a
UsageError naming its distribution and entry point: one broken package must not read as a bug of mjfleet's, and
its author still learns the first line of why.

A robot described in a file of its own (`train Velocity-Flat --robot my_robot.py`) registers, for every task that
takes a robot (TaskSpec.for_robot), that task for it (`register_robot_file`); the job carries the file's absolute
path among its task modules, so that every worker registers the same task.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import pathlib
import types

from mjfleet.errors import UsageError, first_line
from mjfleet.tasks.registry import TaskSpec, get_task, register, task_names

GROUP = "mjfleet.tasks"

_loaded: set[tuple[str, str]] = set()
"""Entry points already loaded in this process. A failed import of `mjfleet.tasks` is retried by the next import
statement; the plug-ins that did load must not register their tasks a second time then."""

sources: dict[str, str] = {}
"""Task name -> the distribution whose plug-in registered it ("name version"), for `uv run tasks`."""


def load_entry_points() -> None:
    """Import (or call) every entry point of the `mjfleet.tasks` group, in the order importlib lists them."""
    for entry_point in importlib.metadata.entry_points(group=GROUP):
        key = (entry_point.name, entry_point.value)
        if key in _loaded:
            continue
        _loaded.add(key)
        before = set(task_names())
        try:
            loaded = entry_point.load()
            if callable(loaded) and not isinstance(loaded, types.ModuleType):
                loaded()
        except Exception as exc:  # noqa: BLE001 - whatever a plug-in raises is reported as its failure
            _loaded.discard(key)
            raise UsageError(
                f"task plug-in {entry_point.name} = {entry_point.value!r} (entry point group {GROUP!r} of "
                f"{_distribution(entry_point)}) failed to load: {type(exc).__name__}: {first_line(exc)}"
            ) from None
        dist = entry_point.dist
        for name in set(task_names()) - before:
            sources[name] = f"{dist.name} {dist.version}" if dist is not None else entry_point.value


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    if dist is None:
        return "an unknown distribution"
    return f"the installed distribution {dist.name} {dist.version}"


def environment_task_modules() -> tuple[str, ...]:
    """The modules MJFLEET_TASK_MODULES names (comma-separated, importable names), as the user set it."""
    return tuple(filter(None, (m.strip() for m in os.environ.get("MJFLEET_TASK_MODULES", "").split(","))))


def load_environment_modules() -> None:
    """Import the modules named in MJFLEET_TASK_MODULES (the user's input, read where a command starts)."""
    load_task_modules(environment_task_modules())


def load_task_modules(modules: tuple[str, ...] | list[str]) -> None:
    """Import `modules`, each registering its tasks (a worker imports the ones its job names)."""
    for module in modules:
        if module.endswith(".py"):  # a robot file (`--robot`), by its absolute path
            register_robot_file(module)
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
                raise  # the module exists but imports something missing: its traceback says what
            raise UsageError(
                f"MJFLEET_TASK_MODULES names {module!r}, which is not importable here (is its directory on "
                "PYTHONPATH?)"
            ) from None


def robot_templates() -> list[str]:
    """The tasks that take a robot file (`--robot`)."""
    return [name for name in task_names() if get_task(name).for_robot is not None]


def register_robot_file(path: str) -> dict[str, str]:
    """Load the description `path` defines and register each task that takes a robot for it (once per process);
    returns {the template's name: the registered task's name}."""
    from mjfleet.robots.load import load_robot_file

    description = load_robot_file(path)
    names: dict[str, str] = {}
    for template in robot_templates():
        task: TaskSpec = get_task(template).for_robot(description)  # type: ignore[misc]
        if task.name in task_names():
            if get_task(task.name).env_kwargs.get("robot") != description:
                raise UsageError(
                    f"--robot: two files describe a robot named {description.name!r} (task {task.name}): "
                    "rename one (RobotDescription.name)"
                )
        else:
            register(task)
        names[template] = task.name
    return names


def task_for_robot(spec: TaskSpec, robot_file: str | None) -> TaskSpec:
    """`spec`, or with `--robot FILE` the task `spec` (one that takes a robot) registers for that file's robot."""
    if spec.for_robot is None:
        if robot_file is not None:
            takes = ", ".join(robot_templates()) or "none"
            raise UsageError(
                f"--robot: {spec.name} has a robot of its own (tasks that take --robot: {takes})"
            )
        return spec
    if robot_file is None:
        raise UsageError(
            f"{spec.name} trains the robot a file describes: give --robot path/to/robot.py (docs/bring-your-robot.md)"
        )
    return get_task(register_robot_file(robot_file)[spec.name])


def robot_modules(robot_file: str | None) -> tuple[str, ...]:
    """`--robot FILE` as a task-module entry of a job (its absolute path); () without one."""
    return () if robot_file is None else (str(pathlib.Path(robot_file).expanduser().resolve()),)
