"""The tutorial task in examples/ (docs/adding-a-task.md) registers from outside mjfleet and learns."""

import os
import pathlib
import shutil
import sys

import pytest
import torch
from helpers import missing_infrastructure, run_cli
from judge import SWAP_IN_ZERO_POLICY, against_baselines, clear_margin, runner_policy

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def test_tutorial_task_registers_through_mjfleet_task_modules():
    result = run_cli(
        "tasks", env={"MJFLEET_TASK_MODULES": "pendulum", "PYTHONPATH": str(EXAMPLES)}, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "Pendulum-Balance" in result.stdout


@pytest.fixture
def pendulum_registered(monkeypatch):
    """The example imported in this process, into a copy of the task registry: afterwards the registry and the
    module cache are as before, so later tests (the CLI reference, the documented commands that import the
    example themselves) do not depend on the test order."""
    from mjfleet.tasks import registry

    # (an earlier test's documented command may have imported it into the real registry already)
    tasks = {name: spec for name, spec in registry._TASKS.items() if name != "Pendulum-Balance"}
    monkeypatch.setattr(registry, "_TASKS", tasks)
    sys.modules.pop("pendulum", None)
    sys.path.insert(0, str(EXAMPLES))
    try:
        import pendulum  # noqa: F401 - registers Pendulum-Balance
    finally:
        sys.path.remove(str(EXAMPLES))
    yield
    sys.modules.pop("pendulum", None)


def test_tutorial_task_learns_to_balance(pendulum_registered):
    """Judged as tests/test_learning.py judges (its own evaluation against zero and random actions), not by the
    training log: clearly better than both, and no more falls than the better of them."""
    from mjfleet.evaluation import early_terminations
    from mjfleet.rl import FleetRunner
    from mjfleet.tasks import get_task

    spec = get_task("Pendulum-Balance")
    cfg = spec.env_config()
    cfg.num_envs = 128
    agent = spec.agent_config()
    agent.logger = "none"
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg), agent, None, "cpu", log_format="compact")
    if not SWAP_IN_ZERO_POLICY:
        runner.learn(30, init_at_random_ep_len=True)
    results = against_baselines("Pendulum-Balance", runner_policy(runner))
    assert results["trained"]["mean_return"] > clear_margin(results, runner.env.max_episode_length)
    fewest_falls = min(early_terminations(results["zero"]), early_terminations(results["random"]))
    assert early_terminations(results["trained"]) <= fewest_falls


# --- the same task as an installed plug-in (entry-point group `mjfleet.tasks`) ---------------------------------


def _install_plugin(tmp_path: pathlib.Path) -> pathlib.Path:
    """examples/pendulum_plugin installed with uv into a directory of its own (put on PYTHONPATH, where
    importlib.metadata finds its dist-info as it would in the venv), so the project's venv stays as it was.
    The sources are copied first: uv caches a local package's wheel by its path and pyproject.toml, and would
    otherwise not see an edited pendulum.py."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        missing_infrastructure("uv is not on PATH (.ci/run installs it)")
    source = tmp_path / "src"
    shutil.copytree(EXAMPLES / "pendulum_plugin", source / "pendulum_plugin")
    shutil.copy(EXAMPLES / "pendulum.py", source / "pendulum.py")
    site = tmp_path / "site"
    result = run_cli(
        uv, "pip", "install", "--quiet", "--no-deps", "--python", sys.executable, "--target", str(site),
        str(source / "pendulum_plugin"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return site


def _env_with(site: pathlib.Path) -> dict[str, str | None]:
    """`run_cli`'s changes to the environment: the plug-in's site on the path, no task modules by variable."""
    return {"MJFLEET_TASK_MODULES": None, "PYTHONPATH": str(site)}


def test_an_installed_plugin_package_registers_its_task_for_tasks_and_train(tmp_path):
    env = _env_with(_install_plugin(tmp_path))
    listed = run_cli("tasks", env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith("Pendulum-Balance")]
    assert line.endswith("[plug-in: mjfleet-pendulum 0.1.0]")
    trained = run_cli(
        "train", "Pendulum-Balance", "--gpu-ids", "None", "--num-envs", "8", "--max-iterations", "2",
        "--agent.num-steps-per-env", "8", "--logger", "none", env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    assert trained.stdout.strip().splitlines()[-1].startswith("done: 2 iterations")
    assert (next((tmp_path / "logs" / "pendulum_balance").iterdir()) / "model_2.pt").is_file()


def test_a_broken_plugin_is_one_line_naming_its_distribution_and_entry_point(tmp_path):
    # The metadata an installer writes, by hand: a distribution whose entry point names a missing module.
    dist_info = tmp_path / "site" / "broken_tasks-1.2.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-tasks\nVersion: 1.2\n")
    (dist_info / "entry_points.txt").write_text("[mjfleet.tasks]\nwalker = no_such_module\n")
    result = run_cli("train", "Cartpole-Balance", "--help", env=_env_with(tmp_path / "site"), timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    for needle in ("walker", "no_such_module", "broken-tasks 1.2", "mjfleet.tasks", "ModuleNotFoundError"):
        assert needle in line, line


def test_a_plugin_entry_point_naming_a_function_is_called_once(tmp_path, monkeypatch):
    from mjfleet.tasks import get_task, plugins, registry

    site = tmp_path / "site"
    (site / "more_tasks-0.1.dist-info").mkdir(parents=True)
    (site / "more_tasks-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: more-tasks\nVersion: 0.1\n"
    )
    (site / "more_tasks-0.1.dist-info" / "entry_points.txt").write_text(
        "[mjfleet.tasks]\nmore = more_tasks:add\n"
    )
    (site / "more_tasks.py").write_text(
        "import dataclasses\n"
        "from mjfleet.tasks import get_task, register\n"
        "calls = []\n"
        "def add():\n"
        "    calls.append(1)\n"
        "    register(dataclasses.replace(get_task('Cartpole-Balance'), name='Plugin-Cartpole'))\n"
    )
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))
    monkeypatch.setattr(plugins, "_loaded", set())
    monkeypatch.setattr(plugins, "sources", {})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "more_tasks", raising=False)
    plugins.load_entry_points()
    plugins.load_entry_points()  # as when a failed import of mjfleet.tasks is retried: no second registration
    assert get_task("Plugin-Cartpole").env_class == get_task("Cartpole-Balance").env_class
    assert sys.modules["more_tasks"].calls == [1]
    assert plugins.sources["Plugin-Cartpole"] == "more-tasks 0.1"
    monkeypatch.delitem(sys.modules, "more_tasks")
