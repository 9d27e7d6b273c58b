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
        for _ in range(runner.cfg["num_steps_per_env"]):
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
    state = torch.load(run_dir.checkpoint(3), map_location="cpu", weights_only=False)
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
    state = torch.load(run_dir.checkpoint(3), map_location="cpu", weights_only=False)
    for key, value in fresh.alg.get_policy().state_dict().items():
        assert torch.equal(state["actor_state_dict"][key], value)


def test_fleet_ppo_update_equals_rsl_rl_ppo_update_on_the_same_rollout(tmp_path):
    import copy
    from itertools import chain

    from rsl_rl.algorithms import PPO

    from mjfleet.rl.ppo import FleetPPO

    runner, _ = _runner(tmp_path)
    alg = runner.alg
    assert isinstance(alg, FleetPPO)
    before = copy.deepcopy(alg.get_policy().state_dict())
    _collect(runner)
    reference = copy.deepcopy(alg)
    reference.__class__ = PPO  # rsl_rl's own update, with its per-tensor Adam
    reference.optimizer = torch.optim.Adam(
        chain(reference.actor.parameters(), reference.critic.parameters()), lr=alg.learning_rate
    )

    torch.manual_seed(7)
    ours = alg.update()
    torch.manual_seed(7)
    theirs = reference.update()

    assert ours.keys() == theirs.keys()
    for key in ours:
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


@pytest.mark.parametrize("per_minibatch", [False, True])
def test_returns_and_advantages_equal_rsl_rl_compute_returns(tmp_path, per_minibatch):
    import copy

    from rsl_rl.algorithms import PPO

    runner, _ = _runner(tmp_path, steps=16)  # 0.2 s episodes = 10 steps: terminal steps inside the rollout
    alg = runner.alg
    alg.normalize_advantage_per_mini_batch = per_minibatch
    obs = _collect(runner, returns=False)
    assert alg.storage.dones.any()
    with torch.inference_mode():
        reference = copy.deepcopy(alg)
        alg.compute_returns(obs)
        PPO.compute_returns(reference, obs)
    for name in ("returns", "advantages"):
        ours, theirs = getattr(alg.storage, name), getattr(reference.storage, name)
        assert not torch.equal(ours, torch.zeros_like(ours))
        torch.testing.assert_close(ours, theirs, rtol=0.0, atol=0.0)


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_the_configured_optimizer_is_kept_with_its_settings(tmp_path, optimizer):
    """Adam becomes torch's fused Adam with the same settings; any other optimizer (AdamW is a subclass of Adam
    with decoupled weight decay) stays as rsl_rl made it. Each trains an iteration."""
    spec, env_cfg, agent = cartpole_configs(16, 4, episode_length_s=0.2)
    agent.algorithm.optimizer = optimizer
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu", log_format="compact")
    opt = runner.alg.optimizer
    expected = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer]
    assert type(opt) is expected
    if optimizer == "adam":
        assert opt.defaults["fused"]
    if optimizer == "adamw":
        assert opt.defaults["weight_decay"] == 0.01  # torch's AdamW default, not Adam's 0
    before = [p.detach().clone() for p in runner.alg.actor.parameters()]
    runner.learn(1)
    assert any(not torch.equal(a, p) for a, p in zip(before, runner.alg.actor.parameters(), strict=True))


def test_packed_minibatches_equal_indexing_every_field_as_the_cuda_graph_does(tmp_path):
    """The op-by-op update gathers minibatches from one packed matrix; the CUDA graph (graphed_update) indexes
    each of `transition_fields` instead: both are rsl_rl's rows and fields."""
    from mjfleet.rl.minibatch_fields import make_batch, transition_fields

    runner, _ = _runner(tmp_path)
    alg = runner.alg
    _collect(runner)
    st = alg.storage
    indices = alg._minibatch_indices()
    observations, fields = st.observations.flatten(0, 1), transition_fields(st)
    assert len(fields) == 7  # actions, values, advantages, returns, log-probabilities, mean, std
    for index, packed in zip(indices, alg._packed_mini_batches(indices), strict=True):
        indexed = make_batch(observations[index], {name: t[index] for name, t in fields.items()})
        for group in st.observations.keys():
            assert torch.equal(packed.observations[group], indexed.observations[group])
        for name in ("actions", "values", "advantages", "returns", "old_actions_log_prob"):
            assert torch.equal(getattr(packed, name), getattr(indexed, name)), name
        assert len(packed.old_distribution_params) == len(indexed.old_distribution_params) == 2
        for a, b in zip(packed.old_distribution_params, indexed.old_distribution_params, strict=True):
            assert torch.equal(a, b)


def test_autograd_minibatches_over_drawn_indices_are_rsl_rls_own(tmp_path):
    """A failed CUDA-graph capture goes on op by op over the minibatches it already drew: with autograd too, those
    are the rows rsl_rl's generator would draw (the random stream is not drawn twice)."""
    import copy

    runner, _ = _runner(tmp_path)
    alg = runner.alg
    alg._analytic = None  # autograd
    _collect(runner)
    models = (alg.actor, alg.critic)
    start = [copy.deepcopy(m.state_dict()) for m in models], copy.deepcopy(alg.optimizer.state_dict())
    learning_rate = alg.learning_rate  # the adaptive schedule changes it
    results = []
    for drawn in (False, True):
        alg.learning_rate = learning_rate
        for model, state in zip(models, start[0], strict=True):
            model.load_state_dict(state)
        alg.optimizer.load_state_dict(copy.deepcopy(start[1]))
        alg._optimizer_step = None
        torch.manual_seed(3)
        losses, _ = alg._update_op_by_op(alg._minibatch_indices() if drawn else None)
        params = torch.cat([p.detach().flatten() for m in models for p in m.parameters()])
        results.append((losses, params, torch.rand(1)))
    (losses, params, after), (drawn_losses, drawn_params, drawn_after) = results
    assert torch.equal(after, drawn_after)  # each drew one permutation
    torch.testing.assert_close(drawn_losses, losses)
    torch.testing.assert_close(drawn_params, params)
    assert not torch.equal(params, torch.cat([t.flatten() for s in start[0] for t in s.values()]))
