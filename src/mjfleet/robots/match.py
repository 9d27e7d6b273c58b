"""A description's names and patterns found in an MJCF: each that finds nothing is a UsageError naming the field,
with what the MJCF has instead."""

from __future__ import annotations

import pathlib
import re

import mujoco
import numpy as np

from mjfleet.errors import UsageError
from mjfleet.robots.description import ActuatorGroup, RobotDescription

FREE = mujoco.mjtJoint.mjJNT_FREE


def _listing(names: list[str], kind: str) -> str:
    shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
    return f"its {kind}s: {shown}" if names else f"it has no {kind}s"


def matching(pattern: str, names: list[str], field: str, kind: str, mjcf: str) -> list[str]:
    """The names `pattern` matches in full (a plain name matches itself), in the MJCF's order; none: UsageError."""
    found = [name for name in names if re.fullmatch(pattern, name)]
    if not found:
        raise UsageError(f"{field}: {pattern!r} matches no {kind} in {mjcf} ({_listing(names, kind)})")
    return found


def _joint_names(spec: mujoco.MjSpec) -> list[str]:
    return [j.name for j in spec.joints if j.type != FREE and j.name]


def assign(spec: mujoco.MjSpec, description: RobotDescription, mjcf: str) -> dict[str, ActuatorGroup]:
    """Actuated joint -> its group, in the MJCF's joint order; a joint two groups claim is a UsageError."""
    names = _joint_names(spec)
    owner: dict[str, ActuatorGroup] = {}
    for group in description.actuators:
        field = f"actuators[{', '.join(group.joints)}].joints"
        for pattern in group.joints:
            for name in matching(pattern, names, field, "joint", mjcf):
                if owner.get(name, group) is not group:
                    other = ", ".join(owner[name].joints)
                    raise UsageError(
                        f"{field}: joint {name!r} is also in actuators[{other}]: keep it in one group"
                    )
                owner[name] = group
    return {name: owner[name] for name in names if name in owner}


def check_files(spec: mujoco.MjSpec, path: pathlib.Path, fetched: str | None) -> None:
    """Every mesh and texture file the MJCF names is there (a half-copied robot fails here, by name)."""
    fix = (
        f"re-run `uv run robots fetch {fetched} --force`" if fetched else "put the file there or fix the MJCF"
    )
    for items, folder in ((spec.meshes, spec.meshdir), (spec.textures, spec.texturedir)):
        for item in items:
            if not item.file:
                continue
            base = pathlib.Path(folder) if pathlib.Path(folder).is_absolute() else path.parent / folder
            if not (base / item.file).is_file():
                raise UsageError(
                    f"mjcf: {path.name} names the file {item.file!r}, missing from {base}: {fix}"
                )


def find_floor(spec: mujoco.MjSpec):
    """The MJCF's own floor (a plane on the world body), or None."""
    for geom in spec.worldbody.geoms:
        if geom.type == mujoco.mjtGeom.mjGEOM_PLANE:
            return geom
    return None


def collision_geoms(spec: mujoco.MjSpec) -> list:
    """The robot's geoms that collide as the MJCF has them (contype or conaffinity set): not the world's."""
    return [g for g in spec.geoms if g.parent.name != "world" and (g.contype or g.conaffinity)]


def terminating_bodies(spec: mujoco.MjSpec, description: RobotDescription, mjcf: str) -> list[str]:
    """The bodies `terminate_on_contact`'s patterns name, each once, in the MJCF's order."""
    names = [b.name for b in spec.bodies if b.name]
    chosen = {
        n
        for p in description.terminate_on_contact
        for n in matching(p, names, "terminate_on_contact", "body", mjcf)
    }
    return [name for name in names if name in chosen]


def free_joint_of(base, mjcf: str) -> None:
    if not any(j.type == FREE for j in base.joints):
        raise UsageError(
            f"base_body: {base.name!r} has no free joint in {mjcf}: the base of a legged robot floats "
            "(give the body that holds <freejoint/>)"
        )


def find_feet(spec: mujoco.MjSpec, description: RobotDescription, collisions: list, mjcf: str):
    """(the feet's sites, geoms or bodies; each foot's collision geoms, taken from `collisions`)."""
    kind = description.foot_kind
    lookup = {"site": spec.site, "geom": spec.geom, "body": spec.body}[kind]
    everything = {"site": spec.sites, "geom": spec.geoms, "body": spec.bodies}[kind]
    if description.foot_geoms:
        names = [g.name for g in collisions if g.name]
        chosen = {
            n
            for p in description.foot_geoms
            for n in matching(p, names, "foot_geoms", "collision geom", mjcf)
        }
        collisions = [g for g in collisions if g.name in chosen]
    feet, geoms = [], []
    for name in description.feet:
        element = lookup(name)
        if element is None:
            names = [e.name for e in everything if e.name]
            raise UsageError(
                f"feet: no {kind} named {name!r} in {mjcf} ({_listing(names, kind)}); foot_kind says what feet name"
            )
        if kind == "geom":
            own = [g for g in collisions if g.name == name]
        else:
            body = name if kind == "body" else element.parent.name
            own = [g for g in collisions if g.parent.name == body]
        if description.collisions == "feet_only" and not own:
            raise UsageError(
                f"feet: {name!r} has no collision geom in {mjcf}, and collisions='feet_only' would let the robot "
                "fall through the floor: name the foot geoms (foot_kind='geom') or use collisions='no_self'"
            )
        feet.append(element)
        geoms.append(own)
    return feet, geoms


def home_qpos(
    model: mujoco.MjModel, description: RobotDescription, mjcf: str
) -> tuple[np.ndarray, str | None]:
    """(the home pose's qpos, the MJCF keyframe it came from or None)."""
    home = description.home
    keys = [model.key(i).name for i in range(model.nkey)]
    if home.keyframe is not None:
        if home.keyframe not in keys:
            raise UsageError(
                f"home.keyframe: no keyframe named {home.keyframe!r} in {mjcf} ({_listing(keys, 'keyframe')})"
            )
        return model.key_qpos[keys.index(home.keyframe)].copy(), home.keyframe
    qpos = model.qpos0.copy()
    base = model.body(description.base_body)
    free = next(
        j for j in range(base.jntadr[0], base.jntadr[0] + base.jntnum[0]) if model.jnt_type[j] == FREE
    )
    qpos[model.jnt_qposadr[free] + 2] = home.base_height
    names = [
        model.joint(j).name for j in range(model.njnt) if model.jnt_type[j] != FREE and model.joint(j).name
    ]
    set_by: dict[str, str] = {}
    for pattern, value in home.joints.items():
        for name in matching(pattern, names, f"home.joints[{pattern!r}]", "joint", mjcf):
            if name in set_by:
                raise UsageError(f"home.joints[{pattern!r}]: joint {name!r} is also set by {set_by[name]!r}")
            set_by[name] = pattern
            qpos[model.joint(name).qposadr[0]] = value
    return qpos, None
