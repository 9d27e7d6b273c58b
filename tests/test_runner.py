"""FleetRunner: training iterations, metrics.jsonl, checkpoints — with the real simulator, one process."""

import json

import pytest
import torch
from small_cartpole import cartpole_configs

from mjfleet.rl import FleetRunner
from mjfleet.runs import RunDir

REQUIRED_METRICS = {"iteration", "env_steps", "env_steps_per_s", "mean_return", "mean_episode_length"}


def _runner(tmp_path, num_envs=32, iterations_per_save=2, steps=8):
    spec, env_cfg, agent = cartpole_configs(num_envs, steps, episode_length_s=0.2)
    agent.save_interval = iterations_per_save
    torch.manual_seed(agent.seed)
    run_dir = RunDir.new(agent.experiment_name, root=tmp_path)
    run_dir.create()
    return FleetRunner(spec.make_env(env_cfg), agent, run_dir, "cpu"), run_dir


def _collect(runner, returns: bool = True):
    """One rollout into the algorithm's storage (inference mode, as the runner collects), then its returns unless
    `returns` is False; the last observations."""
    alg = runner.alg
    obs = runner.env.get_observations()
    with torch.inference_mode():
        for _ in range(runner.agent_cfg.num_steps_per_env):
            obs, rewards, dones, extras = runner.env.step(alg.act(obs))
            alg.process_env_step(obs, rewards, dones, extras)
        if returns:
            alg.compute_returns(obs)
    return obs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    runner, run_dir = _runner(tmp_path_factory.mktemp("runs"))
    record = runner.learn(3)
    runner.close()
    return runner, run_dir, record


