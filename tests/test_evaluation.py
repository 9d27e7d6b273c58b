"""`mjfleet.evaluation`: what an evaluation reports, on the real simulator."""

import torch

from mjfleet.evaluation import early_terminations, evaluate, random_policy, zero_policy
from mjfleet.tasks import get_task


def _env(task: str, num_envs: int, **changes):
    spec = get_task(task)
    cfg = spec.env_config()
    cfg.num_envs = num_envs
    for key, value in changes.items():
        setattr(cfg, key, value)
    return spec.make_env(cfg), cfg


def test_standing_still_under_a_fixed_command_misses_it_by_the_commanded_speed():
    spec = get_task("Quadruped-Velocity-Flat")
    cfg = spec.env_config()
    cfg.num_envs, cfg.episode_length_s = 4, 2.0
    cfg.commands.fix(0.6, 0.0, 0.0)
    env = spec.make_env(cfg)
    result = evaluate(env, zero_policy(env), episodes=4)

    assert torch.equal(env.commands, torch.tensor([[0.6, 0.0, 0.0]]).expand(4, 3))
    metrics = result["metrics"]
    # The default pose under PD holds the robot up and (after the random start velocities die out) still.
    assert abs(metrics["base_lin_vel_x"]) < 0.1 and abs(metrics["base_ang_vel_z"]) < 0.1
    assert 0.5 < metrics["lin_vel_error"] < 0.7
    assert metrics["ang_vel_error"] < 0.1
    assert result["terminations"] == {"fell": 0, "time_out": result["episodes_ended"]}
    assert result["episodes"] == 4 and result["mean_episode_length"] == env.max_episode_length


def test_random_actions_end_episodes_early_and_every_end_is_counted_once():
    env, _ = _env("Cartpole-Balance", 8, episode_length_s=2.0)
    result = evaluate(env, random_policy(env, seed=1), episodes=16)
    assert result["episodes"] == 16
    assert early_terminations(result) > 0
    assert sum(result["terminations"].values()) == result["episodes_ended"] >= 16
    # Cartpole names no termination cause: early ends are counted as such.
    assert set(result["terminations"]) <= {"time_out", "terminated"}


def test_the_same_seed_gives_the_same_evaluation():
    results = []
    for _ in range(2):
        torch.manual_seed(5)
        env, _ = _env("Cartpole-Balance", 4, episode_length_s=1.0)
        torch.manual_seed(5)
        results.append(evaluate(env, random_policy(env, seed=5), episodes=8))
    assert results[0] == results[1]
