"""Run an exported mjfleet policy in MuJoCo C, from the exported folder alone (sim2sim).

    python examples/sim2sim.py logs/<experiment>/<run>/exported [--episodes N] [--command VX VY WZ]

Imports only mujoco, numpy and onnxruntime (`uv sync --extra deploy`). Everything task-specific comes from the
export: policy.onnx, its metadata (policy.json) and model.xml, the MJCF the policy was trained with; docs/deploy.md
defines each field. Prints one JSON object on its last line, with the keys of `play`'s eval.json.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import pathlib
import sys
import time

import mujoco
import numpy as np
import onnxruntime as ort

# ------------------------------------------------------------------ expressions (rewards and metrics)
_FUNCTIONS = {
    "cos": np.cos, "sin": np.sin, "exp": np.exp, "abs": np.abs, "sqrt": np.sqrt, "square": np.square,
    "sum": np.sum, "maximum": np.maximum, "minimum": np.minimum, "norm": np.linalg.norm,
}  # fmt: skip
_BINARY = {
    ast.Add: np.add,
    ast.Sub: np.subtract,
    ast.Mult: np.multiply,
    ast.Div: np.divide,
    ast.Pow: np.power,
}
_COMPARE = {ast.Gt: np.greater, ast.Lt: np.less, ast.GtE: np.greater_equal, ast.LtE: np.less_equal,
            ast.Eq: np.equal}  # fmt: skip


def evaluate_expression(node: ast.AST, names: dict[str, np.ndarray]):
    """Evaluate an expression of the metadata (numbers, lists, names, indexing, slices, + - * / **, comparisons and
    the functions above) without Python's eval: an export cannot run code."""
    if isinstance(node, ast.Expression):
        return evaluate_expression(node.body, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, np.ndarray)):
        return node.value
    if isinstance(node, ast.List):
        return np.array([evaluate_expression(e, names) for e in node.elts])
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -evaluate_expression(node.operand, names)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](
            evaluate_expression(node.left, names), evaluate_expression(node.right, names)
        )
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        left, right = evaluate_expression(node.left, names), evaluate_expression(node.comparators[0], names)
        return _COMPARE[type(node.ops[0])](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        return _FUNCTIONS[node.func.id](*(evaluate_expression(a, names) for a in node.args))
    if isinstance(node, ast.Subscript):
        value = evaluate_expression(node.value, names)
        index = node.slice
        if isinstance(index, ast.Slice):
            lo = None if index.lower is None else int(evaluate_expression(index.lower, names))
            hi = None if index.upper is None else int(evaluate_expression(index.upper, names))
            return value[lo:hi]
        key = evaluate_expression(index, names)
        return value[key.astype(int) if isinstance(key, np.ndarray) else int(key)]
    raise ValueError(f"unsupported expression: {ast.dump(node)}")


def compile_expression(text: str) -> ast.Expression:
    """The parsed expression, its lists of numbers made arrays once (rebuilt at every step, the joint-limit term's
    46 numbers cost the humanoid more than its four physics steps, by cProfile)."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):  # a call's arguments
                setattr(node, field, [_folded(v) for v in value])
            elif isinstance(value, ast.List):
                setattr(node, field, _folded(value))
    return tree


def _folded(node):
    """A list that names nothing as a constant array; any other node as it is."""
    if isinstance(node, ast.List) and not any(isinstance(n, ast.Name) for n in ast.walk(node)):
        return ast.Constant(evaluate_expression(node, {}))
    return node


# ------------------------------------------------------------------ the export
class Export:
    """policy.onnx + policy.json + model.xml of one exported folder."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.meta = json.loads((folder / "policy.json").read_text())
        rules = self.meta.get("deployment")
        if not rules:
            raise SystemExit(
                f"error: {folder}/policy.json has no deployment rules (task {self.meta.get('task')})"
            )
        if not self.meta.get("mjcf"):
            raise SystemExit(f"error: {folder}/policy.json names no MJCF model (export with a newer mjfleet)")
        self.rules = rules
        self.model = mujoco.MjModel.from_xml_path(str(folder / self.meta["mjcf"]))
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(folder / "policy.onnx"), options, providers=["CPUExecutionProvider"]
        )
        actions = self.meta["actions"]
        nu = self.meta["output"]["size"]
        scale = actions.get("action_scale", 1.0)
        self.action_scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), (nu,)).copy()
        self.offset = np.asarray(actions.get("offset", [0.0] * nu), dtype=np.float64)
        self.clip = float(actions.get("clip_actions", math.inf))
        self.decimation = int(actions["decimation"])
        self.max_steps = int(self.meta["episode"]["max_steps"])
        self.step_dt = float(self.meta["step_dt"])
        self.terms = self.meta["input"]["terms"]
        self.sources = {o["name"]: o for o in rules["observations"]}
        missing = [t["name"] for t in self.terms if t["name"] not in self.sources]
        if missing:
            raise SystemExit(f"error: no source for observation terms {missing}")
        self.rewards = [(t["name"], float(t["weight"]), compile_expression(t["expression"]))
                        for t in rules["rewards"]["terms"]]  # fmt: skip
        self.metrics = {k: compile_expression(v) for k, v in (rules.get("metrics") or {}).items()}
        self.ends = [(t, compile_expression(t["expression"]) if t["kind"] == "expression" else None)
                     for t in rules["terminations"]]  # fmt: skip
        self.state_rule = self.meta.get(
            "state"
        )  # a recurrent policy's hidden state: carried, reset per episode
        self.reset_state()

    def reset_state(self) -> None:
        """A recurrent policy's hidden state at an episode's start: zeros (policy.json's `state`)."""
        rule = self.state_rule
        shape = [1 if size == "batch" else size for size in rule["shape"]] if rule else []
        self.state = {name: np.zeros(shape, np.float32) for name in (rule["inputs"] if rule else [])}

    def act(self, obs: np.ndarray) -> np.ndarray:
        outputs = ["actions", *(self.state_rule["outputs"] if self.state_rule else [])]
        actions, *state = self.session.run(outputs, {"obs": obs[None, :].astype(np.float32), **self.state})
        self.state = dict(zip(self.state, state, strict=True))  # each output is the next step's input
        return actions[0].astype(np.float64)


