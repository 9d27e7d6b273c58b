"""Policies that ship with mjfleet, played by task name: `play <Task> --pretrained`.

Each lives in src/mjfleet/pretrained/<Task>/ (a data folder inside the package, so an installed wheel has it too):

    model.pt          the checkpoint, less what only training needs (critic, optimiser, RNG states)
    pretrained.json   how it was made (training command, device, date, commit, iteration, env steps), how
                      `play` judged it and, where it was kept as the best of several evaluations ("chosen_by",
                      written by --save-best), the rule that chose it (`mjfleet.ranking`) and its falls
    policy.onnx, policy.json, model.xml   its `play --export`, where one was made

`write_pretrained` makes such a folder from a checkpoint (scripts/time_to_threshold.py --save-best does).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from mjfleet import atomic
from mjfleet.errors import UsageError

PRETRAINED_ROOT = pathlib.Path(__file__).resolve().parents[1] / "pretrained"
CHECKPOINT = "model.pt"
PROVENANCE = "pretrained.json"
PROVENANCE_KEYS = ("task", "training_command", "device", "date", "commit", "iteration", "env_steps")
"""What pretrained.json must state: enough to make the policy again and to know what made it. An optional
"trained_on" says what the policy was trained for where that is narrower than the task (play prints it); an optional
"chosen_by" says how it was chosen among a run's evaluations: the rule (`mjfleet.ranking.RULE`), whether it passed,
and the episodes that ended early (falls) of each judge's evaluation, as [early, ended]."""
PLAY_KEYS = ("algorithm", "actor_state_dict", "rsl_rl_cfg", "iter", "env_steps", "infos", "agent_cfg")
"""The checkpoint entries `play` (and `play --export`) reads; the rest (critic, optimiser) only trains."""


def pretrained_tasks(root: pathlib.Path = PRETRAINED_ROOT) -> list[str]:
    """The tasks that have a pretrained policy in `root`, sorted."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / CHECKPOINT).is_file())


def pretrained_checkpoint(task: str, root: pathlib.Path = PRETRAINED_ROOT) -> pathlib.Path:
    """The pretrained checkpoint of `task`; a task without one is the user's error, naming those that have one."""
    path = root / task / CHECKPOINT
    if not path.is_file():
        have = ", ".join(pretrained_tasks(root)) or "none"
        raise UsageError(f"--pretrained: no pretrained policy ships for {task} (tasks that have one: {have})")
    return path


def read_provenance(task: str, root: pathlib.Path = PRETRAINED_ROOT) -> dict[str, Any]:
    """pretrained.json of `task` ({} where it is missing or unreadable: the checkpoint still plays)."""
    try:
        return json.loads((root / task / PROVENANCE).read_text())
    except (OSError, ValueError):
        return {}


def describe(provenance: dict[str, Any]) -> str:
    """One line for a reader: where and when the policy was trained."""
    parts = [str(provenance[k]) for k in ("device", "date", "commit") if provenance.get(k)]
    return "trained on " + ", ".join(parts) if parts else "no provenance recorded"


def play_state(state: dict[str, Any]) -> dict[str, Any]:
    """The entries of a checkpoint that playing and exporting need (a third of a PPO checkpoint's size)."""
    missing = [k for k in ("actor_state_dict", "iter") if k not in state]
    if missing:
        raise ValueError(f"not an mjfleet checkpoint: no {', '.join(missing)}")
    return {k: state[k] for k in PLAY_KEYS if k in state}


def write_pretrained(dest: pathlib.Path, state: dict[str, Any], provenance: dict[str, Any]) -> pathlib.Path:
    """Write `state`'s playable part to dest/model.pt and `provenance` to dest/pretrained.json; returns the
    checkpoint's path. Each file is replaced whole (`mjfleet.atomic`)."""
    import torch

    missing = [k for k in PROVENANCE_KEYS if k not in provenance]
    if missing:
        raise ValueError(f"pretrained.json needs {', '.join(missing)}")
    dest.mkdir(parents=True, exist_ok=True)
    checkpoint = dest / CHECKPOINT
    with atomic.staged(checkpoint) as tmp:
        torch.save(play_state(state), tmp)
    atomic.write_text(dest / PROVENANCE, json.dumps(provenance, indent=2) + "\n")
    return checkpoint


def record_play(dest: str | pathlib.Path, eval_json: str | pathlib.Path, command: str) -> None:
    """Add `play`'s evaluation of the policy in `dest` (its eval.json) to dest/pretrained.json, under "play", with
    the command that reproduces it from the shipped policy."""
    dest = pathlib.Path(dest)
    report = json.loads(pathlib.Path(eval_json).read_text())

    def brief(r: dict[str, Any]) -> dict[str, Any]:
        keys = ("mean_return", "mean_episode_length", "episodes", "metrics", "terminations")
        return {k: r[k] for k in keys if k in r}

    provenance = json.loads((dest / PROVENANCE).read_text())
    provenance["play"] = {
        "command": command,
        "device": report.get("device"),
        "seed": report.get("seed"),
        "trained": brief(report),
        **{name: brief(r) for name, r in (report.get("baselines") or {}).items()},
    }
    atomic.write_text(dest / PROVENANCE, json.dumps(provenance, indent=2) + "\n")
    portable_export(dest)


def portable_export(dest: pathlib.Path) -> None:
    """Name the checkpoint in dest's export (policy.json and policy.onnx's metadata: "checkpoint", mjlab's
    "run_path") as `pretrained:<Task>` instead of the path it was exported from: a file that ships must not carry
    the paths of the machine that made it."""
    metadata = dest / "policy.json"
    if not metadata.is_file():
        return
    meta = json.loads(metadata.read_text())
    name = f"pretrained:{meta['task']}"
    meta["checkpoint"] = name
    if "mjlab" in meta:
        meta["mjlab"]["run_path"] = name
    atomic.write_text(metadata, json.dumps(meta, indent=2) + "\n")
    onnx_file = dest / "policy.onnx"
    if onnx_file.is_file():
        import onnx

        model = onnx.load(str(onnx_file))
        for prop in model.metadata_props:
            if prop.key == "checkpoint":
                prop.value = json.dumps(name)
            elif prop.key == "run_path":
                prop.value = name
        with atomic.staged(onnx_file) as tmp:
            onnx.save(model, str(tmp))
