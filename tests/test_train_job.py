"""The training job resolved from `train`'s flags: names that become directories are checked before anything runs."""

import pytest


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
