"""Go1-Velocity-Flat: the velocity task built from the Unitree Go1's description (tasks/locomotion/described.py),
on the real simulator with the files `robots fetch` downloaded: the environment starts in the description's home
pose, stands on zero actions, scales each joint's action by the description's scale, and trains and plays through
the real commands. No learning is claimed here: two iterations only show the task runs end to end."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from helpers import assert_one_line_usage_error, run_cli

from mjfleet.errors import UsageError
from mjfleet.robots import ROBOTS, build_robot
from mjfleet.robots.unitree_go1 import UNITREE_GO1
from mjfleet.tasks import get_task
from mjfleet.tasks.locomotion import velocity_checks
from mjfleet.tasks.locomotion.described_config import velocity_flat_config

TASK = "Go1-Velocity-Flat"
NUM_ENVS = 4


@pytest.fixture(scope="module")
def go1(robot_cache):
    """A Go1-Velocity-Flat environment with play's settings (no pushes, no noise, nominal friction and mass), and
    the built Go1 the test compares it with."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))
        spec = get_task(TASK)
        cfg = spec.play_env_config()
        cfg.num_envs = NUM_ENVS
        yield spec.make_env(cfg), build_robot(ROBOTS["unitree-go1"].description)


def test_the_go1_env_takes_its_joints_pose_and_scales_from_the_description(go1):
    env, robot = go1
    assert env.joint_names == robot.joint_names and env.num_actions == 12
    np.testing.assert_array_equal(
        env.default_joint_pos.cpu().numpy(), robot.default_joint_pos.astype(np.float32)
    )
    np.testing.assert_allclose(env.joint_action_scale.cpu().numpy(), robot.action_scale, rtol=1e-6)
    # the task trains the model as its MJCF writes it: 6 significant digits (mjfleet.robots.mjcf.as_written)
    np.testing.assert_allclose(env.mj_model.actuator_gainprm[:, 0], robot.kp, rtol=5e-6)
    assert env.trunk_body == robot.base_body_id
    assert sorted(env.foot_geoms) == sorted(g for geoms in robot.foot_geom_ids for g in geoms)
    thighs = {env.mj_model.body(f"{leg}_thigh").id for leg in ("FR", "FL", "RR", "RL")}
    assert {int(env.mj_model.geom_bodyid[g]) for g in env.base_geoms.tolist()} == thighs
    assert env.physics_dt == 0.005 and env.step_dt == 0.02  # mjlab's timestep and decimation


def test_reset_puts_the_go1_in_its_home_pose_and_zero_actions_keep_it_standing_for_a_second(go1):
    env, robot = go1
    env.reset()
    joints = env.sim.qpos[:, env._qj].cpu().numpy()
    np.testing.assert_array_equal(joints, np.tile(robot.default_joint_pos.astype(np.float32), (NUM_ENVS, 1)))
    assert (env.sim.qvel == 0).all()
    zero = torch.zeros(NUM_ENVS, env.num_actions)
    for _ in range(round(1.0 / env.step_dt)):
        _, _, dones, _ = env.step(zero)
        assert not dones.any(), "the Go1 fell (or timed out) within a second of standing on zero actions"
    assert env.foot_contact.all()  # on its four feet
    assert (env.sim.qpos[:, 2] > 0.2).all()  # trunk height (m): home is 0.295
    assert (env.gravity_b[:, 2] < -0.99).all()  # level


def test_an_action_of_one_moves_one_joints_target_by_its_action_scale(go1):
    env, robot = go1
    for joint in (0, 2):  # a hip (23.7 N m) and a calf (35.55 N m): different scales
        action = torch.zeros(NUM_ENVS, env.num_actions)
        action[:, joint] = 1.0
        env.step(action)
        offset = (env.sim.ctrl - env.default_joint_pos).cpu().numpy()
        expected = np.zeros(env.num_actions, dtype=np.float32)
        expected[joint] = robot.action_scale[joint]
        np.testing.assert_allclose(offset, np.tile(expected, (NUM_ENVS, 1)), atol=1e-6)