# ------------------------------------------------------------------ one robot in MuJoCo C
def quat_rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """v (world) in the frame of the unit quaternion q = (w, x, y, z)."""
    w, (x, y, z), (a, b, c) = q[0], q[1:4], v
    cross = np.array([y * c - z * b, z * a - x * c, x * b - y * a])  # u x v: np.cross is slow on 3-vectors
    return v * (2 * w * w - 1) - cross * 2 * w + q[1:4] * 2 * (x * a + y * b + z * c)


class Episode:
    """The state of one robot: MjData, command, last action, foot contact timers."""

    def __init__(self, export: Export, model: mujoco.MjModel, rng: np.random.Generator, command) -> None:
        self.x, self.m, self.rng, self.fixed_command = export, model, rng, command
        self.d = mujoco.MjData(model)
        self.commands = {
            name: np.zeros(len(c["columns"])) for name, c in (export.rules["commands"] or {}).items()
        }
        self.foot = export.rules.get("foot_contact")
        self.quantity_rules = export.rules.get("quantities") or []
        self.push = None

    # ---- reset
    def reset(self, qpos=None, qvel=None) -> None:
        m, d, r = self.m, self.d, self.x.rules["reset"]
        mujoco.mj_resetData(m, d)
        if qpos is None:
            qpos = np.array([self.rng.uniform(lo, hi) for lo, hi in r["qpos_uniform"]])
            qvel = np.array([self.rng.uniform(lo, hi) for lo, hi in r["qvel_uniform"]])
            free = r.get("free_joint")
            if free:  # the base's heading: a yaw-only quaternion
                yaw, a = self.rng.uniform(*free["yaw_uniform"]), free["qpos_adr"]
                qpos[a + 3 : a + 7] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
            if r.get("clip_to_joint_range"):
                for j in range(m.njnt):
                    if m.jnt_limited[j] and m.jnt_type[j] in (
                        mujoco.mjtJoint.mjJNT_HINGE,
                        mujoco.mjtJoint.mjJNT_SLIDE,
                    ):
                        a = m.jnt_qposadr[j]
                        qpos[a] = np.clip(qpos[a], *m.jnt_range[j])
        d.qpos[:], d.qvel[:] = qpos, qvel
        self.length, self.ret = 0, 0.0
        self.reward_sums = {name: 0.0 for name, _, _ in self.x.rewards}
        self.action = np.zeros(self.x.meta["output"]["size"])
        self.last_action = np.zeros_like(self.action)
        self.command_steps, self.command_limit = 0, 1 << 62
        self.draw_commands()
        self.last_xy: dict[str, np.ndarray] = {}  # body_speed_xy's positions at the previous policy step
        if self.foot:
            n = len(self.foot.get("touch_sensor_adr") or self.foot["geoms"])
            self.air_time, self.touchdown_air_time = np.zeros(n), np.zeros(n)
            self.foot_contact, self.last_contact, self.first_contact = (np.zeros(n, bool) for _ in range(3))
        if self.push:
            self.push_steps = self.draw_push_steps()

    def draw_commands(self) -> None:
        self.heading = None  # (target, stiffness, yaw range) while this draw steers to a heading
        for name, c in (self.x.rules["commands"] or {}).items():
            fixed = self.fixed_command is not None
            if fixed:
                ranges, standing = [[v, v] for v in self.fixed_command], 0.0
            else:
                ranges, standing = c["ranges"], c["standing_fraction"]
            new = np.array([self.rng.uniform(lo, hi) for lo, hi in ranges])
            if np.linalg.norm(new[:2]) < c["min_speed"]:
                new[:2] = 0.0
            forward, heading = c.get("forward"), c.get("heading")
            if forward and not fixed and self.rng.uniform() < forward["fraction"]:
                new = np.array([max(abs(new[0]), forward["min_speed"]), 0.0, 0.0])
            is_standing = self.rng.uniform() < standing
            if is_standing:
                new[:] = 0.0
            elif heading and not fixed and self.rng.uniform() < heading["fraction"]:
                self.heading = (self.rng.uniform(*heading["range"]), heading["stiffness"], ranges[2])
            self.commands[name] = new
            if c.get("resampling_time_range_s") and not fixed:
                low, high = c["resampling_time_range_s"]
                self.command_limit = max(1, math.ceil(self.rng.uniform(low, high) / self.x.step_dt - 1e-6))
            else:
                self.command_limit = c["resampling_steps"]
        self.update_heading()
        self.command_steps = 0

    def update_heading(self) -> None:
        """A heading-controlled draw's yaw rate: stiffness x the heading error, within the yaw range."""
        if self.heading is None:
            return
        target, stiffness, (low, high) = self.heading
        w, x, y, z = self.d.qpos[3:7]
        yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
        error = (target - yaw + math.pi) % (2 * math.pi) - math.pi
        self.commands["twist"][2] = min(max(stiffness * error, low), high)

    def draw_push_steps(self) -> int:
        lo, hi = (t / self.x.step_dt for t in self.push["interval_s"])
        return max(1, int(lo + self.rng.uniform() * (hi - lo)))

    # ---- observations and the named quantities expressions read
    def quantities(self) -> dict[str, np.ndarray]:
        d = self.d
        q = {"qpos": d.qpos, "qvel": d.qvel, "qacc": d.qacc, "actuator_force": d.actuator_force,
             "action": self.action, "last_action": self.last_action, **self.commands}  # fmt: skip
        if "twist" in self.commands:
            q["command"] = self.commands["twist"]
        for source in self.x.sources.values():
            if source["kind"].startswith(("free_joint", "projected")):
                q[source["name"]] = self.observe(source)
        if self.foot:
            q["first_contact"], q["touchdown_air_time"] = self.first_contact, self.touchdown_air_time
            q["foot_contact"] = self.foot_contact
        in_contact = np.zeros(self.m.ngeom, bool)
        in_contact[d.contact.geom[: d.ncon].ravel()] = True  # (ncon, 2) geom ids
        q["geom_in_contact"] = in_contact
        for rule in self.quantity_rules:
            q[rule["name"]] = self.quantity(rule)
        return q

    def quantity(self, rule: dict) -> np.ndarray:
        """One of `deployment.quantities`, for the state the last policy step reached (once per step: a speed
        remembers the positions it was called with)."""
        d, kind = self.d, rule["kind"]
        if kind == "body_z":
            return d.xpos[rule["bodies"], 2] - rule.get("offset", 0.0)
        if kind == "body_speed_xy":  # finite difference over the policy step; 0 on an episode's first step
            xy, last = d.xpos[rule["bodies"], 0:2].copy(), self.last_xy.get(rule["name"])
            self.last_xy[rule["name"]] = xy
            if self.length <= 1 or last is None:
                return np.zeros(len(xy))
            return np.linalg.norm((xy - last) / self.x.step_dt, axis=1)
        if kind == "geoms_touching":
            return self.touching(rule["with_geoms"])
        if kind == "contacts_between":
            a, b = d.contact.geom[: d.ncon].T
            one, two = rule["geoms1"], rule["geoms2"]
            return np.sum((np.isin(a, one) & np.isin(b, two)) | (np.isin(b, one) & np.isin(a, two)))
        # Any observation kind: a value the rewards read and the policy does not (policy.json format 2 lists it
        # here, format 1 among the observations), e.g. the quadruped's base_lin_vel for a `policy`-group input.
        return self.observe(rule)

    def touching(self, others: list[int]) -> np.ndarray:
        """Per geom id: in a contact of `d.contact[:d.ncon]` whose other geom is one of `others`."""
        a, b = self.d.contact.geom[: self.d.ncon].T
        found = np.zeros(self.m.ngeom, bool)
        found[a[np.isin(b, others)]] = True
        found[b[np.isin(a, others)]] = True
        return found

    def observe(self, s: dict) -> np.ndarray:
        d, kind = self.d, s["kind"]
        if kind == "qpos":
            return d.qpos[s["index"]] - np.asarray(s.get("offset", 0.0))
        if kind == "qvel":
            return d.qvel[s["index"]].copy()
        if kind == "cos_qpos":
            return np.cos(d.qpos[s["index"]])
        if kind == "sin_qpos":
            return np.sin(d.qpos[s["index"]])
        if kind == "free_joint_lin_vel_body":  # qvel[0:3] of a free joint is the world-frame linear velocity
            a, v = s["qpos_adr"], s["dof_adr"]
            lin = quat_rotate_inverse(d.qpos[a + 3 : a + 7], d.qvel[v : v + 3])
            if "offset" in s:  # the velocity of a point on the base (an IMU), in its frame
                lin = lin + np.cross(d.qvel[v + 3 : v + 6], np.asarray(s["offset"]))
            return quat_rotate_inverse(np.asarray(s["frame_quat"]), lin) if "frame_quat" in s else lin
        if kind == "free_joint_ang_vel_body":  # qvel[3:6] of a free joint is already in the body frame
            ang = d.qvel[s["dof_adr"] + 3 : s["dof_adr"] + 6].copy()
            return quat_rotate_inverse(np.asarray(s["frame_quat"]), ang) if "frame_quat" in s else ang
        if kind == "projected_gravity":
            a = s["qpos_adr"]
            return quat_rotate_inverse(d.qpos[a + 3 : a + 7], np.array([0.0, 0.0, -1.0]))
        if kind == "command":
            return self.commands[s["command"]].copy()
        if kind == "last_action":
            return self.last_action.copy()
        raise SystemExit(f"error: observation kind {kind!r} is not implemented here (term {s['name']})")

    def observation(self) -> np.ndarray:
        return np.concatenate([self.observe(self.x.sources[t["name"]]) for t in self.x.terms])

    # ---- one policy step
    def step(self, actions: np.ndarray) -> tuple[float, dict[str, float], str | None]:
        """Apply the policy's actions for one control period; (reward, metrics, end cause or None)."""
        x, m, d = self.x, self.m, self.d
        self.action = np.clip(actions, -x.clip, x.clip)
        d.ctrl[:] = x.offset + x.action_scale * self.action  # MuJoCo clamps to ctrlrange where limited
        for _ in range(x.decimation):
            mujoco.mj_step(m, d)
        self.length += 1
        for rule in x.rules.get("after_physics") or []:
            if rule["kind"] == "end_stop":
                i, v, lim = rule["qpos_index"], rule["qvel_index"], rule["limit"]
                if abs(d.qpos[i]) >= lim:
                    d.qvel[v] = 0.0
                d.qpos[i] = np.clip(d.qpos[i], -lim, lim)
        if self.foot:
            if "touch_sensor_adr" in self.foot:
                touch = d.sensordata[self.foot["touch_sensor_adr"]] > self.foot["force_above"]
            else:  # a foot touches when one of its geoms touches one of `with_geoms` (the floor)
                touching = self.touching(self.foot["with_geoms"])
                touch = np.array([touching[geoms].any() for geoms in self.foot["geoms"]])
            self.foot_contact = touch
            contact = touch | self.last_contact
            self.last_contact = touch
            self.first_contact = (self.air_time > 0) & contact
            self.air_time += x.step_dt
            self.touchdown_air_time = self.air_time * self.first_contact
            self.air_time *= ~contact
        self.command_steps += 1
        q = self.quantities()  # before a push, as in training: the push shows in the next step
        if self.push:
            self.push_steps -= 1
            if self.push_steps <= 0:
                if (
                    "velocity_range" in self.push
                ):  # world-frame linear and angular; the free joint spins in its body
                    dv = self.rng.uniform(-1, 1, 6) * np.asarray(self.push["velocity_range"])
                    rot = np.zeros(9)
                    mujoco.mju_quat2Mat(rot, d.qpos[3:7])
                    d.qvel[0:3] += dv[:3]
                    d.qvel[3:6] += rot.reshape(3, 3).T @ dv[3:6]
                else:
                    d.qvel[0:2] += self.rng.uniform(-1, 1, 2) * self.push["velocity"]
                self.push_steps = self.draw_push_steps()
        cause = self.termination(q)
        if cause is None and self.length >= x.max_steps:
            cause = "time_out"
        q["terminated"] = float(cause not in (None, "time_out"))
        reward = 0.0
        self.terms = {}
        for name, weight, expr in x.rewards:
            value = weight * float(evaluate_expression(expr, q))
            value = value if math.isfinite(value) else 0.0
            self.terms[name] = value
            self.reward_sums[name] += value
            reward += value
        if x.rules["rewards"].get("clip_total_below_zero"):
            reward = max(reward, 0.0)
        if cause is not None and cause != "time_out":
            reward += x.rules["rewards"].get("termination_penalty", 0.0)
        metrics = {k: float(np.nan_to_num(evaluate_expression(e, q))) for k, e in x.metrics.items()}
        self.ret += reward
        self.last_action = self.action
        if self.command_steps >= self.command_limit:
            self.draw_commands()
        else:
            self.update_heading()
        return reward, metrics, cause

    def termination(self, q: dict) -> str | None:
        d = self.d
        if not (np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()):
            return "nan"
        for rule, expression in self.x.ends:
            kind = rule["kind"]
            if kind == "expression" and np.any(evaluate_expression(expression, q)):
                return rule["cause"]
            if kind == "qpos_abs_above" and (np.abs(d.qpos[rule["index"]]) > rule["limit"]).any():
                return rule["cause"]
            if kind == "geom_contact":
                touching = self.touching(rule["with_geoms"]) if "with_geoms" in rule else q["geom_in_contact"]
                if touching[rule["geoms"]].any():
                    return rule["cause"]
            if kind == "tilt":
                a = rule["qpos_adr"]
                gravity = quat_rotate_inverse(d.qpos[a + 3 : a + 7], np.array([0.0, 0.0, -1.0]))
                if gravity[2] > -math.cos(rule["max_angle"]):
                    return rule["cause"]
        return None


