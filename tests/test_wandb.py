"""Weights & Biases, offline (an optional extra; .ci/run installs it): metrics, checkpoints and videos reach the
wandb run, and play and resume find checkpoints in its local files."""

import json
import os
import sys

import pytest
from helpers import (
    ALGORITHM_FLAGS,
    CARTPOLE_EXPERIMENT,
    NO_GL,
    SMALL_CARTPOLE,
    copy_workdir,
    iterations_in,
    missing_infrastructure,
    mp4_frames,
    run_cli,
)

from mjfleet.runs.checkpoints import checkpoints_in, read_checkpoint

EXPERIMENT = CARTPOLE_EXPERIMENT
SMALL = SMALL_CARTPOLE
WANDB_OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}


@pytest.fixture(scope="module", params=sorted(ALGORITHM_FLAGS))
def wandb_run(request, tmp_path_factory):
    """A 2-iteration Cartpole run (PPO, then SAC) logged to an offline wandb run with --wandb-upload-checkpoints
    (and --video where headless GL works): (workdir, run dir, wandb run dir, train's result, algorithm flags)."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        missing_infrastructure("needs the wandb extra: `uv sync --extra wandb` (.ci/run installs it)")
    from mjfleet.runs.video import working_gl_backend

    algorithm = ALGORITHM_FLAGS[request.param]
    cwd = tmp_path_factory.mktemp(f"wandb_{request.param}")
    gl = os.environ.get("MUJOCO_GL") or working_gl_backend()
    video = ["--video", "--video-interval", "1", "--video-length", "4", "--video-width", "64"] if gl else []
    result = run_cli(
        "train", "Cartpole-Balance", "--gpu-ids", "None", *SMALL[:4], "--max-iterations", "2",
        "--logger", "wandb", "--wandb-project", "mjfleet-test", "--wandb-upload-checkpoints",
        "--save-interval", "1", *video, *algorithm,
        cwd=cwd, env={**WANDB_OFFLINE, **({"MUJOCO_GL": gl} if gl else {})}, check=True,
    )  # fmt: skip
    (run_dir,) = (cwd / "logs" / EXPERIMENT).iterdir()
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    return cwd, run_dir, offline, result, algorithm


def test_wandb_offline_logs_metrics_uploads_checkpoints_and_keeps_them_in_the_runs_files(wandb_run):
    _, run_dir, offline, *_ = wandb_run
    assert list(offline.glob("*.wandb"))
    assert [it for it, _ in checkpoints_in(offline / "files")] == [1, 2]
    for it in (1, 2):
        assert (offline / "files" / f"model_{it}.pt").read_bytes() == (
            run_dir / f"model_{it}.pt"
        ).read_bytes()


def test_wandb_gets_the_training_videos(wandb_run):
    _, run_dir, offline, *_ = wandb_run
    if not (run_dir / "videos").is_dir():
        missing_infrastructure(NO_GL)
    assert sorted(v.name for v in (run_dir / "videos").iterdir()) == ["train_0.mp4", "train_1.mp4"]
    logged = list((offline / "files" / "media" / "videos").glob("video_*.mp4"))
    assert len(logged) == 2 and all(len(mp4_frames(v)[1]) == 4 for v in logged)


def test_play_takes_the_checkpoint_from_a_wandb_runs_local_files(wandb_run, tmp_path):
    shared, run_dir, offline, *_ = wandb_run
    # A private copy: the shared run keeps the checkpoint this test deletes (the other tests read it, in any order).
    cwd = copy_workdir(shared, tmp_path)
    run_dir, offline = cwd / run_dir.relative_to(shared), cwd / offline.relative_to(shared)
    run_id = offline.name.rsplit("-", 1)[1]
    (run_dir / "model_2.pt").unlink()  # only the wandb run's copy is left to find
    run_cli("play", "Cartpole-Balance", "--gpu-ids", "None", "--num-envs", "4", "--episodes", "4",
            "--wandb-run-path", f"someone/mjfleet-test/{run_id}", cwd=cwd, env=WANDB_OFFLINE, check=True)  # fmt: skip
    report = json.loads((run_dir / "eval.json").read_text())  # in the run directory, not in wandb's files
    assert report["checkpoint"] == str((offline / "files" / "model_2.pt").resolve())
    assert report["iteration"] == 2 and report["episodes"] == 4


def test_resume_from_a_wandb_run_directory_continues_its_latest_checkpoint(wandb_run):
    cwd, run_dir, offline, _, algorithm = wandb_run
    result = run_cli("train", "Cartpole-Balance", "--gpu-ids", "None", *SMALL, *algorithm, "--max-iterations", "3",
                     "--wandb-run-path", str(offline), cwd=cwd, env=WANDB_OFFLINE, check=True)  # fmt: skip
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
