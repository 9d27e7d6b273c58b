"""`--algorithm distillation`: a student imitating a trained teacher, the third algorithm on the contract."""

from __future__ import annotations

import pathlib

import pytest
import torch
from helpers import CARTPOLE_EXPERIMENT, assert_one_line_usage_error, run_cli
from small_cartpole import cartpole_configs

from mjfleet.errors import UsageError
from mjfleet.rl import FleetRunner
from mjfleet.rl.ppo import MIN_LEARNING_RATE

SMALL = ["--gpu-ids", "None", "--num-envs", "16", "--agent.num-steps-per-env", "8", "--logger", "none",
         "--log-format", "compact"]  # fmt: skip


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> pathlib.Path:
    """A PPO checkpoint of Cartpole-Balance (its quality does not matter to these tests)."""
    spec, env_cfg, agent = cartpole_configs(16, 8)
    torch.manual_seed(0)
    runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu", checkpoint_info={"task": spec.name})
    runner.learn(3)
    path = tmp_path_factory.mktemp("teacher") / "model_3.pt"
    runner.save(path)
    return path


def _student(
    teacher: pathlib.Path, rnn: str = "none", steps: int = 8, normalised: bool = False
) -> FleetRunner:
    spec, env_cfg, agent = cartpole_configs(16, steps, episode_length_s=0.3)
    agent.actor.obs_normalization = normalised
    agent.algorithm_name = "distillation"
    agent.distillation.teacher = str(teacher)
    agent.distillation.gradient_length = 4
    agent.actor.rnn, agent.actor.rnn_hidden_dim = rnn, 16
    torch.manual_seed(1)
    return FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")


def test_the_student_learns_to_act_as_the_teacher_acts(teacher):
    runner = _student(teacher)
    first = runner.learn(1)["Loss/behavior"]
    last = runner.learn(15)["Loss/behavior"]
    assert last < 0.5 * first
    obs = runner.env.get_observations()
    with torch.no_grad():
        gap = (runner.alg.student(obs) - runner.alg.teacher(obs)).abs().mean()
    assert gap < 0.5 * first**0.5  # the actions themselves came closer, not only the logged loss


def test_a_recurrent_student_acts_on_from_where_its_rollout_ended(teacher):
    """The update replays the rollout from the state the rollout began with; acting then continues from the state
    the rollout ended in, not from the replay's."""
    runner = _student(teacher, rnn="gru")
    alg, obs = runner.alg, runner.env.get_observations()
    with torch.inference_mode():
        for _ in range(8):
            obs, rewards, dones, extras = runner.env.step(alg.act(obs))
            alg.process_env_step(obs, rewards, dones, extras)
    ended = alg.student.get_hidden_state().clone()
    losses = alg.update(obs)
    assert losses["behavior"] > 0
    torch.testing.assert_close(alg.student.get_hidden_state(), ended)
    assert "recurrent student on actor from a ppo teacher" in runner.describe()


def test_train_play_resume_and_export_a_distilled_student(teacher, tmp_path):
    args = ["Cartpole-Balance", *SMALL, "--algorithm", "distillation", "--teacher", str(teacher)]
    result = run_cli("train", *args, "--max-iterations", "2", cwd=tmp_path, check=True)
    assert "distillation: MLP student on actor from a ppo teacher" in result.stdout
    (run_dir,) = sorted((tmp_path / "logs" / CARTPOLE_EXPERIMENT).iterdir())
    state = torch.load(run_dir / "model_2.pt", weights_only=True)
    assert state["algorithm"] == "distillation" and state["teacher"]["algorithm"] == "ppo"
    play = ["Cartpole-Balance", "--gpu-ids", "None", "--load-run", str(run_dir), "--episodes", "4"]
    result = run_cli("play", *play, "--export", cwd=tmp_path, check=True)
    assert "deterministic" in result.stdout and (run_dir / "exported" / "policy.onnx").exists()
    # resumed without --teacher: the checkpoint holds it
    resume = ["Cartpole-Balance", *SMALL, "--algorithm", "distillation", "--resume", "--max-iterations", "3"]
    assert "resuming from" in run_cli("train", *resume, cwd=tmp_path, check=True).stdout


def test_a_missing_or_foreign_teacher_is_a_one_line_usage_error(teacher, tmp_path):
    base = ["--algorithm", "distillation", *SMALL, "--max-iterations", "2"]
    missing = run_cli("train", "Cartpole-Balance", *base, cwd=tmp_path)
    assert_one_line_usage_error(missing, "--teacher")
    foreign = run_cli("train", "Cartpole-Swingup", *base, "--teacher", str(teacher), cwd=tmp_path)
    assert_one_line_usage_error(foreign, "trained on Cartpole-Balance, not Cartpole-Swingup")
    absent = run_cli("train", "Cartpole-Balance", *base, "--teacher", str(tmp_path / "none.pt"), cwd=tmp_path)
    assert_one_line_usage_error(absent, "does not exist")
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").rglob("model_*.pt"))


