"""A robot described in a file of its own: `train Velocity-Flat --robot my_robot.py` and `play` with the same flag.

The end-to-end test trains examples/my_go1.py (the porting guide's and docs/bring-your-robot.md's example) on two
CPU workers, which load the file themselves, then plays and exports it. The others show each bad input is one
line and exit status 2, with nothing written.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import textwrap

import pytest
from helpers import assert_one_line_usage_error, assert_usage_exit, run_cli

from mjfleet.robots.load import load_robot_file

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_go1.py"
HEADER = "from mjfleet.robots import ActuatorGroup, HomePose, RobotDescription\n"


def robot_file(folder: pathlib.Path, body: str, name: str = "robot.py") -> pathlib.Path:
    path = folder / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def description(**fields) -> str:
    """A RobotDescription's source with `fields` replacing the defaults (a biped whose MJCF is not read here)."""
    values = {"name": "'biped'", "mjcf": "'biped.xml'", "base_body": "'pelvis'", "feet": "('left', 'right')",
              "home": "HomePose(base_height=0.8)",
              "actuators": "(ActuatorGroup(joints=('.*',), effort_limit=10.0, kp=20.0, kd=1.0),)", **fields}  # fmt: skip
    return "ROBOT = RobotDescription(" + ", ".join(f"{k}={v}" for k, v in values.items()) + ")\n"


@pytest.mark.slow  # about 100 s on 2 cores; CI's second step runs it (.ci/run)
def test_the_example_trains_on_two_workers_that_load_the_file_then_plays_and_exports(robot_cache, tmp_path):
    """Two CPU workers (separate processes) find the robot through the job, as they find plug-in tasks; the run's
    experiment is named after the robot, and play finds it with the same --robot."""
    shutil.copy(EXAMPLE, tmp_path / "my_go1.py")  # a relative path, as a user gives it
    cache = {"MJFLEET_CACHE_DIR": str(robot_cache)}
    run_cli("train", "Velocity-Flat", "--robot", "my_go1.py", "--gpu-ids", "None", "--cpu-workers", "2",
            "--num-envs", "8", "--agent.num-steps-per-env", "8", "--max-iterations", "2", "--logger", "none",
            "--log-format", "compact", cwd=tmp_path, env=cache, check=True, timeout=900)  # fmt: skip
    (run_dir,) = (tmp_path / "logs" / "my_go1_velocity_flat").iterdir()
    assert (run_dir / "model_2.pt").is_file()
    run_cli("play", "Velocity-Flat", "--robot", "my_go1.py", "--gpu-ids", "None", "--num-envs", "2",
            "--episodes", "2", "--env.episode-length-s", "0.5", "--export", cwd=tmp_path, env=cache, check=True,
            timeout=900)  # fmt: skip
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["task"] == "Velocity-Flat:my-go1" and report["episodes"] == 2
    meta = json.loads((run_dir / "exported" / "policy.json").read_text())
    assert meta["task"] == "Velocity-Flat:my-go1" and meta["deployment"] is not None
    assert meta["model"]["nu"] == 12 and meta["mjcf_assets"]


def test_a_relative_mjcf_is_read_from_the_description_files_folder(tmp_path):
    path = robot_file(tmp_path, description(mjcf="'models/biped.xml'"))
    assert load_robot_file(path).mjcf == str(tmp_path / "models" / "biped.xml")
    absolute = robot_file(tmp_path, description(mjcf="'/opt/robots/biped.xml'"), "absolute.py")
    assert load_robot_file(absolute).mjcf == "/opt/robots/biped.xml"


def train(argv: list[str], capsys) -> str:
    from mjfleet.cli.train import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert_usage_exit(exit_info, err)
    return err


