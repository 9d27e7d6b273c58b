"""`robots fetch`: a third-party robot's MJCF and meshes, copied out of a published Python package into the cache.

The package is fetched by the user's own installer (uv, else pip) without its dependencies and never imported:
only the robot's folder is copied, minus Python files. The copy is assembled in a temporary folder beside its
destination and renamed into place, so an interrupted fetch leaves no robot folder behind.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from mjfleet.errors import UsageError
from mjfleet.robots.cache import SOURCE_FILE, fetched_dir, is_fetched

FETCH_TIMEOUT_S = 600
STALE_AFTER_S = 2 * FETCH_TIMEOUT_S
"""A temporary fetch folder this old belongs to no running fetch (each download gives up after FETCH_TIMEOUT_S)."""


@dataclasses.dataclass(frozen=True)
class PackageSource:
    """Where a robot's files are published: a folder inside a Python package's wheel."""

    package: str
    version: str
    folder: str
    """The folder in the wheel whose contents become the robot's folder, e.g. mjlab/asset_zoo/.../xmls."""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def fetch(name: str, source: PackageSource, force: bool = False) -> Path:
    """Fetch robot `name` from `source` into the cache (a no-op when it is there, unless `force`); its folder."""
    target = fetched_dir(name)
    if is_fetched(name) and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{name}.fetching."
    for stale in target.parent.glob(prefix + "*"):  # left by a fetch that was killed (SIGKILL, power loss)
        if time.time() - stale.stat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=prefix) as tmp:
        unpacked = Path(tmp) / "package"
        _download(name, source, unpacked)
        found = unpacked / source.folder
        if not found.is_dir():
            raise UsageError(
                f"fetching {name}: {source.requirement} has no folder {source.folder}: is the version right?"
            )
        staged = Path(tmp) / name
        shutil.copytree(found, staged, ignore=shutil.ignore_patterns("*.py", "*.pyc", "__pycache__"))
        record = {
            **dataclasses.asdict(source),
            "fetched": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        (staged / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
        # --force, or a folder without its SOURCE.json (not written by a fetch): moved aside, then dropped
        if target.exists():
            target.rename(Path(tmp) / "previous")
        try:
            staged.rename(target)
        except OSError:
            if not is_fetched(name):  # not another fetch that finished first
                raise
    return target


def _download(name: str, source: PackageSource, into: Path) -> None:
    """The package's files under `into`: uv unpacks the wheel there; pip downloads it and the folder is unzipped."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv:
        command = [uv, "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(into)]
        _run(name, [*command, "--python", sys.executable, source.requirement], "uv")
        return
    if _has_pip():
        wheels = into.parent / "wheels"
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        _run(name, [*command, "--dest", str(wheels), source.requirement], "pip")
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if m.startswith(source.folder.rstrip("/") + "/")]
                archive.extractall(into, members)
        return
    raise UsageError(f"fetching {name} needs uv or pip to download {source.requirement}: install uv (or pip)")


def _has_pip() -> bool:
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    return probe.returncode == 0


def _run(name: str, command: list[str], installer: str) -> None:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        reason = f"no answer in {FETCH_TIMEOUT_S} s"
    else:
        if result.returncode == 0:
            return
        reason = _reason(result.stderr) or f"exit status {result.returncode}"
    raise UsageError(
        f"fetching {name}: {installer} could not download {command[-1]} ({reason}): check the network and "
        f"{installer}'s package index settings, then run `uv run robots fetch {name}` again"
    )


def _reason(stderr: str) -> str:
    """The installer's error in one line: its first error line, the deepest cause and its hint (uv and pip both
    write `error:`; uv adds `cause:` lines, innermost last, and a `hint:`)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    picked = [line for line in lines if line.lower().startswith("error")][:1]
    picked += [line.removeprefix("cause:").strip() for line in lines if line.startswith("cause:")][-1:]
    picked += [line for line in lines if line.startswith("hint:")][:1]
    return "; ".join(picked or lines[-1:])
