"""The quadruped velocity task's rules for a deployment outside mjfleet (exported with the policy).

Stated in the vocabulary of docs/deploy.md (implemented by examples/sim2sim.py): where each observation comes
from, how an episode starts and ends, how commands are drawn, the reward terms as expressions, the metrics `play`
reports, and the training randomisation ranges (for robustness checks).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from mjfleet.envs.terms import resolved_params
from mjfleet.runs.run_dir import float32_list
from mjfleet.tasks.locomotion.config import NoiseConfig
from mjfleet.tasks.locomotion.mdp import observations


def trained_commands(env, trained_cfg: dict[str, Any] | None) -> dict[str, Any]:
    """The command settings the policy learnt: the training run's where known, else `env`'s own."""
    return {**dataclasses.asdict(env.cfg.commands), **((trained_cfg or {}).get("commands") or {})}


def _command_shares(c: dict[str, Any], step_dt: float) -> dict[str, Any]:
    """The command draw's further rules where the task uses them (tasks/locomotion/mdp/commands.py): a resampling
    time drawn in a range, forward-only and heading-controlled shares, and the velocity curriculum's stages."""
    rules: dict[str, Any] = {}
    if c.get("resampling_time_range_s"):
        low, high = c["resampling_time_range_s"]
        rules["resampling_time_range_s"] = [float(low), float(high)]  # steps: ceil(time / step_dt)
    if c.get("forward_fraction", 0.0) > 0:
        rules["forward"] = {
            "fraction": float(c["forward_fraction"]),
            "min_speed": float(c["forward_min_speed"]),
        }
    if c.get("heading_fraction", 0.0) > 0:
        rules["heading"] = {
            "fraction": float(c["heading_fraction"]),
            "stiffness": float(c["heading_stiffness"]),
            "range": [float(v) for v in c["heading"]],
        }
    if c.get("velocity_stages"):
        rules["velocity_stages"] = [[float(v) for v in stage] for stage in c["velocity_stages"]]
    return rules


def touch_sensor_contact_rules(env) -> dict[str, Any]:
    """How the quadruped's model says what touches: the feet by their touch sensors, the trunk and legs by any
    contact of their geoms (with the ground or each other)."""
    return {
        "foot_contact": {
            "touch_sensor_adr": [int(a) for a in env._touch_adr],
            "force_above": float(env.cfg.foot_contact_force),
        },
        "ends_episode": {"kind": "geom_contact", "geoms": env.base_geoms.tolist()},
        "undesired_contacts": f"sum(geom_in_contact[{env.leg_geoms.tolist()!r}])",
        "foot_geoms": [int(g) for g in env.foot_geoms],
        "quantities": [],
    }


def floor_contact_rules(env) -> dict[str, Any]:
    """How a described robot's task (tasks/locomotion/described.py) says what touches: only contacts with the
    floor count (the robot may touch itself); a foot touches when one of its collision geoms does."""
    floor = [int(env.built.floor_geom_id)]
    return {
        "foot_contact": {
            "geoms": [[int(g) for g in geoms] for geoms in env.built.foot_geom_ids],
            "with_geoms": floor,
        },
        "ends_episode": {"kind": "geom_contact", "geoms": env.base_geoms.tolist(), "with_geoms": floor},
        "undesired_contacts": f"sum(floor_contact[{env.leg_geoms.tolist()!r}])",
        "foot_geoms": [int(g) for g in env.foot_geoms],
        "quantities": [{"name": "floor_contact", "kind": "geoms_touching", "with_geoms": floor}],
    }


