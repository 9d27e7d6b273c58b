"""The Unitree Go1 and G1 descriptions, built from the files `robots fetch` really downloaded: every actuator's
armature, gains, force range and action scale equal the rule applied to the published facts, written out here
again (mjlab 1.6.0's asset_zoo/robots/unitree_go1/go1_constants.py and unitree_g1/g1_constants.py)."""

from __future__ import annotations

import math
import re

import mujoco
import numpy as np
import pytest

from mjfleet.robots import ROBOTS, BuiltRobot, build_robot

OMEGA = 2 * math.pi * 10.0  # 10 Hz
ZETA = 2.0

GO1_ROTOR = 0.000111842
GO1 = {  # joint pattern -> (armature, effort limit)
    r".*_(hip|thigh)_joint": (GO1_ROTOR * 6**2, 23.7),
    r".*_calf_joint": (GO1_ROTOR * 9**2, 35.55),
}


def planetary(rotor, gears):
    return rotor[0] * (gears[1] * gears[2]) ** 2 + rotor[1] * gears[2] ** 2 + rotor[2]


M5020 = planetary((0.139e-4, 0.017e-4, 0.169e-4), (1, 1 + 46 / 18, 1 + 56 / 16))
M7520_14 = planetary((0.489e-4, 0.098e-4, 0.533e-4), (1, 4.5, 1 + 48 / 22))
M7520_22 = planetary((0.489e-4, 0.109e-4, 0.738e-4), (1, 4.5, 5))
M4010 = planetary((0.068e-4, 0, 0), (1, 5, 5))
G1 = {
    r".*_(elbow|shoulder_pitch|shoulder_roll|shoulder_yaw|wrist_roll)_joint": (M5020, 25.0),
    r".*_hip_(pitch|yaw)_joint|waist_yaw_joint": (M7520_14, 88.0),
    r".*_(hip_roll|knee)_joint": (M7520_22, 139.0),
    r".*_wrist_(pitch|yaw)_joint": (M4010, 5.0),
    r"waist_(pitch|roll)_joint|.*_ankle_(pitch|roll)_joint": (2 * M5020, 50.0),  # two 5020s through a linkage
}
G1_HOME = {
    "left_hip_pitch_joint": -0.312, "right_hip_pitch_joint": -0.312, "left_knee_joint": 0.669,
    "right_knee_joint": 0.669, "left_ankle_pitch_joint": -0.363, "right_ankle_pitch_joint": -0.363,
    "left_elbow_joint": 0.6, "right_elbow_joint": 0.6, "left_shoulder_pitch_joint": 0.2,
    "right_shoulder_pitch_joint": 0.2, "left_shoulder_roll_joint": 0.2, "right_shoulder_roll_joint": -0.2,
}  # fmt: skip


@pytest.fixture
def built(robot_cache, monkeypatch):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))
    return lambda name: build_robot(ROBOTS[name].description)


def facts_per_joint(robot: BuiltRobot, facts: dict) -> tuple[np.ndarray, np.ndarray]:
    armature, effort = [], []
    for joint in robot.joint_names:
        (match,) = [fact for pattern, fact in facts.items() if re.fullmatch(pattern, joint)]
        armature.append(match[0])
        effort.append(match[1])
    return np.array(armature), np.array(effort)


def assert_actuators_follow_the_rule(robot: BuiltRobot, facts: dict, count: int) -> None:
    model = robot.model
    hinges = [
        model.joint(j).name for j in range(model.njnt) if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE
    ]
    assert model.nu == count and list(robot.joint_names) == hinges  # every joint, in the MJCF's order
    armature, effort = facts_per_joint(robot, facts)
    kp, kd = armature * OMEGA**2, 2 * ZETA * armature * OMEGA
    np.testing.assert_allclose(model.dof_armature[robot.dof_adr], armature, rtol=1e-12)
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], kp, rtol=1e-12)
    np.testing.assert_allclose(model.actuator_biasprm[:, 1], -kp, rtol=1e-12)
    np.testing.assert_allclose(model.actuator_biasprm[:, 2], -kd, rtol=1e-12)
    np.testing.assert_allclose(model.actuator_forcerange, np.stack([-effort, effort], axis=1))
    np.testing.assert_allclose(robot.action_scale, 0.25 * effort / kp, rtol=1e-12)
    assert [model.actuator_trnid[i, 0] for i in range(model.nu)] == [
        model.joint(n).id for n in robot.joint_names
    ]


