"""A `RobotDescription` made into a MuJoCo model: actuators, armature, floor, collisions and home pose applied,
every name checked against the MJCF, and the facts a task needs resolved per actuated joint."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import mujoco
import numpy as np

from mjfleet.errors import UsageError, first_line
from mjfleet.robots.cache import fetched_dir, is_fetched
from mjfleet.robots.description import ACTION_SCALE_FACTOR, RobotDescription
from mjfleet.robots.match import (
    assign,
    check_files,
    collision_geoms,
    find_feet,
    find_floor,
    free_joint_of,
    home_qpos,
    terminating_bodies,
)

HOME_KEYFRAME = "home"
BELOW_FLOOR_TOLERANCE_M = 0.002
"""How far a collision geom may reach into the floor at the home pose (contact softness lets feet sink ~1 mm)."""


@dataclasses.dataclass(frozen=True)
class BuiltRobot:
    """The compiled model and what a task reads per actuated joint, in actuator order (the MJCF's joint order)."""

    description: RobotDescription
    spec: mujoco.MjSpec
    model: mujoco.MjModel
    mjcf: pathlib.Path
    joint_names: tuple[str, ...]
    qpos_adr: np.ndarray
    dof_adr: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    armature: np.ndarray
    effort_limit: np.ndarray
    velocity_limit: np.ndarray
    """NaN where the description gives none."""
    action_scale: np.ndarray
    default_joint_pos: np.ndarray
    """The home pose's joint positions: the actuators' targets for a zero action."""
    home_qpos: np.ndarray
    home_keyframe: str
    base_body_id: int
    foot_kind: str
    foot_ids: tuple[int, ...]
    """Ids of the feet as `description.foot_kind` says (site, geom or body ids)."""
    foot_body_ids: tuple[int, ...]
    foot_geom_ids: tuple[tuple[int, ...], ...]
    """Each foot's collision geoms."""
    terminate_body_ids: tuple[int, ...]
    floor_geom_id: int


def mjcf_path(description: RobotDescription) -> pathlib.Path:
    """The description's MJCF file; a robot not fetched yet, or a file that is not there, is a UsageError."""
    if description.fetched is not None:
        if not is_fetched(description.fetched):
            raise UsageError(
                f"robot {description.fetched!r} is not fetched yet: run `uv run robots fetch {description.fetched}`"
            )
        path = fetched_dir(description.fetched) / description.mjcf
    else:
        path = pathlib.Path(description.mjcf).expanduser()
    if not path.is_file():
        fix = (
            f"re-run `uv run robots fetch {description.fetched} --force`"
            if description.fetched
            else "fix the path"
        )
        raise UsageError(f"mjcf: no file {path}: {fix}")
    return path


def build_robot(description: RobotDescription) -> BuiltRobot:
    """Read the description's MJCF, apply the description, compile, and check the home pose stands on the floor."""
    path = mjcf_path(description)
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as exc:  # mujoco raises ValueError with the parser's message
        raise UsageError(f"mjcf: {path.name} does not parse: {first_line(exc)}") from None
    check_files(spec, path, description.fetched)
    floor = find_floor(spec)
    robot_collisions = collision_geoms(spec)
    base = spec.body(description.base_body)
    if base is None:
        raise UsageError(f"base_body: no body named {description.base_body!r} in {path.name}")
    free_joint_of(base, path.name)
    feet, foot_geoms = find_feet(spec, description, robot_collisions, path.name)
    if description.actuators:
        joint_groups = assign(spec, description, path.name)
        actuators = _add_actuators(spec, joint_groups)
        names = tuple(joint_groups)
    else:  # the MJCF's own servos, as they are
        joint_groups, actuators = {}, own_servos(spec, path.name)
        names = tuple(a.target for a in actuators)
    if floor is None:
        floor = spec.worldbody.add_geom(
            name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], contype=1, conaffinity=1
        )
    _apply_collisions(spec, description, robot_collisions, [g for geoms in foot_geoms for g in geoms])
    _apply_contact_settings(spec, description, robot_collisions, path.name)
    terminate = terminating_bodies(spec, description, path.name)

    model = _compile(spec, path)
    qpos, keyframe = home_qpos(model, description, path.name)
    joint_ids = [model.joint(n).id for n in names]
    qpos_adr = model.jnt_qposadr[joint_ids].copy()
    default_pos = qpos[qpos_adr].copy()
    if keyframe is None:
        if spec.key(HOME_KEYFRAME) is not None:
            raise UsageError(
                f"home: {path.name} has a keyframe named {HOME_KEYFRAME!r}: use HomePose(keyframe={HOME_KEYFRAME!r})"
            )
        keyframe = HOME_KEYFRAME
        spec.add_key(name=keyframe, qpos=qpos.tolist(), ctrl=default_pos.tolist())
    else:
        spec.key(keyframe).ctrl = default_pos.tolist()
    model = _compile(spec, path)
    floor_id = floor.id
    _check_above_floor(model, qpos, floor_id, [g.id for g in robot_collisions])

    ids = [a.id for a in actuators]
    if not model.actuator_forcelimited[ids].all():
        raise UsageError(f"actuators: {path.name}'s own actuators need a forcerange (the effort limit)")
    kp = model.actuator_gainprm[ids, 0].copy()
    effort = model.actuator_forcerange[ids, 1].copy()
    # NaN where no group gives one (or the MJCF's own servos drive the joint)
    velocity = np.array(
        [getattr(joint_groups.get(n), "velocity_limit", None) or np.nan for n in names], float
    )
    scale = np.full(len(names), description.action_scale) if description.action_scale else None
    return BuiltRobot(
        description=description,
        spec=spec,
        model=model,
        mjcf=path,
        joint_names=names,
        qpos_adr=qpos_adr,
        dof_adr=model.jnt_dofadr[joint_ids].copy(),
        kp=kp,
        kd=-model.actuator_biasprm[ids, 2].copy(),
        armature=model.dof_armature[model.jnt_dofadr[joint_ids]].copy(),
        effort_limit=effort,
        velocity_limit=velocity,
        action_scale=scale if scale is not None else ACTION_SCALE_FACTOR * effort / kp,
        default_joint_pos=default_pos,
        home_qpos=qpos,
        home_keyframe=keyframe,
        base_body_id=base.id,
        foot_kind=description.foot_kind,
        foot_ids=tuple(f.id for f in feet),
        foot_body_ids=tuple((f if description.foot_kind == "body" else f.parent).id for f in feet),
        foot_geom_ids=tuple(tuple(g.id for g in geoms) for geoms in foot_geoms),
        terminate_body_ids=tuple(model.body(name).id for name in terminate),
        floor_geom_id=floor_id,
    )


