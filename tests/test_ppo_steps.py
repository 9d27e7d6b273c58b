"""FleetPPO's optimizer step and gradient clipping against torch's own (mjfleet.rl.ppo)."""

import pytest
import torch

from mjfleet.rl.ppo import FusedAdamStep

SHAPES = [(1,), (64, 5), (64,), (64, 64), (64,), (1, 64), (1,)]


def _params_with_flat_gradients(seed):
    """Parameters whose .grad are views of one flat buffer, as FleetPPO sets them up."""
    generator = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator)) for s in SHAPES]
    flat = torch.zeros(sum(p.numel() for p in params))
    grads = [g.view_as(p) for g, p in zip(flat.split([p.numel() for p in params]), params, strict=True)]
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    return params, flat, grads


def test_fused_adam_step_is_bit_identical_to_adam_step_over_steps_and_learning_rate_changes():
    ours, ours_flat, ours_grads = _params_with_flat_gradients(0)
    theirs, theirs_flat, _ = _params_with_flat_gradients(0)
    ours_opt = torch.optim.Adam(ours, lr=1e-3, fused=True, weight_decay=0.01)
    theirs_opt = torch.optim.Adam(theirs, lr=1e-3, fused=True, weight_decay=0.01)
    assert FusedAdamStep.build(ours_opt, ours_grads) is None  # no state before the first step
    generator = torch.Generator().manual_seed(1)
    step = None
    for i in range(6):
        gradient = torch.randn(ours_flat.shape, generator=generator)
        ours_flat.copy_(gradient)
        theirs_flat.copy_(gradient)
        for opt in (ours_opt, theirs_opt):
            opt.param_groups[0]["lr"] = 1e-3 * 1.5**i  # as the adaptive schedule changes it between steps
        if step is None or i == 3:  # the first step of an update is torch's, then FusedAdamStep is built
            ours_opt.step()
            step = FusedAdamStep.build(ours_opt, ours_grads)
            assert step is not None
        else:
            step()
        theirs_opt.step()
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a, b)
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(ours_opt.state[a][key], theirs_opt.state[b][key])


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.Adam(ps, lr=1e-3),  # not fused
        lambda ps: torch.optim.Adam(ps, lr=1e-3, fused=True, amsgrad=True),
        lambda ps: torch.optim.Adam([{"params": ps[:3]}, {"params": ps[3:]}], lr=1e-3, fused=True),
        lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
        lambda ps: torch.optim.SGD(ps, lr=1e-3),
    ],
    ids=["unfused", "amsgrad", "two-groups", "adamw", "sgd"],
)
def test_fused_adam_step_is_only_built_for_plain_fused_adam(make):
    params, _, grads = _params_with_flat_gradients(0)
    opt = make(params)
    opt.step()
    assert FusedAdamStep.build(opt, grads) is None


def test_fused_adam_step_needs_the_optimizers_gradients():
    params, _, grads = _params_with_flat_gradients(0)
    opt = torch.optim.Adam(params, lr=1e-3, fused=True)
    opt.step()
    assert FusedAdamStep.build(opt, grads) is not None
    params[2].grad = grads[2].clone()  # no longer the view the step would read
    assert FusedAdamStep.build(opt, grads) is None


def test_clipping_equals_clip_grad_norm_per_network():
    from types import SimpleNamespace

    from mjfleet.rl.ppo import FleetPPO

    flat = torch.randn(1_001) * 3
    flat[500:-1] *= 0.001  # the second network's gradients are small: left unscaled
    expected = flat.clone()
    for segment in (expected[:500], expected[500:-1]):
        holder = torch.nn.Parameter(torch.zeros_like(segment))
        holder.grad = segment  # clip_grad_norm_ scales the view in place
        torch.nn.utils.clip_grad_norm_([holder], max_norm=1.0)
    alg = SimpleNamespace(max_grad_norm=1.0, _grad_segments=(flat[:500], flat[500:-1]))
    FleetPPO._clip_gradients(alg)
    torch.testing.assert_close(flat, expected, rtol=1e-6, atol=0.0)
    assert torch.equal(flat[500:-1], expected[500:-1])
    assert torch.linalg.vector_norm(flat[:500]) == pytest.approx(1.0, rel=1e-5)


def test_the_update_runs_in_tf32_on_cuda_only_when_asked():
    """FleetPPO.update_precision: TF32 matrix products on a CUDA device with tf32 on; otherwise the process's
    setting is left alone; restored afterwards, also when the update raises. (cuBLAS reads the flag per call, so
    setting it needs no GPU; tests/test_cuda.py runs updates with it on a GPU.)"""
    from types import SimpleNamespace

    from mjfleet.rl.config import PPOConfig
    from mjfleet.rl.ppo import FleetPPO

    assert PPOConfig().tf32  # the default, as mjlab trains
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    assert before != "tf32"  # torch's default: "none", i.e. IEEE float32
    cases = [("cuda:0", True, "tf32"), ("cuda:1", False, before), ("cpu", True, before)]
    for device, tf32, inside in cases:
        alg = SimpleNamespace(tf32=tf32, device=device)
        with FleetPPO.update_precision(alg):  # type: ignore[arg-type]
            assert matmul.fp32_precision == inside
        assert matmul.fp32_precision == before
    on_cuda = SimpleNamespace(tf32=True, device="cuda")
    with pytest.raises(RuntimeError), FleetPPO.update_precision(on_cuda):  # type: ignore[arg-type]
        assert matmul.fp32_precision == "tf32"
        raise RuntimeError("the update failed")
    assert matmul.fp32_precision == before


def test_a_variant_that_changes_the_loss_keeps_autograd():
    """AnalyticMinibatch writes FleetPPO's loss out by hand: a subclass overriding a loss method must not use it."""
    from mjfleet.rl.ppo import FleetPPO

    class DoubledSurrogate(FleetPPO):
        def _surrogate_loss(self, log_prob, batch):
            return super()._surrogate_loss(log_prob, batch) * 2.0

    class LoggingOnly(FleetPPO):
        def update(self):
            return super().update()

    assert FleetPPO.loss_is_fleet_ppos()
    assert LoggingOnly.loss_is_fleet_ppos()
    assert not DoubledSurrogate.loss_is_fleet_ppos()
