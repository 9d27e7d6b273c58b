"""Physics trouble on the console: a task whose physics diverge in every fourth world (tests/diverging_task.py),
trained two iterations (on one worker and on two) and played; both say nan_resets on their lines and warn once."""

from __future__ import annotations

import json
import pathlib

from helpers import run_cli

from mjfleet.runs.console import IterationConsole, format_iteration
from mjfleet.runs.trouble import CAUSES

TESTS = pathlib.Path(__file__).resolve().parent
DIVERGING = {"MJFLEET_TASK_MODULES": "diverging_task", "PYTHONPATH": str(TESTS)}
WARNING = "warning: nan_resets in 25.00% of env steps"


def test_train_and_play_name_the_nan_resets_and_warn_once(tmp_path):
    train = run_cli("train", "Test-Diverging", "--gpu-ids", "None", "--num-envs", "8", "--agent.num-steps-per-env",
                    "8", "--max-iterations", "2", "--logger", "none", "--log-format", "compact",
                    "--agent.ppo.no-compile-update", cwd=tmp_path, env=DIVERGING, check=True, timeout=600)  # fmt: skip
    lines = [line for line in train.stdout.splitlines() if line.startswith("it ")]
    # 8 envs x 8 steps, every fourth world reset on NaN at every step: 16 of 64 env steps
    assert len(lines) == 2 and all(line.endswith("nan_resets 16 (25.00%)") for line in lines), train.stdout
    (warning,) = [line for line in train.stderr.splitlines() if "warning" in line]  # once, not per iteration
    assert warning.startswith(f"train: {WARNING} at iteration 1: the physics diverged")

    play = run_cli("play", "Test-Diverging", "--gpu-ids", "None", "--num-envs", "8", "--episodes", "8",
                   "--env.episode-length-s", "0.5", "--baselines", cwd=tmp_path, env=DIVERGING, check=True,
                   timeout=600)  # fmt: skip
    (run_dir,) = (tmp_path / "logs" / "test_diverging").iterdir()
    report = json.loads((run_dir / "eval.json").read_text())
    resets = report["counts"]["Sim/nan_resets"]
    assert resets == report["env_steps"] / 4 and report["trouble"] == {"nan_resets": 0.25}
    assert f"physics trouble: nan_resets {resets:.0f} (25.00%)" in play.stdout.splitlines()
    assert f"play: 8 of 8 episodes, mean return {report['mean_return']:.2f}  nan_resets" in play.stderr
    (warning,) = [line for line in play.stderr.splitlines() if "warning" in line]  # the trained policy's only
    assert warning.startswith(f"play: {WARNING} over 8 episodes: the physics diverged")
    # the baselines' table: every policy's worlds diverge alike, each row says so in its last column
    lines = play.stdout.splitlines()
    (header,) = [line for line in lines if line.startswith("policy ")]
    assert header.endswith("episodes ended  physics trouble")
    table = lines[lines.index(header) + 1 : lines.index(header) + 4]
    assert [row.split()[0] for row in table] == ["trained", "zero", "random"]
    for row, result in zip(table, [report, *report["baselines"].values()], strict=True):
        assert row.endswith(f"nan_resets {result['counts']['Sim/nan_resets']:.0f} (25.00%)"), row


def test_two_cpu_workers_sum_their_nan_resets_over_their_env_steps_and_rank_0_warns_once(tmp_path):
    train = run_cli("train", "Test-Diverging", "--gpu-ids", "None", "--cpu-workers", "2", "--num-envs", "8",
                    "--agent.num-steps-per-env", "8", "--max-iterations", "2", "--logger", "none", "--log-format",
                    "compact", "--agent.ppo.no-compile-update", cwd=tmp_path, env=DIVERGING, check=True,
                    timeout=600)  # fmt: skip
    lines = [line for line in train.stdout.splitlines() if line.startswith("it ")]
    # 2 workers x 8 envs x 8 steps, every fourth world reset on NaN at every step: 32 of 128 env steps
    assert len(lines) == 2 and all(line.endswith("nan_resets 32 (25.00%)") for line in lines), train.stdout
    (warning,) = [line for line in train.stderr.splitlines() if "warning" in line]
    assert warning.startswith(f"train: {WARNING} at iteration 1")


def test_a_healthy_run_says_nothing_of_trouble(cartpole_run):
    assert (
        "nan_resets" not in cartpole_run.result.stdout and "train: warning" not in cartpole_run.result.stderr
    )


RECORD = {"iteration": 4, "env_steps": 5000, "env_steps_per_s": 1000.0, "mean_return": 1.5, "mean_episode_length": 9.0,
          "collect_time": 0.5, "learn_time": 0.5, "Policy/action_std": 1.0, "Sim/nan_resets": 3.0,
          "Metrics/sim_solver_limit": 0.002}  # fmt: skip


def test_both_styles_end_the_iterations_first_line_with_its_trouble():
    for style in ("compact", "block"):
        head = format_iteration(RECORD, 10, 5.0, style, iteration_env_steps=1000).splitlines()[0]
        assert head.endswith("ETA 0:00:05  nan_resets 3 (0.30%)  solver_limit 0.20%")
    assert "nan_resets" not in format_iteration({**RECORD, "Sim/nan_resets": 0.0}, 10, 5.0, "compact", 1000)


def test_the_console_warns_once_per_kind_on_stderr(capsys):
    console = IterationConsole(
        start_iteration=4, total_iterations=10, iteration_env_steps=1000, style="compact"
    )
    console.show(RECORD)
    console.show({**RECORD, "iteration": 5})
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2
    assert err.splitlines() == [
        "train: warning: nan_resets in 0.30% of env steps at iteration 5: " + CAUSES["nan_resets"],
        "train: warning: solver_limit in 0.20% of env steps at iteration 5: " + CAUSES["solver_limit"],
    ]
