"""`play --viewer`: a real MuJoCo viewer window on a virtual X display (Xvfb), as a person would see it."""

import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import needs_infrastructure, poll

BIN = pathlib.Path(sys.executable).parent


def _why_no_display() -> str | None:
    missing = [tool for tool in ("Xvfb", "xwd", "convert") if shutil.which(tool) is None]
    if missing:
        return (
            f"needs Xvfb, xwd and ImageMagick ({', '.join(missing)} missing; Debian: xvfb x11-apps imagemagick; "
            ".ci/run installs them)"
        )
    return None


NEEDS_X = needs_infrastructure(_why_no_display)


@pytest.fixture
def display():
    """A fresh Xvfb server on a free display number; yields ":N"."""
    for number in range(90, 140):
        if (
            not pathlib.Path(f"/tmp/.X11-unix/X{number}").exists()
            and not pathlib.Path(f"/tmp/.X{number}-lock").exists()
        ):
            break
    name = f":{number}"
    server = subprocess.Popen(
        ["Xvfb", name, "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not pathlib.Path(f"/tmp/.X11-unix/X{number}").exists():
        assert server.poll() is None and time.monotonic() < deadline, "Xvfb did not start"
        time.sleep(0.1)
    yield name
    server.terminate()
    server.wait(timeout=10)


def screenshot(display: str, path: pathlib.Path) -> np.ndarray:
    """The whole X screen as an (H, W, 3) array (xwd, converted to PNG by ImageMagick)."""
    from PIL import Image

    dump = subprocess.run(["xwd", "-root", "-silent", "-display", display], capture_output=True, check=True)
    subprocess.run(["convert", "xwd:-", str(path)], input=dump.stdout, check=True)
    return np.asarray(Image.open(path).convert("RGB"))


def colours(image: np.ndarray) -> int:
    """How many distinct colours a screenshot holds."""
    return len(np.unique(image.reshape(-1, 3), axis=0))


@NEEDS_X
def test_viewer_shows_a_window_and_ends_with_the_episodes(display, tmp_path):
    # Cartpole-Swingup never terminates early: 2 environments x 1 episode of 4 s at real time keep the window up
    # for 4 s (a random policy needs no checkpoint).
    env = {**os.environ, "DISPLAY": display, "PYTHONUNBUFFERED": "1"}
    env.pop("MUJOCO_GL", None)  # the viewer draws with GLFW on the display, whatever the headless backend
    args = ["Cartpole-Swingup", "--agent", "random", "--gpu-ids", "None", "--num-envs", "2", "--episodes", "2",
            "--env.episode-length-s", "4", "--viewer", "--viewer-env", "1"]  # fmt: skip
    proc = subprocess.Popen(
        [str(BIN / "play"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the viewer's line comes once its window is open
        assert first.startswith("viewer: environment 1 of Cartpole-Swingup at 1x real time"), (
            first + proc.stderr.read() if proc.poll() is not None else first
        )

        def while_playing() -> np.ndarray:
            assert proc.poll() is None, "play ended before its window showed a drawn scene"
            return screenshot(display, tmp_path / "screen.png")

        # The first frames take a while on a busy machine: look until the scene is drawn (a hang guard, no timing).
        image = poll(
            while_playing, lambda shot: colours(shot) > 50 and shot.std() > 10, timeout=60, every=0.2
        )
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Not blank: a drawn scene has many colours and varies across the window.
    assert colours(image) > 50 and image.std() > 10, (
        f"blank screen after 60 s: {colours(image)} colours, std {image.std():.1f}"
    )
    assert proc.returncode == 0, err
    assert "over 2 episodes" in out and "eval written to" in out


@pytest.mark.parametrize(
    ("display", "needle"),
    [
        (None, "--viewer native needs a display"),
        (":239", "--viewer native cannot open a window on display ':239'"),
    ],  # no X server at :239
)
def test_native_viewer_without_a_usable_display_is_one_line_suggesting_the_browser_or_a_video(
    display, needle, tmp_path, monkeypatch, capsys
):
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if display is None:
        monkeypatch.delenv("DISPLAY", raising=False)
    else:
        monkeypatch.setenv("DISPLAY", display)
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--agent", "zero", "--gpu-ids", "None", "--viewer", "native"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1, lines
    assert (
        needle in lines[0] and "--viewer viser" in lines[0] and "record a video instead: --video" in lines[0]
    )


def test_a_closed_viewer_stops_the_evaluation_at_that_step():
    """What a closed window does: the evaluation's on_step hook returns False, and it stops there."""
    from mjfleet.evaluation import evaluate, zero_policy
    from mjfleet.tasks import get_task

    spec = get_task("Cartpole-Swingup")  # episodes of 400 steps: none ends within the first 30
    cfg = spec.env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg)
    calls = []

    def on_step() -> bool:  # the window "closes" after 30 steps
        calls.append(env.episode_length_buf.clone())
        return len(calls) <= 30

    result = evaluate(env, zero_policy(env), episodes=2, on_step=on_step)
    assert result["steps"] == 30 and result["episodes"] == 0 and len(calls) == 31
    assert calls[0].tolist() == [0, 0]  # first called after the reset, then after every step
    assert calls[30].tolist() == [30, 30]
