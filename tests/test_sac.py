"""SAC's pieces as specifications: n-step targets, the replay ring, the final observations it bootstraps from."""

from __future__ import annotations

import pytest
import torch

from mjfleet.rl.sac.replay import ReplayBuffer, n_step_targets

GAMMA = 0.5  # powers of 1/2 keep the hand-computed sums exact


def _targets(rewards, done, terminated, available=None):
    rewards = torch.tensor([rewards], dtype=torch.float32)
    done = torch.tensor([done])
    terminated = torch.tensor([terminated])
    available = torch.ones_like(done) if available is None else torch.tensor([available])
    returns, bootstrap, last = n_step_targets(rewards, done, terminated, available, GAMMA)
    return float(returns[0]), float(bootstrap[0]), int(last[0])


def test_n_step_return_sums_n_discounted_rewards_and_bootstraps_gamma_to_the_n():
    assert _targets([1.0, 2.0, 4.0], [False] * 3, [False] * 3) == (1 + 0.5 * 2 + 0.25 * 4, 0.125, 2)


def test_a_termination_stops_the_sum_and_is_not_bootstrapped():
    assert _targets([1.0, 2.0, 4.0], [False, True, False], [False, True, False]) == (2.0, 0.0, 1)


def test_a_time_out_stops_the_sum_and_bootstraps_from_where_it_stopped():
    # a time-out is done without terminated: gamma^2 times the value of step 1's next (final) observation
    assert _targets([1.0, 2.0, 4.0], [False, True, False], [False, False, False]) == (2.0, 0.25, 1)


def test_steps_after_a_finished_episode_belong_to_the_next_one_and_are_ignored():
    returns, bootstrap, last = _targets([3.0, 100.0, 100.0], [True, True, False], [False, True, True])
    assert (returns, bootstrap, last) == (3.0, 0.5, 0)


def test_steps_not_collected_yet_shorten_the_return_to_the_ones_that_exist():
    assert _targets([1.0, 2.0, 4.0], [False] * 3, [False] * 3, [True, True, False]) == (2.0, 0.25, 1)


def _step(buffer: ReplayBuffer, t: int, done: bool = False, terminated: bool = False) -> None:
    """Vectorised step t of 2 environments: observation t (env 0) and 10 + t (env 1), reward t, next t + 0.5."""
    obs = torch.tensor([[t], [10.0 + t]])
    flags = torch.tensor([done, done])
    buffer.add(obs, obs, obs, torch.tensor([t, 10.0 + t]), obs + 0.5, obs + 0.5, flags & terminated, flags)


def test_the_ring_keeps_the_newest_steps_and_samples_only_written_ones():
    buffer = ReplayBuffer(capacity=8, num_envs=2, obs_dim=1, critic_obs_dim=1, action_dim=1, device="cpu")
    assert buffer.length == 4
    for t in range(6):  # rows: 4, 5, 2, 3 after wrapping twice over the first two
        _step(buffer, t)
    assert buffer.size == 4 and buffer.position == 2 and buffer.num_transitions == 8
    assert buffer.obs[:, 0, 0].tolist() == [4.0, 5.0, 2.0, 3.0]
    batch = buffer.sample(256, n_step=1, gamma=GAMMA, generator=torch.Generator().manual_seed(0))
    assert set(batch.obs[:, 0].tolist()) == {2.0, 3.0, 4.0, 5.0, 12.0, 13.0, 14.0, 15.0}
    assert torch.equal(batch.returns, batch.obs[:, 0])  # reward t was stored with observation t


