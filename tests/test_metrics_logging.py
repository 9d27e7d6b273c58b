"""What a run logs: metrics.jsonl, TensorBoard's tags (rsl_rl's beside mjfleet's) and the reward-curve plots."""

import json

import pytest
import torch
from helpers import assert_real_plot, cartpole_runner, run_cli


# --------------------------------------------------------------------------- plots
def test_plot_cli_draws_the_reward_curve_of_a_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [
        {
            "iteration": i,
            "env_steps": 256 * (i + 1),
            "mean_return": 10.0 + i * i,
            "mean_episode_length": 5.0 + i,
        }
        for i in range(20)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn')
    run_cli("plot", str(run_dir), timeout=120, check=True)
    assert_real_plot(run_dir / "reward_curve.png")


def test_plot_without_metrics_is_a_one_line_error(tmp_path, capsys):
    from mjfleet.cli.plot import main

    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "metrics.jsonl" in err


def test_plot_over_an_experiment_glob_skips_plays_baseline_directories(tmp_path, monkeypatch, capsys):
    from mjfleet.cli.plot import main

    records = [
        {"iteration": i, "env_steps": 64 * i, "mean_return": float(i), "mean_episode_length": 3.0}
        for i in range(9)
    ]
    runs = [tmp_path / "2026-01-01_00-00-00", tmp_path / "2026-01-02_00-00-00"]
    for run in runs:
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "baseline_random").mkdir()
    (tmp_path / "baseline_random" / "eval.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    main([str(p) for p in sorted(tmp_path.iterdir())])
    out = capsys.readouterr().out
    assert "skipped (no metrics.jsonl): " in out and "baseline_random" in out
    assert_real_plot(tmp_path / "reward_curves.png")


def test_tensorboard_gets_rsl_rls_tags_beside_mjfleets_and_metrics_jsonl_only_mjfleets(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mjfleet.runs.metrics import MetricsWriter

    record = {"iteration": 3, "env_steps_per_s": 1234.5, "mean_episode_length": 7.0, "collect_time": 0.5}
    record |= {"learn_time": 0.25, "learning_rate": 1e-3, "Policy/action_std": 0.8, "Loss/kl": 0.01}
    writer = MetricsWriter(tmp_path, "tensorboard")
    writer.write(record, {"episodes": 100, "mean_return": 42.0, "mean_episode_length": 9.0})
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()

    def value(tag):
        (scalar,) = events.Scalars(tag)
        assert scalar.step == 3
        return scalar.value

    assert value("Perf/total_fps") == value("mjfleet/env_steps_per_s") == 1234.5
    assert value("Perf/collection_time") == value("Perf/collection time") == 0.5
    assert value("Perf/learning_time") == 0.25 and value("Loss/kl") == pytest.approx(0.01)
    assert value("Loss/learning_rate") == pytest.approx(1e-3) and value("Policy/mean_std") == pytest.approx(
        0.8
    )
    # rsl_rl's Train/mean_episode_length is the moving window; mjfleet's own (this iteration's episodes) is not
    # under Train/
    assert value("Train/mean_reward") == 42.0 and value("Train/mean_episode_length") == 9.0
    assert value("mjfleet/mean_episode_length") == 7.0
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line) == record


def test_tensorboard_train_mean_reward_is_the_mean_of_the_last_100_episodes_of_a_real_run(tmp_path):
    """A real Cartpole run with the TensorBoard logger, its episodes observed at env.step: Train/mean_reward and
    Train/mean_episode_length are rsl_rl's means over the last 100 completed episodes; metrics.jsonl keeps
    mjfleet's per-iteration means."""
    from collections import deque

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runner, run_dir = cartpole_runner(tmp_path, seed=4, episode_length_s=0.1, logger="tensorboard")
    env, real_step = runner.env, runner.env.step
    returns, lengths = deque(maxlen=100), deque(maxlen=100)
    running, steps = torch.zeros(env.num_envs), torch.zeros(env.num_envs)
    expected = []

    def observed_step(actions):
        obs, rewards, dones, extras = real_step(actions)
        running.add_(rewards.cpu())
        steps.add_(1)
        ended = dones.cpu().bool()
        returns.extend(running[ended].tolist())
        lengths.extend(steps[ended].tolist())
        running[ended], steps[ended] = 0.0, 0.0
        return obs, rewards, dones, extras

    env.step = observed_step
    runner.hooks.on_iteration = lambda record: expected.append(
        (record["iteration"], sum(returns) / len(returns), sum(lengths) / len(lengths), len(returns))
    )
    runner.learn(6)
    runner.close()
    assert expected[-1][3] == 100, "the window must have filled (and dropped episodes) for this test to bite"

    events = EventAccumulator(str(run_dir.path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    rsl_rl = {"Train/mean_reward", "Train/mean_episode_length", "Perf/total_fps", "Perf/collection time"}
    rsl_rl |= {"Perf/collection_time", "Perf/learning_time", "Loss/learning_rate", "Policy/mean_std"}
    rsl_rl |= {"Loss/value", "Loss/surrogate", "Loss/entropy"}
    assert rsl_rl <= tags
    reward = {s.step: s.value for s in events.Scalars("Train/mean_reward")}
    length = {s.step: s.value for s in events.Scalars("Train/mean_episode_length")}
    for iteration, mean_return, mean_length, _ in expected:
        assert reward[iteration] == pytest.approx(mean_return, rel=1e-4)
        assert length[iteration] == pytest.approx(mean_length, rel=1e-4)
    records = [json.loads(line) for line in (run_dir.path / "metrics.jsonl").read_text().splitlines()]
    own = {s.step: s.value for s in events.Scalars("mjfleet/mean_return")}
    assert [own[r["iteration"]] for r in records] == pytest.approx([r["mean_return"] for r in records])
    only_rsl_rl = rsl_rl - {"Loss/value", "Loss/surrogate", "Loss/entropy"}
    assert not only_rsl_rl & {key for r in records for key in r}