def test_ppo_fine_tuning_takes_over_the_students_network_and_nothing_else(teacher, tmp_path):
    student = _student(teacher, rnn="gru")
    student.learn(2)
    path = tmp_path / "model_2.pt"
    student.save(path)
    spec, env_cfg, agent = cartpole_configs(16, 8)
    agent.actor.rnn, agent.actor.rnn_hidden_dim = "gru", 16
    torch.manual_seed(2)
    ppo = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    critic = {k: v.clone() for k, v in ppo.alg.critic.state_dict().items()}
    std = (
        ppo.alg.actor.distribution.std_param.clone()
    )  # the task's scalar noise: --agent.actor.init-noise-std
    ppo.load(path)
    actor = ppo.alg.actor.state_dict()
    for key, value in student.alg.student.state_dict().items():
        torch.testing.assert_close(actor[key], value, rtol=0, atol=0)
    for key, value in ppo.alg.critic.state_dict().items():
        assert torch.equal(value, critic[key])
    assert torch.equal(ppo.alg.actor.distribution.std_param, std)
    assert ppo.current_learning_iteration == 2
    ppo.learn(1)
    assert ppo.current_learning_iteration == 3
    # an MLP actor cannot take over a recurrent student: one line naming what does not fit
    agent.actor.rnn = "none"
    mlp = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    with pytest.raises(UsageError, match="does not fit this PPO actor"):
        mlp.load(path)


def test_fine_tuning_trains_the_new_critic_alone_first(teacher, tmp_path):
    """--agent.ppo.critic-warmup-iterations K: K updates leave the student's actor (weights, noise,
    normaliser) and the learning rate as they were while the critic learns; then PPO trains both."""
    student = _student(teacher, normalised=True)
    student.learn(2)
    path = tmp_path / "model_2.pt"
    student.save(path)
    spec, env_cfg, agent = cartpole_configs(16, 8)
    agent.ppo.critic_warmup_iterations = 2
    agent.actor.obs_normalization = agent.critic.obs_normalization = True
    torch.manual_seed(2)
    ppo = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    ppo.load(path)
    assert "the first 2 iterations train only the new critic" in ppo.describe()
    actor = {k: v.clone() for k, v in ppo.alg.actor.state_dict().items()}
    critic = {k: v.clone() for k, v in ppo.alg.critic.state_dict().items()}
    learning_rate = ppo.alg.learning_rate
    ppo.learn(1)
    assert ppo.alg.learning_rate == learning_rate  # no KL to adapt to
    ppo.learn(1)
    for key, value in ppo.alg.actor.state_dict().items():
        assert torch.equal(value, actor[key]), key
    assert any(not torch.equal(v, critic[k]) for k, v in ppo.alg.critic.state_dict().items())
    # the actor's first steps start from the schedule's floor, raised while the KL stays small
    assert ppo.alg.learning_rate == MIN_LEARNING_RATE
    ppo.learn(1)
    assert ppo.alg.learning_rate > MIN_LEARNING_RATE
    changed = [k for k, v in ppo.alg.actor.state_dict().items() if not torch.equal(v, actor[k])]
    assert "mlp.0.weight" in changed and "obs_normalizer._mean" in changed
    # a checkpoint of PPO itself (a resume) trains both from the start
    resumed = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu")
    ppo.save(tmp_path / "model_5.pt")
    resumed.load(tmp_path / "model_5.pt")
    assert resumed.alg.critic_only_updates == 0


def test_train_fine_tunes_a_recurrent_student_with_ppo_without_repeating_its_flags(teacher, tmp_path):
    rnn = ["--agent.actor.rnn", "gru", "--agent.actor.rnn-hidden-dim", "16"]
    distill = ["Cartpole-Balance", *SMALL, "--algorithm", "distillation", "--teacher", str(teacher), *rnn]
    run_cli("train", *distill, "--max-iterations", "1", cwd=tmp_path, check=True)
    fine_tune = ["Cartpole-Balance", *SMALL, "--algorithm", "ppo", "--resume", "--max-iterations", "2"]
    result = run_cli("train", *fine_tune, "--agent.actor.init-noise-std", "0.2", cwd=tmp_path, check=True)
    assert "fine-tuning model_1.pt's distillation student with ppo" in result.stdout
    assert "actor rnn gru" in result.stdout
    run_dir = sorted((tmp_path / "logs" / CARTPOLE_EXPERIMENT).iterdir())[-1]
    state = torch.load(run_dir / "model_2.pt", weights_only=True)
    assert state["algorithm"] == "ppo" and state["rsl_rl_cfg"]["actor"]["rnn_type"] == "gru"
    # and a distillation checkpoint is still refused by SAC, in one line
    sac = ["Cartpole-Balance", *SMALL, "--algorithm", "sac", "--resume", "--max-iterations", "3"]
    assert_one_line_usage_error(run_cli("train", *sac, cwd=tmp_path), "was trained with")
