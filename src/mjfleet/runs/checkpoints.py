"""Finding, reading and pruning checkpoints: `--resume`, `--load-run`, `--checkpoint`, `--keep-last/--keep-every`."""

from __future__ import annotations

import os
import pathlib
import re
import warnings
from dataclasses import dataclass
from typing import Any

from mjfleet.errors import UsageError, first_line

RUN_DIR_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}")
"""Run directories start with their creation time, so sorting their names sorts them by age."""
CHECKPOINT_NAME = re.compile(r"^model_(\d+)\.pt$")


def checkpoints_in(run_path: str | os.PathLike) -> list[tuple[int, pathlib.Path]]:
    """(iteration, path) of every checkpoint in a run directory, oldest first (half-written `.tmp` files excluded)."""
    found = []
    for p in pathlib.Path(run_path).glob("model_*.pt"):
        match = CHECKPOINT_NAME.match(p.name)
        if match:
            found.append((int(match.group(1)), p))
    return sorted(found)


def runs_in(experiment_dir: str | os.PathLike) -> list[pathlib.Path]:
    """The run directories of an experiment, oldest first."""
    base = pathlib.Path(experiment_dir)
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.is_dir() and RUN_DIR_NAME.match(p.name))


def find_run(experiment_dir: str | os.PathLike, load_run: str | None = None) -> pathlib.Path:
    """The run to load from: `load_run` as a directory path, else the newest run whose name matches the regex
    `load_run` (any run when None) and that holds at least one checkpoint."""
    experiment_dir = pathlib.Path(experiment_dir)
    if load_run is not None and pathlib.Path(load_run).is_dir():
        return pathlib.Path(load_run).resolve()
    runs = runs_in(experiment_dir)
    if load_run is not None:
        if os.sep in load_run:  # a run names no directories: this was meant as a path
            raise UsageError(f"--load-run {load_run}: no such directory")
        try:
            pattern = re.compile(load_run)
        except re.error as exc:
            raise UsageError(
                f"--load-run {load_run!r} is neither a directory nor a valid regex ({exc})"
            ) from None
        runs = [r for r in runs if pattern.search(r.name)]
        if not runs:
            raise UsageError(
                f"--load-run {load_run!r}: no run directory in {experiment_dir} matches "
                f"(runs there: {_names(runs_in(experiment_dir))})"
            )
    elif not runs:
        raise UsageError(f"no runs in {experiment_dir}: train one first, or pass --load-run <run dir>")
    with_checkpoints = [r for r in runs if checkpoints_in(r)]
    if not with_checkpoints:
        which = f"matching {load_run!r} " if load_run is not None else ""
        raise UsageError(f"no run {which}in {experiment_dir} has a checkpoint (model_<iteration>.pt)")
    return with_checkpoints[-1].resolve()


def find_checkpoint(
    experiment_dir: str | os.PathLike, load_run: str | None = None, checkpoint: str | None = None
) -> pathlib.Path:
    """Resolve `--load-run` / `--checkpoint` to one checkpoint file (UsageError when there is none).

    `checkpoint` is an iteration number (model_<N>.pt of the chosen run) or a file path; None means the
    chosen run's latest checkpoint. `load_run` is a run directory path or a regex over run directory names.
    """
    if checkpoint is not None and not checkpoint.strip().isdigit():
        path = pathlib.Path(checkpoint)
        if path.is_file():
            return path.resolve()
        if load_run is None:
            raise UsageError(f"--checkpoint {checkpoint}: no such file (use a path or an iteration number)")
    run = find_run(experiment_dir, load_run)
    found = checkpoints_in(run)
    if checkpoint is None:
        if not found:
            raise UsageError(f"run {run} has no checkpoint (model_<iteration>.pt)")
        return found[-1][1]
    path = run / (f"model_{int(checkpoint)}.pt" if checkpoint.strip().isdigit() else checkpoint)
    if not path.is_file():
        have = ", ".join(str(it) for it, _ in found) or "none"
        raise UsageError(
            f"--checkpoint {checkpoint}: {path} does not exist (iterations saved in that run: {have})"
        )
    return path.resolve()


WANDB_RUN_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def wandb_run_files(run_path: str, logs_root: str | os.PathLike = "logs") -> pathlib.Path:
    """The local directory holding a wandb run's files (`--wandb-run-path`), without any network access.

    `run_path` is `entity/project/run_id` (or `project/run_id`, `run_id`: only the id is matched, as the
    entity of an offline run is unknown until it is synced), found as
    <logs_root>/<experiment>/<run>/wandb/<offline->run-<time>-<run_id>/files; or a directory: a wandb run's
    (wandb/offline-run-*), its files/, an mjfleet run directory with one wandb run, or a directory that
    `wandb pull` filled with the run's files.
    """
    given = pathlib.Path(run_path)
    if given.is_dir():
        if (given / "files").is_dir():
            return given / "files"
        runs = sorted(given.glob("wandb/*run-*/files"))
        if len(runs) > 1:
            raise UsageError(
                f"--wandb-run-path {run_path}: holds {len(runs)} wandb runs; pass one of them "
                f"({', '.join(r.parent.name for r in runs[-3:])})"
            )
        return runs[0] if runs else given
    run_id = run_path.rstrip("/").rsplit("/", 1)[-1]
    if not WANDB_RUN_ID.match(run_id):
        raise UsageError(f"--wandb-run-path {run_path}: not a directory, nor entity/project/run_id")
    pattern = f"*/*/wandb/*run-*-{run_id}/files"
    found = sorted(pathlib.Path(logs_root).glob(pattern))
    if not found:
        raise UsageError(
            f"--wandb-run-path {run_path}: no local files of wandb run {run_id} (looked for "
            f"{pathlib.Path(logs_root) / pattern}); mjfleet does not download: `wandb pull` them into a "
            "directory and pass that directory"
        )
    return found[-1]


