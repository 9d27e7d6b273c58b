"""Shared test setup: one warp kernel cache for the whole run (and every subprocess it starts), and one short
Cartpole-Balance run that the tests reading, playing and exporting a run share."""

import os
import pathlib
import subprocess
from typing import NamedTuple

import pytest

# Warp compiles kernels on first use (25-60 s per model on 2 cores): every test, and every worker or CLI process a
# test starts, shares one cache. Set before warp is imported anywhere.
os.environ.setdefault("WARP_CACHE_PATH", str(pathlib.Path(__file__).resolve().parents[1] / ".warp_cache"))
os.environ.setdefault("MJFLEET_WARP_VERBOSE", "")

import warp as wp  # noqa: E402
from helpers import CARTPOLE_EXPERIMENT, metrics, missing_infrastructure, require_infrastructure, run_cli  # noqa: E402

wp.config.quiet = True
wp.config.log_level = wp.LOG_WARNING


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "infrastructure(probe): needs what probe() checks (None: present, else why not); skipped without it "
        "outside CI, failed under CI=true (helpers.needs_infrastructure)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture: a missing Xvfb or Slurm must not first show as a fixture's error.
    for mark in item.iter_markers("infrastructure"):
        require_infrastructure(mark.args[0]())


class TrainedRun(NamedTuple):
    """A finished `train` run: its working directory, run directory, the command's result and metrics.jsonl."""

    cwd: pathlib.Path
    run_dir: pathlib.Path
    result: subprocess.CompletedProcess
    records: list[dict]


CARTPOLE_RUN = {"num_envs": 64, "steps": 8, "iterations": 20, "save_interval": 8, "episode_length_s": 1.0}
"""The shared run's settings. One-second episodes (50 policy steps): training reports complete episodes within a
few iterations, and Cartpole-Balance is learnt in ~20 small iterations, so `play` can tell it from the baselines."""


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory) -> TrainedRun:
    """Cartpole-Balance trained by the real `train` command with its default logger, once per test session.

    Shared: tests only read it. A test that writes into a run (play's eval.json, an export, a resumed run beside
    it) works on a copy (`helpers.copy_workdir`)."""
    cwd = tmp_path_factory.mktemp("cartpole_run")
    c = CARTPOLE_RUN
    result = run_cli(
        "train", "Cartpole-Balance", "--gpu-ids", "None", "--num-envs", str(c["num_envs"]),
        "--agent.num-steps-per-env", str(c["steps"]), "--max-iterations", str(c["iterations"]),
        "--agent.save-interval", str(c["save_interval"]), "--env.episode-length-s", str(c["episode_length_s"]),
        "--run-name", "shared", "--log-format", "compact", cwd=cwd, check=True,
    )  # fmt: skip
    (run_dir,) = (cwd / "logs" / CARTPOLE_EXPERIMENT).iterdir()
    return TrainedRun(cwd, run_dir, result, metrics(run_dir))


@pytest.fixture(scope="session")
def robot_cache(tmp_path_factory) -> pathlib.Path:
    """A user cache ($MJFLEET_CACHE_DIR) holding every known robot, fetched once per test session by the real
    `robots fetch` from the package index (infrastructure: where it cannot be reached the tests that need it
    skip, and fail under CI)."""
    from mjfleet.robots import ROBOTS

    cache = tmp_path_factory.mktemp("robot_cache")
    for name in ROBOTS:
        result = run_cli("robots", "fetch", name, env={"MJFLEET_CACHE_DIR": str(cache)}, timeout=900)
        if result.returncode != 0 and "could not download" in result.stderr:
            missing_infrastructure(
                f"`robots fetch {name}` could not reach the package index: {result.stderr.strip()}"
            )
        assert result.returncode == 0, result.stderr
    return cache
