"""`robots list`, `robots fetch` and `robots show` as a user runs them (the installed console script)."""

from __future__ import annotations

import json

from helpers import assert_one_line_usage_error, missing_infrastructure, run_cli

from mjfleet.environ import cache_dir
from mjfleet.robots import ROBOTS


def test_the_cache_is_mjfleet_cache_dir_else_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("MJFLEET_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "mjfleet"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "mjfleet"


def test_list_shows_every_robot_fetched_or_not_with_its_folder(robot_cache, tmp_path):
    fetched = run_cli("robots", "list", env={"MJFLEET_CACHE_DIR": str(robot_cache)}, check=True)
    empty = run_cli("robots", "list", env={"MJFLEET_CACHE_DIR": str(tmp_path)}, check=True)
    for name in ROBOTS:
        (line,) = [line for line in fetched.stdout.splitlines() if line.startswith(name + " ")]
        assert " fetched " in line and line.endswith(str(robot_cache / "robots" / name))
        (line,) = [line for line in empty.stdout.splitlines() if line.startswith(name + " ")]
        assert " not fetched " in line and line.endswith(str(tmp_path / "robots" / name))


def test_fetch_copies_only_the_robots_files_and_says_where_from(robot_cache):
    for name, robot in ROBOTS.items():
        folder = robot_cache / "robots" / name
        files = [p.relative_to(folder) for p in folder.rglob("*") if p.is_file()]
        assert (folder / robot.description.mjcf).is_file()
        assert any(p.suffix.lower() == ".stl" for p in files)
        assert not [p for p in files if p.suffix in (".py", ".pyc")]  # mjlab's code stays behind
        source = json.loads((folder / "SOURCE.json").read_text())
        assert (source["package"], source["version"]) == ("mjlab", "1.6.0")
    assert sorted(p.name for p in (robot_cache / "robots").iterdir()) == sorted(ROBOTS)  # no temporary left


def test_fetching_again_keeps_what_is_there(robot_cache):
    result = run_cli(
        "robots", "fetch", "unitree-go1", env={"MJFLEET_CACHE_DIR": str(robot_cache)}, check=True
    )
    assert result.stdout.startswith("unitree-go1: already fetched into")


def test_a_folder_without_its_source_record_is_not_fetched_and_fetch_replaces_it(tmp_path):
    leftover = tmp_path / "robots" / "unitree-go1"
    leftover.mkdir(parents=True)
    (leftover / "go1.xml").write_text("<mujoco/>")
    env = {"MJFLEET_CACHE_DIR": str(tmp_path)}
    listed = run_cli("robots", "list", env=env, check=True)
    assert any(
        line.startswith("unitree-go1") and " not fetched " in line for line in listed.stdout.splitlines()
    )
    result = run_cli("robots", "fetch", "unitree-go1", env=env)
    if "could not download" in result.stderr:
        missing_infrastructure(f"the package index cannot be reached: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert (leftover / "SOURCE.json").is_file() and (leftover / "assets").is_dir()
    assert "<mujoco/>" not in (leftover / "go1.xml").read_text()
    assert [p.name for p in (tmp_path / "robots").iterdir()] == ["unitree-go1"]


def test_show_builds_a_fetched_robot_and_prints_each_joint(robot_cache):
    result = run_cli("robots", "show", "unitree-go1", env={"MJFLEET_CACHE_DIR": str(robot_cache)}, check=True)
    assert "12 actuators" in result.stdout
    (row,) = [line.split() for line in result.stdout.splitlines() if line.strip().startswith("FR_calf_joint")]
    assert row[4] == "35.55" and row[6] == "-1.800"  # effort limit, home position


def test_an_unknown_robot_lists_the_known_ones(tmp_path):
    result = run_cli("robots", "fetch", "unitree-h1", env={"MJFLEET_CACHE_DIR": str(tmp_path)})
    assert_one_line_usage_error(result, "unknown robot 'unitree-h1'", "unitree-g1, unitree-go1")
    assert not (tmp_path / "robots").exists()


def test_showing_a_robot_not_fetched_says_how_to_fetch_it(tmp_path):
    result = run_cli("robots", "show", "unitree-g1", env={"MJFLEET_CACHE_DIR": str(tmp_path)})
    assert_one_line_usage_error(result, "not fetched yet", "`uv run robots fetch unitree-g1`")


def test_an_unreachable_package_index_is_one_line_and_leaves_nothing(tmp_path):
    offline = {
        "MJFLEET_CACHE_DIR": str(tmp_path / "cache"),
        "UV_OFFLINE": "1",  # uv: no network, and its cache below is empty
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PIP_NO_INDEX": "1",  # pip, where there is no uv
    }
    result = run_cli("robots", "fetch", "unitree-go1", env=offline)
    assert_one_line_usage_error(
        result, "fetching unitree-go1", "could not download mjlab==1.6.0", "robots fetch"
    )
    assert list((tmp_path / "cache" / "robots").iterdir()) == []


def test_a_command_is_required():
    assert_one_line_usage_error(run_cli("robots"), "give a command")
