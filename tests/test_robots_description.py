"""A robot description made into a model (mjfleet.robots): what it applies, and one UsageError line, naming the
field, for each kind of bad input. The robot here is a small two-legged MJCF written by the test."""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest

from mjfleet.errors import UsageError
from mjfleet.robots import ActuatorGroup, HomePose, RobotDescription, build_robot

BIPED = """
<mujoco model="biped">
  <asset>{mesh}</asset>
  <worldbody>{floor}
    <body name="base" pos="0 0 0.5">
      <freejoint/>
      <geom name="torso" type="box" size="0.1 0.1 0.05" mass="2"/>
      <body name="left_thigh" pos="0 0.05 -0.05">
        <joint name="left_hip" axis="0 1 0" range="-1 1"{hip_armature}/>
        <geom name="left_thigh_geom" type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
        <body name="left_shin" pos="0 0 -0.2">
          <joint name="left_knee" axis="0 1 0" range="-2 0"/>
          <geom name="left_shin_geom" type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
          <geom name="left_foot_geom" type="sphere" pos="0 0 -0.2" size="0.03"/>
          <site name="left_foot" pos="0 0 -0.2"/>
          <geom name="left_decor" type="sphere" size="0.01" contype="0" conaffinity="0"/>
        </body>
      </body>
      <body name="right_thigh" pos="0 -0.05 -0.05">
        <joint name="right_hip" axis="0 1 0" range="-1 1"/>
        <geom name="right_thigh_geom" type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
        <body name="right_shin" pos="0 0 -0.2">
          <joint name="right_knee" axis="0 1 0" range="-2 0"/>
          <geom name="right_shin_geom" type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
          <geom name="right_foot_geom" type="sphere" pos="0 0 -0.2" size="0.03"/>
          <site name="right_foot" pos="0 0 -0.2"/>
        </body>
      </body>
    </body>
  </worldbody>
  {extra}
</mujoco>
"""
STANDING_HEIGHT = 0.05 + 0.2 + 0.2 + 0.03
"""The base's height with straight legs and the foot spheres on the floor (m)."""
HIP = ActuatorGroup(joints=(".*_hip",), armature=0.01, effort_limit=20.0, velocity_limit=10.0)
KNEE = ActuatorGroup(joints=(".*_knee",), armature=0.02, effort_limit=30.0)


def write_biped(tmp_path, mesh="", floor="", hip_armature="", extra="") -> str:
    path = tmp_path / "biped.xml"
    path.write_text(BIPED.format(mesh=mesh, floor=floor, hip_armature=hip_armature, extra=extra))
    return str(path)


def describe(mjcf: str, **changes) -> RobotDescription:
    fields = dict(
        name="biped",
        mjcf=mjcf,
        actuators=(HIP, KNEE),
        home=HomePose(base_height=STANDING_HEIGHT + 0.01, joints={".*_knee": 0.0}),
        base_body="base",
        feet=("left_foot", "right_foot"),
    )
    return RobotDescription(**{**fields, **changes})


def rule(armature: float, hz: float = 10.0, zeta: float = 2.0) -> tuple[float, float]:
    omega = 2 * math.pi * hz
    return armature * omega**2, 2 * zeta * armature * omega


def build_error(description: RobotDescription) -> str:
    with pytest.raises(UsageError) as error:
        build_robot(description)
    message = str(error.value)
    assert "\n" not in message
    return message


# --- what a description applies ---------------------------------------------------------------------------------


def test_each_described_joint_gets_a_position_actuator_with_the_frequency_rules_gains(tmp_path):
    robot = build_robot(describe(write_biped(tmp_path)))
    assert robot.joint_names == ("left_hip", "left_knee", "right_hip", "right_knee")  # the MJCF's order
    armature = np.array([0.01, 0.02, 0.01, 0.02])
    kp, kd = rule(armature)
    np.testing.assert_allclose(robot.armature, armature)
    np.testing.assert_allclose(robot.model.dof_armature[robot.dof_adr], armature)
    np.testing.assert_allclose(robot.kp, kp)
    np.testing.assert_allclose(robot.kd, kd)
    model = robot.model
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], kp)
    np.testing.assert_allclose(model.actuator_biasprm[:, :3], np.stack([0 * kp, -kp, -kd], axis=1))
    np.testing.assert_allclose(model.actuator_forcerange, [[-20, 20], [-30, 30], [-20, 20], [-30, 30]])
    assert model.actuator_forcelimited.all() and not model.actuator_ctrllimited.any()
    np.testing.assert_allclose(robot.action_scale, 0.25 * np.array([20, 30, 20, 30]) / kp)
    np.testing.assert_equal(robot.velocity_limit, [10.0, np.nan, 10.0, np.nan])


