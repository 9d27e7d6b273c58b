"""A legged robot as a page of facts: its MJCF, its actuators grouped by joint pattern, its home pose, its feet.

`RobotDescription` is plain data, checked on construction for what can be checked without the MJCF (numbers,
field combinations); `mjfleet.robots.build.build_robot` checks the rest against the model. Every failure is a
`UsageError` whose one line names the field and the fix.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Literal

from mjfleet.errors import UsageError

NATURAL_FREQUENCY_HZ = 10.0
"""Default closed-loop natural frequency of a joint's PD loop (mjlab 1.6's Unitree constants use 10 Hz)."""
DAMPING_RATIO = 2.0
"""Default damping ratio of that loop (mjlab 1.6's Unitree constants use 2.0: overdamped)."""
ACTION_SCALE_FACTOR = 0.25
"""Action scale = 0.25 x effort limit / kp per joint (mjlab 1.6's Unitree constants' GO1/G1_ACTION_SCALE)."""

Collisions = Literal["all", "no_self", "feet_only"]
CONTACT_SETTINGS = ("condim", "friction", "priority", "solref", "solimp")
FootKind = Literal["site", "geom", "body"]


def _positive(field: str, value: float | None, fix: str = "give a positive number") -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise UsageError(f"{field} = {value!r}: {fix}")


def _patterns(field: str, patterns: tuple[str, ...]) -> None:
    if isinstance(patterns, str) or not patterns:
        raise UsageError(f"{field} = {patterns!r}: give a tuple of joint names or regular expressions")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"{field}: {pattern!r} is not a regular expression ({exc})") from None


def _options(field: str, options: Mapping[str, object]) -> None:
    import mujoco

    known = {name for name in dir(mujoco.MjOption) if not name.startswith("_")}
    for name, value in options.items():
        if name not in known:
            raise UsageError(
                f"{field}: {name!r} is no MuJoCo option (MjOption: timestep, cone, impratio, ...)"
            )
        try:  # mujoco's enums (mjtCone, ...) are not ints, but convert to one
            number = value if isinstance(value, (int, float)) else int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(value, bool) or not math.isfinite(number):
            raise UsageError(f"{field}[{name!r}] = {value!r}: give a number or a mujoco enum value")


@dataclasses.dataclass(frozen=True)
class ActuatorGroup:
    """Joints driven by one kind of motor through one kind of gearbox, as MuJoCo position actuators.

    Gains come from either `kp` and `kd`, or the PD loop's natural frequency and damping ratio with the joint's
    armature: kp = armature x omega^2, kd = 2 x zeta x armature x omega, omega = 2 pi f (the default, 10 Hz and
    2.0, when neither is given)."""

    joints: tuple[str, ...]
    """Joint names or regular expressions, each matched against the whole joint name; each must match one."""
    effort_limit: float
    """Peak torque (N m, or N for a slide joint): the actuator's force range is +-effort_limit."""
    armature: float | None = None
    """Reflected rotor inertia (kg m^2): rotor inertia x gear ratio^2. Set on the joint where the MJCF has none;
    None keeps the MJCF's (which must then be positive for the frequency rule)."""
    velocity_limit: float | None = None
    """No-load joint speed (rad/s): a fact for the task (not a MuJoCo limit; MuJoCo has none)."""
    kp: float | None = None
    kd: float | None = None
    natural_frequency_hz: float | None = None
    damping_ratio: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "joints", tuple(self.joints) if not isinstance(self.joints, str) else self.joints
        )
        _patterns("actuators.joints", self.joints)
        name = f"actuators[{', '.join(self.joints)}]"
        _positive(f"{name}.effort_limit", self.effort_limit)
        for field in ("armature", "velocity_limit", "kp", "natural_frequency_hz", "damping_ratio"):
            _positive(f"{name}.{field}", getattr(self, field))
        if self.kd is not None and (not math.isfinite(self.kd) or self.kd < 0):
            raise UsageError(f"{name}.kd = {self.kd!r}: give a number >= 0")
        gains = self.kp is not None or self.kd is not None
        rule = self.natural_frequency_hz is not None or self.damping_ratio is not None
        if gains and rule:
            raise UsageError(f"{name}: give kp and kd, or natural_frequency_hz and damping_ratio, not both")
        if gains and (self.kp is None or self.kd is None):
            raise UsageError(f"{name}: give both kp and kd (or neither, for the natural-frequency rule)")

    def gains(self, armature: float) -> tuple[float, float]:
        """(kp, kd) for a joint of this group whose armature is `armature`."""
        if self.kp is not None and self.kd is not None:
            return self.kp, self.kd
        omega = 2 * math.pi * (self.natural_frequency_hz or NATURAL_FREQUENCY_HZ)
        zeta = self.damping_ratio or DAMPING_RATIO
        return armature * omega**2, 2 * zeta * armature * omega


