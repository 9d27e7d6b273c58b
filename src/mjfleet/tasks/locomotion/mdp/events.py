"""Randomisation events: per-environment physics at start-up, pushes at random intervals, the initial state at
every reset, and the terrain curriculum that picks where a robot starts."""

from __future__ import annotations

import math

import torch

from mjfleet.errors import UsageError
from mjfleet.tasks.locomotion.math import quat_from_yaw, quat_rotate_inverse, uniform, uniform_range
from mjfleet.tasks.locomotion.terrain import HeightMap


def check_com_body(model, ev, prefix: str = "") -> None:
    """A UsageError naming the field when `com_body` names no body of the model."""
    if ev.com_body is None or ev.com_offset is None:
        return
    names = [model.body(i).name for i in range(1, model.nbody)]
    if ev.com_body not in names:
        raise UsageError(
            f"{prefix}env.events.com_body = {ev.com_body!r}: no body of this robot by that name (its bodies: "
            f"{', '.join(names)})"
        )


def check_added_mass(model, body: int, added: tuple[float, float] | None, prefix: str = "") -> None:
    """A UsageError naming the robot, the body and its mass when the range `added` (kg) can make that body's mass
    zero or negative (MuJoCo then diverges: NaN resets in every iteration)."""
    if added is None:
        return
    mass, low = float(model.body_mass[body]), min(added)
    if mass + low <= 0:
        raise UsageError(
            f"{prefix}env.events.added_trunk_mass = {tuple(added)}: body {model.body(body).name!r} weighs "
            f"{mass:.3g} kg, so adding {low:g} kg leaves it no mass; give a range above {-mass:.3g} kg "
            f"(e.g. --env.events.added-trunk-mass {-0.25 * mass:.2g} {0.5 * mass:.2g}), or none"
        )


def randomize_physics(env) -> None:
    """Start-up randomisation, once per environment: foot friction, added trunk mass, the centre-of-mass offset, the
    encoder offsets where they are drawn once (`noise.joint_pos_bias_per_episode` False), the push range."""
    ev, n, dev = env.cfg.events, env.num_envs, env.device
    if not env.cfg.noise.joint_pos_bias_per_episode:
        draw_encoder_offsets(env, torch.ones(n, 1, dtype=torch.bool, device=dev))
    range_ = ev.push_velocity_range
    env._push_range = None if range_ is None else torch.tensor(range_, dtype=torch.float32, device=dev)
    robot = getattr(env, "robot", None)
    check_added_mass(env.mj_model, env.trunk_body, ev.added_trunk_mass, f"{robot.name}: " if robot else "")
    friction = env.sim.model_view("geom_friction")  # (n, ngeom, 3), one copy per world
    if ev.foot_friction is None:  # nominal: the model's own (what the critic observes, too)
        env.foot_friction = friction[:, env.foot_geoms[0], 0].clone()
    else:
        env.foot_friction = uniform_range((n,), ev.foot_friction, dev)
        friction[:, env.foot_geoms, 0] = env.foot_friction.unsqueeze(1)
    if ev.added_trunk_mass is None:  # nominal: the model's own mass
        env.added_mass = torch.zeros(n, device=dev)
    else:
        env.added_mass = uniform_range((n,), ev.added_trunk_mass, dev)
    mass = env.sim.model_view("body_mass")  # (n, nbody)
    mass[:, env.trunk_body] += env.added_mass
    if ev.com_offset is not None:
        body = env.trunk_body if ev.com_body is None else env.mj_model.body(ev.com_body).id
        half = torch.tensor(ev.com_offset, dtype=torch.float32, device=dev)
        env.com_offset = (torch.rand(n, 3, device=dev) * 2 - 1) * half
        env.sim.model_view("body_ipos")[:, body] += env.com_offset
    else:
        env.com_offset = torch.zeros(n, 3, device=dev)
    env.sim.set_constants()  # the subtree masses, centres and inverse weights of each world's trunk


def draw_encoder_offsets(env, mask: torch.Tensor) -> None:
    """New encoder offsets (`noise.joint_pos_bias`) for the environments `mask` (n, 1) marks, in place."""
    nz = env.cfg.noise
    bias = nz.joint_pos_bias if nz.enabled else 0.0
    if bias > 0:
        drawn = (torch.rand_like(env.joint_pos_bias) * 2 - 1) * bias
        env.joint_pos_bias.copy_(torch.where(mask, drawn, env.joint_pos_bias))


def draw_push_steps(env) -> torch.Tensor:
    """Policy steps until the next push, drawn for every environment (callers pick with a mask)."""
    low, high = (t / env.step_dt for t in env.cfg.events.push_interval_s)
    steps = low + torch.rand(env.num_envs, device=env.device) * (high - low)
    return steps.long().clamp(min=1)


