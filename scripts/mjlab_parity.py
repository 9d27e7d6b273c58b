"""mjfleet's velocity recipe beside mjlab 1.6's, term by term, on mjlab's recorded states.

This file holds the mjlab-launching half: `record` makes (or reuses) mjlab's own virtual environment, as
scripts/vs_mjlab.py does, and runs scripts/mjlab_record.py there in a clean environment, so that mjlab is never
imported into mjfleet's. The recording's contents are described in that script's docstring. The comparison with
mjfleet's term functions is to come.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
RECORDER = HERE / "mjlab_record.py"
MJLAB_VERSION = "1.6.0"
MODES = ("trajectory", "distributions")
ROBOTS = ("g1", "go1")


def _vs_mjlab():
    """scripts/vs_mjlab.py as a module (scripts/ is no package)."""
    if "vs_mjlab" in sys.modules:
        return sys.modules["vs_mjlab"]
    spec = importlib.util.spec_from_file_location("vs_mjlab", HERE / "vs_mjlab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_mjlab"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def mjlab_env(python: pathlib.Path) -> dict[str, str]:
    """The environment mjlab's Python runs in: ours without PYTHONPATH or VIRTUAL_ENV, and warp's kernel cache
    inside mjlab's virtual environment (its mujoco_warp is not mjfleet's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "WARP_CACHE_PATH")}
    env["WARP_CACHE_PATH"] = str(python.parent.parent / "warp-cache")
    return env


def record(
    robot: str,
    mode: str,
    out: pathlib.Path | str,
    steps: int = 60,
    num_envs: int = 4,
    seed: int = 0,
    *,
    venv: pathlib.Path | None = None,
    timeout_s: float | None = None,
) -> pathlib.Path:
    """Record mjlab's side for one robot: a trajectory (.npz; `steps` env steps of `num_envs` envs) or the
    command and event distributions (.json; `num_envs` draws a round, `steps` unused). Returns `out`.

    Raises SystemExit with the recorder's last lines if it fails."""
    if robot not in ROBOTS:
        raise ValueError(f"robot must be one of {ROBOTS}, not {robot!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if num_envs < 1 or (mode == "trajectory" and steps < 1):
        raise ValueError("num_envs and steps must be at least 1")
    vs = _vs_mjlab()
    if venv is None:
        from mjfleet.environ import cache_dir

        venv = cache_dir() / f"mjlab-{MJLAB_VERSION}"
    python = vs.mjlab_python(pathlib.Path(venv), MJLAB_VERSION)
    out = pathlib.Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [str(python), str(RECORDER), mode, robot, "--num-envs", str(num_envs), "--seed", str(seed),
               "--out", str(out)]  # fmt: skip
    if mode == "trajectory":
        command += ["--steps", str(steps)]
    proc = subprocess.run(command, capture_output=True, text=True, env=mjlab_env(python), timeout=timeout_s)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(
            f"mjlab_parity.py: error: mjlab_record.py {mode} {robot} failed ({proc.returncode}):\n{tail}"
        )
    return out
