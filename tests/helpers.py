"""What the tests share: running mjfleet's console scripts as a user does, and readers of what a run wrote."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

import pytest

T = TypeVar("T")

BIN = pathlib.Path(sys.executable).parent
"""The virtual environment's scripts: `train`, `play`, `tasks`, `plot`, `bench` as installed."""

CARTPOLE_EXPERIMENT = "cartpole_balance"
SMALL_CARTPOLE = [
    "--num-envs",
    "32",
    "--agent.num-steps-per-env",
    "8",
    "--logger",
    "none",
    "--log-format",
    "compact",
]
"""A short Cartpole-Balance run: 32 environments, 8-step rollouts, no dashboard, one line per iteration."""
CARTPOLE_OPTIMIZER_STEPS_PER_ITERATION = 20
"""5 epochs x 4 mini-batches: the Cartpole agent's optimizer steps per iteration."""
ALGORITHM_FLAGS = {
    "ppo": [],
    "sac": ["--algorithm", "sac", "--agent.sac.batch-size", "64", "--agent.sac.random-steps", "4"],
}
"""`train` flags per algorithm, for the tests of what PPO and SAC share (SAC: small batches, a one-iteration
warm-up). A SAC run is resumed with its flags too: resuming it as PPO is an error."""
TWO_CPU_WORKERS = ["--gpu-ids", "None", "--cpu-workers", "2", "--num-envs", "16", "--agent.num-steps-per-env", "8"]  # fmt: skip
"""2 CPU workers x 16 Cartpole environments, 8-step iterations: the smallest real data-parallel `train`."""

NO_GL = "no headless OpenGL here: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri (see .ci/run)"


def run_cli(
    program: str,
    *args: str,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str | None] | None = None,
    timeout: float = 300,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`program` with `args` in a process of its own, to its end: a console script of this environment by name
    (`train`, `play`, ...) or any executable by path. Output is captured as text; the environment is this
    process's with `env`'s changes (a None value removes the variable). With `check`, an exit status other than
    0 fails the test and shows the end of stderr."""
    command = [program if os.sep in program else str(BIN / program), *args]
    environ = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    result = subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout[-1000:] + result.stderr[-3000:]
    return result


def assert_one_line_usage_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit status 2 and one line on stderr holding every needle: mjfleet's answer to bad input."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]


def assert_usage_exit(exit_info: pytest.ExceptionInfo[SystemExit], err: str, *needles: str) -> None:
    """The in-process form of `assert_one_line_usage_error`: a `main()` that raised SystemExit, and its stderr."""
    assert_one_line_usage_error(subprocess.CompletedProcess([], exit_info.value.code, "", err), *needles)


def assert_cartpole_balanced(report: dict) -> None:
    """The guard of the tests that compare what a trained Cartpole-Balance policy does (play against training,
    MuJoCo C against play): every one of its 1-second episodes timed out. Zero actions earn 39.3 of 50 in these
    episodes and let the pole fall in every one, at step 40; a policy that learned nothing makes the comparison
    prove nothing. With `play --baselines`, the zero baseline is checked to fall too, so the guard stays a demand."""
    ended_early = sum(n for cause, n in report["terminations"].items() if cause != "time_out")
    assert ended_early == 0, (
        f"the policy did not learn ({ended_early} episodes fell): the test proves nothing"
    )
    zero = (report.get("baselines") or {}).get("zero")
    if zero is not None:
        assert zero["terminations"].get("time_out", 0) < zero["episodes_ended"], "zero actions balanced too"


def metrics(run_dir: pathlib.Path) -> list[dict]:
    """metrics.jsonl of a run: one record per iteration."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def iterations_in(run_dir: pathlib.Path) -> list[int]:
    return [record["iteration"] for record in metrics(run_dir)]