def _add_actuators(spec: mujoco.MjSpec, joint_groups: dict) -> list:
    """One position actuator per described joint (replacing any the MJCF has on it), in the MJCF's joint order."""
    added = []
    for actuator in list(spec.actuators):
        if actuator.target in joint_groups:
            spec.delete(actuator)
    for name, group in joint_groups.items():
        joint = spec.joint(name)
        if joint.armature <= 0:  # the MJCF's own armature, where it has one, is kept
            if group.armature is None and group.kp is None:
                raise UsageError(
                    f"actuators[{', '.join(group.joints)}].armature: joint {name!r} has none in the MJCF and "
                    "the natural-frequency rule needs it: give the reflected inertia (or kp and kd)"
                )
            joint.armature = group.armature or 0.0
        kp, kd = group.gains(joint.armature)
        actuator = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        actuator.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        actuator.biastype = mujoco.mjtBias.mjBIAS_AFFINE
        actuator.gainprm[0] = kp
        actuator.biasprm[1] = -kp
        actuator.biasprm[2] = -kd
        # targets beyond the joint range must still push (a clamped target at a limit gives no force)
        actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
        actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        actuator.forcerange = [-group.effort_limit, group.effort_limit]
        added.append(actuator)
    return added


def own_servos(spec: mujoco.MjSpec, mjcf: str) -> list:
    """The MJCF's own actuators (a description with no actuator groups): each a position servo (fixed gain, affine
    bias: kp (target - q) - kd qdot) on a joint, in the MJCF's joint order."""
    actuators = list(spec.actuators)
    if not actuators:
        raise UsageError(f"actuators: {mjcf} has no actuators of its own: describe them with ActuatorGroup")
    order = [j.name for j in spec.joints if j.type != mujoco.mjtJoint.mjJNT_FREE]
    for actuator in actuators:
        servo = (
            actuator.trntype == mujoco.mjtTrn.mjTRN_JOINT
            and actuator.target in order
            and actuator.gaintype == mujoco.mjtGain.mjGAIN_FIXED
            and actuator.biastype == mujoco.mjtBias.mjBIAS_AFFINE
            and actuator.biasprm[1] == -actuator.gainprm[0]
        )
        if not servo:
            raise UsageError(
                f"actuators: {mjcf}'s actuator {actuator.name or actuator.id!r} is no position servo on a joint: "
                "describe the robot's actuators with ActuatorGroup instead"
            )
    targets = [a.target for a in actuators]
    if targets != sorted(set(targets), key=order.index):  # one each, in order
        raise UsageError(
            f"actuators: {mjcf}'s actuators must drive its joints once each, in the MJCF's joint order"
        )
    return actuators


