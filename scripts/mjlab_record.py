"""mjlab's half of the velocity-task parity harness: run by the Python of mjlab's own virtual environment (never
mjfleet's; standard library, numpy, torch and mjlab only), it records what mjlab 1.6's velocity recipe computes,
so that mjfleet can feed the recorded STATES into its own term functions and compare term by term without
simulating twice (the two projects' MuJoCo versions differ, so their trajectories would diverge).

    <mjlab python> scripts/mjlab_record.py trajectory g1 --steps 60 --num-envs 4 --seed 0 --out g1.npz
    <mjlab python> scripts/mjlab_record.py distributions go1 --num-envs 4096 --out go1.json

Robots: g1 is Mjlab-Velocity-Flat-Unitree-G1, go1 is Mjlab-Velocity-Flat-Unitree-Go1, each its TRAINING config
(every reward, event, command, observation and termination) on the CPU, with one change: observation corruption
(noise) is off in every group, so observation terms compare exactly.

`trajectory` steps the env with seeded normal actions (std 0.5) and writes one .npz. When mjlab's env.step reads
what matters, and so what is recorded (arrays are (steps, num_envs, ...)):

- `pre/*`: inside env.step, right where the termination and reward managers run (after the `decimation` physics
  steps, BEFORE push events, resets and the step's final forward()). Rewards and terminations read this state.
  mjlab does not call forward() before them, so derived quantities (xpos, xquat, cvel, subtree_com, site_xpos,
  sensordata) lag qpos/qvel by one physics substep (they are from the last mj_step's pre-integration forward),
  and the foot-height raycasts are those of the previous env step's sense() (post-step state of step t-1, or of
  the reset). The command is the one computed at the end of the previous step. Term inputs mjlab derives are
  stored beside the raw state (`pre/derived/*`) so each derivation can be checked on its own.
- `post/*`: after env.step returns: the state the observations read (after pushes, resets of done envs, forward(),
  command update and sense()). Envs with `done/reset[t]` true hold their fresh reset state here.
- `init/*`: the same as `post/*` after env.reset(), before step 0.
- `reward/raw/<term>` is each reward term's unweighted value at `pre` time (zero-weight terms, which mjlab's
  manager skips, are computed by this script from the same state when they are plain functions);
  `reward/weighted/<term>` is what the manager added (raw x weight x step_dt); `reward/total` is env.step's reward.
- `term/<name>`: every termination term's value at `pre` time; `done/terminated`, `done/time_outs` (what
  env.step returned) and `done/reset` (the envs reset at the end of this step: their `post/*` is a reset state).

The JSON string in `metadata` names everything else: model facts, dt values, term configs and resolved
parameters, array descriptions, and which buffers carry history.

`distributions` builds the env with --num-envs worlds and samples mjlab's own generators several rounds: the
twist command (shares of standing, heading and forward-only envs, each column's range/mean/std, resampling times)
and the events (push velocities, reset poses, base COM offsets, foot friction, encoder bias), and writes a JSON of
statistics beside the config values they come from.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import sys
import time

import mjlab.tasks  # noqa: F401  (registers mjlab's tasks)
import mujoco
import numpy as np
import torch
from mjlab.envs import ManagerBasedRlEnv
from mjlab.tasks.registry import load_env_cfg

TASKS = {"g1": "Mjlab-Velocity-Flat-Unitree-G1", "go1": "Mjlab-Velocity-Flat-Unitree-Go1"}
ACTION_STD = 0.5
# mjwarp Data fields recorded at each point, when the build has them
STATE_FIELDS = ("qpos", "qvel", "qacc", "ctrl", "actuator_force", "qfrc_actuator", "xpos", "xquat", "xipos",
                "cvel", "subtree_com", "site_xpos", "site_xmat", "sensordata")  # fmt: skip
CONTACT_FIELDS = ("found", "force", "current_air_time", "last_air_time", "current_contact_time",
                  "last_contact_time", "force_history")  # fmt: skip
CORRUPTION_IN_CONFIG: dict[
    str, bool
] = {}  # each observation group's enable_corruption before make_env's change
HEIGHT_FIELDS = ("heights", "distances", "hit_pos_w", "frame_pos_w", "normals_w")


def jsonable(value, depth: int = 0):
    """A config value as JSON: dataclasses as dicts, tensors as lists, callables by qualified name."""
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, slice):
        return "all" if value == slice(None) else repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: jsonable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
        out["__type__"] = type(value).__name__
        return out
    if callable(value):
        target = value if isinstance(value, type) or hasattr(value, "__qualname__") else type(value)
        return f"{target.__module__}.{target.__qualname__}"
    return repr(value)


def func_name(func) -> str:
    """A term's function: its module and name (a class-based term is named by its class)."""
    target = func if hasattr(func, "__qualname__") else type(func)
    return f"{target.__module__}.{target.__qualname__}"


