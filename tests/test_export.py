"""The exported policy's metadata, read back from policy.onnx with `onnx` as a deployment script would."""

import json
import warnings
from types import SimpleNamespace

import onnx
import pytest
import torch

from mjfleet.deploy.metadata import MJLAB_KEYS
from mjfleet.tasks import get_task, task_names


@pytest.fixture(scope="module")
def quadruped_export(tmp_path_factory):
    """(env, metadata_props of an exported Quadruped-Velocity-Flat policy, the exported folder) for an untrained
    actor, built with play's settings (no observation noise, so observation columns can be checked by value)."""
    from rsl_rl.models import MLPModel

    from mjfleet.deploy.export import export_policy, policy_metadata
    from mjfleet.tasks import get_task

    spec = get_task("Quadruped-Velocity-Flat")
    cfg = spec.play_env_config()
    cfg.num_envs = 2
    torch.manual_seed(0)
    env = spec.make_env(cfg, "cpu")
    obs = env.get_observations()
    rsl = spec.agent_config().to_rsl_rl()
    actor = MLPModel(obs, rsl["obs_groups"], "actor", env.num_actions, hidden_dims=[32], obs_normalization=True,
                     distribution_cfg=rsl["actor"]["distribution_cfg"]).eval()  # fmt: skip
    out = tmp_path_factory.mktemp("export")
    files = export_policy(actor, obs, out, policy_metadata(env, actor, obs, spec.name, iteration=0))
    # mjfleet's keys are JSON strings; mjlab's (tested in test_sim2sim.py) are mjlab's comma-separated strings.
    props = {p.key: json.loads(p.value) for p in onnx.load(str(files["onnx"])).metadata_props
             if p.key not in MJLAB_KEYS}  # fmt: skip
    return env, props, out


def test_observation_slices_name_every_column_of_the_input_once(quadruped_export):
    env, props, _ = quadruped_export
    terms = props["input"]["terms"]
    assert props["input"]["size"] == env.get_observations()["actor"].shape[1] == 48
    assert [t["start"] for t in terms] == [0] + [t["stop"] for t in terms[:-1]]  # contiguous, in order
    assert terms[-1]["stop"] == 48 and all(t["stop"] > t["start"] for t in terms)
    assert len({t["name"] for t in terms}) == len(terms)
    assert [t["name"] for t in terms] == ["base_lin_vel", "base_ang_vel", "projected_gravity", "command",
                                          "joint_pos", "joint_vel", "actions"]  # fmt: skip


def test_observation_slices_point_at_the_columns_they_name(quadruped_export):
    env, props, _ = quadruped_export
    obs = env.get_observations()["actor"]
    column = {t["name"]: slice(t["start"], t["stop"]) for t in props["input"]["terms"]}
    joint_pos = env.sim.qpos[:, env._qj] - env.default_joint_pos
    assert torch.equal(obs[:, column["joint_pos"]], joint_pos)
    assert torch.equal(obs[:, column["joint_vel"]], env.sim.qvel[:, env._vj])
    assert torch.equal(obs[:, column["command"]], env.commands)


def test_actions_carry_joint_names_default_pose_scale_offset_and_gains_of_the_model(quadruped_export):
    env, props, _ = quadruped_export
    model, actions = env.mj_model, props["actions"]
    assert actions["joint_names"] == [model.joint(model.actuator_trnid[i, 0]).name for i in range(model.nu)]
    home = model.key("home").qpos[7:].tolist()  # after the free joint's 7 coordinates
    assert (
        actions["default_joint_pos"] == pytest.approx(home)
        and actions["offset"] == actions["default_joint_pos"]
    )
    assert actions["action_scale"] == env.joint_action_scale.tolist() == [0.25] * model.nu
    assert actions["stiffness"] == model.actuator_gainprm[:, 0].tolist()
    assert "default_joint_pos + action_scale * action" in actions["meaning"]


def test_control_rate_model_and_versions_are_recorded(quadruped_export):
    env, props, _ = quadruped_export
    model = env.mj_model
    assert props["control_rate_hz"] == pytest.approx(1.0 / (model.opt.timestep * env.cfg.decimation)) == 50.0
    assert props["model"] == {"name": "mjfleet_quadruped", "nq": model.nq, "nv": model.nv, "nu": model.nu,
                              "timestep": pytest.approx(0.005)}  # fmt: skip
    assert props["versions"]["mjfleet"] and props["versions"]["mujoco"]
    assert props["task"] == "Quadruped-Velocity-Flat" and props["iteration"] == 0


