"""`play` shows the episodes done of N with their mean return: a bar on a terminal, plain lines in a log, nothing
with --quiet; Ctrl-C during the bar leaves the terminal usable."""

from __future__ import annotations

import re

from helpers import BIN, run_cli, run_in_terminal

# Random actions on Cartpole: no checkpoint needed; the pole falls within a second, so episodes end quickly.
PLAY = ["Cartpole-Balance", "--agent", "random", "--gpu-ids", "None", "--num-envs", "4"]


def test_a_terminal_gets_a_redrawn_bar_of_episodes_with_the_mean_return(tmp_path):
    code, out = run_in_terminal(
        [str(BIN / "play"), *PLAY, "--episodes", "40", "--output", str(tmp_path / "eval.json")], timeout=300
    )
    assert code == 0, out[-2000:]
    assert "\r" in out and "\x1b[" in out  # redrawn in place
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)  # the bar's colours and cursor moves
    assert re.search(r"play .*40/40 episodes.*mean return \d", plain), plain[-2000:]
    assert out.rfind("\x1b[?25h") > out.rfind("\x1b[?25l") != -1  # the cursor shown again
    assert "eval written to" in out


def test_a_log_gets_plain_lines_without_escape_codes(tmp_path):
    result = run_cli("play", *PLAY, "--episodes", "8", "--output", str(tmp_path / "eval.json"), check=True)
    lines = result.stderr.splitlines()
    assert lines[0] == "play: 0 of 8 episodes, 0 s"
    assert re.fullmatch(r"play: 8 of 8 episodes, mean return -?\d+\.\d\d, \d+ s", lines[-1]), result.stderr
    for output in (result.stdout, result.stderr):
        assert "\r" not in output and "\x1b" not in output


def test_quiet_shows_no_progress_but_the_report(tmp_path):
    result = run_cli(
        "play", *PLAY, "--episodes", "8", "--quiet", "--output", str(tmp_path / "eval.json"), check=True
    )
    assert "episodes," not in result.stderr and "mean return" in result.stdout


def test_ctrl_c_during_the_bar_is_one_line_and_leaves_the_terminal_usable(tmp_path):
    # Far more episodes than the test waits for: it is interrupted once the bar shows a mean return.
    code, out = run_in_terminal(
        [str(BIN / "play"), *PLAY, "--episodes", "1000000", "--output", str(tmp_path / "eval.json")],
        interrupt_after="mean return",
        timeout=300,
    )
    assert code == 130 and "play: interrupted" in out and "Traceback" not in out, out[-2000:]
    assert out.rfind("\x1b[?25h") > out.rfind("\x1b[?25l") != -1  # the cursor shown again
    assert not (tmp_path / "eval.json").exists()
