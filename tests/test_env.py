"""MujocoVecEnv through the Cartpole task: the rsl_rl VecEnv contract, on the real simulator."""

import math

import pytest
import torch
from tensordict import TensorDict

from mjfleet.envs.base import NAN_RESETS_KEY
from mjfleet.tasks import get_task

NUM_ENVS = 16


def make_env(swingup: bool = False, **overrides):
    spec = get_task("Cartpole-Swingup" if swingup else "Cartpole-Balance")
    cfg = spec.env_config()
    cfg.num_envs = NUM_ENVS
    for key, value in overrides.items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    return spec.make_env(cfg, "cpu")


@pytest.fixture(scope="module")
def env():
    return make_env()


def test_observations_are_a_tensordict_with_actor_and_critic_groups(env):
    obs = env.get_observations()
    assert isinstance(obs, TensorDict)
    assert set(obs.keys()) == {"actor", "critic"}
    assert obs["actor"].shape == (NUM_ENVS, 5)
    assert obs.batch_size == torch.Size([NUM_ENVS])


def test_step_returns_rewards_dones_and_time_outs_for_every_env(env):
    obs, rewards, dones, extras = env.step(torch.zeros(NUM_ENVS, 1))
    assert rewards.shape == (NUM_ENVS,) and dones.shape == (NUM_ENVS,)
    assert extras["time_outs"].shape == (NUM_ENVS,)
    assert ((rewards >= 0) & (rewards <= 1)).all()
    assert "Episode_Reward/upright" in extras["log"] and NAN_RESETS_KEY in extras["log"]


def test_policy_step_advances_physics_by_decimation_substeps():
    env = make_env(decimation=3)
    time_view = env.sim.data_view("time")
    start = time_view.clone()
    env.step(torch.zeros(NUM_ENVS, 1))
    assert torch.allclose(time_view - start, torch.full((NUM_ENVS,), 3 * env.physics_dt))
    assert env.step_dt == pytest.approx(3 * env.physics_dt)


def test_actions_are_clipped_and_scaled_into_ctrl_in_place():
    env = make_env(action_scale=0.5, clip_actions=1.0)
    ctrl_ptr = env.sim.ctrl.data_ptr()
    actions = torch.linspace(-3, 3, NUM_ENVS).unsqueeze(1)
    env.step(actions)
    assert env.sim.ctrl.data_ptr() == ctrl_ptr
    assert torch.allclose(env.sim.ctrl, actions.clamp(-1, 1) * 0.5)


def test_episode_reaching_the_time_limit_is_a_time_out_not_a_termination():
    env = make_env(episode_length_s=0.1)  # 5 policy steps at 50 Hz
    assert env.max_episode_length == math.ceil(0.1 / env.step_dt)
    for _ in range(env.max_episode_length - 1):
        _, _, dones, extras = env.step(torch.zeros(NUM_ENVS, 1))
        assert not dones.any()
    _, _, dones, extras = env.step(torch.zeros(NUM_ENVS, 1))
    assert dones.all() and extras["time_outs"].all()
    assert (env.episode_length_buf == 0).all()
    assert extras["log"]["Episode_Termination/time_out"].item() == pytest.approx(1.0)


def test_leaving_the_rail_terminates_and_resets_the_env():
    env = make_env()
    env.sim.qpos[3, 0] = 3.0  # beyond rail_limit = 2.4
    _, _, dones, extras = env.step(torch.zeros(NUM_ENVS, 1))
    assert dones[3] and not extras["time_outs"][3]
    assert dones.sum() == 1
    assert env.sim.qpos[3, 0].abs() <= env.cfg.init_position_range


def test_resets_draw_random_initial_states():
    env = make_env()
    angles = env.sim.qpos[:, 1]
    assert angles.abs().max() <= env.cfg.init_angle_range
    assert angles.unique().numel() == NUM_ENVS


def test_swingup_starts_hanging_down():
    env = make_env(swingup=True)
    assert torch.allclose(env.sim.qpos[:, 1], torch.full((NUM_ENVS,), math.pi), atol=env.cfg.init_angle_range)


def test_physics_nan_resets_that_world_and_counts_it():
    env = make_env()
    env.sim.qvel[5, 1] = float("nan")
    obs, rewards, dones, extras = env.step(torch.zeros(NUM_ENVS, 1))
    assert dones[5]
    assert extras["log"][NAN_RESETS_KEY].item() == 1
    assert torch.isfinite(rewards).all()
    assert torch.isfinite(extras["log_packed"]).all()  # the episode that ended here logs finite reward sums
    assert extras["episodes_finished"].item() >= 1
    assert torch.isfinite(obs["actor"]).all() and torch.isfinite(env.sim.qvel).all()


def test_episode_log_reports_reward_sums_of_finished_episodes():
    env = make_env(episode_length_s=0.1)
    total = torch.zeros(NUM_ENVS)
    for _ in range(env.max_episode_length):
        _, rewards, _, extras = env.step(torch.zeros(NUM_ENVS, 1))
        total += rewards
    logged = sum(v.item() for k, v in extras["log"].items() if k.startswith("Episode_Reward/"))
    assert logged == pytest.approx(total.mean().item(), rel=1e-5)


