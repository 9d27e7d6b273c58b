"""The PPO minibatch loss of MLP actor and critic networks, with its gradients written out layer by layer.

On a CPU the update of a small policy is bound by operator overhead, not arithmetic: through autograd a
Cartpole minibatch is ~400 torch operations (saved tensors, transposes, accumulation nodes, distribution objects)
around ~40 that do the work. `MlpGradients` computes the same loss and gradients with only those: each network's
forward pass keeps its layer inputs, the loss's derivatives with respect to the action mean, the standard
deviation and the value are written in closed form, and each layer's backward pass is two matrix products and
one activation derivative, written straight into the reference's flat gradient buffer.

The mathematics is rsl_rl's PPO loss (clipped surrogate, optionally clipped value loss, entropy bonus) for a
feed-forward `MLPModel` with a state-independent Gaussian; where autograd splits a gradient at a tie (`max` of
equal values, `clamp` at its bounds) the same split is used. Anything else raises `Unsupported` at construction.
tests/test_fast_update.py checks losses, KL and every gradient against the reference's autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from rsl_rl.models import MLPModel
from rsl_rl.modules import EmpiricalNormalization
from rsl_rl.modules.distribution import GaussianDistribution as RslGaussian
from torch import nn

from mjfleet.rl.distribution import GaussianDistribution

_LOG_SQRT_2PI = math.log(math.sqrt(2.0 * math.pi))
_LOG2_E = 1.0 / math.log(2.0)


class Unsupported(Exception):
    """The networks are not what `MlpGradients` writes out: the reference update runs instead."""


@dataclass
class _Layer:
    linear: nn.Linear
    weight_grad: torch.Tensor
    bias_grad: torch.Tensor
    activation: str | None = None  # after the linear map: "elu", "relu", "tanh" or None
    alpha: float = 1.0  # ELU's


def _activation(module: nn.Module) -> tuple[str, float]:
    if type(module) is nn.ELU and not module.inplace and 0.0 < module.alpha <= 1.0:
        return "elu", float(module.alpha)
    if type(module) is nn.ReLU:
        return "relu", 0.0
    if type(module) is nn.Tanh:
        return "tanh", 0.0
    raise Unsupported(f"activation {module}")


def elu(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """ELU (0 < alpha <= 1) as max(x, alpha (exp(min(x, 0)) - 1)): torch's CPU elu evaluates expm1, several times
    slower than exp here, and a maximum picks the branch far faster than torch.where. exp(x) is evaluated as
    exp2(x log2 e), faster again on CPU; both agree with torch's elu within float32 rounding. The clamp at -20
    keeps exp's argument in its vectorised range (exp(x) - 1 rounds to -1 below -17.3 anyway)."""
    negative = x.clamp(-20.0, 0.0).mul_(_LOG2_E).exp2_().sub_(1.0)
    if alpha != 1.0:
        negative.mul_(alpha)
    return torch.maximum(x, negative, out=negative)