def test_metrics_jsonl_has_one_record_per_iteration_with_the_required_keys(trained):
    _, run_dir, _ = trained
    lines = [json.loads(line) for line in run_dir.metrics_file.read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [0, 1, 2]
    for record in lines:
        assert REQUIRED_METRICS <= record.keys()
        assert "Loss/surrogate" in record and "Episode_Reward/upright" in record
    assert lines[-1]["env_steps"] == 3 * 8 * 32
    assert lines[-1]["mean_episode_length"] <= 10


def test_checkpoints_are_saved_at_the_interval_and_at_the_end(trained):
    _, run_dir, _ = trained
    assert [it for it, _ in run_dir.checkpoints()] == [2, 3]
    assert not list(run_dir.path.glob(".*.tmp"))


def test_checkpoint_holds_plain_state_dicts_and_the_agent_config(trained):
    runner, run_dir, _ = trained
    state = torch.load(run_dir.checkpoint(3), map_location="cpu", weights_only=True)
    assert state["iter"] == 3 and state["env_steps"] == 3 * 8 * 32
    assert all(not k.startswith("module.") for k in state["actor_state_dict"])
    assert state["agent_cfg"]["actor"]["hidden_dims"] == [64, 64]
    for key, value in runner.alg.get_policy().state_dict().items():
        assert torch.equal(state["actor_state_dict"][key], value)


def test_loading_a_checkpoint_restores_policy_and_iteration(trained, tmp_path):
    _, run_dir, _ = trained
    fresh, _ = _runner(tmp_path)
    fresh.load(run_dir.checkpoint(3))
    assert fresh.current_learning_iteration == 3
    state = torch.load(run_dir.checkpoint(3), map_location="cpu", weights_only=True)
    for key, value in fresh.alg.get_policy().state_dict().items():
        assert torch.equal(state["actor_state_dict"][key], value)


def test_the_penalty_curriculum_follows_the_env_steps_per_environment_and_continues_on_resume(tmp_path):
    spec, env_cfg, agent = cartpole_configs(16, 8, episode_length_s=0.2)
    env_cfg.penalty_curriculum_start, env_cfg.penalty_curriculum_steps = 0.5, 32
    agent.save_interval = 2
    run_dir = RunDir.new(agent.experiment_name, root=tmp_path)
    run_dir.create()
    runner = FleetRunner(spec.make_env(env_cfg), agent, run_dir, "cpu")
    runner.learn(2)
    runner.close()
    resumed = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    resumed.load(run_dir.checkpoint(2))
    # 8 steps per environment per iteration: the scale rises by 0.5 x 8 / 32 per iteration, from 0.5 to 1
    scales = [
        json.loads(line)["Train/penalty_scale"] for line in run_dir.metrics_file.read_text().splitlines()
    ]
    assert scales == [0.5, 0.625]
    assert resumed.learn(1)["Train/penalty_scale"] == 0.75  # 16 steps per environment so far, not 0
    assert resumed.learn(3)["Train/penalty_scale"] == 1.0 and resumed.env.penalty_scale == 1.0


@pytest.mark.parametrize("compiled", [False, True], ids=["as-written", "compiled"])
def test_fleet_ppo_update_equals_rsl_rl_ppo_update_on_the_same_rollout(tmp_path, compiled):
    """Both update paths, the loss as written and compiled, against rsl_rl 5.5.1's own `PPO.update`."""
    import copy
    from itertools import chain

    from rsl_rl.algorithms import PPO

    from mjfleet.rl.ppo import FleetPPO

    runner, _ = _runner(tmp_path)
    alg = runner.alg
    assert isinstance(alg, FleetPPO) and alg.compiled_loss is not None  # compiled is the default for MLPs
    if not compiled:
        alg.compiled_loss = None
    before = copy.deepcopy(alg.get_policy().state_dict())
    _collect(runner)
    reference = copy.deepcopy(alg)
    reference.__class__ = PPO  # rsl_rl's own update, with its per-tensor Adam
    reference.optimizer = torch.optim.Adam(
        chain(reference.actor.parameters(), reference.critic.parameters()), lr=alg.learning_rate
    )

    torch.manual_seed(7)
    ours = alg.optimize()
    torch.manual_seed(7)
    theirs = reference.update()

    assert ours.keys() == {*theirs.keys(), "total", "kl"}  # and the total loss and mean KL, logged
    for key in theirs:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6)
    assert alg.learning_rate == reference.learning_rate
    assert not torch.equal(before["mlp.0.weight"], alg.get_policy().state_dict()["mlp.0.weight"])
    for ours_model, their_model in (
        (alg.get_policy(), reference.get_policy()),
        (alg.critic, reference.critic),
    ):
        theirs_state = their_model.state_dict()
        for key, value in ours_model.state_dict().items():
            torch.testing.assert_close(value, theirs_state[key], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_the_configured_optimizer_is_kept_with_its_settings(tmp_path, optimizer):
    """Adam becomes torch's fused Adam with the same settings; any other optimizer (AdamW is a subclass of Adam
    with decoupled weight decay) stays as rsl_rl made it. Each trains an iteration."""
    spec, env_cfg, agent = cartpole_configs(16, 4, episode_length_s=0.2)
    agent.ppo.optimizer = optimizer
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu", log_format="compact")
    opt = runner.alg.optimizer
    expected = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer]
    assert type(opt) is expected
    if optimizer == "adam":
        assert opt.defaults["fused"] and all(group["fused"] for group in opt.param_groups)
    if optimizer == "adamw":
        assert opt.defaults["weight_decay"] == 0.01  # torch's AdamW default, not Adam's 0
    before = [p.detach().clone() for p in runner.alg.actor.parameters()]
    runner.learn(1)
    assert any(not torch.equal(a, p) for a, p in zip(before, runner.alg.actor.parameters(), strict=True))