def test_n_step_samples_look_ahead_across_the_ring_boundary_and_stop_at_the_newest_step():
    buffer = ReplayBuffer(capacity=8, num_envs=2, obs_dim=1, critic_obs_dim=1, action_dim=1, device="cpu")
    for t in range(6):
        _step(buffer, t)
    batch = buffer.sample(512, n_step=3, gamma=GAMMA, generator=torch.Generator().manual_seed(0))
    for obs, ret, nxt, boot in zip(
        batch.obs[:, 0], batch.returns, batch.next_obs[:, 0], batch.bootstrap, strict=True
    ):
        t = int(obs) % 10
        steps = range(t, min(t + 3, 6))  # rows 3 -> 4 -> 5 cross the end of the ring
        assert float(ret) == sum(GAMMA ** (s - t) * (float(obs) - t + s) for s in steps)
        assert float(nxt) == float(obs) + len(steps) - 1 + 0.5
        assert float(boot) == GAMMA ** len(steps)


def test_a_terminated_step_in_the_buffer_ends_the_return_without_bootstrap():
    buffer = ReplayBuffer(capacity=8, num_envs=2, obs_dim=1, critic_obs_dim=1, action_dim=1, device="cpu")
    _step(buffer, 0)
    _step(buffer, 1, done=True, terminated=True)
    _step(buffer, 2)
    batch = buffer.sample(256, n_step=3, gamma=GAMMA, generator=torch.Generator().manual_seed(1))
    first = batch.obs[:, 0] == 0.0
    assert first.any()
    assert torch.equal(batch.returns[first], torch.full((int(first.sum()),), 0.0 + GAMMA * 1.0))
    assert torch.equal(batch.bootstrap[first], torch.zeros(int(first.sum())))


def _cartpole(episode_length_s: float, record_final: bool):
    from small_cartpole import cartpole_configs

    spec, cfg, _ = cartpole_configs(num_envs=8, episode_length_s=episode_length_s)
    torch.manual_seed(0)  # the same initial states in every environment built here
    env = spec.make_env(cfg, "cpu")
    env.record_final_observations = record_final
    return env


def test_a_timed_out_environment_reports_the_state_it_reached_before_its_reset():
    """What SAC bootstraps a time-out from: the observation a longer episode would have shown at that step, not
    the new episode's first one that `step` returns."""
    short, long = _cartpole(0.1, record_final=True), _cartpole(1.0, record_final=False)
    zeros = torch.zeros(8, short.num_actions)
    for _ in range(int(round(0.1 / short.step_dt))):
        obs, _, dones, extras = short.step(zeros)
        continued, *_ = long.step(zeros)
    assert dones.all() and extras["time_outs"].all()
    torch.testing.assert_close(extras["final_observations"]["actor"], continued["actor"])
    assert not torch.allclose(obs["actor"], continued["actor"])


def test_without_the_setting_no_final_observations_are_computed():
    env = _cartpole(1.0, record_final=False)
    _, _, _, extras = env.step(torch.zeros(8, env.num_actions))
    assert "final_observations" not in extras


def test_the_actor_acts_inside_its_bounds_with_the_squashed_gaussians_log_probability():
    from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

    from mjfleet.rl.sac.networks import SquashedGaussianActor

    low, high = torch.tensor([-1.0, -0.5, 0.0]), torch.tensor([1.0, 2.0, 0.1])
    torch.manual_seed(0)
    actor = SquashedGaussianActor(4, 3, (16,), "elu", (low, high), obs_normalization=False)
    x = torch.randn(512, 4)
    noise = torch.randn(512, 3)
    actions, log_prob, std = actor.sample(x, noise)
    assert ((actions >= low) & (actions <= high)).all()
    mean, log_std = actor.distribution(x)
    squashed = TransformedDistribution(
        Normal(mean, log_std.exp()), [TanhTransform(), AffineTransform((high + low) / 2, (high - low) / 2)]
    )
    u = mean + std * noise  # the pre-squash draw; the reference evaluates its own image of it
    reference = squashed.log_prob(squashed.transforms[1](squashed.transforms[0](u))).sum(dim=-1)
    # the actor's density is tanh(u)'s, before the affine map onto the bounds: the map's log-Jacobian apart
    torch.testing.assert_close(log_prob - ((high - low) / 2).log().sum(), reference, atol=1e-3, rtol=1e-4)
    assert torch.equal(actor(x), (high + low) / 2 + (high - low) / 2 * torch.tanh(mean))


