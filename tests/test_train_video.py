"""Videos while training: `--video` records environment 0 every interval, and its bad values are one line."""

import os

import numpy as np
import pytest
from helpers import (
    ALGORITHM_FLAGS,
    CARTPOLE_EXPERIMENT,
    SMALL_CARTPOLE,
    gl_backend_or_skip,
    mp4_frames,
    run_cli,
)

EXPERIMENT = CARTPOLE_EXPERIMENT
SMALL = SMALL_CARTPOLE


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


@pytest.mark.parametrize("algorithm", sorted(ALGORITHM_FLAGS))
def test_train_video_records_env_0_every_interval_iterations(algorithm, tmp_path):
    """4 iterations of 8 steps, --video-interval 2 --video-length 8: one rollout each at iterations 0 and 2."""
    gl = gl_backend_or_skip()
    result = run_cli(
        "train", "Cartpole-Balance", "--gpu-ids", "None", *SMALL, *ALGORITHM_FLAGS[algorithm], "--max-iterations", "4",
        "--video", "--video-interval", "2", "--video-length", "8", "--video-width", "96", "--video-height", "64",
        cwd=tmp_path, env={"MUJOCO_GL": gl}, check=True,
    )  # fmt: skip
    (run_dir,) = (tmp_path / "logs" / EXPERIMENT).iterdir()
    videos = sorted((run_dir / "videos").iterdir())
    assert [v.name for v in videos] == ["train_0.mp4", "train_2.mp4"]
    for video in videos:
        assert f"video: {video}" in result.stdout
        meta, images = mp4_frames(video)
        assert tuple(meta["size"]) == (96, 64) and meta["fps"] == pytest.approx(50.0)  # the policy rate
        assert len(images) == 8 and images[0].std() > 5, "blank frame"
        assert any(not np.array_equal(images[0], image) for image in images[1:]), "the pole never moved"
