"""Specification of the humanoid model (src/mjfleet/assets/humanoid.xml), checked with the real simulators.

MuJoCo C checks simulate one world; the MuJoCo-Warp check runs 4 worlds for 2 s through mjfleet's Simulation (the
same sizes and substeps as Humanoid-Velocity-Flat, so its kernels are shared with tests/test_humanoid.py).
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from model_checks import contype_collisions

from mjfleet.assets import asset_path

SIDES = ("left", "right")
LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
ARM = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll")
JOINTS = (
    *(f"{s}_{j}_joint" for s in SIDES for j in LEG),
    "waist_yaw_joint",
    *(f"{s}_{j}_joint" for s in SIDES for j in ARM),
)
# Published G1 ranges (rad) for the left side; the right side mirrors the roll joints.
LEFT_RANGES = {
    "hip_pitch": (-2.5307, 2.8798),
    "hip_roll": (-0.5236, 2.9671),
    "hip_yaw": (-2.7576, 2.7576),
    "knee": (-0.0873, 2.8798),
    "ankle_pitch": (-0.8727, 0.5236),
    "ankle_roll": (-0.2618, 0.2618),
    "shoulder_pitch": (-3.0892, 2.6704),
    "shoulder_roll": (-1.5882, 2.2515),
    "shoulder_yaw": (-2.618, 2.618),
    "elbow": (-1.0472, 2.0944),
    "wrist_roll": (-1.9722, 1.9722),
    "waist_yaw": (-2.618, 2.618),
}
TORQUE_LIMITS = {
    "hip_pitch": 88,
    "hip_roll": 139,
    "hip_yaw": 88,
    "knee": 139,
    "ankle_pitch": 50,
    "ankle_roll": 50,
}
STAND_S = 2.0
SETTLE_S = 0.5


def _upright(quat_wxyz: np.ndarray) -> np.ndarray:
    """z of the pelvis's up axis in the world (1 when perfectly upright)."""
    qx, qy = quat_wxyz[..., 1], quat_wxyz[..., 2]
    return 1.0 - 2.0 * (qx**2 + qy**2)


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(asset_path("humanoid.xml")))


@pytest.fixture(scope="module")
def standing(model) -> dict:
    """MuJoCo C: hold ctrl at the home pose for 2 s from the keyframe."""
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    steps = round(STAND_S / model.opt.timestep)
    qpos = np.empty((steps, model.nq))
    for i in range(steps):
        data.ctrl[:] = model.key("home").ctrl
        mujoco.mj_step(model, data)
        qpos[i] = data.qpos
    return {"qpos": qpos, "data": data}


# --------------------------------------------------------------------------------------------- structure


def test_model_has_a_free_root_and_23_named_hinge_joints_in_actuator_order(model):
    assert model.joint("root").type == mujoco.mjtJoint.mjJNT_FREE
    assert model.nq == 7 + 23 and model.nv == 6 + 23 and model.nu == 23
    assert tuple(model.joint(i).name for i in range(1, model.njnt)) == JOINTS
    assert [model.joint(int(j)).name for j in model.actuator_trnid[:, 0]] == list(JOINTS)


def test_total_mass_is_that_of_a_35kg_class_humanoid(model):
    assert 33.0 < mujoco.mj_getTotalmass(model) < 37.0
    assert model.body("pelvis").mass[0] == pytest.approx(3.8)


def test_standing_height_is_about_1_3_m(model):
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    mujoco.mj_forward(model, data)
    head = model.geom("head")
    top = data.geom_xpos[head.id][2] + head.size[0]
    assert 1.25 < top < 1.35  # knees bent; G1: 1.32 m standing straight
    assert data.qpos[2] == pytest.approx(0.749)


def test_joint_ranges_are_the_published_ones_mirrored_left_to_right(model):
    for joint in JOINTS:
        name = joint.removesuffix("_joint")
        key = name.removeprefix("left_").removeprefix("right_")
        lo, hi = LEFT_RANGES[key]
        if name.startswith("right_") and key.endswith("roll"):
            lo, hi = -hi, -lo
        np.testing.assert_allclose(model.joint(joint).range, [lo, hi])