BAD_FILES = {
    "no description": ("X = 1\n", "robot.py defines no RobotDescription"),
    "two descriptions": (
        description() + description().replace("ROBOT", "OTHER"),
        "defines 2 RobotDescriptions",
    ),
    "an invalid field": (
        description(actuators="(ActuatorGroup(joints=('.*',), effort_limit=-1.0),)"),
        "robot.py: actuators[.*].effort_limit = -1.0",
    ),
    "an error of its own": (
        "raise RuntimeError('not finished')\n",
        "failed to load: RuntimeError: not finished",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_robot_file_is_one_line_and_writes_nothing(case, tmp_path, capsys, monkeypatch):
    body, needle = BAD_FILES[case]
    monkeypatch.chdir(tmp_path)
    path = robot_file(tmp_path, body)
    err = train(["Velocity-Flat", "--robot", str(path), "--gpu-ids", "None"], capsys)
    assert needle in err
    assert os.listdir(tmp_path) == ["robot.py"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["Velocity-Flat"], "give --robot path/to/robot.py"),
        (["Velocity-Flat", "--robot", "nowhere.py"], "--robot: no file nowhere.py"),
        (["Velocity-Flat", "--robot", "robot.xml"], "is not a Python file"),
        (["Cartpole-Balance", "--robot", "robot.py"], "Cartpole-Balance has a robot of its own"),
    ],
)
def test_a_missing_or_misplaced_robot_file_is_one_line(args, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "robot.xml").write_text("<mujoco/>")
    (tmp_path / "robot.py").write_text(description())
    assert needle in train([*args, "--gpu-ids", "None"], capsys)
    assert sorted(os.listdir(tmp_path)) == ["robot.py", "robot.xml"]


def test_play_reports_a_bad_robot_file_as_one_line_too(tmp_path):
    result = run_cli("play", "Velocity-Flat", "--robot", "missing.py", cwd=tmp_path, timeout=120)
    assert_one_line_usage_error(result, "--robot: no file missing.py")


def test_the_bring_your_robot_page_shows_the_example_files_code():
    """The page's listing is examples/my_go1.py (the file that test_the_example_... trains), comments aside."""
    import ast
    import re

    page = (ROOT / "docs" / "bring-your-robot.md").read_text()
    listing = re.search(r"```python\n(.*?)```", page, re.DOTALL).group(1)
    example = ast.parse(EXAMPLE.read_text())
    example.body = example.body[1:]  # its docstring
    assert ast.dump(ast.parse(listing)) == ast.dump(example)


@pytest.mark.slow  # about 110 s on 2 loaded cores (2026-11-28); CI's second step runs it (.ci/run)
def test_bench_measures_a_robot_file_on_two_workers_that_load_it(robot_cache, tmp_path):
    """`bench Velocity-Flat --robot FILE`: the 1-worker reference and both workers of the 2-worker run find the
    robot through the job, as train's workers do; every phase is measured on the described Go1."""
    shutil.copy(EXAMPLE, tmp_path / "my_go1.py")
    run_cli("bench", "Velocity-Flat", "--robot", "my_go1.py", "--gpu-ids", "None", "--cpu-workers", "2",
            "--rounds", "1", "--num-envs", "4", "--iterations", "1", "--steps", "2", "--repeats", "1", "--quiet",
            "--json", "bench.json", cwd=tmp_path, env={"MJFLEET_CACHE_DIR": str(robot_cache)}, check=True,
            timeout=900)  # fmt: skip
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["task"] == "Velocity-Flat:my-go1"
    assert [run["workers"] for run in report["runs"]] == [1, 2]
    for run in report["runs"]:
        (point,) = run["points"]
        assert point["total_envs"] == 4 * run["workers"]
        assert all(point[phase]["env_steps_per_s"] > 0 for phase in ("physics", "env", "rollout", "training"))
    assert not (tmp_path / "logs").exists()  # bench measures; it writes no run


# --- docs/bring-your-robot.md, "A robot from outside mjlab's zoo": what it states, built for real ----------------

OUTSIDE_MJCF = """<mujoco model="outside">
  <compiler angle="degree"/>
  <default><joint armature="1"/></default>
  <worldbody>
    <body name="torso" pos="0 0 0.5">
      <freejoint name="root"/>
      <geom type="sphere" size="0.1"/>
      <body name="leg">
        <joint name="hip" type="hinge" axis="0 1 0" range="-30 30"/>
        <geom type="capsule" pos="0 0 -0.15" size="0.02 0.15"/>
        <site name="foot" pos="0 0 -0.32"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="hip" gear="150" ctrlrange="-1 1"/></actuator>
  <keyframe><key name="crouch" qpos="0 0 0.5 1 0 0 0 0.5"/></keyframe>
</mujoco>
"""
"""gymnasium's Ant in miniature: a torque motor of gear 150, armature 1 on every joint, angles in degrees."""