def test_setting_episode_lengths_writes_into_the_buffer_the_step_updates(env):
    """rsl_rl assigns `env.episode_length_buf` once before training; a recorded (CUDA-graph) step keeps
    incrementing the original buffer, so the assignment must land in it."""
    buffer = env.episode_length_buf
    env.episode_length_buf = torch.full_like(buffer, 3)
    assert env.episode_length_buf is buffer
    env.step(torch.zeros(env.num_envs, env.num_actions))
    assert (buffer[~env.extras["time_outs"]] >= 1).all()
    assert (buffer == 4).any()


def test_skipping_the_reset_work_in_steps_where_no_episode_ends_changes_no_state():
    skipping, resetting = make_env(), make_env()
    assert skipping._skip_idle_resets  # on CPU
    resetting._skip_idle_resets = False
    resetting.sim.qpos.copy_(skipping.sim.qpos)
    resetting.sim.qvel.copy_(skipping.sim.qvel)
    for _ in range(5):
        obs_a, rew_a, dones_a, _ = skipping.step(torch.zeros(NUM_ENVS, 1))
        obs_b, rew_b, dones_b, _ = resetting.step(torch.zeros(NUM_ENVS, 1))
        assert not dones_a.any() and torch.equal(dones_a, dones_b)
        assert torch.equal(obs_a["actor"], obs_b["actor"]) and torch.equal(rew_a, rew_b)


def _cartpole_with(**attributes):
    """Cartpole-Balance's environment class with `attributes` replaced, and a config of 2 environments."""
    from mjfleet.tasks.cartpole.env import CartpoleEnv

    cfg = get_task("Cartpole-Balance").env_config()
    cfg.num_envs = 2
    return type("EditedCartpoleEnv", (CartpoleEnv,), attributes), cfg


def test_a_reward_weight_without_a_term_fails_when_the_env_is_built_and_names_the_old_method_form():
    from mjfleet.tasks.cartpole import rewards

    terms = {name: fn for name, fn in rewards.TERMS.items() if name != "centered"}
    cls, cfg = _cartpole_with(reward_terms=terms, _reward_centered=rewards.centered)
    with pytest.raises(
        ValueError, match="reward weight\\(s\\) centered of CartpoleRewards name no entry"
    ) as err:
        cls(cfg, "cpu")
    assert "reward_terms = {'centered': _reward_centered, ...}" in str(err.value)


def test_a_reward_term_without_a_weight_fails_when_the_env_is_built():
    from mjfleet.tasks.cartpole import rewards

    cls, cfg = _cartpole_with(reward_terms={**rewards.TERMS, "centred": rewards.centered})
    with pytest.raises(ValueError, match="reward term\\(s\\) centred have no weight in CartpoleRewards"):
        cls(cfg, "cpu")


def test_each_enabled_reward_term_is_the_tables_function_weighted(env):
    from mjfleet.tasks.cartpole import rewards

    _, reward, dones, _ = env.step(torch.zeros(NUM_ENVS, 1))
    expected = sum(weight * rewards.TERMS[name](env) for name, weight in env.reward_weights.items())
    enabled = ["upright", "centered", "small_control", "small_velocity"]  # upright_product has weight 0
    assert env._reward_names == enabled
    kept = ~dones  # (an environment that was reset in the step holds its new episode's state)
    assert kept.any() and torch.allclose(reward[kept], expected[kept])


def test_the_penalty_curriculum_weighs_only_the_penalties_by_its_share_and_reaches_full_weight():
    from mjfleet.tasks.cartpole import rewards

    spec = get_task("Cartpole-Balance")
    cfg = spec.env_config()
    cfg.num_envs = NUM_ENVS
    cfg.rewards.centered = -0.1  # a penalty: the only negative weight
    cfg.penalty_curriculum_start, cfg.penalty_curriculum_steps = 0.2, 100
    torch.manual_seed(0)
    env = spec.make_env(cfg, "cpu")

    def assert_reward_weighs_penalties_by(scale):
        _, reward, dones, _ = env.step(0.5 * torch.ones(NUM_ENVS, 1))
        expected = sum(
            weight * (scale if weight < 0 else 1.0) * rewards.TERMS[name](env)
            for name, weight in env.reward_weights.items()
        )
        kept = ~dones
        assert kept.any() and torch.allclose(reward[kept], expected[kept])

    # built at full weight: play and the periodic evaluation never call set_training_progress
    assert_reward_weighs_penalties_by(1.0)
    assert env.set_training_progress(0) == {"Train/penalty_scale": pytest.approx(0.2)}
    assert_reward_weighs_penalties_by(0.2)
    assert env.set_training_progress(50) == {"Train/penalty_scale": pytest.approx(0.6)}
    assert_reward_weighs_penalties_by(0.6)
    assert env.set_training_progress(1000) == {"Train/penalty_scale": 1.0}
    assert_reward_weighs_penalties_by(1.0)
    # a delay holds the starting share, then the same rise
    cfg.penalty_curriculum_delay = 30
    assert env.set_training_progress(30) == {"Train/penalty_scale": pytest.approx(0.2)}
    assert_reward_weighs_penalties_by(0.2)
    assert env.set_training_progress(80) == {"Train/penalty_scale": pytest.approx(0.6)}
    assert_reward_weighs_penalties_by(0.6)
    # without a curriculum nothing is logged and the weights stay
    plain = make_env()
    assert plain.set_training_progress(0) == {} and plain.penalty_scale == 1.0