def _onnx_and_json(folder):
    """(policy.onnx's metadata as onnxruntime reads it, as a deployment's own code would; policy.json)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "policy.onnx"), providers=["CPUExecutionProvider"])
    return session.get_modelmeta().custom_metadata_map, json.loads((folder / "policy.json").read_text())


def _assert_onnx_carries_policy_json(folder):
    props, meta = _onnx_and_json(folder)
    mjlab = meta.pop("mjlab", None) or {}
    assert {key: json.loads(value) for key, value in props.items() if key not in mjlab} == meta
    assert {key: props[key] for key in mjlab} == mjlab  # mjlab's keys: its plain strings, at the top level


def test_policy_onnx_carries_all_of_policy_json(quadruped_export):
    _, _, folder = quadruped_export
    props, meta = _onnx_and_json(folder)
    assert {"files", "onnx", "torchscript", "deployment", "format"} <= props.keys()
    assert meta["files"] == {"mjcf": "model.xml", "onnx": "policy.onnx", "torchscript": "policy.pt"}
    _assert_onnx_carries_policy_json(folder)


def test_deploy_md_lists_the_mjlab_keys_an_export_writes_as_entries_of_their_own(quadruped_export):
    """The ONNX metadata's layout as docs/deploy.md states it: policy.json's keys but `mjlab` as JSON entries, and
    mjlab's keys (the page's list, in order) as entries of their own; no `mjlab` entry."""
    import pathlib
    import re

    _, _, folder = quadruped_export
    props, meta = _onnx_and_json(folder)
    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "deploy.md").read_text()
    listed = re.findall(r"`(\w+)`", re.search(r"^mjlab keys: (.*?)\n\n", page, re.M | re.S).group(1))
    assert listed == list(meta["mjlab"]) == list(MJLAB_KEYS)
    assert "mjlab" not in props and set(props) == (set(meta) - {"mjlab"}) | set(listed)


def test_a_recurrent_policys_onnx_carries_its_state_rule(tmp_path):
    """The hidden state's inputs, outputs, shape and reset rule: what a deployment holding only policy.onnx needs
    most, and what policy.json alone used to have."""
    from rsl_rl.models import RNNModel
    from tensordict import TensorDict

    from mjfleet.deploy.export import export_policy

    torch.manual_seed(0)
    obs = TensorDict({"actor": torch.zeros(2, 3)}, batch_size=[2])
    actor = RNNModel(obs, {"actor": ["actor"]}, "actor", 2, hidden_dims=[8], rnn_type="gru", rnn_hidden_dim=8)
    export_policy(actor.eval(), obs, tmp_path, {"task": "a recurrent actor", "input": {"size": 3}})
    props, meta = _onnx_and_json(tmp_path)
    assert json.loads(props["state"]) == meta["state"]
    assert meta["state"]["inputs"] == ["h_in"] and meta["state"]["outputs"] == ["h_out"]
    assert meta["state"]["reset"].startswith("zeros at the start of every episode")
    _assert_onnx_carries_policy_json(tmp_path)
    # each file renamed into place whole, no temporary one left; policy.pt is the TorchScript module itself
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.json", "policy.onnx", "policy.pt"]
    assert meta["files"] == {"onnx": "policy.onnx", "torchscript": "policy.pt"}
    with warnings.catch_warnings():  # torch deprecates TorchScript; deployers still load it
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.load(tmp_path / "policy.pt")
    assert len(scripted(torch.zeros(1, 3), torch.zeros(1, 1, 8))) == 2  # actions, the next hidden state


def test_observation_terms_that_do_not_add_up_to_the_group_are_an_error():
    from mjfleet.deploy.export import observation_slices

    env = SimpleNamespace(observation_terms=lambda: {"actor": [("a", 2), ("b", 2)]})
    with pytest.raises(ValueError, match="'actor' has 5 columns but its terms name 4"):
        observation_slices(env, [{"name": "actor", "size": 5}])
    # A group the environment does not describe is one term named after it
    assert observation_slices(env, [{"name": "actor", "size": 4}, {"name": "extra", "size": 3}])[-1] == {
        "name": "extra", "group": "extra", "start": 4, "stop": 7}  # fmt: skip


def test_a_changed_height_scan_clip_is_applied_and_reaches_the_exports_metadata():
    """The clip lives in the task's observation spec (HeightScanConfig.clip, `observation_clips`): the scan is
    clipped to it, and policy.json's input.terms and mjlab's observation_terms_clip state the same range."""
    from rsl_rl.models import MLPModel

    from mjfleet.deploy.export import policy_metadata
    from mjfleet.tasks.locomotion.mdp.observations import height_scan

    spec = get_task("Quadruped-Velocity-Rough")
    cfg = spec.play_env_config()
    cfg.num_envs, cfg.height_scan.clip = 2, (-0.02, 0.01)  # narrower than the standing robot's scan spreads
    torch.manual_seed(0)
    env = spec.make_env(cfg, "cpu")
    obs = env.get_observations()
    scan = height_scan(env)
    env.cfg.height_scan.clip = (-100.0, 100.0)
    unclipped = height_scan(env)
    env.cfg.height_scan.clip = (-0.02, 0.01)
    assert torch.equal(scan, unclipped.clamp(-0.02, 0.01)) and not torch.equal(scan, unclipped)
    rsl = spec.agent_config().to_rsl_rl()
    actor = MLPModel(obs, rsl["obs_groups"], "actor", env.num_actions, hidden_dims=[8],
                     distribution_cfg=rsl["actor"]["distribution_cfg"]).eval()  # fmt: skip
    meta = policy_metadata(env, actor, obs, spec.name)
    terms = meta["input"]["terms"]
    assert [t.get("clip") for t in terms if t["name"] == "height_scan"] == [[-0.02, 0.01]]
    assert all("clip" not in t for t in terms if t["name"] != "height_scan")
    clips = meta["mjlab"]["observation_terms_clip"].split(",")
    assert clips[[t["name"] for t in terms].index("height_scan")] == "-0.020;0.010"
    assert {c for i, c in enumerate(clips) if terms[i]["name"] != "height_scan"} == {"-inf;inf"}


# Described robots (Go1-, G1-Velocity-Flat) are left out: their models need fetched meshes, which the export does
# not carry yet, and their tasks state no deployment rules yet (docs/robots.md, "Not built yet").
@pytest.mark.parametrize("task", [name for name in task_names() if get_task(name).requires is None])
def test_every_registered_task_exports_after_one_iteration_to_a_folder_that_deploys_on_its_own(
    task, tmp_path
):
    """Each task's policy after one tiny training iteration exports (ONNX, TorchScript, metadata, the model as
    MJCF checked to compile to the trained model), and the folder's MJCF loads by itself, heightfields included.
    Every flat-ground task states its episode rules (`deployment`); rough ground does not yet (docs/deploy.md)."""
    import mujoco
    import numpy as np

    from mjfleet.deploy.export import export_policy, policy_metadata
    from mjfleet.rl import FleetRunner
    from mjfleet.tasks import get_task

    spec = get_task(task)
    cfg = spec.play_env_config()
    cfg.num_envs = 2
    agent = spec.agent_config()
    agent.logger, agent.num_steps_per_env = "none", 2
    torch.manual_seed(0)
    runner = FleetRunner(spec.make_env(cfg, "cpu"), agent, None, "cpu")
    runner.learn(1)
    actor, obs = runner.alg.get_policy().eval(), runner.env.get_observations()
    out = tmp_path / "exported"
    files = export_policy(actor, obs, out, policy_metadata(runner.env, actor, obs, task, iteration=1))
    assert {"onnx", "torchscript", "metadata", "mjcf"} <= set(files), files
    deployed, trained = mujoco.MjModel.from_xml_path(str(files["mjcf"])), runner.env.mj_model
    assert (deployed.nq, deployed.nu, deployed.nbody) == (trained.nq, trained.nu, trained.nbody)
    np.testing.assert_array_equal(deployed.hfield_data, trained.hfield_data)
    np.testing.assert_array_equal(deployed.body_mass, trained.body_mass)
    rules = json.loads(files["metadata"].read_text())["deployment"]
    assert (rules is None) == task.endswith("-Rough"), "a term without its deployment expression?"
