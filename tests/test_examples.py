"""The tutorial task in examples/ (docs/adding-a-task.md) registers from outside mjfleet and learns."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
BIN = pathlib.Path(sys.executable).parent


def test_tutorial_task_registers_through_mjfleet_task_modules():
    env = {**os.environ, "MJFLEET_TASK_MODULES": "pendulum", "PYTHONPATH": str(EXAMPLES)}
    result = subprocess.run([str(BIN / "tasks")], capture_output=True, text=True, env=env, timeout=120)
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
    from mjfleet.rl import FleetRunner
    from mjfleet.tasks import get_task

    spec = get_task("Pendulum-Balance")
    cfg = spec.env_config()
    cfg.num_envs = 128
    agent = spec.agent_config()
    agent.logger = "none"
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg), agent, None, "cpu", log_format="compact")
    record = runner.learn(30, init_at_random_ep_len=True)
    assert record["mean_return"] > 0.8 * runner.env.max_episode_length
