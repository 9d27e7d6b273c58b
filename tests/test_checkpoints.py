"""Checkpoints: what they hold, how they are found for resuming, which are kept, and the errors a user sees."""

import pathlib

import pytest
import torch
from helpers import CARTPOLE_EXPERIMENT, CARTPOLE_OPTIMIZER_STEPS_PER_ITERATION, cartpole_runner

from mjfleet.errors import UsageError
from mjfleet.runs.checkpoints import Retention, checkpoints_in, find_checkpoint, read_checkpoint

EXPERIMENT = CARTPOLE_EXPERIMENT
OPTIMIZER_STEPS_PER_ITERATION = CARTPOLE_OPTIMIZER_STEPS_PER_ITERATION


def fake_checkpoint(path: pathlib.Path, content: bytes = b"x") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


# --------------------------------------------------------------------------- retention
def test_retention_keeps_the_newest_and_every_milestone():
    policy = Retention(keep_last=2, keep_every=4)
    assert policy.to_delete([2, 4, 6, 8, 10, 12, 14]) == [2, 6, 10]


def test_retention_zero_disables_each_rule():
    assert Retention(keep_last=0, keep_every=4).to_delete([1, 2, 3, 4, 5]) == []
    assert Retention(keep_last=1, keep_every=0).to_delete([1, 2, 3]) == [1, 2]


def test_retention_prunes_files_and_ignores_half_written_ones(tmp_path):
    for it in (1, 2, 3, 4):
        fake_checkpoint(tmp_path / f"model_{it}.pt")
    fake_checkpoint(tmp_path / ".model_5.pt.tmp")
    Retention(keep_last=1, keep_every=2).prune(tmp_path)
    assert [it for it, _ in checkpoints_in(tmp_path)] == [2, 4]
    assert (tmp_path / ".model_5.pt.tmp").exists()


# --------------------------------------------------------------------------- finding checkpoints
def test_resume_picks_the_newest_run_that_has_a_checkpoint(tmp_path):
    exp = tmp_path / EXPERIMENT
    fake_checkpoint(exp / "2026-01-01_00-00-00" / "model_2.pt")
    newest_ckpt = fake_checkpoint(exp / "2026-01-02_00-00-00_a" / "model_10.pt")
    fake_checkpoint(exp / "2026-01-02_00-00-00_a" / "model_8.pt")
    (exp / "2026-01-03_00-00-00" / "params").mkdir(parents=True)  # a run that died before its first save
    (exp / "baseline_random").mkdir()  # not a run directory
    assert find_checkpoint(exp) == newest_ckpt.resolve()


def test_load_run_regex_path_and_checkpoint_number_select_a_checkpoint(tmp_path):
    exp = tmp_path / EXPERIMENT
    old = fake_checkpoint(exp / "2026-01-01_00-00-00_alpha" / "model_4.pt")
    fake_checkpoint(exp / "2026-01-01_00-00-00_alpha" / "model_6.pt")
    fake_checkpoint(exp / "2026-01-02_00-00-00_beta" / "model_9.pt")
    assert find_checkpoint(exp, "alpha", "4") == old.resolve()
    assert find_checkpoint(exp, str(old.parent), None).name == "model_6.pt"
    assert find_checkpoint(exp, None, str(old)) == old.resolve()


@pytest.mark.parametrize(
    ("load_run", "checkpoint", "needle"),
    [
        (None, None, "no runs in"),
        ("gamma", None, "no run directory"),
        ("/nonexistent/2026-01-01_00-00-00", None, "no such directory"),
        ("alpha", "7", "iterations saved in that run: 4"),
        (None, "missing.pt", "no such file"),
    ],
)
def test_missing_runs_and_checkpoints_are_usage_errors(tmp_path, load_run, checkpoint, needle):
    exp = tmp_path / EXPERIMENT
    if load_run is not None:
        fake_checkpoint(exp / "2026-01-01_00-00-00_alpha" / "model_4.pt")
    with pytest.raises(UsageError, match=needle):
        find_checkpoint(exp, load_run, checkpoint)


def test_an_unreadable_checkpoint_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read checkpoint"):
        read_checkpoint(fake_checkpoint(tmp_path / "model_3.pt", b"not a torch file"))


