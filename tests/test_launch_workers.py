"""Specification of running a function on workers: in this process, or in real worker processes.

The multi-process tests start real torchrunx agents and gloo workers on this machine (about 12 s each on
2 cores); the worker functions live in tests/launch_helpers.py because workers import them by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import launch_helpers
import pytest
from helpers import assert_session_ends, poll

from mjfleet.errors import UsageError
from mjfleet.fleet.context import WorkerContext, egl_device_id, seed_for
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.launch.devices import make_plan, parse_gpu_ids
from mjfleet.launch.launcher import WorkerFailed, run_workers, worker_env, worker_log_dir

HELPERS_DIR = Path(launch_helpers.__file__).resolve().parent


@pytest.fixture
def workers_can_import_helpers(monkeypatch):
    """Workers get PYTHONPATH from this process (torchrunx copies PYTHON*): put the helpers on it."""
    paths = [str(HELPERS_DIR), str(HELPERS_DIR.parent), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.delenv("TORCHRUNX_LOG_DIR", raising=False)


def two_cpu_workers() -> WorkerPlan:
    return make_plan(parse_gpu_ids(["None"]), cpu_workers=2)


# --- the worker's view ----------------------------------------------------------------------------------


def test_context_reads_rank_local_rank_and_world_size_from_the_environment():
    plan = WorkerPlan(devices=("cpu", "cpu"), hosts=("a", "b"), backend="gloo")
    ctx = WorkerContext.from_env(plan, {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.device, ctx.backend) == (3, 1, 4, "cpu", "gloo")
    assert not ctx.is_main


def test_context_defaults_to_a_single_main_worker():
    ctx = WorkerContext.from_env(WorkerPlan(devices=("cpu",)), {})
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.is_main) == (0, 0, 1, True)


def test_gpu_worker_uses_the_gpu_of_its_local_rank():
    plan = WorkerPlan(devices=("cuda:0", "cuda:1"), backend="nccl", cuda_visible_devices="3,5")
    ctx = WorkerContext.from_env(plan, {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert ctx.device == "cuda:1"


def test_seed_is_base_seed_plus_global_rank():
    ctx = WorkerContext(rank=5, local_rank=1, world_size=8, device="cpu", backend="gloo")
    assert seed_for(42, ctx) == 47


def test_cpu_workers_see_no_gpu_and_get_their_thread_share():
    plan = WorkerPlan(devices=("cpu", "cpu"), backend="gloo", threads_per_worker=3)
    assert worker_env(plan) == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "3"}


def test_gpu_workers_see_their_selected_gpus_and_split_the_cores():
    plan = WorkerPlan(
        devices=("cuda:0", "cuda:1"), backend="nccl", cuda_visible_devices="3,5", threads_per_worker=8
    )
    assert worker_env(plan) == {"CUDA_VISIBLE_DEVICES": "3,5", "OMP_NUM_THREADS": "8"}


# --- log directory --------------------------------------------------------------------------------------


def test_the_log_dir_variable_wins_over_the_flag_which_wins_over_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHRUNX_LOG_DIR", str(tmp_path / "env"))
    assert worker_log_dir(tmp_path / "flag", tmp_path / "default") == tmp_path / "env"
    assert worker_log_dir("", tmp_path / "default") == tmp_path / "env"
    assert worker_log_dir(None, tmp_path / "default") == tmp_path / "env"
    monkeypatch.delenv("TORCHRUNX_LOG_DIR")
    assert worker_log_dir(tmp_path / "flag", tmp_path / "default") == tmp_path / "flag"
    assert worker_log_dir("", tmp_path / "default") is None  # --torchrunx-log-dir "": no files


def test_empty_torchrunx_log_dir_variable_disables_the_default_log_files(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHRUNX_LOG_DIR", "")
    assert worker_log_dir(None, tmp_path / "default") is None


def test_the_default_log_dir_is_used_without_flag_and_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHRUNX_LOG_DIR", raising=False)
    assert worker_log_dir(None, tmp_path) == tmp_path
    assert worker_log_dir(None, None) is None
    assert worker_log_dir("", tmp_path) is None


# --- one worker: this process ---------------------------------------------------------------------------


def test_single_worker_runs_in_this_process_as_rank_0(monkeypatch):
    monkeypatch.setenv("RANK", "7")  # left over from some outer launcher: must not leak into the run
    plan = make_plan(parse_gpu_ids(["None"]))
    result = run_workers(plan, launch_helpers.report, plan, 10)
    assert result["pid"] == os.getpid()
    assert (result["rank"], result["world_size"], result["seed"], result["device"]) == (0, 1, 10, "cpu")
    assert os.environ["RANK"] == "7"


def test_single_worker_exceptions_propagate_unchanged():
    plan = make_plan(parse_gpu_ids(["None"]))

    def broken():
        raise KeyError("in-process")

    with pytest.raises(KeyError, match="in-process"):
        run_workers(plan, broken)


# --- several workers: real processes --------------------------------------------------------------------


def test_two_cpu_workers_all_reduce_over_gloo_and_return_rank_0s_result(workers_can_import_helpers):
    plan = two_cpu_workers()
    result = run_workers(plan, launch_helpers.report, plan, 100)
    assert result["rank"] == 0 and result["world_size"] == 2
    assert result["all_ranks"] == [0, 1]
    assert result["sum"] == 3.0  # (0 + 1) + (1 + 1): both ranks took part
    assert result["seed"] == 100
    assert result["backend"] == "gloo" and result["device"] == "cpu"
    assert result["pid"] != os.getpid()
    assert result["cuda_visible_devices"] == ""
    assert result["threads"] == plan.threads_per_worker


def test_failing_worker_fails_the_run_fast_and_names_its_rank(workers_can_import_helpers, tmp_path):
    plan = two_cpu_workers()
    # Without fail-fast, rank 0 would wait in its all_reduce until the 600 s process-group timeout.
    with (
        launch_helpers.within_no_hang_limit("a failing worker ending the run"),
        pytest.raises(WorkerFailed) as err,
    ):
        run_workers(plan, launch_helpers.fail_on_rank, plan, 1, log_dir=tmp_path)
    assert err.value.rank == 1
    assert "rank 1" in str(err.value) and "ValueError: boom on purpose in rank 1" in str(err.value)
    assert "\n" not in str(err.value)
    (log,) = tmp_path.glob("*/localhost[[]1].log")
    assert str(err.value).endswith(f"(its log: {log})") and "boom on purpose" in log.read_text()


def test_a_worker_killed_by_a_signal_fails_the_run_fast_naming_its_rank_and_the_signal(
    workers_can_import_helpers,
):
    plan = two_cpu_workers()
    with (
        launch_helpers.within_no_hang_limit("a killed worker ending the run"),
        pytest.raises(WorkerFailed) as err,
    ):
        run_workers(plan, launch_helpers.killed_on_rank, plan, 1, log_dir="")
    assert err.value.rank == 1
    assert str(err.value).startswith("worker rank 1 failed: killed by SIGKILL"), str(err.value)


def test_a_usage_error_in_the_workers_is_one_usage_error_line_as_with_one_worker(
    workers_can_import_helpers, capfd
):
    plan = two_cpu_workers()
    with (
        launch_helpers.within_no_hang_limit("a usage error ending the run"),
        pytest.raises(UsageError) as err,
    ):
        run_workers(plan, launch_helpers.usage_error_on_every_rank, plan, log_dir="")
    assert str(err.value).startswith("checkpoint x.pt does not fit this task's policy (rank ")
    _, stderr = capfd.readouterr()
    assert "Traceback" not in stderr


def test_console_shows_rank_0_output_and_other_ranks_warnings_and_logs_go_to_files(
    workers_can_import_helpers, capfd, tmp_path
):
    plan = two_cpu_workers()
    assert run_workers(plan, launch_helpers.warn_and_print, plan, log_dir=tmp_path) == 0
    out = err = ""
    deadline = time.monotonic() + 30  # the log server forwards from its own process: wait for its lines
    while "[rank 1] stderr line from rank 1" not in err and time.monotonic() < deadline:
        captured = capfd.readouterr()
        out, err = out + captured.out, err + captured.err
        time.sleep(0.05)
    assert "stdout line from rank 0" in out
    assert "stderr line from rank 0" in err
    assert "[rank 1] stderr line from rank 1" in err
    assert "stdout line from rank 1" not in out + err
    files = {p.name: p.read_text() for p in tmp_path.glob("*/*.log")}
    assert "stdout line from rank 1" in files["localhost[1].log"]
    assert "stdout line from rank 0" in files["localhost[0].log"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="process checks read /proc")
def test_sigterm_to_the_launcher_ends_every_process_it_started(tmp_path):
    """The launcher runs in its own session so that afterwards the whole session can be checked."""
    script = textwrap.dedent(
        f"""
        import sys
        import launch_helpers
        from mjfleet.launch.devices import make_plan, parse_gpu_ids
        from mjfleet.launch.launcher import Interrupted, run_workers

        plan = make_plan(parse_gpu_ids(["None"]), cpu_workers=2)
        try:
            run_workers(plan, launch_helpers.wait_forever, plan, {str(tmp_path)!r}, grace_s=10)
        except Interrupted as exc:
            sys.exit(exc.exit_code)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HELPERS_DIR), str(HELPERS_DIR.parent)]))
    env.pop("TORCHRUNX_LOG_DIR", None)
    launcher = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 50
        while len(list(tmp_path.glob("rank*.pid"))) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, "workers did not start"
            time.sleep(0.2)
        worker_pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
        assert_session_ends(launcher.pid)
        alive = poll(lambda: [pid for pid in worker_pids if _is_alive(pid)], lambda pids: not pids)
        assert not alive, f"workers {alive} outlived the launcher by 30 s"
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)


