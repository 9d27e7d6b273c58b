"""The fast update engine (mjfleet.rl.fast) against the reference PPO's autograd and rsl_rl's own act."""

import pytest
import torch
from small_cartpole import cartpole_configs, rollout

from mjfleet.rl import FleetRunner
from mjfleet.rl.fast import FastUpdate
from mjfleet.rl.fast.mlp import elu
from mjfleet.rl.ppo import FleetPPO


def _rollout_runner(activation="elu", std_type="scalar", obs_normalization=False, **ppo):
    """A FleetRunner on 16 Cartpole envs whose storage holds one 8-step rollout."""
    spec, env_cfg, agent = cartpole_configs(episode_length_s=0.2)
    for net in (agent.actor, agent.critic):
        net.activation = activation
        net.obs_normalization = obs_normalization
    agent.actor.noise_std_type = std_type
    for key, value in ppo.items():
        setattr(agent.ppo, key, value)
    torch.manual_seed(3)
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    alg = runner.alg
    rollout(runner, returns=True)
    if obs_normalization:  # non-trivial statistics, as after some training
        flat = alg.storage.observations.flatten(0, 1)
        alg.actor.update_normalization(flat)
        alg.critic.update_normalization(flat)
        alg.policy_changed()
    return runner


def _perturb(alg, scale=0.3):
    """Move the networks away from the rollout's policy, so ratios and values leave their clip ranges."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in alg.trained:
            p.add_(scale * torch.randn(p.shape, generator=generator))
    alg.policy_changed()


LOSS_CASES = {
    "elu-scalar-std": dict(),
    "relu-log-std-normalised-unclipped-value": dict(
        activation="relu", std_type="log", obs_normalization=True, use_clipped_value_loss=False
    ),
    "tanh-fixed-schedule": dict(activation="tanh", obs_normalization=True, schedule="fixed"),
    "other-coefficients": dict(clip_param=0.1, value_loss_coef=0.5, entropy_coef=0.03),
}
"""Network variants and, between them, a change of every `PPOLoss` setting (the test below checks that)."""
SETTING_OF_FIELD = {"adaptive_kl": "schedule"}
"""`PPOLoss` fields that follow from another setting: the setting that changes them."""


def test_the_loss_cases_change_every_setting_of_the_loss_the_engine_writes_out():
    """The reference's loss is the one source of truth: every PPOLoss setting is one the engine declares it
    writes out, and the equality test below changes each of them (normalize_advantage_per_mini_batch by its own
    parameter). A setting added to PPOLoss fails here until the engine writes it out and a case changes it."""
    import dataclasses

    from mjfleet.rl.fast import WRITTEN_OUT
    from mjfleet.rl.ppo import PPOLoss

    fields = {f.name for f in dataclasses.fields(PPOLoss)}
    assert fields == WRITTEN_OUT
    changed = {key for case in LOSS_CASES.values() for key in case} | {"normalize_advantage_per_mini_batch"}
    assert {SETTING_OF_FIELD.get(name, name) for name in fields} <= changed


@pytest.mark.parametrize("settings", LOSS_CASES.values(), ids=LOSS_CASES.keys())
@pytest.mark.parametrize("normalize_advantages", [False, True])
def test_losses_kl_and_every_gradient_equal_the_reference(settings, normalize_advantages):
    runner = _rollout_runner(**settings)
    alg = runner.alg
    assert isinstance(alg.engine, FastUpdate)
    alg.normalize_advantage_per_mini_batch = normalize_advantages
    _perturb(alg)
    clipped_ratios = clipped_values = 0
    for batch in alg.storage.mini_batch_generator(alg.num_mini_batches, 1):
        advantages = batch.advantages.clone()  # the reference normalises them in place
        terms, kl = alg.minibatch_gradients(batch)
        grads = alg.gradients.flat[:-1].clone()
        batch.advantages = advantages
        alg.gradients.flat.fill_(float("nan"))  # every gradient must be written, not left over
        our_terms, our_kl = alg.engine.gradients(batch)
        torch.testing.assert_close(our_terms, terms, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(alg.gradients.flat[:-1], grads, rtol=1e-4, atol=1e-6)
        if settings.get("schedule") == "fixed":
            assert kl is None and our_kl is None
        else:
            torch.testing.assert_close(our_kl, kl, rtol=1e-5, atol=1e-7)
        with torch.no_grad():  # the branches the test means to cover were taken
            alg.actor(batch.observations, stochastic_output=True)
            ratio = torch.exp(
                alg.actor.get_output_log_prob(batch.actions) - batch.old_actions_log_prob.squeeze()
            )
            clipped_ratios += int(((ratio - 1).abs() > alg.clip_param).sum())
            delta = alg.critic(batch.observations) - batch.values
            clipped_values += int((delta.abs() > alg.clip_param).sum())
    assert clipped_ratios > 0 and clipped_values > 0


def test_the_fast_update_equals_the_reference_update():
    """A whole update (all epochs and minibatches, the adaptive learning rate, the normaliser's statistics):
    parameters, learning rate and losses agree."""
    runs = []
    for fast in (True, False):
        runner = _rollout_runner(obs_normalization=True)
        if not fast:
            runner.alg.engine = None
        torch.manual_seed(5)
        runs.append((runner.alg, runner.alg.optimize()))
    (ours, our_losses), (theirs, their_losses) = runs
    for key in ("value", "surrogate", "entropy"):
        assert our_losses[key] == pytest.approx(their_losses[key], rel=1e-4, abs=1e-6)
    assert ours.learning_rate == theirs.learning_rate
    for a, b in zip(ours.trained, theirs.trained, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for model in ("actor", "critic"):
        ours_norm, theirs_norm = getattr(ours, model).obs_normalizer, getattr(theirs, model).obs_normalizer
        torch.testing.assert_close(ours_norm.std, theirs_norm.std, rtol=0.0, atol=0.0)


def test_an_update_reads_normaliser_statistics_loaded_without_telling_the_engine():
    """Statistics put into the networks directly (a state dict loaded by hand, no policy_changed call): the fast
    update still normalises with them, as the reference does."""
    runs = []
    for fast in (True, False):
        runner = _rollout_runner(obs_normalization=True)
        alg = runner.alg
        if not fast:
            alg.engine = None
        for model in (alg.actor, alg.critic):
            state = model.obs_normalizer.state_dict()
            model.obs_normalizer.load_state_dict(
                {**state, "_mean": state["_mean"] + 0.5, "_std": state["_std"] * 2}
            )
        before = torch.cat([p.detach().flatten() for p in alg.trained])
        torch.manual_seed(5)
        alg.optimize()
        runs.append((before, torch.cat([p.detach().flatten() for p in alg.trained])))
    (before, ours), (_, theirs) = runs
    # as a whole: a sample at a clip boundary may round to the other side (on the first layer's weights, 7.7e-5)
    assert (ours - theirs).norm() / (theirs - before).norm() < 1e-3


def test_networks_it_cannot_write_out_run_the_reference():
    runner = _rollout_runner(activation="selu")  # an activation it does not derive
    assert runner.alg.engine is None
    losses = runner.alg.optimize()
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())


def test_a_variant_that_changes_the_loss_runs_the_reference():
    """The engine writes out FleetPPO's loss: a subclass that overrides it must not get the engine."""

    class DoubledLoss(FleetPPO):
        def minibatch_gradients(self, batch):
            terms, kl = super().minibatch_gradients(batch)
            self.gradients.flat.mul_(2.0)
            return terms, kl

    from mjfleet.fleet.context import WorkerContext
    from mjfleet.rl.build import build_ppo

    class ScaledLoss(FleetPPO):
        def minibatch_loss(self, batch):
            loss, terms, kl = super().minibatch_loss(batch)
            return 2.0 * loss, terms, kl

    spec, env_cfg, agent = cartpole_configs()
    env = spec.make_env(env_cfg)
    for variant in (DoubledLoss, ScaledLoss):
        alg = build_ppo(env.get_observations(), env, agent, WorkerContext.single("cpu"), variant)
        assert type(alg) is variant and alg.engine is None


def test_a_loss_setting_the_engine_does_not_write_out_runs_the_reference(monkeypatch, caplog):
    """A PPOLoss setting missing from the engine's WRITTEN_OUT: the engine is not used, with one warning."""
    from mjfleet.fleet.context import WorkerContext
    from mjfleet.rl import fast
    from mjfleet.rl.build import build_ppo

    monkeypatch.setattr(fast, "WRITTEN_OUT", fast.WRITTEN_OUT - {"entropy_coef"})
    spec, env_cfg, agent = cartpole_configs()
    env = spec.make_env(env_cfg)
    alg = build_ppo(env.get_observations(), env, agent, WorkerContext.single("cpu"))
    assert alg.engine is None
    assert "['entropy_coef'] are not written out" in caplog.text


def test_a_failure_at_the_first_minibatch_falls_back_to_the_reference(caplog):
    """A failure where the engine has not changed anything yet (a changed library signature, say) turns it off
    with one warning, and the reference goes on over the same minibatches: the update equals a reference-only
    update of the same rollout, bit for bit."""

    class Broken:
        def __call__(self, batch):
            raise TypeError("elu_backward() got an unexpected keyword argument 'alpha'")

        def refresh(self):
            pass

    runs = []
    for break_it in (True, False):
        runner = _rollout_runner()
        alg = runner.alg
        if break_it:
            alg.engine.gradients = Broken()
        else:
            alg.engine = None
        torch.manual_seed(5)
        runs.append((alg.optimize(), [p.detach().clone() for p in alg.trained], alg.engine))
    (broken_losses, broken_params, engine), (losses, params, _) = runs
    assert engine is None
    assert sum("fast PPO update turned off" in r.getMessage() for r in caplog.records) == 1
    assert broken_losses == losses
    for a, b in zip(broken_params, params, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_rollout_actions_values_and_log_probabilities_equal_rsl_rl_act(std_type):
    from rsl_rl.algorithms import PPO

    runner = _rollout_runner(std_type=std_type, obs_normalization=True)
    alg, obs = runner.alg, runner.env.get_observations()
    _perturb(alg, scale=0.05)
    with torch.inference_mode():
        torch.manual_seed(9)
        actions = alg.act(obs).clone()
        ours = {k: getattr(alg.transition, k) for k in ("values", "actions_log_prob", "distribution_params")}
        torch.manual_seed(9)
        theirs_actions = PPO.act(alg, obs)
    torch.testing.assert_close(actions, theirs_actions, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours["values"], alg.transition.values, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(
        ours["actions_log_prob"], alg.transition.actions_log_prob, rtol=1e-5, atol=1e-6
    )
    for a, b in zip(ours["distribution_params"], alg.transition.distribution_params, strict=True):
        torch.testing.assert_close(a, b.expand_as(a), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(alg.action_std, alg.actor.output_std[0], rtol=1e-6, atol=0.0)


def test_the_rollouts_std_follows_every_update():
    """act reads the std once per policy: an update, a load and a broadcast tell the engine the policy changed."""
    runner = _rollout_runner()
    alg, obs = runner.alg, runner.env.get_observations()
    with torch.inference_mode():
        alg.act(obs)
    before = alg.transition.distribution_params[1][0].clone()
    alg.optimize()
    with torch.inference_mode():
        alg.act(obs)
    after = alg.transition.distribution_params[1][0]
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, alg.actor.distribution.std_param.detach(), rtol=0.0, atol=0.0)


def test_the_cuda_graphs_minibatches_are_rsl_rls_rows_and_fields():
    """What the CUDA graph replays (runs only on a GPU) is fed on any device: the same permutation draw and the
    same rows of every field as rsl_rl's feed-forward generator."""
    from mjfleet.rl.fast import minibatch_indices
    from mjfleet.rl.fast.cuda_graph import minibatch, rollout_fields

    runner = _rollout_runner()
    alg = runner.alg
    torch.manual_seed(21)
    theirs = list(alg.storage.mini_batch_generator(alg.num_mini_batches, alg.num_learning_epochs))
    torch.manual_seed(21)
    fields = rollout_fields(alg.storage)
    ours = [minibatch(fields, index) for index in minibatch_indices(alg)]
    assert len(ours) == len(theirs) == alg.num_mini_batches * alg.num_learning_epochs
    for a, b in zip(ours, theirs, strict=True):
        for group in b.observations.keys():
            assert torch.equal(a.observations[group], b.observations[group])
        for name in ("actions", "values", "advantages", "returns", "old_actions_log_prob"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert len(a.old_distribution_params) == len(b.old_distribution_params) == 2
        for x, y in zip(a.old_distribution_params, b.old_distribution_params, strict=True):
            assert torch.equal(x, y)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_elu_equals_torch_elu_within_float32_rounding(alpha):
    x = torch.cat(
        (
            torch.linspace(-30.0, 30.0, 20_001),
            torch.randn(10_000) * 3.0,
            torch.tensor([0.0, -0.0, -1e-8, 1e-8, -17.0, -80.0]),
        )
    )
    torch.testing.assert_close(elu(x.clone(), alpha), torch.nn.functional.elu(x, alpha), rtol=1e-6, atol=1e-7)


def test_the_clipping_and_adam_step_equal_rsl_rls():
    """apply_gradients clips each network's gradients with torch's clip_grad_norm_ and steps the (fused) Adam: one
    step equals rsl_rl's per-tensor Adam after the same clipping."""
    runner = _rollout_runner()
    alg = runner.alg
    batch = next(alg.storage.mini_batch_generator(alg.num_mini_batches, 1))
    alg.minibatch_gradients(batch)
    alg.gradients.flat[:-1].mul_(1000.0)  # far above max_grad_norm: clipping must act
    theirs = [p.detach().clone().requires_grad_() for p in alg.trained]
    for p, ours in zip(theirs, alg.trained, strict=True):
        p.grad = ours.grad.clone()
    num_actor = len(list(alg.actor.parameters()))
    alg.apply_gradients()
    torch.nn.utils.clip_grad_norm_(theirs[:num_actor], alg.max_grad_norm)
    torch.nn.utils.clip_grad_norm_(theirs[num_actor:], alg.max_grad_norm)
    torch.optim.Adam(theirs, lr=alg.learning_rate).step()
    for a, b in zip(alg.trained, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
