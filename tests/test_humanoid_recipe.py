"""What the humanoid's recipe promises before any learning (issue 46), checked on the real configs and simulator:
how far the initial policy explores each joint, and what the reward pays per second for standing still against a
walking reference under a forward command. docs/tasks.md ("What the recipe pays before learning") reports both.

The walking reference is the keyframe pose gliding at the commanded velocity: the feet's friction is 0.01 (at 0.001
MuJoCo's pyramidal contacts diverge) and the base is given the commanded velocity again before every policy step
(the feet's friction takes ~0.002 m/s of it per step). It earns what tracking earns without a gait: none of the gait
terms (single stance, air time) a real walk would add, and the foot slip a real walk would avoid.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from task_envs import make_task_env

from mjfleet.envs.terms import bind_recipe
from mjfleet.tasks import get_task
from mjfleet.tasks.humanoid import HumanoidEnv

FLAT = "Humanoid-Velocity-Flat"
NUM_ENVS = 4  # as tests/test_humanoid.py: the same model and sizes, so the same compiled kernels
COMMAND = (0.5, 0.0, 0.0)  # the GPU target's forward command (docs/benchmarks.md)
GLIDE_FRICTION = 0.01
SECONDS = 2.0
TRACKING = ("track_lin_vel_xy", "track_ang_vel_z")
TASKS_MD = pathlib.Path(__file__).resolve().parents[1] / "docs" / "tasks.md"
LEG_JOINTS = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
WEIGHT_BEARING = ("hip_pitch", "knee", "ankle_pitch")
"""The sagittal leg joints that hold the robot up against gravity in its knees-bent stance."""


@pytest.fixture(scope="module")
def flat() -> HumanoidEnv:
    return make_task_env(FLAT, NUM_ENVS)


def initial_std() -> float:
    """The initial action std of the task's GPU agent (the CPU agent's is the same: tested)."""
    return get_task(FLAT).default_agent_config("cuda:0").actor.init_noise_std


def exploration(env: HumanoidEnv) -> dict[str, float]:
    """Joint-target noise at initialisation (rad) per joint: the initial action std times the joint's action scale."""
    std = initial_std()
    return {name: std * float(s) for name, s in zip(env.joint_names, env.joint_action_scale, strict=True)}


def _at_home(env: HumanoidEnv, glide: bool) -> torch.Tensor:
    """Every robot in the keyframe pose at rest under COMMAND, pushes and command redraws far off; with `glide`,
    feet that glide. Returns the feet's friction to restore."""
    friction = env.sim.model_view("geom_friction")
    saved = friction[:, env.foot_geoms, 0].clone()
    if glide:
        friction[:, env.foot_geoms, 0] = GLIDE_FRICTION
    home = torch.as_tensor(env.mj_model.key("home").qpos, dtype=torch.float32)
    qpos = home.repeat(env.num_envs, 1)
    qpos[:, 0:2] = env.env_origins[:, 0:2]
    env.sim.qpos.copy_(qpos)
    env.sim.qvel.zero_()
    env.sim.forward()
    env.episode_length_buf.zero_()  # the first step's foot speeds are 0, not a jump from an earlier position
    env.feet_air_time.zero_()
    env._push_steps.fill_(10**6)
    env._command_steps.fill_(-(10**6))
    env.commands[:] = torch.tensor(COMMAND)
    env.last_actions.zero_()
    return saved


def reward_rates(env: HumanoidEnv, glide: bool) -> dict[str, float]:
    """Each reward term's mean rate (per second of simulated time, weight included) over SECONDS of zero actions
    from the keyframe, and "total": the reward the agent receives (the step's clipped sum) per second. With
    `glide`, the base moves at the commanded velocity (the keyframe faces +x: the command's vx is the world's)."""
    saved = _at_home(env, glide)
    terms = {t.name: t for t in bind_recipe(env, env.cfg.rewards, "env.rewards")}  # weights per second
    sums = dict.fromkeys(env.reward_weights, 0.0)
    total = 0.0
    steps = round(SECONDS / env.step_dt)
    try:
        for _ in range(steps):
            if glide:
                env.sim.qvel[:, 0] = COMMAND[0]
            _, reward, dones, _ = env.step(torch.zeros(env.num_envs, env.num_actions))
            assert not dones.any(), "the reference fell or timed out"
            for name in sums:
                sums[name] += float(terms[name].weight * terms[name].call(env).mean())
            total += float(reward.mean()) / env.step_dt
    finally:
        env.sim.model_view("geom_friction")[:, env.foot_geoms, 0] = saved
    rates = {name: value / steps for name, value in sums.items()}
    rates["total"] = total / steps
    return rates