def test_the_process_tree_keeps_a_reparented_grandchild_and_skips_processes_started_before_it():
    from mjfleet.launch.relay import ProcessTree

    older = subprocess.Popen(["sleep", "60"])
    tree = ProcessTree()
    # The parent stays until told to go (its stdin closes), so that the tree sees the grandchild as a descendant
    # first; then it exits and the grandchild is re-parented away from this process.
    code = (
        "import subprocess, sys; print(subprocess.Popen(['sleep', '60']).pid, flush=True); sys.stdin.read()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdin is not None and parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        assert grandchild in {proc.pid for proc in tree.alive()}
        parent.stdin.close()
        parent.wait(timeout=30)  # the grandchild is re-parented away from this process now
        assert {proc.pid for proc in tree.alive()} == {grandchild}
        tree.send(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while tree.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree.alive() == [] and older.poll() is None
    finally:
        tree.send(signal.SIGKILL)  # the grandchild, if a check above failed before it was killed
        for proc in (older, parent):
            proc.kill()
            proc.wait()


def _is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] != "Z"


# --- rendering device -----------------------------------------------------------------------------------


def test_egl_device_is_the_physical_gpu():
    assert egl_device_id("5", 1, "3,5") == "5"
    assert egl_device_id("1", 1, None) == "1"


def test_egl_device_is_the_visible_index_when_the_physical_id_would_read_as_another_index():
    # With CUDA_VISIBLE_DEVICES=2,0 mujoco would read "0" as "the first visible GPU", which is GPU 2.
    assert egl_device_id("0", 1, "2,0") == "1"


def test_egl_device_is_left_alone_for_uuids():
    assert egl_device_id("MIG-a", 0, "MIG-a") is None


def test_each_local_worker_finds_its_gpus_visible_devices_entry():
    # --workers-per-gpu 2 on GPUs 3 and 5: local ranks 0, 1 on GPU 3 and 2, 3 on GPU 5 (this indexed the entries
    # by local rank and failed on the first GPU run with two workers per GPU).
    plan = WorkerPlan(
        devices=("cuda:0", "cuda:0", "cuda:1", "cuda:1"), backend="gloo", cuda_visible_devices="3,5"
    )
    assert [plan.physical_gpu(rank) for rank in range(4)] == ["3", "3", "5", "5"]
    one_each = WorkerPlan(devices=("cuda:0", "cuda:1"), backend="nccl", cuda_visible_devices="2,0")
    assert [one_each.physical_gpu(rank) for rank in range(2)] == ["2", "0"]
    # one worker in the launching process, on the GPU the user named (cuda:1 in this process)
    assert WorkerPlan(devices=("cuda:1",), cuda_visible_devices="1").physical_gpu(0) == "1"
