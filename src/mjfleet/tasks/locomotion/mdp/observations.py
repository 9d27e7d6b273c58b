"""Observation terms and groups, named by what a robot measures.

- `policy`: the deployable set, what a real robot's sensors give: IMU angular velocity and gravity direction,
  joint encoders (positions with a per-episode offset, velocities), the command and the last action, each with
  noise. No base linear velocity, no contact states, no height map. A distillation student reads it.
- `actor`: the default PPO/SAC actor's set: the proprioceptive terms with noise, including the base linear
  velocity (which a robot does not measure), and the height scan where it is given to the actor.
- `critic`: privileged and exact: the proprioceptive terms, contacts, friction, added mass, base height, the
  height scan.
"""

from __future__ import annotations

import torch

from mjfleet.tasks.locomotion.math import yaw_from_quat


def proprio_terms(env, nz=None) -> list[tuple[str, torch.Tensor, float]]:
    """The proprioceptive observation terms in order: (name, value, the half-range of the uniform noise the actor
    sees on it (0: exact)). The observations, their names and the noise vector are all built from this list.
    `nz`: the noise settings whose half-ranges to give (default the env's own; an export states training's).
    The order is the config's `observation_layout`'s."""
    nz, qpos, qvel = nz or env.cfg.noise, env.sim.qpos, env.sim.qvel
    terms = {
        "base_lin_vel": (env.imu_lin_vel, nz.lin_vel),  # the base's own unless the robot names an IMU site
        "base_ang_vel": (env.imu_ang_vel, nz.ang_vel),
        "projected_gravity": (env.gravity_b, nz.gravity),
        "command": (env.commands, 0.0),
        "joint_pos": (qpos[:, env._qj] - env.default_joint_pos, nz.joint_pos),
        "joint_vel": (qvel[:, env._vj], nz.joint_vel),
        "actions": (env.last_actions, 0.0),
    }
    return [(name, *terms[name]) for name in ORDER[env.cfg.observation_layout]]


ORDER = {
    "legged_gym": (
        "base_lin_vel",
        "base_ang_vel",
        "projected_gravity",
        "command",
        "joint_pos",
        "joint_vel",
        "actions",
    ),
    "mjlab": (
        "base_lin_vel",
        "base_ang_vel",
        "projected_gravity",
        "joint_pos",
        "joint_vel",
        "actions",
        "command",
    ),
}
"""The proprioceptive terms' order per observation layout (mjlab 1.6 velocity_env_cfg.py: actor_terms)."""

DEPLOYABLE = ("base_ang_vel", "projected_gravity", "command", "joint_pos", "joint_vel", "actions")
"""The proprioceptive terms a robot measures: the `policy` group (in the layout's order)."""


def _biased(name: str, value: torch.Tensor, env) -> torch.Tensor:
    return value + env.joint_pos_bias if name == "joint_pos" else value


def actor_proprio_terms(env, nz=None) -> list[tuple[str, torch.Tensor, float]]:
    """The actor's proprioceptive terms: `proprio_terms`, with the encoder offsets in the mjlab layout (mjlab's
    actor reads the biased joint positions; the critic the true ones)."""
    terms = proprio_terms(env, nz)
    if env.cfg.observation_layout != "mjlab":
        return terms
    return [(name, _biased(name, value, env), noise) for name, value, noise in terms]


def deployable_terms(env, nz=None) -> list[tuple[str, torch.Tensor, float]]:
    """The `policy` group's terms (name, value, noise half-range): the encoders' positions carry their offsets."""
    terms = [term for term in proprio_terms(env, nz) if term[0] in DEPLOYABLE]
    return [(name, _biased(name, value, env), noise) for name, value, noise in terms]


def noise_by_group(env, nz) -> dict[str, dict[str, dict[str, float]]]:
    """The noise the actor-side groups' terms get under the noise settings `nz`, for an export's metadata:
    {group: {term: {"per_step": half-range drawn at every step, "per_episode": half-range of an offset drawn at each
    reset and held}}}, from the terms `compute_observations` uses. The critic's observations are exact."""

    def noise(per_step: float, per_episode: float = 0.0) -> dict[str, float]:
        on = bool(nz.enabled)
        return {"per_step": float(per_step) if on else 0.0, "per_episode": float(per_episode) if on else 0.0}

    actor_bias = nz.joint_pos_bias if env.cfg.observation_layout == "mjlab" else 0.0
    actor = {
        name: noise(half, actor_bias if name == "joint_pos" else 0.0)
        for name, _, half in proprio_terms(env, nz)
    }
    if env.scan_points is not None and env.cfg.height_scan.in_actor:
        actor["height_scan"] = noise(nz.height_scan)
    policy = {  # the encoder offsets (draw_encoder_offsets) are the `policy` group's alone
        name: noise(half, nz.joint_pos_bias if name == "joint_pos" else 0.0)
        for name, _, half in deployable_terms(env, nz)
    }
    return {"actor": actor, "policy": policy}


