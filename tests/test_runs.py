"""Runs: resume, checkpoint retention, graceful stop on SIGINT, plots, wandb — real simulator, real processes."""

import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import yaml

from mjfleet.errors import UsageError
from mjfleet.runs import RunDir
from mjfleet.runs.checkpoints import Retention, checkpoints_in, find_checkpoint, read_checkpoint

BIN = pathlib.Path(sys.executable).parent
EXPERIMENT = "cartpole_balance"
# 5 epochs x 4 mini-batches: the Cartpole agent's optimizer steps per iteration.
OPTIMIZER_STEPS_PER_ITERATION = 20
SMALL = [
    "--num-envs",
    "32",
    "--agent.num-steps-per-env",
    "8",
    "--logger",
    "none",
    "--log-format",
    "compact",
]


# --------------------------------------------------------------------------- helpers
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


def run_train(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    """`train Cartpole-Balance ...` to its end."""
    return subprocess.run(
        [str(BIN / "train"), "Cartpole-Balance", *args], cwd=cwd, capture_output=True, text=True, timeout=300
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


def live_processes_in_session(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry))
    return found


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
    time.sleep(0.5)
    assert live_processes_in_session(proc.pid) == [], "processes of the run outlived it"
    return out, err


def iterations_in(run_dir: pathlib.Path) -> list[int]:
    return [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def expected_kept(last: int, save_interval: int, keep_last: int, keep_every: int) -> list[int]:
    saved = sorted({i for i in range(1, last + 1) if i % save_interval == 0 or i % keep_every == 0} | {last})
    return sorted(set(saved[-keep_last:]) | {i for i in saved if i % keep_every == 0})


def resume_hint(err: str) -> list[str]:
    (line,) = [line for line in err.splitlines() if line.startswith("resume with: ")]
    words = shlex.split(line.removeprefix("resume with: "))
    assert words[:3] == ["uv", "run", "train"]
    return [str(BIN / "train"), *words[3:]]


def fake_checkpoint(path: pathlib.Path, content: bytes = b"x") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


# --------------------------------------------------------------------------- retention
def test_retention_keeps_the_newest_and_every_milestone():
    policy = Retention(keep_last=2, keep_every=4)
    assert policy.to_delete([2, 4, 6, 8, 10, 12, 14]) == [2, 6, 10]


def test_retention_zero_disables_each_rule():
    assert Retention(keep_last=0, keep_every=4).to_delete([1, 2, 3, 4, 5]) == []
    assert Retention(keep_last=1, keep_every=0).to_delete([1, 2, 3]) == [1, 2]


def test_retention_prunes_files_and_ignores_half_written_ones(tmp_path):
    for it in (1, 2, 3, 4):
        fake_checkpoint(tmp_path / f"model_{it}.pt")
    fake_checkpoint(tmp_path / ".model_5.pt.tmp")
    Retention(keep_last=1, keep_every=2).prune(tmp_path)
    assert [it for it, _ in checkpoints_in(tmp_path)] == [2, 4]
    assert (tmp_path / ".model_5.pt.tmp").exists()


# --------------------------------------------------------------------------- finding checkpoints
def test_resume_picks_the_newest_run_that_has_a_checkpoint(tmp_path):
    exp = tmp_path / EXPERIMENT
    fake_checkpoint(exp / "2026-01-01_00-00-00" / "model_2.pt")
    newest_ckpt = fake_checkpoint(exp / "2026-01-02_00-00-00_a" / "model_10.pt")
    fake_checkpoint(exp / "2026-01-02_00-00-00_a" / "model_8.pt")
    (exp / "2026-01-03_00-00-00" / "params").mkdir(parents=True)  # a run that died before its first save
    (exp / "baseline_random").mkdir()  # not a run directory
    assert find_checkpoint(exp) == newest_ckpt.resolve()


def test_load_run_regex_path_and_checkpoint_number_select_a_checkpoint(tmp_path):
    exp = tmp_path / EXPERIMENT
    old = fake_checkpoint(exp / "2026-01-01_00-00-00_alpha" / "model_4.pt")
    fake_checkpoint(exp / "2026-01-01_00-00-00_alpha" / "model_6.pt")
    fake_checkpoint(exp / "2026-01-02_00-00-00_beta" / "model_9.pt")
    assert find_checkpoint(exp, "alpha", "4") == old.resolve()
    assert find_checkpoint(exp, str(old.parent), None).name == "model_6.pt"
    assert find_checkpoint(exp, None, str(old)) == old.resolve()


@pytest.mark.parametrize(
    ("load_run", "checkpoint", "needle"),
    [
        (None, None, "no runs in"),
        ("gamma", None, "no run directory"),
        ("/nonexistent/2026-01-01_00-00-00", None, "no such directory"),
        ("alpha", "7", "iterations saved in that run: 4"),
        (None, "missing.pt", "no such file"),
    ],
)
def test_missing_runs_and_checkpoints_are_usage_errors(tmp_path, load_run, checkpoint, needle):
    exp = tmp_path / EXPERIMENT
    if load_run is not None:
        fake_checkpoint(exp / "2026-01-01_00-00-00_alpha" / "model_4.pt")
    with pytest.raises(UsageError, match=needle):
        find_checkpoint(exp, load_run, checkpoint)


def test_an_unreadable_checkpoint_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read checkpoint"):
        read_checkpoint(fake_checkpoint(tmp_path / "model_3.pt", b"not a torch file"))


@pytest.mark.parametrize(
    ("existing", "args", "needle"),
    [
        (None, ["--resume"], "no runs in"),
        (None, ["--checkpoint", "missing.pt"], "no such file"),
        (
            None,
            ["--wandb-run-path", "me/proj/abc123"],
            "no local files of wandb run abc123 (looked for logs/",
        ),
        ("iteration 2", ["--wandb-run-path", "x", "--load-run", "2026"], "pass one of them"),
        (b"truncated", ["--resume"], "cannot read checkpoint"),
        (b"\x80\x05garbage", ["--resume"], "a damaged file, or one not written by mjfleet"),
        ("iteration 2", ["--load-run", "2026-01-01", "--max-iterations", "2"], "already at iteration 2"),
        (
            "another policy",
            ["--resume", "--num-envs", "16"],
            'does not fit this task\'s policy: Error(s) in loading state_dict for MLPModel: Missing key(s) in state_dict: "distribution.std_param"',
        ),
    ],
)
def test_train_resume_errors_are_one_line_with_exit_status_2(
    existing, args, needle, tmp_path, monkeypatch, capsys
):
    from mjfleet.cli.train import main

    monkeypatch.chdir(tmp_path)
    experiment = tmp_path / "logs" / EXPERIMENT
    if existing is not None:
        path = fake_checkpoint(experiment / "2026-01-01_00-00-00" / "model_2.pt")
        if isinstance(existing, bytes):
            path.write_bytes(existing)
        elif existing == "another policy":  # a checkpoint of some other network: found only when loading it
            layer = {"mlp.0.weight": torch.zeros(7, 3), "mlp.0.bias": torch.zeros(7)}
            torch.save({"iter": 2, "actor_state_dict": layer, "critic_state_dict": layer}, path)
        else:
            torch.save({"iter": 2, "actor_state_dict": {}}, path)
    runs_before = sorted(experiment.iterdir()) if experiment.exists() else []
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", *args])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1 and needle in lines[0], err
    runs_after = sorted(experiment.iterdir()) if experiment.exists() else []
    assert runs_after == runs_before, "a failed resume must not create a run directory"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--video", "--video-interval", "0"], "--video-interval and --video-length must be >= 1, got 0 and"),
        (["--video", "--video-length", "0"], "--video-interval and --video-length must be >= 1"),
        (["--video", "--video-width", "161"], "even numbers"),
    ],
)
def test_train_video_errors_are_one_line_with_exit_status_2(args, needle, tmp_path, monkeypatch, capsys):
    from mjfleet.cli.train import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))  # no backend probe in-process
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", *args])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "logs").exists()


