"""Rank 0's per-iteration writer: metrics.jsonl always, TensorBoard or wandb when asked."""

from __future__ import annotations

import json
import math
import pathlib
import shutil
from typing import Any

from mjfleet import atomic

RSL_RL_TAGS: dict[str, tuple[str, ...]] = {
    "env_steps_per_s": ("Perf/total_fps",),
    # rsl_rl 5.x writes collection_time; legged_gym's rsl_rl (1.x, 2.x) wrote "collection time": both overlay.
    "collect_time": ("Perf/collection_time", "Perf/collection time"),
    "learn_time": ("Perf/learning_time",),
    "learning_rate": ("Loss/learning_rate",),
    "Policy/action_std": ("Policy/mean_std",),
}
"""mjfleet record keys also written to the dashboard under rsl_rl's (and mjlab's) tags, which mean the same. The
Loss/value, Loss/surrogate and Loss/entropy keys are rsl_rl's already; Train/mean_reward and
Train/mean_episode_length come from the moving window (`EpisodeStats.recent`). metrics.jsonl keeps mjfleet's
keys only."""
OWN_PREFIX = "mjfleet/"
"""Dashboard group of mjfleet's keys that have no group of their own (mean_return -> mjfleet/mean_return): not
Train/, where rsl_rl's Train/mean_episode_length means something else (a moving window, not the iteration)."""


def dashboard_scalars(record: dict[str, Any], recent: dict[str, float] | None = None) -> dict[str, float]:
    """The finite scalars of an iteration's record under their dashboard tags: mjfleet's (grouped ones as they
    are, others under OWN_PREFIX) and rsl_rl's."""
    scalars: dict[str, float] = {}
    for key, value in record.items():
        if key == "iteration" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        scalars[key if "/" in key else OWN_PREFIX + key] = value
        for tag in RSL_RL_TAGS.get(key, ()):
            scalars[tag] = value
    if recent is not None:
        scalars["Train/mean_reward"] = recent["mean_return"]
        scalars["Train/mean_episode_length"] = recent["mean_episode_length"]
    return {tag: value for tag, value in scalars.items() if math.isfinite(value)}


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
        self._train_time = 0.0  # rsl_rl's Train/*/time x axis: seconds of collection and learning so far
        if logger == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_path), flush_secs=10)
        elif logger == "wandb":
            import wandb  # pyright: ignore[reportMissingImports] - optional: `uv sync --extra wandb`; the CLI checks it

            # Offline runs: WANDB_MODE=offline (sync later with `wandb sync <run_dir>/wandb/offline-run-*`).
            self._wandb = wandb.init(
                project=wandb_project, name=run_path.name, dir=str(run_path), config=config
            )

    def write(self, record: dict[str, Any], recent: dict[str, float] | None = None) -> None:
        """One iteration: `record` to metrics.jsonl and the dashboard, `recent` (the moving window of episodes,
        `EpisodeStats.recent`) to the dashboard only."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        step = int(record["iteration"])
        scalars = dashboard_scalars(record, recent)
        self._train_time += record.get("collect_time", 0.0) + record.get("learn_time", 0.0)
        if self._tb is not None:
            for tag, value in scalars.items():
                self._tb.add_scalar(tag, value, step)
            for tag in ("Train/mean_reward", "Train/mean_episode_length"):
                if tag in scalars:  # as rsl_rl: the same against whole seconds of training
                    self._tb.add_scalar(f"{tag}/time", scalars[tag], int(self._train_time))
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def log_video(self, path: pathlib.Path, iteration: int) -> None:
        """Show an mp4 on the wandb dashboard, at `iteration` (under rsl_rl's key, "video"); no-op otherwise."""
        if self._wandb is None:
            return
        import wandb  # pyright: ignore[reportMissingImports] - the optional `wandb` extra

        self._wandb.log({"video": wandb.Video(str(path), format="mp4")}, step=iteration)

    @property
    def wandb_files(self) -> pathlib.Path | None:
        """The wandb run's local files directory (wandb/<offline->run-<time>-<id>/files), when wandb logs."""
        return pathlib.Path(self._wandb.dir) if self._wandb is not None else None

    def upload_checkpoint(self, path: pathlib.Path, iteration: int) -> None:
        """Log a checkpoint as a wandb model artifact and copy it into the run's files (no-op without wandb).

        The artifact is staged as a copy, so checkpoint retention may delete `path` right after. The copy in the
        run's files directory is what `--wandb-run-path` finds locally (an offline run's only copy until it is
        synced); the caller prunes it with the run's retention."""
        if self._wandb is None:
            return
        import wandb  # pyright: ignore[reportMissingImports] - the optional `wandb` extra

        artifact = wandb.Artifact(f"{self._wandb.id}-model", type="model", metadata={"iteration": iteration})
        artifact.add_file(str(path))
        self._wandb.log_artifact(artifact, aliases=["latest", f"iter_{iteration}"])
        files = pathlib.Path(self._wandb.dir)
        with atomic.staged(files / path.name) as tmp:  # never a half-copied checkpoint in files/
            shutil.copyfile(path, tmp)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