# ------------------------------------------------------------------ evaluation
def perturbed_model(export: Export, condition: dict) -> mujoco.MjModel:
    m = mujoco.MjModel.from_xml_path(str(export.folder / export.meta["mjcf"]))
    if "foot_friction" in condition:
        m.geom_friction[condition["geoms"], 0] = condition["foot_friction"]
    if "added_mass" in condition:
        m.body_mass[condition["body"]] += condition["added_mass"]  # mass only, as training randomises it
    if "com_offset" in condition:
        m.body_ipos[condition["body"]] += condition["com_offset"]
    if "kp_scale" in condition:
        position = m.actuator_biastype == mujoco.mjtBias.mjBIAS_AFFINE
        m.actuator_gainprm[:, 0] *= condition["kp_scale"]
        m.actuator_biasprm[position, 1] *= condition["kp_scale"]
    mujoco.mj_setConst(m, mujoco.MjData(m))
    return m


def evaluate(export: Export, episodes: int, seed: int, command, condition: dict | None = None,
             frame_sink=None, on_step=None) -> dict:  # fmt: skip
    """Run `episodes` episodes one after another; summarise them like play's eval.json."""
    condition = condition or {}
    model = perturbed_model(export, condition) if condition else export.model
    ep = Episode(export, model, np.random.default_rng(seed), command)
    ep.push = condition.get("push")
    # Every named cause and the time-out, as play reports them (0 included); "terminated" (play's name for early
    # ends its log does not name) only when it happens.
    causes = {r["cause"]: 0 for r in export.rules["terminations"] if r["cause"] != "terminated"} | {
        "time_out": 0
    }
    returns, lengths = [], []
    metric_sums: dict[str, float] = {}
    reward_sums: dict[str, float] = {}
    steps = 0
    for _ in range(episodes):
        ep.reset()
        export.reset_state()
        obs = ep.observation()
        while True:
            if frame_sink is not None:
                frame_sink(ep.d)
            _, metrics, cause = ep.step(export.act(obs))
            steps += 1
            for k, v in metrics.items():
                metric_sums[k] = metric_sums.get(k, 0.0) + v
            if on_step is not None and not on_step(ep.d):
                cause = cause or "stopped"
            if cause is not None:
                break
            obs = ep.observation()
        returns.append(ep.ret)
        lengths.append(ep.length)
        causes[cause] = causes.get(cause, 0) + 1
        for k, v in ep.reward_sums.items():
            reward_sums[k] = reward_sums.get(k, 0.0) + v
        if cause == "stopped":
            break
    n = len(returns)
    episode_metrics = {f"Episode_Reward/{k}": v / n for k, v in reward_sums.items()}
    episode_metrics |= {
        f"Episode_Termination/{k}": c / n for k, c in causes.items() if k not in ("nan", "terminated")
    }
    return {
        "episodes": n,
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "min_return": float(np.min(returns)),
        "max_return": float(np.max(returns)),
        "mean_episode_length": float(np.mean(lengths)),
        "std_episode_length": float(np.std(lengths)),
        "max_episode_length": export.max_steps,
        "metrics": {k: v / max(steps, 1) for k, v in sorted(metric_sums.items())},
        "terminations": dict(sorted(causes.items())),
        "episode_metrics": dict(sorted(episode_metrics.items())),
        "episodes_ended": n,
        "steps": steps,
        "env_steps": steps,
    }


