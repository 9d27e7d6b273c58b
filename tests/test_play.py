"""`play`: evaluation, video and ONNX export of a freshly trained Cartpole-Balance policy, as a user runs it."""

import json
import os
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import CARTPOLE_RUN
from helpers import (
    NO_GL,
    assert_cartpole_balanced,
    assert_real_plot,
    copy_workdir,
    missing_infrastructure,
    mp4_frames,
    run_cli,
)

from mjfleet.runs.checkpoints import read_checkpoint

# The shared run's one-second episodes (tests/conftest.py): play evaluates what training saw.
SHORT_EPISODES = ["--env.episode-length-s", str(CARTPOLE_RUN["episode_length_s"])]
ITERATIONS = CARTPOLE_RUN["iterations"]
VIDEO = {"length": 60, "width": 160, "height": 120}


@pytest.fixture(scope="module")
def played(cartpole_run, tmp_path_factory):
    """`play` with --video, --export and --baselines on the latest checkpoint of a copy of the shared Cartpole run
    (play writes eval.json, videos/ and exported/ into the run directory); returns (stdout, eval.json, the copy's
    run directory).

    Without a headless OpenGL (EGL or OSMesa; .ci/run installs Mesa's EGL) it plays without --video."""
    from mjfleet.runs.video import working_gl_backend

    cwd = copy_workdir(cartpole_run.cwd, tmp_path_factory.mktemp("play"))
    run_dir = cwd / cartpole_run.run_dir.relative_to(cartpole_run.cwd)
    video, gl = [], os.environ.get("MUJOCO_GL") or working_gl_backend()
    if gl:
        video = ["--video", "--video-length", str(VIDEO["length"]), "--video-width", str(VIDEO["width"]),
                 "--video-height", str(VIDEO["height"])]  # fmt: skip
    result = run_cli("play", "Cartpole-Balance", "--gpu-ids", "None", *SHORT_EPISODES, "--episodes", "32",
                     "--num-envs", "16", *video, "--export", "--baselines", cwd=cwd,
                     env={"MUJOCO_GL": gl} if gl else {}, check=True)  # fmt: skip
    return result.stdout, json.loads((run_dir / "eval.json").read_text()), run_dir


def test_play_return_is_consistent_with_the_training_return(cartpole_run, played):
    records = cartpole_run.records
    out, report, run_dir = played
    max_return = 50.0  # one reward point per policy step at most, 50 steps per episode
    train_return = float(np.mean([r["mean_return"] for r in records[-3:]]))
    assert_cartpole_balanced(report)
    assert (
        report["checkpoint"] == str(run_dir / f"model_{ITERATIONS}.pt") and report["iteration"] == ITERATIONS
    )
    assert report["deterministic"] is True and report["episodes"] == 32
    # The deterministic policy does at least as well as the noisy training rollouts, and cannot beat the maximum.
    assert train_return - 0.05 * max_return <= report["mean_return"] <= max_return
    assert report["mean_episode_length"] <= 50
    assert f"mean return {report['mean_return']:.2f}" in out


def test_eval_json_has_the_return_statistics_and_the_tasks_episode_metrics(played):
    _, report, _ = played
    for key in ("mean_return", "std_return", "mean_episode_length", "episodes", "num_envs", "task"):
        assert key in report
    terms = report["episode_metrics"]
    assert {
        "Episode_Reward/upright",
        "Episode_Reward/centered",
        "Episode_Termination/time_out",
    } <= terms.keys()
    # The reward terms add up to the return (both averaged over the finished episodes).
    total = sum(v for k, v in terms.items() if k.startswith("Episode_Reward/"))
    assert total == pytest.approx(report["mean_return"], rel=0.05)


def test_eval_json_counts_how_episodes_ended_and_averages_the_tasks_metrics(played):
    _, report, _ = played
    assert sum(report["terminations"].values()) == report["episodes_ended"] >= report["episodes"]
    # A policy that balances for the whole second: every episode ends at the time limit.
    assert report["terminations"] == {"time_out": report["episodes_ended"]}
    assert report["metrics"] == {} and report["command"] is None  # Cartpole logs no Metrics/*, has no command


