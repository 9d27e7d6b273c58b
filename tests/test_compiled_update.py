"""PPO's loss under torch.compile (the default update) against the loss as written, and its fallback."""

import pytest
import torch
from small_cartpole import cartpole_configs, rollout

from mjfleet.rl import FleetRunner


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Every runner compiles the same function anew; dynamo stops compiling a function after a few recompiles
    (and runs it as written), so each test starts from an empty cache."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _rollout_runner(compiled=True, activation="elu", std_type="scalar", obs_normalization=False, **ppo):
    """A FleetRunner on 16 Cartpole envs whose storage holds one 8-step rollout."""
    spec, env_cfg, agent = cartpole_configs(episode_length_s=0.2)
    for net in (agent.actor, agent.critic):
        net.activation = activation
        net.obs_normalization = obs_normalization
    agent.actor.noise_std_type = std_type
    agent.ppo.compile_update = compiled
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
    return runner


def _perturb(alg, scale=0.3):
    """Move the networks away from the rollout's policy, so ratios and values leave their clip ranges."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in alg.trained:
            p.add_(scale * torch.randn(p.shape, generator=generator))


LOSS_CASES = {
    "elu-scalar-std": dict(),
    "relu-log-std-normalised-unclipped-value-per-minibatch-advantages": dict(
        activation="relu",
        std_type="log",
        obs_normalization=True,
        use_clipped_value_loss=False,
        normalize_advantage_per_mini_batch=True,
    ),
    "tanh-fixed-schedule-other-coefficients": dict(
        activation="tanh", schedule="fixed", clip_param=0.1, value_loss_coef=0.5, entropy_coef=0.03
    ),
}
"""Network variants and, between them, a change of every `PPOLoss` setting (the test below checks that)."""
SETTING_OF_FIELD = {"adaptive_kl": "schedule"}
"""`PPOLoss` fields that follow from another setting: the setting that changes them."""


def test_the_loss_cases_change_every_setting_of_the_loss():
    """A setting added to PPOLoss fails here until a case below changes it."""
    import dataclasses

    from mjfleet.rl.ppo import PPOLoss

    changed = {key for case in LOSS_CASES.values() for key in case}
    assert {SETTING_OF_FIELD.get(f.name, f.name) for f in dataclasses.fields(PPOLoss)} <= changed


@pytest.mark.parametrize("settings", LOSS_CASES.values(), ids=LOSS_CASES.keys())
def test_compiled_losses_kl_and_every_gradient_equal_the_loss_as_written(settings):
    runner = _rollout_runner(**settings)
    alg = runner.alg
    assert alg.compiled_loss is not None
    _perturb(alg)
    clipped_ratios = clipped_values = 0
    for batch in alg.storage.mini_batch_generator(alg.num_mini_batches, 1):
        terms, kl = alg._backward(alg.minibatch_loss, batch)
        grads = alg.gradients.flat[:-1].clone()
        alg.gradients.flat.fill_(float("nan"))  # every gradient must be written, not left over
        our_terms, our_kl = alg.minibatch_gradients(batch)
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
    assert alg.compiled_loss is not None and alg._compiled_ran
    assert clipped_ratios > 0 and clipped_values > 0


def test_the_compiled_update_equals_the_update_as_written():
    """A whole update (all epochs and minibatches, the adaptive learning rate, the normaliser's statistics):
    parameters, learning rate and losses agree."""
    runs = []
    for compiled in (True, False):
        runner = _rollout_runner(compiled, obs_normalization=True)
        torch.manual_seed(5)
        runs.append((runner.alg, runner.alg.optimize()))
    (ours, our_losses), (theirs, their_losses) = runs
    assert ours.describe().startswith("update: PPO loss compiled (torch.compile)")
    assert theirs.describe().startswith("update: PPO loss as written")
    for key in ("value", "surrogate", "entropy"):
        assert our_losses[key] == pytest.approx(their_losses[key], rel=1e-4, abs=1e-6)
    assert ours.learning_rate == theirs.learning_rate
    for a, b in zip(ours.trained, theirs.trained, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for model in ("actor", "critic"):
        ours_norm, theirs_norm = getattr(ours, model).obs_normalizer, getattr(theirs, model).obs_normalizer
        torch.testing.assert_close(ours_norm.std, theirs_norm.std, rtol=0.0, atol=0.0)


def test_a_compile_that_fails_at_the_first_minibatch_falls_back_to_the_loss_as_written(caplog):
    """A compiler that fails (no C++ compiler on the machine, say) costs one warning: the update equals one of
    the loss as written over the same minibatches, bit for bit, and the start-up line says why."""

    def broken(batch):
        raise RuntimeError("InductorError: CppCompileError: C++ compile error")

    runs = []
    for break_it in (True, False):
        runner = _rollout_runner(compiled=break_it)
        alg = runner.alg
        if break_it:
            alg.compiled_loss = broken
        torch.manual_seed(5)
        runs.append((alg.optimize(), [p.detach().clone() for p in alg.trained], alg))
    (broken_losses, broken_params, alg), (losses, params, _) = runs
    assert alg.compiled_loss is None
    assert sum("torch.compile of the PPO loss failed" in r.getMessage() for r in caplog.records) == 1
    assert "not compiled: torch.compile failed: InductorError" in alg.describe()
    assert broken_losses == losses
    for a, b in zip(broken_params, params, strict=True):
        assert torch.equal(a, b)


def test_a_failure_after_the_compiled_loss_ran_is_raised_not_hidden():
    runner = _rollout_runner(compiled=False)
    alg = runner.alg
    batch = next(alg.storage.mini_batch_generator(alg.num_mini_batches, 1))

    def fails(batch):
        raise ValueError("a bug in the loss")

    alg.compiled_loss, alg._compiled_ran = fails, True
    with pytest.raises(ValueError, match="a bug in the loss"):
        alg.minibatch_gradients(batch)


def test_a_recurrent_actor_runs_the_loss_as_written_and_says_why():
    spec, env_cfg, agent = cartpole_configs()
    agent.actor.rnn = "gru"
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    assert runner.alg.compiled_loss is None
    assert "PPO loss as written (not compiled: a recurrent network)" in runner.alg.describe()


def test_the_clipping_and_adam_step_equal_rsl_rls():
    """apply_gradients clips each network's gradients with torch's clip_grad_norm_ and steps the (fused) Adam: one
    step equals rsl_rl's per-tensor Adam after the same clipping."""
    runner = _rollout_runner(compiled=False)
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