def conditions(export: Export) -> list[tuple[str, dict]]:
    """Nominal, then each randomisation range's ends, pushes, and servo gains at 0.9x / 1.1x."""
    rand = export.rules.get("randomization") or {}
    rows: list[tuple[str, dict]] = [("nominal", {})]
    if rand.get("foot_friction"):
        f = rand["foot_friction"]
        rows += [(f"foot_friction={v:g}", {"geoms": f["geoms"], "foot_friction": v}) for v in f["range"]]
    if rand.get("added_mass"):
        a = rand["added_mass"]
        rows += [(f"added_base_mass={v:+g}kg", {"body": a["body"], "added_mass": v}) for v in a["range"]]
    if rand.get("com_offset"):
        c = rand["com_offset"]
        rows += [(f"com_offset={sign:+g}x", {"body": c["body"], "com_offset": sign * np.asarray(c["half_range"])})
                 for sign in (-1.0, 1.0)]  # fmt: skip
    if rand.get("push"):
        p = rand["push"]
        size = f"{p['velocity']:g}m/s" if "velocity" in p else "6d"
        rows.append((f"pushes={size}", {"push": p}))
    rows += [(f"actuator_gain_x{s:g}", {"kp_scale": s}) for s in (0.9, 1.1)]
    return rows


def dump_actions(export: Export, state: pathlib.Path, steps: int, out: pathlib.Path, command,
                 rewards_out: pathlib.Path | None = None) -> None:  # fmt: skip
    """The policy's first `steps` actions (before clipping) from the initial state in `state` (an .npz with qpos,
    qvel and optionally command), saved as a (steps, num_actions) .npy; with `rewards_out`, each step's weighted
    reward terms, reward and end cause as JSON ({"terms": {name: [...]}, "reward": [...], "cause": [...]})."""
    init = np.load(state)
    cmd = init["command"].tolist() if "command" in init.files else command
    ep = Episode(export, export.model, np.random.default_rng(0), cmd)
    ep.reset(qpos=init["qpos"].astype(np.float64), qvel=init["qvel"].astype(np.float64))
    export.reset_state()
    actions, record = [], {"terms": {name: [] for name, _, _ in export.rewards}, "reward": [], "cause": []}
    for _ in range(steps):
        a = export.act(ep.observation())
        actions.append(a)
        reward, _, cause = ep.step(a)
        for name, value in ep.terms.items():
            record["terms"][name].append(value)
        record["reward"].append(reward)
        record["cause"].append(cause)
        if cause is not None:
            break
    np.save(out, np.array(actions))
    if rewards_out is not None:
        rewards_out.write_text(json.dumps(record))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "export", type=pathlib.Path, help="an exported folder (policy.onnx, policy.json, model.xml)"
    )
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--command", type=float, nargs=3, metavar=("VX", "VY", "WZ"), default=None)
    parser.add_argument("--perturb", action="store_true", help="one metrics row per robustness condition")
    parser.add_argument("--video", type=pathlib.Path, default=None, help="an .mp4 of the first episodes")
    parser.add_argument("--video-length", type=int, default=300)
    parser.add_argument("--viewer", action="store_true", help="watch in MuJoCo's viewer (needs a display)")
    parser.add_argument("--dump-actions", type=pathlib.Path, default=None)
    parser.add_argument(
        "--initial-state", type=pathlib.Path, default=None, help=".npz: qpos, qvel[, command]"
    )
    parser.add_argument("--dump-steps", type=int, default=50)
    parser.add_argument("--dump-rewards", type=pathlib.Path, default=None, help="with --dump-actions: .json")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    if not (args.export / "policy.json").is_file():
        parser.error(f"{args.export} holds no policy.json: pass an exported folder")
    export = Export(args.export)
    if args.command is not None and not export.rules.get("commands"):
        parser.error(f"--command: {export.meta['task']} takes no command")
    if args.dump_actions is not None:
        if args.initial_state is None:
            parser.error("--dump-actions needs --initial-state")
        dump_actions(
            export, args.initial_state, args.dump_steps, args.dump_actions, args.command, args.dump_rewards
        )
        print(json.dumps({"dumped": str(args.dump_actions)}))
        return 0
    start = time.perf_counter()
    frame_sink = on_step = None
    closers = []
    if args.video is not None:
        frame_sink, close = _video(export, args.video, args.video_length)
        closers.append(close)
    if args.viewer:
        on_step, close = _viewer(export)
        closers.append(close)
    try:
        result = evaluate(
            export, args.episodes, args.seed, args.command, frame_sink=frame_sink, on_step=on_step
        )
    finally:
        for close in closers:
            close()
    summary = {"task": export.meta["task"], "simulator": f"MuJoCo C {mujoco.__version__}", "seed": args.seed,
               "command": args.command, **result}  # fmt: skip
    if args.perturb:
        rows = []
        for name, condition in conditions(export):
            row = evaluate(export, args.episodes, args.seed, args.command, condition)
            rows.append({"condition": name, **row})
            print(f"{name:28s} return {row['mean_return']:9.3f}  length {row['mean_episode_length']:7.1f}  "
                  f"ends {row['terminations']}  {row['metrics']}", flush=True)  # fmt: skip
        summary["perturbations"] = rows
    summary["wall_s"] = time.perf_counter() - start
    print(json.dumps(summary))
    return 0