def test_sac_stores_a_timed_out_step_with_its_final_observation_and_no_termination():
    """The replay buffer's view of an episode's end, as FleetSAC collects it from the real environment: the next
    observation of a finished environment is the one before its reset; a time-out is done, not terminated."""
    from small_cartpole import cartpole_configs

    from mjfleet.fleet.context import WorkerContext
    from mjfleet.rl.sac.build import build_sac

    spec, cfg, agent = cartpole_configs(num_envs=8, episode_length_s=0.1)
    agent.algorithm_name = "sac"
    torch.manual_seed(0)
    env = spec.make_env(cfg, "cpu")
    alg = build_sac(env.get_observations(), env, agent, WorkerContext.single("cpu"))
    assert env.record_final_observations
    obs = env.get_observations()
    with torch.inference_mode():
        for _ in range(int(round(0.1 / env.step_dt))):
            alg.act(obs)
            obs, rewards, dones, extras = env.step(alg._last_actions)
            alg.process_env_step(obs, rewards, dones, extras)
    buffer, last = alg.buffer, alg.buffer.position - 1
    timed_out = extras["time_outs"]
    assert timed_out.any() and torch.equal(buffer.done[last], dones.bool())
    assert torch.equal(buffer.terminated[last], dones.bool() & ~timed_out)
    final = extras["final_observations"]["actor"]
    assert torch.equal(buffer.next_obs[last][timed_out], final[timed_out])
    assert not torch.equal(buffer.next_obs[last][timed_out], obs["actor"][timed_out])
    # within an episode, a step's next observation is the next step's observation
    going_on = ~buffer.done[:last]
    assert torch.equal(buffer.next_obs[:last][going_on], buffer.obs[1 : last + 1][going_on])


def test_the_ring_says_how_much_memory_it_holds():
    buffer = ReplayBuffer(capacity=8, num_envs=2, obs_dim=3, critic_obs_dim=5, action_dim=2, device="cpu")
    floats = 4 * 2 * (3 + 3 + 5 + 5 + 2 + 1)  # rows x envs x (obs, next, critic, next critic, action, reward)
    assert buffer.nbytes == 4 * floats + 4 * 2 * 2  # float32, and two bool flags per transition


def test_an_action_bound_wins_over_the_envs_and_bounds_without_0_are_kept():
    """The rules of `action_bounds` that no shipped task shows; the joint-limit bounds themselves are checked on
    the real quadruped (tests/test_sac_cli.py)."""
    from types import SimpleNamespace

    from mjfleet.rl.sac.build import action_bounds

    limits = (torch.tensor([-3.5, -6.3, -4.1]), torch.tensor([3.5, 14.4, 3.7]))
    env = SimpleNamespace(num_actions=3, action_bounds=lambda: limits)
    assert torch.equal(action_bounds(env, 1.5)[1], torch.full((3,), 1.5))  # --agent.sac.action-bound wins
    # bounds that do not contain 0 are kept as they are
    env = SimpleNamespace(num_actions=1, action_bounds=lambda: (torch.tensor([0.5]), torch.tensor([2.0])))
    assert [float(b) for b in action_bounds(env, 0.0)] == [0.5, 2.0]


def test_init_std_sets_the_actors_starting_spread_in_every_state():
    from mjfleet.errors import UsageError
    from mjfleet.rl.sac import SACConfig
    from mjfleet.rl.sac.networks import SquashedGaussianActor

    bounds = (-torch.ones(3), torch.ones(3))
    torch.manual_seed(0)
    actor = SquashedGaussianActor(4, 3, (16,), "elu", bounds, obs_normalization=False, init_std=0.05)
    _, log_std = actor.distribution(torch.randn(64, 4) * 3)
    torch.testing.assert_close(log_std.exp(), torch.full((64, 3), 0.05))
    _, default = SquashedGaussianActor(4, 3, (16,), "elu", bounds, False).distribution(torch.randn(64, 4))
    assert default.exp().std() > 0  # without it the spread depends on the state from the start
    with pytest.raises(UsageError, match="init-std"):
        SACConfig(init_std=10.0).check(num_envs=4)


