"""The env settings `play` evaluates with: the task's play settings, and notes where they differ from training."""

from __future__ import annotations

import dataclasses
from typing import Any

from mjfleet.errors import UsageError
from mjfleet.runs.run_dir import to_plain


def play_setting_keys(spec: Any) -> set[str]:
    """The dotted env settings the task's play settings change (empty when it has none)."""
    trained = flatten(to_plain(dataclasses.asdict(spec.env_config())))
    played = flatten(to_plain(dataclasses.asdict(spec.play_env_config())))
    return {k for k in played if trained.get(k) != played[k]}


def print_play_settings(task: str, env_cfg: Any, keys: set[str]) -> None:
    """One line naming the values of the play settings in use."""
    values = flatten(to_plain(dataclasses.asdict(env_cfg)))
    print(
        f"play settings of {task}: "
        + ", ".join(f"{k}={v!r}" for k, v in values.items() if k in keys)
        + " (--train-env: as in training)"
    )


def fix_command(env_cfg: Any, command: tuple[float, float, float], task: str) -> None:
    """--command: the same velocity command in every episode, for tasks that take one."""
    commands = getattr(env_cfg, "commands", None)
    if not callable(getattr(commands, "fix", None)):
        raise UsageError(f"--command: {task} takes no velocity command")
    commands.fix(*command)


def notice_differences(
    task: str,
    env_cfg: Any,
    state: dict[str, Any],
    fixed_command: bool = False,
    on_purpose: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Print a note where the checkpoint was trained on another task or with other env settings."""
    infos = state.get("infos") or {}
    if infos.get("task") and infos["task"] != task:
        print(f"note: the checkpoint was trained on {infos['task']}; playing it on {task}")
    # Both sides plain and flattened to dotted names: the checkpoint keeps tuples where the flags give lists,
    # and a note should name the one nested setting that differs, not its whole group.
    trained = flatten(to_plain(infos.get("env_cfg") or {}))
    now = flatten(to_plain(dataclasses.asdict(env_cfg)))
    ignore = {"num_envs", "capture_graphs", "capture_step", *on_purpose}  # on purpose: the play settings
    differ = [k for k in now if k in trained and k not in ignore and trained[k] != now[k]]
    if fixed_command:  # --command changes these on purpose
        differ = [k for k in differ if not k.startswith("commands.")]
    if differ:
        pairs = ", ".join(f"{k}={now[k]!r} (trained: {trained[k]!r})" for k in differ[:4])
        more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
        print(f"note: env settings differ from training: {pairs}{more}; pass --env.* flags to match")


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"commands": {"lin_vel_x": v}} -> {"commands.lin_vel_x": v}."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
