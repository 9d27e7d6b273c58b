"""The training job resolved from `train`'s flags: names that become directories are checked before anything runs."""

import pathlib

import pytest
from helpers import assert_one_line_usage_error, run_cli


@pytest.mark.parametrize(
    "flag",
    [
        ["--agent.experiment-name", "../.."],
        ["--agent.experiment-name", "a/b"],
        ["--agent.experiment-name", ""],
        ["--run-name", ".."],
        ["--run-name", "x/../../y"],
    ],
)
def test_a_run_directory_name_outside_logs_is_one_line_and_exit_2(flag, tmp_path, capsys):
    from mjfleet.cli.train import main

    with pytest.raises(SystemExit) as exited:
        main(["Cartpole-Balance", "--gpu-ids", "None", "--logs-root", str(tmp_path), *flag])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("train: error: --") and "one directory" in err[0]
    assert not any(tmp_path.iterdir())  # nothing was created


def test_a_robot_file_mujoco_warp_cannot_simulate_is_one_line_with_no_run_dir(robot_cache, tmp_path):
    """examples/my_go1.py with MuJoCo's PGS solver, which MuJoCo-Warp lacks: the description loads and builds, the
    worker's simulator refuses it; train says so in one line, exit 2, names no run dir and leaves no folder."""
    example = (pathlib.Path(__file__).resolve().parents[1] / "examples" / "my_go1.py").read_text()
    pgs = example.replace(
        '"ls_iterations": 50}', '"ls_iterations": 50, "solver": mujoco.mjtSolver.mjSOL_PGS}'
    )
    assert pgs != example
    (tmp_path / "pgs_go1.py").write_text(pgs)
    result = run_cli("train", "Velocity-Flat", "--robot", "pgs_go1.py", "--gpu-ids", "None", "--num-envs", "2",
                     cwd=tmp_path, env={"MJFLEET_CACHE_DIR": str(robot_cache)}, timeout=600)  # fmt: skip
    assert_one_line_usage_error(result, "MuJoCo-Warp cannot simulate this model: mjSOL_PGS is unsupported")
    assert "run dir" not in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pgs_go1.py"]
