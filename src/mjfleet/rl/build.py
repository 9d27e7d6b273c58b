"""Builds PPO for a runner: rsl_rl's models and storage, FleetPPO and its reducer; and PPO's
actor back out of a checkpoint (`play`, export). SAC's counterpart is `mjfleet.rl.sac.build`; the runner reaches
either through `mjfleet.rl.algorithm`.

Directly from the typed settings (`mjfleet.rl.config`), with no class looked up by name: the actor and critic are
rsl_rl's `MLPModel`s (the actor with mjfleet's `GaussianDistribution`), the storage rsl_rl's `RolloutStorage`.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from mjfleet.errors import UsageError, first_line
from mjfleet.fleet.context import WorkerContext
from mjfleet.rl.config import AgentConfig
from mjfleet.rl.distribution import GaussianDistribution
from mjfleet.rl.ppo import FleetPPO
from mjfleet.runs.run_dir import to_plain


def build_ppo(
    obs: TensorDict, env, agent: AgentConfig, ctx: WorkerContext, algorithm: type[FleetPPO] = FleetPPO
) -> FleetPPO:
    """FleetPPO (or the variant `algorithm`) for `env`'s observations and actions, on `ctx.device`, averaging
    across `ctx`'s workers."""
    from rsl_rl.models import MLPModel, RNNModel
    from rsl_rl.storage import RolloutStorage

    agent.check(env.num_envs)
    device = ctx.device
    missing = [group for group in agent.actor.obs_groups if group not in obs.keys()]
    if missing:
        raise UsageError(
            f"--agent.actor.obs-groups: no observation group {missing}; the env has {list(obs.keys())}"
        )
    obs_groups = {"actor": list(agent.actor.obs_groups), "critic": ["critic"]}
    obs = select_observations(env, obs, [*agent.actor.obs_groups, "critic"])
    recurrence = agent.actor_recurrence()
    actor = (RNNModel if recurrence else MLPModel)(
        obs,
        obs_groups,
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
        **recurrence,
    ).to(device)
    critic = MLPModel(
        obs,
        obs_groups,
        "critic",
        1,
        hidden_dims=list(agent.critic.hidden_dims),
        activation=agent.critic.activation,
        obs_normalization=agent.critic.obs_normalization,
    ).to(device)
    storage = RolloutStorage("rl", env.num_envs, agent.num_steps_per_env, obs, [env.num_actions], device)
    alg = algorithm(actor, critic, storage, agent.ppo, device, policy_cfg=to_plain(agent.to_rsl_rl()))
    alg.gradients.connect(agent.ppo.gradient_reducer, ctx)
    return alg


def select_observations(env, obs: TensorDict, groups) -> TensorDict:
    """The environment returns only `groups` from now on (where it can select): `obs` so selected."""
    select = getattr(env, "select_observations", None)
    return select(groups) if select is not None else obs.select(*groups)


def ppo_actor_from_checkpoint(
    state: dict[str, Any], obs: TensorDict, num_actions: int, device: str | torch.device = "cpu"
):
    """The actor (rsl_rl MLPModel, normaliser included) a PPO checkpoint holds, in eval mode on `device`; `obs`
    is one observation batch of the environment it will act in (for the group sizes)."""
    from rsl_rl.utils import resolve_class

    cfg = state["rsl_rl_cfg"]
    actor_class, actor_cfg = resolve_class(cfg["actor"])
    actor = actor_class(obs, cfg["obs_groups"], "actor", num_actions, **actor_cfg).to(device)
    actor.load_state_dict(state["actor_state_dict"])
    actor.eval()
    return actor


def ppo_from_student(alg: FleetPPO, state: dict[str, Any]) -> None:
    """PPO fine-tuning a distilled student: the student's network (and normaliser) becomes the actor's mean; the
    action noise starts at `--agent.actor.init-noise-std`, the critic and the optimiser start fresh, and the first
    `critic_warmup_iterations` updates train the critic alone."""
    try:
        missing, unexpected = alg.actor.load_state_dict(state["actor_state_dict"], strict=False)
        foreign = [*unexpected, *(key for key in missing if not key.startswith("distribution."))]
    except RuntimeError as exc:  # a layer of another shape
        foreign = [first_line(exc)]
    if foreign:
        raise UsageError(
            f"the student's network does not fit this PPO actor ({', '.join(foreign[:3])}): "
            "fine-tune with the student's --agent.actor settings"
        )
    alg.critic_only_updates = alg.critic_warmup_iterations