def make_env(robot: str, num_envs: int, seed: int) -> ManagerBasedRlEnv:
    cfg = load_env_cfg(TASKS[robot])  # the training config (play=False)
    cfg.scene.num_envs = num_envs
    cfg.seed = seed
    for name, group in cfg.observations.items():
        CORRUPTION_IN_CONFIG[name] = group.enable_corruption
        group.enable_corruption = False  # no observation noise: observation terms compare exactly
    return ManagerBasedRlEnv(cfg=cfg, device="cpu")


def np32(x: torch.Tensor) -> np.ndarray:
    x = x.detach().cpu()
    return (x.float() if x.is_floating_point() else x).numpy().copy()


class Tap:
    """Stands in for a reward term's function: calls it and keeps its unweighted value. Attributes (a class
    term's reset, its state) are the function's own."""

    def __init__(self, func, store: dict, name: str):
        self.__dict__["_tap"] = (func, store, name)

    def __call__(self, *args, **kwargs):
        func, store, name = self.__dict__["_tap"]
        value = func(*args, **kwargs)
        store[name] = value.detach().clone()
        return value

    def __getattr__(self, attr):
        return getattr(self.__dict__["_tap"][0], attr)


class Recorder:
    def __init__(self, env: ManagerBasedRlEnv, robot: str):
        self.env = env
        self.robot = robot
        self.asset = env.scene["robot"]
        self.rm = env.reward_manager
        self.twist = env.command_manager.get_term("twist")
        self.contact_sensors = {
            n: s for n, s in env.scene.sensors.items() if hasattr(s, "compute_first_contact")
        }
        self.height_sensors = {n: s for n, s in env.scene.sensors.items() if hasattr(s, "num_frames")}
        self.series: dict[str, list[np.ndarray]] = {}
        self.init: dict[str, np.ndarray] = {}
        self.raw: dict[str, torch.Tensor] = {}
        self.zero_weight_notes: dict[str, str] = {}
        self.swing = None  # the feet_swing_height term object, whose peak_heights is history
        for name in self.rm.active_terms:
            cfg = self.rm.get_term_cfg(name)
            if type(cfg.func).__name__ == "feet_swing_height":
                self.swing = cfg.func
            cfg.func = Tap(cfg.func, self.raw, name)
        self._compute = self.rm.compute
        # an instance attribute: env.step calls self.reward_manager.compute
        self.rm.compute = self._tapped_compute

    # One snapshot: everything the terms read, named by where it was taken.
    def snapshot(self, prefix: str) -> dict[str, np.ndarray]:
        env, asset, data = self.env, self.asset, self.env.sim.data
        out: dict[str, np.ndarray] = {}
        for field in STATE_FIELDS:
            if hasattr(data, field):
                out[f"{prefix}/{field}"] = np32(getattr(data, field))
        d = asset.data
        derived = {
            "root_link_pos_w": d.root_link_pos_w,
            "root_link_quat_w": d.root_link_quat_w,
            "root_link_lin_vel_b": d.root_link_lin_vel_b,
            "root_link_ang_vel_b": d.root_link_ang_vel_b,
            "root_link_lin_vel_w": d.root_link_lin_vel_w,
            "projected_gravity_b": d.projected_gravity_b,
            "heading_w": d.heading_w,
            "joint_pos": d.joint_pos,
            "joint_vel": d.joint_vel,
            "joint_pos_biased": d.joint_pos_biased,
            "body_link_quat_w": d.body_link_quat_w,
            "body_link_ang_vel_w": d.body_link_ang_vel_w,
            "site_lin_vel_w": d.site_lin_vel_w,
            "site_pos_w": d.site_pos_w,
        }
        for key, value in derived.items():
            out[f"{prefix}/derived/{key}"] = np32(value)
        for kind, sensors, fields in (("contact", self.contact_sensors, CONTACT_FIELDS),
                                      ("height", self.height_sensors, HEIGHT_FIELDS)):  # fmt: skip
            for name, sensor in sensors.items():
                for field in fields:
                    value = getattr(sensor.data, field, None)
                    if value is not None:
                        out[f"{prefix}/{kind}/{name}/{field}"] = np32(value)
        for name, sensor in self.contact_sensors.items():
            if getattr(sensor.data, "current_air_time", None) is not None:
                out[f"{prefix}/contact/{name}/first_contact"] = np32(
                    sensor.compute_first_contact(dt=env.step_dt)
                )
        am = env.action_manager
        out[f"{prefix}/action"] = np32(am.action)
        out[f"{prefix}/prev_action"] = np32(am.prev_action)
        out[f"{prefix}/prev_prev_action"] = np32(am.prev_prev_action)
        t = self.twist
        out[f"{prefix}/command/twist"] = np32(t.command)
        for field in ("heading_target", "heading_error", "is_heading_env", "is_standing_env", "is_forward_env",
                      "is_world_env", "time_left", "command_counter", "vel_command_w"):  # fmt: skip
            out[f"{prefix}/command/{field}"] = np32(getattr(t, field))
        out[f"{prefix}/episode_length"] = np32(env.episode_length_buf)
        if self.swing is not None:
            out[f"{prefix}/swing_peak_heights"] = np32(self.swing.peak_heights)
        return out

    def _tapped_compute(self, dt: float) -> torch.Tensor:
        snap = self.snapshot("pre")  # before any term runs: feet_swing_height's peak heights as they were
        self.raw.clear()
        for name in self.rm.active_terms:  # zero-weight terms: the manager skips them; plain functions only
            cfg = self.rm.get_term_cfg(name)
            if cfg.weight == 0.0:
                func = cfg.func.__dict__["_tap"][0]
                if isinstance(func, type) or hasattr(func, "reset"):
                    self.zero_weight_notes[name] = "class-based term with weight 0: not computed (NaN)"
                    continue
                try:
                    cfg.func(self.env, **cfg.params)
                    self.zero_weight_notes[name] = "weight 0: computed by the recorder from the pre state"
                except Exception as error:  # noqa: BLE001  (a term this robot's scene cannot feed)
                    self.zero_weight_notes[name] = f"weight 0: not computable here ({error!r:.200}) (NaN)"
        reward = self._compute(dt)
        n = self.env.num_envs
        for i, name in enumerate(self.rm.active_terms):
            raw = self.raw.get(name)
            snap[f"reward/raw/{name}"] = np32(raw) if raw is not None else np.full(n, np.nan, np.float32)
            snap[f"reward/weighted/{name}"] = np32(self.rm._step_reward[:, i] * dt)
        if self.swing is not None:
            snap["pre/swing_peak_heights_after"] = np32(self.swing.peak_heights)
        self._pending = snap
        return reward

    def append(self, arrays: dict[str, np.ndarray]) -> None:
        for key, value in arrays.items():
            self.series.setdefault(key, []).append(value)

    def obs(self, prefix: str, obs: dict) -> dict[str, np.ndarray]:
        out = {}
        om = self.env.observation_manager
        for group, names in om.active_terms.items():
            buf = obs[group]
            out[f"{prefix}/obs/{group}"] = np32(buf)
            start = 0
            for name, dims in zip(names, om.group_obs_term_dim[group], strict=True):
                size = int(np.prod(dims))
                out[f"{prefix}/obs/{group}/{name}"] = np32(buf[:, start : start + size])
                start += size
        return out


