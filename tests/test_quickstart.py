"""docs/quickstart.md followed as a newcomer follows it: its commands in page order, in one working directory, each
through a shell (globs expand as they would for the reader), each exiting 0. Sizes are tiny (16 Cartpole
environments on the CPU, a few iterations, short evaluations); the commands are otherwise the page's own.

The "Scale out" step needs GPUs, other machines or Slurm: tests/test_docs.py parses its commands against the CLI,
and tests/test_distributed.py, test_hosts.py and test_slurm.py run those paths for real. Watching live
(`play --viewer`) needs a display or a browser: tests/test_viewer.py and test_viser_viewer.py run it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

from helpers import BIN, headless_gl, in_ci
from test_docs import ROOT, TINY, _tiny_run, commands_in

QUICKSTART = ROOT / "docs" / "quickstart.md"
TRAIN = ["--gpu-ids", "None", "--num-envs", "16", "--agent.num-steps-per-env", "8", "--log-format", "compact"]
PLAY = ["--gpu-ids", "None", "--num-envs", "4", "--episodes", "4", "--env.episode-length-s", "1"]
FIRST_RUN_ITERATIONS = 2


def steps_before_scaling_out() -> list[str]:
    """The quickstart's commands up to its "Scale out" heading, in page order."""
    text = QUICKSTART.read_text()
    head = re.split(r"^## .*Scale out", text, flags=re.MULTILINE)
    assert len(head) == 2, "docs/quickstart.md has no 'Scale out' step"
    return commands_in(head[0])


def tiny(command: str) -> str | None:
    """The shell line the test runs for a documented command: `uv run` left out (the environment's scripts are
    first on PATH, as `uv run` puts them), tiny sizes added; None for a command that needs a display."""
    words = shlex.split(command)
    assert words[:2] == ["uv", "run"], command
    if "--viewer" in words:
        return None
    while words[2] == "--extra":  # .ci/run syncs the extras into the test environment
        del words[2:4]
    program = words[2]
    if program == "train":
        _, args = _tiny_run(command)
        args = args[
            : -len(TINY)
        ]  # the documented flags, less those a tiny run replaces (test_docs.OVERRIDDEN)
        resumed = "--resume" in args
        iterations = 2 * FIRST_RUN_ITERATIONS if resumed else FIRST_RUN_ITERATIONS
        return shlex.join(["train", *args, *TRAIN, "--logger", "none", "--max-iterations", str(iterations)])
    if program == "play":
        return shlex.join([*words[2:], *PLAY, *(["--video-length", "5"] if "--video" in words else [])])
    if program == "python" and words[3].endswith("sim2sim.py"):
        return " ".join([*words[2:], "--episodes", "2"])  # unquoted: the reader's glob
    return " ".join(words[2:])


def test_the_quickstart_runs_from_training_to_deployment(tmp_path):
    commands = steps_before_scaling_out()
    programs = [shlex.split(c)[2 + 2 * ("--extra" in c)] for c in commands]
    assert programs[0] == "train" and "python" in programs, commands
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    ran = []
    for command in commands:
        line = tiny(command)
        if line is None:
            continue
        if "--video" in line and headless_gl() is None and not in_ci():
            continue  # no headless OpenGL here (helpers.NO_GL says what to install); a failure in CI
        result = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, (
            f"{command}\n(ran: {line})\n{result.stdout[-1500:]}\n{result.stderr[-3000:]}"
        )
        ran.append((command, result))

    runs = sorted(
        p for p in (tmp_path / "logs" / "cartpole_balance").iterdir() if not p.name.startswith("baseline")
    )
    assert len(runs) == 2, runs  # the first run and the resumed one
    assert (runs[1] / f"model_{2 * FIRST_RUN_ITERATIONS}.pt").is_file()
    exported = runs[1] / "exported"
    assert {"policy.onnx", "policy.pt", "policy.json", "model.xml"} <= {p.name for p in exported.iterdir()}
    command, result = ran[-1]
    assert "sim2sim.py" in command
    assert json.loads(result.stdout.strip().splitlines()[-1])["episodes"] == 2
