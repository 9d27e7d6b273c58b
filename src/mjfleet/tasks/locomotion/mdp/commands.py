"""Velocity commands (vx, vy, yaw rate; base frame): drawn per environment at reset and when its resampling time
runs out, then held, except where heading control or standing still rewrites them at every step.

The draw: each column uniform in its range; planar speeds below `min_speed` set to zero; a share of forward-only
commands (vx = max(|vx|, forward_min_speed), no sideways or yaw); a share of heading-controlled environments, whose
yaw rate is `heading_stiffness` x the error to a random heading target, clipped to the yaw range, at every step; a
share standing still (all zeros, whatever else was drawn). The resampling time is fixed, or uniform in a range
(mjlab 1.6's UniformVelocityCommand: 3-8 s, 10 % standing, 30 % heading control at stiffness 0.5, 20 % forward).
The ranges live in a tensor (`env.command_ranges`), which `velocity_stages` widens as training goes on (mjlab's
velocity curriculum), in place, so that a recorded CUDA-graph step draws from the new ranges.
"""

from __future__ import annotations

import math

import torch

from mjfleet.tasks.locomotion.math import uniform_range, yaw_from_quat


def wrap_to_pi(angle: torch.Tensor) -> torch.Tensor:
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


def setup(env) -> None:
    """The command state of `env`: the commands, the ranges they are drawn from, the steps since and to each
    environment's next draw, the heading-controlled environments and their targets."""
    n, dev = env.num_envs, env.device
    env.commands = torch.zeros(n, 3, device=dev)
    env.command_ranges = command_ranges(env.cfg).to(dev)
    """(3, 2): the (low, high) commands are drawn from (vx, vy, yaw rate), widened by the velocity curriculum."""
    env._command_steps = torch.zeros(n, dtype=torch.long, device=dev)
    env.command_resample_steps = draw_resample_steps(env)
    env.heading_command = torch.zeros(n, dtype=torch.bool, device=dev)
    env.heading_target = torch.zeros(n, device=dev)  # rad, world frame


def fix(env, vx: float, vy: float, wz: float) -> None:
    """Command (vx, vy, wz) at every later draw (`CommandConfig.fix`) in a built environment: its draw ranges too,
    and no heading control from now on."""
    env.cfg.commands.fix(vx, vy, wz)
    env.command_ranges.copy_(command_ranges(env.cfg))
    env.heading_command.zero_()


def follow_curriculum(env, steps_per_env: int) -> dict[str, float]:
    """The velocity curriculum's ranges after `steps_per_env` policy steps of training, written in place (a recorded
    step graph reads this buffer); what to log."""
    if not env.cfg.commands.velocity_stages:
        return {}
    ranges = command_ranges(env.cfg, steps_per_env)
    env.command_ranges.copy_(ranges)
    return {"Train/command_lin_vel_x_max": float(ranges[0, 1])}


def draw_resample_steps(env) -> torch.Tensor:
    """Policy steps until each environment's next draw (callers pick with a mask): fixed, or uniform in the
    configured range of seconds, counted up to the step at which that much time has passed."""
    c, n, dev = env.cfg.commands, env.num_envs, env.device
    if c.resampling_time_range_s is None:  # no draw: a fixed interval takes nothing of the random stream
        return torch.full(
            (n,), max(1, round(c.resampling_time_s / env.step_dt)), dtype=torch.long, device=dev
        )
    low, high = c.resampling_time_range_s
    seconds = low + torch.rand(n, device=dev) * (high - low)
    return torch.ceil(seconds / env.step_dt - 1e-6).long().clamp(min=1)


def resample_commands(env, mask: torch.Tensor) -> None:
    """Draw new commands for the environments in `mask` (see the module docstring)."""
    c, n, dev = env.cfg.commands, env.num_envs, env.device
    low, high = env.command_ranges[:, 0], env.command_ranges[:, 1]  # the curriculum widens them in place
    new = low + torch.rand(3, n, device=dev).T * (high - low)  # column by column, as three draws would be
    new[:, :2] *= (new[:, :2].norm(dim=1, keepdim=True) >= c.min_speed).float()
    if c.forward_fraction > 0:
        forward = (torch.rand(n, device=dev) < c.forward_fraction).unsqueeze(1)
        only_x = torch.cat(
            (new[:, :1].abs().clamp(min=c.forward_min_speed), torch.zeros_like(new[:, 1:])), dim=1
        )
        new = torch.where(forward, only_x, new)
    standing = torch.rand(n, device=dev) < c.standing_fraction
    new *= (~standing).float().unsqueeze(1)
    env.commands.copy_(torch.where(mask.unsqueeze(1), new, env.commands))
    if c.heading_fraction > 0:  # a standing environment stands, heading or not
        heading = uniform_range((n,), c.heading, dev)
        env.heading_target.copy_(torch.where(mask, heading, env.heading_target))
        controlled = (torch.rand(n, device=dev) < c.heading_fraction) & ~standing
        env.heading_command.copy_(torch.where(mask, controlled, env.heading_command))
    env._command_steps.masked_fill_(mask, 0)
    if c.resampling_time_range_s is not None:
        env.command_resample_steps.copy_(
            torch.where(mask, draw_resample_steps(env), env.command_resample_steps)
        )
    update_commands(env)


def update_commands(env) -> None:
    """The rewrite at every step: the heading-controlled environments' yaw rate from their heading error."""
    c = env.cfg.commands
    if c.heading_fraction > 0:
        error = wrap_to_pi(env.heading_target - yaw_from_quat(env.sim.qpos[:, 3:7]))
        yaw = torch.maximum(
            torch.minimum(c.heading_stiffness * error, env.command_ranges[2, 1]), env.command_ranges[2, 0]
        )
        env.commands[:, 2] = torch.where(env.heading_command, yaw, env.commands[:, 2])


def command_ranges(cfg, steps_per_env: int = 0) -> torch.Tensor:
    """(3, 2): the (low, high) of vx, vy and the yaw rate after `steps_per_env` policy steps of training: the
    configured ranges, widened by each `velocity_stages` entry whose step has passed (mjlab's commands_vel)."""
    c = cfg.commands
    ranges = [list(c.lin_vel_x), list(c.lin_vel_y), list(c.ang_vel_z)]
    for step, vx_low, vx_high, wz_low, wz_high in sorted(c.velocity_stages):
        if steps_per_env >= step:
            ranges[0], ranges[2] = [vx_low, vx_high], [wz_low, wz_high]
    return torch.tensor(ranges, dtype=torch.float32)


def resample_due_commands(env) -> None:
    """Redraw the commands of the environments whose resampling time has run out; rewrite the others'."""
    due = env._command_steps >= env.command_resample_steps
    resample_commands(env, due)


def update_tracking_metrics(env) -> None:
    """The velocity errors against the command, and the mean base-frame (vx, vy, wz) the robots achieved (to hold
    against a fixed evaluation command)."""
    torch.norm(env.commands[:, :2] - env.base_lin_vel[:, :2], dim=1, out=env._lin_vel_error)
    torch.abs(env.commands[:, 2] - env.base_ang_vel[:, 2], out=env._ang_vel_error)
    achieved = torch.cat((env.base_lin_vel[:, :2], env.base_ang_vel[:, 2:3]), dim=1)
    torch.mean(achieved.nan_to_num(0.0, 0.0, 0.0), dim=0, out=env._mean_base_vel)