def test_baselines_are_evaluated_alike_and_tabled_beside_the_trained_policy(played):
    out, report, _ = played
    baselines = report["baselines"]
    assert set(baselines) == {"zero", "random"}
    for result in baselines.values():
        assert result["episodes"] == report["episodes"] == 32
        assert result.keys() == {k: v for k, v in report.items() if k in result}.keys()
        assert result["mean_return"] < report["mean_return"]
    lines = out.splitlines()
    (header,) = [line for line in lines if line.startswith("policy ")]
    assert header.split()[:3] == ["policy", "return", "ep."] and "trouble" not in header  # healthy physics
    table = lines[lines.index(header) + 1 : lines.index(header) + 4]
    assert [row.split()[0] for row in table] == ["trained", "zero", "random"]
    assert float(table[1].split()[1]) == pytest.approx(baselines["zero"]["mean_return"], abs=0.01)


def test_video_has_the_requested_frames_and_size(played):
    _, report, _ = played
    if report["video"] is None:
        missing_infrastructure(NO_GL)
    path = pathlib.Path(report["video"])
    assert path.suffix == ".mp4" and path.parent.name == "videos"
    meta, images = mp4_frames(path)
    assert tuple(meta["size"]) == (VIDEO["width"], VIDEO["height"])
    assert meta["fps"] == pytest.approx(50.0)  # the policy rate
    assert len(images) == VIDEO["length"] == report["video_frames"]
    assert images[0].std() > 5, "blank frame"


