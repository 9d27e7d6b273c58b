"""`play --initial-state` and `--dump-actions`: start from a deployer's state, record what the policy saw and did.

With these a deployment is checked step by step against `play` with nothing but mjfleet's command line: the
deployer writes a state, `play` starts every environment's first episode from it and dumps environment 0's first
steps, and the deployer's own code, started from the same state, must compute the same observations and actions.
The file formats (docs/deploy.md, "Checking a deployment step by step"):

    initial state  .npz (numpy arrays) or .json (an object of lists): `qpos` (nq,), `qvel` (nv,) and, for a task
                   with a command, optionally `command` (its columns, e.g. vx, vy, wz), held until the task redraws it
    dump           .npz: `obs` (N, input size), `actions` (N, num_actions), `qpos` (N, nq), `qvel` (N, nv),
                   `episode_step` (N,); .jsonl: one JSON object per step with the same keys, each a list (or int)
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from mjfleet.errors import UsageError, first_line

INITIAL_STATE_SUFFIXES = (".npz", ".json")
DUMP_SUFFIXES = (".npz", ".jsonl")
_STATE_KEYS = ("qpos", "qvel", "command")


@dataclass(frozen=True)
class InitialState:
    """A state read from --initial-state: generalized positions and velocities, and the command if it gives one."""

    path: str
    qpos: np.ndarray
    qvel: np.ndarray
    command: np.ndarray | None


def read_initial_state(path: str) -> InitialState:
    """The state in `path`, checked for what needs no model (its suffix, keys, vectors of finite numbers): any
    problem is a UsageError naming the file."""
    file = pathlib.Path(path)
    where = f"--initial-state {path}"
    if file.suffix not in INITIAL_STATE_SUFFIXES:
        raise UsageError(
            f"{where}: use a .npz or a .json file (qpos, qvel and optionally command; docs/deploy.md)"
        )
    if not file.is_file():
        raise UsageError(f"{where}: no such file")
    try:
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as arrays:
                data: Any = {key: arrays[key] for key in arrays.files}
        else:
            data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:  # zipfile.BadZipFile and json.JSONDecodeError are ValueErrors
        raise UsageError(f"{where}: cannot read it ({first_line(exc)})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected an object with qpos, qvel and optionally command")
    missing = [key for key in ("qpos", "qvel") if key not in data]
    unknown = sorted(set(data) - set(_STATE_KEYS))
    if missing or unknown:
        problem = f"no {' or '.join(missing)}" if missing else f"unknown entries {', '.join(unknown)}"
        raise UsageError(f"{where}: {problem} (it holds qpos, qvel and optionally command)")
    vectors = {key: _vector(data[key], key, where) for key in _STATE_KEYS if key in data}
    return InitialState(path, vectors["qpos"], vectors["qvel"], vectors.get("command"))


def _vector(value: Any, key: str, where: str) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {key} is not a list of numbers") from None
    if array.ndim != 1:
        raise UsageError(f"{where}: {key} has shape {tuple(array.shape)}, not a vector")
    if not np.isfinite(array).all():
        raise UsageError(f"{where}: {key} holds a NaN or an infinity")
    return array


def check_fits(state: InitialState, env: Any, task: str) -> None:
    """A UsageError where `state` is not a state of `env`'s model (nq, nv) or gives a command the task lacks."""
    where = f"--initial-state {state.path}"
    for key, size, name in ((state.qpos, env.mj_model.nq, "nq"), (state.qvel, env.mj_model.nv, "nv")):
        if len(key) != size:
            kind = "qpos" if name == "nq" else "qvel"
            raise UsageError(f"{where}: {kind} has {len(key)} values, {task}'s model has {name} = {size}")
    if state.command is not None:
        commands = getattr(env, "commands", None)
        if commands is None:
            raise UsageError(f"{where}: {task} takes no command; drop the command entry")
        if len(state.command) != commands.shape[1]:
            raise UsageError(
                f"{where}: command has {len(state.command)} values, {task}'s has {commands.shape[1]}"
            )


def start_from(env: Any, state: InitialState) -> Any:
    """Every environment of `env`, just reset, put in `state` (and its command); returns the observations of it."""
    import torch

    if state.command is not None:  # before the observations, which show it
        env.commands[:] = torch.as_tensor(state.command, dtype=env.commands.dtype, device=env.device)
    as_tensor = {"dtype": env.sim.qpos.dtype, "device": env.device}
    return env.set_state(torch.as_tensor(state.qpos, **as_tensor), torch.as_tensor(state.qvel, **as_tensor))


def check_dump_path(path: str) -> pathlib.Path:
    """--dump-actions' file, checked before anything runs: a known suffix, in a writable folder that exists."""
    file = pathlib.Path(path)
    if file.suffix not in DUMP_SUFFIXES:
        raise UsageError(f"--dump-actions {path}: use a .npz or a .jsonl file (docs/deploy.md)")
    folder = file.parent
    if not folder.is_dir():
        raise UsageError(f"--dump-actions {path}: no such folder {folder}")
    if file.is_dir():
        raise UsageError(f"--dump-actions {path}: a folder, not a file")
    return file


class StepDump:
    """The policy `act`, recording environment 0's first `steps` calls: its input as the exported policy takes it
    (the actor's observation groups concatenated in order: policy.onnx's `obs`), the actions it returned (before
    clipping: policy.onnx's `actions`, unless --stochastic), the state it acted in and the step of its episode."""

    def __init__(self, act: Any, env: Any, groups: list[str], steps: int) -> None:
        self.act, self.env, self.groups, self.steps = act, env, list(groups), steps
        self.rows: list[dict[str, Any]] = []
        self.reset = getattr(act, "reset", None)  # a recurrent actor's state: evaluate resets it

    def __call__(self, obs: Any) -> Any:
        import torch

        actions = self.act(obs)
        if len(self.rows) < self.steps:
            sim = self.env.sim

            def copy(tensor: torch.Tensor) -> np.ndarray:  # on a CPU .numpy() would share the live buffer
                return tensor.to("cpu", copy=True).numpy()

            self.rows.append({
                "obs": copy(torch.cat([obs[group][0] for group in self.groups])),
                "actions": copy(actions[0]),
                "qpos": copy(sim.qpos[0]),
                "qvel": copy(sim.qvel[0]),
                "episode_step": int(self.env.episode_length_buf[0]),
            })  # fmt: skip
        return actions

    def write(self, path: pathlib.Path) -> None:
        """The recorded steps to `path` (.npz or .jsonl), replaced whole."""
        from mjfleet import atomic
        from mjfleet.runs.run_dir import float32_list

        if path.suffix == ".npz":
            with atomic.open(path, "wb") as f:
                np.savez(f, **{key: np.array([row[key] for row in self.rows]) for key in self.rows[0]})
        else:  # each float32 as the shortest text that reads back
            lines = [json.dumps({k: float32_list(v) if isinstance(v, np.ndarray) else v for k, v in row.items()})
                     for row in self.rows]  # fmt: skip
            atomic.write_text(path, "".join(line + "\n" for line in lines))
