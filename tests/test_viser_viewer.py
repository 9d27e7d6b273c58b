"""`play --viewer viser`: the browser viewer, seen by a real (headless) Chromium through Playwright.

Chromium is Debian's (`chromium`, installed by .ci/run); WebGL runs on SwiftShader, the CPU. The test trains a
tiny quadruped run, starts `play` on it, and checks what a person would: robots drawn on the page, moving, and a
command set with the page's slider reaching the simulation.
"""

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers import needs_infrastructure

BIN = pathlib.Path(sys.executable).parent
ROOT = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS_IMAGE = ROOT / "docs" / "images" / "viewer.png"
NEEDS_CHROMIUM = needs_infrastructure(
    lambda: (
        None
        if pathlib.Path(CHROMIUM).exists()
        else f"needs Debian's chromium, not at {CHROMIUM} (apt-get install chromium; .ci/run installs it)"
    )
)
BROWSER_ARGS = [
    "--no-sandbox",  # CI runs as root
    # WebGL on the CPU: no GPU here, and SwiftShader is what Chromium ships for that.
    "--use-gl=angle", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
    # Nothing but the page: no updates, sync or first-run requests to anywhere.
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--disable-extensions",
]  # fmt: skip
VIEW = {"width": 1280, "height": 800}
SCENE = {"x": 0, "y": 200, "width": 900, "height": 600}
"""The part of the page with the 3D scene only: left of the control panel, below the notifications."""


def start(command: list[str], cwd: pathlib.Path) -> subprocess.Popen:
    """`command` started unbuffered, its stdout and stderr one text pipe (read with `Lines`)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def run(*args: str, cwd: pathlib.Path) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([str(BIN / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A Quadruped-Velocity-Flat run of 2 iterations with a checkpoint after each; returns its working directory."""
    cwd = tmp_path_factory.mktemp("viser")
    run("train", "Quadruped-Velocity-Flat", "--gpu-ids", "None", "--num-envs", "4", "--agent.num-steps-per-env",
        "4", "--max-iterations", "2", "--agent.save-interval", "1", "--logger", "none", cwd=cwd)  # fmt: skip
    return cwd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lines:
    """A process's stdout lines, read on a thread so that the test can wait for one with a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        self._thread = threading.Thread(
            target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True
        )
        self._thread.start()

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                match = re.search(pattern, line)
                if match:
                    return match
            time.sleep(0.2)
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n" + "".join(self.lines))


def robot_pixels(png: bytes) -> np.ndarray:
    """Mask of the quadruped's trunk colour (orange-brown) in a screenshot; the floor and sky are grey."""
    import io

    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return (r - g > 25) & (g - b > 25)


@NEEDS_CHROMIUM
@pytest.mark.slow  # a real browser on software WebGL: `.ci/run` runs it in its second step
def test_the_browser_viewer_draws_the_walking_robots_and_takes_commands(trained, tmp_path):
    from playwright.sync_api import sync_playwright

    port = free_port()
    args = ["Quadruped-Velocity-Flat", "--gpu-ids", "None", "--num-envs", "4", "--episodes", "400",
            "--viewer", "viser", "--viewer-port", str(port), "--output", str(tmp_path / "eval.json")]  # fmt: skip
    proc = start([str(BIN / "play"), *args], cwd=trained)
    try:
        lines = Lines(proc)
        url = lines.wait_for(r"open (http://127\.0\.0\.1:(\d+)) \(from another machine: ssh -L", 180)
        assert int(url.group(2)) == port
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=BROWSER_ARGS,
                viewport=VIEW,
            )
            try:
                page = browser.new_page()
                page.goto(url.group(1))
                # The robots are drawn: trunk-coloured pixels in the scene (the first frames take SwiftShader a while).
                deadline, drawn = time.monotonic() + 120, 0
                while time.monotonic() < deadline and drawn < 300:
                    time.sleep(1)
                    first = page.screenshot(clip=SCENE)
                    drawn = int(robot_pixels(first).sum())
                assert drawn >= 300, f"no robot drawn: {drawn} trunk-coloured pixels"
                # ...and move as the policy acts (software WebGL on a busy machine may draw few frames a second:
                # look again until the robots have moved, for up to 30 s).
                deadline, changed = time.monotonic() + 30, 0
                while time.monotonic() < deadline and changed <= 50:
                    time.sleep(1)
                    second = page.screenshot(clip=SCENE)
                    changed = int((robot_pixels(first) != robot_pixels(second)).sum())
                assert changed > 50, f"the picture did not change in 30 s: {changed} pixels"

                # A command from the page reaches the simulation: vx to its maximum with the slider's End key.
                page.get_by_role("slider").nth(1).focus()  # sliders: speed, vx, vy, wz
                page.keyboard.press("End")
                lines.wait_for(r"viewer: command \(vx, vy, wz\) = \(1\.00, 0\.00, 0\.00\)", 30)
                status = page.get_by_text(re.compile(r"command vx 1\.00 vy 0\.00 wz 0\.00"))
                status.wait_for(timeout=30_000)

                # Another of the run's checkpoints, without restarting.
                page.get_by_role("combobox", name="checkpoint").click()
                page.get_by_role("option", name="model_1.pt").click()
                lines.wait_for(r"viewer: policy now model_1\.pt", 30)

                # The README's picture, taken under tmp_path: into the checkout only on request (CONTRIBUTING.md).
                page.add_style_tag(content=".mantine-Notification-root { display: none; }")
                time.sleep(1)  # the notifications' last frame gone (nothing is asserted on time here)
                page.screenshot(path=str(tmp_path / "viewer.png"))
                if os.environ.get("MJFLEET_UPDATE_DOCS_IMAGE") == "1":
                    shutil.copyfile(tmp_path / "viewer.png", DOCS_IMAGE)

                page.get_by_role("button", name="Stop").click()
                proc.wait(timeout=60)
            finally:
                browser.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    out = "".join(lines.lines)
    assert proc.returncode == 0, out
    assert "viewer closed: the evaluation stopped after" in out
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["viewer"]["kind"] == "viser" and report["viewer"]["closed_early"] is True
    assert report["viewer"]["port"] == port