def test_export_writes_an_onnx_policy_that_matches_torch(played):
    import onnxruntime as ort
    from tensordict import TensorDict

    from mjfleet.deploy.export import build_actor

    out, _, run_dir = played
    exported = run_dir / "exported"
    meta = json.loads((exported / "policy.json").read_text())
    assert meta["onnx"]["max_abs_diff_vs_torch"] <= 1e-5
    assert meta["input"]["groups"] == [{"name": "actor", "size": 5}] and meta["output"]["size"] == 1
    assert meta["control_rate_hz"] == pytest.approx(50.0) and meta["actions"]["action_scale"] == 1.0
    assert (exported / "policy.pt").is_file()
    assert meta["torchscript"]["max_abs_diff_vs_torch"] <= 1e-5
    assert "ONNX matches torch" in out
    assert "(policy.onnx, policy.pt, policy.json, model.xml; " in out  # the folder deploys on its own
    assert (exported / "model.xml").is_file()
    # How an action becomes a control, with the actuator's limits MuJoCo applies (the cart's motor: -1..1)
    assert meta["actions"]["ctrlrange"] == [[-1.0, 1.0]]
    assert meta["actions"]["control"].startswith("ctrl = clip(action_scale * clip(action")
    assert meta["actions"]["joint_names"] == ["slider"] and meta["actions"]["stiffness"] == [None]  # a motor
    assert meta["actions"]["offset"] == [0.0] and "force on the cart" in meta["actions"]["meaning"]
    names = ["cart_position", "cos_pole_angle", "sin_pole_angle", "cart_velocity", "pole_angular_velocity"]
    assert meta["input"]["terms"] == [
        {"name": n, "group": "actor", "start": i, "stop": i + 1} for i, n in enumerate(names)
    ]
    assert meta["versions"]["rsl-rl-lib"] == "5.5.1"
    # The same metadata inside the ONNX model, for a deployment that has only policy.onnx
    import onnx

    from mjfleet.deploy.metadata import MJLAB_KEYS

    raw = {p.key: p.value for p in onnx.load(str(exported / "policy.onnx")).metadata_props}
    props = {
        k: json.loads(v) for k, v in raw.items() if k not in MJLAB_KEYS
    }  # mjlab's keys are plain strings
    # all of policy.json, files and checks too
    assert props == {k: v for k, v in meta.items() if k != "mjlab"}
    assert {k: raw[k] for k in MJLAB_KEYS} == meta["mjlab"]

    # Check it independently: a batch of observations through onnxruntime and through the checkpoint's policy.
    state = read_checkpoint(run_dir / f"model_{ITERATIONS}.pt")
    obs = torch.randn(64, 5, generator=torch.Generator().manual_seed(7))
    actor = build_actor(state, TensorDict({"actor": obs}, batch_size=[64]), 1)
    with torch.inference_mode():
        expected = actor(TensorDict({"actor": obs}, batch_size=[64])).numpy()
    session = ort.InferenceSession(str(exported / "policy.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"obs": obs.numpy()})
    assert np.abs(got - expected).max() <= 1e-5


def test_training_wrote_a_reward_curve(cartpole_run):
    assert_real_plot(cartpole_run.run_dir / "reward_curve.png")


def test_random_baseline_needs_no_checkpoint_and_scores_below_the_trained_policy(
    tmp_path, monkeypatch, played
):
    from mjfleet.cli.play import main

    _, trained_report, _ = played
    monkeypatch.chdir(tmp_path)  # no logs/ here: nothing to load
    main(["Cartpole-Balance", "--gpu-ids", "None", *SHORT_EPISODES, "--agent", "random", "--episodes", "32"])
    report = json.loads(
        (tmp_path / "logs" / "cartpole_balance" / "baseline_random" / "eval.json").read_text()
    )
    assert report["policy"] == "random" and report["checkpoint"] is None and report["episodes"] == 32
    assert report["mean_return"] < 0.8 * trained_report["mean_return"]


def test_action_percentiles_of_random_actions_become_sac_bounds_that_train_accepts(tmp_path, capsys):
    from mjfleet.cli.play import main
    from mjfleet.cli.train import parse_args

    output = tmp_path / "eval.json"
    main(["Cartpole-Balance", "--gpu-ids", "None", *SHORT_EPISODES, "--agent", "random", "--episodes", "32",
          "--num-envs", "16", "--action-percentiles", "2.5", "97.5", "--output", str(output)])  # fmt: skip
    report = json.loads(output.read_text())
    ranges = report["action_percentiles"]
    # Every step's actions, until the 32 episodes (random ones end early) are done.
    assert ranges["percentiles"] == [2.5, 97.5] and ranges["actions"] == report["env_steps"] >= 1000
    # Uniform actions in [-1, 1]: the 2.5th and 97.5th percentiles are -0.95 and 0.95 (+-0.02 at 1,000 draws).
    assert ranges["low"] == [pytest.approx(-0.95, abs=0.03)]
    assert ranges["high"] == [pytest.approx(0.95, abs=0.03)]
    flags = capsys.readouterr().out.split("SAC bounds from them: ")[1].splitlines()[0]
    _, train_flags = parse_args(["Cartpole-Balance", "--algorithm", "sac", *flags.split()])
    sac = train_flags.agent.sac
    assert sac.action_low == pytest.approx(ranges["low"], abs=5e-3)
    assert sac.action_high == pytest.approx(ranges["high"], abs=5e-3)


def test_the_action_recorder_keeps_copies_of_the_first_actions_up_to_its_limit():
    from mjfleet.play.action_range import ActionRecorder, sac_bound_flags

    actions = torch.zeros(4, 2)
    recorder = ActionRecorder(lambda obs: actions, limit=10)
    for step in range(4):
        actions[:, 0] = step  # the policy overwrites its output tensor; the recorder keeps what it returned
        assert recorder(None) is actions
    report = recorder.percentiles(0.0, 100.0)
    assert recorder.rows == report["actions"] == 10
    assert report["low"] == [0.0, 0.0] and report["high"] == [2.0, 0.0]  # steps 0, 1 and half of step 2
    assert sac_bound_flags(report) is None  # the second action never varied: no bound to give SAC


def test_export_detects_an_onnx_model_that_differs_from_the_policy(tmp_path):
    from tensordict import TensorDict

    from mjfleet.deploy.check import ExportError, check_onnx
    from mjfleet.deploy.export import export_policy
    from mjfleet.rl.config import AgentConfig

    agent = AgentConfig()
    agent.actor.obs_normalization = True
    cfg = agent.to_rsl_rl()
    cfg["obs_groups"] = {"actor": ["actor", "extra"], "critic": ["actor"]}
    obs = TensorDict({"actor": torch.randn(8, 3), "extra": torch.randn(8, 4)}, batch_size=[8])
    from rsl_rl.models import MLPModel

    actor = MLPModel(obs, cfg["obs_groups"], "actor", 2, hidden_dims=[16], obs_normalization=True,
                     distribution_cfg=cfg["actor"]["distribution_cfg"])  # fmt: skip
    actor.obs_normalizer.update(torch.cat([obs["actor"], obs["extra"]], dim=1) * 3 + 1)
    actor.eval()
    files = export_policy(actor, obs, tmp_path, {"task": "test"})
    assert json.loads(files["metadata"].read_text())["onnx"]["max_abs_diff_vs_torch"] <= 1e-5
    with torch.no_grad():
        actor.mlp[0].bias += 1e-3  # the torch policy changes; the exported file does not
    with pytest.raises(ExportError, match="differs"):
        check_onnx(files["onnx"], actor, obs)

    # A TorchScript export that fails leaves no older policy.pt behind to pass for the new policy.
    assert files["torchscript"].is_file()

    def unscriptable():
        raise RuntimeError("cannot script this")

    actor.as_jit = unscriptable
    with pytest.warns(UserWarning, match="TorchScript export skipped"):
        files = export_policy(actor, obs, tmp_path, {"task": "test"})
    assert "torchscript" not in files and not (tmp_path / "policy.pt").exists()
    assert "torchscript" not in json.loads(files["metadata"].read_text())["files"]


def test_a_fixed_command_is_given_in_every_episode_and_reported_beside_the_achieved_velocity(
    tmp_path, capsys
):
    from mjfleet.cli.play import main

    output = tmp_path / "eval.json"
    main(["Quadruped-Velocity-Flat", "--gpu-ids", "None", "--agent", "zero", "--command", "-0.5", "0", "0",
          "--num-envs", "2", "--episodes", "2", "--env.episode-length-s", "1.0", "--output", str(output)])  # fmt: skip
    report = json.loads(output.read_text())
    assert report["command"] == [-0.5, 0.0, 0.0]
    assert report["env_cfg"]["commands"]["lin_vel_x"] == [-0.5, -0.5]
    metrics = report["metrics"]
    assert {"lin_vel_error", "ang_vel_error", "base_lin_vel_x", "base_lin_vel_y", "base_ang_vel_z"} <= set(
        metrics
    )
    # |command - achieved|, roughly: the mean of per-robot errors is not the error of the mean velocity.
    assert metrics["lin_vel_error"] == pytest.approx(0.5 + metrics["base_lin_vel_x"], abs=0.15)
    assert report["terminations"] == {"fell": 0, "time_out": 2}
    out = capsys.readouterr().out
    assert "command (vx, vy, wz): -0.5, 0, 0" in out and "lin_vel_error" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--agent", "random", "--export"], "--export needs a trained policy"),
        (["--video", "--video-width", "161"], "even"),
        ([], "no runs in"),
        (["--gpu-ids", "0", "1"], "--gpu-ids"),
        (["--agent", "zero", "--output", "/proc/no-such-dir/eval.json"], "cannot write"),
        (["--agent", "zero", "--video", "--video-camera", "no-such-camera"], "--video-camera"),
        (["--agent", "zero", "--command", "0.5", "0", "0"], "takes no velocity command"),
        (["--agent", "random", "--baselines"], "drop --agent random"),
        (["--agent", "zero", "--action-percentiles", "97.5", "2.5"], "--action-percentiles"),
    ],
)
def test_play_usage_errors_are_one_line_with_exit_status_2(args, needle, tmp_path, monkeypatch, capsys):
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))  # no backend probe in-process
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", *args])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1 and needle in lines[0], err