def privileged_terms(env) -> list[tuple[str, torch.Tensor]]:
    """The critic's extra terms, in order, after the proprioceptive ones: (name, value)."""
    qpos = env.sim.qpos
    if (
        env.cfg.observation_layout == "mjlab"
    ):  # mjlab 1.6 velocity_env_cfg.py: critic_terms; the gait sensors'
        gait = env.gait
        force = gait.force.flatten(start_dim=1)
        return [
            ("foot_height", gait.pos_w[..., 2] - env.terrain_height(gait.pos_w[..., :2])),
            ("foot_air_time", gait.current_air_time),
            ("foot_contact", gait.in_contact.float()),
            ("foot_contact_forces", torch.sign(force) * torch.log1p(force.abs())),
        ]
    return [
        ("foot_contact", env.foot_contact.float()),
        ("foot_friction", env.foot_friction.unsqueeze(1)),
        ("added_trunk_mass", env.added_mass.unsqueeze(1)),
        ("base_height", (qpos[:, 2] - env.terrain_height(qpos[:, 0:2])).unsqueeze(1)),
    ]


def observation_terms(env) -> dict[str, list[tuple[str, int]]]:
    """Each group's terms and sizes, in column order."""
    proprio = [(name, value.shape[1]) for name, value, _ in proprio_terms(env)]
    privileged = [(name, value.shape[1]) for name, value in privileged_terms(env)]
    scan = [] if env.scan_points is None else [("height_scan", env.scan_points.shape[0])]
    actor_scan = scan if env.cfg.height_scan.in_actor else []
    policy = [(name, value.shape[1]) for name, value, _ in deployable_terms(env)]
    return {"actor": proprio + actor_scan, "critic": proprio + privileged + scan, "policy": policy}


def observation_clips(env) -> dict[str, tuple[float, float]]:
    """The clipped terms and their ranges: the height scan, where there is one (every other term is unclipped)."""
    if env.scan_points is None:
        return {}
    low, high = env.cfg.height_scan.clip
    return {"height_scan": (float(low), float(high))}


def compute_observations(env) -> dict[str, torch.Tensor]:
    """The actor's observations (with noise) and the critic's (exact, with the privileged terms)."""
    proprio = torch.cat([value for _, value, _ in proprio_terms(env)], dim=1)
    privileged = [value for _, value in privileged_terms(env)]
    critic = [proprio, *privileged]
    actor_clean = (
        proprio
        if env.cfg.observation_layout != "mjlab"
        else torch.cat([value for _, value, _ in actor_proprio_terms(env)], dim=1)
    )
    if env.scan_points is not None:
        scan = height_scan(env)
        critic.append(scan)
        if env.cfg.height_scan.in_actor:
            actor_clean = torch.cat((actor_clean, scan), dim=1)
    noise = (torch.rand_like(actor_clean) * 2 - 1) * env._actor_noise
    policy = torch.cat([value for _, value, _ in deployable_terms(env)], dim=1)
    policy_noise = (torch.rand_like(policy) * 2 - 1) * env._policy_noise
    return {"actor": actor_clean + noise, "critic": torch.cat(critic, dim=1), "policy": policy + policy_noise}


def actor_noise_scale(env, deployable: bool = False) -> torch.Tensor:
    """The actor's (or with `deployable`, the `policy` group's) noise half-range per observation column, from the
    terms `compute_observations` uses."""
    nz = env.cfg.noise
    terms = deployable_terms(env) if deployable else proprio_terms(env)
    parts = [(noise, value.shape[1]) for _, value, noise in terms]
    if deployable:
        scale = torch.cat([torch.full((k,), float(v)) for v, k in parts]).to(env.device)
        return scale if nz.enabled else torch.zeros_like(scale)
    if env.scan_points is not None and env.cfg.height_scan.in_actor:
        parts.append((nz.height_scan, env.scan_points.shape[0]))
    scale = torch.cat([torch.full((k,), float(v)) for v, k in parts]).to(env.device)
    return scale if nz.enabled else torch.zeros_like(scale)


def height_scan_points(scan, rough: bool, device) -> torch.Tensor | None:
    """The scan grid (P, 2) in the base-heading frame, or None when the scan is off."""
    if not scan.enabled:
        return None
    if not rough:
        raise ValueError("height_scan.enabled needs terrain.kind='rough' (flat ground has nothing to scan)")
    nx = round(scan.size[0] / scan.resolution) + 1
    ny = round(scan.size[1] / scan.resolution) + 1
    xs = torch.linspace(-scan.size[0] / 2, scan.size[0] / 2, nx, device=device)
    ys = torch.linspace(-scan.size[1] / 2, scan.size[1] / 2, ny, device=device)
    gx, gy = torch.meshgrid(xs, ys, indexing="ij")
    return torch.stack((gx.reshape(-1), gy.reshape(-1)), dim=1)


def height_scan(env) -> torch.Tensor:
    """(num_envs, P) base height above the terrain at the scan points, minus the offset, clipped to the config's
    range (`observation_clips` states it)."""
    if env.scan_points is None:
        raise RuntimeError("height_scan() needs height_scan.enabled (and rough terrain)")
    qpos = env.sim.qpos
    yaw = yaw_from_quat(qpos[:, 3:7])
    c, s = torch.cos(yaw).unsqueeze(1), torch.sin(yaw).unsqueeze(1)
    px, py = env.scan_points[:, 0], env.scan_points[:, 1]
    world = torch.stack((qpos[:, 0:1] + c * px - s * py, qpos[:, 1:2] + s * px + c * py), dim=-1)
    heights = env.terrain_height(world)
    scan = qpos[:, 2:3] - heights - env.cfg.height_scan.offset
    low, high = env.cfg.height_scan.clip
    return scan.clamp(low, high)
