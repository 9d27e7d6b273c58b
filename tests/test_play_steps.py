"""`play --initial-state` and `--dump-actions`: a deployment checked step by step with mjfleet's command line alone.

The shipped pretrained quadruped (no training needed) starts from a state this test writes as a deployer would
(the `home` pose, slightly moving, a forward command); what `play` dumps for environment 0 must be what the export
computes from the same state: policy.onnx run on the dumped inputs, and examples/sim2sim.py (MuJoCo C, float64)
started from the same state (its pretrained export is policy.json format 1: the example still reads it).
"""

import json
import os

import numpy as np
import pytest
from helpers import assert_usage_exit
from test_sim2sim import dumped_actions

from mjfleet.deploy.pretrained import PRETRAINED_ROOT

TASK = "Quadruped-Velocity-Flat"
EXPORT = PRETRAINED_ROOT / TASK
STEPS = 50  # the whole of play's one-second episodes
PLAY = [TASK, "--pretrained", "--gpu-ids", "None", "--num-envs", "2", "--episodes", "2",
        "--env.episode-length-s", "1.0"]  # fmt: skip


def deployer_state() -> dict[str, np.ndarray]:
    """The model's `home` pose 2.5 cm above its keyframe height, every velocity drawn in +-0.2, walking forward at
    0.8 m/s (the pretrained policy's command)."""
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(EXPORT / "model.xml"))
    qpos = model.key("home").qpos.copy()
    qpos[2] = 0.31
    qvel = np.random.default_rng(0).uniform(-0.2, 0.2, model.nv)
    return {"qpos": qpos, "qvel": qvel, "command": np.array([0.8, 0.0, 0.0])}


def write_state(path, state: dict[str, np.ndarray]) -> None:
    if path.suffix == ".npz":
        np.savez(path, **state)
    else:
        path.write_text(json.dumps({key: value.tolist() for key, value in state.items()}))


def read_dump(path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path) as arrays:
            return {key: arrays[key] for key in arrays.files}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {key: np.array([row[key] for row in rows]) for key in rows[0]}


def play(tmp_path, monkeypatch, *args: str) -> dict:
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    main([*PLAY, "--output", str(tmp_path / "eval.json"), *args])
    return json.loads((tmp_path / "eval.json").read_text())


@pytest.mark.parametrize(
    ("state_file", "dump_file"), [("state.json", "dump.npz"), ("state.npz", "dump.jsonl")]
)
def test_play_dumps_from_a_deployers_state_what_the_export_computes_from_it(
    state_file, dump_file, tmp_path, monkeypatch
):
    import onnxruntime as ort

    state = deployer_state()
    write_state(tmp_path / state_file, state)
    report = play(tmp_path, monkeypatch, "--initial-state", str(tmp_path / state_file),
                  "--dump-actions", str(tmp_path / dump_file))  # fmt: skip
    assert report["dumped"] == {"path": str(tmp_path / dump_file), "steps": STEPS}
    assert report["initial_state"] == str(tmp_path / state_file)
    dump = read_dump(tmp_path / dump_file)
    meta = json.loads((EXPORT / "policy.json").read_text())
    assert dump["obs"].shape == (STEPS, meta["input"]["size"]) and dump["actions"].shape == (STEPS, 12)
    assert dump["episode_step"].tolist() == list(range(STEPS))
    # The first step acts in the state given (float32 in play), the command in its input's command columns.
    np.testing.assert_allclose(dump["qpos"][0], state["qpos"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(dump["qvel"][0], state["qvel"], atol=1e-6, rtol=0)
    command = next(term for term in meta["input"]["terms"] if term["name"] == "command")
    np.testing.assert_allclose(
        dump["obs"][:, command["start"] : command["stop"]], [[0.8, 0, 0]] * STEPS, atol=1e-6
    )
    assert np.abs(dump["qpos"][-1, :2] - state["qpos"][:2]).max() > 0.1, (
        "the robot did not move: a weak check"
    )
    # `obs` is policy.onnx's input, column for column: the ONNX graph maps it to the dumped actions.
    session = ort.InferenceSession(str(EXPORT / "policy.onnx"), providers=["CPUExecutionProvider"])
    (onnx_actions,) = session.run(["actions"], {"obs": dump["obs"].astype(np.float32)})
    np.testing.assert_allclose(onnx_actions, dump["actions"], atol=1e-5, rtol=0)
    # MuJoCo C from the same state, run by the example from the export alone: the same actions, step by step.
    write_state(tmp_path / "for_sim2sim.npz", state)
    mujoco_c = dumped_actions(EXPORT, tmp_path / "for_sim2sim.npz", STEPS, tmp_path)
    np.testing.assert_allclose(mujoco_c, dump["actions"], atol=1e-4, rtol=0)


BAD = {
    "no such file": ({}, ["--initial-state", "missing.json"], "--initial-state missing.json: no such file"),
    "a suffix": ({}, ["--initial-state", "state.txt"], "use a .npz or a .json file"),
    "no qvel": ({"state.json": '{"qpos": [0, 1]}'}, ["--initial-state", "state.json"], "no qvel"),
    "not json": ({"state.json": "qpos = [0]"}, ["--initial-state", "state.json"], "cannot read it"),
    "a matrix": ({"state.json": '{"qpos": [[0, 1]], "qvel": [0]}'}, ["--initial-state", "state.json"],
                 "qpos has shape (1, 2), not a vector"),
    "the model's size": ({"state.json": '{"qpos": [0, 0, 0.3], "qvel": [0, 0]}'}, ["--initial-state", "state.json"],
                         f"qpos has 3 values, {TASK}'s model has nq = 19"),
    "a dump suffix": ({}, ["--dump-actions", "dump.csv"], "use a .npz or a .jsonl file"),
    "a dump folder": ({}, ["--dump-actions", "missing/dump.npz"], "no such folder missing"),
    "no steps": ({}, ["--dump-actions", "dump.npz", "--dump-steps", "0"], "--dump-steps must be >= 1"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_a_bad_initial_state_or_dump_file_is_one_line_exit_2_and_nothing_is_written(
    case, tmp_path, monkeypatch, capsys
):
    from mjfleet.cli.play import main

    files, args, needle = BAD[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))  # no backend probe in-process
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as exit_info:
        main([*PLAY, "--output", "out/eval.json", *args])
    assert_usage_exit(exit_info, capsys.readouterr().err, needle)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "out") == before
    assert not (tmp_path / "out" / "eval.json").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--agent", "zero", "--dump-actions", "dump.npz"], "records a trained policy's input and actions"),
        (["--agent", "zero", "--initial-state", "state.json"], "Cartpole-Balance takes no command"),
    ],
)
def test_what_a_task_or_policy_cannot_dump_or_start_from_is_a_usage_error(
    args, needle, tmp_path, monkeypatch, capsys
):
    from mjfleet.cli.play import main

    (tmp_path / "state.json").write_text(json.dumps({"qpos": [0, 0], "qvel": [0, 0], "command": [0.5, 0, 0]}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", "--num-envs", "2", "--episodes", "2", *args])
    assert_usage_exit(exit_info, capsys.readouterr().err, needle)
    assert not (tmp_path / "dump.npz").exists()