def test_exporting_an_older_checkpoint_notes_that_it_replaces_a_newer_export(tmp_path, capsys):
    from mjfleet.deploy.play_export import note_replaced_export as _note_replaced_export

    metadata = tmp_path / "policy.json"
    _note_replaced_export(metadata, 100)  # nothing exported yet
    metadata.write_text(json.dumps({"iteration": 300}))
    _note_replaced_export(metadata, 400)
    assert capsys.readouterr().out == ""
    _note_replaced_export(metadata, 100)
    assert "export of iteration 300 with iteration 100" in capsys.readouterr().out


def test_the_quadrupeds_export_names_each_actions_joint_and_its_pd_gains():
    from mjfleet.deploy.export import policy_metadata
    from mjfleet.tasks import get_task

    spec = get_task("Quadruped-Velocity-Flat")
    cfg = spec.env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg, "cpu")
    actor = SimpleNamespace(obs_groups=["actor"], obs_normalization=False)
    actions = policy_metadata(env, actor, env.get_observations(), spec.name)["actions"]
    model = env.mj_model
    assert actions["joint_names"] == [model.joint(model.actuator_trnid[i, 0]).name for i in range(model.nu)]
    assert len(actions["joint_names"]) == 12 and actions["stiffness"] == [35.0] * 12
    assert actions["damping"] == [0.5] * 12  # the servos' kv (assets/quadruped.xml)