def model_facts(env: ManagerBasedRlEnv, rec: Recorder) -> tuple[dict, dict[str, np.ndarray]]:
    """Names, sizes, dt values and the per-env randomised model values (startup events' draws)."""
    m = env.sim.mj_model
    asset = rec.asset
    ix = asset.indexing

    def names(kind, count):
        return [mujoco.mj_id2name(m, kind, i) or "" for i in range(count)]

    sensors = []
    for i in range(m.nsensor):
        sensors.append({"name": mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SENSOR, i) or "",
                        "type": mujoco.mjtSensor(int(m.sensor_type[i])).name, "adr": int(m.sensor_adr[i]),
                        "dim": int(m.sensor_dim[i])})  # fmt: skip
    joint_names = list(asset.joint_names)
    facts = {
        "mujoco_version": mujoco.__version__,
        "nq": m.nq, "nv": m.nv, "nu": m.nu, "nbody": m.nbody, "ngeom": m.ngeom, "nsite": m.nsite,
        "nsensordata": m.nsensordata,
        "physics_dt": env.physics_dt, "decimation": env.cfg.decimation, "step_dt": env.step_dt,
        "episode_length_s": env.cfg.episode_length_s, "max_episode_length": env.max_episode_length,
        "body_names": names(mujoco.mjtObj.mjOBJ_BODY, m.nbody),
        "joint_names_all": names(mujoco.mjtObj.mjOBJ_JOINT, m.njnt),
        "jnt_qposadr": m.jnt_qposadr.tolist(), "jnt_dofadr": m.jnt_dofadr.tolist(),
        "geom_names": names(mujoco.mjtObj.mjOBJ_GEOM, m.ngeom),
        "site_names": names(mujoco.mjtObj.mjOBJ_SITE, m.nsite),
        "site_bodyid": m.site_bodyid.tolist(),
        "actuator_names": names(mujoco.mjtObj.mjOBJ_ACTUATOR, m.nu),
        "sensors": sensors,
        "robot": {
            "joint_names": joint_names,  # the order of joint_pos, joint_vel, actions and per-joint arrays
            "joint_qpos_adr": ix.joint_q_adr.tolist(), "joint_qvel_adr": ix.joint_v_adr.tolist(),
            "body_names": list(asset.body_names), "body_ids": ix.body_ids.tolist(),
            "root_body_id": ix.root_body_id,
            "site_names": list(asset.site_names), "site_ids": ix.site_ids.tolist(),
            "geom_names": list(asset.geom_names), "geom_ids": ix.geom_ids.tolist(),
            "ctrl_ids": ix.ctrl_ids.tolist(),
            "default_joint_pos": asset.data.default_joint_pos[0].tolist(),
            "default_joint_vel": asset.data.default_joint_vel[0].tolist(),
            "default_root_state": asset.data.default_root_state[0].tolist(),
            "joint_pos_limits": asset.data.default_joint_pos_limits[0].tolist(),
            "soft_joint_pos_limits": asset.data.soft_joint_pos_limits[0].tolist(),
            "gravity_vec_w": asset.data.gravity_vec_w[0].tolist() if asset.data.gravity_vec_w.ndim > 1
            else asset.data.gravity_vec_w.tolist(),
            "forward_vec_b": asset.data.forward_vec_b[0].tolist() if asset.data.forward_vec_b.ndim > 1
            else asset.data.forward_vec_b.tolist(),
        },
        "env_origins": env.scene.env_origins.tolist(),
    }  # fmt: skip
    term = env.action_manager.get_term("joint_pos")
    scale, offset = term.scale, term.offset
    facts["action"] = {
        "target_names": list(term.target_names),
        "scale": scale[0].tolist() if isinstance(scale, torch.Tensor) else scale,
        "offset": offset[0].tolist() if isinstance(offset, torch.Tensor) else offset,
    }
    per_env = {
        "model/geom_friction": np32(env.sim.model.geom_friction),
        "model/body_ipos": np32(env.sim.model.body_ipos),
        "model/encoder_bias": np32(asset.data.encoder_bias),
    }
    if per_env["model/geom_friction"].ndim == 2:  # not expanded per world: one row for all
        per_env["model/geom_friction"] = np.broadcast_to(per_env["model/geom_friction"], (env.num_envs,
                                                         *per_env["model/geom_friction"].shape)).copy()  # fmt: skip
    facts["default_geom_friction"] = m.geom_friction.tolist()
    facts["default_body_ipos"] = m.body_ipos.tolist()
    # the contact settings and physics options the model was compiled with (mjfleet compares its own)
    for field in (
        "geom_condim",
        "geom_priority",
        "geom_solref",
        "geom_solimp",
        "geom_contype",
        "geom_conaffinity",
    ):
        facts[field] = getattr(m, field).tolist()
    facts["opt"] = {name: float(getattr(m.opt, name)) for name in
                    ("timestep", "iterations", "ls_iterations", "ccd_iterations", "cone", "impratio", "integrator",
                     "solver", "noslip_iterations")}  # fmt: skip
    return facts, per_env


