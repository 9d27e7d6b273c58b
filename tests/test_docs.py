"""Every shell command shown in README.md and docs/*.md is checked, so a renamed flag or task breaks the build.

Commands are parsed and validated by the real command-line code (task names, flags, values), without training;
commands that train for real at tiny sizes are exercised by tests/test_cli.py and friends.
"""

from __future__ import annotations

import pathlib
import re
import shlex
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_MJFLEET = (
    "pip",
    "git",
    "cd",
    "export",
    "bash",
    "nvidia-smi",
    "tensorboard",
    "ls",
    "cat",
    "curl",
    "sbatch",
)


def shell_commands() -> list[tuple[str, str]]:
    """(file name, command) for every command line in ```bash blocks."""
    found = []
    for path in DOCS:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", path.read_text(), re.DOTALL):
            for line in block.splitlines():
                line = re.split(r"\s#\s", line)[0].strip()
                if line and not line.startswith("#"):
                    found.append((path.name, line))
    return found


COMMANDS = shell_commands()


def _is_mjfleet(command: str) -> bool:
    """Not a system command (pip, git, nvidia-smi, ...) nor `uv sync`: one that mjfleet itself runs."""
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words.pop(0)
    return bool(words) and words[0] not in NOT_MJFLEET and words[:2] != ["uv", "sync"]


MJFLEET_COMMANDS = [(doc, command) for doc, command in COMMANDS if _is_mjfleet(command)]


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 10
    assert any(cmd == "uv run train Cartpole-Balance" for _, cmd in COMMANDS)
    assert any(cmd == "uv run pytest" for _, cmd in COMMANDS)


def test_cli_reference_matches_the_commands_help():
    import runpy

    generator = runpy.run_path(str(ROOT / "scripts" / "gen_cli_docs.py"))
    expected = generator["render"]()
    assert (ROOT / "docs" / "cli.md").read_text() == expected, (
        "docs/cli.md is stale: run `uv run python scripts/gen_cli_docs.py`"
    )


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    return env, words


def _apply_env(env: dict[str, str], monkeypatch, request) -> None:
    """The command's VAR=value prefix, as the shell would set it (task modules imported as train would, into a
    copy of the task registry: afterwards registry and module cache are as before, whatever the test order)."""
    # imported before MJFLEET_TASK_MODULES is set, which it would otherwise load itself
    from mjfleet.tasks import registry

    for key, value in env.items():
        if key == "PYTHONPATH":
            monkeypatch.syspath_prepend(str(ROOT / value))
        monkeypatch.setenv(key, value)
    if "MJFLEET_TASK_MODULES" in env:
        import importlib

        monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))
        for module in env["MJFLEET_TASK_MODULES"].split(","):
            sys.modules.pop(module, None)
            request.addfinalizer(lambda name=module: sys.modules.pop(name, None))
            importlib.import_module(module)


def _trains_in_one_cpu_process(command: str) -> bool:
    """A documented `train` command that can really run here: one CPU process, no run to resume."""
    _, words = _split_env(shlex.split(command))
    if words[:3] != ["uv", "run", "train"] or len(words) < 4 or "--help" in words:
        return False
    args = words[4:]
    if any(a.split("=", 1)[0] in ("--resume", "--load-run", "--checkpoint", "--hosts") for a in args):
        return False
    if any(a.split("=", 1)[0] in ("--wandb-run-path", "--video") for a in args):
        return False  # a wandb run to resume; a GL backend fixed when mujoco was imported: tests/test_runs.py
    if "--cpu-workers" in args and args[args.index("--cpu-workers") + 1] != "1":
        return False  # several workers: tests/test_distributed.py runs that path for real
    return True


# Distinct commands only: the same command in two pages is run once.
TRAINABLE = sorted({command for _, command in COMMANDS if _trains_in_one_cpu_process(command)})
TINY = ["--gpu-ids", "None", "--num-envs", "4", "--max-iterations", "1", "--agent.num-steps-per-env", "4"]
OVERRIDDEN = {"--gpu-ids", "--num-envs", "--env.num-envs", "--max-iterations", "--agent.max-iterations"}
OVERRIDDEN |= {"--agent.num-steps-per-env", "--logs-root", "--logger"}
"""Flags whose documented values the tiny run replaces (TINY, and the test's --logs-root and --logger)."""