def test_play_notes_only_the_env_settings_that_differ_from_training(capsys):
    import dataclasses

    from mjfleet.play.settings import notice_differences as _notice_differences
    from mjfleet.tasks import get_task

    spec = get_task("Quadruped-Velocity-Flat")
    cfg = spec.env_config()
    # What train stores in the checkpoint: the config as dataclasses.asdict makes it (tuples stay tuples).
    state = {"infos": {"task": spec.name, "env_cfg": dataclasses.asdict(cfg)}}
    _notice_differences(spec.name, dataclasses.replace(cfg, num_envs=7), state)
    assert capsys.readouterr().out == ""

    changed = dataclasses.replace(cfg, commands=dataclasses.replace(cfg.commands, lin_vel_x=(-0.5, 0.5)))
    _notice_differences(spec.name, changed, state)
    out = capsys.readouterr().out
    assert out.startswith(
        "note: env settings differ from training: commands.lin_vel_x=[-0.5, 0.5] (trained: "
    )
    assert out.count("=") == 1 and len(out.splitlines()) == 1


def test_play_evaluates_the_quadruped_without_its_domain_randomisation_unless_train_env():
    from mjfleet.cli.play import parse_args
    from mjfleet.tasks import get_task

    spec = get_task("Quadruped-Velocity-Flat")
    _, flags = parse_args(["Quadruped-Velocity-Flat", "--num-envs", "2"])
    events, noise = flags.env.events, flags.env.noise
    assert events.push_velocity == 0.0 and _noise_free(noise)
    assert events.foot_friction is None and events.added_trunk_mass is None  # the model's own
    flags.env.num_envs = 2
    env = spec.make_env(flags.env, "cpu")
    nominal = float(env.mj_model.geom_friction[env.foot_geoms[0], 0])
    assert env.foot_friction.tolist() == pytest.approx([nominal, nominal]) and env.added_mass.tolist() == [
        0.0,
        0.0,
    ]
    assert (
        float(
            env.sim.model_view("body_mass")[:, env.trunk_body]
            .sub(env.mj_model.body_mass[env.trunk_body])
            .abs()
            .max()
        )
        < 1e-6
    )
    assert float(env._actor_noise.abs().sum()) == 0.0

    _, trained = parse_args(["Quadruped-Velocity-Flat", "--train-env"])
    assert trained.env == spec.env_config()  # the training config, randomisation and all
    assert trained.env.events.push_velocity > 0 and trained.env.noise.joint_pos_bias == 0.02
    # --env.* flags change the play settings too (here: pushes back on, in play)
    _, pushed = parse_args(["Quadruped-Velocity-Flat", "--env.events.push-velocity", "0.3"])
    assert pushed.env.events.push_velocity == 0.3 and _noise_free(pushed.env.noise)
    # and one kind of noise alone: the other half-ranges stay 0
    _, offsets = parse_args(["Quadruped-Velocity-Flat", "--env.noise.joint-pos-bias", "0.02"])
    assert offsets.env.noise.joint_pos_bias == 0.02 and offsets.env.noise.lin_vel == 0.0