def term_configs(env: ManagerBasedRlEnv) -> dict:
    """Every manager's terms in order: function, weight, params (resolved entity selections included)."""
    rm, tm, om, em = env.reward_manager, env.termination_manager, env.observation_manager, env.event_manager
    rewards = []
    for name in rm.active_terms:
        cfg = rm.get_term_cfg(name)
        func = cfg.func.__dict__["_tap"][0] if isinstance(cfg.func, Tap) else cfg.func
        entry = {"name": name, "func": func_name(func), "weight": cfg.weight, "params": jsonable(cfg.params)}
        for attr in ("std_standing", "std_walking", "std_running", "std"):
            value = getattr(func, attr, None)
            if isinstance(value, torch.Tensor):
                entry.setdefault("resolved", {})[attr] = value.tolist()  # per robot joint, in joint order
        rewards.append(entry)
    terminations = [{"name": n, "func": func_name(tm.get_term_cfg(n).func), "time_out": tm.get_term_cfg(n).time_out,
                     "params": jsonable(tm.get_term_cfg(n).params)} for n in tm.active_terms]  # fmt: skip
    observations = {}
    for group, names in om.active_terms.items():
        rows = []
        for name, dims in zip(names, om.group_obs_term_dim[group], strict=True):
            cfg = om.get_term_cfg(group, name)
            rows.append({"name": name, "func": func_name(cfg.func), "params": jsonable(cfg.params),
                         "shape": list(dims), "scale": jsonable(cfg.scale), "clip": jsonable(cfg.clip),
                         "noise_in_config": jsonable(env.cfg.observations[group].terms[name].noise),
                         "history_length": cfg.history_length, "delay_max_lag": cfg.delay_max_lag})  # fmt: skip
        observations[group] = {"terms": rows, "concatenated_shape": list(om.group_obs_dim[group]),
                               "corruption_in_config": CORRUPTION_IN_CONFIG[group]}  # fmt: skip
    events = []
    for mode, names in em.active_terms.items():
        for name in names:
            cfg = em.get_term_cfg(name)
            events.append({"name": name, "mode": mode, "func": func_name(cfg.func), "params": jsonable(cfg.params),
                           "interval_range_s": jsonable(cfg.interval_range_s),
                           "is_global_time": cfg.is_global_time})  # fmt: skip
    commands = {}
    for name in env.command_manager.active_terms:
        cfg = env.command_manager.get_term(name).cfg
        commands[name] = {"class": type(env.command_manager.get_term(name)).__name__, "cfg": jsonable(cfg)}
    curriculum = {name: jsonable(cfg) for name, cfg in env.cfg.curriculum.items()}
    actions = {name: jsonable(cfg) for name, cfg in env.cfg.actions.items()}
    sim = jsonable(env.cfg.sim)
    return {"rewards": rewards, "terminations": terminations, "observations": observations, "events": events,
            "commands": commands, "curriculum": curriculum, "actions": actions, "sim": sim,
            "scale_rewards_by_dt": env.cfg.scale_rewards_by_dt}  # fmt: skip


