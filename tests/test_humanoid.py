"""Humanoid-Velocity-Flat and -Rough: layout, standing, the humanoid terms, terminations, training.

Every test builds its own seeded flat environment: the tests write its state (poses, foot contacts, commands, a
training iteration), and a shared one made each test's outcome depend on the ones before. Only the first build in a
process loads warp's kernels (the same model and sizes as tests/test_humanoid_model.py's Simulation, so they are
compiled once); each later one takes ~0.2 s on CPU. The rough environment's tests are marked slow.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from task_envs import make_task_env

from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task, task_names
from mjfleet.tasks.humanoid import HumanoidEnv, rewards

FLAT, ROUGH = "Humanoid-Velocity-Flat", "Humanoid-Velocity-Rough"
NUM_ENVS = 4


def _make(task: str) -> HumanoidEnv:
    return make_task_env(task, NUM_ENVS)


@pytest.fixture
def flat() -> HumanoidEnv:
    return _make(FLAT)


def _stand_at_home(env: HumanoidEnv, command: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> None:
    """Every robot in the keyframe pose at its origin, at rest, with `command`; pushes and redraws far off."""
    home = torch.as_tensor(env.mj_model.key("home").qpos, dtype=torch.float32)
    qpos = home.repeat(env.num_envs, 1)
    qpos[:, 0:2] = env.env_origins[:, 0:2]
    env.sim.qpos.copy_(qpos)
    env.sim.qvel.zero_()
    env.sim.forward()
    # The feet where this pose puts them: a step refreshes them after the physics, and this env has not stepped.
    env.foot_pos = env.sim.xpos[:, env._foot_bodies]
    env.episode_length_buf.zero_()
    env._push_steps.fill_(10**6)
    env._command_steps.fill_(-(10**6))
    env.commands[:] = torch.tensor(command)
    env.last_actions.zero_()


def _zero_action(env: HumanoidEnv) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.num_actions)


def _physics_only(env: HumanoidEnv) -> None:
    """One policy step's physics (targets: the current pose) and the task's state update, without the env's
    terminations and resets."""
    env.sim.ctrl.copy_(env.sim.qpos[:, env._qj])
    env.sim.step()
    env.episode_length_buf += 1
    env.post_physics_step()


def test_both_tasks_are_registered_with_cpu_and_gpu_defaults():
    assert {FLAT, ROUGH} <= set(task_names())
    for task in (FLAT, ROUGH):
        spec = get_task(task)
        assert spec.default_num_envs("cpu") == 256 and spec.default_num_envs("cuda:0") == 4096


def test_observations_are_81_for_the_actor_and_86_for_the_critic(flat):
    obs = flat.get_observations()
    # base lin vel 3, ang vel 3, gravity 3, command 3, joint pos 23, joint vel 23, last action 23
    assert obs["actor"].shape == (NUM_ENVS, 81)
    # + foot contacts 2, friction 1, added mass 1, base height 1
    assert obs["critic"].shape == (NUM_ENVS, 86)
    assert flat.num_actions == 23


def test_robot_stands_on_both_feet_at_its_keyframe_under_zero_action(flat):
    _stand_at_home(flat)
    for _ in range(50):  # 1 s
        _, _, dones, _ = flat.step(_zero_action(flat))
        assert not dones.any()
    assert flat.foot_contact.all()
    assert torch.allclose(flat.base_height(), torch.tensor(0.745), atol=0.02)
    assert (flat.foot_height().abs() < 0.01).all()
    assert (flat.self_contacts == 0).all()


def test_each_joint_is_scaled_by_its_servo_torque_limit_over_kp(flat):
    model = flat.mj_model
    expected = 0.25 * model.actuator_forcerange[:, 1] / model.actuator_gainprm[:, 0]
    assert flat.joint_action_scale.tolist() == pytest.approx(expected.tolist())
    ankle_pitch, wrist = model.actuator("left_ankle_pitch").id, model.actuator("left_wrist_roll").id
    assert flat.joint_action_scale[ankle_pitch] == pytest.approx(
        0.25 * 50 / 300
    )  # stiff and weak: moves least
    actions = torch.linspace(-1.0, 1.0, flat.num_actions).repeat(flat.num_envs, 1)
    flat.apply_actions(actions)
    assert torch.allclose(flat.sim.ctrl, flat.default_joint_pos + actions * flat.joint_action_scale)
    assert flat.joint_action_scale[wrist] > 7 * flat.joint_action_scale[ankle_pitch]


def test_humanoid_terms_are_logged_and_signed_as_documented(flat):
    _stand_at_home(flat, command=(0.5, 0.0, 0.0))
    _, _, _, extras = flat.step(_zero_action(flat))
    w = flat.cfg.rewards
    for term in ("alive", "single_stance", "feet_air_time", "track_lin_vel_xy", "track_ang_vel_z"):
        assert w[term].weight > 0 and f"Episode_Reward/{term}" in extras["log"]
    for term in (
        "feet_slide",
        "foot_clearance",
        "base_height",
        "joint_deviation_upper",
        "joint_deviation_hips",
    ):
        assert w[term].weight < 0 and f"Episode_Reward/{term}" in extras["log"]
    for term in ("action_rate", "joint_limits", "orientation", "undesired_contacts"):
        assert w[term].weight < 0
    assert "Metrics/self_contact" in extras["log"]


def test_lifting_one_foot_is_single_stance_rewarded_only_while_walking_is_commanded(flat):
    _stand_at_home(flat, command=(0.5, 0.0, 0.0))
    flat.commands[1] = 0.0  # robot 1: stand still
    left = list(flat.joint_names)
    # Both robots raise the left foot 5 cm (hip and knee flex more; the ankle keeps the sole level).
    for name, delta in (
        ("left_hip_pitch_joint", -0.25),
        ("left_knee_joint", 0.5),
        ("left_ankle_pitch_joint", -0.25),
    ):
        flat.sim.qpos[:, 7 + left.index(name)] += delta
    flat.sim.forward()
    _physics_only(flat)
    assert flat.foot_contact[:2, 1].all() and not flat.foot_contact[:2, 0].any()
    stance = rewards.single_stance(flat)
    assert stance[0] == 1.0 and stance[1] == 0.0


def test_feet_sliding_on_the_ground_are_penalised_and_still_feet_are_not(flat):
    _stand_at_home(flat)
    for _ in range(3):
        _physics_only(flat)
    still = rewards.feet_slide(flat)
    flat.sim.qvel[0, 0] = 1.0  # robot 0's whole body slides forward at 1 m/s
    _physics_only(flat)
    slide = rewards.feet_slide(flat)
    assert slide[0] > 0.5 and (still < 0.05).all() and (slide[1:] < 0.05).all()


def test_a_low_swinging_foot_is_penalised_by_foot_clearance(flat):
    _stand_at_home(flat)
    flat.foot_contact[:] = torch.tensor([False, True])  # the left foot swings ...
    flat.foot_vel_xy[:] = 0.0
    flat.foot_vel_xy[0, 0, 0] = 1.0  # ... and moves on robot 0 only, at sole height ~0
    penalty = rewards.foot_clearance(flat)
    target = flat.cfg.rewards["foot_clearance"].params["height"]
    assert penalty[0] == pytest.approx(target**2, rel=0.1) and (penalty[1:] == 0).all()


def test_arm_and_waist_deviation_grows_with_the_distance_from_the_default_pose(flat):
    _stand_at_home(flat)
    base = rewards.joint_deviation_upper(flat)
    flat.sim.qpos[0, 7 + flat.joint_names.index("left_elbow_joint")] += 0.3
    flat.sim.qpos[0, 7 + flat.joint_names.index("waist_yaw_joint")] -= 0.2
    dev = rewards.joint_deviation_upper(flat)
    assert dev[0] == pytest.approx(0.5, abs=1e-4) and torch.allclose(dev[1:], base[1:])
    assert (rewards.joint_deviation_hips(flat) < 1e-4).all()


def test_crossed_legs_are_a_self_contact_and_terminate(flat):
    _stand_at_home(flat)
    names = list(flat.joint_names)
    # Robot 0 swings both legs inwards (hip roll at its inner limits) until the feet collide.
    flat.sim.qpos[0, 7 + names.index("left_hip_roll_joint")] = -0.5
    flat.sim.qpos[0, 7 + names.index("right_hip_roll_joint")] = 0.5
    flat.sim.qpos[0, 2] += 0.1
    flat.sim.forward()
    _physics_only(flat)
    terminated = flat.compute_terminations()
    assert flat.self_contacts[0] > 0 and (flat.self_contacts[1:] == 0).all()
    assert terminated[0] and not terminated[1:].any()


def test_a_pelvis_below_the_minimum_height_terminates(flat):
    _stand_at_home(flat)
    flat.sim.qpos[0, 2] = flat.cfg.min_base_height - 0.05  # sunk into a squat (legs through the floor)
    assert flat.base_height()[0] < flat.cfg.min_base_height
    terminated = flat.compute_terminations()
    assert terminated[0] and not terminated[1:].any()


def test_one_training_iteration_runs_with_the_default_agent(flat):
    agent = get_task(FLAT).agent_config()
    agent.logger = "none"
    runner = FleetRunner(flat, agent, None, "cpu")
    record = runner.learn(1, init_at_random_ep_len=True)
    assert np.isfinite(record["Loss/value"]) and record["env_steps"] == NUM_ENVS * 24


@pytest.mark.slow
def test_rough_terrain_adds_a_height_scan_and_keeps_contact_buffers_within_their_sizes():
    rough = _make(ROUGH)
    obs = rough.get_observations()
    assert obs["actor"].shape == (NUM_ENVS, 81 + 187) and obs["critic"].shape == (NUM_ENVS, 86 + 187)
    torch.manual_seed(1)
    for _ in range(100):
        _, _, _, extras = rough.step(torch.randn(NUM_ENVS, rough.num_actions))
        assert extras["log"]["Metrics/sim_overflow"] == 0
    agent = get_task(ROUGH).agent_config()
    agent.logger = "none"
    record = FleetRunner(rough, agent, None, "cpu").learn(1, init_at_random_ep_len=True)
    assert np.isfinite(record["Loss/value"])
