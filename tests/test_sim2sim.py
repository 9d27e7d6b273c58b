"""sim2sim from the export alone: examples/sim2sim.py runs an exported policy in MuJoCo C and reproduces `play`.

Cartpole is the session's shared run (tests/conftest.py), the quadruped is trained briefly by the real `train`
command (once, shared by the module); each is exported by the real `play --export`. examples/sim2sim.py runs in a
separate process with a clean environment.

Tolerances, and why. MuJoCo C (float64) and MuJoCo-Warp (float32) agree to ~1e-6 per physics step; over 50 policy
steps from the same initial state that stays far below 1e-4 in the actions (checked exactly here). Over whole
episodes the two simulators draw different initial states and commands (numpy's generator, not torch's), so the
comparisons are statistical: a Cartpole that balances earns nearly the same return from every initial state (2%),
and the quadruped's tracking error and fall rate over the same number of episodes agree within 0.05 m/s and 5
percentage points when the policy is the same (the slow test, which needs enough episodes for that).
"""

import ast
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
from helpers import copy_workdir

from mjfleet.rl.deploy_metadata import MJLAB_KEYS
from mjfleet.runs import RunDir

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sim2sim.py"
BIN = pathlib.Path(sys.executable).parent
CARTPOLE_EPISODES = ["--env.episode-length-s", "1.0"]
QUADRUPED_COMMAND = ("0.5", "0.0", "0.0")


