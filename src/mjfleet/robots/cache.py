"""Where fetched robots live: one folder per robot under mjfleet's user cache, complete or absent."""

from __future__ import annotations

import json
import pathlib

from mjfleet.environ import cache_dir

SOURCE_FILE = "SOURCE.json"
"""Written into a robot's folder before it is moved into place: what was fetched, from which package."""


def robots_dir() -> pathlib.Path:
    """$MJFLEET_CACHE_DIR/robots (else $XDG_CACHE_HOME/mjfleet/robots, else ~/.cache/mjfleet/robots)."""
    return cache_dir() / "robots"


def fetched_dir(name: str) -> pathlib.Path:
    """The folder robot `name` is (or would be) fetched into."""
    return robots_dir() / name


def is_fetched(name: str) -> bool:
    """Whether robot `name` is in the cache (a folder there is complete: fetching moves it into place whole)."""
    return (fetched_dir(name) / SOURCE_FILE).is_file()


def fetched_source(name: str) -> dict | None:
    """What SOURCE.json says about a fetched robot (package, version, folder), None when not fetched."""
    try:
        return json.loads((fetched_dir(name) / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