def find_wandb_checkpoint(
    run_path: str, logs_root: str | os.PathLike = "logs", checkpoint: str | None = None
) -> pathlib.Path:
    """The checkpoint `--wandb-run-path` (and `--checkpoint`: an iteration number or a file name) picks among a
    wandb run's local files (`wandb_run_files`); its latest by default."""
    files = wandb_run_files(run_path, logs_root)
    found = checkpoints_in(files)
    if not found:
        raise UsageError(
            f"--wandb-run-path {run_path}: {files} holds no checkpoint (model_<iteration>.pt): they are "
            "there when the run was trained with --wandb-upload-checkpoints"
        )
    if checkpoint is None:
        return found[-1][1].resolve()
    name = f"model_{int(checkpoint)}.pt" if checkpoint.strip().isdigit() else checkpoint
    path = files / name
    if not path.is_file():
        have = ", ".join(str(it) for it, _ in found)
        raise UsageError(f"--checkpoint {checkpoint}: {path} does not exist (iterations there: {have})")
    return path.resolve()


def checkpoint_run_dir(path: str | os.PathLike) -> pathlib.Path:
    """Where outputs about a checkpoint go (eval.json, videos/, exported/): its directory, or, for a copy in a
    wandb run's files (<run>/wandb/<wandb run>/files/model_<N>.pt), the run directory <run>, so that nothing
    is added to what wandb syncs."""
    parent = pathlib.Path(path).parent
    if parent.name == "files" and parent.parent.parent.name == "wandb":
        return parent.parent.parent.parent
    return parent


def read_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by FleetRunner.save; an unreadable or foreign file is a UsageError."""
    import torch

    # torch's warnings about a file it then fails to read would make the one-line error several lines
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            state = torch.load(path, map_location=map_location, weights_only=True)
        except FileNotFoundError:
            raise UsageError(f"checkpoint {path} does not exist") from None
        except Exception as exc:  # noqa: BLE001 - truncated, not a torch file, unpicklable, ...
            raise UsageError(f"cannot read checkpoint {path}: {_load_failure(exc)}") from None
    for warning in caught:  # it loaded: they are worth seeing
        warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    if not isinstance(state, dict) or "actor_state_dict" not in state or "iter" not in state:
        raise UsageError(f"{path} is not an mjfleet checkpoint (no actor_state_dict / iter)")
    return state


def _load_failure(exc: BaseException) -> str:
    """Why torch.load failed, in one line. Its safe loader's message starts with advice to load unsafely, which
    fits a file from another tool at best; the reason itself follows "WeightsUnpickler error:"."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        reason = (text.split(marker, 1)[1].strip().splitlines() or ["?"])[0]
        return f"not a checkpoint that loads safely: a damaged file, or one not written by mjfleet ({reason})"
    return first_line(exc)


def checkpoint_iteration(path: str | os.PathLike) -> int | None:
    match = CHECKPOINT_NAME.match(pathlib.Path(path).name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Retention:
    """Which checkpoints a run keeps: the `keep_last` newest (0: all) plus every multiple of `keep_every`
    (0: none) forever. The newest checkpoint is never deleted."""

    keep_last: int = 5
    keep_every: int = 500

    def __post_init__(self) -> None:
        if self.keep_last < 0 or self.keep_every < 0:
            raise UsageError("--keep-last and --keep-every must be >= 0 (0 disables the rule)")

    def is_milestone(self, iteration: int) -> bool:
        return self.keep_every > 0 and iteration % self.keep_every == 0

    def to_delete(self, iterations: list[int]) -> list[int]:
        """The iterations (of those saved) that this policy removes."""
        if self.keep_last == 0 or not iterations:
            return []
        newest = sorted(iterations)[-self.keep_last :]
        return [it for it in iterations if it not in newest and not self.is_milestone(it)]

    def prune(self, run_path: str | os.PathLike) -> list[pathlib.Path]:
        """Delete the checkpoints this policy does not keep; returns what was deleted."""
        found = dict(checkpoints_in(run_path))
        deleted = []
        for it in self.to_delete(list(found)):
            try:
                found[it].unlink()
                deleted.append(found[it])
            except FileNotFoundError:
                pass
        return deleted


def _names(runs: list[pathlib.Path]) -> str:
    if not runs:
        return "none"
    names = [r.name for r in runs[-5:]]
    return ", ".join(names) + (f" and {len(runs) - 5} older" if len(runs) > 5 else "")
