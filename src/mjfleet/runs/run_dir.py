"""The run directory: logs/<experiment>/<YYYY-mm-dd_HH-MM-SS>[_<run-name>]/, written by rank 0 only."""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
from collections.abc import Callable
from typing import Any

import yaml

from mjfleet import atomic
from mjfleet.runs.checkpoints import checkpoints_in


def timestamped_name(run_name: str = "", now: datetime.datetime | None = None) -> str:
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%d_%H-%M-%S")
    return f"{stamp}_{run_name}" if run_name else stamp


@dataclasses.dataclass(frozen=True)
class RunDir:
    """One training run's directory and the names of the files in it."""

    path: pathlib.Path

    @classmethod
    def new(cls, experiment: str, run_name: str = "", root: str | os.PathLike = "logs") -> RunDir:
        """A run directory path for now, not yet created (`reserve` creates it, or a free `-N` beside it;
        `create` fills in params/)."""
        return cls((pathlib.Path(root) / experiment / timestamped_name(run_name)).resolve())

    def reserve(self) -> RunDir:
        """Create this directory, or the first free `<name>-N` beside it: atomically, so two runs started in the
        same second (a sweep script, an array job) never share one. Returns the directory created; OSError when
        the parent cannot be created or written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        path, suffix = self.path, 1
        while True:
            try:
                path.mkdir()
                return RunDir(path)
            except FileExistsError:
                path = self.path.with_name(f"{self.path.name}-{suffix}")
                suffix += 1

    def create(self) -> None:
        (self.path / "params").mkdir(parents=True, exist_ok=True)

    def remove_if_empty(self) -> None:
        """Remove the directory if nothing was written into it (a run that failed before it started)."""
        try:
            self.path.rmdir()
        except OSError:
            pass

    @property
    def metrics_file(self) -> pathlib.Path:
        return self.path / "metrics.jsonl"

    @property
    def exported_dir(self) -> pathlib.Path:
        """policy.onnx, policy.pt and policy.json of the run's latest export."""
        return self.path / "exported"

    @property
    def reward_curve(self) -> pathlib.Path:
        return self.path / "reward_curve.png"

    def checkpoint(self, iteration: int) -> pathlib.Path:
        return self.path / f"model_{iteration}.pt"

    def checkpoints(self) -> list[tuple[int, pathlib.Path]]:
        """(iteration, path) of every checkpoint, oldest first."""
        return checkpoints_in(self.path)

    def latest_checkpoint(self) -> pathlib.Path | None:
        found = self.checkpoints()
        return found[-1][1] if found else None

    def write_params(self, **configs: Any) -> None:
        """params/<name>.yaml for each config (dataclasses or dicts)."""
        for name, cfg in configs.items():
            data = cfg
            if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
                data = dataclasses.asdict(cfg)
            atomic.write_text(
                self.path / "params" / f"{name}.yaml", yaml.safe_dump(to_plain(data), sort_keys=False)
            )


def to_plain(value: Any, leaf: Callable[[Any], Any] | None = None) -> Any:
    """Tuples -> lists, paths -> str, recursively, so configs serialise as plain YAML/JSON; `leaf` converts every
    other value (e.g. tensors, for an exported policy's metadata)."""
    if isinstance(value, dict):
        return {str(k): to_plain(v, leaf) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v, leaf) for v in value]
    if isinstance(value, pathlib.PurePath):
        return str(value)
    return value if leaf is None else leaf(value)


def float32_list(values: Any) -> list[float]:
    """A float32 tensor (or array) as a list of Python floats, each the shortest decimal that reads back as the same
    float32: 0.9, not 0.8999999761581421 (float(np.float32(0.9))). One convention for every number an export
    writes, so that the same value never appears in two spellings."""
    import numpy as np

    array = values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)
    return array.astype(np.float32).astype(str).astype(float).tolist()
