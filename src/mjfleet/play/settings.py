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


def applied_env_cfg(env_cfg: Any, env: Any) -> dict[str, Any]:
    """`env_cfg` as eval.json records it: what the environment applied. A described robot's actions are scaled per
    joint by its description (`BuiltRobot.action_scale`), not by the config's `action_scale` and
    `scale_actions_by_servo`: those two then say what the environment did, `action_scale` one number per joint
    (the env's `joint_action_scale`) and `scale_actions_by_servo` whether each joint's scale is one factor of its
    servo's effort limit / kp (the rule a description without an action_scale of its own gets)."""
    plain = to_plain(dataclasses.asdict(env_cfg))
    scale = getattr(env, "joint_action_scale", None)
    built = getattr(env, "built", None)
    if scale is None or "action_scale" not in plain:
        return plain
    per_joint = [float(s) for s in scale.detach().cpu().tolist()]
    plain["action_scale"] = per_joint
    if built is not None and "scale_actions_by_servo" in plain:
        servo = [float(e) / float(k) for e, k in zip(built.effort_limit, built.kp, strict=True)]
        factors = [s / v for s, v in zip(per_joint, servo, strict=True)]
        proportional = max(factors) - min(factors) <= 1e-6 * max(abs(f) for f in factors)
        uniform = max(per_joint) - min(per_joint) <= 1e-6 * max(per_joint)
        # where every servo has the same effort / kp both rules give one number: the config says which it was
        plain["scale_actions_by_servo"] = proportional and (
            not uniform or bool(env_cfg.scale_actions_by_servo)
        )
    return plain


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