def test_explicit_kp_kd_and_another_frequency_are_used_as_given(tmp_path):
    knee = dataclasses.replace(KNEE, kp=50.0, kd=2.0)
    hip = dataclasses.replace(HIP, natural_frequency_hz=5.0, damping_ratio=1.0)
    robot = build_robot(describe(write_biped(tmp_path), actuators=(hip, knee)))
    np.testing.assert_allclose(robot.kp, [rule(0.01, 5, 1)[0], 50, rule(0.01, 5, 1)[0], 50])
    np.testing.assert_allclose(robot.kd, [rule(0.01, 5, 1)[1], 2, rule(0.01, 5, 1)[1], 2])


def test_the_mjcfs_own_armature_is_kept_and_sets_the_gains(tmp_path):
    robot = build_robot(describe(write_biped(tmp_path, hip_armature=' armature="0.05"')))
    assert robot.armature[0] == pytest.approx(0.05) and robot.armature[2] == pytest.approx(0.01)
    assert robot.kp[0] == pytest.approx(rule(0.05)[0])


def test_a_fixed_action_scale_applies_to_every_joint(tmp_path):
    robot = build_robot(describe(write_biped(tmp_path), action_scale=0.5))
    np.testing.assert_allclose(robot.action_scale, 0.5)


def test_the_mjcfs_actuators_on_described_joints_are_replaced(tmp_path):
    extra = '<actuator><motor name="old" joint="left_hip" gear="1"/></actuator>'
    robot = build_robot(describe(write_biped(tmp_path, extra=extra)))
    assert robot.model.nu == 4 and robot.model.actuator("left_hip").gainprm[0] == pytest.approx(robot.kp[0])


def test_a_floor_is_added_when_the_mjcf_has_none_and_its_own_is_kept(tmp_path):
    added = build_robot(describe(write_biped(tmp_path)))
    assert added.model.geom(added.floor_geom_id).name == "floor"
    own = '<geom name="ground" type="plane" size="5 5 0.1"/>'
    kept = build_robot(describe(write_biped(tmp_path, floor=own)))
    assert kept.model.geom(kept.floor_geom_id).name == "ground"
    assert (kept.model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE).sum() == 1


def test_the_home_pose_is_a_keyframe_the_actuators_hold(tmp_path):
    robot = build_robot(
        describe(write_biped(tmp_path), home=HomePose(base_height=0.5, joints={"left_knee": -0.3}))
    )
    model = robot.model
    key = model.key(robot.home_keyframe)
    assert robot.home_keyframe == "home" and robot.home_qpos[2] == 0.5
    np.testing.assert_allclose(robot.default_joint_pos, [0, -0.3, 0, 0])
    np.testing.assert_allclose(key.qpos, robot.home_qpos)
    np.testing.assert_allclose(key.ctrl, robot.default_joint_pos)
    np.testing.assert_allclose(robot.home_qpos[robot.qpos_adr], robot.default_joint_pos)


def test_a_home_keyframe_from_the_mjcf_is_used(tmp_path):
    extra = (
        f'<keyframe><key name="stand" qpos="0 0 {STANDING_HEIGHT + 0.02} 1 0 0 0 0.1 0 -0.1 0"/></keyframe>'
    )
    robot = build_robot(describe(write_biped(tmp_path, extra=extra), home=HomePose(keyframe="stand")))
    assert robot.home_keyframe == "stand"
    np.testing.assert_allclose(robot.default_joint_pos, [0.1, 0, -0.1, 0])
    np.testing.assert_allclose(robot.model.key("stand").ctrl, robot.default_joint_pos)


