"""Recurrent PPO actors (`--agent.actor.rnn gru|lstm`, rsl_rl's RNNModel): hidden state reset per environment,
minibatches that replay the rollout, and a user's run from train to play."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from helpers import CARTPOLE_EXPERIMENT, run_cli
from small_cartpole import cartpole_configs, rollout
from tensordict import TensorDict

from mjfleet.evaluation import ActorPolicy
from mjfleet.rl import FleetRunner

RECURRENT_SMALL = [
    "--gpu-ids", "None", "--num-envs", "16", "--agent.num-steps-per-env", "8", "--agent.actor.rnn", "lstm",
    "--agent.actor.rnn-hidden-dim", "16", "--logger", "none", "--log-format", "compact",
]  # fmt: skip


def _recurrent_actor(rnn: str = "gru"):
    from rsl_rl.models import RNNModel

    torch.manual_seed(0)
    obs = TensorDict({"actor": torch.zeros(2, 3)}, batch_size=[2])
    return RNNModel(obs, {"actor": ["actor"]}, "actor", 2, hidden_dims=[8], rnn_type=rnn, rnn_hidden_dim=8)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_an_episodes_end_resets_that_environments_hidden_state_only(rnn):
    """Two environments see the same 4 observations; environment 0's episode ends after the 2nd step. At the 3rd
    step it acts as a fresh policy does on that observation, while environment 1 goes on from its memory."""
    actor = _recurrent_actor(rnn)
    steps = [TensorDict({"actor": torch.randn(2, 3)}, batch_size=[2]) for _ in range(4)]
    policy, remembering = ActorPolicy(actor), ActorPolicy(copy.deepcopy(actor))
    fresh = ActorPolicy(copy.deepcopy(actor))
    with torch.no_grad():
        policy.reset()
        remembering.reset()
        for i, obs in enumerate(steps[:3]):
            acted, remembered = policy(obs), remembering(obs)
            if i == 1:
                policy.reset(torch.tensor([1.0, 0.0]))  # environment 0's episode ended at this step
        fresh.reset()
        from_zero = fresh(steps[2])
    torch.testing.assert_close(acted[0], from_zero[0])
    torch.testing.assert_close(acted[1], remembered[1])
    assert not torch.allclose(acted[0], remembered[0])


def test_recurrent_minibatches_replay_the_rollouts_log_probabilities():
    """The update's minibatches (whole trajectories, padded, from the hidden states the rollout saved) give, before
    any step, the log-probabilities the rollout recorded step by step: across episode ends inside the rollout."""
    spec, env_cfg, agent = cartpole_configs(16, 24, episode_length_s=0.2)  # episodes end inside the rollout
    agent.actor.rnn, agent.actor.rnn_hidden_dim = "gru", 16
    agent.ppo.num_mini_batches = 2
    torch.manual_seed(0)
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    alg = runner.alg
    rollout(runner, returns=True)
    assert alg.storage.dones.any()  # some trajectories start inside the rollout
    assert alg.recurrent and alg.compiled_loss is None
    compared = 0
    with torch.no_grad():
        for batch in alg.storage.recurrent_mini_batch_generator(alg.num_mini_batches, 1):
            alg.actor(
                batch.observations,
                masks=batch.masks,
                hidden_state=batch.hidden_states[0],
                stochastic_output=True,
            )
            replayed = alg.actor.get_output_log_prob(batch.actions)
            torch.testing.assert_close(replayed, batch.old_actions_log_prob.squeeze(-1), rtol=1e-5, atol=1e-5)
            compared += replayed.numel()
    assert compared == agent.num_steps_per_env * 16


def test_recurrent_ppo_trains_resumes_plays_and_exports_with_its_state(tmp_path):
    """A user's LSTM run: the start-up line says why its loss is not compiled, the checkpoint rebuilds the
    recurrent actor in `play`, --resume continues it, and the export carries the hidden state in and out."""
    result = run_cli(
        "train", "Cartpole-Balance", *RECURRENT_SMALL, "--max-iterations", "2", cwd=tmp_path, check=True
    )
    assert "not compiled: a recurrent network" in result.stdout
    (run_dir,) = sorted((tmp_path / "logs" / CARTPOLE_EXPERIMENT).iterdir())
    state = torch.load(run_dir / "model_2.pt", weights_only=True)
    assert state["algorithm"] == "ppo" and state["rsl_rl_cfg"]["actor"]["class_name"] == "RNNModel"
    assert any(key.startswith("rnn.") for key in state["actor_state_dict"])
    resumed = run_cli(
        "train",
        "Cartpole-Balance",
        *RECURRENT_SMALL,
        "--resume",
        "--max-iterations",
        "3",
        cwd=tmp_path,
        check=True,
    )
    assert "resuming from" in resumed.stdout
    play = ["Cartpole-Balance", "--gpu-ids", "None", "--load-run", str(run_dir), "--episodes", "4"]
    result = run_cli("play", *play, "--export", cwd=tmp_path, check=True)
    assert "deterministic" in result.stdout and "ONNX matches torch" in result.stdout
    meta = json.loads((run_dir / "exported" / "policy.json").read_text())
    assert meta["state"]["inputs"] == ["h_in", "c_in"] and meta["state"]["shape"] == [1, "batch", 16]
    # TorchScript alike: checked step by step at export, state in and out
    assert meta["files"]["torchscript"] == "policy.pt" and meta["torchscript"]["max_abs_diff_vs_torch"] < 1e-5
    # examples/sim2sim.py carries the state in MuJoCo C: its first actions are play's, step by step
    from test_sim2sim import dumped_actions, first_actions

    expected, initial = first_actions("Cartpole-Balance", run_dir, 50, tmp_path)
    got = dumped_actions(run_dir / "exported", initial, 50, tmp_path)
    assert got.shape == expected.shape and len(got) >= 25
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_the_recurrent_export_checks_fail_for_an_export_that_is_not_the_actor(tmp_path):
    """The step-by-step checks (state carried, reset at random episode ends) catch an ONNX graph or a TorchScript
    module of other weights."""
    from mjfleet.deploy.check import (
        ExportError,
        check_recurrent_onnx,
        check_recurrent_torchscript,
        recurrent_state,
    )
    from mjfleet.deploy.export import _export_onnx, _torchscript

    actor = _recurrent_actor("lstm").eval()
    obs = TensorDict({"actor": torch.zeros(2, 3)}, batch_size=[2])
    path = tmp_path / "policy.onnx"
    _export_onnx(actor, path, recurrent_state(actor))
    scripted = _torchscript(actor, recurrent=True)
    assert check_recurrent_onnx(path, actor, obs) < 1e-5
    assert check_recurrent_torchscript(scripted, actor, obs) < 1e-5
    with torch.no_grad():
        actor.rnn.rnn.weight_hh_l0.mul_(1.5)  # the memory differs: only steps after the first can tell
    with pytest.raises(ExportError, match="recurrent ONNX"):
        check_recurrent_onnx(path, actor, obs)
    with pytest.raises(ExportError, match="recurrent TorchScript"):
        check_recurrent_torchscript(scripted, actor, obs)