def _tiny_run(command: str) -> tuple[dict[str, str], list[str]]:
    """(environment, train's arguments) of a documented command at tiny size: the documented flags that TINY does
    not replace (a task given as --task is the positional task, as train reads it), then TINY."""
    env, words = _split_env(shlex.split(command))
    args, kept = words[3:], []
    while args:
        word = args.pop(0)
        flag = word.split("=", 1)[0]
        if flag == "--task" and "=" not in word:
            kept.insert(0, args.pop(0))
        elif flag == "--task":
            kept.insert(0, word.split("=", 1)[1])
        elif flag in OVERRIDDEN:
            while "=" not in word and args and not args[0].startswith("--"):
                args.pop(0)  # its values (--gpu-ids takes several)
        else:
            kept.append(word)
    return env, [*kept, *TINY]


# Documented commands that differ only in what TINY replaces train alike: each distinct tiny run is run once.
TINY_RUNS = sorted(
    {shlex.join([*(f"{k}={v}" for k, v in env.items()), *args]) for env, args in map(_tiny_run, TRAINABLE)}
)


@pytest.mark.parametrize("tiny_run", TINY_RUNS)
def test_documented_train_command_trains_at_tiny_size(tiny_run, monkeypatch, tmp_path, request):
    """The documented flags, with tiny sizes on CPU in place of the documented ones: one real iteration and a
    checkpoint."""
    from mjfleet.cli.train import main

    env, args = _split_env(shlex.split(tiny_run))
    _apply_env(env, monkeypatch, request)
    monkeypatch.chdir(tmp_path)
    main([*args, "--logs-root", str(tmp_path / "logs"), "--logger", "none"])
    assert len(list((tmp_path / "logs").glob("*/*/model_1.pt"))) == 1


def test_the_docs_show_commands_that_train_for_real():
    assert len(TRAINABLE) >= 4
    assert any("Quadruped" in c for c in TRAINABLE) and any("Pendulum" in c for c in TRAINABLE)


@pytest.mark.parametrize(("doc", "command"), MJFLEET_COMMANDS, ids=[f"{d}: {c}" for d, c in MJFLEET_COMMANDS])
def test_documented_command_is_valid(doc, command, monkeypatch, tmp_path, request):
    env, words = _split_env(shlex.split(command))
    assert words[:2] == ["uv", "run"], f"{doc}: unexpected command {command!r}"
    program, args = words[2], words[3:]
    _apply_env(env, monkeypatch, request)
    monkeypatch.chdir(tmp_path)
    # Documented GPU commands must parse as if on a machine with 8 GPUs.
    monkeypatch.setattr("mjfleet.launch.devices._visible_gpu_count", lambda: 8)
    validate = VALIDATORS.get(program)
    assert validate is not None, f"{doc}: no check for `uv run {program}`"
    validate(args)


def _train(args: list[str]) -> None:
    from mjfleet.cli.train import parse_args, resolve

    if "--help" in args or not args:
        _expect_clean_exit(lambda: parse_args(args))
        return
    resumes = ("--resume", "--load-run", "--checkpoint", "--wandb-run-path")
    if any(a.split("=", 1)[0] in resumes for a in args):
        parse_args(args)  # resolving needs an existing run; tests/test_runs.py resumes for real
        return
    resolve(*parse_args(args))


def _play(args: list[str]) -> None:
    from mjfleet.cli.play import check_flags, parse_args

    if "--help" in args or not args:
        _expect_clean_exit(lambda: parse_args(args))
        return
    check_flags(parse_args(args)[1])


def _bench(args: list[str]) -> None:
    from mjfleet.cli.bench import parse_args, resolve

    if "--help" in args or not args:
        _expect_clean_exit(lambda: parse_args(args))
        return
    resolve(*parse_args(args))


def _plot(args: list[str]) -> None:
    from mjfleet.cli.plot import parse_args

    parse_args(args)


def _tasks(args: list[str]) -> None:
    from mjfleet.cli.tasks import main

    main(args)


def _pytest(args: list[str]) -> None:
    assert all(not a.startswith("-") or a in ("-m", "-q", "-x", "-k") for a in args), args


def _python(args: list[str]) -> None:
    script = ROOT / args[0]
    assert script.is_file(), f"{args[0]} does not exist"


def _expect_clean_exit(fn) -> None:
    with pytest.raises(SystemExit) as info:
        fn()
    assert info.value.code == 0


VALIDATORS = {
    "train": _train,
    "tasks": _tasks,
    "play": _play,
    "plot": _plot,
    "bench": _bench,
    "pytest": _pytest,
    "python": _python,
}


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "110")