def _noise_free(noise) -> bool:
    """Every observation-noise half-range 0, encoder offsets included: what play's settings evaluate with."""
    import dataclasses

    switches = ("enabled", "joint_pos_bias_per_episode")
    return all(v == 0.0 for k, v in dataclasses.asdict(noise).items() if k not in switches)


@pytest.mark.parametrize("train_env", [False, True])
def test_eval_json_records_whether_play_or_training_env_settings_were_used(train_env, tmp_path, capsys):
    from mjfleet.cli.play import main

    out = tmp_path / "eval.json"
    args = ["Quadruped-Velocity-Flat", "--agent", "zero", "--gpu-ids", "None", "--num-envs", "2", "--episodes", "2",
            "--env.episode-length-s", "0.1", "--output", str(out)]  # fmt: skip
    main([*args, "--train-env"] if train_env else args)
    report = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert report["env_settings"] == ("train" if train_env else "play")
    assert report["env_cfg"]["events"]["push_velocity"] == (0.5 if train_env else 0.0)
    # The noise play ran with, as it ran (play: none, and the half-ranges say so)
    assert report["env_cfg"]["noise"]["joint_pos_bias"] == (0.02 if train_env else 0.0)
    assert report["env_cfg"]["noise"]["lin_vel"] == (0.1 if train_env else 0.0)
    assert ("play settings of Quadruped-Velocity-Flat:" in printed) != train_env


@pytest.mark.parametrize("task", ["Quadruped-Velocity-Flat", "Humanoid-Velocity-Flat"])
def test_the_play_settings_are_not_reported_as_differences_from_training(task, capsys):
    import dataclasses

    from mjfleet.cli.play import parse_args
    from mjfleet.play.settings import notice_differences as _notice_differences
    from mjfleet.play.settings import play_setting_keys as _play_setting_keys
    from mjfleet.tasks import get_task

    spec = get_task(task)
    _, flags = parse_args([task])
    assert flags.env.events.push_velocity == 0.0 and _noise_free(flags.env.noise)
    state = {"infos": {"task": spec.name, "env_cfg": dataclasses.asdict(spec.env_config())}}
    keys = _play_setting_keys(spec)
    noise = {f"noise.{k}" for k in ("lin_vel", "ang_vel", "gravity", "joint_pos", "joint_vel", "height_scan",
                                   "joint_pos_bias")}  # fmt: skip
    assert keys == {"events.push_velocity", "events.foot_friction", "events.added_trunk_mass", *noise}
    _notice_differences(spec.name, flags.env, state, on_purpose=keys)
    assert capsys.readouterr().out == ""
    _notice_differences(spec.name, flags.env, state)  # what the note would say without knowing them
    assert "noise.lin_vel=0.0 (trained: 0.1)" in capsys.readouterr().out


def test_an_export_that_cannot_be_made_is_one_line_and_exit_2_and_the_evaluation_is_kept(
    cartpole_run, tmp_path, monkeypatch, capsys
):
    """A model that does not survive being written as MJCF (forced here: no difference is tolerated, so every
    field differs) ends `play --export` with one line and exit status 2; eval.json of the evaluation is written."""
    from mjfleet.cli.play import main
    from mjfleet.deploy import metadata

    cwd = copy_workdir(cartpole_run.cwd, tmp_path)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(metadata, "MODEL_TOLERANCE", -1.0)
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))  # no backend probe in-process
    with pytest.raises(SystemExit) as exit_info:
        # --quiet: no progress lines beside the error's
        main(["Cartpole-Balance", "--export", "--episodes", "2", "--num-envs", "2", "--quiet"])
    out, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1, err
    assert "differs from the trained model's" in lines[0] and "exported:" not in out
    report = json.loads((cartpole_run.run_dir.relative_to(cartpole_run.cwd) / "eval.json").read_text())
    assert report["episodes"] >= 2 and "differs" in report["exported"]["error"]
    assert not (cartpole_run.run_dir.relative_to(cartpole_run.cwd) / "exported" / "policy.onnx").exists()
