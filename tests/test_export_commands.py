"""An export states the command ranges the policy was TRAINED with; play's --command is recorded apart.

A deployer reads `deployment["commands"]` to draw commands as training did and `deployment["evaluation_command"]`
to reproduce the episodes `play` reported (docs/deploy.md). The quadruped here is trained by the real `train`
command with a non-default forward-speed range, so the ranges can only have come from its checkpoint.
"""

import json
import pathlib

import onnx
import pytest
from helpers import run_cli

TASK = "Quadruped-Velocity-Flat"
TRAINED_RANGES = [[-0.8, 0.8], [-0.6, 0.6], [-1.0, 1.0]]
"""--env.commands.lin-vel-x -0.8 0.8 at training; the task's own sideways and yaw ranges."""
PLAY = ["--gpu-ids", "None", "--export", "--num-envs", "2", "--episodes", "2", "--env.episode-length-s", "0.2"]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> pathlib.Path:
    """The working directory of a one-iteration quadruped run trained with forward commands in [-0.8, 0.8]."""
    cwd = tmp_path_factory.mktemp("commands")
    run_cli(
        "train", TASK, "--gpu-ids", "None", "--cpu-workers", "1", "--num-envs", "2",
        "--agent.num-steps-per-env", "4", "--max-iterations", "1", "--env.commands.lin-vel-x", "-0.8", "0.8",
        "--logger", "none", "--log-format", "compact", cwd=cwd, check=True,
    )  # fmt: skip
    return cwd


def _export(cwd: pathlib.Path, monkeypatch, *play_args: str) -> tuple[dict, dict]:
    """(policy.json's deployment, the deployment in policy.onnx's metadata) after `play --export` in `cwd`."""
    from mjfleet.cli.play import main

    monkeypatch.chdir(cwd)
    main([TASK, *PLAY, *play_args])
    (exported,) = cwd.glob("logs/*/*/exported")
    props = {p.key: p.value for p in onnx.load(str(exported / "policy.onnx")).metadata_props}
    return json.loads((exported / "policy.json").read_text())["deployment"], json.loads(props["deployment"])


def test_an_export_with_a_fixed_command_keeps_the_training_ranges_and_names_the_command_apart(
    trained, monkeypatch
):
    deployment, in_onnx = _export(trained, monkeypatch, "--command", "0.5", "0", "0")
    twist = deployment["commands"]["twist"]
    assert twist["columns"] == ["lin_vel_x", "lin_vel_y", "ang_vel_z"]
    assert twist["ranges"] == TRAINED_RANGES
    assert twist["standing_fraction"] == 0.1  # training's; --command stands still in no episode
    assert deployment["evaluation_command"] == {"twist": [0.5, 0.0, 0.0]}
    assert in_onnx == deployment  # a deployment holding only policy.onnx reads the same


def test_an_export_without_a_fixed_command_has_no_evaluation_command(trained, monkeypatch):
    deployment, _ = _export(trained, monkeypatch)
    assert deployment["commands"]["twist"]["ranges"] == TRAINED_RANGES
    assert deployment["evaluation_command"] is None
