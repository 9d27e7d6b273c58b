"""`play <Task> --pretrained`: the policies that ship in src/mjfleet/pretrained/ load by task name, say how they were
made, and do what their pretrained.json says they do; a task without one is a one-line usage error."""

from __future__ import annotations

import json
import os
import re

import pytest
from helpers import assert_usage_exit

from mjfleet.deploy.pretrained import (
    CHECKPOINT,
    PLAY_KEYS,
    PRETRAINED_ROOT,
    PROVENANCE,
    PROVENANCE_KEYS,
    pretrained_tasks,
    write_pretrained,
)
from mjfleet.evaluation import early_terminations
from mjfleet.runs.checkpoints import read_checkpoint
from mjfleet.tasks import task_names

QUADRUPED = "Quadruped-Velocity-Flat"
MAX_FOLDER_BYTES = 4 * 2**20  # a pretrained policy travels in every clone and wheel


def _files() -> dict[str, int]:
    return {str(p.relative_to(PRETRAINED_ROOT)): p.stat().st_mtime_ns for p in PRETRAINED_ROOT.rglob("*")}


def test_the_quadruped_ships_a_pretrained_policy():
    assert QUADRUPED in pretrained_tasks()


@pytest.mark.parametrize("task", pretrained_tasks())
def test_each_pretrained_policy_is_a_small_playable_checkpoint_of_its_task_with_how_it_was_made(task):
    folder = PRETRAINED_ROOT / task
    assert task in task_names()
    provenance = json.loads((folder / PROVENANCE).read_text())
    assert set(PROVENANCE_KEYS) <= set(provenance) and provenance["task"] == task
    assert re.fullmatch(r"[0-9a-f]{7,40}", provenance["commit"]), provenance["commit"]
    assert set(provenance["play"]) >= {"command", "trained", "zero", "random"}  # how `play` judged it
    state = read_checkpoint(folder / CHECKPOINT)
    assert set(state) <= set(PLAY_KEYS) and state["infos"]["task"] == task
    assert (state["iter"], state["env_steps"]) == (provenance["iteration"], provenance["env_steps"])
    assert sum(p.stat().st_size for p in folder.iterdir()) < MAX_FOLDER_BYTES


def test_play_pretrained_plays_and_exports_the_shipped_policy_outside_the_package(
    tmp_path, monkeypatch, capsys
):
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    before = _files()
    main([QUADRUPED, "--pretrained", "--gpu-ids", "None", "--command", "0.8", "0", "0", "--num-envs", "2",
          "--episodes", "2", "--env.episode-length-s", "1.0", "--export"])  # fmt: skip
    out_dir = tmp_path / "logs" / "quadruped_velocity_flat" / "pretrained"
    report = json.loads((out_dir / "eval.json").read_text())
    provenance = json.loads((PRETRAINED_ROOT / QUADRUPED / PROVENANCE).read_text())
    assert report["checkpoint"] == str(PRETRAINED_ROOT / QUADRUPED / CHECKPOINT)
    assert report["iteration"] == provenance["iteration"]
    assert (out_dir / "exported" / "policy.onnx").is_file() and (out_dir / "exported" / "model.xml").is_file()
    assert _files() == before  # nothing written into the package
    out = capsys.readouterr().out
    assert f"pretrained policy (iteration {provenance['iteration']}, trained on {provenance['device']}" in out


