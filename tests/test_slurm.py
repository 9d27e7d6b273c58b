"""Slurm for real: a one-node cluster (Debian's slurm-wlm + munge, started by tests/slurm_cluster.py under a temp
dir and stopped by pid) runs the shipped batch script, unchanged, the way a user submits it; a two-node cluster in
the namespace test bed (scripts/testbed/hosts.sh: slurmctld on "login", a slurmd on "hosta" and on "hostb") runs
`train --hosts slurm` on a two-node allocation, its agent on the second node started over ssh.

Skipped with the reason where the cluster cannot run (not root, packages missing; .ci/run installs them as root);
failed instead under CI=true.
"""

import contextlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import Callable

import psutil
import pytest
import yaml
from helpers import needs_infrastructure, require_infrastructure
from slurm_cluster import (
    HostsBed,
    SlurmCluster,
    bed_missing_reason,
    missing_reason,
    parent_pid,
    processes_in_namespaces,
    running_cluster,
    running_two_node_cluster,
)

# Real daemons and many processes: `.ci/run` runs these in its second step, as root.
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm" / "train.sbatch"
BIN = pathlib.Path(sys.executable).parent
# Tiny and deterministic: one torch thread everywhere (no measured thread switching), the reducer named.
SMALL = [
    "--gpu-ids", "None", "--num-envs", "16", "--agent.num-steps-per-env", "8", "--seed", "5", "--threads", "1",
    "--agent.ppo.gradient-reducer", "all-gather",
]  # fmt: skip
UV_TRAIN = ["uv", "run", "--frozen", "train"]  # the tests' own jobs run in the checkout: never lock it anew
TIMING = ("env_steps_per_s", "collect_time", "learn_time")
JOB_TIMEOUT_S = 600

needs_slurm = needs_infrastructure(missing_reason)
needs_testbed = needs_infrastructure(bed_missing_reason)


def test_the_docs_show_the_shipped_batch_script_verbatim():
    assert SCRIPT.read_text() in (ROOT / "docs" / "distributed.md").read_text()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_infrastructure(missing_reason())
    with running_cluster(tmp_path_factory.mktemp("slurm")) as started:
        yield started


def _env(cluster: SlurmCluster) -> dict[str, str]:
    # Jobs inherit this environment (sbatch --export=ALL): the cluster, the shared warp kernel cache, and UV_FROZEN
    # so that the shipped script's `uv run train`, run unchanged, is as frozen as UV_TRAIN in the checkout.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    return {**env, **cluster.env(), "WARP_CACHE_PATH": os.environ["WARP_CACHE_PATH"], "UV_FROZEN": "1"}