def test_logger_wandb_without_wandb_installed_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    """wandb is installed where the tests run (.ci/run installs the extra): None in sys.modules makes it absent
    for this process as it is for a user without the extra (find_spec answers None, an import fails)."""
    from mjfleet.cli.train import main

    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", "--logger", "wandb"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "uv sync --extra wandb" in err


# --------------------------------------------------------------------------- checkpoint contents, in-process
def _runner(tmp_path, seed, episode_length_s=0.3, logger="none"):
    from small_cartpole import cartpole_configs

    from mjfleet.rl import FleetRunner
    from mjfleet.runs import RunDir

    spec, env_cfg, agent = cartpole_configs(episode_length_s=episode_length_s)
    agent.logger = logger
    agent.actor.obs_normalization = True
    agent.critic.obs_normalization = True
    torch.manual_seed(seed)
    run_dir = RunDir.new(agent.experiment_name, root=tmp_path)
    run_dir.create()
    return FleetRunner(spec.make_env(env_cfg), agent, run_dir, "cpu"), run_dir


def test_loading_restores_optimizer_normaliser_iteration_and_rng_state(tmp_path):
    trained, run_dir = _runner(tmp_path / "a", seed=1)
    trained.learn(2)
    trained.close()
    path = run_dir.checkpoint(2)
    saved = torch.load(path, map_location="cpu", weights_only=True)

    fresh, _ = _runner(tmp_path / "b", seed=2)
    torch.manual_seed(123)  # a different random stream, to be replaced by the checkpoint's
    fresh.load(path, map_location="cpu")
    assert fresh.current_learning_iteration == 2 and fresh.env_steps == 2 * 8 * 16

    restored = fresh.alg.optimizer.state_dict()
    assert restored["param_groups"][0]["lr"] == saved["optimizer_state_dict"]["param_groups"][0]["lr"]
    assert len(restored["state"]) == len(saved["optimizer_state_dict"]["state"]) > 0
    for index, tensors in saved["optimizer_state_dict"]["state"].items():
        assert float(tensors["step"]) == 2 * OPTIMIZER_STEPS_PER_ITERATION
        for name, value in tensors.items():
            assert torch.equal(restored["state"][index][name].cpu(), value), (index, name)

    normaliser = fresh.alg.get_policy().obs_normalizer
    assert int(normaliser.count) > 0
    assert torch.equal(normaliser._mean, saved["actor_state_dict"]["obs_normalizer._mean"])
    assert torch.equal(torch.get_rng_state(), saved["rng_states"][0]["torch"])