@dataclasses.dataclass(frozen=True)
class HomePose:
    """The standing pose episodes start from: an MJCF keyframe, or a base height and joint values by pattern.

    Joints no pattern matches keep the MJCF's reference position (qpos0); the base keeps its MJCF x, y and
    orientation."""

    keyframe: str | None = None
    base_height: float | None = None
    """Height of the base body's origin above the floor (m)."""
    joints: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Joint name or regular expression -> position (rad, or m)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "joints", dict(self.joints))
        if (self.keyframe is None) == (self.base_height is None):
            raise UsageError(
                "home: give keyframe='<name in the MJCF>', or base_height (and joints), not both"
            )
        if self.keyframe is not None and self.joints:
            raise UsageError("home.joints: a keyframe sets every joint; give joints with base_height instead")
        if self.base_height is not None:
            _positive("home.base_height", self.base_height, "give the base's height above the floor in m")
        _patterns("home.joints", tuple(self.joints) or ("",))
        for pattern, value in self.joints.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UsageError(f"home.joints[{pattern!r}] = {value!r}: give a finite number")


@dataclasses.dataclass(frozen=True)
class RobotDescription:
    """Everything mjfleet needs to know about a legged robot beyond its MJCF."""

    name: str
    mjcf: str
    """The MJCF file: relative to the fetched folder of `fetched` (see `robots fetch`), else a path."""
    actuators: tuple[ActuatorGroup, ...]
    """The groups build_robot drives with position actuators of its own (replacing the MJCF's on their joints);
    empty: the MJCF's own actuators drive the robot as they are (position servos: gains and force range read from
    the MJCF), as for mjfleet's quadruped and humanoid."""
    home: HomePose
    base_body: str
    """The floating base: a body with a free joint (the velocity task tracks its velocity)."""
    feet: tuple[str, ...]
    foot_kind: FootKind = "site"
    """What `feet` names: sites, geoms or bodies."""
    foot_geoms: tuple[str, ...] = ()
    """The feet's collision geoms (names or regular expressions), each foot's being those on its body; empty:
    every collision geom of each foot's body (a site's body, for sites)."""
    fetched: str | None = None
    """The `robots fetch` name whose folder `mjcf` is in; None: `mjcf` is a path of its own."""
    terminate_on_contact: tuple[str, ...] = ()
    """Bodies (names or regular expressions) whose contact with the ground ends an episode."""
    collisions: Collisions = "all"
    """all: the MJCF's collision geoms as they are, self-collisions included; no_self: every collision geom
    meets the floor but not the robot; feet_only: only the feet's geoms collide, with the floor alone."""
    action_scale: float | None = None
    """One scale for every joint's action; None: ACTION_SCALE_FACTOR x effort limit / kp per joint."""
    imu_site: str | None = None
    """The site of the IMU on the base body, whose velocities the observations give (mjlab's imu_lin_vel and
    imu_ang_vel sensors, there): the base's velocities moved to the site and turned into its frame. None: the
    base body's origin."""
    recipe: str | None = None
    """The velocity task's reward recipe this robot trains with, by name (tasks/locomotion/described_config.py:
    RECIPES: "legged", "go1", "g1"); None: "legged", the quadruped's terms, which need no body or joint names."""
    reward_weights: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Recipe entry name -> weight (per second), over the recipe's own; a name the recipe lacks adds the reward term
    library's term of that name (a user's own `@reward_term` function, say)."""
    reward_params: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)
    events: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """The velocity task's randomisation settings for this robot, by EventConfig field name, over the task's (e.g.
    {"com_body": "torso_link"}: the body whose centre of mass is offset; {"added_trunk_mass": (-0.2, 0.4)})."""
    """Recipe entry name -> {parameter: value}, over the recipe's own (e.g. {"upright": {"body": "torso"}})."""
    contacts: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)
    """Contact settings of the collision geoms by name pattern: {"condim": {pattern: n}, "friction": {pattern:
    (sliding, torsional, rolling) or (sliding,)}, "priority": {...}, "solref": {...}, "solimp": {...}}; per
    setting the first pattern that matches a geom's whole name wins, geoms no pattern matches keep the MJCF's
    (mjlab's CollisionCfg: e.g. the feet condim 3, every other geom condim 1)."""
    physics: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """MuJoCo <option> settings over the task's own (tasks/locomotion/described.py: PHYSICS), by MjOption field
    name, e.g. {"cone": mujoco.mjtCone.mjCONE_ELLIPTIC, "impratio": 10.0}: what mjlab sets per robot task."""

    def __post_init__(self) -> None:
        for field in ("actuators", "feet", "foot_geoms", "terminate_on_contact"):
            value = getattr(self, field)
            if isinstance(value, str):
                raise UsageError(f"{field} = {value!r}: give a tuple, e.g. ({value!r},)")
            object.__setattr__(self, field, tuple(value))
        object.__setattr__(self, "reward_weights", dict(self.reward_weights))
        object.__setattr__(self, "reward_params", {k: dict(v) for k, v in dict(self.reward_params).items()})
        object.__setattr__(self, "events", dict(self.events))
        object.__setattr__(self, "contacts", {k: dict(v) for k, v in dict(self.contacts).items()})
        for setting, table in self.contacts.items():
            if setting not in CONTACT_SETTINGS:
                raise UsageError(
                    f"contacts: {setting!r} is no contact setting (give {', '.join(CONTACT_SETTINGS)})"
                )
            _patterns(f"contacts[{setting!r}]", tuple(table) or ("",))
        object.__setattr__(self, "physics", dict(self.physics))
        _options("physics", self.physics)
        if not all(isinstance(g, ActuatorGroup) for g in self.actuators):
            raise UsageError("actuators: give a tuple of ActuatorGroup (empty: the MJCF's own actuators)")
        if not isinstance(self.home, HomePose):
            raise UsageError("home: give a HomePose(keyframe=...) or HomePose(base_height=..., joints=...)")
        if not self.feet:
            raise UsageError("feet: name at least one foot (site, geom or body, as foot_kind says)")
        if self.foot_kind not in ("site", "geom", "body"):
            raise UsageError(f"foot_kind = {self.foot_kind!r}: give 'site', 'geom' or 'body'")
        if self.collisions not in ("all", "no_self", "feet_only"):
            raise UsageError(f"collisions = {self.collisions!r}: give 'all', 'no_self' or 'feet_only'")
        _patterns("foot_geoms", self.foot_geoms or ("",))
        _patterns("terminate_on_contact", self.terminate_on_contact or ("",))
        _positive("action_scale", self.action_scale)
        for term, weight in self.reward_weights.items():
            if not isinstance(term, str) or not term.isidentifier():
                raise UsageError(f"reward_weights: {term!r} is not a term name (a Python identifier)")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise UsageError(f"reward_weights[{term!r}] = {weight!r}: give a finite number")
