"""mjfleet's velocity recipe beside mjlab 1.6's, term by term, on mjlab's recorded states.

    uv run python scripts/mjlab_parity.py g1 go1                  # record (mjlab's venv), compare, print the table
    uv run python scripts/mjlab_parity.py g1 --recording g1.npz   # compare a recording made before

`record` makes (or reuses) mjlab's own virtual environment, as scripts/vs_mjlab.py does, and runs
scripts/mjlab_record.py there in a clean environment, so that mjlab is never imported into mjfleet's. The
recording's contents are described in that script's docstring.

`compare` feeds the states mjlab's reward terms saw (its `pre/*` arrays: the joint state, the bodies' orientations
and velocities, the command, the actions, the feet's contacts, forces, air times, heights and velocities, the
self-contact forces of each substep, the angular momentum) into mjfleet's environment for the same robot, calls
each term of mjfleet's recipe as the environment binds it, and holds its value against mjlab's unweighted value of
the entry of the same name. States are fed, not simulated twice: the two MuJoCo versions differ. Beside the terms it
checks the inputs mjfleet derives itself from the joint state (the base's velocities and tilt, the fall
termination) against mjlab's.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
RECORDER = HERE / "mjlab_record.py"
MJLAB_VERSION = "1.6.0"
MODES = ("trajectory", "distributions")
ROBOTS = ("g1", "go1")
TASKS = {"g1": "G1-Velocity-Flat", "go1": "Go1-Velocity-Flat"}
ATOL, RTOL = 1e-5, 1e-4
"""A term agrees when |mjfleet - mjlab| <= ATOL + RTOL x |mjlab| in every sample (float32 on both sides)."""


def _vs_mjlab():
    """scripts/vs_mjlab.py as a module (scripts/ is no package)."""
    if "vs_mjlab" in sys.modules:
        return sys.modules["vs_mjlab"]
    spec = importlib.util.spec_from_file_location("vs_mjlab", HERE / "vs_mjlab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_mjlab"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def mjlab_env(python: pathlib.Path) -> dict[str, str]:
    """The environment mjlab's Python runs in: ours without PYTHONPATH or VIRTUAL_ENV, and warp's kernel cache
    inside mjlab's virtual environment (its mujoco_warp is not mjfleet's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "WARP_CACHE_PATH")}
    env["WARP_CACHE_PATH"] = str(python.parent.parent / "warp-cache")
    return env


