"""Rank 0's per-iteration writer: metrics.jsonl always, TensorBoard or wandb when asked."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

RSL_RL_TAGS = {"env_steps_per_s": "Perf/total_fps"}
"""Dashboard tags written under rsl_rl's name too, so that existing dashboards overlay (same meaning; metrics.jsonl
keeps mjfleet's keys only)."""


class MetricsWriter:
    """Appends one JSON object per iteration to metrics.jsonl and mirrors scalars to a dashboard."""

    def __init__(
        self,
        run_path: pathlib.Path,
        logger: str = "tensorboard",
        wandb_project: str = "mjfleet",
        config: dict | None = None,
    ) -> None:
        self.path = run_path / "metrics.jsonl"
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._tb = None
        self._wandb = None
        if logger == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_path), flush_secs=10)
        elif logger == "wandb":
            import wandb  # pyright: ignore[reportMissingImports] - optional: `uv sync --extra wandb`; the CLI checks it

            # Offline runs: WANDB_MODE=offline (sync later with `wandb sync <run_dir>/wandb/offline-run-*`).
            self._wandb = wandb.init(
                project=wandb_project, name=run_path.name, dir=str(run_path), config=config
            )

    def write(self, record: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        step = int(record["iteration"])
        scalars = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "iteration"}
        scalars.update({tag: scalars[key] for key, tag in RSL_RL_TAGS.items() if key in scalars})
        if self._tb is not None:
            for key, value in scalars.items():
                if math.isfinite(value):
                    self._tb.add_scalar(key if "/" in key else f"Train/{key}", value, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def upload_checkpoint(self, path: pathlib.Path, iteration: int) -> None:
        """Log a checkpoint as a wandb model artifact (no-op without wandb). The file is copied to wandb's
        staging area first, so checkpoint retention may delete it right after."""
        if self._wandb is None:
            return
        import wandb  # pyright: ignore[reportMissingImports] - the optional `wandb` extra

        artifact = wandb.Artifact(f"{self._wandb.id}-model", type="model", metadata={"iteration": iteration})
        artifact.add_file(str(path))
        self._wandb.log_artifact(artifact, aliases=["latest", f"iter_{iteration}"])

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