def test_layer_normed_critics_keep_their_features_bounded_whatever_the_input_scale():
    from mjfleet.rl.sac.networks import TwinCritic

    torch.manual_seed(0)
    obs, actions = torch.randn(32, 6), torch.rand(32, 2) * 2 - 1
    for layer_norm in (False, True):
        critic = TwinCritic(6, 2, (32, 32), "elu", obs_normalization=False, layer_norm=layer_norm)
        with torch.no_grad():
            small, large = (critic(obs * scale, actions)[0].abs().max() for scale in (1.0, 1e4))
        if layer_norm:
            # every hidden layer's activations are normalised, so the output is bounded by the last layer's weights
            last = critic.q1[-1]
            bound = last.weight.abs().sum() * 32**0.5 + last.bias.abs()
            assert large <= bound
        else:
            assert large > 100 * small


def test_weight_decay_shrinks_the_networks_weights_and_leaves_the_temperature_alone():
    from mjfleet.errors import UsageError
    from mjfleet.rl.sac import SACConfig
    from mjfleet.rl.sac.algorithm import FleetSAC
    from mjfleet.rl.sac.networks import SquashedGaussianActor, TwinCritic

    settings = SACConfig(weight_decay=0.5, actor_learning_rate=0.1, critic_learning_rate=0.1)
    bounds = (-torch.ones(2), torch.ones(2))
    actor = SquashedGaussianActor(3, 2, (8,), "elu", bounds, obs_normalization=False)
    critic = TwinCritic(3, 2, (8,), "elu", obs_normalization=False)
    alg = FleetSAC(actor, critic, ReplayBuffer(64, 4, 3, 3, 2, "cpu"), settings, "cpu")
    before = [p.detach().clone() for p in (*critic.parameters(), *actor.parameters(), alg.log_alpha)]
    alg.gradients.zero_()  # no gradient: Adam's step is zero and only the decay moves a weight
    alg.optimizer.step()
    after = [*critic.parameters(), *actor.parameters(), alg.log_alpha]
    for old, new in zip(before[:-1], after[:-1], strict=True):
        torch.testing.assert_close(new, old * (1 - 0.1 * 0.5))
    torch.testing.assert_close(after[-1], before[-1])
    with pytest.raises(UsageError, match="weight-decay"):
        SACConfig(weight_decay=-1.0).check(num_envs=4)


def test_per_action_bounds_win_over_the_scalar_bound_and_must_fit_the_environment():
    from types import SimpleNamespace

    from tensordict import TensorDict

    from mjfleet.errors import UsageError
    from mjfleet.fleet.context import WorkerContext
    from mjfleet.rl.config import AgentConfig
    from mjfleet.rl.sac import SACConfig
    from mjfleet.rl.sac.build import build_sac

    obs = TensorDict({"actor": torch.zeros(4, 3), "critic": torch.zeros(4, 5)}, batch_size=[4])
    env = SimpleNamespace(num_envs=4, num_actions=2, record_final_observations=False)
    sac = SACConfig(action_bound=1.0, action_low=(-0.5, -3.0), action_high=(2.0, 1.0), buffer_size=64)
    actor = build_sac(obs, env, AgentConfig(algorithm_name="sac", sac=sac), WorkerContext.single()).actor
    torch.testing.assert_close(actor.action_center, torch.tensor([0.75, -1.0]))
    torch.testing.assert_close(actor.action_half_range, torch.tensor([1.25, 2.0]))
    actions = actor.random_actions(4096)
    assert (actions.min(0).values >= torch.tensor([-0.5, -3.0])).all()
    assert (actions.max(0).values <= torch.tensor([2.0, 1.0])).all()
    with pytest.raises(UsageError, match="the environment has 2 actions"):
        wrong = SACConfig(action_low=(-1.0,), action_high=(1.0,), buffer_size=64)
        build_sac(obs, env, AgentConfig(algorithm_name="sac", sac=wrong), WorkerContext.single())
    for low, high in (((-1.0, -1.0), (1.0,)), ((1.0,), (0.5,))):
        with pytest.raises(UsageError, match="action-low"):
            SACConfig(action_low=low, action_high=high).check(num_envs=4)


