"""mjfleet's G1 and Go1 recipes against mjlab 1.6.0's, term by term (scripts/mjlab_parity.py): mjlab runs in its own
virtual environment (made with uv on first use, as scripts/vs_mjlab.py makes it) and records 60 steps of 4 robots
under random actions; mjfleet's reward terms, fed the states mjlab's terms read, must give mjlab's values (to 1e-5 +
1e-4 relative), the fall termination must agree, mjfleet's own reading of the base's angular velocity from mjlab's
bodies must give mjlab's (the two differ only in when they read it: docs/tasks.md), and every observation term of
the actor and critic must agree on the states after each step. Beside: the model's contact settings and options,
and the distributions of the command draws and the randomisation events.

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
    # every observation term of both groups, in mjlab's order, on the states after each step
    observed = parity.compare_observations(robot, recording)
    assert list(observed["actor"]) == ["base_lin_vel", "base_ang_vel", "projected_gravity", "joint_pos", "joint_vel",
                                       "actions", "command"]  # fmt: skip
    assert list(observed["critic"])[-4:] == [
        "foot_height",
        "foot_air_time",
        "foot_contact",
        "foot_contact_forces",
    ]
    for group, terms in observed.items():
        for name, diff in terms.items():
            assert diff < 1e-5, (group, name, diff)


@pytest.mark.parametrize("robot", ["go1", "g1"])
def test_contacts_options_commands_and_events_are_drawn_as_mjlabs(robot, robot_cache, tmp_path, monkeypatch):
    """The model's contact settings and physics options, and the distributions of the command draws and the
    randomisation events (4,096 draws a round in mjlab, 40 x 256 in mjfleet): shares, ranges and moments."""
    from mjfleet.environ import cache_dir

    venv = cache_dir() / f"mjlab-{_script().MJLAB_VERSION}"
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))
    parity = _script()
    trajectory = parity.record(
        robot, "trajectory", tmp_path / "t.npz", steps=2, num_envs=1, seed=0, venv=venv
    )
    model = parity.compare_model(robot, trajectory)
    assert model["geoms_compared"] >= 30 and model["geoms"] == []  # condim, priority, friction, solref, ...
    # the line search: 50 iterations, not 20, for MuJoCo C's sake (tasks/locomotion/described.py says why)
    assert model["options"] == [["ls_iterations", 20.0, 50.0]]

    drawn = parity.record(robot, "distributions", tmp_path / "d.json", num_envs=4096, seed=0, venv=venv)
    d = parity.compare_distributions(robot, drawn, num_envs=256, rounds=40)
    for share in ("standing share", "heading share (not standing)", "forward share (not standing)"):
        assert d[share]["mjfleet"] == pytest.approx(d[share]["mjlab"], abs=0.02), share
    # 4 standard errors: 40 x 256 draws each round, but the start-up events (centre of mass, friction) only 256
    for name, mean_tol, std_rel in (
        ("command (vx, vy, wz)", 0.03, 0.08),
        ("push velocity (x, y, z, roll, pitch, yaw)", 0.02, 0.08),
        ("resampling time (s)", 0.1, 0.08),
        ("push interval (s)", 0.05, 0.08),
        ("reset offset (x, y, z over the keyframe)", 0.02, 0.08),
        ("centre-of-mass offset (m)", 0.005, 0.2),
    ):
        theirs, ours = d[name]["mjlab"], d[name]["mjfleet"]
        assert ours["mean"] == pytest.approx(theirs["mean"] if isinstance(theirs["mean"], list) else [theirs["mean"]],
                                             abs=mean_tol), name  # fmt: skip
        their_std = theirs["std"] if isinstance(theirs["std"], list) else [theirs["std"]]
        assert ours["std"] == pytest.approx(their_std, rel=std_rel), name
        their_low = theirs["min"] if isinstance(theirs["min"], list) else [theirs["min"]]
        their_high = theirs["max"] if isinstance(theirs["max"], list) else [theirs["max"]]
        span = [h - lo for lo, h in zip(their_low, their_high, strict=True)]
        assert all(lo - 0.03 * s <= o for o, lo, s in zip(ours["min"], their_low, span, strict=True)), name
        assert all(o <= h + 0.03 * s for o, h, s in zip(ours["max"], their_high, span, strict=True)), name
    friction = d["foot friction (sliding)"]
    assert friction["mjfleet"]["mean"] == pytest.approx(friction["mjlab"]["mean"], abs=0.07)
    assert friction["mjfleet"]["min"] >= friction["mjlab"]["min"] - 1e-6
    assert friction["mjfleet"]["max"] <= friction["mjlab"]["max"] + 1e-6
