"""The averaged-gradient step PPO and SAC share (mjfleet.rl.gradients), in one process. Its reducers, with real
worker processes, are tests/test_distributed.py's `test_the_averaged_gradient_step_equals_...`."""

import copy

import pytest
import torch

from mjfleet.fleet.context import WorkerContext
from mjfleet.rl.gradients import AveragedGradients, RecordedGradients, fused


def _networks():
    torch.manual_seed(0)
    return {
        "actor": torch.nn.Linear(4, 2),
        "critic": torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 1)),
    }


def _step(networks, optimizer=None, **kwargs) -> AveragedGradients:
    params = {name: list(net.parameters()) for name, net in networks.items()}
    if optimizer is None:
        optimizer = torch.optim.Adam([p for ps in params.values() for p in ps], lr=0.01)
    return AveragedGradients(params, optimizer, **kwargs)


def _loss(networks, x):
    return networks["actor"](x).square().sum() + networks["critic"](x).sum()


def test_every_gradient_is_a_view_of_one_flat_buffer_with_the_extra_slots_behind():
    networks = _networks()
    grads = _step(networks, extra_slots=2)
    _loss(networks, torch.randn(8, 4)).backward()
    flat = grads.flat
    assert (
        grads.num_parameters
        == flat.numel() - 2
        == sum(p.numel() for n in networks.values() for p in n.parameters())
    )
    written = torch.cat([p.grad.reshape(-1) for n in networks.values() for p in n.parameters()])
    assert torch.equal(flat[:-2], written) and written.abs().sum() > 0
    assert torch.equal(grads.views["actor"], flat[: grads.views["actor"].numel()])
    assert grads.extra.numel() == 2 and not grads.extra.any()


def test_one_worker_has_no_reducer_and_averaging_leaves_the_gradients_alone():
    networks = _networks()
    grads = _step(networks)
    grads.connect("all-reduce", WorkerContext.single("cpu"))
    _loss(networks, torch.randn(8, 4)).backward()
    before = grads.flat.clone()
    grads.average()
    values = torch.arange(3.0)
    grads.sum_across_workers(values)
    assert grads.reducer is None and grads.reducer_name is None
    assert torch.equal(grads.flat, before) and torch.equal(values, torch.arange(3.0))
    assert grads.describe("minibatch") == ["one worker, nothing averaged"]


def test_clipping_each_network_equals_torchs_clip_grad_norm_per_network():
    networks = _networks()
    grads = _step(networks)
    _loss(networks, 10 * torch.randn(8, 4)).backward()
    expected = copy.deepcopy(networks)
    for name, net in expected.items():
        for p, q in zip(net.parameters(), networks[name].parameters(), strict=True):
            p.grad = q.grad.clone()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
    grads.clip(0.5)
    for name, net in expected.items():
        for p, q in zip(net.parameters(), networks[name].parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-6, atol=1e-7)
    assert torch.linalg.vector_norm(grads.views["actor"]) == pytest.approx(0.5, rel=1e-5)


def test_stepping_named_networks_leaves_the_others_and_their_optimizer_state_alone():
    networks = _networks()
    grads = _step(networks)
    _loss(networks, torch.randn(8, 4)).backward()
    actor = [p.detach().clone() for p in networks["actor"].parameters()]
    critic = [p.detach().clone() for p in networks["critic"].parameters()]
    grads.step(["critic"])
    assert all(torch.equal(a, p) for a, p in zip(actor, networks["actor"].parameters(), strict=True))
    assert all(not torch.equal(c, p) for c, p in zip(critic, networks["critic"].parameters(), strict=True))
    assert all(p not in grads.optimizer.state for p in networks["actor"].parameters())
    # the actor's gradients are views of the buffer again for the next step
    flat = grads.flat.untyped_storage().data_ptr()
    assert all(p.grad.untyped_storage().data_ptr() == flat for p in networks["actor"].parameters())


def test_accumulating_k_buffers_yields_their_mean_at_the_kth_or_at_a_groups_end():
    grads = _step(_networks(), extra_slots=1, sync_period=3)
    values = [torch.randn(grads.flat.shape) for _ in range(4)]
    ready = []
    for i, v in enumerate(values):
        grads.flat.copy_(v)
        ready.append(grads.accumulate(end_of_group=i == 3))
        if ready[-1]:
            mean = torch.stack(values[:3] if i == 2 else values[3:]).mean(0)
            torch.testing.assert_close(grads.flat, mean)
    assert ready == [False, False, True, True]  # the 4th ends its group early (an epoch's end)
    assert _step(_networks()).accumulate() is True  # K = 1: every buffer is a step


def test_a_plain_adam_becomes_torchs_fused_adam_with_its_groups_and_other_optimizers_stay():
    networks = _networks()
    groups = [{"params": list(networks["actor"].parameters()), "lr": 0.1}]
    groups.append({"params": list(networks["critic"].parameters()), "lr": 0.2})
    adam = fused(torch.optim.Adam(groups, betas=(0.8, 0.9)))
    assert adam.defaults["fused"] and adam.defaults["betas"] == (0.8, 0.9)
    assert all(
        group["fused"] for group in adam.param_groups
    )  # each group steps fused, not only the defaults say so
    assert [g["lr"] for g in adam.param_groups] == [0.1, 0.2]
    sgd = torch.optim.SGD(networks["actor"].parameters(), lr=0.1)
    assert fused(sgd) is sgd


def test_recorded_gradients_run_the_plain_computation_off_cuda():
    recorded = RecordedGradients("test step", "cpu", enabled=True)
    assert not recorded.enabled  # CUDA graphs only on CUDA

    def build():
        raise AssertionError("nothing is recorded on a CPU")

    assert recorded("key", build, lambda graph: "replayed", lambda: "plain") == "plain"