def test_feet_sites_geoms_and_bodies_resolve_to_ids_and_collision_geoms(tmp_path):
    mjcf = write_biped(tmp_path)
    by_site = build_robot(describe(mjcf))
    model = by_site.model
    assert by_site.foot_ids == (model.site("left_foot").id, model.site("right_foot").id)
    assert by_site.foot_body_ids == (model.body("left_shin").id, model.body("right_shin").id)
    names = [[model.geom(g).name for g in geoms] for geoms in by_site.foot_geom_ids]
    assert names == [["left_shin_geom", "left_foot_geom"], ["right_shin_geom", "right_foot_geom"]]
    spheres = build_robot(describe(mjcf, foot_geoms=(".*_foot_geom",)))
    assert [[model.geom(g).name for g in geoms] for geoms in spheres.foot_geom_ids] == [
        ["left_foot_geom"],
        ["right_foot_geom"],
    ]
    by_body = build_robot(describe(mjcf, feet=("left_shin", "right_shin"), foot_kind="body"))
    assert by_body.foot_ids == by_site.foot_body_ids
    by_geom = build_robot(describe(mjcf, feet=("left_foot_geom",), foot_kind="geom"))
    assert by_geom.foot_geom_ids == ((model.geom("left_foot_geom").id,),)


def test_feet_only_collisions_leave_the_feet_touching_the_floor_alone(tmp_path):
    robot = build_robot(describe(write_biped(tmp_path), collisions="feet_only", foot_geoms=(".*_foot_geom",)))
    model = robot.model
    for geom in range(model.ngeom):
        name = model.geom(geom).name
        pair = (model.geom_contype[geom], model.geom_conaffinity[geom])
        if name == "floor":
            assert pair == (1, 1)
        elif name.endswith("_foot_geom"):
            assert pair == (0, 1)  # meets the floor (contype 1), not another robot geom (contype 0)
        else:
            assert pair == (0, 0)


def test_no_self_collisions_keep_every_collision_geom_on_the_floor(tmp_path):
    model = build_robot(describe(write_biped(tmp_path), collisions="no_self")).model
    robot_geoms = [g for g in range(model.ngeom) if model.geom(g).name not in ("floor", "left_decor")]
    assert all(model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 1 for g in robot_geoms)
    assert model.geom_conaffinity[model.geom("left_decor").id] == 0  # a visual geom stays one


def test_terminating_bodies_resolve_by_pattern(tmp_path):
    robot = build_robot(describe(write_biped(tmp_path), terminate_on_contact=(".*_thigh", "base", "left_.*")))
    names = [robot.model.body(b).name for b in robot.terminate_body_ids]
    assert names == ["base", "left_thigh", "left_shin", "right_thigh"]  # each once, in the MJCF's order


# --- bad input: one line naming the field ---------------------------------------------------------------------


def test_a_joint_pattern_that_matches_nothing_names_the_group(tmp_path):
    bad = dataclasses.replace(KNEE, joints=(".*_ankle",))
    message = build_error(describe(write_biped(tmp_path), actuators=(HIP, bad)))
    assert "actuators[.*_ankle].joints" in message and "left_hip" in message  # what the MJCF has instead


def test_a_joint_in_two_groups_is_refused(tmp_path):
    both = dataclasses.replace(KNEE, joints=("left_.*",))
    assert "keep it in one group" in build_error(describe(write_biped(tmp_path), actuators=(HIP, both)))


def test_feet_that_are_not_in_the_mjcf_are_named(tmp_path):
    message = build_error(describe(write_biped(tmp_path), feet=("left_toe",)))
    assert message.startswith("feet: no site named 'left_toe'") and "left_foot" in message
    wrong_kind = build_error(describe(write_biped(tmp_path), foot_kind="body"))
    assert wrong_kind.startswith("feet: no body named 'left_foot'")


def test_foot_geoms_that_match_nothing_are_named(tmp_path):
    assert build_error(describe(write_biped(tmp_path), foot_geoms=("toe",))).startswith("foot_geoms: 'toe'")


def test_feet_only_collisions_need_foot_collision_geoms(tmp_path):
    description = describe(write_biped(tmp_path), collisions="feet_only", foot_geoms=("left_foot_geom",))
    assert build_error(description).startswith("feet: 'right_foot' has no collision geom")