def test_checkpoint_holds_what_is_needed_to_rebuild_the_policy_on_cpu(tmp_path):
    from tensordict import TensorDict

    from mjfleet.rl.export import build_actor

    runner, run_dir = _runner(tmp_path, seed=3)
    runner.learn(1)
    runner.close()
    state = read_checkpoint(run_dir.checkpoint(1))
    infos = state["infos"]
    assert infos["observations"] == {"actor": 5, "critic": 5} and infos["num_actions"] == 1
    assert state["agent_cfg"]["actor"]["obs_normalization"] is True
    obs = TensorDict({k: torch.zeros(1, n) for k, n in infos["observations"].items()}, batch_size=[1])
    actor = build_actor(state, obs, infos["num_actions"], "cpu")
    expected = runner.alg.get_policy().to("cpu").eval()
    probe = TensorDict({k: torch.randn(4, n) for k, n in infos["observations"].items()}, batch_size=[4])
    with torch.inference_mode():
        assert torch.equal(actor(probe), expected(probe))


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
    resumed = subprocess.run(
        [*resume_hint(err), "--max-iterations", str(last + 2), "--export-on-save"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
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


def test_resume_rebuilds_the_checkpoints_networks_when_the_defaults_differ(tmp_path):
    # e.g. a run trained on a GPU (the task's GPU networks) continued on CPU, whose defaults may be smaller
    small = ["--agent.actor.hidden-dims", "16", "8", "--agent.critic.hidden-dims", "12"]
    first = run_train(tmp_path, "--gpu-ids", "None", *SMALL, "--max-iterations", "1", *small)
    assert first.returncode == 0, first.stderr
    resumed = run_train(tmp_path, "--gpu-ids", "None", *SMALL, "--resume", "--max-iterations", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert "has actor layers (16, 8); resuming with those" in resumed.stdout
    assert "has critic layers (12,); resuming with those" in resumed.stdout
    (run_dir,) = [p for p in (tmp_path / "logs" / EXPERIMENT).iterdir() if (p / "model_2.pt").is_file()]
    state = read_checkpoint(run_dir / "model_2.pt")
    assert state["rsl_rl_cfg"]["actor"]["hidden_dims"] == [16, 8]
    assert state["rsl_rl_cfg"]["critic"]["hidden_dims"] == [12]


@pytest.mark.skipif(not pathlib.Path("/proc/self").is_dir(), reason="process checks read /proc")
def test_sigint_with_two_cpu_workers_stops_both_at_the_same_iteration_and_saves(tmp_path):
    flags = ["--gpu-ids", "None", "--cpu-workers", "2", *SMALL, "--max-iterations", "1000"]
    flags += ["--save-interval", "3", "--keep-last", "1", "--keep-every", "0"]
    proc = start_train(tmp_path, *flags)
    run_dir = wait_for_iterations(proc, tmp_path, 4)
    out, err = interrupt(proc, echo=True)

    assert proc.returncode == 128 + signal.SIGINT, err
    last = iterations_in(run_dir)[-1] + 1
    assert [it for it, _ in checkpoints_in(run_dir)] == [last]
    state = read_checkpoint(run_dir / f"model_{last}.pt")
    # Both ranks took part in the final save (it gathers every rank's RNG state): they stopped together.
    assert state["iter"] == last and len(state["rng_states"]) == 2
    assert not torch.equal(state["rng_states"][0]["torch"], state["rng_states"][1]["torch"])
    assert "--load-run" in resume_hint(err) and "--cpu-workers" in resume_hint(err)
    assert "Traceback" not in err


@pytest.mark.slow
def test_resume_with_two_cpu_workers_continues_from_the_checkpoint(tmp_path):
    base = ["--gpu-ids", "None", "--cpu-workers", "2", *SMALL, "--save-interval", "2"]
    first = subprocess.run(
        [str(BIN / "train"), "Cartpole-Balance", *base, "--max-iterations", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr
    second = subprocess.run(
        [str(BIN / "train"), "Cartpole-Balance", *base, "--max-iterations", "4", "--resume"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr
    old, new = sorted((tmp_path / "logs" / EXPERIMENT).iterdir())
    assert iterations_in(new) == [2, 3]
    state = read_checkpoint(new / "model_4.pt")
    assert {float(s["step"]) for s in state["optimizer_state_dict"]["state"].values()} == {
        4 * OPTIMIZER_STEPS_PER_ITERATION
    }


# --------------------------------------------------------------------------- plots
def test_plot_cli_draws_the_reward_curve_of_a_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [
        {
            "iteration": i,
            "env_steps": 256 * (i + 1),
            "mean_return": 10.0 + i * i,
            "mean_episode_length": 5.0 + i,
        }
        for i in range(20)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn')
    result = subprocess.run([str(BIN / "plot"), str(run_dir)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert_real_plot(run_dir / "reward_curve.png")


def test_plot_without_metrics_is_a_one_line_error(tmp_path, capsys):
    from mjfleet.cli.plot import main

    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "metrics.jsonl" in err


def test_plot_over_an_experiment_glob_skips_plays_baseline_directories(tmp_path, monkeypatch, capsys):
    from mjfleet.cli.plot import main

    records = [
        {"iteration": i, "env_steps": 64 * i, "mean_return": float(i), "mean_episode_length": 3.0}
        for i in range(9)
    ]
    runs = [tmp_path / "2026-01-01_00-00-00", tmp_path / "2026-01-02_00-00-00"]
    for run in runs:
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "baseline_random").mkdir()
    (tmp_path / "baseline_random" / "eval.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    main([str(p) for p in sorted(tmp_path.iterdir())])
    out = capsys.readouterr().out
    assert "skipped (no metrics.jsonl): " in out and "baseline_random" in out
    assert_real_plot(tmp_path / "reward_curves.png")


def assert_real_plot(path: pathlib.Path) -> None:
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    image = matplotlib.image.imread(str(path))
    assert image.shape[0] >= 400 and image.shape[1] >= 600
    assert float(image[..., :3].std()) > 0.05, "the plot is blank"


# --------------------------------------------------------------------------- videos while training
def _gl_or_skip() -> str:
    from mjfleet.runs.video import working_gl_backend

    gl = os.environ.get("MUJOCO_GL") or working_gl_backend()
    if not gl:
        pytest.skip(
            "no headless OpenGL here: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri (see .ci/run)"
        )
    return gl


def mp4_frames(path: pathlib.Path) -> tuple[dict, list]:
    import imageio_ffmpeg
    import numpy as np

    frames = imageio_ffmpeg.read_frames(str(path))
    meta = next(frames)
    width, height = meta["size"]
    return meta, [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in frames]


def test_train_video_records_env_0_every_interval_iterations(tmp_path):
    """4 iterations of 8 steps, --video-interval 2 --video-length 8: one rollout each at iterations 0 and 2."""
    gl = _gl_or_skip()
    result = subprocess.run(
        [str(BIN / "train"), "Cartpole-Balance", "--gpu-ids", "None", *SMALL, "--max-iterations", "4"]
        + ["--video", "--video-interval", "2", "--video-length", "8", "--video-width", "96"]
        + ["--video-height", "64"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, MUJOCO_GL=gl),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / EXPERIMENT).iterdir()
    videos = sorted((run_dir / "videos").iterdir())
    assert [v.name for v in videos] == ["train_0.mp4", "train_2.mp4"]
    for video in videos:
        assert f"video: {video}" in result.stdout
        meta, images = mp4_frames(video)
        assert tuple(meta["size"]) == (96, 64) and meta["fps"] == pytest.approx(50.0)  # the policy rate
        assert len(images) == 8 and images[0].std() > 5, "blank frame"
        assert any(not np.array_equal(images[0], image) for image in images[1:]), "the pole never moved"


# --------------------------------------------------------------------------- wandb (optional extra; .ci/run installs it)
WANDB_OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory):
    """A 2-iteration Cartpole run logged to an offline wandb run with --wandb-upload-checkpoints (and --video
    where headless GL works): (workdir, run dir, wandb run dir, train's result)."""
    pytest.importorskip(
        "wandb", reason="needs the wandb extra: `uv sync --extra wandb` (.ci/run installs it)"
    )
    from mjfleet.runs.video import working_gl_backend

    cwd = tmp_path_factory.mktemp("wandb")
    gl = os.environ.get("MUJOCO_GL") or working_gl_backend()
    video = ["--video", "--video-interval", "1", "--video-length", "4", "--video-width", "64"] if gl else []
    result = subprocess.run(
        [str(BIN / "train"), "Cartpole-Balance", "--gpu-ids", "None", *SMALL[:4], "--max-iterations", "2"]
        + ["--logger", "wandb", "--wandb-project", "mjfleet-test", "--wandb-upload-checkpoints"]
        + ["--save-interval", "1", *video],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, **WANDB_OFFLINE, **({"MUJOCO_GL": gl} if gl else {})),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (cwd / "logs" / EXPERIMENT).iterdir()
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    return cwd, run_dir, offline, result


def test_wandb_offline_logs_metrics_uploads_checkpoints_and_keeps_them_in_the_runs_files(wandb_run):
    _, run_dir, offline, _ = wandb_run
    assert list(offline.glob("*.wandb"))
    assert [it for it, _ in checkpoints_in(offline / "files")] == [1, 2]
    for it in (1, 2):
        assert (offline / "files" / f"model_{it}.pt").read_bytes() == (
            run_dir / f"model_{it}.pt"
        ).read_bytes()


def test_wandb_gets_the_training_videos(wandb_run):
    _, run_dir, offline, _ = wandb_run
    if not (run_dir / "videos").is_dir():
        pytest.skip(
            "no headless OpenGL here: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri (see .ci/run)"
        )
    assert sorted(v.name for v in (run_dir / "videos").iterdir()) == ["train_0.mp4", "train_1.mp4"]
    logged = list((offline / "files" / "media" / "videos").glob("video_*.mp4"))
    assert len(logged) == 2 and all(len(mp4_frames(v)[1]) == 4 for v in logged)


def _run_offline(cwd, command: list[str]) -> subprocess.CompletedProcess:
    """Run an mjfleet command with wandb offline; it must succeed."""
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=300, env=dict(os.environ, **WANDB_OFFLINE)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_play_takes_the_checkpoint_from_a_wandb_runs_local_files(wandb_run):
    cwd, run_dir, offline, _ = wandb_run
    run_id = offline.name.rsplit("-", 1)[1]
    (run_dir / "model_2.pt").unlink()  # only the wandb run's copy is left to find
    _run_offline(
        cwd,
        [str(BIN / "play"), "Cartpole-Balance", "--gpu-ids", "None", "--num-envs", "4", "--episodes", "4"]
        + ["--wandb-run-path", f"someone/mjfleet-test/{run_id}"],
    )
    report = json.loads((run_dir / "eval.json").read_text())  # in the run directory, not in wandb's files
    assert report["checkpoint"] == str((offline / "files" / "model_2.pt").resolve())
    assert report["iteration"] == 2 and report["episodes"] == 4


def test_resume_from_a_wandb_run_directory_continues_its_latest_checkpoint(wandb_run):
    cwd, run_dir, offline, _ = wandb_run
    result = _run_offline(
        cwd,
        [str(BIN / "train"), "Cartpole-Balance", "--gpu-ids", "None", *SMALL, "--max-iterations", "3"]
        + ["--wandb-run-path", str(offline)],
    )
    assert f"resuming from {(offline / 'files' / 'model_2.pt').resolve()} (iteration 2" in result.stdout
    (resumed,) = [r for r in (cwd / "logs" / EXPERIMENT).iterdir() if r != run_dir]
    assert iterations_in(resumed) == [2]
    assert read_checkpoint(resumed / "model_3.pt")["env_steps"] == 3 * 32 * 8


def test_a_wandb_run_without_local_checkpoints_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    from mjfleet.cli.play import main

    files = tmp_path / "logs" / EXPERIMENT / "2026-01-01_00-00-00" / "wandb" / "offline-run-1-abc" / "files"
    files.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", "--wandb-run-path", "abc"])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1, err
    assert "holds no checkpoint" in lines[0] and "--wandb-upload-checkpoints" in lines[0]


def test_runs_started_in_the_same_second_reserve_two_directories(tmp_path):
    """`train` reserves its run directory atomically in the launching process: a second run that computed the
    same name gets `<name>-1`; a run that fails before writing anything leaves no directory behind."""
    name = "2026-01-01_00-00-00_sweep"  # what RunDir.new computes for both in the same second
    first, second = RunDir(tmp_path / "exp" / name), RunDir(tmp_path / "exp" / name)
    a, b = first.reserve(), second.reserve()
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()
    assert b.path.name == a.path.name + "-1"
    b.remove_if_empty()
    assert not b.path.exists()
    a.create()
    a.remove_if_empty()  # params/ is there: kept
    assert a.path.is_dir()


def test_tensorboard_gets_rsl_rls_tags_beside_mjfleets_and_metrics_jsonl_only_mjfleets(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mjfleet.runs.metrics import MetricsWriter

    record = {"iteration": 3, "env_steps_per_s": 1234.5, "mean_episode_length": 7.0, "collect_time": 0.5}
    record |= {"learn_time": 0.25, "learning_rate": 1e-3, "Policy/action_std": 0.8, "Loss/kl": 0.01}
    writer = MetricsWriter(tmp_path, "tensorboard")
    writer.write(record, {"episodes": 100, "mean_return": 42.0, "mean_episode_length": 9.0})
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()

    def value(tag):
        (scalar,) = events.Scalars(tag)
        assert scalar.step == 3
        return scalar.value

    assert value("Perf/total_fps") == value("mjfleet/env_steps_per_s") == 1234.5
    assert value("Perf/collection_time") == value("Perf/collection time") == 0.5
    assert value("Perf/learning_time") == 0.25 and value("Loss/kl") == pytest.approx(0.01)
    assert value("Loss/learning_rate") == pytest.approx(1e-3) and value("Policy/mean_std") == pytest.approx(
        0.8
    )
    # rsl_rl's Train/mean_episode_length is the moving window; mjfleet's own (this iteration's episodes) is not
    # under Train/
    assert value("Train/mean_reward") == 42.0 and value("Train/mean_episode_length") == 9.0
    assert value("mjfleet/mean_episode_length") == 7.0
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line) == record


def test_tensorboard_train_mean_reward_is_the_mean_of_the_last_100_episodes_of_a_real_run(tmp_path):
    """A real Cartpole run with the TensorBoard logger, its episodes observed at env.step: Train/mean_reward and
    Train/mean_episode_length are rsl_rl's means over the last 100 completed episodes; metrics.jsonl keeps
    mjfleet's per-iteration means."""
    from collections import deque

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runner, run_dir = _runner(tmp_path, seed=4, episode_length_s=0.1, logger="tensorboard")
    env, real_step = runner.env, runner.env.step
    returns, lengths = deque(maxlen=100), deque(maxlen=100)
    running, steps = torch.zeros(env.num_envs), torch.zeros(env.num_envs)
    expected = []

    def observed_step(actions):
        obs, rewards, dones, extras = real_step(actions)
        running.add_(rewards.cpu())
        steps.add_(1)
        ended = dones.cpu().bool()
        returns.extend(running[ended].tolist())
        lengths.extend(steps[ended].tolist())
        running[ended], steps[ended] = 0.0, 0.0
        return obs, rewards, dones, extras

    env.step = observed_step
    runner.hooks.on_iteration = lambda record: expected.append(
        (record["iteration"], sum(returns) / len(returns), sum(lengths) / len(lengths), len(returns))
    )
    runner.learn(6)
    runner.close()
    assert expected[-1][3] == 100, "the window must have filled (and dropped episodes) for this test to bite"

    events = EventAccumulator(str(run_dir.path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    rsl_rl = {"Train/mean_reward", "Train/mean_episode_length", "Perf/total_fps", "Perf/collection time"}
    rsl_rl |= {"Perf/collection_time", "Perf/learning_time", "Loss/learning_rate", "Policy/mean_std"}
    rsl_rl |= {"Loss/value", "Loss/surrogate", "Loss/entropy"}
    assert rsl_rl <= tags
    reward = {s.step: s.value for s in events.Scalars("Train/mean_reward")}
    length = {s.step: s.value for s in events.Scalars("Train/mean_episode_length")}
    for iteration, mean_return, mean_length, _ in expected:
        assert reward[iteration] == pytest.approx(mean_return, rel=1e-4)
        assert length[iteration] == pytest.approx(mean_length, rel=1e-4)
    records = [json.loads(line) for line in (run_dir.path / "metrics.jsonl").read_text().splitlines()]
    own = {s.step: s.value for s in events.Scalars("mjfleet/mean_return")}
    assert [own[r["iteration"]] for r in records] == pytest.approx([r["mean_return"] for r in records])
    only_rsl_rl = rsl_rl - {"Loss/value", "Loss/surrogate", "Loss/entropy"}
    assert not only_rsl_rl & {key for r in records for key in r}


def test_the_git_state_is_the_commit_and_the_diff_of_the_working_tree(tmp_path):
    import subprocess

    from mjfleet.runs.provenance import git_state

    assert git_state(tmp_path) is None  # not a repository

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    (tmp_path / "task.py").write_text("GAIN = 1\n")
    git("add", "task.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    state, diff = git_state(tmp_path)
    assert state == {"commit": git("rev-parse", "HEAD").strip(), "dirty": False} and diff == ""
    (tmp_path / "task.py").write_text("GAIN = 2\n")
    state, diff = git_state(tmp_path)
    assert state["dirty"] and "+GAIN = 2" in diff