def _apply_collisions(spec: mujoco.MjSpec, description: RobotDescription, robot: list, feet: list) -> None:
    """no_self: every collision geom meets the floor only (contype 0, conaffinity 1: the floor's contype 1 pairs
    with it, no two robot geoms pair); feet_only: the same for the feet, the others collide with nothing."""
    if description.collisions == "all":
        return
    for geom in robot:
        keep = description.collisions == "no_self" or any(geom is f for f in feet)
        geom.contype, geom.conaffinity = 0, int(keep)


def _apply_contact_settings(
    spec: mujoco.MjSpec, description: RobotDescription, robot: list, mjcf: str
) -> None:
    """`description.contacts`: per setting (condim, friction, priority, solref, solimp), the value of the first
    pattern that matches a collision geom's whole name; geoms no pattern matches keep the MJCF's. A pattern that
    matches no collision geom is an error (a typo would silently change nothing)."""
    names = [g.name for g in robot]
    for setting, table in description.contacts.items():
        for pattern in table:
            if not any(re.fullmatch(pattern, n) for n in names if n):
                raise UsageError(
                    f"contacts[{setting!r}]: {pattern!r} matches no collision geom of {mjcf} "
                    f"(its collision geoms: {', '.join(n for n in names if n) or 'none named'})"
                )
        for geom in robot:
            value = next((v for p, v in table.items() if geom.name and re.fullmatch(p, geom.name)), None)
            if value is None:
                continue
            if setting in ("condim", "priority"):
                setattr(geom, setting, int(value))
            else:
                current = list(getattr(geom, setting))
                given = [float(v) for v in (value if isinstance(value, (tuple, list)) else (value,))]
                setattr(geom, setting, given + current[len(given) :])  # friction (1.0,): sliding only


def _compile(spec: mujoco.MjSpec, path: pathlib.Path) -> mujoco.MjModel:
    try:
        return spec.compile()
    except Exception as exc:
        raise UsageError(
            f"mjcf: {path.name} does not compile with the description: {first_line(exc)}"
        ) from None


def _check_above_floor(model: mujoco.MjModel, qpos: np.ndarray, floor: int, geoms: list[int]) -> None:
    """The home pose's collision geoms (as the MJCF has them, whatever `collisions` turned off) clear the floor."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    lowest, depth = None, 0.0
    for geom in geoms:
        distance = mujoco.mj_geomDistance(model, data, floor, geom, 1.0, None)
        if distance < depth:
            lowest, depth = geom, distance
    if lowest is not None and depth < -BELOW_FLOOR_TOLERANCE_M:
        name = model.geom(lowest).name or f"geom {lowest}"
        raise UsageError(
            f"home: {name!r} is {-depth * 1000:.1f} mm below the floor at the home pose: raise home.base_height "
            "(or fix the keyframe)"
        )
