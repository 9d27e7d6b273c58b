"""reward_curve.png: mean return and mean episode length against environment steps, from metrics.jsonl."""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Sequence
from typing import Any

from mjfleet import atomic
from mjfleet.errors import UsageError


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (a run directory or the file itself); a torn last line is skipped."""
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise UsageError(
            f"{path} does not exist: pass a run directory (logs/<experiment>/<run>) or a metrics.jsonl"
        )
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the writer may be appending right now
    return records


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in records:
        value = r.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value) and "env_steps" in r:
            xs.append(float(r["env_steps"]))
            ys.append(float(value))
    return xs, ys


def plot_run(run_dir) -> None:
    """A run's reward_curve.png at the end of training; a plotting problem must never fail the run."""
    import sys

    try:
        plot_reward_curve([run_dir.path], run_dir.reward_curve)
    except Exception as exc:  # noqa: BLE001
        print(f"warning: could not plot {run_dir.reward_curve}: {exc}", file=sys.stderr)


def plot_reward_curve(
    runs: Sequence[str | os.PathLike], output: str | os.PathLike, labels: Sequence[str] | None = None
) -> pathlib.Path:
    """Write a two-panel PNG (mean return, mean episode length vs env steps) for one or more runs."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    data = [read_metrics(run) for run in runs]
    if not any(data):
        raise UsageError(f"no metrics to plot in {', '.join(str(r) for r in runs)}")
    labels = list(labels) if labels else [_label(run) for run in runs]
    fig, (ax_return, ax_length) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    for records, label in zip(data, labels, strict=True):
        ax_return.plot(*_series(records, "mean_return"), label=label, linewidth=1.5)
        ax_length.plot(*_series(records, "mean_episode_length"), label=label, linewidth=1.5)
    ax_return.set_ylabel("mean return")
    ax_length.set_ylabel("mean episode length (steps)")
    ax_length.set_xlabel("environment steps (all workers)")
    for ax in (ax_return, ax_length):
        ax.grid(True, alpha=0.3)
    if len(data) > 1:
        ax_return.legend(fontsize="small")
    ax_return.set_title(labels[0] if len(data) == 1 else "reward curves")
    fig.tight_layout()
    output = pathlib.Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic.staged(output) as tmp:  # the temporary name ends in .tmp: the format comes from `output`
            fig.savefig(tmp, dpi=100, format=output.suffix.lstrip(".") or None)
    finally:
        plt.close(fig)
    return output


def _label(run: str | os.PathLike) -> str:
    path = pathlib.Path(run).resolve()
    if path.name == "metrics.jsonl":
        path = path.parent
    return f"{path.parent.name}/{path.name}"
