"""The velocity tasks' reward recipes, as data over the reward term library (mjfleet.envs.terms; the terms are in
tasks/locomotion/mdp/rewards.py and tasks/humanoid/rewards.py). Weights are per second of simulated time: the
environment scales them by the policy step. Reasons for the weights: docs/tasks.md."""

from __future__ import annotations

from mjfleet.envs.terms import Term


def quadruped_recipe() -> dict[str, Term]:
    """Quadruped-Velocity-Flat's reward (legged_gym's velocity recipe)."""
    return {
        "track_lin_vel_xy": Term("track_lin_vel_xy", 1.0, {"sigma": 0.25}),
        "track_ang_vel_z": Term("track_ang_vel_z", 0.5, {"sigma": 0.25}),
        "lin_vel_z": Term("lin_vel_z", -2.0),
        "ang_vel_xy": Term("ang_vel_xy", -0.05),
        "orientation": Term("orientation", -1.0),
        "torques": Term("torques", -2.0e-4),
        "joint_acc": Term("joint_acc", -2.5e-7),
        "action_rate": Term("action_rate", -0.01),
        "joint_limits": Term("joint_limits", -10.0),
        "undesired_contacts": Term("undesired_contacts", -1.0),
        "feet_air_time": Term("feet_air_time", 0.25, {"threshold": 0.5}),
    }


def weights(recipe: dict[str, Term], **changes: float) -> dict[str, Term]:
    """`recipe` with the weights `changes` names (each must be a term of it)."""
    unknown = sorted(set(changes) - set(recipe))
    if unknown:
        raise KeyError(f"no such terms in the recipe: {', '.join(unknown)}")
    for name, weight in changes.items():
        recipe[name].weight = weight
    return recipe


def mjlab_velocity_recipe(
    upright_body: str,
    posture: dict[str, dict[str, float]],
    body_ang_vel: float = 0.0,
    angular_momentum: float = 0.0,
    self_collisions: float | None = None,
) -> dict[str, Term]:
    """mjlab 1.6.0's velocity recipe (mjlab/tasks/velocity/velocity_env_cfg.py, make_velocity_env_cfg: its
    entries' names, weights and parameters), for a robot whose level body is `upright_body` (its roll and pitch
    rates are penalised by `body_ang_vel`) and whose posture widths are `posture` ({"std_standing": {pattern:
    width}, "std_walking": ..., "std_running": ...}); `self_collisions`: that term's weight (None: no such entry).
    Each robot's task sets these as mjlab's robot configuration does (described_config.py)."""
    active = {"command_threshold": 0.05}
    recipe = {
        "track_linear_velocity": Term("track_linear_velocity", 2.0, {"std": 0.25**0.5}),
        "track_angular_velocity": Term("track_angular_velocity", 2.0, {"std": 0.5**0.5}),
        "upright": Term("upright", 1.0, {"body": upright_body, "std": 0.2**0.5}),
        "pose": Term(
            "variable_posture",
            1.0,
            {**{k: dict(v) for k, v in posture.items()}, "walking_threshold": 0.05, "running_threshold": 1.5},
        ),
        "body_ang_vel": Term("body_angular_velocity", body_ang_vel, {"body": upright_body}),
        "angular_momentum": Term("angular_momentum", angular_momentum),
        "dof_pos_limits": Term("joint_limits", -1.0),
        "action_rate_l2": Term("action_rate", -0.1),
        "air_time": Term(
            "air_time", 0.0, {"threshold_min": 0.05, "threshold_max": 0.5, "command_threshold": 0.5}
        ),
        "foot_clearance": Term("foot_clearance", -2.0, {"target_height": 0.1, **active}),
        "foot_swing_height": Term("foot_swing_height", -0.25, {"target_height": 0.1, **active}),
        "foot_slip": Term("foot_slip", -0.1, dict(active)),
        "soft_landing": Term("soft_landing", -1e-5, dict(active)),
    }
    if self_collisions is not None:
        recipe["self_collisions"] = Term("self_collisions", self_collisions, {"force_threshold": 10.0})
    return recipe
