"""Velocity commands (vx, vy, yaw rate; base frame): drawn per environment at reset and at a fixed interval."""

from __future__ import annotations

import torch

from mjfleet.tasks.locomotion.math import uniform_range


def resample_commands(env, mask: torch.Tensor) -> None:
    """Draw new commands for the environments in `mask`: uniform in the configured ranges, a share standing
    still, planar speeds below `min_speed` set to zero."""
    c, n, dev = env.cfg.commands, env.num_envs, env.device
    new = torch.stack(
        (
            uniform_range((n,), c.lin_vel_x, dev),
            uniform_range((n,), c.lin_vel_y, dev),
            uniform_range((n,), c.ang_vel_z, dev),
        ),
        dim=1,
    )
    standing = torch.rand(n, device=dev) < c.standing_fraction
    new[:, :2] *= (new[:, :2].norm(dim=1, keepdim=True) >= c.min_speed).float()
    new *= (~standing).float().unsqueeze(1)
    env.commands.copy_(torch.where(mask.unsqueeze(1), new, env.commands))
    env._command_steps.masked_fill_(mask, 0)


def resample_due_commands(env) -> None:
    """Redraw the commands of the environments whose resampling interval has run out."""
    resample_commands(env, env._command_steps >= env.command_resample_steps)


def update_tracking_metrics(env) -> None:
    """The velocity errors against the command, and the mean base-frame (vx, vy, wz) the robots achieved (to hold
    against a fixed evaluation command)."""
    torch.norm(env.commands[:, :2] - env.base_lin_vel[:, :2], dim=1, out=env._lin_vel_error)
    torch.abs(env.commands[:, 2] - env.base_ang_vel[:, 2], out=env._ang_vel_error)
    achieved = torch.cat((env.base_lin_vel[:, :2], env.base_ang_vel[:, 2:3]), dim=1)
    torch.mean(achieved.nan_to_num(0.0, 0.0, 0.0), dim=0, out=env._mean_base_vel)
