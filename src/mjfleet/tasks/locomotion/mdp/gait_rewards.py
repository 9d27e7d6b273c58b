"""The reward terms of mjlab 1.6's velocity recipe that mjfleet's quadruped recipe has no counterpart for, in the
reward term library (mjfleet.envs.terms): tracking kernels that also pay for what the command leaves at zero, an
upright named body, a posture whose tolerance widens with the commanded speed, body rates and angular momentum, and
the feet's terms (clearance, swing height, slip, soft landing, air time) and self-collisions.

The facts are mjlab 1.6.0's (mjlab/tasks/velocity/mdp/rewards.py, the code written here): each docstring gives the
kernel. The feet and self-contact terms read `env.gait` (tasks/locomotion/gait.py), which the described robots' task
keeps (`requires=("gait",)`); on another task the recipe is refused when it is bound. "Active" below: the command's planar speed plus its
yaw rate exceeds `command_threshold`.
"""

from __future__ import annotations

import re

import torch

from mjfleet.envs.terms import ParamError, reward_term
from mjfleet.tasks.locomotion.math import quat_rotate_inverse


def _command_speed(env) -> torch.Tensor:
    """|command_xy| + |command_yaw|: mjlab's measure of how hard a command asks the robot to move."""
    return env.commands[:, :2].norm(dim=1) + env.commands[:, 2].abs()


def _body(model, param: str, name: str) -> int:
    names = [model.body(i).name for i in range(model.nbody)]
    if name not in names:
        raise ParamError(param, f"no body of this robot by that name (its bodies: {', '.join(names[1:])})")
    return names.index(name)


@reward_term(positive=("std",))
def track_linear_velocity(env, std: float = 0.5) -> torch.Tensor:
    """exp(-(|cmd_xy - v_xy|^2 + v_z^2) / std^2), v the base's linear velocity in its own frame: the vertical
    velocity the command leaves at zero is tracked too."""
    v = env.base_lin_vel
    error = (env.commands[:, :2] - v[:, :2]).square().sum(dim=1) + v[:, 2].square()
    return torch.exp(-error / std**2)


@reward_term(positive=("std",))
def track_angular_velocity(env, std: float = 0.7071067811865476) -> torch.Tensor:
    """exp(-((cmd_yaw - w_z)^2 + |w_xy|^2) / std^2), w the base's angular velocity in its own frame: roll and pitch
    rates, which the command leaves at zero, are tracked too."""
    w = env.base_ang_vel
    error = (env.commands[:, 2] - w[:, 2]).square() + w[:, :2].square().sum(dim=1)
    return torch.exp(-error / std**2)


@reward_term(name="upright", positive=("std",))
class Upright:
    """exp(-|g_xy|^2 / std^2), g gravity's direction in the frame of `body`: 1 when the body is level (flat
    ground)."""

    @staticmethod
    def check(model, joint_names, body: str, std: float = 0.4472135954999579) -> None:
        _body(model, "body", body)

    def __init__(self, env, body: str, std: float = 0.4472135954999579) -> None:
        self.body, self.std = _body(env.mj_model, "body", body), std
        self._down = torch.tensor([0.0, 0.0, -1.0], device=env.device)

    def __call__(self, env) -> torch.Tensor:
        quat = env.sim.xquat[:, self.body]
        gravity = quat_rotate_inverse(quat, self._down.expand(quat.shape[0], 3))
        return torch.exp(-gravity[:, :2].square().sum(dim=1) / self.std**2)


def _joint_values(joint_names, param: str, table: dict[str, float]) -> list[float]:
    """One value per actuated joint from `table` (joint name pattern -> value): each joint must match exactly one
    pattern (re.fullmatch), each value be positive."""
    if not isinstance(table, dict) or not table:
        raise ParamError(param, "give a mapping of joint name patterns to positive numbers")
    values = []
    for joint in joint_names:
        hits = [p for p in table if re.fullmatch(p, joint)]
        if len(hits) != 1:
            which = "no pattern" if not hits else f"{len(hits)} patterns ({', '.join(hits)})"
            raise ParamError(param, f"joint {joint} matches {which}: give it exactly one")
        value = table[hits[0]]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ParamError(param, f"{hits[0]!r} -> {value!r}: give a positive number")
        values.append(float(value))
    return values