def test_the_browser_viewer_binds_loopback_and_moves_to_a_free_port_when_busy(tmp_path):
    """With the asked port taken, it serves on another one, on 127.0.0.1 only; no other port is opened."""
    from mjfleet.tasks import get_task
    from mjfleet.viewers.browser import BrowserViewer

    before = _listening_ports(os.getpid())  # what earlier tests in this process may have left listening
    spec = get_task("Cartpole-Balance")
    cfg = spec.env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        viewer = BrowserViewer(env, lambda obs: None, envs=2, port=busy)
        try:
            assert viewer.port != busy
            with socket.create_connection(("127.0.0.1", viewer.port), timeout=5):
                pass
            listening = _listening_ports(os.getpid())
            assert viewer.port in listening and listening - before - {viewer.port, busy} == set(), listening
            assert _bound_address(os.getpid(), viewer.port) == "127.0.0.1"
        finally:
            viewer.close()


def _listening_ports(pid: int) -> set[int]:
    import psutil

    return {c.laddr.port for c in psutil.Process(pid).net_connections() if c.status == psutil.CONN_LISTEN}


def _bound_address(pid: int, port: int) -> str:
    import psutil

    (address,) = {
        c.laddr.ip
        for c in psutil.Process(pid).net_connections()
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }
    return address


def test_a_bare_viewer_flag_without_a_display_serves_the_browser_viewer(tmp_path, monkeypatch, capsys):
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    port = free_port()
    main(["Cartpole-Balance", "--agent", "zero", "--gpu-ids", "None", "--num-envs", "2", "--episodes", "2",
          "--env.episode-length-s", "0.5", "--speed", "50", "--viewer", "--viewer-port", str(port)])  # fmt: skip
    out = capsys.readouterr().out
    assert (
        "viewer: no window (needs a display and DISPLAY is not set): showing it in a web browser instead"
        in out
    )
    assert f"open http://127.0.0.1:{port} (from another machine: ssh -L {port}:127.0.0.1:{port} " in out
    assert "warning" not in out and "over 2 episodes" in out
    report = json.loads((tmp_path / "logs" / "cartpole_balance" / "baseline_zero" / "eval.json").read_text())
    assert report["viewer"] == {
        "kind": "viser",
        "env": 0,
        "speed": 50.0,
        "closed_early": False,
        "envs": 2,
        "port": port,
    }


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--viewer-envs", "0"], "--viewer-envs must be >= 1"),
        (["--viewer-host", "localhost"], "--viewer-host 'localhost': give an IP address"),
        (["--viewer-port", "0"], "--viewer-port must be in 1..65535"),
        (["--viewer-env", "5"], "--viewer-env 5: there are 2 environments"),
    ],
)
def test_bad_browser_viewer_flags_are_one_line_usage_errors(flags, needle, tmp_path, monkeypatch, capsys):
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "Cartpole-Balance",
                "--agent",
                "zero",
                "--gpu-ids",
                "None",
                "--num-envs",
                "2",
                "--viewer",
                "viser",
                *flags,
            ]
        )
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and needle in lines[0], lines


