"""Builds the SAC a runner trains: networks, replay buffer and reducer for one worker's environment."""

from __future__ import annotations

import torch

from mjfleet.errors import UsageError
from mjfleet.fleet.context import WorkerContext
from mjfleet.rl.build import select_observations
from mjfleet.rl.config import AgentConfig
from mjfleet.rl.sac.algorithm import FleetSAC
from mjfleet.rl.sac.networks import SquashedGaussianActor, TwinCritic
from mjfleet.rl.sac.replay import ReplayBuffer


def build_sac(obs, env, agent: AgentConfig, ctx: WorkerContext) -> FleetSAC:
    """FleetSAC for `env`'s observations and actions on `ctx.device`, averaging across `ctx`'s workers.

    The environment is asked to report the observation before each reset (`record_final_observations`): SAC
    bootstraps a time-out from the state the episode reached, which the post-reset observation is not.
    """
    cfg = agent.sac
    agent.check(env.num_envs)
    if not hasattr(env, "record_final_observations"):
        raise ValueError(
            f"{type(env).__name__} cannot report the observation before a reset, which SAC's time-out "
            "bootstrapping needs (MujocoVecEnv's record_final_observations)"
        )
    env.record_final_observations = True
    device = ctx.device
    critic_group = "critic" if cfg.asymmetric_critic and "critic" in obs.keys() else "actor"
    obs = select_observations(env, obs, ["actor", critic_group])
    bounds = action_bounds(env, cfg.action_bound, cfg.action_low, cfg.action_high)
    actor = SquashedGaussianActor(
        obs["actor"].shape[-1],
        env.num_actions,
        cfg.actor_hidden_dims,
        cfg.activation,
        bounds,
        cfg.obs_normalization,
        (cfg.log_std_min, cfg.log_std_max),
        init_std=cfg.init_std,
    ).to(device)
    critic = TwinCritic(
        obs[critic_group].shape[-1],
        env.num_actions,
        cfg.critic_hidden_dims,
        cfg.activation,
        cfg.obs_normalization,
        layer_norm=cfg.critic_layer_norm,
    ).to(device)
    buffer = ReplayBuffer(
        cfg.buffer_size,
        env.num_envs,
        obs["actor"].shape[-1],
        obs[critic_group].shape[-1],
        env.num_actions,
        device,
    )
    alg = FleetSAC(actor, critic, buffer, cfg, device, critic_group=critic_group)
    alg.gradients.connect(cfg.gradient_reducer, ctx)
    return alg


def action_bounds(
    env, bound: float, low: tuple[float, ...] = (), high: tuple[float, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) per action: `low` and `high` when given (one per action), else +-`bound` when it is set (> 0),
    else the environment's `action_bounds()` (the joint limits for locomotion tasks) made symmetric about 0, else
    its clip range.

    Symmetric about 0 because the policy's mean action at initialisation, tanh(0), lands on the bounds' center:
    for the locomotion tasks action 0 is the default pose, and the center of a joint's limits is not (a thigh
    1 rad off), so an unbounded-center policy starts by collapsing the robot. Each joint keeps the largest range
    about its default pose that stays within its limits."""
    n = env.num_actions
    if low:
        if len(low) != n:
            raise UsageError(
                f"--agent.sac.action-low/high give {len(low)} bounds; the environment has "
                f"{n} action{'s' if n != 1 else ''}"
            )
        return torch.tensor(low), torch.tensor(high)
    if bound > 0:
        return torch.full((n,), -bound), torch.full((n,), bound)
    if hasattr(env, "action_bounds"):
        low, high = (b.float().cpu() for b in env.action_bounds())
        if (low < 0).all() and (high > 0).all():
            half = torch.minimum(-low, high)
            return -half, half
        return low, high
    clip = float(env.cfg.clip_actions)
    return torch.full((n,), -clip), torch.full((n,), clip)