@pytest.mark.parametrize(
    ("existing", "args", "needle"),
    [
        (None, ["--resume"], "no runs in"),
        (None, ["--checkpoint", "missing.pt"], "no such file"),
        (
            None,
            ["--wandb-run-path", "me/proj/abc123"],
            "no local files of wandb run abc123 (looked for logs/",
        ),
        ("iteration 2", ["--wandb-run-path", "x", "--load-run", "2026"], "pass one of them"),
        (b"truncated", ["--resume"], "cannot read checkpoint"),
        (b"\x80\x05garbage", ["--resume"], "a damaged file, or one not written by mjfleet"),
        ("iteration 2", ["--load-run", "2026-01-01", "--max-iterations", "2"], "already at iteration 2"),
        (
            "another policy",
            ["--resume", "--num-envs", "16"],
            'does not fit this task\'s policy: Error(s) in loading state_dict for MLPModel: Missing key(s) in state_dict: "distribution.std_param"',
        ),
    ],
)
def test_train_resume_errors_are_one_line_with_exit_status_2(
    existing, args, needle, tmp_path, monkeypatch, capsys
):
    from mjfleet.cli.train import main

    monkeypatch.chdir(tmp_path)
    experiment = tmp_path / "logs" / EXPERIMENT
    if existing is not None:
        path = fake_checkpoint(experiment / "2026-01-01_00-00-00" / "model_2.pt")
        if isinstance(existing, bytes):
            path.write_bytes(existing)
        elif existing == "another policy":  # a checkpoint of some other network: found only when loading it
            layer = {"mlp.0.weight": torch.zeros(7, 3), "mlp.0.bias": torch.zeros(7)}
            torch.save({"iter": 2, "actor_state_dict": layer, "critic_state_dict": layer}, path)
        else:
            torch.save({"iter": 2, "actor_state_dict": {}}, path)
    runs_before = sorted(experiment.iterdir()) if experiment.exists() else []
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", *args])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1 and needle in lines[0], err
    runs_after = sorted(experiment.iterdir()) if experiment.exists() else []
    assert runs_after == runs_before, "a failed resume must not create a run directory"


# --------------------------------------------------------------------------- checkpoint contents, in-process
def test_loading_restores_optimizer_normaliser_iteration_and_rng_state(tmp_path):
    trained, run_dir = cartpole_runner(tmp_path / "a", seed=1)
    trained.learn(2)
    trained.close()
    path = run_dir.checkpoint(2)
    saved = torch.load(path, map_location="cpu", weights_only=True)

    fresh, _ = cartpole_runner(tmp_path / "b", seed=2)
    torch.manual_seed(123)  # a different random stream, to be replaced by the checkpoint's
    fresh.load(path, map_location="cpu")
    assert fresh.current_learning_iteration == 2 and fresh.env_steps == 2 * 8 * 16

    restored = fresh.alg.optimizer.state_dict()
    assert restored["param_groups"][0]["lr"] == saved["optimizer_state_dict"]["param_groups"][0]["lr"]
    assert len(restored["state"]) == len(saved["optimizer_state_dict"]["state"]) > 0
    for index, tensors in saved["optimizer_state_dict"]["state"].items():
        assert float(tensors["step"]) == 2 * OPTIMIZER_STEPS_PER_ITERATION
        for name, value in tensors.items():
            assert torch.equal(restored["state"][index][name].cpu(), value), (index, name)

    normaliser = fresh.alg.get_policy().obs_normalizer
    assert int(normaliser.count) > 0
    assert torch.equal(normaliser._mean, saved["actor_state_dict"]["obs_normalizer._mean"])
    assert torch.equal(torch.get_rng_state(), saved["rng_states"][0]["torch"])


def test_checkpoint_holds_what_is_needed_to_rebuild_the_policy_on_cpu(tmp_path):
    from tensordict import TensorDict

    from mjfleet.deploy.export import build_actor

    runner, run_dir = cartpole_runner(tmp_path, seed=3)
    runner.learn(1)
    runner.close()
    state = read_checkpoint(run_dir.checkpoint(1))
    infos = state["infos"]
    assert infos["observations"] == {"actor": 5, "critic": 5} and infos["num_actions"] == 1
    assert state["agent_cfg"]["actor"]["obs_normalization"] is True
    obs = TensorDict({k: torch.zeros(1, n) for k, n in infos["observations"].items()}, batch_size=[1])
    actor = build_actor(state, obs, infos["num_actions"], "cpu")
    expected = runner.alg.get_policy().to("cpu").eval()
    probe = TensorDict({k: torch.randn(4, n) for k, n in infos["observations"].items()}, batch_size=[4])
    with torch.inference_mode():
        assert torch.equal(actor(probe), expected(probe))
