"""A robot description that lives in a file of its own (`train Velocity-Flat --robot my_robot.py`).

The file is plain Python that defines one `RobotDescription` at module level (any name). It is run once per
process and path; a worker of a multi-worker run loads the same file again, by the absolute path its job carries.
A relative `mjcf` (with `fetched=None`) is taken from the file's folder, so a description and its MJCF travel
together. Every failure is a one-line `UsageError` naming the file.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import sys

from mjfleet.errors import UsageError, first_line
from mjfleet.robots.description import RobotDescription

_loaded: dict[pathlib.Path, RobotDescription] = {}
"""Descriptions already loaded in this process, by resolved path: a file's code runs once."""


def load_robot_file(path: str | pathlib.Path, given_as: str = "--robot") -> RobotDescription:
    """The one RobotDescription `path` defines (its relative `mjcf` made absolute); UsageError when the file is
    missing, is not Python, fails to run, or defines no description or several. `given_as`: the argument the user
    gave the path to, which a missing or non-Python file's message names (`--robot`, `robots show`'s `show`)."""
    file = pathlib.Path(path).expanduser().resolve()
    if file in _loaded:
        return _loaded[file]
    if not file.is_file():
        raise UsageError(
            f"{given_as}: no file {path}: give the path of a Python file that defines a RobotDescription"
        )
    if file.suffix != ".py":
        raise UsageError(f"{given_as}: {path} is not a Python file (.py) defining a RobotDescription")
    name = f"mjfleet_robot_{file.stem}_{abs(hash(str(file))):x}"
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None  # a .py file always has one
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    try:
        spec.loader.exec_module(module)
    except UsageError as exc:  # an invalid field: the description's own one-line message
        sys.modules.pop(name, None)
        raise UsageError(f"{file.name}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the user's file raises is reported as its failure
        sys.modules.pop(name, None)
        raise UsageError(f"{file.name} failed to load: {type(exc).__name__}: {first_line(exc)}") from None
    found = {key: value for key, value in vars(module).items() if isinstance(value, RobotDescription)}
    if not found:
        raise UsageError(
            f"{file.name} defines no RobotDescription: add one at module level, "
            "e.g. ROBOT = RobotDescription(...) (docs/bring-your-robot.md)"
        )
    if len({id(v) for v in found.values()}) > 1:
        raise UsageError(f"{file.name} defines {len(found)} RobotDescriptions ({', '.join(found)}): keep one")
    description = next(iter(found.values()))
    if description.fetched is None and not pathlib.Path(description.mjcf).expanduser().is_absolute():
        description = dataclasses.replace(description, mjcf=str(file.parent / description.mjcf))
    _loaded[file] = description
    return description
