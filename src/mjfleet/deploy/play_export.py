"""`play --export`: the checkpoint's policy as ONNX + TorchScript + metadata in <run_dir>/exported/."""

from __future__ import annotations

import json
import pathlib
from typing import Any


def export_checkpoint_policy(
    env: Any,
    actor: Any,
    obs: Any,
    task: str,
    checkpoint: pathlib.Path,
    state: dict[str, Any],
    evaluation_command: tuple[float, ...] | None = None,
    out: pathlib.Path | None = None,
) -> dict[str, Any]:
    """Export `actor` (checked against torch); returns each written file by kind and the ONNX check's error.

    `evaluation_command` is play's --command, if any: the metadata keeps it apart from the training ranges.
    `out` is the folder written (default: <the checkpoint's run directory>/exported)."""
    from mjfleet.deploy.export import export_policy, policy_metadata
    from mjfleet.runs.checkpoints import checkpoint_run_dir

    meta = policy_metadata(
        env, actor, obs, task, evaluation_command, iteration=state["iter"], checkpoint=str(checkpoint)
    )
    out = out if out is not None else checkpoint_run_dir(checkpoint) / "exported"
    note_replaced_export(out / "policy.json", int(state["iter"]))
    files = export_policy(actor, obs, out, meta)
    exported: dict[str, Any] = {kind: str(path) for kind, path in files.items()}
    exported["max_abs_diff_vs_torch"] = json.loads(files["metadata"].read_text())["onnx"][
        "max_abs_diff_vs_torch"
    ]
    return exported


def note_replaced_export(metadata: pathlib.Path, iteration: int) -> None:
    """A note when --export replaces the export of a later iteration (e.g. train --export-on-save's latest)."""
    try:
        previous = json.loads(metadata.read_text()).get("iteration")
    except (OSError, ValueError):
        return
    if isinstance(previous, int) and previous > iteration:
        print(
            f"note: replacing {metadata.parent}'s export of iteration {previous} with iteration {iteration}"
        )
