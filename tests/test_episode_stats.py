"""EpisodeStats: per-iteration statistics accumulated on device."""

import math

import pytest
import torch

from mjfleet.rl.episode_stats import EpisodeStats


def _step(stats, rewards, dones, log=None):
    dones = torch.tensor(dones)
    stats.update(torch.tensor(rewards), dones, {"log": log or {}, "episodes_finished": dones.sum()})


def test_mean_return_and_length_count_only_finished_episodes():
    stats = EpisodeStats(num_envs=2, device="cpu")
    _step(stats, [1.0, 2.0], [False, False])
    _step(stats, [1.0, 2.0], [True, False])  # env 0: return 2 over 2 steps
    _step(stats, [5.0, 2.0], [False, True])  # env 1: return 6 over 3 steps
    out = stats.collect()
    assert out["episodes"] == 2
    assert out["mean_return"] == 4.0
    assert out["mean_episode_length"] == 2.5


def test_unfinished_episodes_carry_over_to_the_next_iteration():
    stats = EpisodeStats(num_envs=1, device="cpu")
    _step(stats, [1.0], [False])
    first = stats.collect()
    assert first["episodes"] == 0 and math.isnan(first["mean_return"])
    _step(stats, [1.0], [True])
    assert stats.collect()["mean_return"] == 2.0


def test_log_conventions_episode_means_metrics_averages_and_counts_totals():
    stats = EpisodeStats(num_envs=2, device="cpu")
    _step(
        stats,
        [0.0, 0.0],
        [True, True],
        {
            "Episode_Reward/a": torch.tensor(3.0),
            "Metrics/level": torch.tensor(1.0),
            "Sim/nan_resets": torch.tensor(1.0),
        },
    )
    _step(
        stats,
        [0.0, 0.0],
        [True, False],
        {
            "Episode_Reward/a": torch.tensor(6.0),
            "Metrics/level": torch.tensor(3.0),
            "Sim/nan_resets": torch.tensor(2.0),
        },
    )
    out = stats.collect()
    assert out["Episode_Reward/a"] == (3.0 * 2 + 6.0 * 1) / 3
    assert out["Metrics/level"] == 2.0
    assert out["Sim/nan_resets"] == 3.0


def test_a_packed_log_gives_the_same_statistics_as_the_dict_of_scalars():
    """MujocoVecEnv also hands its log over as one vector; accumulating that must change nothing."""
    steps = [
        ([1.0, 2.0, 0.5], [False, True, False], {"Episode_Reward/a": 3.0, "Metrics/m": 1.0, "Sim/n": 0.0}),
        ([1.0, 2.0, 0.5], [True, False, True], {"Episode_Reward/a": 5.0, "Metrics/m": 2.0, "Sim/n": 1.0}),
        ([4.0, 1.0, 0.5], [True, True, False], {"Episode_Reward/a": 7.0, "Metrics/m": 4.0, "Sim/n": 2.0}),
    ]
    plain, packed = EpisodeStats(num_envs=3, device="cpu"), EpisodeStats(num_envs=3, device="cpu")
    for rewards, dones, log in steps:
        dones_t, rewards_t = torch.tensor(dones), torch.tensor(rewards)
        tensors = {k: torch.tensor(v) for k, v in log.items()}
        plain.update(rewards_t, dones_t, {"log": tensors, "episodes_finished": dones_t.sum()})
        vector = torch.stack(list(tensors.values()))
        extras = {
            "log": dict(zip(tensors, vector.unbind(), strict=True)),
            "log_packed": vector,
            "episodes_finished": dones_t.sum(),
        }
        packed.update(rewards_t, dones_t, extras)
    ours, theirs = packed.collect(), plain.collect()
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert ours[key] == pytest.approx(theirs[key]), key
    assert theirs["Episode_Reward/a"] == (3.0 * 1 + 5.0 * 2 + 7.0 * 2) / 5
    # The accumulators restart after collect(): a second iteration counts only its own steps.
    dones_t = torch.tensor([True, True, True])
    vector = torch.tensor([1.0, 8.0, 0.0])
    keys = ("Episode_Reward/a", "Metrics/m", "Sim/n")
    extras = {"log": dict(zip(keys, vector.unbind(), strict=True)), "log_packed": vector}
    packed.update(torch.ones(3), dones_t, {**extras, "episodes_finished": dones_t.sum()})
    second = packed.collect()
    assert second["episodes"] == 3 and second["Episode_Reward/a"] == 1.0 and second["Metrics/m"] == 8.0


def test_recent_is_rsl_rls_mean_over_the_last_100_completed_episodes():
    """Train/mean_reward's meaning: a deque of the last 100 episode returns, in the order they ended."""
    from collections import deque

    torch.manual_seed(0)
    num_envs = 7
    stats = EpisodeStats(num_envs=num_envs, device="cpu")
    returns, lengths = deque(maxlen=100), deque(maxlen=100)
    running, steps = torch.zeros(num_envs), torch.zeros(num_envs)
    for iteration in range(6):
        for _ in range(10 if iteration != 3 else 60):  # iteration 3 ends more than 100 episodes on its own
            rewards = torch.rand(num_envs)
            dones = torch.rand(num_envs) < 0.3
            running += rewards
            steps += 1
            returns.extend(running[dones].tolist())
            lengths.extend(steps[dones].tolist())
            running[dones], steps[dones] = 0.0, 0.0
            _step(stats, rewards.tolist(), dones.tolist())
        stats.collect()
        assert stats.recent["episodes"] == len(returns)
        assert stats.recent["mean_return"] == pytest.approx(sum(returns) / len(returns), rel=1e-5)
        assert stats.recent["mean_episode_length"] == pytest.approx(sum(lengths) / len(lengths), rel=1e-5)
    assert len(returns) == 100


def test_recent_is_nan_until_an_episode_ends_and_then_survives_iterations_without_one():
    stats = EpisodeStats(num_envs=1, device="cpu")
    _step(stats, [1.0], [False])
    assert set(stats.collect()) == {"episodes", "mean_return", "mean_episode_length"}  # window: not here
    assert stats.recent["episodes"] == 0 and math.isnan(stats.recent["mean_return"])
    _step(stats, [2.0], [True])
    stats.collect()
    stats.collect()  # an iteration in which nothing ended
    assert stats.recent == {"episodes": 1, "mean_return": 3.0, "mean_episode_length": 2.0}
