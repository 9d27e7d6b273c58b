"""EpisodeStats: per-iteration statistics accumulated on device."""

import math

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