def test_the_g1_gets_the_same_task_and_stands_on_zero_actions_for_a_second(robot_cache, monkeypatch):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))
    spec, robot = get_task("G1-Velocity-Flat"), build_robot(ROBOTS["unitree-g1"].description)
    cfg = spec.play_env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg)
    assert env.joint_names == robot.joint_names and env.num_actions == 29
    np.testing.assert_array_equal(
        env.sim.qpos[:, env._qj].cpu().numpy()[0], robot.default_joint_pos.astype(np.float32)
    )
    assert (
        env.base_geoms.numel() == 0
    )  # the description ends episodes on no body's contact (mjlab's G1 neither)
    zero = torch.zeros(2, env.num_actions)
    for _ in range(round(1.0 / env.step_dt)):
        _, _, dones, _ = env.step(zero)
        assert not dones.any(), "the G1 fell within a second of standing on zero actions"
    assert env.foot_contact.all() and (env.sim.qpos[:, 2] > 0.6).all()  # pelvis height (m): home is 0.76


def test_train_writes_a_checkpoint_and_play_evaluates_it(robot_cache, tmp_path):
    cache = {"MJFLEET_CACHE_DIR": str(robot_cache)}
    run_cli("train", TASK, "--gpu-ids", "None", "--num-envs", "16", "--max-iterations", "2", "--logger", "none",
            "--log-format", "compact", cwd=tmp_path, env=cache, check=True)  # fmt: skip
    (run_dir,) = (tmp_path / "logs" / "go1_velocity_flat").iterdir()
    assert (run_dir / "model_2.pt").is_file()
    run_cli("play", TASK, "--gpu-ids", "None", "--num-envs", "4", "--episodes", "4", "--env.episode-length-s", "0.5",
            "--load-run", str(run_dir), cwd=tmp_path, env=cache, check=True)  # fmt: skip
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["checkpoint"] == str(run_dir / "model_2.pt") and report["episodes"] == 4


def test_training_a_robot_that_is_not_fetched_says_how_to_fetch_it_and_writes_nothing(tmp_path):
    empty = tmp_path / "cache"
    empty.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli(
        "train", TASK, "--gpu-ids", "None", cwd=work, env={"MJFLEET_CACHE_DIR": str(empty)}, timeout=120
    )
    assert_one_line_usage_error(result, "uv run robots fetch unitree-go1")
    assert os.listdir(work) == [] and os.listdir(empty) == []


def test_a_descriptions_reward_weights_override_the_tasks_by_term_name():
    assert velocity_flat_config(UNITREE_GO1).rewards["air_time"].weight == 0.0  # mjlab's Go1: none
    walker = dataclasses.replace(
        UNITREE_GO1, reward_weights={"air_time": 0.5}, reward_params={"upright": {"std": 0.3}}
    )
    rewards = velocity_flat_config(walker).rewards
    assert rewards["air_time"].weight == 0.5 and rewards["track_linear_velocity"].weight == 2.0
    assert rewards["upright"].params == {"body": "trunk", "std": 0.3}
    with pytest.raises(UsageError, match=r"unitree-go1: reward_weights\['air_tme'\]: no term of the recipe"):
        velocity_flat_config(dataclasses.replace(UNITREE_GO1, reward_weights={"air_tme": 0.5}))


# mjlab 1.6.0's G1 flat recipe, read from its wheel (tasks/velocity/velocity_env_cfg.py, config/g1/env_cfgs.py):
# entry -> (mjfleet's term, weight, parameters); docs/tasks.md's table gives each source line.
MJLAB_G1 = {
    "track_linear_velocity": ("track_linear_velocity", 2.0, {"std": 0.5}),
    "track_angular_velocity": ("track_angular_velocity", 2.0, {"std": 0.5**0.5}),
    "upright": ("upright", 1.0, {"body": "torso_link", "std": 0.2**0.5}),
    "pose": ("variable_posture", 1.0, {"walking_threshold": 0.05, "running_threshold": 1.5}),
    "body_ang_vel": ("body_angular_velocity", -0.05, {"body": "torso_link"}),
    "angular_momentum": ("angular_momentum", -0.02, {}),
    "dof_pos_limits": ("joint_limits", -1.0, {}),
    "action_rate_l2": ("action_rate", -0.1, {}),
    "air_time": ("air_time", 0.0, {"threshold_min": 0.05, "threshold_max": 0.5, "command_threshold": 0.5}),
    "foot_clearance": ("foot_clearance", -2.0, {"target_height": 0.1, "command_threshold": 0.05}),
    "foot_swing_height": ("foot_swing_height", -0.25, {"target_height": 0.1, "command_threshold": 0.05}),
    "foot_slip": ("foot_slip", -0.1, {"command_threshold": 0.05}),
    "soft_landing": ("soft_landing", -1e-5, {"command_threshold": 0.05}),
    "self_collisions": ("self_collisions", -1.0, {"force_threshold": 10.0}),
}


