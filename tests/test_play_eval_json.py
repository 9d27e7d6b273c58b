"""What eval.json keeps: an earlier --baselines table that still holds, and the env settings play applied."""

from __future__ import annotations

import json

import numpy as np
from helpers import copy_workdir, run_cli

from mjfleet.robots import ROBOTS, build_robot

PLAY = ["Cartpole-Balance", "--gpu-ids", "None", "--num-envs", "2", "--episodes", "4", "--quiet"]


def play(*args: str, capsys) -> tuple[str, dict]:
    from mjfleet.cli.play import main

    main([*PLAY, *args])
    return capsys.readouterr().out, json.loads(open("eval.json").read())


def test_export_after_baselines_keeps_the_table_while_it_still_holds(
    cartpole_run, tmp_path, monkeypatch, capsys
):
    cwd = copy_workdir(cartpole_run.cwd, tmp_path)
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MUJOCO_GL", "egl")  # no backend probe in-process; no video is made
    _, first = play("--baselines", "--output", "eval.json", capsys=capsys)
    assert set(first["baselines"]) == {"zero", "random"}

    out, exported = play("--export", "--output", "eval.json", capsys=capsys)
    assert exported["exported"] and exported["baselines"] == first["baselines"]
    assert "baselines: kept from the earlier evaluation" in out and "zero " in out  # the table is printed too

    out, reseeded = play("--export", "--seed", "7", "--output", "eval.json", capsys=capsys)
    assert reseeded["baselines"] is None and "kept" not in out  # other draws: the old table no longer holds


def test_eval_json_records_the_go1s_per_joint_action_scales_and_servo_scaling(robot_cache, tmp_path):
    """Go1-Velocity-Flat scales each joint's action by 0.25 x its servo's effort limit / kp (its description gives
    no action_scale): eval.json says so, not the config class's 0.25 and false."""
    run_cli("play", "Go1-Velocity-Flat", "--agent", "zero", "--gpu-ids", "None", "--num-envs", "1", "--episodes",
            "1", "--env.episode-length-s", "0.1", "--quiet", "--output", "eval.json", cwd=tmp_path,
            env={"MJFLEET_CACHE_DIR": str(robot_cache)}, check=True, timeout=600)  # fmt: skip
    env_cfg = json.loads((tmp_path / "eval.json").read_text())["env_cfg"]
    go1 = build_robot(ROBOTS["unitree-go1"].description)
    np.testing.assert_allclose(env_cfg["action_scale"], go1.action_scale, rtol=1e-6)
    assert sorted({round(s, 3) for s in env_cfg["action_scale"]}) == [0.249, 0.373]
    assert env_cfg["scale_actions_by_servo"] is True
