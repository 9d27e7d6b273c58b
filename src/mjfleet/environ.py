"""Environment variables: set for a while, then restored; the user cache folder they choose."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator


@contextlib.contextmanager
def environ_set(**values: str) -> Iterator[None]:
    """os.environ with `values` set inside; afterwards each variable is as before (removed if it was unset)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def cache_dir() -> pathlib.Path:
    """mjfleet's user cache: $MJFLEET_CACHE_DIR, else $XDG_CACHE_HOME/mjfleet, else ~/.cache/mjfleet."""
    root = os.environ.get("MJFLEET_CACHE_DIR")
    if root:
        return pathlib.Path(root)
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "mjfleet"
