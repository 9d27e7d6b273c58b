"""Cart-pole reward terms: plain functions `fn(env) -> (num_envs,) tensor`, each in [0, 1], weighted by the fields
of the same name in `CartpoleRewards`."""

from __future__ import annotations

import torch


def upright(env) -> torch.Tensor:
    """(1 + cos(pole angle)) / 2: 1 upright, 0 hanging."""
    return torch.cos(env._theta).add_(1.0).mul_(0.5)


def centered(env) -> torch.Tensor:
    """exp(-x^2): 1 with the cart at the rail's centre."""
    return env._x.square().neg_().exp_()


def small_control(env) -> torch.Tensor:
    """exp(-action^2): 1 without force."""
    return env._action.square().neg_().exp_()


def small_velocity(env) -> torch.Tensor:
    """exp(-pole angular velocity^2 / 4): 1 with the pole at rest."""
    return env._theta_dot.square().mul_(-0.25).exp_()


def upright_product(env) -> torch.Tensor:
    """The four terms as one product (dm_control's cart-pole reward), scaled into [0, 1]."""
    return (
        upright(env) * (1.0 + centered(env)) * (4.0 + small_control(env)) * (1.0 + small_velocity(env)) / 20.0
    )


TERMS = {
    "upright": upright,
    "centered": centered,
    "small_control": small_control,
    "small_velocity": small_velocity,
    "upright_product": upright_product,
}
"""Each reward term by the name of its weight."""
