"""SAC's networks: a tanh-squashed Gaussian actor and twin Q critics, each with its observation normaliser.

The actor is called like rsl_rl's actor, `actor(obs, stochastic_output=False)` on a TensorDict of observation
groups, so that evaluation, `play` and the periodic evaluation use it as they use PPO's: the deterministic action
is center + half_range x tanh(mean), inside the bounds the environment states (`action_bounds()`).
"""

from __future__ import annotations

import math

import torch
from rsl_rl.modules import MLP, EmpiricalNormalization
from rsl_rl.utils import resolve_nn_activation
from torch import nn


def _normaliser(dim: int, enabled: bool) -> nn.Module:
    return EmpiricalNormalization(dim) if enabled else nn.Identity()


def q_network(input_dim: int, hidden_dims: tuple[int, ...], activation: str, layer_norm: bool) -> nn.Module:
    """input -> Q: rsl_rl's MLP, or with `layer_norm` one that normalises each hidden layer before its activation."""
    if not layer_norm:
        return MLP(input_dim, 1, list(hidden_dims), activation)
    layers: list[nn.Module] = []
    for width in hidden_dims:
        layers += [nn.Linear(input_dim, width), nn.LayerNorm(width), resolve_nn_activation(activation)]
        input_dim = width
    return nn.Sequential(*layers, nn.Linear(input_dim, 1))


class SquashedGaussianActor(nn.Module):
    """pi(a|s) = center + half_range x tanh(u), u ~ N(mu(s), sigma(s)^2): actions inside [low, high] by
    construction (per action dimension), with the log-probability corrected for the squashing."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: tuple[int, ...],
        activation: str,
        action_bounds: tuple[torch.Tensor, torch.Tensor],
        obs_normalization: bool,
        log_std_range: tuple[float, float] = (-5.0, 2.0),
        obs_group: str = "actor",
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        self.obs_group = obs_group
        self.obs_groups = [obs_group]
        """The groups the actor reads, in input order (what export and play's metadata list)."""
        self.obs_dim = obs_dim
        self.obs_normalization = obs_normalization
        self.obs_normalizer = _normaliser(obs_dim, obs_normalization)
        self.mlp = MLP(obs_dim, 2 * action_dim, list(hidden_dims), activation)
        self.action_dim = action_dim
        low, high = (torch.as_tensor(b, dtype=torch.float32).reshape(action_dim) for b in action_bounds)
        self.register_buffer("action_center", (high + low) / 2)
        self.register_buffer("action_half_range", (high - low) / 2)
        self.log_std_min, self.log_std_max = log_std_range
        if init_std is not None:
            self._start_at_std(init_std)

    @torch.no_grad()
    def _start_at_std(self, std: float) -> None:
        """Initialise the output layer's log-std half to give `std` (pre-squash) in every state: weights 0, the
        bias the inverse of `distribution`'s squashing (SACConfig.check keeps `std` inside its range)."""
        span = self.log_std_max - self.log_std_min
        inside = 2.0 * (math.log(std) - self.log_std_min) / span - 1.0
        out = self.mlp[-1]
        out.weight[self.action_dim :].zero_()
        out.bias[self.action_dim :].fill_(math.atanh(inside))

    def distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log std) of the pre-squash Gaussian for raw observations `x`."""
        mean, raw = self.mlp(self.obs_normalizer(x)).chunk(2, dim=-1)
        # tanh keeps log std within its range with a gradient everywhere (a clamp would cut it off)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def sample(
        self, x: torch.Tensor, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, the log-probability of its squashed form tanh(u), the distribution's std): a reparameterised
        draw, so gradients flow.
        `noise`: the standard-normal draw to use (tests replaying an update); None draws one."""
        mean, log_std = self.distribution(x)
        std = log_std.exp()
        u = mean + std * (torch.randn_like(mean) if noise is None else noise)
        squashed = torch.tanh(u)
        # log N(u) - sum log(d tanh(u)/d u), with log(1 - tanh(u)^2) written stably as 2 (log 2 - u - softplus(-2u)).
        # The density is that of tanh(u) in [-1, 1], before the affine map onto the bounds: the map adds a constant
        # (no gradient), and leaving it out keeps the entropy target (-action_dim) meaningful whatever the bounds.
        gaussian = -0.5 * ((u - mean) / std).square() - log_std - 0.5 * math.log(2 * math.pi)
        jacobian = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
        log_prob = (gaussian - jacobian).sum(dim=-1)
        return self.action_center + self.action_half_range * squashed, log_prob, std

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """center + half_range x tanh(mean): what an evaluated or deployed policy does."""
        mean, _ = self.distribution(x)
        return self.action_center + self.action_half_range * torch.tanh(mean)

    def random_actions(self, n: int) -> torch.Tensor:
        """`n` actions drawn uniformly from the bounds (the warm-up's)."""
        u = torch.rand(n, self.action_dim, device=self.action_center.device) * 2.0 - 1.0
        return self.action_center + self.action_half_range * u

    def forward(self, obs, stochastic_output: bool = False) -> torch.Tensor:
        x = obs[self.obs_group] if not isinstance(obs, torch.Tensor) else obs
        if stochastic_output:
            return self.sample(x)[0]
        return self.deterministic(x)

    def as_onnx(self, verbose: bool = False) -> DeterministicPolicy:
        """The deterministic policy as a module of one tensor input, for ONNX export (rsl_rl's `as_onnx`)."""
        return DeterministicPolicy(self)

    def as_jit(self) -> DeterministicPolicy:
        """The same module, for TorchScript."""
        return DeterministicPolicy(self)