def test_a_missing_mesh_file_is_named(tmp_path):
    mesh = '<mesh name="shell" file="shell.stl"/>'
    message = build_error(describe(write_biped(tmp_path, mesh=mesh)))
    assert message.startswith("mjcf: biped.xml names the file 'shell.stl'")


def test_a_home_pose_below_the_floor_says_how_deep(tmp_path):
    message = build_error(describe(write_biped(tmp_path), home=HomePose(base_height=STANDING_HEIGHT - 0.05)))
    assert (
        message.startswith("home: 'left_foot_geom' is 50.0 mm below the floor")
        and "home.base_height" in message
    )


def test_a_home_keyframe_or_joint_that_is_not_there_is_named(tmp_path):
    mjcf = write_biped(tmp_path)
    assert build_error(describe(mjcf, home=HomePose(keyframe="stand"))).startswith(
        "home.keyframe: no keyframe"
    )
    bad = HomePose(base_height=0.5, joints={"ankle": 0.1})
    assert build_error(describe(mjcf, home=bad)).startswith("home.joints['ankle']: 'ankle' matches no joint")


def test_a_base_body_that_is_missing_or_does_not_float_is_refused(tmp_path):
    mjcf = write_biped(tmp_path)
    assert build_error(describe(mjcf, base_body="pelvis")).startswith("base_body: no body named 'pelvis'")
    assert "has no free joint" in build_error(describe(mjcf, base_body="left_thigh"))


def test_the_frequency_rule_without_an_armature_is_refused(tmp_path):
    bare = dataclasses.replace(HIP, armature=None)
    assert build_error(describe(write_biped(tmp_path), actuators=(bare, KNEE))).startswith(
        "actuators[.*_hip].armature"
    )


def test_terminating_bodies_that_match_nothing_are_named(tmp_path):
    message = build_error(describe(write_biped(tmp_path), terminate_on_contact=("head",)))
    assert message.startswith("terminate_on_contact: 'head' matches no body")


def test_an_mjcf_that_is_missing_or_does_not_parse_is_named(tmp_path):
    assert build_error(describe(str(tmp_path / "none.xml"))).startswith("mjcf: no file")
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body></mujoco>")
    assert build_error(describe(str(broken))).startswith("mjcf: broken.xml does not parse")


def test_a_robot_not_fetched_yet_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(tmp_path))
    message = build_error(describe("g1.xml", fetched="unitree-g1"))
    assert message == "robot 'unitree-g1' is not fetched yet: run `uv run robots fetch unitree-g1`"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: dataclasses.replace(HIP, effort_limit=-1.0), "actuators[.*_hip].effort_limit"),
        (lambda: dataclasses.replace(HIP, kp=10.0), "give both kp and kd"),
        (lambda: dataclasses.replace(HIP, kp=10.0, kd=1.0, damping_ratio=1.0), "not both"),
        (lambda: dataclasses.replace(HIP, joints=("(",)), "actuators.joints"),
        (lambda: HomePose(keyframe="home", base_height=0.3), "home:"),
        (lambda: HomePose(base_height=0.3, joints={"knee": float("nan")}), "home.joints['knee']"),
        (lambda: describe("x.xml", collisions="some"), "collisions"),
        (lambda: describe("x.xml", foot_kind="toe"), "foot_kind"),
        (lambda: describe("x.xml", feet=()), "feet"),
        (lambda: describe("x.xml", feet="left_foot"), "feet"),
        (lambda: describe("x.xml", action_scale=0.0), "action_scale"),
        (lambda: describe("x.xml", reward_weights={"track vel": 1.0}), "reward_weights"),
        (lambda: describe("x.xml", reward_weights={"track_vel": "1"}), "reward_weights['track_vel']"),
    ],
)
def test_a_description_checks_its_own_fields(make, field):
    with pytest.raises(UsageError, match=None) as error:
        make()
    assert field in str(error.value) and "\n" not in str(error.value)


def test_reward_weights_are_names_to_numbers():
    description = describe("x.xml", reward_weights={"track_lin_vel": 1.0, "action_rate": -0.01})
    assert description.reward_weights == {"track_lin_vel": 1.0, "action_rate": -0.01}