def _sbatch(cluster: SlurmCluster, out: pathlib.Path, *args: str) -> str:
    result = subprocess.run(
        cluster.client("sbatch", "--parsable", f"--output={out}", f"--chdir={ROOT}", *args),
        capture_output=True, text=True, env=_env(cluster), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def _job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    out = subprocess.run(
        cluster.client("scontrol", "show", "job", job_id),
        capture_output=True,
        text=True,
        env=_env(cluster),
        timeout=60,
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def _wait_for_job(
    cluster: SlurmCluster, job_id: str, out: pathlib.Path, watch: Callable[[], None] = lambda: None
) -> dict[str, str]:
    """The job's fields once it ended; `watch()` is called about once a second meanwhile."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        watch()
        job = _job(cluster, job_id)
        if job.get("JobState") in (
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
        ):
            return job
        time.sleep(1)
    subprocess.run(cluster.client("scancel", job_id), env=_env(cluster), timeout=60)
    pytest.fail(f"job {job_id} did not end in {JOB_TIMEOUT_S} s:\n{_tail(out)}")


def _tail(path: pathlib.Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else f"({path} not written)"


def _metrics(run_dir: pathlib.Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING and not k.startswith("Perf/")} for r in rows]


def _only_run(logs: pathlib.Path) -> pathlib.Path:
    runs = sorted((logs / "cartpole_balance").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


class Reference:
    """The same training with `--cpu-workers 2` outside Slurm, run once for the tests that compare with it: started
    when first asked for (so that it overlaps the first job), its metrics read when a test needs them."""

    def __init__(self, logs: pathlib.Path) -> None:
        self.logs = logs
        self.proc: subprocess.Popen | None = None
        self.output = ""

    def start(self) -> None:
        if self.proc is None:
            self.proc = subprocess.Popen(
                [str(BIN / "train"), "Cartpole-Balance", *SMALL, "--cpu-workers", "2", "--max-iterations", "3",
                 "--logs-root", str(self.logs)],
                cwd=self.logs.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip

    def metrics(self) -> list[dict]:
        self.start()
        assert self.proc is not None
        if self.proc.returncode is None:
            self.output = self.proc.communicate(timeout=JOB_TIMEOUT_S)[0] or ""
        assert self.proc.returncode == 0, self.output[-3000:]
        return _metrics(_only_run(self.logs))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    ref = Reference(tmp_path_factory.mktemp("reference") / "logs")
    try:
        yield ref
    finally:
        ref.stop()


def test_the_batch_script_runs_two_srun_tasks_as_one_run_equal_to_two_cpu_workers(
    cluster, reference, tmp_path
):
    out = tmp_path / "job.out"
    job_id = _sbatch(
        cluster, out, "-n", "2", str(SCRIPT), "Cartpole-Balance", *SMALL, "--max-iterations", "3",
        "--logs-root", str(tmp_path / "slurm"),
    )  # fmt: skip
    reference.start()
    job = _wait_for_job(cluster, job_id, out)
    assert job["JobState"] == "COMPLETED", _tail(out)
    text = out.read_text()
    assert "2 workers x 16 envs = 32 envs" in text, text[-3000:]
    run_dir = _only_run(tmp_path / "slurm")
    run = yaml.safe_load((run_dir / "params" / "run.yaml").read_text())
    assert run["world_size"] == 2 and run["slurm_job_id"] == job_id and run["slurm_step_id"] == "0"
    assert run["gradient_reducer"] == "all-gather"
    assert _metrics(run_dir) == reference.metrics()
    assert [r["iteration"] for r in _metrics(run_dir)] == [0, 1, 2]  # one writer


def test_hosts_slurm_inside_an_allocation_trains_one_run_equal_to_two_cpu_workers(
    cluster, reference, tmp_path
):
    out = tmp_path / "job.out"
    train = " ".join([*UV_TRAIN, "Cartpole-Balance", *SMALL, "--cpu-workers", "2", "--hosts", "slurm",
                      "--max-iterations", "3", "--logs-root", str(tmp_path / "slurm")])  # fmt: skip
    job_id = _sbatch(cluster, out, "-n", "2", f"--wrap=exec {train}")
    reference.start()
    job = _wait_for_job(cluster, job_id, out)
    assert job["JobState"] == "COMPLETED", _tail(out)
    assert f"on 1 host ({cluster.node})" in out.read_text(), _tail(out)  # the allocation's node, via scontrol
    run_dir = _only_run(tmp_path / "slurm")
    assert yaml.safe_load((run_dir / "params" / "run.yaml").read_text())["hosts"] == [cluster.node]
    assert _metrics(run_dir) == reference.metrics()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    require_infrastructure(bed_missing_reason())
    with running_two_node_cluster(tmp_path_factory.mktemp("two_nodes")) as started:
        yield started


def _read_only_for(pids: list[int], directory: pathlib.Path) -> None:
    """`directory` read-only in the mount namespaces of `pids` (and of what they start), writable elsewhere."""
    for pid in pids:
        subprocess.run(
            ["nsenter", f"--target={pid}", "--mount", "mount", "--bind", "-o", "ro", str(directory), str(directory)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip


def _ssh_sessions(bed: HostsBed, host: str) -> int:
    """ssh sessions sshd on `host` has started (one per agent started there)."""
    log = bed.dir / f"sshd-{host}.log"
    return log.read_text().count("Starting session: command") if log.exists() else 0


def test_hosts_slurm_on_a_two_node_allocation_runs_one_worker_per_node_equal_to_two_cpu_workers(
    two_nodes, reference, tmp_path
):
    """`uv run train --hosts slurm` in a batch job on two nodes: the node list from the allocation, rank 0 on the
    first node, rank 1 on the second through an agent started over ssh; the same result as `--cpu-workers 2`, one
    run directory, and nothing written by the second node (it sees the logs read-only)."""
    cluster, bed = two_nodes
    logs, out = tmp_path / "logs", tmp_path / "job.out"
    logs.mkdir()
    # Rank 1's processes start from hostb's sshd (its agent) and slurmd: a file they wrote under the logs would fail
    # the run with "Read-only file system".
    _read_only_for([bed.sshd_pid("hostb"), cluster.procs["slurmd-hostb"].pid], logs)
    sessions = {host: _ssh_sessions(bed, host) for host in ("hosta", "hostb")}
    train = " ".join([*UV_TRAIN, "Cartpole-Balance", *SMALL, "--hosts", "slurm", "--max-iterations", "3",
                      "--logs-root", str(logs)])  # fmt: skip
    job_id = _sbatch(cluster, out, "--nodes", "2", "--ntasks-per-node", "1", f"--wrap=exec {train}")
    reference.start()
    workers, watch = _hosts_running(bed, "spawn_main")  # torchrunx's workers, spawned by each host's agent
    job = _wait_for_job(cluster, job_id, out, watch)
    text = out.read_text()
    assert job["JobState"] == "COMPLETED" and job["NodeList"] == "hosta,hostb", text[-4000:]
    assert workers == {"hosta", "hostb"}
    assert "2 workers x 16 envs = 32 envs" in text and "on 2 hosts (hosta, hostb)" in text, text[-4000:]
    assert {h: _ssh_sessions(bed, h) - n for h, n in sessions.items()} == {"hosta": 0, "hostb": 1}
    run_dir = _only_run(logs)
    run = yaml.safe_load((run_dir / "params" / "run.yaml").read_text())
    assert run["hosts"] == ["hosta", "hostb"] and run["world_size"] == 2 and run["slurm_job_id"] == job_id
    worker_logs = {p.name: p.read_text() for p in run_dir.glob("torchrunx/*/*[[]0].log")}
    assert sorted(worker_logs) == ["hosta[0].log", "hostb[0].log"], worker_logs
    assert _metrics(run_dir) == reference.metrics()
    assert [r["iteration"] for r in _metrics(run_dir)] == [0, 1, 2]
    assert [p for p in logs.rglob("*") if not p.is_relative_to(run_dir)] == [logs / "cartpole_balance"]
    assert _job_processes_left(cluster, bed) == {}  # the agent on hostb and its worker ended with the job


def test_the_batch_script_on_two_nodes_runs_one_srun_task_per_node_as_one_run_equal_to_two_cpu_workers(
    two_nodes, reference, tmp_path
):
    """The shipped script, unchanged, on `--nodes 2 --ntasks-per-node 1`: each task joins from its node (rank,
    local rank and the first node as MASTER_ADDR from Slurm's variables), rank 1 on hostb writes nothing."""
    cluster, bed = two_nodes
    logs, out = tmp_path / "logs", tmp_path / "job.out"
    logs.mkdir()
    _read_only_for([cluster.procs["slurmd-hostb"].pid], logs)  # where hostb's task starts from
    job_id = _sbatch(
        cluster, out, "--nodes", "2", "--ntasks-per-node", "1", str(SCRIPT), "Cartpole-Balance", *SMALL,
        "--max-iterations", "3", "--logs-root", str(logs),
    )  # fmt: skip
    reference.start()
    workers, watch = _hosts_running(bed, "train Cartpole-Balance")  # each srun task is a worker
    job = _wait_for_job(cluster, job_id, out, watch)
    text = out.read_text()
    assert job["JobState"] == "COMPLETED" and job["NodeList"] == "hosta,hostb", text[-4000:]
    assert workers == {"hosta", "hostb"}
    assert "2 workers x 16 envs = 32 envs" in text, text[-4000:]
    run_dir = _only_run(logs)
    run = yaml.safe_load((run_dir / "params" / "run.yaml").read_text())
    assert run["world_size"] == 2 and run["slurm_job_id"] == job_id and run["slurm_step_id"] == "0"
    assert _metrics(run_dir) == reference.metrics()
    assert [p for p in logs.rglob("*") if not p.is_relative_to(run_dir)] == [logs / "cartpole_balance"]
    assert _job_processes_left(cluster, bed) == {}


def _hosts_running(bed: HostsBed, needle: str) -> tuple[set[str], Callable[[], None]]:
    """A set, and the function that adds to it each test bed host (told by the network namespace) that runs a
    process whose command line holds `needle`."""
    hosts: set[str] = set()

    def watch() -> None:
        for pid, host in processes_in_namespaces(bed.net_namespaces()).items():
            cmd = _cmdline(pid)
            if needle in cmd and "resource_tracker" not in cmd:
                hosts.add(host)

    return hosts, watch


def _job_processes_left(cluster: SlurmCluster, bed: HostsBed, seconds: float = 60) -> dict[int, str]:
    """The processes other than the daemons still in the test bed's hosts once none is left or `seconds` passed
    (a hang guard: the job's processes end with it)."""
    daemons = {p.pid for p in cluster.procs.values()} | {bed.sshd_pid(h) for h in ("login", "hosta", "hostb")}
    deadline = time.monotonic() + seconds
    while True:
        left = {
            pid: f"{host}: {_cmdline(pid)}"
            for pid, host in processes_in_namespaces(bed.net_namespaces()).items()
            if pid not in daemons
            and parent_pid(pid) != cluster.procs["slurmctld"].pid  # not its slurmscriptd
        }
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_a_requeued_job_continues_the_same_run_from_its_latest_checkpoint(cluster, tmp_path):
    """Preemption: `scontrol requeue` mid-run sends Slurm's SIGTERM; the workers save, and the same job, started
    again by Slurm with the same unchanged script, continues that run directory. Then the time-limit warning
    (SIGUSR1 to the batch step, as `--signal=B:USR1@...` sends it): the workers save, train requeues its own job,
    and the third start continues the run again, to the same final iteration."""
    out, logs, iterations = tmp_path / "job.out", tmp_path / "logs", 16
    job_id = _sbatch(
        cluster, out, "--requeue", "-n", "2", str(SCRIPT), "Cartpole-Balance", *SMALL,
        "--max-iterations", str(iterations), "--agent.save-interval", "2", "--logs-root", str(logs),
    )  # fmt: skip
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not list(logs.glob("*/*/model_*.pt")) and time.monotonic() < deadline:
        if _job(cluster, job_id).get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING"):
            pytest.fail(f"job {job_id} ended before its first checkpoint:\n{_tail(out)}")
        time.sleep(0.2)
    assert list(logs.glob("*/*/model_*.pt")), _tail(out)
    subprocess.run(["scontrol", "requeue", job_id], env=_env(cluster), timeout=60, check=True)
    _release_requeued(cluster, job_id, 1, out)
    run_dir, first_stop = _only_run(logs), _first_stop(out)
    while not [p for p in run_dir.glob("model_*.pt") if _iteration(p) > first_stop]:
        if time.monotonic() > deadline or _job(cluster, job_id).get("JobState") not in ("PENDING", "RUNNING"):
            pytest.fail(f"job {job_id} saved no checkpoint after it continued:\n{_tail(out)}")
        time.sleep(0.2)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], env=_env(cluster), timeout=60, check=True)
    _release_requeued(cluster, job_id, 2, out)
    job = _wait_for_job(cluster, job_id, out)
    text = out.read_text()
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "2", text[-4000:]

    first, second_and_third = text.split(f"job {job_id} (restart 1)")
    second, third = second_and_third.split(f"job {job_id} (restart 2)")
    assert "stopped by SIGTERM" in first, first[-3000:]  # Slurm's SIGTERM reached the workers; rank 0 saved
    assert _only_run(logs) == run_dir
    saved = re.search(r"stopped by SIGTERM after iteration \d+; checkpoint (\S+model_(\d+)\.pt)", first)
    assert saved and pathlib.Path(saved.group(1)).parent == run_dir, first[-3000:]
    start = int(saved.group(2))
    assert 2 <= start < iterations
    after_echo = second.split("\n", 1)[1]
    assert after_echo.startswith(f"continuing run {run_dir}: Slurm job {job_id} restarted"), second[:2000]
    assert f"resuming from {saved.group(1)} (iteration {start}" in second
    assert "stopped by SIGUSR1" in second and f"requeued Slurm job {job_id}" in second, second[-3000:]
    warned = re.search(r"stopped by SIGUSR1 after iteration \d+; checkpoint (\S+model_(\d+)\.pt)", second)
    assert warned and int(warned.group(2)) > start, second[-3000:]
    assert third.split("\n", 1)[1].startswith(
        f"continuing run {run_dir}: Slurm job {job_id} restarted (2 times)"
    )
    run = yaml.safe_load((run_dir / "params" / "run.yaml").read_text())
    assert run["slurm_job_id"] == job_id and run["slurm_restart_count"] == 2
    assert run["resumed_from"] == warned.group(1) and run["start_iteration"] == int(warned.group(2))
    assert [r["iteration"] for r in _metrics(run_dir)] == list(range(iterations))  # each iteration once
    assert (run_dir / f"model_{iterations}.pt").exists()


def _iteration(checkpoint: pathlib.Path) -> int:
    return int(checkpoint.stem.split("_")[1])


def _first_stop(out: pathlib.Path) -> int:
    """The iteration the first start saved at when Slurm's SIGTERM stopped it."""
    found = re.search(r"stopped by SIGTERM after iteration (\d+)", out.read_text())
    assert found, _tail(out)
    return int(found.group(1))


def _release_requeued(cluster: SlurmCluster, job_id: str, restarts: int, out: pathlib.Path) -> None:
    """Wait until Slurm has requeued the job (`restarts` counted) and let it start at once: Slurm holds a requeued
    job back for a while (its BeginTime), which a test need not wait for."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        job = _job(cluster, job_id)
        if job.get("Restarts") == str(restarts) and job.get("JobState") in ("PENDING", "RUNNING"):
            if job["JobState"] == "PENDING":
                # slurmd revokes the killed instance's credential to the second and refuses a launch whose
                # credential is from that same second ("Job credential revoked"; the job then ends FAILED): let
                # the clock pass into the next second before asking for the start.
                time.sleep(1.5)
                subprocess.run(
                    ["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=_env(cluster), timeout=60
                )
            return
        time.sleep(0.3)
    pytest.fail(f"job {job_id} was not requeued a {restarts}. time:\n{_tail(out)}")


@needs_slurm
def test_every_daemon_is_stopped_by_pid_even_when_the_test_fails(tmp_path):
    started: dict[str, int] = {}
    with pytest.raises(RuntimeError, match="deliberate"), running_cluster(tmp_path) as own:
        started = {name: proc.pid for name, proc in own.procs.items()}
        assert subprocess.run(["sinfo", "-h"], env=_env(own), capture_output=True, timeout=60).returncode == 0
        raise RuntimeError("deliberate failure inside the cluster's block")
    assert sorted(started) == ["munged", "slurmctld", f"slurmd-{own.node}"]
    for name, pid in started.items():
        assert not _alive(pid), f"{name} (pid {pid}) still runs"


def _cmdline(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "(ended)"


def _runs(proc: psutil.Process) -> bool:
    """Whether `proc` still runs: is_running() tells a pid taken by a new process (pids wrap around on a busy
    machine) from the one seen."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


@needs_testbed
def test_a_two_node_cluster_stops_every_daemon_and_job_process_by_pid_even_when_the_test_fails(tmp_path):
    """A failure while `train --hosts slurm` trains on both nodes (a long run: its agent on hostb started over ssh,
    a worker on each node): every process of the job, the Slurm daemons, the sshds and munged end, and the
    namespaces are deleted."""
    seen: dict[psutil.Process, tuple[str, str]] = {}  # (host, command line), while the job runs
    train = " ".join([*UV_TRAIN, "Cartpole-Balance", *SMALL, "--hosts", "slurm", "--max-iterations",
                      "100000", "--logs-root", str(tmp_path / "logs")])  # fmt: skip
    with pytest.raises(RuntimeError, match="deliberate"), running_two_node_cluster(tmp_path) as (own, bed):
        inodes = bed.net_namespaces()
        munged = psutil.Process(own.procs["munged"].pid)  # in this machine's network, not the bed's
        _sbatch(own, tmp_path / "job.out", "--nodes", "2", f"--wrap=exec {train}")
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while _running(seen) != {
            ("hostb", "mjfleet.launch.agent"),
            ("hosta", "spawn_main"),
            ("hostb", "spawn_main"),
        }:
            assert time.monotonic() < deadline, (
                f"the run never started on both nodes: {_tail(tmp_path / 'job.out')}"
            )
            time.sleep(0.2)
            seen = {}
            for pid, host in processes_in_namespaces(inodes).items():
                with contextlib.suppress(psutil.Error):
                    seen[psutil.Process(pid)] = (host, _cmdline(pid))
        raise RuntimeError("deliberate failure while a job trains on both nodes")
    kinds = {os.path.basename(cmd.split()[0]) for _, cmd in seen.values() if cmd}
    assert {"slurmctld", "slurmd", "slurmstepd:", "sshd:", "ssh"} <= kinds, kinds  # ssh: to hostb's agent
    assert [(p.pid, seen.get(p)) for p in [*seen, munged] if _runs(p)] == []
    assert processes_in_namespaces(inodes) == {}
    assert not [
        h for h in ("login", "hosta", "hostb") if pathlib.Path(f"/run/netns/{bed.prefix}-{h}").exists()
    ]


def _running(seen: dict[psutil.Process, tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of a run's agents started over ssh and its workers ran where, as (host, what) pairs."""
    return {
        (host, what)
        for host, cmd in seen.values()
        for what in ("mjfleet.launch.agent", "spawn_main")
        if what in cmd
        and "resource_tracker" not in cmd
        and not (what == "mjfleet.launch.agent" and host == "hosta")
    }