class DeterministicPolicy(nn.Module):
    """obs (batch, obs_dim), unnormalised -> center + half_range x tanh(mean): what a deployment runs."""

    input_names = ["obs"]
    output_names = ["actions"]

    def __init__(self, actor: SquashedGaussianActor) -> None:
        super().__init__()
        import copy

        self.obs_normalizer = copy.deepcopy(actor.obs_normalizer)
        self.mlp = copy.deepcopy(actor.mlp)
        self.action_dim = actor.action_dim
        self.obs_dim = actor.obs_dim
        self.register_buffer("action_center", actor.action_center.detach().clone())
        self.register_buffer("action_half_range", actor.action_half_range.detach().clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean = self.mlp(self.obs_normalizer(obs))[..., : self.action_dim]
        return self.action_center + self.action_half_range * torch.tanh(mean)

    def get_dummy_inputs(self) -> tuple[torch.Tensor]:
        return (torch.zeros(1, self.obs_dim),)


def build_actor_from_checkpoint(state: dict, obs, num_actions: int, device) -> SquashedGaussianActor:
    """The actor a SAC checkpoint holds, in eval mode on `device` (`play`, export)."""
    cfg = state["agent_cfg"]["sac"]
    actor = SquashedGaussianActor(
        int(obs["actor"].shape[-1]),
        num_actions,
        tuple(cfg["actor_hidden_dims"]),
        cfg["activation"],
        (-torch.ones(num_actions), torch.ones(num_actions)),  # the checkpoint's bounds are buffers it holds
        bool(cfg["obs_normalization"]),
        (float(cfg["log_std_min"]), float(cfg["log_std_max"])),
    ).to(device)
    actor.load_state_dict(state["actor_state_dict"])
    actor.eval()
    return actor


class TwinCritic(nn.Module):
    """Two independent Q(s, a) networks over one shared observation normaliser (clipped double Q)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: tuple[int, ...],
        activation: str,
        obs_normalization: bool,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        self.obs_normalization = obs_normalization
        self.obs_normalizer = _normaliser(obs_dim, obs_normalization)
        self.q1 = q_network(obs_dim + action_dim, hidden_dims, activation, layer_norm)
        self.q2 = q_network(obs_dim + action_dim, hidden_dims, activation, layer_norm)

    def forward(self, x: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q1, Q2), each of shape (batch,), for raw observations `x`."""
        inputs = torch.cat((self.obs_normalizer(x), actions), dim=-1)
        return self.q1(inputs).squeeze(-1), self.q2(inputs).squeeze(-1)


class TargetCritic(nn.Module):
    """The Polyak-averaged copy of a `TwinCritic`: trained by `update_from` only, never by gradients."""

    def __init__(self, critic: TwinCritic) -> None:
        super().__init__()
        import copy

        self.net = copy.deepcopy(critic)
        self.net.requires_grad_(False)
        # The normaliser is the online critic's (shared statistics, never averaged): only the weights lag.
        self._weights = [p for n, p in self.net.named_parameters()]
        self._sources = [p for n, p in critic.named_parameters()]

    def forward(self, x: torch.Tensor, actions: torch.Tensor, critic: TwinCritic) -> torch.Tensor:
        """min(Q1', Q2') with the online critic's current normalisation."""
        inputs = torch.cat((critic.obs_normalizer(x), actions), dim=-1)
        return torch.minimum(self.net.q1(inputs), self.net.q2(inputs)).squeeze(-1)

    @torch.no_grad()
    def update_from(self, tau: float) -> None:
        """target <- (1 - tau) target + tau online, every weight in one fused operation."""
        torch._foreach_lerp_(self._weights, self._sources, tau)