KEY_MEANINGS = {
    "given_action": "(steps, envs, nu) the action passed to env.step (raw policy output, before scale/offset)",
    "<point>/qpos|qvel|qacc|ctrl|actuator_force|qfrc_actuator": "mjwarp Data rows (qpos order: model.jnt_qposadr)",
    "<point>/xpos|xquat|xipos|cvel|subtree_com": "(.., nbody, k) per body of the whole model (world body first)",
    "<point>/site_xpos|site_xmat": "(.., nsite, 3[,3]) per site",
    "<point>/sensordata": "(.., nsensordata); sensors' names, types, addresses and dims in model.sensors",
    "<point>/derived/<property>": "mjlab's Entity.data property of the robot at that point (what terms read): "
    "per robot joint / body / site in the robot's order (model.robot.*)",
    "<point>/contact/<sensor>/<field>": "ContactSensor.data fields: found (.., P), force (.., P, 3) net force, "
    "air/contact times (.., P), force_history (.., P, H, 3); first_contact "
    "= compute_first_contact(step_dt)",
    "<point>/height/<sensor>/<field>": "TerrainHeightSensor.data: heights (.., F) per foot frame, raw rays",
    "<point>/action|prev_action|prev_prev_action": "action_manager buffers at that point",
    "<point>/command/<field>": "the twist command term: twist = the command (vx, vy, wz body frame), masks, "
    "heading target/error, time_left to the next resample",
    "<point>/episode_length": "env.episode_length_buf",
    "<point>/swing_peak_heights[_after]": "feet_swing_height's peak heights before [after] the term ran",
    "<point>/obs/<group>[/<term>]": "observation group (concatenated) and each term's slice (post and init only)",
    "reward/raw/<term>": "(steps, envs) the term's unweighted value (NaN: not computed)",
    "reward/weighted/<term>": "(steps, envs) what the manager added to the reward: raw * weight * step_dt",
    "reward/total": "(steps, envs) env.step's reward",
    "term/<term>": "(steps, envs) the termination term's value",
    "done/terminated|time_outs|reset": "(steps, envs) env.step's terminated and truncated flags; envs reset",
    "model/geom_friction|body_ipos": "(envs, ngeom|nbody, 3) per-env model values after the startup events",
    "model/encoder_bias": "(envs, robot joints) the encoder bias joint_pos_rel(biased=True) adds",
}