@reward_term(name="variable_posture")
class VariablePosture:
    """exp(-mean_j((q_j - q0_j)^2 / sigma_j^2)) over the actuated joints, q0 the home pose; sigma per joint from
    `std_standing` below `walking_threshold` of command speed, `std_walking` up to `running_threshold`,
    `std_running` above (each a mapping of joint name patterns to widths, rad)."""

    @staticmethod
    def check(
        model,
        joint_names,
        std_standing: dict,
        std_walking: dict,
        std_running: dict,
        walking_threshold: float = 0.5,
        running_threshold: float = 1.5,
    ) -> list[list[float]]:
        if not 0 <= walking_threshold <= running_threshold:
            raise ParamError("running_threshold", "give 0 <= walking_threshold <= running_threshold")
        return [
            _joint_values(joint_names, "std_standing", std_standing),
            _joint_values(joint_names, "std_walking", std_walking),
            _joint_values(joint_names, "std_running", std_running),
        ]

    def __init__(
        self,
        env,
        std_standing: dict,
        std_walking: dict,
        std_running: dict,
        walking_threshold: float = 0.5,
        running_threshold: float = 1.5,
    ) -> None:
        stds = self.check(
            env.mj_model,
            env.joint_names,
            std_standing,
            std_walking,
            std_running,
            walking_threshold,
            running_threshold,
        )
        self.stds = torch.tensor(stds, device=env.device)  # (3, joints)
        self.thresholds = (walking_threshold, running_threshold)

    def __call__(self, env) -> torch.Tensor:
        speed = _command_speed(env)
        regime = (speed >= self.thresholds[0]).long() + (speed >= self.thresholds[1]).long()
        sigma = self.stds[regime]  # (n, joints)
        error = (env.sim.qpos[:, env._qj] - env.default_joint_pos).square()
        return torch.exp(-(error / sigma.square()).mean(dim=1))


@reward_term(name="body_angular_velocity")
class BodyAngularVelocity:
    """|w_xy|^2 of `body`'s angular velocity in the world frame (roll and pitch rates of, say, the torso)."""

    @staticmethod
    def check(model, joint_names, body: str) -> None:
        _body(model, "body", body)

    def __init__(self, env, body: str) -> None:
        self.body = _body(env.mj_model, "body", body)
        self._cvel = env.sim.data_view("cvel")  # (n, nbody, 6): angular velocity first, world frame

    def __call__(self, env) -> torch.Tensor:
        return self._cvel[:, self.body, :2].square().sum(dim=1)


@reward_term(requires=("gait",))
def angular_momentum(env) -> torch.Tensor:
    """|L|^2, the whole body's angular momentum about its centre of mass (a natural arm swing cancels the legs')."""
    return env.gait.angular_momentum.square().sum(dim=1)


@reward_term(requires=("gait",))
def air_time(
    env,
    threshold_min: float = 0.05,
    threshold_max: float = 0.5,
    command_threshold: float = 0.5,
) -> torch.Tensor:
    """The number of feet whose current air time lies in (threshold_min, threshold_max) s, while active."""
    t = env.gait.current_air_time
    count = ((t > threshold_min) & (t < threshold_max)).float().sum(dim=1)
    return count * (_command_speed(env) > command_threshold)


@reward_term(positive=("target_height",), requires=("gait",))
def foot_clearance(env, target_height: float = 0.1, command_threshold: float = 0.05) -> torch.Tensor:
    """sum over feet of |h - target_height| x |v_xy|, h the foot frame's height above the ground and v its world
    velocity, while active: a moving foot at its clearance height costs nothing."""
    gait = env.gait
    height = gait.pos_w[..., 2] - env.terrain_height(gait.pos_w[..., :2])
    cost = ((height - target_height).abs() * gait.vel_w[..., :2].norm(dim=-1)).sum(dim=1)
    return cost * (_command_speed(env) > command_threshold)


@reward_term(name="foot_swing_height", positive=("target_height",), requires=("gait",))
class FootSwingHeight:
    """At each touch-down, (peak height of the swing / target_height - 1)^2, summed over the feet that landed,
    while active: steps as high as the target."""

    def __init__(self, env, target_height: float = 0.1, command_threshold: float = 0.05) -> None:
        self.target, self.threshold = target_height, command_threshold
        self.peak = torch.zeros_like(env.gait.current_air_time)

    def __call__(self, env) -> torch.Tensor:
        gait = env.gait
        height = gait.pos_w[..., 2] - env.terrain_height(gait.pos_w[..., :2])
        self.peak.copy_(torch.where(gait.in_contact, self.peak, torch.maximum(self.peak, height)))
        landed = gait.first_contact()
        cost = ((self.peak / self.target - 1.0).square() * landed).sum(dim=1)
        self.peak.masked_fill_(landed, 0.0)
        return cost * (_command_speed(env) > self.threshold)

    def reset(self, env, mask: torch.Tensor) -> None:
        self.peak.masked_fill_(mask.unsqueeze(1), 0.0)


@reward_term(requires=("gait",))
def foot_slip(env, command_threshold: float = 0.05) -> torch.Tensor:
    """sum over the feet touching the floor of |v_xy|^2, while active: no sliding."""
    gait = env.gait
    cost = (gait.vel_w[..., :2].square().sum(dim=-1) * gait.in_contact).sum(dim=1)
    return cost * (_command_speed(env) > command_threshold)


@reward_term(requires=("gait",))
def soft_landing(env, command_threshold: float = 0.05) -> torch.Tensor:
    """sum over the feet that touched down within the step of |contact force| (N), while active."""
    gait = env.gait
    cost = (gait.force.norm(dim=-1) * gait.first_contact()).sum(dim=1)
    return cost * (_command_speed(env) > command_threshold)


@reward_term(positive=("force_threshold",), requires=("gait",))
def self_collisions(env, force_threshold: float = 10.0) -> torch.Tensor:
    """The number of physics substeps of the step in which a self-contact pressed harder than force_threshold (N)."""
    return (env.gait.self_contact_force > force_threshold).float().sum(dim=1)
