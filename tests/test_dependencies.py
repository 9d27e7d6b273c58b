"""pyproject.toml declares exactly what the code imports: a missing declaration breaks a fresh install, an extra
one costs every install for nothing."""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]

USED_THROUGH_ANOTHER_PACKAGE = {
    "tensorboard": "torch.utils.tensorboard (runs/metrics.py) needs it",
    "onnx": "torch.onnx.export (deploy/export.py) needs it",
}
"""Declared distributions the code never imports by name but uses through another package's API."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> set[str]:
    """Top-level names of every absolute import in src/ (lazy ones inside functions included), minus stdlib."""
    names: set[str] = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "mjfleet"}


def distributions_of(module: str) -> set[str]:
    """The distributions that provide `module`; an optional one not installed here is named like its module."""
    found = importlib.metadata.packages_distributions().get(module) or [module]
    return {_canonical(d) for d in found}


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_canonical(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


def test_every_imported_third_party_module_is_declared():
    missing = {m for m in imported_modules() if not distributions_of(m) & declared()}
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"


def test_every_declared_dependency_is_imported_or_used_through_another_package():
    used = set().union(*(distributions_of(m) for m in imported_modules()))
    assert set(USED_THROUGH_ANOTHER_PACKAGE) <= declared()
    unused = declared() - used - set(USED_THROUGH_ANOTHER_PACKAGE)
    assert not unused, f"declared in pyproject.toml but never imported: {sorted(unused)}"
