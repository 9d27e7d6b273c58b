"""Builds the algorithm a runner trains: for PPO, rsl_rl's models and storage, the reducer, FleetPPO and its
update engine; SAC is built by `mjfleet.rl.sac.build`.

Directly from the typed settings (`mjfleet.rl.config`), with no class looked up by name: the actor and critic are
rsl_rl's `MLPModel`s (the actor with mjfleet's `GaussianDistribution`), the storage rsl_rl's `RolloutStorage`.
"""

from __future__ import annotations

import logging

from tensordict import TensorDict

from mjfleet.launch.worker import WorkerContext
from mjfleet.rl.config import AgentConfig
from mjfleet.rl.distribution import GaussianDistribution
from mjfleet.rl.ppo import FleetPPO
from mjfleet.rl.reduce import Reducer, choose_reducer

log = logging.getLogger(__name__)

OBS_GROUPS = {"actor": ["actor"], "critic": ["critic"]}
"""Which observation groups each network reads: the environments' "actor" and "critic" groups."""


def build_algorithm(obs: TensorDict, env, agent: AgentConfig, ctx: WorkerContext):
    """The algorithm `agent.algorithm_name` names: FleetPPO (`build_ppo`) or FleetSAC (`mjfleet.rl.sac`)."""
    if agent.algorithm_name == "sac":
        from mjfleet.rl.sac.build import build_sac

        return build_sac(obs, env, agent, ctx)
    return build_ppo(obs, env, agent, ctx)


def build_ppo(
    obs: TensorDict, env, agent: AgentConfig, ctx: WorkerContext, algorithm: type[FleetPPO] = FleetPPO
) -> FleetPPO:
    """FleetPPO (or the variant `algorithm`) for `env`'s observations and actions, on `ctx.device`, averaging
    across `ctx`'s workers."""
    from rsl_rl.models import MLPModel
    from rsl_rl.storage import RolloutStorage

    agent.check(env.num_envs)
    device = ctx.device
    actor = MLPModel(
        obs,
        OBS_GROUPS,
        "actor",
        env.num_actions,
        hidden_dims=list(agent.actor.hidden_dims),
        activation=agent.actor.activation,
        obs_normalization=agent.actor.obs_normalization,
        distribution_cfg={
            "class_name": GaussianDistribution,
            "init_std": agent.actor.init_noise_std,
            "std_type": agent.actor.noise_std_type,
        },
    ).to(device)
    critic = MLPModel(
        obs,
        OBS_GROUPS,
        "critic",
        1,
        hidden_dims=list(agent.critic.hidden_dims),
        activation=agent.critic.activation,
        obs_normalization=agent.critic.obs_normalization,
    ).to(device)
    storage = RolloutStorage("rl", env.num_envs, agent.num_steps_per_env, obs, [env.num_actions], device)
    alg = algorithm(actor, critic, storage, agent.algorithm, device)
    alg.reducer = _reducer(agent, alg, ctx)
    if not agent.algorithm.fast_update:
        return alg
    if algorithm.minibatch_gradients is not FleetPPO.minibatch_gradients:
        log.warning("fast PPO update not used: %s changes the loss", algorithm.__name__)
        return alg
    from mjfleet.rl.fast import FastUpdate

    alg.attach_engine(FastUpdate.build(alg, agent.algorithm.capture_update))
    return alg


def _reducer(agent: AgentConfig, alg: FleetPPO, ctx: WorkerContext) -> Reducer | None:
    """The gradient reducer for several workers (collective: every rank chooses the same); None for one."""
    if not ctx.is_distributed:
        return None
    return choose_reducer(agent.algorithm.gradient_reducer, alg.flat_grad, ctx.group)
