"""The environment of an externally launched worker (torchrun, srun) read into ranks, and Slurm's variables turned
into it: every inconsistency is one usage line naming the variable; a Slurm restart finds the run it started."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
import yaml

from mjfleet.errors import UsageError
from mjfleet.fleet.external import LauncherEnv, read_launcher_env
from mjfleet.fleet.srun import expand_tasks_per_node, join_srun_step, launcher_variables
from mjfleet.launch.slurm import SlurmJob, current_job, requeue_before_time_limit
from mjfleet.runs.continuation import continuation_for, find_job_run, trim_metrics

BIN = pathlib.Path(sys.executable).parent
TORCHRUN = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}
SRUN_TASK = {  # what Slurm 22.05 gives task 1 of `srun -n 2` on one node (measured on the CI cluster)
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_NNODES": "1",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_TASKS_PER_NODE": "2",
    "SLURM_TASKS_PER_NODE": "2",
    "SLURM_STEP_NODELIST": "vm",
    "SLURM_JOB_NODELIST": "vm",
}


def test_torchruns_variables_are_read_into_ranks():
    assert read_launcher_env(TORCHRUN) == LauncherEnv(rank=1, local_rank=1, world_size=4, local_world_size=2)
    assert read_launcher_env(TORCHRUN).hosts == 2


@pytest.mark.parametrize("unset", ["RANK", "MASTER_ADDR", "WORLD_SIZE"])
def test_without_rank_master_or_world_size_no_launcher_started_this_process(unset):
    assert read_launcher_env({k: v for k, v in TORCHRUN.items() if k != unset}) is None


def test_a_world_of_one_is_not_a_launch():
    assert read_launcher_env({**TORCHRUN, "WORLD_SIZE": "1", "RANK": "0", "LOCAL_WORLD_SIZE": "1"}) is None


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"LOCAL_WORLD_SIZE": None}, "LOCAL_WORLD_SIZE is not set"),
        ({"LOCAL_WORLD_SIZE": ""}, "LOCAL_WORLD_SIZE is empty"),  # an unset $SLURM_NTASKS_PER_NODE exported
        ({"LOCAL_RANK": None}, "LOCAL_RANK is not set"),
        ({"MASTER_PORT": None}, "MASTER_PORT is not set"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not a whole number"),
        ({"RANK": "4"}, "RANK=4 is not below WORLD_SIZE=4"),
        ({"RANK": "-1"}, "RANK=-1 must be >= 0"),
        ({"LOCAL_RANK": "2"}, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
        ({"LOCAL_WORLD_SIZE": "3"}, "WORLD_SIZE=4 is not a multiple of LOCAL_WORLD_SIZE=3"),
        ({"LOCAL_WORLD_SIZE": "8"}, "LOCAL_WORLD_SIZE=8 is above WORLD_SIZE=4"),
    ],
)
def test_a_broken_launcher_environment_is_a_usage_error_naming_the_variable(change, named):
    env = {**TORCHRUN, **{k: v for k, v in change.items() if v is not None}}
    for key in [k for k, v in change.items() if v is None]:
        del env[key]
    with pytest.raises(UsageError, match=named.replace("(", r"\(").replace(")", r"\)")):
        read_launcher_env(env)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"LOCAL_WORLD_SIZE": ""}, "LOCAL_WORLD_SIZE is empty"),
        ({"RANK": "5"}, "RANK=5 is not below WORLD_SIZE=4"),
    ],
)
def test_train_under_a_broken_launcher_environment_prints_one_line_and_exits_2(change, named, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = subprocess.run(
        [str(BIN / "train"), "Cartpole-Balance", "--gpu-ids", "None"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**env, **TORCHRUN, **change},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
    assert not (tmp_path / "logs").exists()


def test_an_srun_task_becomes_a_launched_worker():
    assert launcher_variables(SRUN_TASK) == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "vm",
        "MASTER_PORT": "20007",
    }


def test_srun_n_2_without_ntasks_per_node_still_counts_the_nodes_tasks():
    bare = {k: v for k, v in SRUN_TASK.items() if "TASKS_PER_NODE" not in k}
    assert launcher_variables(bare)["LOCAL_WORLD_SIZE"] == "2"


def test_several_nodes_take_this_nodes_count_and_the_first_host_of_the_node_list():
    env = {
        **SRUN_TASK,
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2",
        "SLURM_STEP_NUM_TASKS": "6",
        "SLURM_STEP_NUM_NODES": "3",
        "SLURM_STEP_TASKS_PER_NODE": "2(x3)",
        "SLURM_STEP_NODELIST": "gpu[07-09]",
    }
    got = launcher_variables(env, hostnames=lambda nodes: ["gpu07", "gpu08", "gpu09"])
    assert (got["RANK"], got["LOCAL_RANK"], got["WORLD_SIZE"], got["LOCAL_WORLD_SIZE"]) == (
        "5",
        "1",
        "6",
        "2",
    )
    assert got["MASTER_ADDR"] == "gpu07"


def test_several_nodes_without_a_per_node_count_is_a_usage_error():
    env = {k: v for k, v in SRUN_TASK.items() if "TASKS_PER_NODE" not in k}
    env.update(SLURM_STEP_NUM_NODES="2", SLURM_NNODES="2")
    with pytest.raises(UsageError, match="--ntasks-per-node"):
        launcher_variables(env)


def test_uneven_tasks_per_node_is_a_usage_error():
    with pytest.raises(UsageError, match="different numbers of tasks"):
        launcher_variables({**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_STEP_NUM_TASKS": "3"})


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"SLURM_PROCID": "x"}, "SLURM_PROCID='x' is not a whole number"),
        ({"SLURM_PROCID": "2"}, "SLURM_PROCID=2 is not below SLURM_STEP_NUM_TASKS=2"),
        ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID=2 is not below"),
        ({"SLURM_STEP_TASKS_PER_NODE": "two"}, "SLURM_STEP_TASKS_PER_NODE='two'"),
    ],
)
def test_contradicting_slurm_variables_are_usage_errors_naming_them(change, named):
    with pytest.raises(UsageError, match=named):
        launcher_variables({**SRUN_TASK, **change})


def test_the_batch_script_itself_and_one_task_steps_do_not_join():
    batch = {k: v for k, v in SRUN_TASK.items() if "STEP" not in k}  # sbatch's shell also has SLURM_PROCID
    assert launcher_variables(batch) is None
    assert launcher_variables({**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"}) is None


def test_variables_the_job_script_exported_win():
    env = {**SRUN_TASK, "MASTER_PORT": "31000", "MASTER_ADDR": "head"}
    assert join_srun_step(env)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"]) == ("head", "31000", "1")


def test_tasks_per_node_expands_slurms_compressed_form():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_the_job_records_its_id_step_and_restarts():
    assert current_job({}) is None
    job = current_job({**SRUN_TASK, "SLURM_RESTART_COUNT": "2"})
    assert job == SlurmJob("7", "0", 2)
    assert job.run_fields() == {"slurm_job_id": "7", "slurm_step_id": "0", "slurm_restart_count": 2}


def _run(experiment: pathlib.Path, name: str, job_id: str, step: str | None, checkpoints=()):
    run = experiment / name
    (run / "params").mkdir(parents=True)
    (run / "params" / "run.yaml").write_text(yaml.safe_dump({"slurm_job_id": job_id, "slurm_step_id": step}))
    for it in checkpoints:
        (run / f"model_{it}.pt").write_bytes(b"")
    return run


def test_a_restarted_job_finds_its_own_run_and_latest_checkpoint(tmp_path):
    _run(tmp_path, "2026-01-01_00-00-00", "7", "0", [2, 4])
    mine = _run(tmp_path, "2026-01-01_00-00-01", "8", "0", [2, 4, 6])
    _run(tmp_path, "2026-01-01_00-00-02", "9", "0", [2])
    found = find_job_run(tmp_path, "8", "0")
    assert found.run_path == mine.resolve() and found.checkpoint.name == "model_6.pt"


def test_another_step_of_the_same_job_is_another_run(tmp_path):
    _run(tmp_path, "2026-01-01_00-00-00", "8", "0", [2])
    assert find_job_run(tmp_path, "8", "1") is None


def test_a_first_start_never_continues_even_a_run_of_the_same_job(tmp_path, capsys):
    _run(tmp_path, "2026-01-01_00-00-00", "8", None, [2])
    assert continuation_for(tmp_path, SlurmJob("8", None, 0)) is None
    assert continuation_for(tmp_path, None) is None
    found = continuation_for(tmp_path, SlurmJob("8", None, 1))
    assert found is not None and capsys.readouterr().out.startswith("continuing run ")


def test_continuing_drops_metrics_of_iterations_after_the_checkpoint(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"iteration": i}) + "\n" for i in range(5)) + '{"itera')
    assert trim_metrics(metrics, 3) == 3
    assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [0, 1, 2]


def test_only_the_time_limit_warning_inside_a_job_requeues_it():
    # Anything else must not touch Slurm: a SIGTERM is preemption or scancel (Slurm decides), outside a job no-op.
    assert requeue_before_time_limit(signal.SIGTERM, SRUN_TASK) is None
    assert requeue_before_time_limit(signal.SIGUSR1, {}) is None
