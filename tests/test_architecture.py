"""The layers docs/architecture.md draws, checked on the source: no module imports a layer above its own."""

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "mjfleet"

LAYERS = [
    # shared helpers (atomic: the one way to replace a file; ranking: which evaluated policy is best); model files
    {"errors", "environ", "atomic", "lazy", "ranking", "signals", "timing", "warp_log", "assets"},
    {"progress", "address"},  # long work's bar and lines; a local page's address line (they raise UsageError)
    {"sim", "robots"},  # robots/: a robot described as data, built into a MuJoCo model; its fetched files
    {"envs"},
    {"fleet", "runs"},  # the worker runtime (context, reducers, liveness) and rank 0's outputs, under rl/
    {"rl"},
    {"tasks"},  # a task is an environment plus its agent defaults (rl/config.py)
    {"evaluation", "deploy", "viewers"},  # deploy/: export and the shipped policies; viewers/: live views
    {"launch"},  # places workers and runs a function on them: above all that runs inside one
    {"train", "play", "sweep"},  # sweep/ runs train and play as subprocesses, importing neither
    {"bench"},  # beside cli/, importing nothing from it
    {"cli"},
]
LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}


def part_of_mjfleet(path: pathlib.Path, root: pathlib.Path = SRC) -> str:
    """The package (or top-level module) of mjfleet that `path` belongs to."""
    first = path.relative_to(root).parts[0]
    return first.removesuffix(".py")


def imported_parts(path: pathlib.Path) -> set[str]:
    """The parts of mjfleet that `path` imports, at any depth (imports inside functions count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {name.split(".")[1] for name in names if name.startswith("mjfleet.")}
    return found


def upward_imports(root: pathlib.Path = SRC) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        if path.parent == root and path.name == "__init__.py":
            continue
        here = part_of_mjfleet(path, root)
        for other in sorted(imported_parts(path) - {here}):
            if LEVEL[other] >= LEVEL[here]:
                problems.append(f"{path.relative_to(root)} ({here}) imports mjfleet.{other}")
    return problems


def test_every_part_of_mjfleet_has_a_layer():
    parts = {part_of_mjfleet(p) for p in SRC.rglob("*.py") if p.parent != SRC or p.name != "__init__.py"}
    assert parts <= set(LEVEL), f"add to LAYERS (and docs/architecture.md): {sorted(parts - set(LEVEL))}"


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports() == []


def test_an_upward_import_is_caught(tmp_path):
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "simulation.py").write_text("def f():\n    from mjfleet.rl import runner\n")
    assert upward_imports(tmp_path) == ["sim/simulation.py (sim) imports mjfleet.rl"]


RENAMES_ALLOWED = {
    "atomic.py": "the one way to replace a file atomically",
    "robots/fetch.py": "moves a whole fetched folder into place: a directory, which mjfleet.atomic does not write",
}
"""The modules that may rename files into place; every other writer goes through mjfleet.atomic."""


def renames(path: pathlib.Path) -> list[str]:
    """The calls in `path` that rename a file: os.replace/os.rename/os.renames/shutil.move (also imported by
    name), any `.rename(...)`, and a one-argument `.replace(target)` (Path.replace; str.replace takes two)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil"):
            names = {alias.name for alias in node.names} & {"replace", "rename", "renames", "move"}
            found += [(node.lineno, f"from {node.module} import {n}") for n in sorted(names)]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
        attr = node.func.attr
        module_call = (owner, attr) in {
            ("os", "replace"),
            ("os", "rename"),
            ("os", "renames"),
            ("shutil", "move"),
        }
        path_call = owner not in ("os", "shutil", "dataclasses") and (
            attr == "rename" or (attr == "replace" and len(node.args) == 1 and not node.keywords)
        )
        if module_call or path_call:
            found.append((node.lineno, f"{ast.unparse(node.func)}(...)"))
    return [f"{line}: {call}" for line, call in sorted(found)]


def renames_outside_atomic(root: pathlib.Path = SRC) -> list[str]:
    return [
        f"{p.relative_to(root).as_posix()}:{r}"
        for p in sorted(root.rglob("*.py"))
        if p.relative_to(root).as_posix() not in RENAMES_ALLOWED
        for r in renames(p)
    ]


def test_only_the_atomic_helper_renames_files_into_place():
    problems = renames_outside_atomic()
    assert problems == [], f"write through mjfleet.atomic (write_text, write_bytes, open, staged): {problems}"


def test_a_rename_is_caught(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "plots.py").write_text(
        "import os, dataclasses\n"
        "def f(tmp, out, cfg):\n"
        "    os.replace(tmp, out)\n"
        "    tmp.replace(out)\n"
        "    tmp.rename(out)\n"
        "    name = out.name.replace('-', '_')\n"
        "    return dataclasses.replace(cfg, num_envs=1)\n"
    )
    assert renames_outside_atomic(tmp_path) == [
        "runs/plots.py:3: os.replace(...)",
        "runs/plots.py:4: tmp.replace(...)",
        "runs/plots.py:5: tmp.rename(...)",
    ]