def assert_stands_on_the_floor(robot: BuiltRobot) -> None:
    """At the home pose no collision geom is below the floor and the lowest foot touches it (within 5 mm)."""
    model, data = robot.model, mujoco.MjData(robot.model)
    mujoco.mj_resetDataKeyframe(model, data, model.key(robot.home_keyframe).id)
    mujoco.mj_forward(model, data)
    robot_geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0 and model.geom_contype[g]]
    distance = {
        g: mujoco.mj_geomDistance(model, data, robot.floor_geom_id, g, 2.0, None) for g in robot_geoms
    }
    assert min(distance.values()) > -0.002
    feet = [g for geoms in robot.foot_geom_ids for g in geoms]
    assert min(distance[g] for g in feet) < 0.005
    np.testing.assert_allclose(data.ctrl, robot.default_joint_pos)


def test_go1_actuators_follow_the_published_motor_facts(built):
    assert_actuators_follow_the_rule(built("unitree-go1"), GO1, count=12)


def test_go1_stands_on_its_four_feet_at_home(built):
    robot = built("unitree-go1")
    assert_stands_on_the_floor(robot)
    model = robot.model
    assert [model.site(s).name for s in robot.foot_ids] == ["FR", "FL", "RR", "RL"]
    assert [[model.geom(g).name for g in geoms] for geoms in robot.foot_geom_ids] == [
        [f"{leg}_foot_collision"] for leg in ("FR", "FL", "RR", "RL")
    ]
    home = dict(zip(robot.joint_names, robot.default_joint_pos, strict=True))
    assert home["FR_hip_joint"] == 0.1 and home["FL_hip_joint"] == -0.1 and home["RL_thigh_joint"] == 0.9
    assert home["RR_calf_joint"] == -1.8
    assert [model.body(b).name for b in robot.terminate_body_ids] == [
        "FR_thigh",
        "FL_thigh",
        "RR_thigh",
        "RL_thigh",
    ]
    assert model.body(robot.base_body_id).name == "trunk"


def test_g1_actuators_follow_the_published_motor_facts(built):
    assert_actuators_follow_the_rule(built("unitree-g1"), G1, count=29)


def test_g1_stands_on_both_soles_at_home(built):
    robot = built("unitree-g1")
    assert_stands_on_the_floor(robot)
    model = robot.model
    assert [model.site(s).name for s in robot.foot_ids] == ["left_foot", "right_foot"]
    assert [len(geoms) for geoms in robot.foot_geom_ids] == [7, 7]
    home = dict(zip(robot.joint_names, robot.default_joint_pos, strict=True))
    assert home == {joint: G1_HOME.get(joint, 0.0) for joint in robot.joint_names}
    assert robot.home_qpos[2] == 0.76 and model.body(robot.base_body_id).name == "pelvis"


def test_the_fetched_robots_simulate_a_second_holding_their_home_pose(built):
    for name in ("unitree-go1", "unitree-g1"):
        robot = built(name)
        model, data = robot.model, mujoco.MjData(robot.model)
        mujoco.mj_resetDataKeyframe(model, data, model.key(robot.home_keyframe).id)
        for _ in range(int(1.0 / model.opt.timestep)):
            mujoco.mj_step(model, data)
        assert np.isfinite(data.qpos).all()
        up = data.xmat[robot.base_body_id].reshape(3, 3)[2, 2]  # the base's z axis, vertical component
        assert up > 0.9, f"{name} tipped over holding its home pose"


def test_the_fetched_robots_go_onto_mujoco_warp(built):
    import mujoco_warp
    import warp as wp

    for name in ("unitree-go1", "unitree-g1"):
        robot = built(name)
        with wp.ScopedDevice("cpu"):
            assert mujoco_warp.put_model(robot.model).nu == robot.model.nu
