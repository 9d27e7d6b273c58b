"""`scripts/gpu_checks.sh humanoid-learn`, dry-run on the CPU with tiny sizes: the lent GPU call runs this very
script, so a typo, a missing file or an output the device machine would not bring back fails here, not there.

The device machine runs `python3` with the project on PYTHONPATH (../shared/GPU.md); here `python3` is this
virtual environment's. What comes back from $OUT is at most 8 files, at most 2 folders down, named in letters,
digits, '.', '_' and '-' (the device tool's limits).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from helpers import assert_one_line_usage_error

from mjfleet.deploy.pretrained import CHECKPOINT, PROVENANCE, PROVENANCE_KEYS
from mjfleet.ranking import RULE
from mjfleet.runs.checkpoints import read_checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASK = "Humanoid-Velocity-Flat"
EXPORT = ("policy.onnx", "policy.json", "model.xml")
RETURNED = re.compile(r"^[A-Za-z0-9._-]+$")
# Tiny: 8 training envs, 2 iterations judged after each, 1-second episodes, 4 of them per evaluation.
LEARN_ARGS = (
    "--num-envs 8 --max-iterations 2 --eval-every 1 --episodes 4 --eval-envs 4 --env-set episode_length_s=1"
)
PLAY_ARGS = "--episodes 4 --num-envs 4 --env.episode-length-s 1"
HANG_GUARD_S = 900  # generous: the dry run takes about a minute on 2 cores


def run_stage(
    base: pathlib.Path, *stages: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, pathlib.Path, pathlib.Path]:
    """`gpu_checks.sh <stages>` on the CPU with tiny sizes, $OUT and $TMPDIR under `base`: (its result, $OUT,
    $TMPDIR)."""
    out, scratch = base / "out", base / "tmp"
    scratch.mkdir()
    environ = {
        **os.environ,
        "OUT": str(out),
        "TMPDIR": str(scratch),
        "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HUMANOID_DEVICE": "cpu",
        "HUMANOID_LEARN_ARGS": LEARN_ARGS,
        "HUMANOID_PLAY_ARGS": PLAY_ARGS,
        "MJFLEET_COMMIT": "0123abc",
        **(env or {}),
    }
    done = subprocess.run(
        ["bash", "scripts/gpu_checks.sh", *stages],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    print(done.stdout[-4000:], done.stderr[-4000:])
    return done, out, scratch


@pytest.fixture(scope="module")
def stage(tmp_path_factory) -> tuple[subprocess.CompletedProcess, pathlib.Path, pathlib.Path]:
    return run_stage(tmp_path_factory.mktemp("gpu_stage"), "humanoid-learn")


pytestmark = pytest.mark.slow


def test_the_stage_succeeds_and_leaves_no_scratch_files(stage):
    done, _, scratch = stage
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        list(scratch.glob("tmp.*")) == []
    )  # the stage's mktemp folder (torch and onnx leave caches of their own)


def test_everything_it_writes_comes_back_from_the_device_machine(stage):
    _, out, _ = stage
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert len(files) <= 8, files
    for path in files:
        assert len(path.parts) <= 3 and all(RETURNED.match(part) for part in path.parts), path
    best = pathlib.Path("pretrained", TASK)
    assert set(files) >= {pathlib.Path("humanoid_learn.jsonl"), best / CHECKPOINT, best / PROVENANCE}
    assert {best / name for name in EXPORT} <= set(files)


def test_the_curve_has_minutes_steps_error_falls_and_length_for_both_judges(stage):
    _, out, _ = stage
    rows = [json.loads(line) for line in (out / "humanoid_learn.jsonl").read_text().splitlines()]
    by_policy = {}
    for row in rows:
        by_policy.setdefault(row.get("policy"), []).append(row)
    assert {"zero", "random", "trained"} <= set(by_policy)
    trained = by_policy["trained"]
    assert [r["iteration"] for r in trained] == [1, 2]
    for row in trained + by_policy["zero"] + by_policy["random"]:
        assert row["command"] == [0.5, 0.0, 0.0]
        for judged in (row, row["random"]):
            # --env-set episode_length_s=1 reached the evaluations: at most 50 policy steps per episode
            assert judged["lin_vel_error"] >= 0 and 0 < judged["mean_episode_length"] <= 50
            assert 0 <= judged.get("ended_early", judged.get("falls")) <= judged["episodes_ended"]
    for row in trained:
        assert row["env_steps"] == row["iteration"] * 8 * 24 and row["train_min"] <= row["wall_min"]
    assert rows[-1]["reached"] is False  # two tiny iterations do not walk


def test_the_best_checkpoint_is_a_pretrained_policy_with_its_provenance(stage):
    _, out, _ = stage
    best = out / "pretrained" / TASK
    provenance = json.loads((best / PROVENANCE).read_text())
    assert set(PROVENANCE_KEYS) <= set(provenance)
    assert provenance["task"] == TASK and provenance["commit"] == "0123abc"
    assert provenance["device"].startswith("CPU") and provenance["iteration"] in (1, 2)
    assert "--save-best" in provenance["training_command"]
    assert set(provenance["evaluation"]) >= {"trained", "zero", "random"}
    assert provenance["chosen_by"]["rule"] == RULE  # kept by falls before error, and its falls per judge
    assert set(provenance["chosen_by"]["ended_early"]) == {"command", "random"}
    assert set(provenance["play"]) >= {"command", "trained", "zero", "random"}
    state = read_checkpoint(best / CHECKPOINT)
    assert state["iter"] == provenance["iteration"] and state["infos"]["task"] == TASK
    assert "optimizer_state_dict" not in state and "critic_state_dict" not in state
    metadata = json.loads((best / "policy.json").read_text())
    assert metadata["task"] == TASK and metadata["iteration"] == provenance["iteration"]


@pytest.mark.parametrize(
    ("stages", "needle"),
    [
        (("tests", "humanoid-learn:h1"), "unknown robot in 'humanoid-learn:h1'"),
        (("humanoid-learn", "humanoid_learn"), "unknown stage 'humanoid_learn'"),
    ],
)
def test_a_bad_stage_or_robot_is_one_line_and_status_2_before_any_stage_runs(tmp_path, stages, needle):
    done, out, _ = run_stage(tmp_path, *stages)
    assert_one_line_usage_error(done, needle)
    assert not out.exists()  # not even the device's name: nothing ran


def test_the_g1_stage_without_its_fetched_robot_says_which_fetch_and_trains_nothing(tmp_path):
    # The device machine reaches no package index: the robot must come with the call ($MJFLEET_CACHE_DIR)
    done, out, _ = run_stage(
        tmp_path, "humanoid-learn:unitree-g1", env={"MJFLEET_CACHE_DIR": str(tmp_path / "c")}
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "robots fetch unitree-g1" in done.stderr and "Traceback" not in done.stderr
    assert not (out / "humanoid_learn.jsonl").exists() and not (out / "pretrained").exists()