@pytest.fixture(scope="module")
def standing(flat) -> dict[str, float]:
    return reward_rates(flat, glide=False)


@pytest.fixture(scope="module")
def walking(flat) -> dict[str, float]:
    return reward_rates(flat, glide=True)


def _docs_table(heading: str) -> dict[str, list[str]]:
    """The rows of the first table after `heading` in docs/tasks.md: first cell -> the other cells."""
    text = TASKS_MD.read_text()
    start = text.index(heading)
    rows = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip().strip("*`") for c in line.strip("|").split("|")]
            if not set(cells[0]) <= set("-: "):
                rows[cells[0]] = cells[1:]
        elif rows:
            break
    return rows


def test_exploration_is_the_initial_std_times_a_quarter_of_the_torque_limit_over_kp(flat):
    model = flat.mj_model
    std = initial_std()
    assert get_task(FLAT).default_agent_config("cpu").actor.init_noise_std == std
    for i, (name, noise) in enumerate(exploration(flat).items()):
        assert model.actuator(i).trnid[0] == model.joint(name).id
        kp, limit = model.actuator_gainprm[i, 0], model.actuator_forcerange[i, 1]
        assert noise == pytest.approx(std * 0.25 * limit / kp, rel=1e-5), name


def test_the_weight_bearing_leg_joints_explore_least_and_both_legs_alike(flat):
    noise = exploration(flat)
    bearing = [noise[f"{side}_{j}_joint"] for side in ("left", "right") for j in WEIGHT_BEARING]
    others = [v for k, v in noise.items() if not any(k.endswith(f"_{j}_joint") for j in WEIGHT_BEARING)]
    assert max(bearing) < min(others)
    assert min(noise, key=noise.__getitem__) in ("left_ankle_pitch_joint", "right_ankle_pitch_joint")
    for joint in LEG_JOINTS:
        assert noise[f"left_{joint}_joint"] == noise[f"right_{joint}_joint"], joint


def test_docs_state_the_exploration_per_leg_joint_as_the_code_computes_it(flat):
    noise = exploration(flat)
    table = _docs_table("Joint-space exploration at initialisation")
    scale = dict(zip(flat.joint_names, flat.joint_action_scale.tolist(), strict=True))
    for joint in LEG_JOINTS:
        name = f"left_{joint}_joint"
        kp, limit, scale_cell, noise_cell = table[joint.replace("_", " ")][:4]
        model = flat.mj_model
        assert float(kp) == model.actuator_gainprm[flat.joint_names.index(name), 0], joint
        assert float(limit) == model.actuator_forcerange[flat.joint_names.index(name), 1], joint
        assert float(scale_cell) == pytest.approx(scale[name], abs=6e-4), joint
        assert float(noise_cell) == pytest.approx(noise[name], abs=6e-4), joint


def test_standing_still_holds_the_pose_and_misses_the_forward_command(flat, standing):
    assert standing["alive"] == pytest.approx(flat.cfg.rewards["alive"].weight)
    # exp(-0.5^2 / 0.25): standing misses by exactly the commanded speed
    assert standing["track_lin_vel_xy"] == pytest.approx(
        flat.cfg.rewards["track_lin_vel_xy"].weight * 0.368, rel=0.02
    )


def test_the_walking_reference_tracks_the_command(flat, walking):
    assert walking["alive"] == pytest.approx(flat.cfg.rewards["alive"].weight)
    assert walking["track_lin_vel_xy"] > 0.95 * flat.cfg.rewards["track_lin_vel_xy"].weight
    assert walking["track_ang_vel_z"] > 0.95 * flat.cfg.rewards["track_ang_vel_z"].weight


def test_tracking_decides_between_walking_and_standing_still(standing, walking):
    assert walking["total"] > standing["total"]
    gain = sum(walking[t] - standing[t] for t in TRACKING)
    rest = sum(walking[t] - standing[t] for t in standing if t not in (*TRACKING, "total"))
    assert gain > 0 and gain + rest > 0  # what tracking adds outweighs what the other terms take


def test_docs_report_the_reward_rates_as_measured(standing, walking):
    table = _docs_table("Reward per second under a 0.5 m/s forward command")
    measured = {"standing": standing, "walking": walking}
    for term in standing:
        row = table[term]
        for column, scenario in enumerate(("standing", "walking")):
            assert float(row[column]) == pytest.approx(measured[scenario][term], abs=0.011), (term, scenario)
