"""Name an object as "package.module:attr" and import it only when it is used.

The launching process of a multi-worker run, `uv run tasks` and `--help` only need configs; the simulator,
rsl_rl and tensordict are imported by the workers, when they build environments and runners.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def import_object(path: str) -> Any:
    """The object named "package.module:attr", importing its module now."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"{path!r} must read 'package.module:attr'")
    return getattr(importlib.import_module(module), attr)


def lazy_exports(module_name: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` that imports each name of `exports` ("package.module:attr") on first use."""

    def __getattr__(name: str) -> Any:
        path = exports.get(name)
        if path is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return import_object(path)

    return __getattr__
