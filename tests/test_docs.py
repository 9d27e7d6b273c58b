"""Every shell command shown in README.md and docs/*.md is checked, so a renamed flag or task breaks the build.

A command is a line a reader would copy: in a ```bash, ```sh, ```shell or ```console block (a console block that
shows `$ ` prompts: the prompted lines only), or an indented (4-space) line outside code blocks that starts with
`uv run`. Commands are parsed and validated by the real command-line code (task names, flags, values), without
training; the documented `train` commands also train for real at a tiny size, and tests/test_quickstart.py runs
the quickstart's commands in order.
"""

from __future__ import annotations

import pathlib
import re
import shlex
import sys

import pytest
from helpers import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
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
)


SETUP = {
    "uv pip install examples/pendulum_plugin": "MJFLEET_TASK_MODULES=pendulum PYTHONPATH=examples",
}
"""A documented command that changes what the commands after it in the same block see, and the environment that
has the same effect for the test (installing the tutorial's plug-in registers the module MJFLEET_TASK_MODULES
names; tests/test_examples.py installs the plug-in for real)."""


def _command_lines(block: str, prompted: bool) -> list[str]:
    """The commands of one code block: comments dropped, `\\` continuations joined, and in a block with `$ `
    prompts only the prompted lines (the others are output)."""
    lines, joined = [], ""
    for raw in block.splitlines():
        if prompted:
            if not raw.startswith("$ ") and not joined:
                continue
            raw = raw.removeprefix("$ ")
        line = re.split(r"\s#\s", raw)[0].strip()
        if line.endswith("\\"):
            joined += line[:-1].strip() + " "
            continue
        line, joined = (joined + line).strip(), ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def commands_in(text: str) -> list[str]:
    """Every command line a reader would copy from a Markdown page, in page order (module docstring)."""
    found: list[str] = []
    fence = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
    position = 0
    for match in [*fence.finditer(text), None]:
        prose = text[position : match.start() if match else len(text)]
        found += _command_lines(
            "\n".join(line for line in prose.splitlines() if re.match(r" {4,}uv run ", line)), False
        )
        if match is None:
            break
        position = match.end()
        language, block = match.groups()
        if language in ("bash", "sh", "shell", "console"):
            prompted = language == "console" and any(line.startswith("$ ") for line in block.splitlines())
            setup = ""
            for line in _command_lines(block, prompted):
                found.append(f"{setup} {line}".strip())
                setup = SETUP.get(line, setup)
    return found


def shell_commands() -> list[tuple[str, str]]:
    """(file name, command) for every command line of README.md and docs/*.md."""
    return [(path.name, command) for path in DOCS for command in commands_in(path.read_text())]


COMMANDS = shell_commands()


def _is_mjfleet(command: str) -> bool:
    """Not a system command (pip, git, nvidia-smi, ...) nor `uv sync`: one that mjfleet itself runs."""
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words.pop(0)
    return bool(words) and words[0] not in NOT_MJFLEET and words[:2] not in (["uv", "sync"], ["uv", "pip"])


MJFLEET_COMMANDS = [(doc, command) for doc, command in COMMANDS if _is_mjfleet(command)]


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 10
    assert any(cmd == "uv run train Cartpole-Balance" for _, cmd in COMMANDS)
    assert any(cmd == "uv run pytest" for _, cmd in COMMANDS)
    assert any(cmd.startswith("sbatch ") for _, cmd in MJFLEET_COMMANDS)
    # the other ways a page shows a command are read too
    sim2sim = (
        "uv run --extra deploy python examples/sim2sim.py logs/<experiment>/<run>/exported --command 0.8 0 0"
    )
    assert ("deploy.md", sim2sim) in COMMANDS
    assert any(
        doc == "adding-a-task.md" and cmd.endswith("uv run tasks") and "MJFLEET" in cmd
        for doc, cmd in COMMANDS
    )