def test_each_joint_has_a_torque_limited_pd_servo_over_its_full_range(model):
    for joint in JOINTS:
        act = model.actuator(joint.removesuffix("_joint"))
        np.testing.assert_allclose(act.ctrlrange, model.joint(joint).range)
        key = joint.removesuffix("_joint").removeprefix("left_").removeprefix("right_")
        limit = TORQUE_LIMITS.get(key, 88 if key == "waist_yaw" else 25)
        np.testing.assert_allclose(act.forcerange, [-limit, limit])
        kp, kv = act.gainprm[0], -act.biasprm[2]
        assert act.biasprm[1] == -kp and kp > 0 and kv > 0
        assert model.joint(joint).armature[0] > 0


def test_robot_geoms_touch_the_floor_and_only_the_listed_leg_pairs_touch_each_other(model):
    among_robot, colliding = contype_collisions(model)
    assert among_robot == []
    parts = ("thigh", "shin", "foot", "hand")
    assert colliding == {"pelvis", "torso", "head"} | {f"{s}_{p}" for s in SIDES for p in parts}
    pairs = [
        (model.geom(int(a)).name, model.geom(int(b)).name)
        for a, b in zip(model.pair_geom1, model.pair_geom2, strict=True)
    ]
    # Explicit pairs: one leg geom of each side (a foot, shin or thigh), never an arm or the trunk.
    for a, b in pairs:
        assert {a.split("_")[0], b.split("_")[0]} == set(SIDES)
        assert a.split("_")[1] in parts[:3] and b.split("_")[1] in parts[:3]
    assert ("left_foot", "right_foot") in pairs


def test_feet_are_flat_boxes_and_the_model_uses_primitives_only(model):
    assert model.nmesh == 0 and model.nhfield == 0
    for side in SIDES:
        foot = model.geom(f"{side}_foot")
        assert foot.type == mujoco.mjtGeom.mjGEOM_BOX
        assert foot.size[0] > 2 * foot.size[1]  # longer than wide: a sole, not a point


def test_a_tracking_camera_follows_the_robot(model):
    camera = model.camera("track")
    assert camera.mode == mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM
    assert model.body(camera.bodyid[0]).name == "pelvis"


# --------------------------------------------------------------------------------------------- MuJoCo C


def test_it_stands_at_the_home_pose_for_2_s_on_its_feet(model, standing):
    qpos, data = standing["qpos"], standing["data"]
    settled = qpos[round(SETTLE_S / model.opt.timestep) :]
    assert np.isfinite(qpos).all()
    assert _upright(qpos[:, 3:7]).min() > 0.98
    assert np.abs(settled[:, 2] - 0.745).max() < 0.02
    assert np.linalg.norm(qpos[-1, :2]) < 0.05
    touching = {model.geom(int(g)).name for c in data.contact[: data.ncon] for g in c.geom}
    assert touching == {"floor", "left_foot", "right_foot"}
    weight = mujoco.mj_getTotalmass(model) * 9.81
    touch = [data.sensor(f"{s}_foot_touch").data[0] for s in SIDES]
    assert sum(touch) == pytest.approx(weight, rel=0.05)


# --------------------------------------------------------------------------------------------- MuJoCo-Warp


def test_it_stands_for_2_s_in_every_world_of_mjfleets_simulation_as_in_mujoco_c(model, standing):
    from mjfleet.sim import Simulation
    from mjfleet.tasks.humanoid.env import HumanoidEnv

    decimation = 4
    sim = Simulation(
        model,
        4,
        "cpu",
        substeps=decimation,
        per_world_model_fields=HumanoidEnv.per_env_model_fields,
        nconmax=model.nconmax,
        njmax=model.njmax,
    )
    home = torch.as_tensor(model.key("home").qpos, dtype=torch.float32)
    sim.qpos.copy_(home.repeat(4, 1))
    sim.qvel.zero_()
    sim.ctrl.copy_(torch.as_tensor(model.key("home").ctrl, dtype=torch.float32).repeat(4, 1))
    sim.forward()
    for _ in range(round(STAND_S / model.opt.timestep) // decimation):
        sim.step()
    qpos = sim.qpos.numpy()
    assert np.isfinite(qpos).all()
    assert (_upright(qpos[:, 3:7]) > 0.98).all()
    np.testing.assert_allclose(qpos[:, 2], standing["qpos"][-1, 2], atol=0.005)
    assert (np.linalg.norm(qpos[:, :2], axis=1) < 0.05).all()
    assert (sim.sensordata[:, -2:] > 50.0).all()
