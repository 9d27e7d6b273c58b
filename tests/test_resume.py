"""Stopping and resuming a run as a user does: Ctrl-C saves and prints the resume command, `--resume` continues
the numbering, the optimizer state and the checkpoint's networks — real `train` processes, real simulator."""

import json
import os
import pathlib
import shlex
import signal
import subprocess
import time

import pytest
import yaml
from helpers import (
    BIN,
    CARTPOLE_EXPERIMENT,
    CARTPOLE_OPTIMIZER_STEPS_PER_ITERATION,
    SMALL_CARTPOLE,
    assert_session_ends,
    iterations_in,
    run_cli,
)

from mjfleet.runs.checkpoints import checkpoints_in, read_checkpoint

EXPERIMENT = CARTPOLE_EXPERIMENT
SMALL = SMALL_CARTPOLE
OPTIMIZER_STEPS_PER_ITERATION = CARTPOLE_OPTIMIZER_STEPS_PER_ITERATION


def start_train(cwd: pathlib.Path, *args: str) -> subprocess.Popen:
    """`train` in its own session, so that afterwards the whole session can be checked for leftovers."""
    return subprocess.Popen(
        [str(BIN / "train"), "Cartpole-Balance", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=os.environ.copy(),
    )


def wait_for_iterations(
    proc: subprocess.Popen, cwd: pathlib.Path, n: int, timeout: float = 300
) -> pathlib.Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"train exited early: {proc.communicate()[1][-2000:]}"
        for metrics in (cwd / "logs" / EXPERIMENT).glob("*/metrics.jsonl"):
            if len(metrics.read_text().splitlines()) >= n:
                return metrics.parent
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"train did not reach {n} iterations in {timeout} s")


def interrupt(proc: subprocess.Popen, timeout: float = 120, echo: bool = False) -> tuple[str, str]:
    """SIGINT to `train`; with `echo`, a second copy 0.2 s later, as `uv run` passes on a terminal's Ctrl-C."""
    proc.send_signal(signal.SIGINT)
    if echo:
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert_session_ends(proc.pid)  # train runs in a session of its own (start_new_session)
    return out, err


def expected_kept(last: int, save_interval: int, keep_last: int, keep_every: int) -> list[int]:
    saved = sorted({i for i in range(1, last + 1) if i % save_interval == 0 or i % keep_every == 0} | {last})
    return sorted(set(saved[-keep_last:]) | {i for i in saved if i % keep_every == 0})


def resume_hint(err: str) -> list[str]:
    (line,) = [line for line in err.splitlines() if line.startswith("resume with: ")]
    words = shlex.split(line.removeprefix("resume with: "))
    assert words[:3] == ["uv", "run", "train"]
    return [str(BIN / "train"), *words[3:]]