def trajectory(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    env = make_env(args.robot, args.num_envs, args.seed)
    rec = Recorder(env, args.robot)
    obs, _ = env.reset()
    rec.init = {**rec.snapshot("init"), **rec.obs("init", obs)}
    gen = torch.Generator().manual_seed(args.seed)
    tm = env.termination_manager
    dim = env.action_manager.total_action_dim
    built_s = time.perf_counter() - start
    for _ in range(args.steps):
        action = torch.randn(env.num_envs, dim, generator=gen) * ACTION_STD
        obs, reward, terminated, time_outs, _ = env.step(action)
        row = dict(rec._pending)
        row["given_action"] = np32(action)
        row["reward/total"] = np32(reward)
        for name in tm.active_terms:
            row[f"term/{name}"] = np32(tm.get_term(name))
        row["done/terminated"] = np32(terminated)
        row["done/time_outs"] = np32(time_outs)
        row["done/reset"] = np32(env.reset_buf)
        row.update(rec.snapshot("post"))
        row.update(rec.obs("post", obs))
        rec.append(row)
    facts, per_env = model_facts(env, rec)
    arrays = {k: np.stack(v) for k, v in rec.series.items()}
    arrays.update(rec.init)
    arrays.update(per_env)
    meta = {
        "robot": args.robot, "task": TASKS[args.robot], "mjlab_version": _version("mjlab"),
        "torch_version": torch.__version__, "seed": args.seed, "steps": args.steps, "num_envs": args.num_envs,
        "actions": f"torch.randn(num_envs, {dim}, generator=torch.Generator().manual_seed(seed)) * {ACTION_STD}",
        "observation_corruption": "off in every group (enable_corruption=False)",
        "model": facts, "terms": term_configs(env), "zero_weight_terms": rec.zero_weight_notes,
        "history": {
            "prev_action": "action_manager.prev_action: the action of the step before (zeroed on reset); "
                           "action_rate_l2 reads action - prev_action at pre time",
            "contact air/contact times": "feet_ground_contact's current/last_air_time and "
                                         "current/last_contact_time integrate found over every physics substep "
                                         "(scene.update after each mj_step); zeroed on reset",
            "first_contact": "0 < current_contact_time < step_dt + 1e-6 (compute_first_contact)",
            "force_history": "contact sensors with history_length>0 (self_collision): the last H substeps' "
                             "forces, newest first; zeroed on reset",
            "swing_peak_heights": "feet_swing_height's own per-foot max height while found==0 (pre/"
                                  "swing_peak_heights before the term ran, pre/swing_peak_heights_after after; "
                                  "zeroed at first contact; NOT zeroed on reset by mjlab 1.6)",
            "foot heights at pre": "raycast results of the previous step's sense() (post state of step t-1)",
            "command at pre": "the command computed at the end of step t-1 (post/command of t-1)",
        },
        "points": {
            "pre": "inside env.step, where terminations and rewards are computed: after the decimation physics "
                   "steps, before interval events (pushes), resets and forward(); derived quantities lag qpos/qvel "
                   "by one substep",
            "post": "after env.step returned: what the observations read; reset envs are in their reset state",
            "init": "after env.reset(), before step 0",
        },
        "key_meanings": KEY_MEANINGS,
        "keys": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in sorted(arrays.items())},
        "build_s": built_s, "total_s": time.perf_counter() - start,
    }  # fmt: skip
    arrays["metadata"] = np.array(json.dumps(meta))
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays)
    env.close()
    print(json.dumps({"out": str(out), "keys": len(arrays), "bytes": out.stat().st_size,
                      "seconds": round(time.perf_counter() - start, 1)}), flush=True)  # fmt: skip


def stats(x: torch.Tensor | np.ndarray) -> dict:
    """min, max, mean, std (per component along the last axis when it has more than one)."""
    a = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    if a.ndim > 1:
        a = a.reshape(-1, a.shape[-1])
        return {"n": a.shape[0], "min": a.min(0).tolist(), "max": a.max(0).tolist(), "mean": a.mean(0).tolist(),
                "std": a.std(0).tolist()}  # fmt: skip
    return {"n": a.size, "min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
            "std": float(a.std())}  # fmt: skip


def capture_writes(asset, method: str):
    """Wrap one of the entity's write_* methods (an instance attribute) to keep what each call writes."""
    kept: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    original = getattr(asset, method)

    def wrapper(value, *args, env_ids=None, **kwargs):
        kept.append((value.detach().clone(), None if env_ids is None else env_ids.detach().clone()))
        return original(value, *args, env_ids=env_ids, **kwargs)

    setattr(asset, method, wrapper)
    return kept, lambda: delattr(asset, method)