def test_commands_are_read_from_every_kind_of_block():
    text = """Run it:

    uv run train Cartpole-Balance --seed 1    # a comment
    python not-this.py

```console
$ uv run tasks
Cartpole-Balance  ...
$ uv run train Cartpole-Balance \\
    --max-iterations 3
```

```text
uv run play Cartpole-Balance
```

```console
uv pip install examples/pendulum_plugin
uv run tasks  # lists it
```
"""
    assert commands_in(text) == [
        "uv run train Cartpole-Balance --seed 1",
        "uv run tasks",
        "uv run train Cartpole-Balance --max-iterations 3",
        "uv pip install examples/pendulum_plugin",
        "MJFLEET_TASK_MODULES=pendulum PYTHONPATH=examples uv run tasks",
    ]


def test_cli_reference_matches_the_commands_help():
    # In a process of its own, as a user runs it: in the full suite the in-process rendering differed from a fresh
    # process's (state left by earlier tests that print help texts in this process reached the formatter).
    result = run_cli(sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check", cwd=ROOT)
    assert result.returncode == 0, "docs/cli.md is stale: run `uv run python scripts/gen_cli_docs.py`"


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


def _fetched_robots_for(args: list[str], monkeypatch, request) -> list[str]:
    """`args` with the checkout's Python files (a robot file, `--robot examples/my_go1.py`) as absolute paths: the
    test runs in a directory of its own. A command that needs a fetched robot (a task that `requires` one, or
    `--robot`) sees the session's robot cache (tests/conftest.py: `robot_cache`), and a robot file's task
    registers into a copy of the task registry, as a task module's does."""
    from mjfleet.tasks import get_task, registry, task_names

    args = [str(ROOT / a) if a.endswith(".py") and (ROOT / a).is_file() else a for a in args]
    fetched = {name for name in task_names() if get_task(name).requires is not None}
    if "--robot" in args or fetched & set(args):
        monkeypatch.setenv("MJFLEET_CACHE_DIR", str(request.getfixturevalue("robot_cache")))
        monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))
    return args


def _trains_in_one_cpu_process(command: str) -> bool:
    """A documented `train` command that can really run here: one CPU process, no run to resume."""
    _, words = _split_env(shlex.split(command))
    if words[:3] != ["uv", "run", "train"] or len(words) < 4 or "--help" in words:
        return False
    args = words[4:]
    if any(
        a.split("=", 1)[0] in ("--resume", "--load-run", "--checkpoint", "--hosts", "--teacher") for a in args
    ):
        return False
    if any(a.split("=", 1)[0] in ("--wandb-run-path", "--video") for a in args):
        return False  # a wandb run to resume; a GL backend fixed when mujoco was imported: tests/test_resume.py, tests/test_train_video.py
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
    args = _fetched_robots_for(args, monkeypatch, request)
    monkeypatch.chdir(tmp_path)
    main([*args, "--logs-root", str(tmp_path / "logs"), "--logger", "none"])
    assert len(list((tmp_path / "logs").glob("*/*/model_1.pt"))) == 1


def test_the_docs_show_commands_that_train_for_real():
    assert len(TRAINABLE) >= 4
    assert any("Quadruped" in c for c in TRAINABLE) and any("Pendulum" in c for c in TRAINABLE)


@pytest.mark.parametrize(("doc", "command"), MJFLEET_COMMANDS, ids=[f"{d}: {c}" for d, c in MJFLEET_COMMANDS])
def test_documented_command_is_valid(doc, command, monkeypatch, tmp_path, request):
    env, words = _split_env(shlex.split(command))
    if words[0] == "sbatch":
        program, args = _sbatch_args(words)
    else:
        assert words[:2] == ["uv", "run"], f"{doc}: unexpected command {command!r}"
        program, args = _uv_run(words)
    _apply_env(env, monkeypatch, request)
    args = _fetched_robots_for(args, monkeypatch, request)
    monkeypatch.chdir(tmp_path)
    # Documented GPU commands must parse as if on a machine with 8 GPUs.
    monkeypatch.setattr("mjfleet.launch.devices._visible_gpu_count", lambda: 8)
    validate = VALIDATORS.get(program)
    assert validate is not None, f"{doc}: no check for `uv run {program}`"
    validate(args)


