"""What a run was made with, for params/: library versions and, inside a git repository, its commit and diff."""

from __future__ import annotations

import importlib.metadata
import pathlib
import platform
import subprocess

DISTRIBUTIONS = ("mjfleet", "torch", "warp-lang", "mujoco", "mujoco-warp", "rsl-rl-lib", "torchrunx")


def versions() -> dict[str, str | None]:
    """The installed version of Python and of each library the results depend on (None: not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def git_state(directory: str | pathlib.Path = ".") -> tuple[dict[str, str | bool], str] | None:
    """({"commit", "dirty"}, the working tree's diff against that commit) of the repository `directory` is in,
    or None outside one (or without git). Untracked files are not in the diff."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=directory, capture_output=True, text=True, check=True, timeout=30
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        diff = git("diff", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(diff)}, diff