def test_accumulating_the_minibatches_of_an_epoch_equals_one_full_batch_step():
    """--agent.ppo.grad-sync-period K: the mean of K minibatches' gradients, one optimizer step. With K = the
    epoch's 4 minibatches (equal sizes, a mean loss) that is the full rollout's gradient: one 1-minibatch step."""
    runs = []
    for minibatches in (1, 4):
        spec, env_cfg, agent = cartpole_configs(32, 8, episode_length_s=0.2)
        agent.ppo.num_learning_epochs = 1
        agent.ppo.num_mini_batches = agent.ppo.grad_sync_period = minibatches
        agent.ppo.schedule = "fixed"
        torch.manual_seed(agent.seed)
        runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
        start = [p.detach().clone() for p in runner.alg.trained]
        _collect(runner)
        losses = runner.alg.optimize()
        runs.append((start, [p.detach().clone() for p in runner.alg.trained], losses))
    alg = runner.alg
    (start, full, full_losses), (start_k, accumulated, losses) = runs
    for a, b in zip(start, start_k, strict=True):
        assert torch.equal(a, b)  # the same initial policy and rollout
    assert any(not torch.equal(a, b) for a, b in zip(start, full, strict=True))
    for a, b in zip(full, accumulated, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert losses["value"] == pytest.approx(full_losses["value"], rel=1e-4)
    total = losses["surrogate"] + alg.value_loss_coef * losses["value"] - alg.entropy_coef * losses["entropy"]
    assert losses["total"] == pytest.approx(total, rel=1e-6) and "kl" not in losses  # fixed schedule: no KL


def test_grad_sync_period_outside_one_to_the_minibatch_count_is_refused():
    from mjfleet.errors import UsageError

    spec, env_cfg, agent = cartpole_configs()
    env = spec.make_env(env_cfg)
    for period in (0, agent.ppo.num_mini_batches + 1):
        agent.ppo.grad_sync_period = period
        with pytest.raises(UsageError, match="grad-sync-period"):
            FleetRunner(env, agent, None, "cpu")


def test_periodic_evaluation_logs_eval_rows_keeps_the_best_and_changes_nothing_in_training(tmp_path):
    from mjfleet.evaluation import evaluate
    from mjfleet.ranking import ended_early, rank_key
    from mjfleet.train.hooks import PeriodicEvaluation

    runs, seen = [], []
    for with_eval in (True, False):
        runner, run_dir = _runner(tmp_path / str(with_eval), iterations_per_save=10)
        if with_eval:
            with torch.random.fork_rng():
                spec, eval_cfg, _ = cartpole_configs(4, 8, episode_length_s=0.2)
                eval_env = spec.make_env(eval_cfg)

            def evaluator(policy, env=eval_env):
                seen.append(evaluate(env, policy, 4))
                return seen[-1]

            runner.hooks.evaluate = PeriodicEvaluation(evaluator, 2, run_dir)
        runner.learn(4)
        runner.close()
        runs.append((runner, run_dir))
    (evaluated, run_dir), (plain, _) = runs
    rows = [json.loads(line) for line in run_dir.metrics_file.read_text().splitlines()]
    assert ["Eval/mean_return" in r for r in rows] == [False, True, False, True]
    assert all(0 < rows[i]["Eval/mean_episode_length"] <= 10 for i in (1, 3))
    assert [rows[i]["Eval/mean_return"] for i in (1, 3)] == [r["mean_return"] for r in seen]
    shares = [early / ended for early, ended in (ended_early(r["terminations"]) for r in seen)]
    assert [rows[i]["Eval/ended_early_share"] for i in (1, 3)] == shares
    best = torch.load(run_dir.path / "model_best.pt", map_location="cpu", weights_only=True)
    # the best by mjfleet.ranking's rule: falls first, then the return
    assert best["infos"]["eval"] == min(
        seen, key=lambda r: rank_key(r["mean_return"], "maximize", [ended_early(r["terminations"])])
    )
    assert [it for it, _ in run_dir.checkpoints()] == [4]  # model_best.pt is outside the numbered checkpoints
    for a, b in zip(evaluated.alg.trained, plain.alg.trained, strict=True):
        assert torch.equal(a, b)


def test_a_one_worker_runner_reads_no_rank_variables(monkeypatch, tmp_path):
    """An explicit one-worker context: RANK/WORLD_SIZE left over from an outer launcher change nothing (a runner
    that read them would wait for 8 ranks that never come)."""
    from mjfleet.fleet.context import WorkerContext

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "3")
    spec, env_cfg, agent = cartpole_configs(16, 4, episode_length_s=0.2)
    runner = FleetRunner(
        spec.make_env(env_cfg), agent, context=WorkerContext.single("cpu"), log_format="compact"
    )
    assert runner.ctx.world_size == 1 and runner.alg.gradients.reducer is None
    assert runner.describe() == "update: PPO loss compiled (torch.compile); one worker, nothing averaged"
    before = [p.detach().clone() for p in runner.alg.trained]
    runner.learn(1)
    assert runner.current_learning_iteration == 1
    assert any(not torch.equal(a, p) for a, p in zip(before, runner.alg.trained, strict=True))


def test_a_checkpoint_loads_with_weights_only(trained):
    """Checkpoints are plain data: torch's safe loader (no unpickling of arbitrary objects) reads every field."""
    _, run_dir, _ = trained
    state = torch.load(run_dir.checkpoint(3), map_location="cpu", weights_only=True)
    assert {
        "actor_state_dict",
        "critic_state_dict",
        "optimizer_state_dict",
        "rng_states",
        "infos",
    } <= state.keys()
    assert isinstance(state["rng_states"][0]["torch"], torch.Tensor)


def test_per_minibatch_advantage_normalisation_is_a_setting_that_reaches_the_update():
    spec, env_cfg, agent = cartpole_configs(16, 4, episode_length_s=0.2)
    agent.ppo.normalize_advantage_per_mini_batch = True
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu", log_format="compact")
    assert runner.alg.normalize_advantage_per_mini_batch and runner.alg.compiled_loss is not None
    runner.learn(1)
