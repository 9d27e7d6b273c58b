"""The run directory: reserved once per run, and the provenance it records."""

import subprocess

from mjfleet.runs import RunDir


def test_runs_started_in_the_same_second_reserve_two_directories(tmp_path):
    """`train` reserves its run directory atomically in the launching process: a second run that computed the
    same name gets `<name>-1`; a run that fails before writing anything leaves no directory behind."""
    name = "2026-01-01_00-00-00_sweep"  # what RunDir.new computes for both in the same second
    first, second = RunDir(tmp_path / "exp" / name), RunDir(tmp_path / "exp" / name)
    a, b = first.reserve(), second.reserve()
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()
    assert b.path.name == a.path.name + "-1"
    b.remove_if_empty()
    assert not b.path.exists()
    a.create()
    a.remove_if_empty()  # params/ is there: kept
    assert a.path.is_dir()


def test_the_git_state_is_the_commit_and_the_diff_of_the_working_tree(tmp_path):
    from mjfleet.runs.provenance import git_state

    assert git_state(tmp_path) is None  # not a repository

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    (tmp_path / "task.py").write_text("GAIN = 1\n")
    git("add", "task.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    state, diff = git_state(tmp_path)
    assert state == {"commit": git("rev-parse", "HEAD").strip(), "dirty": False} and diff == ""
    (tmp_path / "task.py").write_text("GAIN = 2\n")
    state, diff = git_state(tmp_path)
    assert state["dirty"] and "+GAIN = 2" in diff