def test_held_exploration_noise_changes_every_noise_repeat_steps_only():
    from tensordict import TensorDict

    from mjfleet.errors import UsageError
    from mjfleet.rl.sac import SACConfig
    from mjfleet.rl.sac.algorithm import FleetSAC
    from mjfleet.rl.sac.networks import SquashedGaussianActor, TwinCritic

    def acting(repeat: int) -> list[torch.Tensor]:
        torch.manual_seed(0)
        settings = SACConfig(noise_repeat=repeat, random_steps=0)
        bounds = (-torch.ones(2), torch.ones(2))
        actor = SquashedGaussianActor(3, 2, (8,), "elu", bounds, obs_normalization=False)
        critic = TwinCritic(3, 2, (8,), "elu", obs_normalization=False)
        alg = FleetSAC(actor, critic, ReplayBuffer(64, 4, 3, 3, 2, "cpu"), settings, "cpu")
        # one state for every step: only the noise moves the action
        obs = TensorDict({"actor": torch.randn(4, 3)}, batch_size=[4])
        taken = []
        for _ in range(6):
            taken.append(alg.act(obs))
            alg.env_steps += 1  # what process_env_step counts
        return taken

    held = acting(3)
    assert torch.equal(held[0], held[1]) and torch.equal(held[1], held[2])
    assert not torch.equal(held[2], held[3]) and torch.equal(held[3], held[5])
    assert not torch.equal(held[0][0], held[0][1])  # every environment draws its own
    fresh = acting(1)
    assert all(not torch.equal(a, b) for a, b in zip(fresh, fresh[1:], strict=False))
    with pytest.raises(UsageError, match="noise-repeat"):
        SACConfig(noise_repeat=0).check(num_envs=4)


def _small_sac(**settings):
    """A FleetSAC on 3 observations and 2 actions, its buffer holding 8 steps of 4 environments' random data."""
    from mjfleet.rl.sac import SACConfig
    from mjfleet.rl.sac.algorithm import FleetSAC
    from mjfleet.rl.sac.networks import SquashedGaussianActor, TwinCritic

    bounds = (-torch.ones(2), torch.ones(2))
    actor = SquashedGaussianActor(3, 2, (8,), "elu", bounds, obs_normalization=False)
    critic = TwinCritic(3, 2, (8,), "elu", obs_normalization=False)
    alg = FleetSAC(actor, critic, ReplayBuffer(64, 4, 3, 3, 2, "cpu"), SACConfig(**settings), "cpu")
    for _ in range(8):
        obs, next_obs = torch.randn(4, 3), torch.randn(4, 3)
        done = torch.zeros(4, dtype=torch.bool)
        alg.buffer.add(obs, obs, torch.rand(4, 2) * 2 - 1, torch.randn(4), next_obs, next_obs, done, done)
    return alg