def push_robots(env) -> None:
    """Add a random velocity to the base of the environments whose push timer runs out: horizontal
    (`push_velocity`), or in all six world-frame directions (`push_velocity_range`; the angular part enters the
    free joint's body-frame velocity rotated)."""
    ev = env.cfg.events
    if ev.push_velocity <= 0 and env._push_range is None:  # no pushes (a setting, not a tensor value)
        return
    env._push_steps -= 1
    push = (env._push_steps <= 0).unsqueeze(1)
    if env._push_range is None:
        dv = (torch.rand(env.num_envs, 2, device=env.device) * 2 - 1) * ev.push_velocity
        env.sim.qvel[:, 0:2] += dv * push
    else:
        dv = (torch.rand(env.num_envs, 6, device=env.device) * 2 - 1) * env._push_range
        spin = quat_rotate_inverse(env.sim.qpos[:, 3:7], dv[:, 3:6])
        env.sim.qvel[:, 0:6] += torch.cat((dv[:, :3], spin), dim=1) * push
    env._push_steps.copy_(torch.where(push.squeeze(1), draw_push_steps(env), env._push_steps))


def reset_robot_state(env, mask: torch.Tensor) -> None:
    """The initial state of the environments in `mask`: a random spot near their terrain origin, above the
    ground, a random heading, joints near the default pose and small random velocities."""
    ev, n, dev = env.cfg.events, env.num_envs, env.device
    offset = uniform((n, 2), ev.spawn_xy, dev)
    xy = env.env_origins[:, :2] + offset
    if env.height_map is not None:
        # Stand above the highest ground under the robot's footprint, whatever its heading.
        grid = torch.linspace(-0.3, 0.3, 5, device=dev)
        footprint = torch.stack(torch.meshgrid(grid, grid, indexing="ij"), dim=-1).reshape(-1, 2)
        ground = env.height_map(xy.unsqueeze(1) + footprint).amax(dim=1)
    else:
        ground = torch.zeros(n, device=dev)
    yaw = (torch.rand(n, device=dev) * 2 - 1) * math.pi
    nj = len(env.joint_names)
    joints = env.default_joint_pos + uniform((n, nj), ev.joint_pos, dev)
    joints = torch.maximum(torch.minimum(joints, env.joint_upper), env.joint_lower)
    height = ground + ev.spawn_height
    if ev.spawn_height_spread > 0:  # drawn only where asked: the quadruped's random stream stays as it was
        height = height + uniform((n,), ev.spawn_height_spread, dev)
    qpos = torch.cat((xy, height.unsqueeze(1), quat_from_yaw(yaw), joints), dim=1)
    qvel = torch.cat(
        (
            uniform((n, 3), ev.base_lin_vel, dev),
            uniform((n, 3), ev.base_ang_vel, dev),
            uniform((n, nj), ev.joint_vel, dev),
        ),
        dim=1,
    )
    m = mask.unsqueeze(1)
    env.sim.qpos.copy_(torch.where(m, qpos, env.sim.qpos))
    env.sim.qvel.copy_(torch.where(m, qvel, env.sim.qvel))
    env._root_xy.copy_(torch.where(m, xy, env._root_xy))


def place_on_terrain(env) -> None:
    """Where each environment starts: the origin, and on rough ground its tile (a level of the curriculum, a column
    of terrain types), the height map and the map's edges (walking off them ends an episode as a time-out)."""
    n, dev, tcfg = env.num_envs, env.device, env.cfg.terrain
    env.env_origins = torch.zeros(n, 3, device=dev)
    env.curriculum = env.terrain is not None and tcfg.curriculum
    if env.terrain is None:
        env.height_map = None
        return
    env.height_map = HeightMap(env.terrain.heights, tcfg.horizontal_scale, dev)
    env.tile_origins = torch.as_tensor(env.terrain.origins, dtype=torch.float32, device=dev)
    env.num_levels = tcfg.num_levels
    env.terrain_types = torch.arange(n, device=dev) % tcfg.num_cols
    top = min(tcfg.max_init_level, tcfg.num_levels - 1) if env.curriculum else tcfg.num_levels - 1
    env.terrain_levels = torch.randint(0, top + 1, (n,), device=dev)
    env.env_origins[:] = env.tile_origins[env.terrain_levels, env.terrain_types]
    env._root_xy[:] = env.env_origins[:, :2]
    margin = 1.0  # metres from the map's edge at which an episode ends as a time-out
    env._map_low = margin
    env._map_high = torch.tensor([env.terrain.length_x - margin, env.terrain.length_y - margin], device=dev)


def update_terrain_levels(env, mask: torch.Tensor) -> None:
    """The curriculum, for the environments in `mask`: robots that walked past their tile's edge move a level up;
    those that covered less than half the distance their command asked for move a level down. Robots beyond the
    top level restart at a random one."""
    distance = (env._root_xy - env.env_origins[:, :2]).norm(dim=1)
    move_up = distance > 0.5 * env.cfg.terrain.tile_size
    asked = env.commands[:, :2].norm(dim=1) * env.cfg.episode_length_s
    move_down = (distance < 0.5 * asked) & ~move_up
    levels = env.terrain_levels + mask.long() * (move_up.long() - move_down.long())
    levels = torch.where(
        levels >= env.num_levels, torch.randint_like(levels, env.num_levels), levels.clamp(min=0)
    )
    env.terrain_levels.copy_(levels)
    env.env_origins.copy_(env.tile_origins[levels, env.terrain_types])