def record(
    robot: str,
    mode: str,
    out: pathlib.Path | str,
    steps: int = 60,
    num_envs: int = 4,
    seed: int = 0,
    *,
    venv: pathlib.Path | None = None,
    timeout_s: float | None = None,
) -> pathlib.Path:
    """Record mjlab's side for one robot: a trajectory (.npz; `steps` env steps of `num_envs` envs) or the
    command and event distributions (.json; `num_envs` draws a round, `steps` unused). Returns `out`.

    Raises SystemExit with the recorder's last lines if it fails."""
    if robot not in ROBOTS:
        raise ValueError(f"robot must be one of {ROBOTS}, not {robot!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if num_envs < 1 or (mode == "trajectory" and steps < 1):
        raise ValueError("num_envs and steps must be at least 1")
    vs = _vs_mjlab()
    if venv is None:
        from mjfleet.environ import cache_dir

        venv = cache_dir() / f"mjlab-{MJLAB_VERSION}"
    python = vs.mjlab_python(pathlib.Path(venv), MJLAB_VERSION)
    out = pathlib.Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [str(python), str(RECORDER), mode, robot, "--num-envs", str(num_envs), "--seed", str(seed),
               "--out", str(out)]  # fmt: skip
    if mode == "trajectory":
        command += ["--steps", str(steps)]
    proc = subprocess.run(command, capture_output=True, text=True, env=mjlab_env(python), timeout=timeout_s)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(
            f"mjlab_parity.py: error: mjlab_record.py {mode} {robot} failed ({proc.returncode}):\n{tail}"
        )
    return out


def _strip(name: str) -> str:
    return name.split("/", 1)[1] if name.startswith("robot/") else name


def compare(robot: str, recording: pathlib.Path | str) -> dict:
    """Every reward term of mjfleet's recipe for `robot` on the states of mjlab's `recording` (.npz): per term,
    mjlab's and mjfleet's mean value, the largest difference and whether all samples agree; and the inputs."""
    import numpy as np
    import torch

    from mjfleet.envs.terms import bind_recipe
    from mjfleet.tasks import get_task
    from mjfleet.tasks.locomotion.math import quat_rotate_inverse

    data = np.load(recording)
    meta = json.loads(str(data["metadata"]))
    steps, num_envs = data["pre/qpos"].shape[:2]
    spec = get_task(TASKS[robot])
    cfg = spec.env_config()
    cfg.num_envs = int(num_envs)
    env = spec.make_env(cfg, "cpu")
    m = env.mj_model
    ours = [m.joint(i).name for i in range(m.njnt)]
    theirs = [_strip(n) for n in meta["model"]["joint_names_all"]]
    if ours != theirs:
        raise SystemExit(f"mjlab_parity.py: error: joint orders differ: {ours} against {theirs}")
    body_names = [_strip(n) for n in meta["model"]["body_names"]]
    bodies = [(m.body(i).name, body_names.index(m.body(i).name)) for i in range(1, m.nbody)]
    body_ids = torch.tensor([b for b, _ in enumerate(bodies, start=1)])
    mjlab_bodies = [j for _, j in bodies]
    site_names = [_strip(n) for n in meta["model"]["site_names"]]
    built = env.built
    if built.foot_kind != "site":
        raise SystemExit("mjlab_parity.py: error: the robot's feet must be sites (mjlab's foot frames)")
    foot_sites = [site_names.index(m.site(i).name) for i in built.foot_ids]
    angmom = next(s for s in meta["model"]["sensors"] if s["name"] == "robot/root_angmom")
    # every entry, zero weights too (mjlab's recorder computed those as well)
    recipe = {name: dataclasses.replace(t, weight=t.weight or 1.0) for name, t in cfg.rewards.items()}
    bound = bind_recipe(env, recipe, "env.rewards")
    swing = next((b.call for b in bound if type(b.call).__name__ == "FootSwingHeight"), None)

    def pre(key: str, t: int) -> torch.Tensor:
        return torch.as_tensor(data[f"pre/{key}"][t], dtype=torch.float32)

    values = {b.name: [] for b in bound}
    inputs = {
        "base_lin_vel": [],
        "base_ang_vel": [],
        "projected_gravity": [],
        "fell_over": [],
        "foot_height": [],
        "base_ang_vel_one_substep_behind": [],
    }
    root = body_names.index(m.body(built.base_body_id).name)
    for t in range(steps):
        sim = env.sim
        sim.qpos.copy_(pre("qpos", t))
        sim.qvel.copy_(pre("qvel", t))
        sim.forward()
        # What mjfleet derives itself from the joint state, against mjlab's values.
        env._update_base_state()
        inputs["base_lin_vel"].append((env.base_lin_vel - pre("derived/root_link_lin_vel_b", t)).abs().max())
        inputs["base_ang_vel"].append((env.base_ang_vel - pre("derived/root_link_ang_vel_b", t)).abs().max())
        inputs["projected_gravity"].append(
            (env.gravity_b - pre("derived/projected_gravity_b", t)).abs().max()
        )
        # mjlab's root velocity is its bodies' (cvel, xquat), which lag qpos/qvel by one substep: from those alone
        # mjfleet's rotation gives mjlab's value
        lagged = quat_rotate_inverse(pre("xquat", t)[:, root], pre("cvel", t)[:, root, :3])
        inputs["base_ang_vel_one_substep_behind"].append(
            (lagged - pre("derived/root_link_ang_vel_b", t)).abs().max()
        )
        fell = env.compute_terminations().float()
        inputs["fell_over"].append((fell - torch.as_tensor(data["term/fell_over"][t]).float()).abs().max())
        site_z = sim.data_view("site_xpos")[:, list(built.foot_ids), 2]
        inputs["foot_height"].append((site_z - pre("height/foot_height_scan/heights", t)).abs().max())
        # The states mjlab's terms read, fed as they were (its positions lag its joint state by one substep).
        env.base_lin_vel = pre("derived/root_link_lin_vel_b", t)
        env.base_ang_vel = pre("derived/root_link_ang_vel_b", t)
        sim.xquat[:, body_ids] = pre("xquat", t)[:, mjlab_bodies]
        sim.data_view("cvel")[:, body_ids] = pre("cvel", t)[:, mjlab_bodies]
        env.commands.copy_(pre("command/twist", t))
        env.actions.copy_(pre("action", t))
        env.last_actions.copy_(pre("prev_action", t))
        gait = env.gait
        contact = "contact/feet_ground_contact"
        gait.in_contact.copy_(pre(f"{contact}/found", t) > 0)
        gait.force.copy_(pre(f"{contact}/force", t))
        gait.current_air_time.copy_(pre(f"{contact}/current_air_time", t))
        gait.current_contact_time.copy_(pre(f"{contact}/current_contact_time", t))
        gait.vel_w.copy_(pre("derived/site_lin_vel_w", t)[:, foot_sites])
        gait.pos_w.copy_(pre("site_xpos", t)[:, foot_sites])
        gait.pos_w[..., 2] = pre(
            "height/foot_height_scan/heights", t
        )  # mjlab's foot heights (its height scan)
        if "pre/contact/self_collision/force_history" in data.files:
            history = pre("contact/self_collision/force_history", t)  # (envs, 1, substeps, 3), newest first
            gait.self_contact_force.copy_(history.norm(dim=-1)[:, 0].flip(1))
        gait.angular_momentum.copy_(pre("sensordata", t)[:, angmom["adr"] : angmom["adr"] + 3])
        if swing is not None:
            swing.peak.copy_(pre("swing_peak_heights", t))
        for term in bound:
            values[term.name].append(term.call(env).clone())
    report = {
        "robot": robot,
        "task": TASKS[robot],
        "steps": int(steps),
        "num_envs": int(num_envs),
        "terms": {},
    }
    for name in cfg.rewards:
        key = f"reward/raw/{name}"
        if key not in data.files:
            report["terms"][name] = {"mjlab": None}
            continue
        theirs_v = torch.as_tensor(data[key], dtype=torch.float32)
        ours_v = torch.stack(values[name])
        diff = (ours_v - theirs_v).abs()
        report["terms"][name] = {
            "mjlab": float(theirs_v.mean()),
            "mjfleet": float(ours_v.mean()),
            "max_abs_diff": float(diff.max()),
            "agree": bool((diff <= ATOL + RTOL * theirs_v.abs()).all()),
            "nonzero_samples": int((theirs_v != 0).sum()),
            "weight": float(cfg.rewards[name].weight),
        }
    report["inputs"] = {name: float(torch.stack(v).max()) for name, v in inputs.items()}
    return report


def compare_observations(robot: str, recording: pathlib.Path | str) -> dict:
    """Every observation term of the actor and critic groups, mjlab's against mjfleet's on the states after each
    recorded step (joint state, command, last action, encoder offsets, the feet's contacts, forces, air times and
    heights fed as mjlab had them; noise off on both sides): {group: {term: largest difference}}."""
    import numpy as np
    import torch

    from mjfleet.tasks import get_task
    from mjfleet.tasks.locomotion.mdp import observations

    data = np.load(recording)
    steps, num_envs = data["post/qpos"].shape[:2]
    spec = get_task(TASKS[robot])
    cfg = spec.env_config()
    cfg.num_envs = int(num_envs)
    env = spec.make_env(cfg, "cpu")
    env._actor_noise.zero_()
    sizes = observations.observation_terms(env)
    diffs: dict[str, dict[str, float]] = {"actor": {}, "critic": {}}

    def post(key: str, t: int) -> torch.Tensor:
        return torch.as_tensor(data[f"post/{key}"][t], dtype=torch.float32)

    env.joint_pos_bias.copy_(torch.as_tensor(data["model/encoder_bias"], dtype=torch.float32))
    for t in range(steps):
        env.sim.qpos.copy_(post("qpos", t))
        env.sim.qvel.copy_(post("qvel", t))
        env.sim.forward()
        env._update_base_state()
        env.commands.copy_(post("command/twist", t))
        env.last_actions.copy_(post("action", t))
        gait, contact = env.gait, "contact/feet_ground_contact"
        gait.in_contact.copy_(post(f"{contact}/found", t) > 0)
        gait.force.copy_(post(f"{contact}/force", t))
        gait.current_air_time.copy_(post(f"{contact}/current_air_time", t))
        gait.pos_w[..., 2] = post("height/foot_height_scan/heights", t)
        gait.pos_w[..., :2] = 0.0  # flat ground: the height is the frame's z
        obs = observations.compute_observations(env)
        for group in ("actor", "critic"):
            column = 0
            for name, size in sizes[group]:
                ours = obs[group][:, column : column + size]
                column += size
                theirs = post(f"obs/{group}/{name}", t).reshape(ours.shape)
                diff = float((ours - theirs).abs().max())
                diffs[group][name] = max(diffs[group].get(name, 0.0), diff)
    return diffs


def compare_model(robot: str, recording: pathlib.Path | str) -> dict:
    """The contact settings of every robot collision geom and the physics options, mjlab's model against
    mjfleet's: a list of the differences (geom, field, mjlab's value, mjfleet's)."""
    import numpy as np

    from mjfleet.tasks import get_task

    meta = json.loads(str(np.load(recording)["metadata"]))["model"]
    spec = get_task(TASKS[robot])
    cfg = spec.env_config()
    cfg.num_envs = 1
    env = spec.make_env(cfg, "cpu")
    m = env.mj_model
    ours = {m.geom(i).name: i for i in range(m.ngeom)}
    differences = []
    compared = 0
    for j, full in enumerate(meta["geom_names"]):
        name = _strip(full)
        if not full.startswith("robot/") or not (meta["geom_contype"][j] or meta["geom_conaffinity"][j]):
            continue
        i = ours[name]
        compared += 1
        for field in ("geom_condim", "geom_priority", "geom_friction", "geom_solref", "geom_solimp",
                      "geom_contype", "geom_conaffinity"):  # fmt: skip
            theirs_v = np.asarray(
                meta[field if field != "geom_friction" else "default_geom_friction"][j], float
            )
            ours_v = np.asarray(getattr(m, field)[i], float)
            if not np.allclose(ours_v, theirs_v, rtol=1e-6, atol=1e-9):
                differences.append([name, field, theirs_v.tolist(), ours_v.tolist()])
    options = {k: float(getattr(m.opt, k)) for k in meta["opt"]}
    option_differences = [[k, v, options[k]] for k, v in meta["opt"].items() if abs(v - options[k]) > 1e-9]
    return {"robot": robot, "geoms_compared": compared, "geoms": differences, "options": option_differences}


def _stats(x) -> dict:
    """min, max, mean and std over the first axis (per column), as mjlab_record.py's distributions give them."""
    import torch

    x = torch.as_tensor(x, dtype=torch.float64)
    return {
        "min": x.amin(0).tolist(),
        "max": x.amax(0).tolist(),
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
    }


def compare_distributions(
    robot: str, distributions: pathlib.Path | str, num_envs: int = 512, rounds: int = 40
) -> dict:
    """mjfleet's command draws and randomisation events beside mjlab's (mjlab_record.py distributions): shares,
    ranges and moments of `rounds` draws of `num_envs` environments each. Returns {quantity: {"mjlab", "mjfleet"}}."""
    import torch

    from mjfleet.tasks import get_task
    from mjfleet.tasks.locomotion.math import quat_rotate
    from mjfleet.tasks.locomotion.mdp import commands, events

    theirs = json.loads(pathlib.Path(distributions).read_text())
    spec = get_task(TASKS[robot])
    cfg = spec.env_config()
    cfg.num_envs = num_envs
    torch.manual_seed(0)
    env = spec.make_env(cfg, "cpu")
    everyone = torch.ones(num_envs, dtype=torch.bool)
    draws, heading, steps, pushes, push_steps, spawns = [], [], [], [], [], []
    home_z = float(env.built.home_qpos[2])
    for _ in range(rounds):
        env.reset()  # a new heading for every robot, as mjlab's reset state
        spawn = env.sim.qpos[:, :3] - env.env_origins
        spawns.append(torch.cat((spawn[:, :2], spawn[:, 2:3] - home_z), dim=1))
        commands.resample_commands(env, everyone)
        draws.append(env.commands.clone())
        heading.append(env.heading_command.clone())
        steps.append(env.command_resample_steps.clone())
        before = env.sim.qvel[:, :6].clone()
        env._push_steps.fill_(1)
        events.push_robots(env)
        delta = env.sim.qvel[:, :6] - before
        world_spin = quat_rotate(env.sim.qpos[:, 3:7], delta[:, 3:6])
        pushes.append(torch.cat((delta[:, :3], world_spin), dim=1))
        push_steps.append(events.draw_push_steps(env))
    draws, heading = torch.cat(draws), torch.cat(heading)
    standing = (draws == 0).all(dim=1)
    forward = (draws[:, 1] == 0) & ~standing  # a uniform draw is never exactly 0: forward-only (or heading)
    shares = theirs["command"]["shares"]
    out = {
        "standing share": {"mjlab": shares["is_standing_env"], "mjfleet": float(standing.float().mean())},
        "heading share (not standing)": {
            "mjlab": shares["is_heading_env"] - shares["standing_and_heading"],
            "mjfleet": float(heading.float().mean()),
        },
        "forward share (not standing)": {
            "mjlab": shares["is_forward_env"] - shares["standing_and_forward"],
            "mjfleet": float(forward.float().mean()),
        },
        "command (vx, vy, wz)": {"mjlab": theirs["command"]["effective"], "mjfleet": _stats(draws)},
        "resampling time (s)": {
            "mjlab": theirs["command"]["resampling_time_s"],
            "mjfleet": _stats(torch.cat(steps).float().unsqueeze(1) * env.step_dt),
        },
    }
    ev = theirs["events"]
    out["push velocity (x, y, z, roll, pitch, yaw)"] = {
        "mjlab": ev["push_robot"]["velocity_delta"],
        "mjfleet": _stats(torch.cat(pushes)),
    }
    out["push interval (s)"] = {
        "mjlab": ev["push_robot"]["interval_s"],
        "mjfleet": _stats(torch.cat(push_steps).float().unsqueeze(1) * env.step_dt),
    }
    out["reset offset (x, y, z over the keyframe)"] = {
        "mjlab": ev["reset_base"]["xyz_offset"],
        "mjfleet": _stats(torch.cat(spawns)),
    }
    out["centre-of-mass offset (m)"] = {
        "mjlab": ev["base_com"]["per_axis"],
        "mjfleet": _stats(env.com_offset),
    }
    friction = ev.get("foot_friction") or ev.get("foot_friction_slide")
    out["foot friction (sliding)"] = {
        "mjlab": {k: v[0] for k, v in friction["per_axis"].items() if k != "n"},
        "mjfleet": {k: v[0] for k, v in _stats(env.foot_friction.unsqueeze(1)).items()},
    }
    return out


def table(reports: list[dict]) -> str:
    """The comparison as markdown rows: robot, entry, mjlab's mean, mjfleet's mean, largest difference."""
    rows = [
        "| Robot | Term (weight per s) | mjlab 1.6.0 (mean) | mjfleet (mean) | largest difference | agrees |",
        "|---|---|---|---|---|---|",
    ]
    for r in reports:
        for name, t in r["terms"].items():
            if t.get("mjfleet") is None:
                rows.append(f"| {r['robot']} | {name} | not recorded | | | |")
                continue
            rows.append(
                f"| {r['robot']} | {name} ({t['weight']:g}) | {t['mjlab']:.6g} | {t['mjfleet']:.6g} | {t['max_abs_diff']:.2g} | "
                f"{'yes' if t['agree'] else 'NO'} |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("robots", nargs="+", choices=ROBOTS)
    parser.add_argument("--recording", type=pathlib.Path, action="append", default=None,
                        help="a recording (.npz) made before, one per robot in order; default: record now")  # fmt: skip
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the reports here")
    args = parser.parse_args(argv)
    if args.recording is not None and len(args.recording) != len(args.robots):
        parser.error("give one --recording per robot")
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, robot in enumerate(args.robots):
            path = args.recording[i] if args.recording else None
            if path is None:
                path = record(robot, "trajectory", pathlib.Path(tmp) / f"{robot}.npz", args.steps, args.num_envs,
                              args.seed)  # fmt: skip
            reports.append(compare(robot, path))
    print(table(reports))
    for r in reports:
        print(
            f"{r['robot']} inputs, largest difference: "
            + ", ".join(f"{k} {v:.2g}" for k, v in r["inputs"].items())
        )
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=1))
    disagree = [
        f"{r['robot']}:{n}" for r in reports for n, t in r["terms"].items() if t.get("agree") is False
    ]
    if disagree:
        print(f"terms that disagree: {', '.join(disagree)}")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
