"""A described robot's policy runs in MuJoCo C from its export alone: Go1-Velocity-Flat and G1-Velocity-Flat, each
trained two iterations by the real `train` command on the robot `robots fetch` downloaded (the session's
`robot_cache`), exported by the real `play --export`, and run by examples/sim2sim.py from a copy of the exported
folder, in a process that sees neither the cache nor mjfleet.

The export carries the MJCF with the actuators, armature, floor, collisions, keyframe and physics options mjfleet
added, and the meshes it loads (copied into assets/); it is checked to compile to the trained model. The rules are
the quadruped's with floor-only contacts (docs/deploy.md, "Described robots' rules"): from one shared state the
first 50 actions agree to 1e-4 (as tests/test_sim2sim.py's quadruped), and every reward term the rules state (mjlab's
gait terms are listed as not stated) agrees in its episode sum after each step, and the step and kind of the
episode's end agree to 1e-5 (float32 against float64).

Slow (each robot's train, play and first kernel compile take about a minute on 2 cores): CI's second step runs
them (.ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import mujoco
import numpy as np
import pytest
from test_sim2sim import dumped_steps, ended, played_steps

from mjfleet.runs import RunDir

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)
COMMAND = ("0.5", "0.0", "0.0")
TASKS = {"Go1-Velocity-Flat": "go1_velocity_flat", "G1-Velocity-Flat": "g1_velocity_flat"}


def run(cwd, cache, *args: str) -> None:
    env = {**os.environ, "MJFLEET_CACHE_DIR": str(cache)}
    result = subprocess.run(
        [os.path.join(BIN, args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]


def trained_and_exported(task: str, cache, tmp_path_factory):
    """(task, run directory, a copy of its export elsewhere): trained 2 iterations, exported by play --export."""
    cwd = tmp_path_factory.mktemp(TASKS[task])
    common = ["--gpu-ids", "None"]
    run(cwd, cache, "train", task, *common, "--num-envs", "16", "--agent.num-steps-per-env", "8",
        "--max-iterations", "2", "--logger", "none", "--log-format", "compact")  # fmt: skip
    run(cwd, cache, "play", task, *common, "--export", "--episodes", "2", "--num-envs", "2",
        "--command", *COMMAND, "--env.episode-length-s", "1.0")  # fmt: skip
    (run_dir,) = (cwd / "logs" / TASKS[task]).iterdir()
    away = tmp_path_factory.mktemp("deployed") / "exported"
    shutil.copytree(run_dir / "exported", away)
    return task, run_dir, away


# One fixture per robot (not one parametrized fixture): under a shuffled order each is still built once.
@pytest.fixture(scope="module")
def go1(robot_cache, tmp_path_factory):
    return trained_and_exported("Go1-Velocity-Flat", robot_cache, tmp_path_factory)


@pytest.fixture(scope="module")
def g1(robot_cache, tmp_path_factory):
    return trained_and_exported("G1-Velocity-Flat", robot_cache, tmp_path_factory)


@pytest.fixture(params=["go1", "g1"])
def exported(request):
    return request.getfixturevalue(request.param)


@pytest.fixture
def cache(robot_cache, monkeypatch):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))


def test_the_export_carries_its_meshes_and_compiles_alone_to_the_trained_model(exported, cache, robot_cache):
    from mjfleet.tasks import get_task

    task, _, folder = exported
    meta = json.loads((folder / "policy.json").read_text())
    xml = (folder / "model.xml").read_text()
    assert meta["mjcf_assets"] and all(name.startswith("assets/") for name in meta["mjcf_assets"])
    assert all((folder / name).is_file() for name in meta["mjcf_assets"])
    assert str(robot_cache) not in xml and "meshdir" not in xml  # nothing points back into the cache
    deployed = mujoco.MjModel.from_xml_path(str(folder / "model.xml"))
    cfg = get_task(task).play_env_config()
    cfg.num_envs = 1
    trained = get_task(task).make_env(cfg, "cpu").mj_model
    assert deployed.nmesh == trained.nmesh > 0 and deployed.nmeshvert == trained.nmeshvert
    for field in ("body_mass", "actuator_gainprm", "actuator_biasprm", "dof_armature", "geom_size", "key_qpos",
                  "geom_priority", "geom_contype"):  # fmt: skip
        np.testing.assert_array_equal(getattr(deployed, field), getattr(trained, field), err_msg=field)
    assert (deployed.opt.cone, deployed.opt.impratio) == (trained.opt.cone, trained.opt.impratio)
    rules = meta["deployment"]
    assert "geoms" in rules["foot_contact"] and rules["quantities"][0]["name"] == "floor_contact"


def test_first_50_actions_and_every_reward_term_agree_with_play_step_by_step(exported, cache, tmp_path):
    """From play's reset state: the actions to 1e-4, each term's episode sum after every step and the episode's
    end (a 1 s episode: the time-out at step 50, unless the policy falls first, then on both sides alike)."""
    task, run_dir, folder = exported
    assert RunDir(run_dir).latest_checkpoint() is not None
    command = tuple(float(c) for c in COMMAND)
    actions, played, state = played_steps(task, run_dir, 60, tmp_path, command, episode_length_s=1.0)
    got, dumped = dumped_steps(folder, state, 60, tmp_path)
    assert len(actions) >= 25, "the robot fell at once: too few steps compared"
    assert got.shape == actions.shape
    np.testing.assert_allclose(got, actions, atol=1e-4, rtol=0)
    assert [ended(c) for c in dumped["cause"]] == played["cause"]
    # mjlab's recipe: the terms that read the gait sensors are listed as not stated; every other term agrees
    not_stated = json.loads((folder / "policy.json").read_text())["deployment"]["rewards"]["not_stated"]
    assert {"upright", "foot_slip"} <= set(not_stated)
    assert dumped["terms"].keys() | set(not_stated) == played["sums"].keys()
    assert {"action_rate_l2", "dof_pos_limits"} <= dumped["terms"].keys()
    for name, sums in played["sums"].items():
        if name not in not_stated:
            np.testing.assert_allclose(
                np.cumsum(dumped["terms"][name]), sums, atol=1e-5, rtol=1e-5, err_msg=name
            )


def test_sim2sim_runs_whole_episodes_from_the_copied_folder(exported):
    """The example's evaluation over two 20 s episodes, in a process with only PATH and HOME set."""
    _, _, folder = exported
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "sim2sim.py")
    result = subprocess.run([sys.executable, example, str(folder), "--episodes", "2", "--command", *COMMAND],
                            capture_output=True, text=True, env=clean, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["steps"] > 0
