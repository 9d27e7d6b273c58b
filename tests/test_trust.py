"""A checkpoint is plain data: nothing mjfleet reads from one may run code while it is read (docs/distributed.md).

`torch.load(..., weights_only=False)` unpickles arbitrary objects, so a checkpoint copied from elsewhere could run
its author's code on `play --export`. These tests keep that flag out of src/ and feed the readers a checkpoint
whose pickle would write a file if it were ever unpickled.
"""

import pathlib
import re

import pytest
import torch

from mjfleet.errors import UsageError

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
UNSAFE_LOAD = re.compile(r"weights_only\s*=\s*False")


class _WritesAFileWhenUnpickled:
    """What a hostile checkpoint holds: unpickling it calls `exec` with code of the author's choosing."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def _hostile_checkpoint(path: pathlib.Path, marker: pathlib.Path) -> pathlib.Path:
    """A file shaped like an mjfleet checkpoint whose `infos["env_cfg"]` runs code when unpickled."""
    torch.save(
        {"actor_state_dict": {}, "iter": 0, "infos": {"env_cfg": _WritesAFileWhenUnpickled(marker)}}, path
    )
    return path


def test_no_source_file_loads_with_weights_only_false():
    found = [
        f"{path.relative_to(SRC.parent)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if UNSAFE_LOAD.search(line)
    ]
    assert not found, "torch.load(..., weights_only=False) runs a checkpoint's pickle: " + ", ".join(found)


def test_reading_the_trained_env_config_of_a_hostile_checkpoint_runs_nothing_and_is_a_usage_error(tmp_path):
    from mjfleet.deploy.metadata import trained_env_cfg

    marker = tmp_path / "ran"
    checkpoint = _hostile_checkpoint(tmp_path / "model_0.pt", marker)
    with pytest.raises(
        UsageError, match="cannot read checkpoint .*model_0.pt: not a checkpoint that loads safely"
    ):
        trained_env_cfg(str(checkpoint))
    assert not marker.exists()


def test_the_trained_env_config_of_a_real_checkpoint_is_read_as_plain_data(cartpole_run):
    from mjfleet.deploy.metadata import trained_env_cfg

    (checkpoint,) = sorted(cartpole_run.run_dir.glob("model_*.pt"))[-1:]
    env_cfg = trained_env_cfg(str(checkpoint))
    assert env_cfg["episode_length_s"] == 1.0 and "rewards" in env_cfg  # the run's --env.episode-length-s


def test_play_export_of_a_hostile_checkpoint_runs_nothing_and_fails_in_one_line_with_status_2(
    tmp_path, monkeypatch, capsys
):
    from mjfleet.cli.play import main

    marker = tmp_path / "ran"
    checkpoint = _hostile_checkpoint(tmp_path / "model_0.pt", marker)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", "--checkpoint", str(checkpoint), "--export"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1, lines
    assert "not a checkpoint that loads safely" in lines[0]
    assert not marker.exists()
