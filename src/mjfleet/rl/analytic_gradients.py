"""The PPO minibatch loss of MLP actor and critic networks, with its gradients written out layer by layer.

On a CPU the update of a small policy is bound by operator overhead, not arithmetic: for Cartpole's 64-64
networks at 64 environments a minibatch is ~400 torch operations through autograd (saved tensors, transposes,
accumulation nodes, the distribution objects) around ~40 that do the work. `AnalyticMinibatch` computes the same
loss and the same gradients with only those: each network's forward pass keeps its layer outputs, the loss's
derivative with respect to the action mean, the standard deviation and the value is written in closed form, and
the backward pass is two matrix products and one activation derivative per layer, written straight into the
optimizer's flat gradient buffer.

The mathematics is rsl_rl's PPO loss (clipped surrogate, optionally clipped value loss, entropy bonus) for a
feed-forward `MLPModel` with a state-independent Gaussian; where torch's autograd splits a gradient at a tie
(`torch.max` of equal values, `clamp` at its bounds) the same split is used. Anything else (recurrent or CNN
models, other distributions or activations, mixed precision) keeps autograd: `AnalyticMinibatch.build` returns
None for it. tests/test_analytic_gradients.py checks losses, gradients and KL against autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from rsl_rl.modules.distribution import GaussianDistribution as RslGaussian
from torch import nn

from mjfleet.rl.distribution import GaussianDistribution

_LOG_SQRT_2PI = math.log(math.sqrt(2.0 * math.pi))
_LOG2_E = 1.0 / math.log(2.0)
_GAUSSIANS = (RslGaussian, GaussianDistribution)


@dataclass
class _Layer:
    linear: nn.Linear
    weight_grad: torch.Tensor
    bias_grad: torch.Tensor
    activation: str | None  # after the linear map: "elu", "relu", "tanh" or None
    alpha: float = 1.0  # ELU's


def _activation_kind(module: nn.Module) -> tuple[str, float] | None:
    if type(module) is nn.ELU and not module.inplace:
        return "elu", float(module.alpha)
    if type(module) is nn.ReLU:
        return "relu", 0.0
    if type(module) is nn.Tanh:
        return "tanh", 0.0
    return None


def _elu(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """ELU as max(x, alpha (exp(min(x, 0)) - 1)), equal to torch's elu within float32 rounding.

    torch's CPU elu evaluates expm1, which in this build is ~7x slower than exp (1,536 x 512 on one thread: 4.9
    ms against 0.9 ms for these four operations); it was 28% of the quadruped's update. exp(x) - 1 differs from
    expm1(x) by at most ~6e-8 (relative precision is lost only where the result is tiny). For alpha <= 1 the
    negative branch is >= x everywhere and 0 for x >= 0, so the maximum selects the right branch (a maximum
    runs ~40x faster than torch.where with a mask here); larger alphas use torch's elu.

    The input is also clamped below at -20: exp(x) - 1 rounds to -1 in float32 for every x < -17.3 anyway, and
    exp of arguments far below that (hidden pre-activations of +-360 occur) leaves the vectorised fast path
    (384 x 64: 115 us against 25 us). And exp(x) is evaluated as exp2(x log2(e)): torch's exp2 is 2.6x faster than
    its exp here (384 x 64: 8 against 21 us) and agrees with it within 2.4e-7 relative.
    """
    if not 0.0 < alpha <= 1.0:
        return torch.nn.functional.elu(x, alpha)
    negative = x.clamp(-20.0, 0.0).mul_(_LOG2_E).exp2_().sub_(1.0)
    if alpha != 1.0:
        negative.mul_(alpha)
    return torch.maximum(x, negative, out=negative)


class _Network:
    """An rsl_rl MLP (Linear, activation, ..., Linear) run forward and backward by hand."""

    def __init__(self, model: nn.Module, grads: dict[nn.Parameter, torch.Tensor]) -> None:
        self.model = model
        self.layers: list[_Layer] = []
        for module in model.mlp:
            if isinstance(module, nn.Linear):
                self.layers.append(_Layer(module, grads[module.weight], grads[module.bias], None))
                continue
            kind = _activation_kind(module)
            if kind is None or not self.layers or self.layers[-1].activation is not None:
                raise _Unsupported(f"MLP layer {module}")
            self.layers[-1].activation, self.layers[-1].alpha = kind
        if self.layers[-1].activation is not None:
            raise _Unsupported("an activation after the output layer")

    def forward(self, obs, out: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The network's output (written into `out` when given) and every layer's input (the first: the
        normalised observations)."""
        groups = self.model.obs_groups
        if len(groups) == 1:  # MLPModel.get_latent without concatenating a single group
            x = self.model.obs_normalizer(obs[groups[0]])
        else:
            x = self.model.get_latent(obs)
        inputs = []
        last = self.layers[-1]
        for layer in self.layers:
            inputs.append(x)
            linear = layer.linear
            if layer is last and out is not None:
                x = torch.addmm(linear.bias, x, linear.weight.t(), out=out)
                break
            x = torch.addmm(linear.bias, x, linear.weight.t())
            if layer.activation == "elu":
                x = _elu(x, layer.alpha)
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
                # Few inputs, many outputs (the first layer): MKL computes x^T g several times faster than g^T x
                # here (Cartpole's 5 -> 64 at 384 rows: 10 us against 35; 48 -> 512 at 1,536: 860 against 1,120).
                layer.weight_grad.copy_(torch.mm(x.t(), g).t())
            else:
                torch.mm(g.t(), x, out=layer.weight_grad)
            torch.sum(g, dim=0, out=layer.bias_grad)
            if i == 0:
                break
            g = torch.mm(g, weight)
            # The derivative of the previous layer's activation, from its output (= this layer's input).
            previous = self.layers[i - 1]
            if previous.activation == "elu":
                g = torch.ops.aten.elu_backward(g, previous.alpha, 1.0, 1.0, True, x)
            elif previous.activation == "relu":
                g = torch.ops.aten.threshold_backward(g, x, 0.0)
            elif previous.activation == "tanh":
                g = torch.ops.aten.tanh_backward(g, x)