def outside_robot(tmp_path, **fields):
    from mjfleet.robots import ActuatorGroup, HomePose, RobotDescription, build_robot

    (tmp_path / "outside.xml").write_text(OUTSIDE_MJCF)
    values = {"name": "outside", "mjcf": str(tmp_path / "outside.xml"), "base_body": "torso", "feet": ("foot",),
              "actuators": (ActuatorGroup(joints=("hip",), effort_limit=150.0),),
              "home": HomePose(base_height=0.5, joints={"hip": 0.5}), **fields}  # fmt: skip
    return build_robot(RobotDescription(**values))


def bring_your_robot_section() -> str:
    page = (ROOT / "docs" / "bring-your-robot.md").read_text()
    return page.split("### A robot from outside mjlab's zoo")[1].split("\n## ")[0]


def test_a_torque_motor_becomes_a_servo_clamped_at_the_effort_limit_with_the_pages_gains_and_scale(tmp_path):
    import mujoco

    robot = outside_robot(tmp_path)
    model, section = robot.model, bring_your_robot_section()
    assert (
        model.nu == 1 and model.actuator_gaintype[0] == mujoco.mjtGain.mjGAIN_FIXED
    )  # the motor is replaced
    assert model.actuator_forcerange[0].tolist() == [-150.0, 150.0] and not model.actuator_ctrllimited[0]
    assert robot.armature[0] == 1.0  # the MJCF's armature, kept
    assert f"kp {robot.kp[0]:,.0f} N m/rad" in section and f"kd {robot.kd[0]:.0f} N m s/rad" in section
    assert f"= {robot.action_scale[0]:.4f} rad" in section and "0.25 x 150 / 3,948" in section
    assert '`<motor gear="150" ctrlrange="-1 1">`' in section and "`effort_limit=150`" in section


def test_the_home_pose_of_a_degree_mjcf_is_in_radians_keyframe_included(tmp_path):
    import math

    from mjfleet.robots import HomePose

    robot = outside_robot(tmp_path)
    assert robot.default_joint_pos.tolist() == [0.5]  # 0.5 rad, not 0.5 degrees
    assert robot.model.jnt_range[robot.model.joint("hip").id].tolist() == pytest.approx(
        [-math.pi / 6, math.pi / 6]
    )
    keyed = outside_robot(tmp_path, home=HomePose(keyframe="crouch"))
    assert keyed.default_joint_pos.tolist() == [0.5]  # the keyframe's 0.5, as radians too
    assert "**The home pose is in radians**" in bring_your_robot_section()


def test_an_outside_robots_own_torque_motor_is_one_line_asking_for_actuator_groups(tmp_path):
    from mjfleet.errors import UsageError

    with pytest.raises(UsageError, match="is no position servo on a joint: describe .* with ActuatorGroup"):
        outside_robot(tmp_path, actuators=())


def test_the_page_names_the_required_fields_and_foot_kinds_the_code_takes():
    import dataclasses
    import typing

    from mjfleet.robots import ActuatorGroup
    from mjfleet.robots.description import DAMPING_RATIO, NATURAL_FREQUENCY_HZ, FootKind, RobotDescription

    section, page = bring_your_robot_section(), (ROOT / "docs" / "bring-your-robot.md").read_text()
    required = [f.name for f in dataclasses.fields(ActuatorGroup) if f.default is dataclasses.MISSING]
    assert "An `ActuatorGroup` needs " + " and ".join(f"`{name}`" for name in required) in section
    kinds = typing.get_args(FootKind)
    default = next(f.default for f in dataclasses.fields(RobotDescription) if f.name == "foot_kind")
    stated = f'one of `"{kinds[0]}"` (the default), ' + ", ".join(f'`"{k}"`' for k in kinds[1:-1])
    assert default == kinds[0] and f'{stated} or `"{kinds[-1]}"`' in page.replace("\n  ", " ")
    assert f"2 x {DAMPING_RATIO} x armature" in section and f"f = {NATURAL_FREQUENCY_HZ:g} Hz" in section
