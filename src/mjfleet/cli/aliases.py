"""Short flags that stand for nested task settings, one table for train, play and bench, and one rule between them.

`--num-envs 64` sets `--env.num-envs`, `--seed 7` sets `--agent.seed`, and so on. A command declares the aliases
that mean something for it as fields defaulting to None ("not given"), documented "(alias of --env.num-envs)".

Precedence, the same in every command: **a short alias, when given, wins over its nested flag**; giving both is
allowed. The alias is the form the usage lines and docs show, and the rule needs no knowledge of the task's
defaults (a nested flag given at its default value cannot be told apart from one not given).

Below that, the other table train, play and bench share: mjlab's spellings of the same settings, each answered
with mjfleet's (`--task X` is taken as the positional task).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

from mjfleet.errors import UsageError

ALIASES: dict[str, str] = {
    "algorithm": "agent.algorithm_name",
    "teacher": "agent.distillation.teacher",
    "num_envs": "env.num_envs",
    "seed": "agent.seed",
    "max_iterations": "agent.max_iterations",
    "run_name": "agent.run_name",
    "save_interval": "agent.save_interval",
    "logger": "agent.logger",
    "wandb_project": "agent.wandb_project",
}
"""Alias field -> the nested setting it stands for (`group.field` of the command's --env / --agent configs)."""


RENAMED_PREFIXES: dict[str, str] = {"--agent.algorithm.": "--agent.ppo."}
"""Old flag spellings that keep working: PPO's settings were `AgentConfig.algorithm` until 2026-11-28."""
RENAMED_FLAGS: dict[str, str] = {
    "--agent.ppo.fast-update": "--agent.ppo.compile-update",
    "--agent.ppo.no-fast-update": "--agent.ppo.no-compile-update",
}
"""The hand-derived update engine gave way to the compiled loss (2026-11-28): its switch now switches that."""


def renamed_flags(args: list[str]) -> list[str]:
    """`args` with every old spelling (:data:`RENAMED_PREFIXES`) written the current way, before tyro reads them."""
    out = []
    for arg in args:
        for old, new in RENAMED_PREFIXES.items():
            if arg.startswith(old):
                arg = new + arg[len(old) :]
        out.append(RENAMED_FLAGS.get(arg, arg))
    return out


def recipe_weight_flags(args: list[str], recipe: Any) -> list[str]:
    """`--env.rewards.<name> W` written `--env.rewards.<name>.weight W` where the task's reward is a recipe (a
    mapping of mjfleet.envs.terms.Term): the short spelling, which tasks with a weights dataclass (Cartpole) take
    as it is, sets a recipe entry's weight."""
    if not isinstance(recipe, dict):
        return args
    names = {name.replace("_", "-") for name in recipe} | set(recipe)
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag.startswith("--env.rewards.") and flag.removeprefix("--env.rewards.") in names:
            arg = f"{flag}.weight{eq}{value}"
        out.append(arg)
    return out


def apply_aliases(flags: Any, sweeps: Collection[str] = ()) -> None:
    """Copy every alias the user gave onto its nested setting (the alias wins).

    ``sweeps`` names aliases the command takes as several values (bench's `--num-envs 64 256`); it applies the
    same rule to each value itself.
    """
    for alias, target in ALIASES.items():
        value = getattr(flags, alias, None)
        if value is None or alias in sweeps:
            continue
        *groups, field = target.split(".")
        owner = flags
        for group in groups:
            owner = getattr(owner, group)
        setattr(owner, field, value)


# --- mjlab's spellings ------------------------------------------------------------------------------------------
# Users arrive with mjlab's (and rsl_rl's) command lines in their fingers and scripts. Where mjfleet spells a
# setting differently, the error names mjfleet's flag, with the value the user gave; docs/coming-from-mjlab.md
# has the full side-by-side table. These are consulted only after a command line failed to parse, so they can
# never shadow a flag that a command or task does define.

SWITCH_VALUES: dict[str, tuple[str, ...]] = {
    "--video": ("true", "false", "1", "0", "yes", "no"),
}
"""mjfleet's switches that mjlab spells with a value: only these values make them mjlab's spelling."""


def _device(value: str | None) -> str:
    if value is not None and value.lower() == "cpu":
        return "--gpu-ids None"
    if value is not None and value.lower().startswith("cuda:") and value[5:].isdigit():
        return f"--gpu-ids {value[5:]}"
    return "--gpu-ids <index> (or --gpu-ids None for CPU)"


def _iteration(value: str | None) -> str:
    """The N of mjlab's checkpoint name `model_N.pt` (mjfleet's --checkpoint takes the number)."""
    match = re.fullmatch(r"model_(\d+)\.pt", value or "")
    return match.group(1) if match else "<iteration>"


MJLAB_FLAGS: dict[str, Callable[[str | None], str]] = {
    "--env.scene.num-envs": lambda v: f"--num-envs {v or 'N'} (or --env.num-envs {v or 'N'})",
    "--agent.resume": lambda v: "--resume, a switch with no value (train; --load-run/--checkpoint imply it)",
    "--agent.load-run": lambda v: f"--load-run {v or '<regex or path>'}",
    "--agent.load-checkpoint": lambda v: (
        f"--checkpoint {_iteration(v)} (an iteration number of the run, or a path)"
    ),
    "--checkpoint-file": lambda v: f"--checkpoint {v or '<file>'} (a file path, or an iteration number)",
    "--device": _device,
    "--log-root": lambda v: f"--logs-root {v or '<dir>'} (run directories: <logs-root>/<experiment>/<time>)",
    "--camera": lambda v: f"--video-camera {v or '<name or id>'}",
    "--video": lambda v: "--video, a switch with no value (leave it out for no video)",
    "--wandb-checkpoint-name": lambda v: f"--checkpoint {_iteration(v)}, with --wandb-run-path",
}
"""mjlab flag -> mjfleet's spelling, given the value the user wrote (None when there was none)."""

MJLAB_TASKS: dict[str, str] = {
    "Mjlab-Cartpole-Balance": "Cartpole-Balance",
    "Mjlab-Cartpole-Swingup": "Cartpole-Swingup",
    "Mjlab-Velocity-Flat-Unitree-Go1": "Quadruped-Velocity-Flat (a Go1-class quadruped)",
    "Mjlab-Velocity-Rough-Unitree-Go1": "Quadruped-Velocity-Rough (a Go1-class quadruped)",
    "Mjlab-Velocity-Flat-Unitree-G1": "Humanoid-Velocity-Flat (a G1-class humanoid)",
    "Mjlab-Velocity-Rough-Unitree-G1": "Humanoid-Velocity-Rough (a G1-class humanoid)",
}
"""mjlab task -> the mjfleet task closest to it (mjfleet's robots are its own models, built from published facts)."""


def mjlab_flag_hint(args: list[str]) -> str | None:
    """The error for the first mjlab spelling in `args` that mjfleet does not take, or None if there is none."""
    for i, arg in enumerate(args):
        name, has_value, value = arg.partition("=")
        if name not in MJLAB_FLAGS:
            continue
        if not has_value:
            following = args[i + 1] if i + 1 < len(args) else None
            value = following if following is not None and not following.startswith("--") else None
        if name in SWITCH_VALUES and (value is None or value.lower() not in SWITCH_VALUES[name]):
            continue  # a plain --video is mjfleet's own switch
        given = f"{name} {value}" if value is not None else name
        return f"`{given}` is mjlab's spelling; mjfleet's is {MJLAB_FLAGS[name](value)}"
    return None


def mjlab_task_hint(task: str) -> str | None:
    """The error for an mjlab task name, naming mjfleet's counterpart (None for other names)."""
    if task in MJLAB_TASKS:
        return f"{task} is an mjlab task; mjfleet's counterpart is {MJLAB_TASKS[task]}"
    if task.lower().startswith("mjlab-"):
        return f"{task} is an mjlab task, and mjfleet has no counterpart: `uv run tasks` lists mjfleet's"
    return None


def task_flag_to_positional(args: list[str]) -> list[str]:
    """`--task X` / `--task=X` (mjlab scripts, Isaac Lab) anywhere -> X first, as mjfleet's positional task.

    A positional task given as well must name the same task."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--task" or arg.startswith("--task="):
            task = arg[len("--task=") :] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            if not task or task.startswith("-"):
                raise UsageError("--task needs a task name, e.g. `--task Cartpole-Balance`")
            rest = args[:i] + args[i + (1 if "=" in arg else 2) :]
            if rest and not rest[0].startswith("-"):
                if rest[0] != task:
                    raise UsageError(f"two tasks given, {rest[0]} and --task {task}: give one")
                rest = rest[1:]
            return [task, *rest]
    return args