class _Network:
    """An rsl_rl MLPModel (observation normaliser, Linear, activation, ..., Linear) run forward and backward by
    hand. The normaliser's statistics are read through `refresh()`, into tensors this object owns, so that a
    recorded CUDA graph keeps reading the current ones."""

    def __init__(self, model: nn.Module, grads: dict[nn.Parameter, torch.Tensor]) -> None:
        cls = type(model)
        if getattr(model, "is_recurrent", False):
            raise Unsupported("a recurrent network")
        if not isinstance(model, MLPModel) or cls.get_latent is not MLPModel.get_latent:
            raise Unsupported(f"network {cls.__name__}")
        self.model = model
        self.groups = list(model.obs_groups)
        self.layers: list[_Layer] = []
        for module in model.mlp:
            if isinstance(module, nn.Linear):
                self.layers.append(_Layer(module, grads[module.weight], grads[module.bias]))
            elif self.layers and self.layers[-1].activation is None:
                self.layers[-1].activation, self.layers[-1].alpha = _activation(module)
            else:
                raise Unsupported(f"MLP layer {module}")
        if not self.layers or self.layers[-1].activation is not None:
            raise Unsupported("an activation after the output layer")
        normalizer = model.obs_normalizer
        if isinstance(normalizer, EmpiricalNormalization):
            self.norm = normalizer
            self.mean, self.std = normalizer.mean, normalizer.std
        elif isinstance(normalizer, nn.Identity):
            self.norm = None
        else:
            raise Unsupported(f"observation normaliser {type(normalizer).__name__}")

    def refresh(self) -> None:
        """Read the normaliser's current statistics (rsl_rl replaces its std tensor at every update)."""
        if self.norm is not None:
            self.mean.copy_(self.norm.mean)
            self.std.copy_(self.norm.std)

    def forward(self, obs) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The network's output and every layer's input (the first: the normalised observations)."""
        x = obs[self.groups[0]] if len(self.groups) == 1 else torch.cat([obs[g] for g in self.groups], dim=-1)
        if self.norm is not None:
            x = (x - self.mean) / (self.std + self.norm.eps)  # EmpiricalNormalization.forward's arithmetic
        inputs = []
        for layer in self.layers:
            inputs.append(x)
            x = torch.addmm(layer.linear.bias, x, layer.linear.weight.t())
            if layer.activation == "elu":
                x = elu(x, layer.alpha)
            elif layer.activation == "relu":
                x = torch.relu(x)
            elif layer.activation == "tanh":
                x = torch.tanh(x)
        return x, inputs

    def backward(self, grad_output: torch.Tensor, inputs: list[torch.Tensor]) -> None:
        """Write d(loss)/d(every weight and bias) into their gradient views, given d(loss)/d(output)."""
        g = grad_output
        for i in range(len(self.layers) - 1, -1, -1):
            layer, x = self.layers[i], inputs[i]
            weight = layer.linear.weight
            if weight.shape[1] * 4 <= weight.shape[0]:
                # Few inputs, many outputs (a first layer): MKL computes x^T g several times faster than g^T x.
                layer.weight_grad.copy_(torch.mm(x.t(), g).t())
            else:
                torch.mm(g.t(), x, out=layer.weight_grad)
            torch.sum(g, dim=0, out=layer.bias_grad)
            if i == 0:
                break
            g = torch.mm(g, weight)
            # The previous layer's activation derivative, from its output x (this layer's input).
            previous = self.layers[i - 1]
            if previous.activation == "elu":  # 1 where x > 0, else x + alpha (= alpha exp(pre-activation))
                slope = x.clamp(max=0.0).add_(previous.alpha)
                if previous.alpha != 1.0:
                    slope = torch.where(x > 0.0, 1.0, slope)
                g = g.mul_(slope)
            elif previous.activation == "relu":
                g = g.mul_(x > 0.0)
            elif previous.activation == "tanh":
                g = g.mul_(1.0 - x.square())


class MlpGradients:
    """One PPO minibatch of `alg` (FleetPPO): losses, mean KL, and every trained parameter's gradient, without
    autograd; and rollout actions from the same forward pass."""

    def __init__(self, alg) -> None:
        dist = alg.actor.distribution
        if type(dist) not in (RslGaussian, GaussianDistribution):
            raise Unsupported(f"distribution {type(dist).__name__}")
        self.alg, self.dist = alg, dist
        grads = {p: p.grad for p in alg.trained}
        self.actor = _Network(alg.actor, grads)
        self.critic = _Network(alg.critic, grads)
        self.std_param = dist.std_param if dist.std_type == "scalar" else dist.log_std_param
        self.std_grad = grads.get(self.std_param)  # None: the standard deviation is not learned
        covered = {
            id(t)
            for net in (self.actor, self.critic)
            for x in net.layers
            for t in (x.weight_grad, x.bias_grad)
        }
        if self.std_grad is not None:
            covered.add(id(self.std_grad))
        if covered != {id(g) for g in grads.values()}:
            raise Unsupported("trained parameters outside the MLPs and the standard deviation")
        self.rollout_std = self.std_terms()

    def refresh(self) -> None:
        """The policy changed (an update, a load, a broadcast): re-read what the rollout caches."""
        self.actor.refresh()
        self.critic.refresh()
        self.rollout_std = self.std_terms()

    def std_terms(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(std, d std / d parameter, 1 / std^2, log std), std as rsl_rl's GaussianDistribution computes it."""
        dist, p = self.dist, self.std_param.detach()
        # clamp's derivative is 1 inside its range, bounds included, and 0 outside: where the clamp left p as is.
        if dist.std_type == "scalar":
            std = p.clamp(*dist.std_range)
            dstd = (std == p).to(p.dtype)
        else:
            log_std = p.clamp(*dist.log_std_range)
            std = log_std.exp()
            dstd = std * (log_std == p)
        return std, dstd, std.pow(-2), std.log()

    @staticmethod
    def _log_prob(sq: torch.Tensor, inv_var: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
        """log pi(a) = sum_j -(a_j - mean_j)^2 / (2 std_j^2) - log std_j - log sqrt(2 pi), from (a - mean)^2."""
        terms = sq.mul(inv_var).mul_(-0.5).sub_(log_std)
        return terms.sum(dim=-1).sub_(_LOG_SQRT_2PI * sq.shape[-1])

    @torch.no_grad()
    def act(self, obs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Sampled actions, values, log-probabilities and (mean, std) for a rollout step, as rsl_rl's PPO.act
        computes them (the same draw: mean + std * N(0, 1))."""
        mean, _ = self.actor.forward(obs)
        values, _ = self.critic.forward(obs)
        std, _, inv_var, log_std = self.rollout_std
        noise = torch.randn_like(mean)
        actions = torch.addcmul(mean, std, noise)
        log_prob = self._log_prob(torch.sub(actions, mean, out=noise).square_(), inv_var, log_std)
        return actions, values, log_prob, (mean, std.expand_as(mean))

    @torch.no_grad()
    def __call__(self, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Overwrite every trained parameter's gradient with this minibatch's; return the detached
        [surrogate, value, entropy] losses and the mean KL (None unless the learning rate adapts to it)."""
        loss = self.alg.loss  # FleetPPO's settings of the loss this writes out
        n = batch.actions.shape[0]
        mean, actor_inputs = self.actor.forward(batch.observations)
        values, critic_inputs = self.critic.forward(batch.observations)
        std, dstd_dparam, inv_var, log_std = self.std_terms()

        advantages = batch.advantages.squeeze(-1)
        if loss.normalize_advantage_per_mini_batch:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        diff = batch.actions - mean
        sq = diff.square()
        log_prob = self._log_prob(sq, inv_var, log_std)
        entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum()

        # Clipped surrogate: mean(max(-A r, -A clip(r))), r = exp(log pi - log pi_old). d/dr = -A where the
        # unclipped branch is at least the clipped one (inside the clip range they tie, and autograd's halves
        # add up), else 0.
        eps = loss.clip_param
        ratio = torch.exp(log_prob - batch.old_actions_log_prob.squeeze(-1))
        surrogate = advantages.neg() * ratio
        surrogate_clipped = advantages.neg() * ratio.clamp(1.0 - eps, 1.0 + eps)
        surrogate_loss = torch.maximum(surrogate, surrogate_clipped).mean()
        dloss_dlogp = surrogate.mul_(surrogate >= surrogate_clipped).div_(n)  # surrogate = -A r

        # d log pi / d mean = (a - mean) / std^2;  d log pi / d std = (a - mean)^2 / std^3 - 1 / std
        grad_mean = diff.mul_(inv_var).mul_(dloss_dlogp.unsqueeze(-1))
        if self.std_grad is not None:
            # sum_i dL/dlogp_i ((a-mean)^2/std^2 - 1) / std, and -entropy_coef / std from the entropy bonus
            per_dim = (
                torch.mv(sq.t(), dloss_dlogp).mul_(inv_var).sub_(dloss_dlogp.sum()).sub_(loss.entropy_coef)
            )
            torch.mul(per_dim.div_(std), dstd_dparam, out=self.std_grad)

        value_loss, grad_values = self._value_loss(values, batch, n, loss)
        self.actor.backward(grad_mean, actor_inputs)
        self.critic.backward(grad_values.mul_(loss.value_loss_coef), critic_inputs)

        kl = None
        if loss.adaptive_kl:
            kl = self._mean_kl(batch.old_distribution_params, mean, std)
        return torch.stack((surrogate_loss, value_loss, entropy)).float(), kl

    def _value_loss(self, values: torch.Tensor, batch, n: int, loss) -> tuple[torch.Tensor, torch.Tensor]:
        """The value loss and its derivative with respect to the values (n x 1)."""
        error = values - batch.returns
        if not loss.use_clipped_value_loss:
            return error.square().mean(), error.mul(2.0 / n)
        eps = loss.clip_param
        delta = values - batch.values
        delta_clipped = delta.clamp(-eps, eps)
        clipped_error = batch.values + delta_clipped - batch.returns
        sq, sq_clipped = error.square(), clipped_error.square()
        value_loss = torch.maximum(sq, sq_clipped).mean()
        # max's gradient goes to the larger branch, half to each when equal (weight 1, 0 or 1/2 on the unclipped
        # one); clamp's is 1 inside its range, bounds included, 0 outside.
        weight = sq.sub_(sq_clipped).sign_().mul_(0.5).add_(0.5)
        clipped_error.mul_(delta_clipped == delta)
        return value_loss, torch.lerp(clipped_error, error, weight).mul_(
            2.0 / n
        )  # lerp is exact at weights 0 and 1

    @staticmethod
    def _mean_kl(old_params, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Mean over the batch of KL(old || new), summed over action dimensions (torch's Normal-Normal formula)."""
        old_mean, old_std = old_params
        var_ratio = (old_std / std).pow(2)
        t1 = ((old_mean - mean) / std).pow(2)
        return (0.5 * (var_ratio + t1 - 1.0 - var_ratio.log())).sum(-1).mean()