def _assert_recipe(recipe, expected):
    assert list(recipe) == list(expected)
    for name, (func, weight, params) in expected.items():
        term = recipe[name]
        assert (term.func, term.weight) == (func, weight), name
        for key, value in params.items():
            assert term.params[key] == pytest.approx(value), (name, key)


def test_the_g1_and_go1_recipes_list_every_mjlab_term_with_its_weight_and_parameters():
    g1 = get_task("G1-Velocity-Flat").env_config()
    _assert_recipe(g1.rewards, MJLAB_G1)
    assert g1.rewards["pose"].params["std_walking"][r".*knee.*"] == 0.35  # g1 env_cfgs.py
    assert g1.rewards["pose"].params["std_standing"] == {".*": 0.05}
    go1_expected = {k: v for k, v in MJLAB_G1.items() if k != "self_collisions"}
    go1_expected["upright"] = ("upright", 1.0, {"body": "trunk", "std": 0.2**0.5})
    go1_expected["body_ang_vel"] = ("body_angular_velocity", 0.0, {"body": "trunk"})
    go1_expected["angular_momentum"] = ("angular_momentum", 0.0, {})
    go1 = get_task(TASK).env_config()
    _assert_recipe(go1.rewards, go1_expected)
    assert (
        go1.rewards["pose"].params["std_walking"][r".*(FR|FL|RR|RL)_calf_joint.*"] == 0.6
    )  # go1 env_cfgs.py
    assert go1.only_positive_rewards is False and g1.only_positive_rewards is False  # mjlab does not clip


def test_the_g1_task_takes_mjlabs_exploration_and_tilt_limit():
    spec = get_task("G1-Velocity-Flat")
    cfg = spec.env_config()
    assert cfg.max_tilt == pytest.approx(np.radians(70.0))
    for device in ("cpu", "cuda"):
        agent = spec.default_agent_config(device)
        assert agent.actor.init_noise_std == 1.0 and agent.ppo.entropy_coef == 0.01  # mjlab g1 rl_cfg.py
    assert spec.default_agent_config("cuda").actor.hidden_dims == (512, 256, 128)


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (
            ["--env.rewards.upright.params.body", "torso"],
            [
                "unitree-g1: env.rewards.upright.params.body = 'torso': no body of this robot by that name",
                "torso_link",
            ],
        ),
        (
            ["--env.rewards.pose.params.std-walking.*knee.*", "-0.35"],
            ["unitree-g1: env.rewards.pose.params.std_walking", "give a positive number"],
        ),
        (["--env.rewards.foot-slip.weight", "nan"], ["unitree-g1: env.rewards.foot_slip.weight = nan"]),
    ],
)
def test_a_recipe_that_does_not_fit_the_g1_is_one_line_before_any_worker(
    flags, needles, robot_cache, tmp_path
):
    result = run_cli(
        "train", "G1-Velocity-Flat", "--gpu-ids", "None", *flags, cwd=tmp_path,
        env={"MJFLEET_CACHE_DIR": str(robot_cache)}, timeout=180,
    )  # fmt: skip
    assert_one_line_usage_error(result, *needles)
    assert os.listdir(tmp_path) == []  # no run directory, nothing started


def test_a_descriptions_events_are_set_once_in_its_file_and_checked_against_the_model(
    robot_cache, monkeypatch
):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))
    spec = get_task("G1-Velocity-Flat")
    cfg = spec.env_config()
    assert (
        cfg.events.com_body == "torso_link" and cfg.events.added_trunk_mass is None
    )  # unitree_g1.py's events
    light = dataclasses.replace(UNITREE_GO1, events={"added_trunk_mass": (-50.0, 1.0)})
    light_cfg = velocity_flat_config(light)
    with pytest.raises(UsageError, match=r"^unitree-go1: env\.events\.added_trunk_mass = \(-50\.0, 1\.0\): body "
                                         r"'trunk' weighs [\d.]+ kg"):  # fmt: skip
        velocity_checks(light)(light_cfg)
    with pytest.raises(
        UsageError, match=r"^unitree-go1: events\['added_mass'\]: no setting of the velocity task"
    ):
        velocity_flat_config(dataclasses.replace(UNITREE_GO1, events={"added_mass": (0.0, 1.0)}))
    no_torso = dataclasses.replace(UNITREE_GO1, events={"com_body": "torso_link"})
    with pytest.raises(UsageError, match=r"env\.events\.com_body = 'torso_link': no body of this robot"):
        velocity_checks(no_torso)(velocity_flat_config(no_torso))
