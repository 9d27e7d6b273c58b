"""`robots list`, `robots fetch` and `robots show` as a user runs them (the installed console script)."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from helpers import BIN, assert_one_line_usage_error, missing_infrastructure, run_cli, run_in_terminal

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


def offline(tmp_path) -> dict[str, str]:
    """An environment where the fetch cannot reach a package index (and has nothing cached)."""
    return {
        "MJFLEET_CACHE_DIR": str(tmp_path / "cache"),
        "UV_OFFLINE": "1",  # uv: no network, and its cache below is empty
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PIP_NO_INDEX": "1",  # pip, where there is no uv
    }


FAILED_FETCH = ("robots: error: fetching unitree-go1", "could not download mjlab==1.6.0", "robots fetch")


def test_an_unreachable_package_index_is_one_line_and_leaves_nothing(tmp_path):
    result = run_cli("robots", "fetch", "unitree-go1", "--quiet", env=offline(tmp_path))
    assert_one_line_usage_error(result, *FAILED_FETCH)
    assert list((tmp_path / "cache" / "robots").iterdir()) == []


def test_a_failing_fetch_in_a_log_ends_with_its_reason_after_the_progress_lines(tmp_path):
    result = run_cli("robots", "fetch", "unitree-go1", env=offline(tmp_path))
    *progress, last = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert all(needle in last for needle in FAILED_FETCH), last
    assert progress and all(
        line.startswith("unitree-go1: download and unpack mjlab==1.6.0") for line in progress
    )


def test_a_failing_fetch_on_a_terminal_stops_its_bar_and_prints_its_reason(tmp_path):
    code, out = run_in_terminal(
        [str(BIN / "robots"), "fetch", "unitree-go1"], env=offline(tmp_path), timeout=120
    )
    assert code == 2 and "Traceback" not in out
    assert "\x1b[?25h" in out  # the cursor the bar hid is back
    (line,) = [line for line in out.splitlines() if "robots: error:" in line]
    assert all(needle in line for needle in FAILED_FETCH), line


def fetched_files(cache) -> list[str]:
    folder = cache / "robots" / "unitree-go1"
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "SOURCE.json"
    )


def test_fetch_in_a_log_prints_a_line_per_phase_start_and_end_with_megabytes_and_files(tmp_path):
    result = run_cli("robots", "fetch", "unitree-go1", env={"MJFLEET_CACHE_DIR": str(tmp_path)})
    if "could not download" in result.stderr:
        missing_infrastructure(f"the package index cannot be reached: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("unitree-go1: fetched into")  # results on stdout, progress on stderr
    download, copy = (
        "unitree-go1: download and unpack mjlab==1.6.0 (uv): ",
        "unitree-go1: copy the robot's files: ",
    )
    lines = result.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "download and unpack mjlab==1.6.0 (uv)", "download and unpack mjlab==1.6.0 (uv)",
        "copy the robot's files", "copy the robot's files",
    ], result.stderr  # fmt: skip
    assert lines[0].startswith(download + "0 MB,")
    assert (
        float(lines[1].removeprefix(download).split(" MB")[0]) > 1
    )  # mjlab's wheel holds every robot's meshes
    files = len(fetched_files(tmp_path))
    assert lines[2].startswith(f"{copy}0 of {files} files,") and lines[3].startswith(
        f"{copy}{files} of {files} files,"
    )


def test_fetch_on_a_terminal_draws_a_bar_and_quiet_draws_nothing(tmp_path):
    command = [str(BIN / "robots"), "fetch", "unitree-go1"]
    code, out = run_in_terminal(command, env={"MJFLEET_CACHE_DIR": str(tmp_path / "shown")}, timeout=600)
    if "could not download" in out:
        missing_infrastructure(f"the package index cannot be reached: {out.strip()}")
    assert code == 0, out
    assert "━" in out and "\x1b[?25h" in out  # a bar, and the cursor it hid is back
    files = len(fetched_files(tmp_path / "shown"))
    assert f"{files}/{files}" in out and "files" in out and "MB" in out
    quiet = run_cli(
        "robots", "fetch", "unitree-go1", "--quiet", env={"MJFLEET_CACHE_DIR": str(tmp_path / "quiet")}
    )
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert fetched_files(tmp_path / "quiet") == fetched_files(tmp_path / "shown")


SLOW_INSTALLER = """#!/bin/sh
# Stands in for uv where a test needs a download that takes long: writes 3 MB where it was told to, then waits,
# deaf to Ctrl-C (ignored signals stay ignored across exec), so that only `robots fetch` itself can end it.
trap '' INT
echo $$ > "$PID_FILE"
while [ "$1" != "--target" ]; do shift; done
mkdir -p "$2" && head -c 3000000 /dev/zero > "$2/wheel-part"
exec sleep 120
"""


def test_ctrl_c_during_a_download_stops_the_installer_and_leaves_nothing(tmp_path):
    """The installer is the slow part of a fetch: Ctrl-C there ends it too, puts the cursor back, and leaves no
    temporary folder; the exit status is 130. (The installer is a stand-in script: uv from its cache is too quick
    to interrupt reliably.)"""
    import contextlib
    import os
    import signal

    installer = tmp_path / "uv"
    installer.write_text(SLOW_INSTALLER)
    installer.chmod(0o755)
    env = {
        "MJFLEET_CACHE_DIR": str(tmp_path / "cache"),
        "UV": str(installer),
        "PID_FILE": str(tmp_path / "pid"),
    }
    command = [str(BIN / "robots"), "fetch", "unitree-go1"]
    try:
        code, out = run_in_terminal(command, env=env, timeout=120, interrupt_after="3/?")
        assert code == 130 and "robots: interrupted" in out and "Traceback" not in out
        assert "\x1b[?25h" in out  # the cursor the bar hid is back
        assert list((tmp_path / "cache" / "robots").iterdir()) == []  # no temporary folder, no robot
        pid = int((tmp_path / "pid").read_text())
        assert not os.path.exists(f"/proc/{pid}")  # killed and reaped by the fetch
    finally:  # the stand-in outlives a fetch that failed to end it: stop it by its pid (if that is still it)
        with contextlib.suppress(OSError, ValueError):
            pid = int((tmp_path / "pid").read_text())
            if pathlib.Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00120\x00":
                os.kill(pid, signal.SIGKILL)


def test_a_command_is_required():
    assert_one_line_usage_error(run_cli("robots"), "give a command")


def run_main(*args: str, capsys) -> subprocess.CompletedProcess[str]:
    """`robots args` through its `main` in this process (as the console script, without a process's start-up)."""
    from mjfleet.cli.robots import main

    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code or 0
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["robots", *args], code, out, err)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["fly"], ["unknown command 'fly'", "list, fetch or show"]),
        (["fetch"], ["Missing from robots fetch: NAME", "robots --help"]),
        (["fetch", "unitree-go1", "--forse"], ["--forse", "robots --help"]),
        (["list", "extra"], ["Unrecognized options: extra"]),
    ],
)
def test_bad_input_is_one_line_naming_what_is_wrong(args, needles, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(tmp_path))
    result = run_main(*args, capsys=capsys)
    assert_one_line_usage_error(result, *needles)
    assert "╭" not in result.stderr and result.stdout == ""


def test_showing_a_missing_description_file_names_the_argument_given_not_a_flag(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    result = run_main("show", "nope.py", capsys=capsys)
    assert_one_line_usage_error(result, "robots: error: show: no file nope.py", "defines a RobotDescription")
    assert "--robot" not in result.stderr


def test_help_lists_the_subcommands_and_each_has_its_own(capsys):
    top = run_main("--help", capsys=capsys)
    assert top.returncode == 0 and top.stdout.startswith("usage: robots [-h] {list,fetch,show}")
    fetch = run_main("fetch", "--help", capsys=capsys)
    assert fetch.returncode == 0 and fetch.stdout.startswith("usage: robots fetch [-h] NAME")
    assert "--quiet" in fetch.stdout and "--force" in fetch.stdout
