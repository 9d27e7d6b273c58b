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


# --- SAC on the quadruped: where SAC's users are ---------------------------------------------------------------

QUADRUPED = "Quadruped-Velocity-Flat"
SAC_QUADRUPED = [
    "--gpu-ids", "None", "--cpu-workers", "1", "--algorithm", "sac", "--num-envs", "4", "--agent.num-steps-per-env",
    "4", "--agent.sac.batch-size", "16", "--agent.sac.random-steps", "4", "--agent.sac.buffer-size", "1000",
    "--agent.sac.actor-hidden-dims", "32", "32", "--agent.sac.critic-hidden-dims", "32", "32", "--logger", "none",
    "--log-format", "compact",
]  # fmt: skip
"""A tiny SAC quadruped run: 4 environments, 4-step iterations, the first random (warm-up), small networks."""


@pytest.fixture(scope="module")
def sac_quadruped_run(tmp_path_factory) -> pathlib.Path:
    """The run directory of a 2-iteration SAC run on Quadruped-Velocity-Flat (read-only: copy it to write)."""
    cwd = tmp_path_factory.mktemp("sac_quadruped")
    run_cli("train", QUADRUPED, *SAC_QUADRUPED, "--max-iterations", "2", cwd=cwd, check=True)
    (run_dir,) = (cwd / "logs" / "quadruped_velocity_flat").iterdir()
    return run_dir


def test_sac_trains_the_quadruped_on_cpu_and_play_exports_its_actor(sac_quadruped_run, tmp_path):
    records = metrics(sac_quadruped_run)
    assert [r["iteration"] for r in records] == [0, 1] and records[1]["Loss/critic"] > 0
    cwd = copy_workdir(sac_quadruped_run.parents[2], tmp_path)
    (run_dir,) = (cwd / "logs" / "quadruped_velocity_flat").iterdir()
    args = [QUADRUPED, "--gpu-ids", "None", "--load-run", str(run_dir), "--num-envs", "2", "--episodes", "2"]
    result = run_cli("play", *args, "--env.episode-length-s", "0.2", "--export", cwd=cwd, check=True)
    assert "deterministic" in result.stdout and "ONNX matches torch" in result.stdout
    assert (run_dir / "exported" / "policy.onnx").exists()


def test_sac_action_bounds_are_the_quadrupeds_joint_ranges_about_its_default_pose(sac_quadruped_run):
    """Against the real model's joint limits: the environment's own bounds (`--agent.sac.action-bound 0`) put
    action 0, the default pose, in the middle of each joint's largest symmetric range about it that its limits
    allow; the task's SAC default (+-1, read from the trained actor's checkpoint) lies within every such range."""
    from mjfleet.rl.sac.build import action_bounds
    from mjfleet.tasks import get_task

    spec = get_task(QUADRUPED)
    cfg = spec.env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg)
    m = env.mj_model
    joints = [m.joint(name).id for name in env.joint_names]
    lower, upper = (torch.tensor(m.jnt_range[joints, i], dtype=torch.float32) for i in (0, 1))
    home = torch.tensor(m.key("home").qpos[m.jnt_qposadr[joints]], dtype=torch.float32)
    scale = env.joint_action_scale.cpu()
    assert ((lower < home) & (home < upper)).all()  # the default pose is inside every joint's range
    widest = torch.minimum(home - lower, upper - home) / scale  # in actions, about action 0

    low, high = action_bounds(env, 0.0)
    torch.testing.assert_close(high, widest)
    torch.testing.assert_close(low, -widest)
    # The extreme actions reach a joint limit on one side and stay within the range on the other.
    low_target, high_target = home + scale * low, home + scale * high
    assert (low_target >= lower - 1e-5).all() and (high_target <= upper + 1e-5).all()
    touches = torch.isclose(low_target, lower, atol=1e-5) | torch.isclose(high_target, upper, atol=1e-5)
    assert touches.all()

    actor = torch.load(sac_quadruped_run / "model_2.pt", weights_only=True)["actor_state_dict"]
    assert torch.equal(actor["action_center"], torch.zeros(len(joints)))
    assert torch.equal(actor["action_half_range"], torch.ones(len(joints)))  # the task's action_bound
    assert (actor["action_half_range"] <= widest).all()
