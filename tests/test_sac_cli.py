"""`train --algorithm sac` as a user runs it: a real run, its checkpoint, resume, play and export, and bad input."""

from __future__ import annotations

import json
import pathlib
import signal

import pytest
import torch
from helpers import (
    CARTPOLE_EXPERIMENT,
    assert_one_line_usage_error,
    copy_workdir,
    iterations_in,
    metrics,
    run_cli,
)
from test_resume import interrupt, resume_hint, start_train, wait_for_iterations

SAC_SMALL = [
    "--gpu-ids", "None", "--algorithm", "sac", "--num-envs", "16", "--agent.num-steps-per-env", "4",
    "--agent.sac.batch-size", "64", "--agent.sac.random-steps", "4", "--logger", "none", "--log-format", "compact",
]  # fmt: skip
"""A tiny SAC run: 16 environments, 4-step iterations, the first iteration random actions (warm-up)."""


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory) -> pathlib.Path:
    """The working directory of a 2-iteration SAC run (read-only for the tests: copy it to write)."""
    cwd = tmp_path_factory.mktemp("sac_run")
    evaluate = ["--eval-interval", "2", "--eval-episodes", "2"]
    run_cli("train", "Cartpole-Balance", *SAC_SMALL, "--max-iterations", "2", *evaluate, cwd=cwd, check=True)
    return cwd


def _run_dirs(cwd: pathlib.Path) -> list[pathlib.Path]:
    return sorted((cwd / "logs" / CARTPOLE_EXPERIMENT).iterdir())


def test_a_sac_run_writes_sac_metrics_and_a_checkpoint_that_names_its_algorithm(sac_run):
    (run_dir,) = _run_dirs(sac_run)
    records = metrics(run_dir)
    assert [r["iteration"] for r in records] == [0, 1]
    assert records[0]["Replay/transitions"] == 16 * 4
    assert records[1]["Loss/critic"] > 0  # the warm-up is over: gradient steps ran
    assert (
        "Eval/mean_return" in records[1] and (run_dir / "model_best.pt").exists()
    )  # the deterministic actor
    state = torch.load(run_dir / "model_2.pt", weights_only=True)
    assert state["algorithm"] == "sac" and state["iter"] == 2
    assert {"actor_state_dict", "critic_state_dict", "target_state_dict", "log_alpha"} <= state.keys()


def test_play_evaluates_against_baselines_and_exports_the_deterministic_sac_actor(sac_run, tmp_path):
    cwd = copy_workdir(sac_run, tmp_path)
    (run_dir,) = _run_dirs(cwd)
    args = ["Cartpole-Balance", "--gpu-ids", "None", "--load-run", str(run_dir), "--episodes", "2"]
    result = run_cli("play", *args, "--export", "--baselines", cwd=cwd, check=True)
    assert "deterministic" in result.stdout
    assert all(
        f"\n{policy} " in result.stdout for policy in ("trained", "zero", "random")
    )  # --baselines' table
    assert "ONNX matches torch" in result.stdout
    assert (run_dir / "exported" / "policy.onnx").exists()


def test_a_sac_checkpoint_resumed_as_ppo_is_a_one_line_usage_error(sac_run, tmp_path):
    cwd = copy_workdir(sac_run, tmp_path)
    result = run_cli(
        "train", "Cartpole-Balance", "--gpu-ids", "None", "--resume", "--max-iterations", "5", cwd=cwd
    )
    assert_one_line_usage_error(result, "was trained with sac", "--algorithm sac")


def test_an_unknown_algorithm_is_a_one_line_usage_error(tmp_path):
    result = run_cli("train", "Cartpole-Balance", "--gpu-ids", "None", "--algorithm", "dqn", cwd=tmp_path)
    assert_one_line_usage_error(result, "--algorithm")


def test_bench_times_sac_iterations_and_their_gradient_steps(tmp_path):
    args = [
        "--algorithm",
        "sac",
        "--gpu-ids",
        "None",
        "--num-envs",
        "16",
        "--iterations",
        "1",
        "--steps",
        "5",
    ]
    args += ["--repeats", "1", "--agent.sac.batch-size", "64", "--json", str(tmp_path / "bench.json")]
    result = run_cli("bench", "Cartpole-Balance", *args, cwd=tmp_path, check=True)
    assert "1 SAC iterations (+1 warm-up)" in result.stdout
    assert "gradient steps/s per worker" in result.stdout
    (point,) = json.loads((tmp_path / "bench.json").read_text())["runs"][0]["points"]
    assert point["training"]["gradient_steps_per_s"] > 0


def test_sigint_saves_a_sac_checkpoint_and_its_resume_command_keeps_sac_and_refills_the_buffer(tmp_path):
    # With layer-normed critics and weight decay, so that their parameters and AdamW's state go round the trip too.
    stabilised = ["--agent.sac.critic-layer-norm", "--agent.sac.weight-decay", "0.001"]
    proc = start_train(
        tmp_path, *SAC_SMALL, *stabilised, "--max-iterations", "1000", "--save-interval", "100"
    )
    run_dir = wait_for_iterations(proc, tmp_path, 3)
    _, err = interrupt(proc)
    assert proc.returncode == 128 + signal.SIGINT, err
    last = iterations_in(run_dir)[-1] + 1
    state = torch.load(run_dir / f"model_{last}.pt", weights_only=True)
    assert state["algorithm"] == "sac" and state["iter"] == last
    critic = state["critic_state_dict"]
    assert (
        critic["q1.1.weight"].shape == critic["q1.0.bias"].shape
    )  # a LayerNorm after the first hidden layer
    assert state["optimizer_state_dict"]["param_groups"][0]["weight_decay"] == 0.001
    words = resume_hint(err)
    assert words[words.index("--algorithm") + 1] == "sac"

    # The printed command resumes it as SAC: the buffer was not saved, so it warms up again; numbering continues.
    # A setting given again wins over the checkpoint's optimizer state.
    more = ["--max-iterations", str(last + 1), "--agent.sac.weight-decay", "0.002"]
    resumed = run_cli(*words, *more, cwd=tmp_path, check=True)
    assert "replay buffer starts empty; warm-up 4 steps with the checkpoint's policy" in resumed.stdout
    (new_run,) = [p for p in _run_dirs(tmp_path) if p != run_dir]
    assert [r["iteration"] for r in metrics(new_run)] == [last]
    state = torch.load(new_run / f"model_{last + 1}.pt", weights_only=True)
    assert state["algorithm"] == "sac"
    assert [g["weight_decay"] for g in state["optimizer_state_dict"]["param_groups"]] == [0.002, 0.002, 0.0]
