"""Robot models written in this project (MJCF text), shipped inside the package."""

from __future__ import annotations

import pathlib

ASSETS_DIR = pathlib.Path(__file__).resolve().parent


def asset_path(name: str) -> pathlib.Path:
    """Return the path of the asset file `name` in this folder, e.g. ``asset_path("quadruped.xml")``."""
    path = ASSETS_DIR / name
    if not path.is_file():
        available = sorted(p.name for p in ASSETS_DIR.iterdir() if p.is_file() and p.suffix != ".py")
        raise FileNotFoundError(
            f"no asset named {name!r} in {ASSETS_DIR}; available: {', '.join(available) or '(none)'}"
        )
    return path
