"""mjfleet's G1 and Go1 recipes against mjlab 1.6.0's, term by term (scripts/mjlab_parity.py): mjlab runs in its own
virtual environment (made with uv on first use, as scripts/vs_mjlab.py makes it) and records 60 steps of 4 robots
under random actions; mjfleet's terms, fed the states mjlab's terms read, must give mjlab's values (to 1e-5 + 1e-4
relative), the fall termination must agree, and mjfleet's own reading of the base's angular velocity from mjlab's
bodies must give mjlab's (the two differ only in when they read it: docs/tasks.md).

Slow (mjlab's install, the first time, and its kernel compile take minutes): CI's second step runs it (.ci/run).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

pytestmark = pytest.mark.slow
SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "mjlab_parity.py"


def _script():
    spec = importlib.util.spec_from_file_location("mjlab_parity", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mjlab_parity"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("robot", ["go1", "g1"])
def test_every_reward_term_agrees_with_mjlab_on_mjlabs_recorded_states(
    robot, robot_cache, tmp_path, monkeypatch
):
    from mjfleet.environ import cache_dir

    venv = cache_dir() / f"mjlab-{_script().MJLAB_VERSION}"  # the user's, as scripts/vs_mjlab.py uses it
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))  # the session's fetched robots
    parity = _script()
    recording = parity.record(
        robot, "trajectory", tmp_path / f"{robot}.npz", steps=60, num_envs=4, seed=0, venv=venv
    )
    report = parity.compare(robot, recording)
    terms = report["terms"]
    disagree = {name: t for name, t in terms.items() if not t.get("agree")}
    assert not disagree, disagree
    assert len(terms) == (14 if robot == "g1" else 13)  # every entry of mjlab's flat recipe
    # the terms that depend on contacts and commands were exercised, not only zeros
    for name in ("foot_clearance", "foot_slip", "soft_landing", "foot_swing_height", "pose", "upright"):
        assert terms[name]["nonzero_samples"] > 0, name
    inputs = report["inputs"]
    assert inputs["fell_over"] == 0.0
    assert inputs["base_ang_vel_one_substep_behind"] < 1e-5
