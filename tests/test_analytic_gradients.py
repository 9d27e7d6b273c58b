"""The PPO loss and gradients written out by hand (mjfleet.rl.analytic_gradients) against torch's autograd."""

import pytest
import torch
from small_cartpole import cartpole_configs

from mjfleet.rl import FleetRunner
from mjfleet.rl.analytic_gradients import AnalyticMinibatch


def _rollout_runner(activation="elu", std_type="scalar", obs_normalization=False, **ppo):
    """A FleetRunner on 16 Cartpole envs whose storage holds one 8-step rollout."""
    spec, env_cfg, agent = cartpole_configs(episode_length_s=0.2)
    for net in (agent.actor, agent.critic):
        net.activation = activation
        net.obs_normalization = obs_normalization
    agent.actor.noise_std_type = std_type
    for key, value in ppo.items():
        setattr(agent.algorithm, key, value)
    torch.manual_seed(3)
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    alg, obs = runner.alg, runner.env.get_observations()
    with torch.inference_mode():
        for _ in range(agent.num_steps_per_env):
            obs, rewards, dones, extras = runner.env.step(alg.act(obs))
            alg.process_env_step(obs, rewards, dones, extras)
        alg.compute_returns(obs)
    if obs_normalization:  # non-trivial statistics, as after some training
        alg._update_normalization(alg.storage.observations.flatten(0, 1))
    return runner


def _perturb(alg, scale=0.3):
    """Move the networks away from the rollout's policy, so ratios and values leave their clip ranges."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in alg._trained:
            p.add_(scale * torch.randn(p.shape, generator=generator))


def _autograd(alg, batch):
    loss, terms, kl = alg._minibatch_loss(batch)
    alg._zero_gradients()
    loss.backward()
    return terms, kl, alg._flat[:-1].clone()


@pytest.mark.parametrize(
    "settings",
    [
        dict(),
        dict(activation="relu", std_type="log", obs_normalization=True, use_clipped_value_loss=False),
        dict(activation="tanh", obs_normalization=True, schedule="fixed"),
    ],
    ids=["elu-scalar-std", "relu-log-std-normalised-unclipped-value", "tanh-fixed-schedule"],
)
@pytest.mark.parametrize("normalize_advantages", [False, True])
def test_losses_kl_and_every_gradient_equal_autograd(settings, normalize_advantages):
    runner = _rollout_runner(**settings)
    alg = runner.alg
    analytic = alg._analytic
    assert isinstance(analytic, AnalyticMinibatch)
    alg.normalize_advantage_per_mini_batch = normalize_advantages
    _perturb(alg)
    clipped_ratios = clipped_values = 0
    for batch in alg.storage.mini_batch_generator(alg.num_mini_batches, 1):
        terms, kl, grads = _autograd(alg, batch)
        alg._flat.fill_(float("nan"))  # every gradient must be written, not left over
        our_terms, our_kl = analytic(batch)
        torch.testing.assert_close(our_terms, terms, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(alg._flat[:-1], grads, rtol=1e-4, atol=1e-6)
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


def test_the_update_runs_analytically_by_default_and_matches_the_autograd_update():
    runner = _rollout_runner()
    reference = _rollout_runner(analytic_gradients=False)
    assert runner.alg._analytic is not None and reference.alg._analytic is None
    torch.manual_seed(5)
    ours = runner.alg.update()
    torch.manual_seed(5)
    theirs = reference.alg.update()
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6)
    assert runner.alg.learning_rate == reference.alg.learning_rate
    for ours_p, theirs_p in zip(runner.alg._trained, reference.alg._trained, strict=True):
        torch.testing.assert_close(ours_p, theirs_p, rtol=1e-5, atol=1e-6)


def test_networks_it_cannot_write_out_keep_autograd():
    assert _rollout_runner(activation="selu").alg._analytic is None  # an activation it does not derive
    runner = _rollout_runner(activation="selu")
    losses = runner.alg.update()  # autograd's update still runs
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())


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


@pytest.mark.parametrize("alpha", [1.0, 0.5, 1.5])
def test_elu_equals_torch_elu_within_float32_rounding(alpha):
    from mjfleet.rl.analytic_gradients import _elu

    x = torch.cat(
        (
            torch.randn(10_000) * 3,
            torch.randn(1_000) * 300,
            torch.tensor([0.0, -0.0, -1e-8, 1e-8, -17.0, -80.0]),
        )
    )
    torch.testing.assert_close(
        _elu(x.clone(), alpha), torch.nn.functional.elu(x, alpha), rtol=1e-6, atol=1e-7
    )


def test_rollout_rows_written_by_act_equal_rsl_rl_act_and_process_env_step():
    """FleetPPO.act writes its row of the storage directly and process_env_step stores only the rest; the stored
    rollout equals the one rsl_rl's own act and process_env_step store from the same states and draws."""
    from rsl_rl.algorithms import PPO

    spec, env_cfg, agent = cartpole_configs(episode_length_s=0.1)  # 5-step episodes: time-outs in the rollout
    torch.manual_seed(3)
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    alg, env = runner.alg, runner.env
    _perturb(alg, scale=0.05)
    storages, time_outs = [], 0
    for act, process in ((alg.act, alg.process_env_step), (lambda o: PPO.act(alg, o), None)):
        torch.manual_seed(4)
        obs = env.reset()[0]
        env.episode_length_buf.zero_()
        with torch.inference_mode():
            for _ in range(agent.num_steps_per_env):
                obs, rewards, dones, extras = env.step(act(obs))
                time_outs += int(extras["time_outs"].sum())
                if process is None:
                    PPO.process_env_step(alg, obs, rewards, dones, extras)
                else:
                    process(obs, rewards, dones, extras)
        st = alg.storage
        storages.append(
            {k: getattr(st, k).clone() for k in ("actions", "values", "actions_log_prob", "rewards")}
        )
        storages[-1].update(dones=st.dones.clone(), obs=st.observations.clone())
        storages[-1].update(mean=st.distribution_params[0].clone(), std=st.distribution_params[1].clone())
        st.clear()
    assert time_outs > 0
    ours, theirs = storages
    assert torch.equal(ours["dones"], theirs["dones"])
    for key in ("obs", "actions", "values", "actions_log_prob", "rewards", "mean", "std"):
        torch.testing.assert_close(ours[key], theirs[key], rtol=1e-5, atol=1e-6, msg=key)


def test_the_rollouts_cached_std_follows_every_update():
    """act computes the std once per policy; torch's fused Adam changes the parameter without bumping its version,
    so FleetPPO marks the policy as changed after every update (either update path)."""
    runner = _rollout_runner()
    alg, obs = runner.alg, runner.env.get_observations()
    with torch.inference_mode():
        alg.act(obs)  # caches this policy's std
    before = alg.transition.distribution_params[1][0].clone()
    alg.update()
    with torch.inference_mode():
        alg.act(obs)
    after = alg.transition.distribution_params[1][0]
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, alg.action_std, rtol=0.0, atol=0.0)