def run(script: str, *args: str, cwd) -> subprocess.CompletedProcess:
    result = subprocess.run([str(BIN / script), *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def sim2sim(*args: str, extra_flags: tuple[str, ...] = ()) -> tuple[dict, subprocess.CompletedProcess]:
    """Run the example with only PATH and HOME set (no PYTHONPATH, no mjfleet variables); its last line's JSON."""
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    result = subprocess.run(
        [sys.executable, *extra_flags, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        env=clean,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result


def trained_and_exported(tmp_path_factory, task: str, train_args: list[str], play_args: list[str]):
    """(run directory, play's eval.json) of a short `train` run exported by `play --export`."""
    cwd = tmp_path_factory.mktemp(task)
    run(
        "train",
        task,
        "--gpu-ids",
        "None",
        "--logger",
        "none",
        "--log-format",
        "compact",
        *train_args,
        cwd=cwd,
    )
    return exported(cwd, task, play_args)


def exported(cwd: pathlib.Path, task: str, play_args: list[str]):
    """(run directory, play's eval.json) of the one run under `cwd`/logs, exported by `play --export`."""
    (run_dir,) = (p for p in (cwd / "logs").glob("*/*") if p.is_dir())
    run("play", task, "--gpu-ids", "None", "--export", *play_args, cwd=cwd)
    return run_dir, json.loads((run_dir / "eval.json").read_text())


@pytest.fixture(scope="module")
def cartpole(cartpole_run, tmp_path_factory):
    """The session's shared Cartpole run (tests/conftest.py; one-second episodes, as played here), exported in a
    copy of its working directory."""
    cwd = copy_workdir(cartpole_run.cwd, tmp_path_factory.mktemp("sim2sim"))
    return exported(cwd, "Cartpole-Balance", [*CARTPOLE_EPISODES, "--episodes", "32", "--num-envs", "16"])


@pytest.fixture(scope="module")
def quadruped(tmp_path_factory):
    return trained_and_exported(
        tmp_path_factory,
        "Quadruped-Velocity-Flat",
        ["--num-envs", "16", "--agent.num-steps-per-env", "8", "--max-iterations", "2"],
        [
            "--episodes",
            "2",
            "--num-envs",
            "2",
            "--command",
            *QUADRUPED_COMMAND,
            "--env.episode-length-s",
            "1.0",
        ],
    )


def first_actions(task: str, run_dir: pathlib.Path, steps: int, tmp_path: pathlib.Path, command=None):
    """(play's environment's first `steps` policy actions from a reset, the initial state file) on the CPU."""
    from mjfleet.rl.export import build_actor
    from mjfleet.runs.checkpoints import read_checkpoint
    from mjfleet.tasks import get_task

    spec = get_task(task)
    cfg = spec.play_env_config()
    cfg.num_envs = 1
    if command is not None:
        cfg.commands.fix(*command)
    torch.manual_seed(0)
    env = spec.make_env(cfg, "cpu")
    state = read_checkpoint(RunDir(run_dir).latest_checkpoint(), map_location="cpu")
    obs, _ = env.reset()
    actor = build_actor(state, obs, env.num_actions)
    init = {"qpos": env.sim.qpos[0].numpy().copy(), "qvel": env.sim.qvel[0].numpy().copy()}
    if command is not None:
        init["command"] = env.commands[0].numpy().copy()
    path = tmp_path / "initial_state.npz"
    np.savez(path, **init)
    actions = []
    with torch.inference_mode():
        for _ in range(steps):
            action = actor(obs)
            actions.append(action[0].numpy().copy())
            obs, _, dones, _ = env.step(action)
            if bool(dones[0]):
                break
    return np.array(actions), path


def dumped_actions(export: pathlib.Path, state: pathlib.Path, steps: int, tmp_path: pathlib.Path):
    out = tmp_path / "actions.npy"
    sim2sim(
        str(export), "--dump-actions", str(out), "--initial-state", str(state), "--dump-steps", str(steps)
    )
    return np.load(out)


def test_cartpole_sim2sim_reproduces_plays_return_within_2_percent(cartpole):
    run_dir, played = cartpole
    assert played["mean_return"] > 0.8 * 50, "the policy did not learn: the comparison proves nothing"
    result, _ = sim2sim(str(run_dir / "exported"), "--episodes", "32")
    assert result["episodes"] == played["episodes"] == 32
    assert result["mean_return"] == pytest.approx(played["mean_return"], rel=0.02)
    assert result["mean_episode_length"] == pytest.approx(played["mean_episode_length"], rel=0.02)
    assert result["terminations"].keys() == played["terminations"].keys()
    assert result["episode_metrics"].keys() == played["episode_metrics"].keys()


def test_cartpole_first_50_actions_agree_with_play_from_the_same_state(cartpole, tmp_path):
    run_dir, _ = cartpole
    expected, state = first_actions("Cartpole-Balance", run_dir, 50, tmp_path)
    got = dumped_actions(run_dir / "exported", state, 50, tmp_path)
    assert got.shape == expected.shape == (50, 1)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_quadruped_first_50_actions_agree_with_play_from_the_same_state(quadruped, tmp_path):
    run_dir, _ = quadruped
    command = tuple(float(c) for c in QUADRUPED_COMMAND)
    expected, state = first_actions("Quadruped-Velocity-Flat", run_dir, 50, tmp_path, command)
    got = dumped_actions(run_dir / "exported", state, 50, tmp_path)
    assert got.shape == expected.shape and len(got) >= 25, "the robot fell at once: too few steps compared"
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_the_exported_folder_holds_the_model_it_names_and_it_compiles_to_the_trained_model(quadruped):
    """(The export itself checks the MJCF against the trained model field by field: rl/deploy_metadata.py.)"""
    import mujoco

    run_dir, _ = quadruped
    meta = json.loads((run_dir / "exported" / "policy.json").read_text())
    assert meta["mjcf"] == "model.xml" and meta["files"]["mjcf"] == "model.xml"
    exported = mujoco.MjModel.from_xml_path(str(run_dir / "exported" / "model.xml"))
    assert exported.opt.timestep == meta["model"]["timestep"] and exported.nu == meta["model"]["nu"]
    assert meta["actions"]["decimation"] == 4 and meta["episode"]["max_steps"] == 50


def test_rough_terrain_mjcf_round_trips_with_its_heightfield():
    import mujoco

    from mjfleet.assets import asset_path
    from mjfleet.rl.deploy_metadata import model_xml
    from mjfleet.tasks.locomotion.terrain import Terrain, TerrainConfig

    spec = mujoco.MjSpec.from_file(str(asset_path("quadruped.xml")))
    Terrain(TerrainConfig(kind="rough")).add_to_spec(spec, geom_name="floor")
    model = spec.compile()
    holder = type("Env", (), {"mj_spec": spec, "mj_model": model})()
    xml, files = model_xml(holder)  # checked field by field against `model` (raises on a difference)
    assert list(files) == ["terrain.bin"] and len(xml) < 100_000
    written = mujoco.MjModel.from_xml_string(xml, files)
    assert written.nhfield == model.nhfield == 1
    np.testing.assert_array_equal(written.hfield_data, model.hfield_data)


def test_mjlab_metadata_keys_are_readable_with_onnx_and_match_the_model(quadruped):
    import mujoco

    run_dir, _ = quadruped
    props = {p.key: p.value for p in onnx.load(str(run_dir / "exported" / "policy.onnx")).metadata_props}
    assert set(MJLAB_KEYS) <= props.keys()
    meta = json.loads(props["input"])
    model = mujoco.MjModel.from_xml_path(str(run_dir / "exported" / "model.xml"))
    joints = props["joint_names"].split(",")
    assert joints == [model.joint(model.actuator_trnid[i, 0]).name for i in range(model.nu)]
    floats = {k: [float(v) for v in props[k].split(",")] for k in
              ("joint_stiffness", "joint_damping", "default_joint_pos", "action_scale")}  # fmt: skip
    np.testing.assert_allclose(floats["joint_stiffness"], model.actuator_gainprm[:, 0], atol=5e-4)
    np.testing.assert_allclose(floats["joint_damping"], -model.actuator_biasprm[:, 2], atol=5e-4)
    np.testing.assert_allclose(floats["default_joint_pos"], model.key("home").qpos[7:], atol=5e-4)
    assert floats["action_scale"] == [0.25] * model.nu
    names = props["observation_names"].split(",")
    assert names == [t["name"] for t in meta["terms"]]
    assert names == [
        "base_lin_vel",
        "base_ang_vel",
        "projected_gravity",
        "command",
        "joint_pos",
        "joint_vel",
        "actions",
    ]
    assert props["command_names"] == "twist"
    for key, one in [("observation_terms_scale", "1.000"), ("observation_terms_history_length", "0.000"),
                     ("observation_terms_flatten_history_dim", "1.000"), ("observation_terms_clip", "-inf;inf")]:  # fmt: skip
        assert props[key].split(",") == [one] * len(names)
    assert props["run_path"].endswith(".pt")


def test_the_example_imports_only_mujoco_numpy_onnxruntime_and_the_standard_library(cartpole):
    tree = ast.parse(EXAMPLE.read_text())
    top = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module.split(".")[0])
    optional = {"imageio_ffmpeg"}  # --video only, to find an ffmpeg binary where none is on PATH
    assert top - sys.stdlib_module_names - optional == {"mujoco", "numpy", "onnxruntime"}
    # And at run time: nothing of the trainer is loaded, even indirectly.
    run_dir, _ = cartpole
    _, result = sim2sim(str(run_dir / "exported"), "--episodes", "1", extra_flags=("-X", "importtime"))
    loaded = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert "mujoco" in loaded and "onnxruntime" in loaded
    assert not loaded & {"torch", "warp", "mujoco_warp", "mjfleet", "tensordict", "rsl_rl"}


@pytest.mark.slow
def test_quadruped_sim2sim_reproduces_plays_tracking_and_falls(tmp_path_factory):
    """A 15-minute-class run is not needed: any policy gives the same statistics in both simulators. 64 episodes
    of 20 s with the command (0.5, 0, 0); tolerances in the module docstring."""
    run_dir, played = trained_and_exported(
        tmp_path_factory,
        "Quadruped-Velocity-Flat",
        ["--num-envs", "64", "--max-iterations", "30"],
        ["--episodes", "64", "--num-envs", "64", "--command", *QUADRUPED_COMMAND],
    )
    result, _ = sim2sim(str(run_dir / "exported"), "--episodes", "64", "--command", *QUADRUPED_COMMAND)
    assert result["metrics"]["lin_vel_error"] == pytest.approx(played["metrics"]["lin_vel_error"], abs=0.05)
    fell = result["terminations"].get("fell", 0) / result["episodes_ended"]
    fell_play = played["terminations"].get("fell", 0) / played["episodes_ended"]
    assert abs(fell - fell_play) <= 0.05


def test_the_export_check_runs_without_onnxruntime(cartpole, monkeypatch):
    """onnxruntime is the optional `deploy` extra: without it the check runs onnx's reference evaluator."""
    from tensordict import TensorDict

    from mjfleet.rl.export import build_actor
    from mjfleet.rl.export_check import ONNX_TOLERANCE, check_onnx
    from mjfleet.runs.checkpoints import read_checkpoint

    run_dir, _ = cartpole
    obs = TensorDict({"actor": torch.randn(4, 5)}, batch_size=[4])
    actor = build_actor(read_checkpoint(RunDir(run_dir).latest_checkpoint(), map_location="cpu"), obs, 1)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    with pytest.raises(ImportError):
        import onnxruntime  # noqa: F401
    assert check_onnx(run_dir / "exported" / "policy.onnx", actor, obs) <= ONNX_TOLERANCE
