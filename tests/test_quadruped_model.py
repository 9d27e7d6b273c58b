"""Specification of the quadruped model (src/mjfleet/assets/quadruped.xml), checked with the real simulators.

MuJoCo C checks simulate a few seconds on one world; the MuJoCo-Warp checks run 4 worlds for 2 s on warp's cpu
device with a captured step, as the training loop does.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from model_checks import contype_collisions

from mjfleet.assets import asset_path

LEGS = ("FR", "FL", "RR", "RL")
JOINTS = tuple(f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "thigh", "calf"))
FOOT_RADIUS = 0.02
SETTLE_S = 1.0  # the PD servos sag under the robot's weight during the first ~0.5 s, then hold


def _model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(asset_path("quadruped.xml")))


def _projected_gravity_z(quat_wxyz: np.ndarray) -> np.ndarray:
    """z component of the world gravity direction expressed in the trunk frame (-1 when perfectly upright)."""
    qx, qy = quat_wxyz[..., 1], quat_wxyz[..., 2]
    return -(1.0 - 2.0 * (qx**2 + qy**2))


def _simulate_c(model: mujoco.MjModel, seconds: float, drop_height: float | None = None) -> dict:
    """Hold ctrl at the home pose from the "home" keyframe (optionally raised) and record the trunk state."""
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    if drop_height is not None:
        data.qpos[2] = drop_height
    home_ctrl = model.key("home").ctrl.copy()
    steps = round(seconds / model.opt.timestep)
    qpos = np.empty((steps, model.nq))
    for i in range(steps):
        data.ctrl[:] = home_ctrl
        mujoco.mj_step(model, data)
        qpos[i] = data.qpos
    return {"qpos": qpos, "data": data, "settle_steps": round(SETTLE_S / model.opt.timestep)}


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return _model()


@pytest.fixture(scope="module")
def standing(model) -> dict:
    return _simulate_c(model, seconds=4.0)


@pytest.fixture(scope="module")
def dropped(model) -> dict:
    return _simulate_c(model, seconds=4.0, drop_height=0.4)


# --------------------------------------------------------------------------------------------- assets package


def test_asset_path_returns_the_shipped_quadruped_file():
    path = asset_path("quadruped.xml")
    assert path.is_file() and path.name == "quadruped.xml"


def test_asset_path_names_the_missing_file_and_lists_available_ones():
    with pytest.raises(FileNotFoundError, match=r"no_such_robot\.xml.*quadruped\.xml"):
        asset_path("no_such_robot.xml")


# --------------------------------------------------------------------------------------------- structure


def test_model_has_a_free_root_and_twelve_named_hinge_joints(model):
    assert model.joint("root").type == mujoco.mjtJoint.mjJNT_FREE
    assert model.nq == 19 and model.nv == 18
    names = tuple(model.joint(i).name for i in range(1, model.njnt))
    assert names == JOINTS
    assert all(model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE for j in range(1, model.njnt))


def test_total_mass_is_that_of_a_12kg_class_quadruped(model):
    assert 11.5 < mujoco.mj_getTotalmass(model) < 13.5
    assert model.body("trunk").mass[0] == pytest.approx(5.204)


def test_leg_geometry_matches_published_link_lengths(model):
    for leg in LEGS:
        sx = 1.0 if leg[0] == "F" else -1.0
        sy = 1.0 if leg[1] == "L" else -1.0
        np.testing.assert_allclose(model.body(f"{leg}_hip").pos, [sx * 0.1881, sy * 0.04675, 0.0])
        np.testing.assert_allclose(model.body(f"{leg}_thigh").pos, [0.0, sy * 0.08, 0.0])
        np.testing.assert_allclose(model.body(f"{leg}_calf").pos, [0.0, 0.0, -0.213])
        foot = model.geom(f"{leg}_foot")
        np.testing.assert_allclose(foot.pos, [0.0, 0.0, -0.213])
        assert foot.type == mujoco.mjtGeom.mjGEOM_SPHERE and foot.size[0] == pytest.approx(FOOT_RADIUS)


def test_hip_abducts_about_x_and_thigh_and_calf_flex_about_y(model):
    for leg in LEGS:
        np.testing.assert_allclose(model.joint(f"{leg}_hip_joint").axis, [1, 0, 0])
        np.testing.assert_allclose(model.joint(f"{leg}_thigh_joint").axis, [0, 1, 0])
        np.testing.assert_allclose(model.joint(f"{leg}_calf_joint").axis, [0, 1, 0])


def test_each_joint_has_a_torque_limited_pd_servo_over_its_full_range(model):
    assert model.nu == 12
    for joint in JOINTS:
        act = model.actuator(joint.removesuffix("_joint"))
        assert model.joint(act.trnid[0]).name == joint
        np.testing.assert_allclose(act.ctrlrange, model.joint(joint).range)
        limit = 35.55 if "calf" in joint else 23.7
        np.testing.assert_allclose(act.forcerange, [-limit, limit])
        assert act.forcelimited
        kp, kv = act.gainprm[0], -act.biasprm[2]
        assert act.biasprm[1] == -kp and 20.0 <= kp <= 40.0 and 0.5 <= kv <= 1.0


def test_robot_geoms_collide_with_the_floor_but_never_with_each_other(model):
    among_robot, colliding = contype_collisions(model)
    assert among_robot == []
    expected = {"trunk"} | {f"{leg}_{part}" for leg in LEGS for part in ("thigh", "calf", "foot")}
    assert colliding == expected


def test_collision_geometry_uses_primitives_only(model):
    primitives = {
        mujoco.mjtGeom.mjGEOM_PLANE,
        mujoco.mjtGeom.mjGEOM_SPHERE,
        mujoco.mjtGeom.mjGEOM_CAPSULE,
        mujoco.mjtGeom.mjGEOM_BOX,
        mujoco.mjtGeom.mjGEOM_CYLINDER,
    }
    assert model.nmesh == 0
    assert {int(t) for t in model.geom_type} <= {int(p) for p in primitives}


def test_imu_sensors_and_foot_touch_sensors_are_named(model):
    assert model.site("imu").bodyid[0] == model.body("trunk").id
    np.testing.assert_allclose(model.site("imu").pos, 0.0)
    dims = {model.sensor(i).name: int(model.sensor_dim[i]) for i in range(model.nsensor)}
    assert dims == {
        "imu_quat": 4,
        "imu_gyro": 3,
        "imu_acc": 3,
        "imu_linvel": 3,
        **{f"{leg}_foot_touch": 1 for leg in LEGS},
    }


def test_home_keyframe_stands_on_the_feet_with_ctrl_equal_to_the_pose(model):
    data = mujoco.MjData(model)
    key = model.key("home")
    mujoco.mj_resetDataKeyframe(model, data, key.id)
    mujoco.mj_forward(model, data)
    assert 0.27 <= data.qpos[2] <= 0.30
    np.testing.assert_allclose(key.qpos[7:], np.tile([0.0, 0.9, -1.8], 4))
    np.testing.assert_allclose(key.ctrl, key.qpos[7:])
    for leg in LEGS:
        assert data.geom_xpos[model.geom(f"{leg}_foot").id][2] == pytest.approx(FOOT_RADIUS, abs=2e-3)


# --------------------------------------------------------------------------------------------- MuJoCo C


def test_standing_trunk_height_stays_within_3cm_of_its_settled_value(standing):
    z = standing["qpos"][:, 2]
    settled = z[standing["settle_steps"] :]
    assert np.abs(settled - settled[-1]).max() < 0.03
    # The servos sag a few cm below the keyframe height, but never down onto the shins.
    assert 0.22 < settled[-1] < 0.30


def test_standing_trunk_does_not_drift_once_settled(standing):
    xy = standing["qpos"][:, :2]
    settled = xy[standing["settle_steps"] :]
    assert np.linalg.norm(settled - settled[0], axis=1).max() < 0.05
    # From the keyframe, including the settling sag, which shifts the trunk backwards over the feet.
    assert np.linalg.norm(xy[-1] - xy[0]) < 0.08


def test_standing_trunk_stays_upright_without_nans(standing):
    assert np.isfinite(standing["qpos"]).all()
    assert _projected_gravity_z(standing["qpos"][:, 3:7]).max() < -0.95


def test_standing_robot_touches_the_ground_only_with_its_feet(model, standing):
    data = standing["data"]
    touching = {model.geom(int(g)).name for c in data.contact[: data.ncon] for g in c.geom}
    assert touching == {"floor"} | {f"{leg}_foot" for leg in LEGS}
    for leg in LEGS:
        assert data.sensor(f"{leg}_foot_touch").data[0] > 5.0


def test_standing_imu_reads_gravity_and_no_rotation(standing):
    data = standing["data"]
    acc = data.sensor("imu_acc").data
    assert np.linalg.norm(acc) == pytest.approx(9.81, abs=0.05)
    assert acc[2] > 9.7  # the trunk pitches ~4 degrees nose-up: the rear legs carry more weight and sag more
    np.testing.assert_allclose(data.sensor("imu_gyro").data, 0.0, atol=0.05)
    np.testing.assert_allclose(data.sensor("imu_linvel").data, 0.0, atol=0.05)
    assert abs(data.sensor("imu_quat").data[0]) > 0.99


def test_dropped_from_40cm_it_lands_upright_on_its_feet(model, standing, dropped):
    qpos, data = dropped["qpos"], dropped["data"]
    assert np.isfinite(qpos).all()
    assert _projected_gravity_z(qpos[:, 3:7]).max() < -0.95
    assert qpos[-1, 2] == pytest.approx(standing["qpos"][-1, 2], abs=0.01)
    touching = {model.geom(int(g)).name for c in data.contact[: data.ncon] for g in c.geom}
    assert touching == {"floor"} | {f"{leg}_foot" for leg in LEGS}


# --------------------------------------------------------------------------------------------- MuJoCo-Warp


@pytest.fixture(scope="module")
def warp_standing(model) -> dict:
    """4 worlds, 400 captured steps (2 s) holding the home pose on warp's cpu device."""
    import mujoco_warp as mjw
    import warp as wp

    nworld, steps = 4, 400
    with wp.ScopedDevice("cpu"):
        m = mjw.put_model(model)
        d = mjw.make_data(model, nworld=nworld, nconmax=model.nconmax, njmax=model.njmax)
        mjw.reset_data_keyframe(m, d, model.key("home").id)
        wp.copy(
            d.ctrl, wp.array(np.tile(model.key("home").ctrl, (nworld, 1)).astype(np.float32), dtype=float)
        )
        qpos0 = d.qpos.numpy().copy()
        mjw.step(m, d)  # compiles (or loads cached) kernels before capture
        with wp.ScopedCapture() as capture:
            mjw.step(m, d)
        for _ in range(steps - 2):
            wp.capture_launch(capture.graph)
        wp.synchronize()
        return {
            "qpos0": qpos0,
            "qpos": d.qpos.numpy(),
            "sensordata": d.sensordata.numpy(),
            "overflow": d.overflow.numpy(),
            "nefc": d.nefc.numpy(),
            "njmax": d.njmax,
        }