def _uv_run(words: list[str]) -> tuple[str, list[str]]:
    """(program, its arguments) of `uv run [--extra NAME ...] program args...`; every extra named must be one that
    pyproject.toml declares."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    words = words[2:]
    while words and words[0].split("=", 1)[0] == "--extra":
        option = words.pop(0)
        name = option.split("=", 1)[1] if "=" in option else words.pop(0)
        assert name in extras, f"`uv run --extra {name}`: pyproject.toml has no such extra ({sorted(extras)})"
    assert words and not words[0].startswith("-"), f"unexpected `uv run` option in {words}"
    return words[0], words[1:]


def _sbatch_args(words: list[str]) -> tuple[str, list[str]]:
    """`sbatch [options] <script>.sbatch <Task> [flags]`: the program its batch script runs (`uv run train "$@"`
    in every Slurm task, or `uv run sweep "$@"` in every array task) and the arguments it passes to it."""
    script = next((i for i, word in enumerate(words) if word.endswith(".sbatch")), None)
    assert script is not None, f"no batch script in {words}"
    path = ROOT / words[script]
    assert path.is_file(), f"{words[script]} does not exist"
    programs = [p for p in ("train", "sweep") if f'uv run {p} "$@"' in path.read_text()]
    assert programs, f"{words[script]} no longer runs `uv run train` or `uv run sweep` on its arguments"
    return programs[0], words[script + 1 :]


def _train(args: list[str]) -> None:
    from mjfleet.cli.train import parse_args, resolve

    if "--help" in args or not args:
        _expect_clean_exit(lambda: parse_args(args))
        return
    resumes = ("--resume", "--load-run", "--checkpoint", "--wandb-run-path", "--teacher")
    if any(a.split("=", 1)[0] in resumes for a in args):
        parse_args(args)  # resolving needs an existing run; tests/test_resume.py resumes for real
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


def _sweep(args: list[str]) -> None:
    from mjfleet.cli.sweep import check_only, parse

    if "--help" in args or not args:
        _expect_clean_exit(lambda: parse(args))
        return
    if args[0] in ("--resume", "--report", "--dashboard"):
        assert len(args) >= 2, (
            args
        )  # the sweep directory; tests/test_sweep_run.py resumes and serves for real
        return
    check_only(args)  # everything checked before a trial starts, but the objective's preflight evaluation


def _tasks(args: list[str]) -> None:
    from mjfleet.cli.tasks import main

    main(args)


def _robots(args: list[str]) -> None:
    from mjfleet.cli.robots import parse_args

    if "--help" in args or not args:
        _expect_clean_exit(lambda: parse_args(args))
        return
    parse_args(args)  # names checked; nothing fetched: tests/test_robots_cli.py fetches for real


def _pytest(args: list[str]) -> None:
    assert all(not a.startswith("-") or a in ("-m", "-q", "-x", "-k") for a in args), args


def _ruff(args: list[str]) -> None:
    assert args[0] in ("check", "format"), args
    assert all(a.startswith("-") or (ROOT / a).exists() for a in args[1:]), args


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
    "robots": _robots,
    "sweep": _sweep,
    "pytest": _pytest,
    "python": _python,
    "ruff": _ruff,
}


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "110")


# --- Figures name their measurement --------------------------------------------------------------------------------
# A throughput or time figure reads as current unless its paragraph says when (a date), on what code (a commit) or
# points to docs/benchmarks.md, where every figure is dated: so a stale number cannot pass for a current one.

NUMBER = r"(?<![\w.,])\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"{NUMBER}\s*[kM]?\s*(?:env-|world-|physics\s+)?steps/s"  # throughput
    rf"|{NUMBER}x\s+(?:faster|slower)\b"  # speed ratios
    rf"|(?i:speed-?up|scal(?:es|ing))[^.|\n]{{0,20}}?{NUMBER}x\b"  # scaling over workers
    rf"|{NUMBER}\s*%\s+of\s+(?:the\s+|its\s+|an?\s+)?(?:physics(?:'s?)?\s+)?(?:bound|speed|iteration|update)\b"
    rf"|{NUMBER}\s*(?:min|minutes)\b"  # wall clock
    rf"|{NUMBER}\s*s\s+of\s+training\b"
)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
FIGURE_DOCS = [path for path in DOCS if path.name != "cli.md"]  # cli.md is generated from --help


def paragraphs(text: str) -> list[str]:
    """Blocks between blank lines; a fenced code block is one block, and a table belongs to the paragraph above it
    (its caption)."""
    blocks: list[str] = []
    current: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and not line.strip():
            if current:
                blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    merged: list[str] = []
    for block in blocks:
        if block.startswith("|") and merged:
            merged[-1] += "\n" + block
        else:
            merged.append(block)
    return merged


def undated_figures(text: str, is_benchmarks_page: bool = False) -> list[str]:
    """The figures of every paragraph that names neither a date, a commit, nor (outside that page) benchmarks.md."""
    found = []
    for block in paragraphs(text):
        figures = [m.group(0) for m in FIGURE.finditer(block)]
        if not figures or DATE.search(block) or COMMIT.search(block):
            continue
        if not is_benchmarks_page and "benchmarks.md" in block:
            continue
        found.extend(figures)
    return found


def test_a_figure_without_its_date_is_caught():
    assert undated_figures("Two workers train at 5,300 env-steps/s on 2 cores.") == ["5,300 env-steps/s"]
    assert undated_figures("Cartpole trains 16x faster than mjlab.") == ["16x faster"]
    assert undated_figures("The quadruped trains at 79% of the physics bound.") == [
        "79% of the physics bound"
    ]
    assert undated_figures("It walks within 15 minutes.") == ["15 minutes"]
    assert undated_figures("| workers | speed-up |\n|---|---|\n| 2 | 1.9x |") == []  # a bare number: no unit
    assert undated_figures("Scaling:\n\n| workers | speed-up |\n|---|---|\n| 2 | 1.9x |") == []
    assert undated_figures("Speed-up 1.87x with two workers.") == ["Speed-up 1.87x"]
    # a date in the next paragraph does not date this one; a table is dated by its caption
    assert undated_figures("It trains at 2,900 env-steps/s.\n\nMeasured on 2026-11-24.") == [
        "2,900 env-steps/s"
    ]
    assert (
        undated_figures("On 2026-11-24:\n\n| envs | training |\n|---|---|\n| 256 | 2,900 env-steps/s |") == []
    )
    assert undated_figures("| envs | training |\n|---|---|\n| 256 | 2,900 env-steps/s |") == [
        "2,900 env-steps/s"
    ]


def test_a_figure_with_its_date_commit_or_benchmarks_link_passes():
    assert undated_figures("It trained at 5,300 env-steps/s (2026-11-24).") == []
    assert undated_figures("It trained at 5,300 env-steps/s at 934dff1.") == []
    assert undated_figures("It trains at 5,300 env-steps/s ([benchmarks.md](benchmarks.md)).") == []
    # benchmarks.md itself must date its figures
    text = "It trains at 5,300 env-steps/s (see benchmarks.md)."
    assert undated_figures(text, is_benchmarks_page=True) == ["5,300 env-steps/s"]
    # physical facts and settings are not measurements of speed
    assert undated_figures("Episodes last 20 s; joints beyond 90 % of their range are penalised.") == []


@pytest.mark.parametrize("path", FIGURE_DOCS, ids=[p.name for p in FIGURE_DOCS])
def test_every_figure_names_when_it_was_measured(path):
    undated = undated_figures(path.read_text(), is_benchmarks_page=path.name == "benchmarks.md")
    assert undated == [], f"{path.name}: figures without a date, commit or benchmarks.md link: {undated}"


def test_the_benchmarks_page_is_current_and_short():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "## Not measured" in text
    assert "history/benchmarks-log.md" in text


# --- Numbers and names a page repeats from the tool ----------------------------------------------------------------

EXPORT_FILES = ("policy.onnx", "policy.pt", "policy.json")
"""What every export writes beside the MJCF (mjfleet.deploy.export.export_policy)."""


def export_listings_without_the_model(text: str) -> list[str]:
    """The paragraphs that list the export folder's files but leave out the model file it writes beside them."""
    from mjfleet.deploy.metadata import MJCF_FILE

    listings = [block for block in paragraphs(text) if all(name in block for name in EXPORT_FILES)]
    return [block.strip().splitlines()[0] for block in listings if MJCF_FILE not in block]


