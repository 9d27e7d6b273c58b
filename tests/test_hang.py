"""A rank that makes no progress ends the run in bounded time, naming it (fleet/liveness.py); ranks that only
wait for a long legitimate phase of another are not reported. The judgement and the message are pure and fast;
the two runs through the users' `train` (a `kill -STOP` of rank 1, a long evaluation on rank 0) are `slow`."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers import BIN, TWO_CPU_WORKERS, iterations_in, poll
from launch_helpers import within_no_hang_limit

from mjfleet.fleet import liveness
from mjfleet.fleet.failure import HUNG, LOST_PEER, Failure, first_cause
from mjfleet.fleet.liveness import Beat, describe, hung_rank
from mjfleet.runs.checkpoints import checkpoints_in, read_checkpoint

TESTS = pathlib.Path(__file__).resolve().parent
HANG_TIMEOUT_S = 15
HANG_NO_HANG_S = 120
"""The no-hang limit from the `kill -STOP` to the end of `train`: the 15 s hang timeout, a 5 s status round and
the workers' end take about 25 s; without detection rank 0 waits for the process group's timeout (600 s). A hang
guard, generous for slow machines, not a timing."""
START_NO_HANG_S = 240


def working(rank, age, warm=True):
    return Beat(rank, age, f"collecting iteration {rank + 3}", waiting=False, warm=warm)


def waiting(rank, age):
    return Beat(rank, age, "updating iteration 3", waiting=True, warm=True)


# --- the judgement ---------------------------------------------------------------------------------------


def test_no_rank_is_hung_while_every_beat_is_recent():
    assert hung_rank([working(0, 3), working(1, 100)], timeout_s=120, first_timeout_s=600) is None


def test_a_working_rank_whose_beat_is_past_the_timeout_is_hung_while_the_others_wait_for_it():
    assert hung_rank([waiting(0, 130), working(1, 140)], 120, 600) == working(1, 140)


def test_ranks_waiting_for_a_rank_that_still_beats_are_not_hung():
    """Rank 0 evaluates (its ticker beats), rank 1 waits at the next exchange for as long as that takes."""
    evaluating = Beat(0, 4, "evaluating after iteration 10", waiting=False, warm=True)
    assert hung_rank([evaluating, waiting(1, 900)], 120, 600) is None


def test_when_every_rank_waits_past_the_timeout_the_one_that_stopped_first_is_hung():
    """A rank stopped inside an exchange: its peers end up waiting too; it beat last longest ago."""
    assert hung_rank([waiting(0, 125), waiting(1, 180), waiting(2, 130)], 120, 600) == waiting(1, 180)


def test_a_silent_process_is_named_before_peers_that_wait_in_the_same_exchange_beat_for_beat():
    """A rank stopped inside an exchange: its peer entered it a moment later, but its alive mark keeps coming."""
    stopped = Beat(1, 130.000, "updating iteration 11", waiting=True, warm=True, silent_s=130)
    peer = Beat(0, 130.003, "updating iteration 11", waiting=True, warm=True, silent_s=0.5)
    assert hung_rank([peer, stopped], 120, 600) == stopped
    working_peer = Beat(0, 125, "updating iteration 11", waiting=False, warm=True, silent_s=0.5)
    assert hung_rank([working_peer, stopped], 120, 600) == stopped


def test_before_its_first_iteration_ends_a_rank_has_the_longer_allowance():
    compiling = working(1, 300, warm=False)
    assert hung_rank([waiting(0, 300), compiling], 120, 600) is None
    assert hung_rank([waiting(0, 700), working(1, 700, warm=False)], 120, 600) == working(1, 700, warm=False)


def test_a_timeout_of_zero_watches_nothing():
    assert hung_rank([working(1, 10_000)], 0, 600) is None


def test_the_message_names_rank_host_and_what_it_was_last_doing():
    record = Failure(1, "localhost", HUNG, describe(working(1, 121.4)))
    assert record.message(several_hosts=False) == (
        "worker rank 1 on localhost made no progress for 121 s (last: collecting iteration 4); the run was stopped"
    )


def test_a_worker_that_failed_by_itself_is_the_cause_before_a_hung_one_and_a_hung_one_before_a_lost_peer():
    hung = Failure(2, "b", HUNG, "made no progress for 130 s (last: x)")
    lost = Failure(0, "a", LOST_PEER, "RuntimeError: Connection reset by peer")
    failed = Failure(3, "b", "exception", "ValueError: boom")
    assert first_cause([lost, hung]) == hung
    assert first_cause([lost, hung, failed]) == failed


# --- the beat file ---------------------------------------------------------------------------------------


@pytest.fixture
def beat_file(tmp_path):
    """This process beats into a file for the test (as a worker does into its agent's), and stops after it."""
    path = tmp_path / "rank-1"
    liveness.start_file(str(path))
    state = liveness._State
    saved = (state.fd, state.looked, state.what, state.waiting, state.warm)
    state.fd, state.looked = os.open(path, os.O_WRONLY), True
    try:
        yield str(path)
    finally:
        os.close(state.fd)
        state.fd, state.looked, state.what, state.waiting, state.warm = saved


def test_the_agent_reads_a_workers_start_as_its_first_beat(tmp_path):
    path = str(tmp_path / "rank-3")
    liveness.start_file(path)
    beat = liveness.read_beat(path, 3, now=time.time() + 50)
    assert beat is not None and beat.rank == 3 and beat.what == liveness.STARTING and not beat.warm
    assert 49 < beat.age_s < 60


def test_an_exchange_marks_the_rank_waiting_and_a_new_phase_clears_it(beat_file):
    liveness.beat("collecting iteration 7")
    with liveness.waiting():
        inside = liveness.read_beat(beat_file, 1)
    liveness.warmed_up()
    after = liveness.read_beat(beat_file, 1)
    assert inside is not None and inside.waiting and inside.what == "collecting iteration 7"
    assert after is not None and not after.waiting and after.warm


def test_a_long_phase_keeps_beating_and_restores_what_came_before(beat_file, monkeypatch):
    monkeypatch.setattr(liveness, "TICK_S", 0.05)
    liveness.beat("updating iteration 2")
    with liveness.ticking("evaluating after iteration 2"):
        # Ages read against one fixed time: the beat's drops when it is rewritten. Only the ticker writes during
        # the phase, so a younger beat is its tick; waited for, not timed (a busy machine may delay a tick).
        at = time.time() + 1000
        first = liveness.read_beat(beat_file, 1, now=at)
        assert first is not None and first.what == "evaluating after iteration 2"
        later = poll(
            lambda: liveness.read_beat(beat_file, 1, now=at),
            lambda b: b is not None and b.age_s < first.age_s,
            10,
        )
    assert later is not None and later.what == "evaluating after iteration 2"
    assert later.age_s < first.age_s, "no beat during the phase in 10 s"
    assert liveness.read_beat(beat_file, 1).what == "updating iteration 2"


def test_a_half_written_or_missing_beat_reads_as_none(tmp_path):
    (tmp_path / "torn").write_bytes(b"17000")
    assert liveness.read_beat(str(tmp_path / "torn"), 0) is None
    assert liveness.read_beat(str(tmp_path / "missing"), 0) is None


# --- through `train`, 2 CPU workers ------------------------------------------------------------------------


def _run_processes(directory: pathlib.Path) -> list[psutil.Process]:
    """Live processes started in `directory` (every process of a run started there), stopped ones included."""
    found = []
    for proc in psutil.process_iter(["cwd", "status"]):
        if proc.info["cwd"] == str(directory) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _worker_of_rank(directory: pathlib.Path, rank: int) -> psutil.Process:
    """The worker process of global rank `rank`: it holds its beat file open, which its agent names after the rank."""
    for proc in _run_processes(directory):
        try:
            if any(f.path.endswith(f"/rank-{rank}") for f in proc.open_files()):
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no worker process of rank {rank} found")


def _start_train(tmp_path: pathlib.Path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{TESTS}:{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [str(BIN / "train"), "Cartpole-Balance", *TWO_CPU_WORKERS, "--max-iterations", "100000", *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for_iterations(proc: subprocess.Popen, tmp_path: pathlib.Path, count: int) -> pathlib.Path:
    deadline = time.monotonic() + START_NO_HANG_S
    while time.monotonic() < deadline and proc.poll() is None:
        runs = list(tmp_path.glob("logs/*/*/metrics.jsonl"))
        if runs and len(iterations_in(runs[0].parent)) >= count:
            return runs[0].parent
        time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"training did not reach {count} iterations: {proc.communicate()[1][-2000:]}")


def _stop_leftovers(directory: pathlib.Path) -> None:
    for proc in _run_processes(directory):
        try:
            proc.kill()
        except psutil.Error:
            pass


@pytest.mark.slow
def test_a_stopped_worker_ends_the_run_naming_its_rank_and_host_with_the_checkpoint_intact(tmp_path):
    proc = _start_train(tmp_path, "--hang-timeout-s", str(HANG_TIMEOUT_S), "--save-interval", "2")
    try:
        run_dir = _wait_for_iterations(proc, tmp_path, 3)
        stopped = _worker_of_rank(tmp_path, 1)
        stopped.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        with within_no_hang_limit("a stopped rank ending train", HANG_NO_HANG_S):
            _, err = proc.communicate(timeout=HANG_NO_HANG_S + 60)
        print(f"train ended {time.monotonic() - started:.1f} s after SIGSTOP of rank 1")
        assert proc.returncode == 1, err[-3000:]
        lines = [line for line in err.splitlines() if "made no progress" in line]
        assert len(lines) == 1, err[-3000:]
        print(lines[0])
        assert "worker rank 1 on localhost made no progress for" in lines[0] and "(last: " in lines[0]
        newest = checkpoints_in(run_dir)[-1][1]
        assert read_checkpoint(newest)["iter"] >= 2
        assert not psutil.pid_exists(stopped.pid) or stopped.status() == psutil.STATUS_ZOMBIE
        assert _run_processes(tmp_path) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        _stop_leftovers(tmp_path)


@pytest.mark.slow
def test_a_long_evaluation_on_rank_0_is_not_reported_as_a_hang(tmp_path):
    """Rank 0 evaluates for two hang timeouts (tests/slow_eval_task.py) while rank 1 waits for it."""
    eval_s = 2 * HANG_TIMEOUT_S
    slept = tmp_path / "evaluation-slept"
    env = {
        **os.environ,
        "PYTHONPATH": f"{TESTS}:{os.environ.get('PYTHONPATH', '')}",
        "MJFLEET_TASK_MODULES": "slow_eval_task",
        "MJFLEET_TEST_EVAL_SLEEP_S": str(eval_s),
        "MJFLEET_TEST_EVAL_STAMP": str(slept),
    }
    flags = [*TWO_CPU_WORKERS, "--max-iterations", "3", "--eval-interval", "2", "--eval-episodes", "1"]
    flags += ["--hang-timeout-s", str(HANG_TIMEOUT_S)]
    try:
        done = subprocess.run(
            [str(BIN / "train"), "Test-SlowEvaluation", *flags],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=START_NO_HANG_S + eval_s,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "made no progress" not in done.stderr
        (run_dir,) = tmp_path.glob("logs/*/*")
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert "Eval/mean_return" in records[1]
        assert slept.read_text() == str(eval_s)  # the evaluation did take two hang timeouts
    finally:
        _stop_leftovers(tmp_path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-m", "slow", "-q"]))
