"""mjfleet's own quadruped and humanoid as `RobotDescription`s (mjfleet.robots.mjfleet_quadruped, _humanoid): the
model built from the description is the model compiled from the packaged MJCF alone, field for field, and the
velocity tasks built through the description step exactly as with that model. The facts the task reads from the
description are the parts the MJCF names (the feet's touch sensors and spheres, the trunk, the legs)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from task_envs import make_task_env

from mjfleet.assets import asset_path
from mjfleet.errors import UsageError
from mjfleet.robots import RobotDescription, build_robot
from mjfleet.robots.mjfleet_humanoid import MJFLEET_HUMANOID
from mjfleet.robots.mjfleet_quadruped import MJFLEET_QUADRUPED

ROBOTS = [(MJFLEET_QUADRUPED, "quadruped.xml"), (MJFLEET_HUMANOID, "humanoid.xml")]
LEGS = ("FR", "FL", "RR", "RL")


def _differences(a, b, prefix: str = "") -> list[str]:
    """Names of the array and scalar fields of two MjModels (or their opt / stat) that differ, NaN equal to NaN."""
    out = []
    for name in dir(a):
        if name.startswith("_"):
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            same = x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
        elif isinstance(x, (int, float)):
            same = x == y or (x != x and y != y)
        else:
            continue
        if not same:
            out.append(prefix + name)
    return out


def model_differences(a: mujoco.MjModel, b: mujoco.MjModel) -> list[str]:
    return _differences(a, b) + _differences(a.opt, b.opt, "opt.") + _differences(a.stat, b.stat, "stat.")


@pytest.mark.parametrize(("description", "asset"), ROBOTS, ids=["quadruped", "humanoid"])
def test_the_described_model_is_the_packaged_mjcfs_field_for_field(description, asset):
    built = build_robot(description)
    direct = mujoco.MjSpec.from_file(str(asset_path(asset))).compile()
    assert model_differences(built.model, direct) == []
    # what the task compiles: the built spec again (rough terrain edits it before this)
    assert model_differences(built.spec.compile(), direct) == []


def test_the_differences_are_seen():
    """The comparison above can fail: one changed gain or option shows by name."""
    direct = mujoco.MjSpec.from_file(str(asset_path("quadruped.xml"))).compile()
    spec = mujoco.MjSpec.from_file(str(asset_path("quadruped.xml")))
    spec.actuators[0].gainprm[0] = 36.0
    spec.option.impratio = 2.0
    assert model_differences(spec.compile(), direct) == ["actuator_gainprm", "opt.impratio"]


@pytest.mark.parametrize(("description", "asset"), ROBOTS, ids=["quadruped", "humanoid"])
def test_the_mjcfs_own_servos_give_the_joint_facts(description, asset):
    built = build_robot(description)
    m = built.model
    assert built.joint_names == tuple(m.joint(m.actuator_trnid[i, 0]).name for i in range(m.nu))
    np.testing.assert_array_equal(built.kp, m.actuator_gainprm[:, 0])
    np.testing.assert_array_equal(built.kd, -m.actuator_biasprm[:, 2])
    np.testing.assert_array_equal(built.effort_limit, m.actuator_forcerange[:, 1])
    np.testing.assert_array_equal(built.default_joint_pos, m.key("home").qpos[7:])
    assert np.isnan(built.velocity_limit).all()


def test_the_quadruped_task_reads_the_parts_its_mjcf_names():
    env = make_task_env("Quadruped-Velocity-Flat", 2)
    m = env.mj_model
    assert env.joint_names == tuple(f"{leg}_{p}_joint" for leg in LEGS for p in ("hip", "thigh", "calf"))
    assert env.foot_geoms == [m.geom(f"{leg}_foot").id for leg in LEGS]
    touch = [int(m.sensor_adr[m.sensor(f"{leg}_foot_touch").id]) for leg in LEGS]
    assert env._touch_adr.tolist() == touch
    assert env.base_geoms.tolist() == [m.geom("trunk").id] and env.trunk_body == m.body("trunk").id
    legs = {m.geom(f"{leg}_{part}").id for leg in LEGS for part in ("thigh", "calf")}
    assert set(env.leg_geoms.tolist()) == legs and len(env.leg_geoms) == len(legs)


def test_the_humanoid_task_reads_the_parts_its_mjcf_names():
    env = make_task_env("Humanoid-Velocity-Flat", 2)
    m = env.mj_model
    assert env.foot_geoms == [m.geom("left_foot").id, m.geom("right_foot").id]
    assert env._foot_bodies.tolist() == [m.body(f"{s}_ankle_roll_link").id for s in ("left", "right")]
    assert set(env.base_geoms.tolist()) == {m.geom(g).id for g in ("pelvis", "torso", "head")}
    legs = {m.geom(f"{s}_{p}").id for s in ("left", "right") for p in ("thigh", "shin", "hand")}
    assert set(env.leg_geoms.tolist()) == legs and len(env.leg_geoms) == len(legs)
    assert env.trunk_body == m.body("torso_link").id  # the task's choice: the torso carries the added mass
    # the sole lies 0.032 m below the ankle-roll axis (humanoid.xml, the foot class)
    assert env.sole_offset == pytest.approx(0.032, abs=1e-3)


@pytest.mark.parametrize("task", ["Quadruped-Velocity-Flat", "Quadruped-Velocity-Rough"])
def test_the_task_steps_as_with_the_model_compiled_from_the_mjcf_alone(task, monkeypatch):
    """Two environments, seeded alike: one built through the description, one whose model is compiled straight
    from quadruped.xml (with the same terrain); their observations, rewards and dones agree bit for bit."""
    from mjfleet.tasks.locomotion.env import LocomotionEnv

    def rollout():
        env = make_task_env(task, 2)
        generator = torch.Generator().manual_seed(1)
        out = []
        for _ in range(8):
            obs, rewards, dones, _ = env.step(torch.randn(2, env.num_actions, generator=generator))
            out += [obs["policy"].clone(), obs["critic"].clone(), rewards.clone(), dones.clone()]
        return env, out

    described_env, described = rollout()
    described_model = described_env.mj_model

    build = LocomotionEnv.build_model

    def from_the_mjcf(self):
        model = build(self)  # the facts and the terrain, as the description gives them
        spec = mujoco.MjSpec.from_file(str(asset_path("quadruped.xml")))
        if self.terrain is not None:
            self.terrain.add_to_spec(spec)
        direct = spec.compile()
        assert model_differences(model, direct) == []
        return direct

    monkeypatch.setattr(LocomotionEnv, "build_model", from_the_mjcf)
    direct_env, direct = rollout()
    assert direct_env.mj_model is not described_model
    for a, b in zip(described, direct, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_described_mjcf_without_actuators_of_its_own_needs_actuator_groups(tmp_path):
    path = tmp_path / "bare.xml"
    path.write_text(
        '<mujoco><worldbody><body name="base" pos="0 0 0.2"><freejoint/><geom size="0.1"/>'
        '<site name="foot"/></body></worldbody></mujoco>'
    )
    description = RobotDescription(
        name="bare",
        mjcf=str(path),
        actuators=(),
        home=MJFLEET_QUADRUPED.home,
        base_body="base",
        feet=("foot",),
    )
    with pytest.raises(UsageError, match="bare.xml has no actuators of its own: describe them"):
        build_robot(description)


def test_own_actuators_that_are_not_position_servos_are_refused(tmp_path):
    path = tmp_path / "motor.xml"
    path.write_text(
        '<mujoco><worldbody><body name="base" pos="0 0 0.2"><freejoint/><geom size="0.1"/><site name="foot"/>'
        '<body><joint name="j" axis="0 1 0"/><geom size="0.05"/></body></body></worldbody>'
        '<actuator><motor name="m" joint="j"/></actuator></mujoco>'
    )
    description = RobotDescription(
        name="motor",
        mjcf=str(path),
        actuators=(),
        home=type(MJFLEET_QUADRUPED.home)(base_height=0.2),
        base_body="base",
        feet=("foot",),
    )
    with pytest.raises(UsageError, match="actuator 'm' is no position servo on a joint") as error:
        build_robot(description)
    assert "\n" not in str(error.value)