def distributions(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    env = make_env(args.robot, args.num_envs, args.seed)
    env.reset()
    built_s = time.perf_counter() - start
    n = env.num_envs
    all_ids = torch.arange(n, dtype=torch.int64)
    asset = env.scene["robot"]
    em = env.event_manager
    result: dict = {"robot": args.robot, "task": TASKS[args.robot], "num_envs": n, "rounds": args.rounds,
                    "seed": args.seed, "mjlab_version": _version("mjlab")}  # fmt: skip

    # Command: resample every env (the term's own reset), then update it as env.reset does (compute, dt 0).
    twist = env.command_manager.get_term("twist")
    sampled, effective, masks, times, heading = [], [], {}, [], []
    for _ in range(args.rounds):
        twist.reset(all_ids)
        sampled.append(twist.command.clone())  # drawn, forward-only envs already set; before heading/standing
        times.append(twist.time_left.clone())
        heading.append(twist.heading_target.clone())
        for field in ("is_standing_env", "is_heading_env", "is_forward_env", "is_world_env"):
            masks.setdefault(field, []).append(getattr(twist, field).clone())
        twist.compute(dt=0.0)
        effective.append(twist.command.clone())
    m = {k: torch.cat(v).float() for k, v in masks.items()}
    eff = torch.cat(effective)
    shares = {k: float(v.mean()) for k, v in m.items()}
    standing = m["is_standing_env"].bool()
    heading_env = m["is_heading_env"].bool() & ~standing
    forward_env = m["is_forward_env"].bool() & ~standing
    shares["standing_and_heading"] = float((m["is_standing_env"] * m["is_heading_env"]).mean())
    shares["standing_and_forward"] = float((m["is_standing_env"] * m["is_forward_env"]).mean())
    shares["heading_and_forward"] = float((m["is_heading_env"] * m["is_forward_env"]).mean())
    shares["zero_command_after_update"] = float((eff.abs().sum(-1) == 0).float().mean())
    result["command"] = {
        "cfg": jsonable(twist.cfg),
        "shares": shares,
        "sampled": {"columns": ["lin_vel_x", "lin_vel_y", "ang_vel_z"], **stats(torch.cat(sampled))},
        "effective": {
            "note": "after _update_command at the reset state: heading envs' yaw rate from heading "
            "error, standing envs zeroed",
            **stats(eff),
        },  # fmt: skip
        "effective_moving_not_forward_not_heading": stats(eff[~standing & ~forward_env & ~heading_env]),
        "effective_forward": stats(eff[forward_env]),
        "effective_heading_yaw_rate": stats(eff[heading_env][:, 2]),
        "heading_target": stats(torch.cat(heading)),
        "resampling_time_s": stats(torch.cat(times)),
    }

    # Events. Startup draws: the build's own, then rounds-1 more by calling each term's function on every env.
    startup = [name for name in em.active_terms.get("startup", [])]
    draws: dict[str, list[torch.Tensor]] = {name: [] for name in startup}
    selections = {}
    for name in startup:
        cfg = em.get_term_cfg(name)
        sel = cfg.params["asset_cfg"]
        selections[name] = sel
    for round_ in range(args.rounds):
        if round_ > 0:
            for name in startup:
                cfg = em.get_term_cfg(name)
                cfg.func(env, None, **cfg.params)
        for name in startup:
            cfg = em.get_term_cfg(name)
            sel = selections[name]
            fname = getattr(cfg.func, "__name__", "")
            if fname == "geom_friction":
                gids = asset.indexing.geom_ids[torch.as_tensor(sel.geom_ids)]
                draws[name].append(env.sim.model.geom_friction[:, gids].clone())  # [n, geoms, 3]
            elif fname in ("body_com_offset", "body_ipos"):
                bids = asset.indexing.body_ids[torch.as_tensor(sel.body_ids)]
                default = torch.as_tensor(env.sim.mj_model.body_ipos[bids.numpy()], dtype=torch.float32)
                offsets = env.sim.model.body_ipos[:, bids].clone() - default
                draws[name].append(offsets)  # [n, bodies, 3]
            elif fname == "encoder_bias":
                draws[name].append(asset.data.encoder_bias.clone())
            else:
                draws[name].append(torch.full((n, 1), float("nan")))
    events: dict = {}
    for name in startup:
        cfg = em.get_term_cfg(name)
        x = torch.cat(draws[name])
        entry = {"mode": "startup", "func": func_name(cfg.func), "params": jsonable(cfg.params)}
        sel = selections[name]
        if x.ndim == 3:
            names = sel.geom_names if "friction" in entry["func"] else sel.body_names
            entry["entities"] = list(names)
            entry["all_equal_across_entities"] = bool((x == x[:, :1]).all())
            entry["per_axis"] = stats(x[:, 0, :])  # first entity (all share one draw when shared_random)
            entry["per_axis_all_entities"] = stats(x)
            if "friction" in entry["func"]:
                # every friction event's entry shows the whole friction vector; this event draws these axes
                entry["axes_drawn"] = cfg.params.get("axes") or [0]
                entry["log_per_axis"] = stats(torch.log(x[:, 0, :].clamp_min(1e-12)))
        else:
            entry["per_joint"] = stats(x)
            entry["all_joints"] = stats(x.reshape(-1))
            entry["joint_names"] = list(asset.joint_names)
        events[name] = entry

    # Reset events: the root pose each draw writes (minus default and env origin; yaw from the quaternion).
    for name in em.active_terms.get("reset", []):
        cfg = em.get_term_cfg(name)
        if getattr(cfg.func, "__name__", "") != "reset_root_state_uniform":
            events[name] = {"mode": "reset", "func": func_name(cfg.func), "params": jsonable(cfg.params)}
            continue
        kept, restore = capture_writes(asset, "write_root_link_pose_to_sim")
        for _ in range(args.rounds):
            cfg.func(env, all_ids, **cfg.params)
        restore()
        poses = torch.cat([p for p, _ in kept])
        origins = env.scene.env_origins.repeat(args.rounds, 1)
        default = asset.data.default_root_state[0, :3]
        q = poses[:, 3:7]  # w, x, y, z
        yaw = torch.atan2(2 * (q[:, 0] * q[:, 3] + q[:, 1] * q[:, 2]), 1 - 2 * (q[:, 2] ** 2 + q[:, 3] ** 2))
        events[name] = {"mode": "reset", "func": func_name(cfg.func), "params": jsonable(cfg.params),
                        "xyz_offset": stats(poses[:, :3] - origins - default), "yaw": stats(yaw),
                        "default_root_state": asset.data.default_root_state[0].tolist()}  # fmt: skip

    # Interval events (pushes): the velocity each call adds to the root's world velocity, and the intervals.
    for index, name in enumerate(em.active_terms.get("interval", [])):
        cfg = em.get_term_cfg(name)
        entry = {"mode": "interval", "func": func_name(cfg.func), "params": jsonable(cfg.params),
                 "interval_range_s": jsonable(cfg.interval_range_s), "is_global_time": cfg.is_global_time}  # fmt: skip
        if getattr(cfg.func, "__name__", "") == "push_by_setting_velocity":
            deltas = []
            for _ in range(args.rounds):
                before = asset.data.root_link_vel_w.clone()
                kept, restore = capture_writes(asset, "write_root_link_velocity_to_sim")
                cfg.func(env, all_ids, **cfg.params)
                restore()
                ((written, ids),) = kept
                deltas.append(written - before[ids])
            entry["velocity_delta"] = {"columns": ["x", "y", "z", "roll", "pitch", "yaw"],
                                       **stats(torch.cat(deltas))}  # fmt: skip
        intervals = []
        for _ in range(args.rounds):
            em.reset(all_ids)  # resamples each env's time to its next interval event
            intervals.append(em._interval_term_time_left[index].clone())
        entry["interval_s"] = stats(torch.cat(intervals))
        events[name] = entry
    result["events"] = events
    result["build_s"] = built_s
    result["total_s"] = time.perf_counter() - start
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    env.close()
    print(json.dumps({"out": str(out), "seconds": round(time.perf_counter() - start, 1)}), flush=True)


def _version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    traj = sub.add_parser(
        "trajectory", help="step mjlab's env and record states, terms and observations (.npz)"
    )
    traj.add_argument("robot", choices=sorted(TASKS))
    traj.add_argument("--steps", type=int, default=60)
    traj.add_argument("--num-envs", type=int, default=4)
    traj.add_argument("--seed", type=int, default=0)
    traj.add_argument("--out", required=True)
    dist = sub.add_parser("distributions", help="sample mjlab's command and event generators (.json)")
    dist.add_argument("robot", choices=sorted(TASKS))
    dist.add_argument("--num-envs", type=int, default=4096)
    dist.add_argument("--rounds", type=int, default=5)
    dist.add_argument("--seed", type=int, default=0)
    dist.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("MJLAB_RECORD_THREADS", "1")))
    if args.mode == "trajectory":
        trajectory(args)
    else:
        distributions(args)


if __name__ == "__main__":
    sys.exit(main())