def test_an_export_listing_without_the_model_is_caught():
    listing = "exported/\n  policy.onnx policy.pt policy.json"
    assert export_listings_without_the_model(listing) == ["exported/"]
    assert export_listings_without_the_model("policy.onnx, policy.pt, policy.json and model.xml") == []


@pytest.mark.parametrize("path", FIGURE_DOCS, ids=[p.name for p in FIGURE_DOCS])
def test_a_page_that_lists_the_exported_files_lists_them_all(path):
    missing = export_listings_without_the_model(path.read_text())
    assert missing == [], f"{path.name}: the export folder listed without model.xml: {missing}"


def test_the_documented_cpu_worker_defaults_are_the_tasks():
    from mjfleet.tasks import get_task, task_names

    text = " ".join((ROOT / "docs" / "distributed.md").read_text().split())
    assert "`--cpu-workers` defaults to the task's own count" in text
    for name in task_names():
        workers = get_task(name).cpu_workers
        if workers != 1:
            assert f"{workers} for {name}" in text, (
                f"distributed.md does not give {name}'s {workers} CPU workers"
            )


# --- Links -----------------------------------------------------------------------------------------------------------

LINKED_DOCS = [*DOCS, *sorted((ROOT / "docs" / "history").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path: pathlib.Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file, and explicit `<a id=...>` ones."""
    text = path.read_text()
    anchors = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.DOTALL), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("path", LINKED_DOCS, ids=[str(p.relative_to(ROOT)) for p in LINKED_DOCS])
def test_relative_links_reach_a_file_and_heading(path):
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    assert broken == [], f"{path.relative_to(ROOT)}: broken links {broken}"


PROJECT_PATH = re.compile(r"(?<![\w./-])((?:src|tests|scripts|examples|docs|\.ci)/[\w./-]*[\w/])")


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_files_the_docs_name_exist(path):
    """A file the docs point to (`tests/test_x.py`, `scripts/y.py`, `src/...`) is still there."""
    missing = [
        ref
        for ref in PROJECT_PATH.findall(path.read_text())
        if not (ROOT / ref).exists() and not (path.parent / ref).exists()
    ]
    assert missing == [], f"{path.name} names files that do not exist: {missing}"


def test_deploy_md_states_the_go1s_per_joint_action_scales_and_rotor():
    """deploy.md's described-robot actions and bring-your-robot.md's Go1 armature, from the Go1's description: 0.25 x
    effort limit / kp per joint, kp by the natural-frequency rule on the description's armature."""
    from mjfleet.robots.description import ACTION_SCALE_FACTOR
    from mjfleet.robots.unitree_go1 import HIP, KNEE

    deploy = (ROOT / "docs" / "deploy.md").read_text().replace("\n   ", " ")
    scales = [ACTION_SCALE_FACTOR * g.effort_limit / g.gains(g.armature)[0] for g in (HIP, KNEE)]
    assert (
        f"(the Go1: {scales[0]:.3f} rad per unit at the hips and thighs, {scales[1]:.3f} at the calves)"
        in deploy
    )
    assert "no ctrl range" in deploy and "`actions.ctrlrange` is null for every actuator" in deploy
    robot_page = (ROOT / "docs" / "bring-your-robot.md").read_text().replace("\n  ", " ")
    assert f"(the Go1's hips reflect {HIP.armature:.3f} kg m^2)" in robot_page