def test_mujoco_warp_accepts_every_model_feature(model):
    import mujoco_warp as mjw
    import warp as wp

    with wp.ScopedDevice("cpu"):
        mjw.put_model(model)  # raises NotImplementedError for unsupported integrators, sensors, geoms, ...


def test_mujoco_warp_holds_the_home_pose_upright_in_every_world(warp_standing):
    qpos = warp_standing["qpos"]
    assert np.isfinite(qpos).all()
    assert _projected_gravity_z(qpos[:, 3:7]).max() < -0.95
    assert (np.linalg.norm(qpos[:, :2] - warp_standing["qpos0"][:, :2], axis=1) < 0.08).all()


def test_mujoco_warp_standing_height_matches_mujoco_c(warp_standing, standing):
    c_height_at_2s = standing["qpos"][399, 2]
    np.testing.assert_allclose(warp_standing["qpos"][:, 2], c_height_at_2s, atol=0.005)


def test_mujoco_warp_standing_needs_no_more_contacts_or_constraints_than_allocated(warp_standing):
    assert (warp_standing["overflow"] == 0).all()
    assert warp_standing["nefc"].max() <= warp_standing["njmax"]
    foot_touch = warp_standing["sensordata"][:, -4:]
    assert (foot_touch > 5.0).all()
