"""Batched math helpers in torch: quaternions (MuJoCo's (w, x, y, z), unit length, shape (..., 4)) and uniform draws."""

from __future__ import annotations

import torch


def quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors `v` (..., 3) by quaternions `q` (..., 4): the body-to-world map for a body's orientation."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors `v` by the inverse of `q`: world-frame vectors expressed in the body frame."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v - w * t + torch.cross(u, t, dim=-1)


def velocities_at(
    lin: torch.Tensor, ang: torch.Tensor, offset: torch.Tensor, frame: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A rigid body's (linear, angular) velocity (n, 3), body frame, as a sensor at `offset` (3,) in orientation
    `frame` (4,) on it measures them: the linear velocity of that point, both turned into the sensor's frame."""
    n = lin.shape[0]
    at_point = lin + torch.cross(ang, offset.expand(n, 3), dim=1)
    return quat_rotate_inverse(frame.expand(n, 4), at_point), quat_rotate_inverse(frame.expand(n, 4), ang)


def quat_from_yaw(yaw: torch.Tensor) -> torch.Tensor:
    """Rotations about world z by `yaw` (rad), shape (..., 4)."""
    half = 0.5 * yaw
    zero = torch.zeros_like(half)
    return torch.stack((torch.cos(half), zero, zero, torch.sin(half)), dim=-1)


def yaw_from_quat(q: torch.Tensor) -> torch.Tensor:
    """Heading angle (rotation about world z) of orientations `q`."""
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def projected_gravity(q: torch.Tensor) -> torch.Tensor:
    """The unit gravity direction (0, 0, -1) expressed in the body frame; (0, 0, -1) when upright.

    Written out (the third column of R^T, negated) so it costs a few multiplications, no cross products.
    """
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        (2.0 * (w * y - x * z), -2.0 * (w * x + y * z), -(1.0 - 2.0 * (x * x + y * y))),
        dim=-1,
    )


def uniform(shape, half_range: float, device) -> torch.Tensor:
    """Uniform draws in [-half_range, half_range)."""
    return (torch.rand(shape, device=device) * 2.0 - 1.0) * half_range


def uniform_range(shape, bounds: tuple[float, float], device) -> torch.Tensor:
    """Uniform draws in [bounds[0], bounds[1])."""
    return bounds[0] + torch.rand(shape, device=device) * (bounds[1] - bounds[0])