def deployment_rules(
    env,
    trained_cfg: dict[str, Any] | None = None,
    more_rewards: dict[str, Callable[[dict[str, Any]], str]] | None = None,
    contacts: dict[str, Any] | None = None,
    partial_rewards: bool = False,
) -> dict[str, Any] | None:
    """The rules of an episode of `env`, a flat-ground LocomotionEnv (the env decides that, in its
    `deployment_rules`: this module reads the env's state and does not import its class). The quadruped's reward
    terms are stated here, by term function; a robot with terms of its own passes theirs as `more_rewards` (term
    function -> its expression for a recipe entry's parameters). None when a weighted term has no expression: the
    rules would misstate the reward.

    `trained_cfg` is the training run's env config (a dict, from the checkpoint) where known: its command ranges are
    the ones the policy learnt (not play's --command, which `policy_metadata` records apart as the evaluation
    command), and its randomisation ranges the ones a robustness check should stay within, even when the export
    was made with play's settings; so is its observation noise. Where it is unknown, `env`'s own settings stand in.
    `contacts` says how the model's contacts are read (default: `touch_sensor_contact_rules`). With
    `partial_rewards`, weighted terms without an expression are listed as `rewards.not_stated` instead (the terms
    read state this vocabulary has no name for yet, mjlab's gait sensors): the rules then state the observations,
    reset, commands and terminations whole, and the reward only in part.
    """
    cfg = env.cfg
    contacts = contacts if contacts is not None else touch_sensor_contact_rules(env)
    trained = trained_cfg or {}
    c = trained_commands(env, trained_cfg)
    qj, vj = env._qj, env._vj
    # The env holds these in float32: written as the export writes every float32 (`float32_list`: 0.9, as in
    # `actions.offset`, not 0.8999999761581421).
    default = float32_list(env.default_joint_pos)
    lower, upper = float32_list(env.soft_joint_lower), float32_list(env.soft_joint_upper)
    ev = cfg.events
    nq_joints = qj.stop - qj.start
    # qpos: x, y around the origin; z fixed; the quaternion comes from the heading draw; joints around the default.
    z = [ev.spawn_height - ev.spawn_height_spread, ev.spawn_height + ev.spawn_height_spread]
    qpos_uniform = [[-ev.spawn_xy, ev.spawn_xy]] * 2 + [z] + [[1.0, 1.0]]
    qpos_uniform += [[0.0, 0.0]] * 3
    qpos_uniform += [[d - ev.joint_pos, d + ev.joint_pos] for d in default]
    qvel_uniform = [[-ev.base_lin_vel, ev.base_lin_vel]] * 3 + [[-ev.base_ang_vel, ev.base_ang_vel]] * 3
    qvel_uniform += [[-ev.joint_vel, ev.joint_vel]] * nq_joints
    joints_q = f"qpos[{qj.start}:{qj.stop}]"
    # By term function: its expression for the parameters a recipe entry gives it.
    expressions: dict[str, Callable[[dict[str, Any]], str]] = {
        "track_lin_vel_xy": lambda p: f"exp(-sum(square(command[0:2] - base_lin_vel[0:2])) / {p['sigma']!r})",
        "track_ang_vel_z": lambda p: f"exp(-square(command[2] - base_ang_vel[2]) / {p['sigma']!r})",
        "lin_vel_z": lambda p: "square(base_lin_vel[2])",
        "ang_vel_xy": lambda p: "sum(square(base_ang_vel[0:2]))",
        "orientation": lambda p: "sum(square(projected_gravity[0:2]))",
        "torques": lambda p: "sum(square(actuator_force))",
        "joint_acc": lambda p: f"sum(square(qacc[{vj.start}:{vj.stop}]))",
        "action_rate": lambda p: "sum(square(action - last_action))",
        "joint_limits": lambda p: (
            f"sum(maximum({lower!r} - {joints_q}, 0) + maximum({joints_q} - {upper!r}, 0))"
        ),
        "undesired_contacts": lambda p: contacts["undesired_contacts"],
        "feet_air_time": lambda p: (
            f"sum((touchdown_air_time - {p['threshold']!r}) * first_contact)"
            f" * (norm(command[0:2]) > {c['min_speed']!r})"
        ),
        **(more_rewards or {}),
    }
    rewards, not_stated = {}, []
    for name in env.reward_weights:
        term = cfg.rewards[name]
        if term.func in expressions:
            rewards[name] = expressions[term.func](resolved_params(term))
        else:
            not_stated.append(name)
    if not_stated and not partial_rewards:
        return None
    noise = NoiseConfig(**{**dataclasses.asdict(cfg.noise), **(trained.get("noise") or {})})
    trained_events = trained.get("events") or {}
    friction = trained_events.get("foot_friction", ev.foot_friction)
    mass = trained_events.get("added_trunk_mass", ev.added_trunk_mass)
    push = trained_events.get("push_velocity", ev.push_velocity)
    push_interval = trained_events.get("push_interval_s", ev.push_interval_s)
    push_range = trained_events.get("push_velocity_range", ev.push_velocity_range)
    com = trained_events.get("com_offset", ev.com_offset)
    com_body = trained_events.get("com_body", ev.com_body)
    # an IMU site on the base: its point's velocity (offset, body frame) in its frame (frame_quat, w x y z)
    imu = (
        {}
        if env._imu is None
        else {"offset": float32_list(env._imu[0]), "frame_quat": float32_list(env._imu[1])}
    )
    imu_frame = {k: v for k, v in imu.items() if k == "frame_quat"}
    push_rule = None
    if push_range is not None:  # 6-D: world-frame x, y, z (m/s), roll, pitch, yaw (rad/s)
        push_rule = {"velocity_range": [float(v) for v in push_range], "interval_s": list(push_interval)}
    elif push:
        push_rule = {"velocity": float(push), "interval_s": list(push_interval)}
    com_id = env.trunk_body if com_body is None else env.mj_model.body(com_body).id
    return {
        "observations": [
            {"name": "base_lin_vel", "kind": "free_joint_lin_vel_body", "qpos_adr": 0, "dof_adr": 0, **imu},
            {"name": "base_ang_vel", "kind": "free_joint_ang_vel_body", "dof_adr": 0, **imu_frame},
            {"name": "projected_gravity", "kind": "projected_gravity", "qpos_adr": 0},
            {"name": "command", "kind": "command", "command": "twist"},
            {"name": "joint_pos", "kind": "qpos", "index": list(range(qj.start, qj.stop)), "offset": default},
            {"name": "joint_vel", "kind": "qvel", "index": list(range(vj.start, vj.stop))},
            {"name": "actions", "kind": "last_action"},
        ],
        # What training added to each term, by group (the export keeps its input's): a deployment adds none.
        "observation_noise": {"distribution": "uniform", "groups": observations.noise_by_group(env, noise)},
        "reset": {
            "qpos_uniform": qpos_uniform,
            "qvel_uniform": qvel_uniform,
            "free_joint": {"qpos_adr": 0, "yaw_uniform": [-math.pi, math.pi]},
            "clip_to_joint_range": True,
        },
        "after_physics": [],
        "terminations": [
            {
                "cause": "fell",
                **contacts["ends_episode"],
                **({} if cfg.contact_terminations else {"geoms": []}),
            },
            {"cause": "fell", "kind": "tilt", "qpos_adr": 0, "max_angle": float(cfg.max_tilt)},
        ],
        "foot_contact": contacts["foot_contact"],
        "quantities": list(contacts["quantities"]),
        "rewards": {
            "terms": [
                {"name": name, "weight": weight, "expression": rewards[name]}
                for name, weight in env.reward_weights.items()
                if name in rewards
            ],
            "not_stated": not_stated,
            "clip_total_below_zero": bool(cfg.only_positive_rewards),
            "termination_penalty": float(cfg.termination_penalty),
        },
        "commands": {
            "twist": {
                "columns": ["lin_vel_x", "lin_vel_y", "ang_vel_z"],
                "ranges": [list(c["lin_vel_x"]), list(c["lin_vel_y"]), list(c["ang_vel_z"])],
                "standing_fraction": float(c["standing_fraction"]),
                "min_speed": float(c["min_speed"]),
                "resampling_steps": max(1, round(c["resampling_time_s"] / env.step_dt)),  # as the env counts
                **_command_shares(c, env.step_dt),
            }
        },
        "metrics": {
            "lin_vel_error": "norm(command[0:2] - base_lin_vel[0:2])",
            "ang_vel_error": "abs(command[2] - base_ang_vel[2])",
            "base_lin_vel_x": "base_lin_vel[0]",
            "base_lin_vel_y": "base_lin_vel[1]",
            "base_ang_vel_z": "base_ang_vel[2]",
        },
        "randomization": {
            "foot_friction": None
            if friction is None
            else {"geoms": contacts["foot_geoms"], "range": list(friction)},
            "added_mass": None if mass is None else {"body": int(env.trunk_body), "range": list(mass)},
            "push": push_rule,
            "com_offset": None
            if com is None
            else {"body": int(com_id), "half_range": [float(v) for v in com]},
        },
    }