def _video(export: Export, path: pathlib.Path, length: int):
    """A frame sink recording the first `length` policy steps to an H.264 mp4 through an ffmpeg process (the
    `ffmpeg` on PATH, else the one the imageio-ffmpeg package ships; MuJoCo renders offscreen: MUJOCO_GL=egl
    where there is no display)."""
    import shutil
    import subprocess

    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        try:
            import imageio_ffmpeg  # optional: only to find an ffmpeg binary
        except ImportError:
            raise SystemExit("error: --video needs ffmpeg on PATH (or pip install imageio-ffmpeg)") from None
        ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    width, height = 640, 480
    renderer = mujoco.Renderer(export.model, height, width)
    fps = str(round(1.0 / export.step_dt))
    args = [ffmpeg, "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
            "-r", fps, "-i", "-", "-pix_fmt", "yuv420p", "-vcodec", "libx264", str(path)]  # fmt: skip
    process = subprocess.Popen(args, stdin=subprocess.PIPE)
    count = [0]

    def sink(d: mujoco.MjData) -> None:
        if count[0] < length:
            mujoco.mj_forward(export.model, d)  # body poses for the state the policy is about to act on
            renderer.update_scene(d)
            process.stdin.write(renderer.render().tobytes())
            count[0] += 1

    def close() -> None:
        process.stdin.close()
        process.wait()
        renderer.close()

    return sink, close


def _viewer(export: Export):
    import mujoco.viewer

    handle = [None]

    def on_step(d: mujoco.MjData) -> bool:
        if handle[0] is None:
            handle[0] = mujoco.viewer.launch_passive(export.model, d)
        handle[0].sync()
        time.sleep(export.step_dt)
        return handle[0].is_running()

    return on_step, lambda: handle[0] is not None and handle[0].close()


if __name__ == "__main__":
    sys.exit(main())