class _Unsupported(Exception):
    pass


@dataclass
class RolloutSlot:
    """Where `AnalyticMinibatch.act` writes one rollout step (views of one row of the rollout storage)."""

    actions: torch.Tensor  # (envs, actions)
    values: torch.Tensor  # (envs, 1)
    log_prob: torch.Tensor  # (envs, 1)
    mean: torch.Tensor  # (envs, actions)
    std: torch.Tensor  # (envs, actions)


class AnalyticMinibatch:
    """One PPO minibatch: losses, mean KL, and every trained parameter's gradient, without autograd.

    Call it with a feed-forward minibatch (rsl_rl's `Batch`): it overwrites the gradient of every parameter the
    optimizer trains (so nothing needs zeroing) and returns the detached [surrogate, value, entropy] losses and the
    mean KL between the rollout's and the current policy (None unless the learning rate adapts to it).
    """

    def __init__(self, alg, grads: dict[nn.Parameter, torch.Tensor]) -> None:
        self.alg = alg
        actor, critic = alg.actor, alg.critic
        dist = actor.distribution
        if type(dist) not in _GAUSSIANS:
            raise _Unsupported(f"distribution {type(dist).__name__}")
        self.dist = dist
        self.actor = _Network(actor, grads)
        self.critic = _Network(critic, grads)
        self.std_param = dist.std_param if dist.std_type == "scalar" else dist.log_std_param
        self.std_grad = grads.get(self.std_param)  # None: the standard deviation is not learned
        covered = {
            id(t)
            for net in (self.actor, self.critic)
            for layer in net.layers
            for t in (layer.weight_grad, layer.bias_grad)
        }
        if self.std_grad is not None:
            covered.add(id(self.std_grad))
        if covered != {id(g) for g in grads.values()}:
            raise _Unsupported("parameters outside the MLPs and the standard deviation")
        self.policy_changes = 0
        """Bumped by the owner whenever an optimizer may have changed the parameters (see _rollout_std_terms)."""
        self._std_cache: tuple[tuple, tuple] | None = None

    @classmethod
    def build(cls, alg, grads: dict[nn.Parameter, torch.Tensor]) -> AnalyticMinibatch | None:
        """An instance for `alg`'s networks, or None where they need autograd (see the module's docstring)."""
        if alg.use_mixed_precision or alg.actor.is_recurrent or alg.critic.is_recurrent:
            return None
        if not all(hasattr(m, "mlp") and hasattr(m, "get_latent") for m in (alg.actor, alg.critic)):
            return None
        try:
            return cls(alg, grads)
        except (_Unsupported, AttributeError, KeyError):
            return None

    def std_terms(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(std, d std / d parameter, 1 / std^2, log std), std as GaussianDistribution.update computes it.

        Computed afresh at every call: the parameter's version counter cannot tell whether it changed (torch's
        fused Adam writes it without bumping the counter).
        """
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
    def _log_prob(
        sq: torch.Tensor, inv_var: torch.Tensor, log_std: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """log pi(a) = sum_j -(a_j - mean_j)^2 / (2 std_j^2) - log std_j - log sqrt(2 pi), from (a - mean)^2."""
        terms = sq.mul(inv_var).mul_(-0.5).sub_(log_std)
        return torch.sum(terms, dim=-1, out=out).sub_(_LOG_SQRT_2PI * sq.shape[-1])

    def _rollout_std_terms(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`std_terms()`, computed once per policy: the rollout's steps share them. The cache is keyed on the
        parameter's version and storage and on `policy_changes` (bumped by FleetPPO after every update, since a
        fused optimizer step does not bump the version)."""
        p = self.std_param
        key = (p._version, p.data_ptr(), self.policy_changes)
        if self._std_cache is None or self._std_cache[0] != key:
            self._std_cache = (key, self.std_terms())
        return self._std_cache[1]

    @torch.no_grad()
    def act(
        self, obs, out: RolloutSlot | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Sampled actions, values, log-probabilities and (mean, std) for a rollout step, as rsl_rl's PPO.act
        computes them (the same draw: mean + std * N(0, 1), like GaussianDistribution.sample). With `out` every
        result is written into those tensors (the rollout storage's row) and returned as them."""
        mean, _ = self.actor.forward(obs, out=None if out is None else out.mean)
        values, _ = self.critic.forward(obs, out=None if out is None else out.values)
        std, _, inv_var, log_std = self._rollout_std_terms()
        noise = torch.randn_like(mean)
        if out is None:
            actions = torch.addcmul(mean, std, noise)
            sq = (actions - mean).square_()
            return actions, values, self._log_prob(sq, inv_var, log_std), (mean, std.expand_as(mean))
        actions = torch.addcmul(mean, std, noise, out=out.actions)
        sq = torch.sub(actions, mean, out=noise).square_()
        self._log_prob(sq, inv_var, log_std, out=out.log_prob.view(-1))
        out.std.copy_(std.expand_as(mean))
        return actions, values, out.log_prob, (mean, out.std)

    @torch.no_grad()
    def __call__(self, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        alg = self.alg
        n = batch.actions.shape[0]
        mean, actor_inputs = self.actor.forward(batch.observations)
        values, critic_inputs = self.critic.forward(batch.observations)
        std, dstd_dparam, inv_var, log_std = self.std_terms()

        diff = batch.actions - mean
        sq = diff.square()
        log_prob = self._log_prob(sq, inv_var, log_std)
        entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum()

        # Clipped surrogate: mean(max(-A r, -A clip(r))), r = exp(log pi - log pi_old).
        # d/dr = -A where r is inside the clip range (autograd: half through each equal branch, whose halves add
        # up) or where the unclipped branch is the larger; 0 where the clipped branch wins. Both cases are
        # "unclipped >= clipped": the branches tie exactly when r is inside the range (or A = 0, where -A r = 0).
        eps = alg.clip_param
        negative_advantages = batch.advantages.squeeze(-1).neg()
        ratio = torch.exp(log_prob - batch.old_actions_log_prob.squeeze(-1))
        clipped = ratio.clamp(1.0 - eps, 1.0 + eps)
        surrogate, surrogate_clipped = negative_advantages * ratio, negative_advantages * clipped
        surrogate_loss = torch.maximum(surrogate, surrogate_clipped).mean()
        dloss_dlogp = surrogate.mul_(surrogate >= surrogate_clipped).div_(n)  # (n,): surrogate = -A r

        # d log pi / d mean = (a - mean) / std^2;  d log pi / d std = (a - mean)^2 / std^3 - 1 / std
        grad_mean = diff.mul_(inv_var).mul_(dloss_dlogp.unsqueeze(-1))
        if self.std_grad is not None:
            # sum_i dL/dlogp_i ((a-mean)^2/std^2 - 1) / std, and -entropy_coef / std from the entropy bonus
            per_dim = (
                torch.mv(sq.t(), dloss_dlogp).mul_(inv_var).sub_(dloss_dlogp.sum()).sub_(alg.entropy_coef)
            )
            torch.mul(per_dim.div_(std), dstd_dparam, out=self.std_grad)

        value_loss, grad_values = self._value_loss(values, batch, n)
        grad_values.mul_(alg.value_loss_coef)

        self.actor.backward(grad_mean, actor_inputs)
        self.critic.backward(grad_values, critic_inputs)

        kl = None
        if alg.desired_kl is not None and alg.schedule == "adaptive":
            kl = self._mean_kl(batch.old_distribution_params, mean, std)
        terms = torch.stack((surrogate_loss, value_loss, entropy)).float()
        return terms, kl

    def _value_loss(self, values: torch.Tensor, batch, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The value loss and its derivative with respect to the values (n x 1)."""
        returns = batch.returns
        error = values - returns
        if not self.alg.use_clipped_value_loss:
            return error.square().mean(), error.mul(2.0 / n)
        eps = self.alg.clip_param
        delta = values - batch.values
        delta_clipped = delta.clamp(-eps, eps)
        clipped_error = batch.values + delta_clipped - returns
        sq, sq_clipped = error.square(), clipped_error.square()
        loss = torch.maximum(sq, sq_clipped).mean()
        # torch.max's gradient: all to the larger branch, half to each when equal (weight 1, 0 or 1/2 on the
        # unclipped one); clamp's: 1 inside its range, bounds included, 0 outside.
        weight = sq.sub_(sq_clipped).sign_().mul_(0.5).add_(0.5)
        clipped_error.mul_(delta_clipped == delta)
        # lerp is exact at the weights 0 and 1: error w + clipped_error (1 - w)
        return loss, torch.lerp(clipped_error, error, weight).mul_(2.0 / n)

    @staticmethod
    def _mean_kl(old_params, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Mean over the batch of KL(old || new), summed over action dimensions (torch's Normal-Normal formula)."""
        old_mean, old_std = old_params
        var_ratio = (old_std / std).pow(2)
        t1 = ((old_mean - mean) / std).pow(2)
        return (0.5 * (var_ratio + t1 - 1.0 - var_ratio.log())).sum(-1).mean()
