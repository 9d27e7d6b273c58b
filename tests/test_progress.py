"""The progress helper: a bar on a terminal that gives the terminal back even on Ctrl-C, and sparse plain lines
in a log."""

from __future__ import annotations

import io
import sys

import pytest
from helpers import run_in_terminal

from mjfleet.progress import Progress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_line_at_the_start_at_most_one_per_interval_and_one_at_the_end():
    clock, log = Clock(), io.StringIO()
    with Progress("bench", total=10, unit="sizes", stream=log, every=30, clock=clock) as bar:
        for i in range(10):
            clock.now += 7  # 70 s of work in 10 steps: a line at 0 s, one after >= 30 s, then the end's
            bar.update(advance=1, status=f"size {i}")
    lines = log.getvalue().splitlines()
    assert lines[0] == "bench: 0 of 10 sizes, 0 s"
    assert lines[1].startswith("bench: 5 of 10 sizes, size 4, 35 s, ETA 35 s")
    assert lines[2].startswith("bench: 10 of 10 sizes, size 9, 70 s")
    assert len(lines) == 3, "the end's line is not printed again when the last update printed it"
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()


def test_a_callers_eta_wins_over_the_rate_and_quiet_prints_only_kept_lines():
    clock, log = Clock(), io.StringIO()
    with Progress("sweep", total=4, unit="trials", stream=log, every=0, clock=clock) as bar:
        clock.now += 10
        bar.update(advance=1, eta=600)
    assert log.getvalue().splitlines()[1] == "sweep: 1 of 4 trials, 10 s, ETA 10 min"
    quiet = io.StringIO()
    with Progress("sweep", total=4, stream=quiet, quiet=True) as bar:
        bar.update(advance=4, status="done")
        bar.log("trial 3: complete")
    assert quiet.getvalue() == "trial 3: complete\n"


def test_leaving_by_an_exception_lets_it_through_and_a_log_says_how_far_it_got():
    log = io.StringIO()
    with (
        pytest.raises(RuntimeError, match="trial failed"),
        Progress("play", total=3, stream=log, every=60) as bar,
    ):
        bar.update(advance=1)
        raise RuntimeError("trial failed")
    assert log.getvalue().splitlines()[-1].startswith("play: 1 of 3")


@pytest.mark.parametrize("seconds, text", [(4, "4 s"), (89, "89 s"), (600, "10 min"), (7500, "2 h 05 min")])
def test_durations_read_in_the_unit_a_person_uses(seconds, text):
    assert duration(seconds) == text


SCRIPT = """
import time
from mjfleet.progress import Progress
with Progress("play", total=100, unit="episodes") as bar:
    bar.log("started")
    for i in range(100):
        bar.update(advance=1, status=f"return {i}")
        time.sleep(0.1)
"""


def test_a_terminal_gets_a_redrawn_bar_and_its_cursor_back_after_ctrl_c():
    code, out = run_in_terminal([sys.executable, "-c", SCRIPT], interrupt_after="return 3", timeout=60)
    assert code != 0 and "KeyboardInterrupt" in out
    assert "\r" in out and "episodes" in out and "/100" in out  # redrawn in place, with its count
    hidden, shown = out.rfind("\x1b[?25l"), out.rfind("\x1b[?25h")
    assert hidden != -1 and shown > hidden, "the bar hid the cursor and did not show it again"
    assert out.index("started") < out.index("KeyboardInterrupt")


def test_work_done_before_the_start_counts_but_does_not_speed_up_the_eta():
    clock, log = Clock(), io.StringIO()
    with Progress("sweep", total=10, unit="trials", done=5, stream=log, every=0, clock=clock) as bar:
        clock.now += 60
        bar.update(advance=1)  # 1 trial in 60 s here, 4 left: 4 min, not the 5 already done's rate
    assert log.getvalue().splitlines()[1] == "sweep: 6 of 10 trials, 60 s, ETA 4 min"