def test_the_warm_up_acts_at_random_in_a_fresh_run_and_with_the_policy_in_a_resumed_one():
    from tensordict import TensorDict

    trained = _small_sac(random_steps=5)
    state = trained.state_dict()
    obs = TensorDict({"actor": torch.randn(4, 3)}, batch_size=[4])

    def warm_up_action_and_its_two_sources(alg):
        assert alg.in_warmup
        torch.manual_seed(1)
        taken = alg.act(obs)
        torch.manual_seed(1)
        random = alg.actor.random_actions(4)
        torch.manual_seed(1)
        sampled = alg.actor.sample(obs["actor"])[0]
        return taken, random, sampled

    taken, random, sampled = warm_up_action_and_its_two_sources(_small_sac(random_steps=5))
    assert torch.equal(taken, random) and not torch.equal(taken, sampled)
    resumed = _small_sac(random_steps=5)
    resumed.load_state_dict(state)
    taken, random, sampled = warm_up_action_and_its_two_sources(resumed)
    assert torch.equal(taken, sampled) and not torch.equal(taken, random)
    resumed._rows_since_update = 3  # still the warm-up: no gradient step, policy or not
    resumed.update()
    assert resumed._gradient_steps == 0


def test_a_critic_only_step_moves_the_critics_as_a_full_step_and_leaves_actor_and_temperature_alone():
    import copy

    torch.manual_seed(0)
    alg = _small_sac()
    batch, noise = alg.buffer.sample(16, alg.cfg.n_step, alg.cfg.gamma), alg.draw_noise(16)
    nets = {"actor": alg.actor, "critic": alg.critic, "target": alg.target}
    start = copy.deepcopy(
        ({k: m.state_dict() for k, m in nets.items()}, alg.log_alpha.detach(), alg.optimizer.state_dict())
    )

    def step(update_actor: bool):
        states, log_alpha, optimizer = copy.deepcopy(start)
        for key, module in nets.items():
            module.load_state_dict(states[key])
        with torch.no_grad():
            alg.log_alpha.copy_(log_alpha)
        alg.optimizer.load_state_dict(optimizer)
        terms = alg.gradient_step(batch, noise, update_actor)
        return (
            terms,
            copy.deepcopy({k: m.state_dict() for k, m in nets.items()}),
            alg.log_alpha.detach().clone(),
        )

    full_terms, full, full_alpha = step(True)
    terms, critic_only, alpha = step(False)
    for key in ("critic", "target"):  # the critics' step does not depend on whether the actor steps beside it
        for name, value in critic_only[key].items():
            torch.testing.assert_close(value, full[key][name])
    trained = {"actor": dict(alg.actor.named_parameters()), "critic": dict(alg.critic.named_parameters())}
    assert all(not torch.equal(critic_only["critic"][n], start[0]["critic"][n]) for n in trained["critic"])
    for name, value in critic_only["actor"].items():
        assert torch.equal(value, start[0]["actor"][name])
    assert all(not torch.equal(full["actor"][n], start[0]["actor"][n]) for n in trained["actor"])
    assert torch.equal(alpha, start[1]) and not torch.equal(full_alpha, start[1])
    assert terms[0] == full_terms[0] and not terms[1:].any()
    # The actor's gradients are the flat buffer's views again: the next full step writes and averages them.
    flat = alg.gradients.flat.untyped_storage().data_ptr()
    assert all(p.grad.untyped_storage().data_ptr() == flat for p in alg.actor.parameters())


def test_with_a_policy_delay_the_actor_and_temperature_step_once_every_k_gradient_steps():
    from mjfleet.errors import UsageError
    from mjfleet.rl.sac import SACConfig

    torch.manual_seed(0)
    alg = _small_sac(policy_delay=3, random_steps=0, updates_per_step=1.0, batch_size=16)
    alg._rows_since_update = 7  # seven new vectorised steps: seven gradient steps
    losses = alg.update()
    adam_steps = {
        name: int(alg.optimizer.state[params[0]]["step"]) for name, params in alg.gradients.params.items()
    }
    assert adam_steps == {"critic": 7, "actor": 3, "alpha": 3}  # steps 0, 3 and 6 move the actor too
    assert losses["actor"] != 0.0 and losses["entropy"] != 0.0  # means over the actor's steps, not all seven
    with pytest.raises(UsageError, match="policy-delay"):
        SACConfig(policy_delay=0).check(num_envs=4)