# --------------------------------------------------------------------------- signals and resume, real processes
@pytest.mark.skipif(not pathlib.Path("/proc/self").is_dir(), reason="process checks read /proc")
def test_sigint_saves_prints_the_resume_command_and_resuming_continues_the_numbering(tmp_path):
    flags = ["--gpu-ids", "None", *SMALL, "--max-iterations", "1000", "--save-interval", "2"]
    flags += ["--keep-last", "2", "--keep-every", "4"]
    proc = start_train(tmp_path, *flags)
    run_dir = wait_for_iterations(proc, tmp_path, 5)
    out, err = interrupt(proc, echo=True)  # one Ctrl-C through `uv run`: not a second "stop now"

    assert proc.returncode == 128 + signal.SIGINT, err
    last = iterations_in(run_dir)[-1] + 1
    assert last >= 5
    assert (run_dir / "reward_curve.png").is_file()
    assert [it for it, _ in checkpoints_in(run_dir)] == expected_kept(last, 2, 2, 4)
    assert not list(run_dir.glob(".*.tmp"))
    state = read_checkpoint(run_dir / f"model_{last}.pt")
    assert state["iter"] == last
    assert f"after iteration {last}" in err
    progress = [line for line in out.splitlines() if line.startswith("it ")]
    assert len(progress) >= last and not any(line.startswith("    collect") for line in out.splitlines())

    # The printed command resumes it; --max-iterations counts from 0, so this trains two more iterations.
    resumed = run_cli(*resume_hint(err), "--max-iterations", str(last + 2), "--export-on-save", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"done: iterations {last + 1}-{last + 2} (2 here), {2 * 8 * 32:,} env steps in " in resumed.stdout
    (new_run,) = [p for p in (tmp_path / "logs" / EXPERIMENT).iterdir() if p != run_dir]
    assert iterations_in(new_run) == [last, last + 1]
    run_yaml = yaml.safe_load((new_run / "params" / "run.yaml").read_text())
    assert (
        run_yaml["resumed_from"] == str(run_dir / f"model_{last}.pt") and run_yaml["start_iteration"] == last
    )
    final = read_checkpoint(new_run / f"model_{last + 2}.pt")
    assert final["iter"] == last + 2
    assert final["env_steps"] == (last + 2) * 8 * 32
    # Adam's step counters continue from the checkpoint: the optimizer state was restored, not re-initialised.
    steps = {float(s["step"]) for s in final["optimizer_state_dict"]["state"].values()}
    assert steps == {(last + 2) * OPTIMIZER_STEPS_PER_ITERATION}
    exported = json.loads((new_run / "exported" / "policy.json").read_text())
    assert exported["iteration"] == last + 2 and exported["onnx"]["max_abs_diff_vs_torch"] <= 1e-5
    assert (new_run / "exported" / "policy.onnx").is_file()


def test_resume_rebuilds_the_checkpoints_networks_when_the_defaults_differ(tmp_path, monkeypatch, capsys):
    """In this process (`train`'s one-worker path): the resume logic, not the process, is under test here."""
    from mjfleet.cli.train import main

    monkeypatch.chdir(tmp_path)
    # e.g. a run trained on a GPU (the task's GPU networks) continued on CPU, whose defaults may be smaller
    small = ["--agent.actor.hidden-dims", "16", "8", "--agent.critic.hidden-dims", "12"]
    main(["Cartpole-Balance", "--gpu-ids", "None", *SMALL, "--max-iterations", "1", *small])
    capsys.readouterr()
    main(["Cartpole-Balance", "--gpu-ids", "None", *SMALL, "--resume", "--max-iterations", "2"])
    out = capsys.readouterr().out
    assert "has actor layers (16, 8); resuming with those" in out
    assert "has critic layers (12,); resuming with those" in out
    (run_dir,) = [p for p in (tmp_path / "logs" / EXPERIMENT).iterdir() if (p / "model_2.pt").is_file()]
    state = read_checkpoint(run_dir / "model_2.pt")
    assert state["rsl_rl_cfg"]["actor"]["hidden_dims"] == [16, 8]
    assert state["rsl_rl_cfg"]["critic"]["hidden_dims"] == [12]


def _optimizer_steps(state: dict) -> set[float]:
    return {float(s["step"]) for s in state["optimizer_state_dict"]["state"].values()}


def test_resume_with_another_num_envs_continues_and_counts_the_new_batch(tmp_path, monkeypatch):
    """Twice the environments on resume: the numbering and the optimiser state carry on, and the env-step count
    adds the batch each iteration really ran (in this process: `train`'s one-worker path). The resumed run's
    settings are its own command line's: an --env.* flag of the first run is not kept (docs/bring-your-robot.md,
    docs/runs.md)."""
    from mjfleet.cli.train import main

    monkeypatch.chdir(tmp_path)
    flags = ["Cartpole-Balance", "--gpu-ids", "None", "--agent.num-steps-per-env", "8", "--logger", "none"]
    main([*flags, "--num-envs", "16", "--max-iterations", "2", "--env.init-angle-range", "0.05"])
    main([*flags, "--num-envs", "32", "--max-iterations", "3", "--resume"])
    first, second = sorted((tmp_path / "logs" / EXPERIMENT).iterdir())
    env_yaml = [yaml.safe_load((run / "params" / "env.yaml").read_text()) for run in (first, second)]
    assert [cfg["init_angle_range"] for cfg in env_yaml] == [0.05, 0.1]  # 0.1: the task's default
    before, after = read_checkpoint(first / "model_2.pt"), read_checkpoint(second / "model_3.pt")
    assert iterations_in(second) == [2]
    assert before["env_steps"] == 2 * 16 * 8 and after["env_steps"] == before["env_steps"] + 32 * 8
    assert _optimizer_steps(after) == {3 * OPTIMIZER_STEPS_PER_ITERATION}


@pytest.mark.slow
def test_resume_with_two_cpu_workers_continues_a_one_worker_checkpoint(tmp_path):
    """From 1 worker to 2 on resume: the numbering and optimiser state carry on, each iteration now counting both
    workers' environments."""
    base = ["--gpu-ids", "None", *SMALL, "--save-interval", "2"]
    run_cli("train", "Cartpole-Balance", *base, "--max-iterations", "2", cwd=tmp_path, check=True)
    two = [*base, "--cpu-workers", "2", "--max-iterations", "4", "--resume"]
    result = run_cli("train", "Cartpole-Balance", *two, cwd=tmp_path, check=True)
    assert "2 workers" in result.stdout or "world size 2" in result.stdout, result.stdout
    old, new = sorted((tmp_path / "logs" / EXPERIMENT).iterdir())
    assert iterations_in(new) == [2, 3]
    before, state = read_checkpoint(old / "model_2.pt"), read_checkpoint(new / "model_4.pt")
    assert state["infos"]["world_size"] == 2
    assert state["env_steps"] == before["env_steps"] + 2 * (2 * 32 * 8)
    assert _optimizer_steps(state) == {4 * OPTIMIZER_STEPS_PER_ITERATION}
