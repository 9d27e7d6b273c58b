"""The layers docs/architecture.md draws, checked on the source: no module imports a layer above its own."""

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "mjfleet"

LAYERS = [
    # shared helpers (ranking: which evaluated policy is best); model files
    {"errors", "environ", "lazy", "ranking", "signals", "timing", "warp_log", "assets"},
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