def test_only_a_viewer_that_other_machines_can_reach_gets_a_warning():
    from mjfleet.viewers.scene import exposure_warning

    assert exposure_warning("127.0.0.1") is None and exposure_warning("::1") is None
    warning = exposure_warning("0.0.0.0")
    assert (
        warning is not None
        and warning.startswith("warning: the viewer listens on 0.0.0.0")
        and "ssh -L" in warning
    )


def test_the_training_view_draws_at_most_fps_times_a_second():
    """`train --viewer viser`'s per-step hook: most steps cost one clock read, a drawing happens every 1/fps s."""
    from mjfleet.tasks import get_task
    from mjfleet.viewers.scene import TrainingView

    spec = get_task("Cartpole-Balance")
    cfg = spec.env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg)
    fps = 5.0
    view = TrainingView(env, fps=fps, envs=2, port=free_port())
    try:
        # Counted against the time the steps really took (a loaded machine may stall anywhere in them): the first
        # step draws, then at most one drawing per 1/fps s.
        started = time.perf_counter()
        for _ in range(200):
            view.step()
        elapsed = time.perf_counter() - started
        assert view.steps == 200 and 1 <= view.draws <= 1 + elapsed * fps + 1e-9, (view.draws, elapsed)
        # A step more than 1/fps s after the last drawing draws again, however long anything took.
        drawn = view.draws
        time.sleep(1.25 / fps)
        view.step()
        assert view.draws == drawn + 1
    finally:
        view.close()


def test_train_serves_the_training_view_on_loopback_while_it_trains(tmp_path):
    import signal
    import urllib.request

    port = free_port()
    proc = start(
        # fmt: off
        [
            str(BIN / "train"),
            "Cartpole-Balance",
            "--gpu-ids",
            "None",
            "--num-envs",
            "16",
            "--max-iterations",
            "100000",
            "--logger",
            "none",
            "--log-format",
            "compact",
            "--viewer",
            "viser",
            "--viewer-port",
            str(port),
        ],
        # fmt: on
        cwd=tmp_path,
    )
    try:
        lines = Lines(proc)
        lines.wait_for(
            rf"viewer: rank 0's environments 0\.\.3 of Cartpole-Balance while training, read-only; open http://127\.0\.0\.1:{port} ",
            180,
        )
        lines.wait_for(r"^it \d+/100000", 120)  # training goes on with the viewer up
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
        proc.send_signal(signal.SIGINT)  # a clean stop: finish the iteration, save, close the viewer
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    out = "".join(lines.lines)
    assert "Traceback" not in out, out
    with pytest.raises(OSError):  # the server went with the process
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_browser_viewer_starts_a_recurrent_policys_memory_anew_on_reset_and_checkpoint_switch(tmp_path):
    """The page's Reset restarts every episode and the policy's hidden state with them; a checkpoint chosen on the
    page acts from a zero state. (The page's buttons only set these requests: the browser test clicks them.)"""
    import copy

    import torch
    from rsl_rl.models import RNNModel

    from mjfleet.evaluation import ActorPolicy
    from mjfleet.tasks import get_task
    from mjfleet.viewers.browser import BrowserViewer

    spec = get_task("Cartpole-Balance")
    cfg = spec.env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg)
    obs = env.get_observations()
    torch.manual_seed(0)
    actor = RNNModel(obs, {"actor": ["actor"]}, "actor", env.num_actions, hidden_dims=[8], rnn_type="gru",
                     rnn_hidden_dim=8).eval()  # fmt: skip
    other = copy.deepcopy(actor)
    viewer = BrowserViewer(env, ActorPolicy(actor), envs=2, speed=100.0, port=free_port(),
                           checkpoints={"model_1.pt": tmp_path / "model_1.pt"},
                           load_policy=lambda path: ActorPolicy(other))  # fmt: skip
    try:
        with torch.inference_mode():
            for _ in range(3):
                obs, *_ = env.step(viewer(obs))
            assert actor.get_hidden_state().abs().sum() > 0
            viewer._request("reset", True)
            viewer.show()
            assert int(env.episode_length_buf.max()) == 0
            assert actor.get_hidden_state() is None  # zeros at the next step, as at the start

            for _ in range(3):
                obs, *_ = env.step(viewer(obs))
            viewer._request("checkpoint", "model_1.pt")
            viewer.show()
            assert viewer.policy.actor is other
            fresh = copy.deepcopy(other)
            torch.testing.assert_close(viewer(obs), fresh(obs), rtol=0, atol=0)  # from a zero state
    finally:
        viewer.close()