@pytest.mark.slow
def test_the_pretrained_quadruped_walks_as_its_pretrained_json_says(tmp_path, monkeypatch):
    """The CI learning check's judgement (tests/test_learning.py), on the shipped policy: at 0.8 m/s forward over
    10-second episodes it tracks within half of standing still's and random actions' error, without falling."""
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    main([QUADRUPED, "--pretrained", "--gpu-ids", "None", "--command", "0.8", "0", "0", "--episodes", "16",
          "--env.episode-length-s", "10", "--baselines", "--output", "eval.json"])  # fmt: skip
    report = json.loads((tmp_path / "eval.json").read_text())
    error = report["metrics"]["lin_vel_error"]
    for baseline in ("zero", "random"):
        assert error < 0.5 * report["baselines"][baseline]["metrics"]["lin_vel_error"], baseline
    assert early_terminations(report) == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["Cartpole-Balance", "--pretrained"],
            f"no pretrained policy ships for Cartpole-Balance (tasks that have one: {QUADRUPED}",
        ),  # fmt: skip
        ([QUADRUPED, "--pretrained", "--checkpoint", "5"], "--pretrained plays the policy that ships"),
        (
            [QUADRUPED, "--pretrained", "--agent", "zero"],
            "takes no --checkpoint/--load-run/--wandb-run-path/--pretrained",
        ),  # fmt: skip
    ],
)
def test_pretrained_usage_errors_are_one_line_with_exit_status_2(args, needle, tmp_path, monkeypatch, capsys):
    from mjfleet.cli.play import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--gpu-ids", "None"])
    assert_usage_exit(exit_info, capsys.readouterr().err, needle)


def test_a_pretrained_folder_keeps_what_play_reads_and_refuses_missing_provenance(tmp_path):
    state = read_checkpoint(PRETRAINED_ROOT / QUADRUPED / CHECKPOINT)
    provenance = json.loads((PRETRAINED_ROOT / QUADRUPED / PROVENANCE).read_text())
    incomplete = {k: v for k, v in provenance.items() if k != "commit"}
    with pytest.raises(ValueError, match="commit"):
        write_pretrained(tmp_path / "bad", state, incomplete)
    assert not (tmp_path / "bad").exists()
    written = write_pretrained(tmp_path / QUADRUPED, {**state, "optimizer_state_dict": {"x": 1}}, provenance)
    again = read_checkpoint(written)
    assert "optimizer_state_dict" not in again and again["iter"] == state["iter"]
    assert json.loads((tmp_path / QUADRUPED / PROVENANCE).read_text()) == provenance


MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|work|home|root|Users|scratch|mnt)/")


def _texts(folder):
    """Every text a shipped folder carries: its JSON and XML files and the ONNX model's metadata."""
    import onnx

    texts = {p.name: p.read_text() for p in folder.iterdir() if p.suffix in (".json", ".xml")}
    if (folder / "policy.onnx").is_file():
        for prop in onnx.load(str(folder / "policy.onnx")).metadata_props:
            texts[f"policy.onnx:{prop.key}"] = prop.value
    return texts


@pytest.mark.parametrize("task", pretrained_tasks())
def test_no_shipped_file_carries_a_path_of_the_machine_that_made_it(task):
    found = {name: MACHINE_PATH.search(text) for name, text in _texts(PRETRAINED_ROOT / task).items()}
    assert {name: m.group(0) for name, m in found.items() if m} == {}


def test_recording_plays_evaluation_names_the_checkpoint_by_task_not_by_path(tmp_path):
    """The GPU stage exports its best checkpoint from a scratch path, then records play's evaluation."""
    import shutil

    from mjfleet.deploy.pretrained import record_play

    folder = tmp_path / QUADRUPED
    shutil.copytree(PRETRAINED_ROOT / QUADRUPED, folder)
    meta = json.loads((folder / "policy.json").read_text())
    meta["checkpoint"] = meta["mjlab"]["run_path"] = str(tmp_path / "scratch" / "model.pt")
    (folder / "policy.json").write_text(json.dumps(meta, indent=2) + "\n")
    eval_json = tmp_path / "eval.json"
    eval_json.write_text(json.dumps({"mean_return": 1.0, "episodes": 2}))
    record_play(folder, eval_json, f"uv run play {QUADRUPED} --pretrained")
    texts = _texts(folder)
    assert json.loads(texts["policy.json"])["checkpoint"] == f"pretrained:{QUADRUPED}"
    assert json.loads(texts["policy.onnx:checkpoint"]) == f"pretrained:{QUADRUPED}"
    assert texts["policy.onnx:run_path"] == f"pretrained:{QUADRUPED}"
    assert not any(MACHINE_PATH.search(text) for text in texts.values())