def copy_workdir(source: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A private copy of a shared fixture's working directory (its logs/ and all), for a test that writes there."""
    target = tmp_path / source.name
    shutil.copytree(source, target, symlinks=True)
    return target


# --- infrastructure .ci/run installs: skipped outside CI, a failure under CI -------------------------------------


def in_ci() -> bool:
    """Whether this is a CI run (`CI=true`, as .ci/run and hosted CI set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_infrastructure(reason: str) -> NoReturn:
    """The one decision for a test whose infrastructure (EGL, Xvfb, sshd and network namespaces, Slurm, Chromium,
    the wandb extra: what .ci/run installs) is missing: outside CI it skips with `reason`; under CI it fails, so a
    failed install cannot turn into a green run with the check silently gone. Hardware (CUDA) is not this: it
    skips everywhere, with pytest.mark.skipif."""
    if in_ci():
        pytest.fail(f"CI=true and this test's infrastructure is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def require_infrastructure(reason: str | None) -> None:
    """`missing_infrastructure(reason)` unless `reason` is None (nothing missing)."""
    if reason is not None:
        missing_infrastructure(reason)


def needs_infrastructure(probe: Callable[[], str | None]) -> pytest.MarkDecorator:
    """Mark for a test that needs infrastructure: before its fixtures are set up, `probe()` (None when everything
    is there, else why not) goes to `require_infrastructure` (tests/conftest.py's pytest_runtest_setup)."""
    return pytest.mark.infrastructure.with_args(probe)  # not `(probe)`: that would mark `probe` itself


@functools.cache
def headless_gl() -> str | None:
    """The headless OpenGL backend MuJoCo renders videos with here (MUJOCO_GL, else the first that works), None
    where there is none. Probed once per test session: each probe is a subprocess importing mujoco."""
    from mjfleet.runs.video import working_gl_backend

    return os.environ.get("MUJOCO_GL") or working_gl_backend()


def gl_backend_or_skip() -> str:
    """The headless OpenGL backend MuJoCo renders videos with here; where there is none, skips the test (fails
    it under CI)."""
    gl = headless_gl()
    if not gl:
        missing_infrastructure(NO_GL)
    return gl


def mp4_frames(path: pathlib.Path) -> tuple[dict, list]:
    """(ffmpeg's metadata, the frames as (H, W, 3) uint8 arrays) of an MP4 file."""
    import imageio_ffmpeg
    import numpy as np

    frames = imageio_ffmpeg.read_frames(str(path))
    meta = next(frames)
    width, height = meta["size"]
    return meta, [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in frames]


def assert_real_plot(path: pathlib.Path) -> None:
    """A PNG of a drawn plot: large enough, and not blank."""
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    image = matplotlib.image.imread(str(path))
    assert image.shape[0] >= 400 and image.shape[1] >= 600
    assert float(image[..., :3].std()) > 0.05, "the plot is blank"


def live_processes_in_session(sid: int) -> list[int]:
    """Pids of the processes still running (not zombies) in session `sid`, read from /proc."""
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


def poll(
    probe: Callable[[], T], until: Callable[[T], bool] = bool, timeout: float = 30.0, every: float = 0.1
) -> T:
    """`probe()` every `every` s until `until` holds for its value or `timeout` s have passed; its last value
    either way, for the test to assert on. On a shared machine how long something takes is not what a test checks:
    it waits for the condition itself, with a deadline that only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not until(value := probe()) and time.monotonic() < deadline:
        time.sleep(every)
    return value


def assert_session_ends(sid: int, timeout: float = 30.0) -> None:
    """Every process of session `sid` (a run started with its own session) is gone within `timeout` s; else the
    test fails naming the survivors."""
    left = poll(lambda: live_processes_in_session(sid), lambda pids: not pids, timeout)
    survivors = []
    for pid in left:
        try:
            command = (
                pathlib.Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            command = "gone while being named"
        survivors.append(f"{pid} ({command.strip()})")
    assert not survivors, f"processes of the run outlived it by {timeout:.0f} s: " + "; ".join(survivors)


def cartpole_runner(tmp_path: pathlib.Path, seed: int, episode_length_s: float = 0.3, logger: str = "none"):
    """(FleetRunner, RunDir): a small Cartpole-Balance runner in this process (16 envs, 8-step rollouts, normalised
    observations) writing a fresh run directory under `tmp_path`."""
    import torch
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


def _written(text: str | re.Pattern[str], out: bytes) -> bool:
    if isinstance(text, str):
        return text.encode() in out
    return text.search(out.decode(errors="replace")) is not None


def run_in_terminal(
    argv: list[str],
    env: dict[str, str] | None = None,
    timeout: float = 300,
    interrupt_after: str | re.Pattern[str] | None = None,
) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal as its stdin, stdout and stderr, as a user's shell does; return its exit
    status and everything it wrote (escape codes included). With `interrupt_after`, send Ctrl-C (SIGINT to its
    process group, as a terminal does) once that text (or a match of that pattern) has been written."""
    import pty
    import select
    import signal

    main, child = pty.openpty()
    proc = subprocess.Popen(
        argv,
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    os.close(child)
    out, deadline, interrupted = b"", time.monotonic() + timeout, False
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child closed the terminal: Linux reports EIO
                    chunk = b""
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
            if interrupt_after and not interrupted and _written(interrupt_after, out):
                os.killpg(proc.pid, signal.SIGINT)
                interrupted = True
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{argv[0]} still running after {timeout} s; it wrote:\n{out[-4000:].decode()}"
                )
        return proc.wait(timeout=30), out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(main)
