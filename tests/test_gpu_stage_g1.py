"""`scripts/gpu_checks.sh humanoid-learn:unitree-g1`, dry-run on the CPU with tiny sizes, as tests/test_gpu_stage.py
does for mjfleet's own humanoid: G1-Velocity-Flat trained and judged by the same stage, from a robot cache the call
brings ($MJFLEET_CACHE_DIR), its best checkpoint brought back as a pretrained policy without an export.

Slow and not run in CI (CI's time is full; 85 s with a warm kernel cache on the 2-core VM, 2026-11-28; a cold
one not measured):
`uv run pytest -m slow tests/test_gpu_stage_g1.py`.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from test_gpu_stage import EXPORT, RETURNED, run_stage

from mjfleet.deploy.pretrained import CHECKPOINT, PROVENANCE
from mjfleet.runs.checkpoints import read_checkpoint

TASK = "G1-Velocity-Flat"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def g1_stage(tmp_path_factory, robot_cache):
    base = tmp_path_factory.mktemp("gpu_stage_g1")
    return run_stage(base, "humanoid-learn:unitree-g1", env={"MJFLEET_CACHE_DIR": str(robot_cache)})


def test_the_g1_stage_succeeds(g1_stage):
    done, _, scratch = g1_stage
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert list(scratch.glob("tmp.*")) == []


def test_it_brings_back_the_g1_curve_and_checkpoint_and_no_export(g1_stage):
    _, out, _ = g1_stage
    files = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    assert len(files) <= 8 and all(RETURNED.match(part) for path in files for part in path.parts), files
    best = pathlib.Path("pretrained", TASK)
    assert files >= {pathlib.Path("humanoid_learn.jsonl"), best / CHECKPOINT, best / PROVENANCE}
    assert not {best / name for name in EXPORT} & files
    rows = [json.loads(line) for line in (out / "humanoid_learn.jsonl").read_text().splitlines()]
    assert {row["task"] for row in rows if "task" in row} == {TASK}
    assert [row["iteration"] for row in rows if row.get("policy") == "trained"] == [1, 2]


def test_the_g1_checkpoint_is_a_pretrained_policy_of_its_task(g1_stage):
    _, out, _ = g1_stage
    best = out / "pretrained" / TASK
    provenance = json.loads((best / PROVENANCE).read_text())
    assert provenance["task"] == TASK and provenance["commit"] == "0123abc"
    assert set(provenance["play"]) >= {"command", "trained", "zero", "random"}
    state = read_checkpoint(best / CHECKPOINT)
    assert state["infos"]["task"] == TASK and state["iter"] == provenance["iteration"]
