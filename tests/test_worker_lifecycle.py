"""A 2-worker `train` as one tree of processes, from the outside: under torchrun, with plug-in task modules, with
a failing rank, and stopped by SIGTERM and by Ctrl-C. Every test starts real workers through the users' command
(30-45 s each on 2 cores), so the module is `slow`: .ci/run runs it in its second step, and the default suite
keeps one 2-worker `train` (test_distributed.py) and the launcher's own fail-fast and signal tests
(test_launch_workers.py)."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import BIN, SMALL_CARTPOLE, TWO_CPU_WORKERS, iterations_in, run_cli
from test_resume import interrupt, resume_hint, start_train, wait_for_iterations

from mjfleet.launch.devices import make_plan, parse_gpu_ids
from mjfleet.launch.launcher import run_workers
from mjfleet.runs.checkpoints import checkpoints_in, read_checkpoint

pytestmark = pytest.mark.slow

TESTS = pathlib.Path(__file__).resolve().parent
START_NO_HANG_S = 300
"""The no-hang limit for a 2-worker `train` to start and end (each takes 30-45 s on 2 cores)."""
FAIL_FAST_NO_HANG_S = 120
"""The no-hang limit from a rank's failure to the end of `train`: seconds with fail-fast; without it rank 0 would
wait for gloo's 600 s process-group timeout. Hang guards, generous for slow machines, not timings."""


@pytest.fixture
def plan(monkeypatch):
    # Workers import their function's module by name: put tests/ on their path.
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}:{':'.join(sys.path)}")
    return make_plan(parse_gpu_ids(["None"]), cpu_workers=2)


def _processes_in(directory: pathlib.Path) -> list[int]:
    """PIDs of live processes whose working directory is `directory` (every process of a run started there)."""
    pids = []
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if pathlib.Path(os.readlink(proc / "cwd")) == directory:
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def _wait_gone(directory: pathlib.Path, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _processes_in(directory)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _stop_leftovers(directory: pathlib.Path) -> None:
    """For a test's `finally`: kill what a run started in `directory` that still runs."""
    for pid in _processes_in(directory):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_train_under_torchrun_joins_its_process_group_and_writes_one_run_directory(tmp_path):
    small = [a for a in TWO_CPU_WORKERS if a not in ("--cpu-workers", "2")]
    result = run_cli(
        "torchrun", "--standalone", "--nproc-per-node", "2", str(BIN / "train"), "Cartpole-Balance",
        *small, "--max-iterations", "2", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "logs" / "cartpole_balance").iterdir()
    assert "2 workers x 16 envs = 32 envs" in result.stdout
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]  # one writer
    assert records[-1]["env_steps"] == 2 * 8 * 16 * 2  # both workers' steps


def test_workers_import_the_task_modules_their_job_names_without_the_variable(plan, monkeypatch, tmp_path):
    """MJFLEET_TASK_MODULES is the user's input to the launching command; the job carries the modules, so workers
    started without the variable still find the task."""
    from mjfleet.cli.train import parse_args, resolve
    from mjfleet.tasks.plugins import load_environment_modules
    from mjfleet.train.job import reserve_run_dir
    from mjfleet.train.worker import train_worker

    monkeypatch.setenv("MJFLEET_TASK_MODULES", "plugin_task")
    monkeypatch.syspath_prepend(str(TESTS))
    load_environment_modules()  # what importing mjfleet.tasks does in a fresh `train`
    argv = ["Test-PluginCartpole", *TWO_CPU_WORKERS, "--max-iterations", "1", "--logs-root", str(tmp_path)]
    job = reserve_run_dir(resolve(*parse_args(argv)))
    assert job.task_modules == ("plugin_task",)
    monkeypatch.delenv("MJFLEET_TASK_MODULES")
    summary = run_workers(job.plan, train_worker, job, log_dir="")
    assert summary["iterations"] == 1 and job.run_dir.latest_checkpoint() is not None


def test_a_failing_worker_ends_train_quickly_with_that_ranks_traceback(tmp_path):
    stamp = tmp_path / "failed_at"
    env = {
        **os.environ,
        "MJFLEET_TASK_MODULES": "failing_task",
        "PYTHONPATH": f"{TESTS}:{':'.join(sys.path)}",
        "MJFLEET_TEST_FAILURE_STAMP": str(stamp),
    }
    # Rank 0 waits in a collective that rank 1 never joins: without fail-fast it would hang until the 600 s
    # process-group timeout.
    try:
        result = run_cli(
            *("train", "Test-FailOnRank1", *TWO_CPU_WORKERS, "--max-iterations", "50"),
            cwd=tmp_path,
            env=env,
            timeout=START_NO_HANG_S,
        )
        ended_at = time.time()
        assert result.returncode == 1
        assert "[rank 1]" in result.stderr and "deliberate failure on rank 1" in result.stderr
        assert "Traceback" in result.stderr  # the failing rank's traceback is shown
        assert stamp.exists()  # rank 1 really failed (the test task stamps the moment)
        took = ended_at - float(stamp.read_text())
        assert took < FAIL_FAST_NO_HANG_S, (
            f"train ended {took:.0f} s after rank 1 failed: past the no-hang limit"
        )
        assert _wait_gone(tmp_path, 5) == []
    finally:
        _stop_leftovers(tmp_path)


def test_sigterm_to_train_stops_cleanly_with_a_checkpoint_and_leaves_no_process_behind(tmp_path):
    """A cluster's pre-emption: SIGTERM to train with 2 workers ends the iteration, saves, says how to resume,
    exits with 128 + SIGTERM, and no worker process outlives it."""
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [str(BIN / "train"), "Cartpole-Balance", *TWO_CPU_WORKERS, "--max-iterations", "100000"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 180
        while not list(tmp_path.glob("logs/*/*/metrics.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert list(tmp_path.glob("logs/*/*/metrics.jsonl")), "training never started"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        text = stderr.read_text()
        assert proc.returncode == 128 + signal.SIGTERM, text[-2000:]
        assert "stopped by SIGTERM" in text and "resume with:" in text
        (run_dir,) = tmp_path.glob("logs/*/*")
        assert list(run_dir.glob("model_*.pt"))  # the final save
        assert _wait_gone(tmp_path, 10) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        _stop_leftovers(tmp_path)


@pytest.mark.skipif(not pathlib.Path("/proc/self").is_dir(), reason="process checks read /proc")
def test_sigint_with_two_cpu_workers_stops_both_at_the_same_iteration_and_saves(tmp_path):
    flags = ["--gpu-ids", "None", "--cpu-workers", "2", *SMALL_CARTPOLE, "--max-iterations", "1000"]
    flags += ["--save-interval", "3", "--keep-last", "1", "--keep-every", "0"]
    proc = start_train(tmp_path, *flags)
    run_dir = wait_for_iterations(proc, tmp_path, 4)
    out, err = interrupt(proc, echo=True)

    assert proc.returncode == 128 + signal.SIGINT, err
    last = iterations_in(run_dir)[-1] + 1
    assert [it for it, _ in checkpoints_in(run_dir)] == [last]
    state = read_checkpoint(run_dir / f"model_{last}.pt")
    # Both ranks took part in the final save (it gathers every rank's RNG state): they stopped together.
    assert state["iter"] == last and len(state["rng_states"]) == 2
    assert not torch.equal(state["rng_states"][0]["torch"], state["rng_states"][1]["torch"])
    assert "--load-run" in resume_hint(err) and "--cpu-workers" in resume_hint(err)
    assert "Traceback" not in err
