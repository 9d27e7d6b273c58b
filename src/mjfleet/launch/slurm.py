"""Slurm: a task of an ``srun`` step joins the step's process group as one worker, and a job knows whether Slurm
restarted it (requeue, preemption) so that training can continue where it stopped.

``srun -n N train ...`` starts N copies of ``train``; Slurm tells each its place only through SLURM_* variables,
and which of them a site sets varies (``-n 2`` alone leaves SLURM_NTASKS_PER_NODE unset). This module turns them
into the variables every launcher uses (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
so the rest of mjfleet has one way of joining (:mod:`mjfleet.launch.external`). Variables that are already set
win: a job script that exports its own RANK etc. is obeyed.

Only a task of a job *step* (SLURM_STEP_ID set) with several tasks joins: the batch script itself and an salloc
shell also carry SLURM_PROCID and SLURM_NTASKS, and there ``train`` is one command (e.g. with ``--hosts slurm``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from mjfleet.errors import UsageError

PORT_BASE, PORT_SPAN = 20000, 20000
"""MASTER_PORT, when the job script sets none, is PORT_BASE + job id mod PORT_SPAN: the same for every task of a
job without talking to each other, and different for jobs that share a node (unless their ids collide)."""


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job this process runs in."""

    job_id: str
    step_id: str | None
    """The srun step (0, 1, ... in the order the batch script starts them; None in the batch script itself)."""
    restart_count: int
    """How many times Slurm requeued the job (SLURM_RESTART_COUNT, 0 on the first start)."""

    def run_fields(self) -> dict[str, str | int | None]:
        """What params/run.yaml records of the job, to find the run again after a requeue."""
        return {
            "slurm_job_id": self.job_id,
            "slurm_step_id": self.step_id,
            "slurm_restart_count": self.restart_count,
        }


def current_job(environ: Mapping[str, str] | None = None) -> SlurmJob | None:
    """The job this process runs in, or None outside Slurm."""
    env = os.environ if environ is None else environ
    job_id = (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip()
    if not job_id:
        return None
    step = (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "").strip() or None
    return SlurmJob(job_id, step, _count(env, "SLURM_RESTART_COUNT", default=0))


def join_srun_step(environ: MutableMapping[str, str] | None = None) -> bool:
    """In a task of an srun step with several tasks, set the launcher variables from SLURM_*; returns whether it
    did. UsageError (naming the variable) when Slurm's variables contradict each other."""
    env = os.environ if environ is None else environ
    derived = launcher_variables(env)
    if derived is None:
        return False
    for name, value in derived.items():
        env.setdefault(name, value)
    return True


def launcher_variables(env: Mapping[str, str], hostnames=None) -> dict[str, str] | None:
    """RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT for this srun task, or None when
    this process is not one of several tasks of a step. `hostnames` expands a Slurm node list (default: scontrol)."""
    if not (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")) or "SLURM_PROCID" not in env:
        return None
    world_name = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    world = _count(env, world_name, default=1, minimum=1)
    if world <= 1:
        return None
    rank = _count(env, "SLURM_PROCID")
    if rank >= world:
        raise UsageError(f"SLURM_PROCID={rank} is not below {world_name}={world}")
    local_world = _tasks_on_this_node(env, world)
    local_rank = _count(env, "SLURM_LOCALID", default=0 if local_world == 1 else None)
    if local_rank >= local_world:
        raise UsageError(f"SLURM_LOCALID={local_rank} is not below this node's task count {local_world}")
    nodelist = (
        env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    )
    master = env.get("MASTER_ADDR") or _first_host(nodelist, hostnames)
    job_id = _count(env, "SLURM_JOB_ID" if "SLURM_JOB_ID" in env else "SLURM_JOBID", default=0)
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(local_world),
        "MASTER_ADDR": master,
        "MASTER_PORT": env.get("MASTER_PORT") or str(PORT_BASE + job_id % PORT_SPAN),
    }


def _tasks_on_this_node(env: Mapping[str, str], world: int) -> int:
    """This node's task count: from SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE (e.g. "2(x3),1") at
    SLURM_NODEID, else SLURM_NTASKS_PER_NODE, else all tasks when the step has one node."""
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if env.get(name, "").strip():
            per_node = expand_tasks_per_node(env[name], name)
            node = _count(env, "SLURM_NODEID", default=0)
            if node >= len(per_node):
                raise UsageError(
                    f"SLURM_NODEID={node} but {name}={env[name]!r} lists {len(per_node)} node(s)"
                )
            if len(set(per_node)) > 1:
                raise UsageError(
                    f"{name}={env[name]!r}: the nodes run different numbers of tasks; mjfleet needs the same number "
                    "on every node (use --ntasks-per-node)"
                )
            return per_node[node]
    if env.get("SLURM_NTASKS_PER_NODE", "").strip():
        return _count(env, "SLURM_NTASKS_PER_NODE", minimum=1)
    nodes = _count(
        env, "SLURM_STEP_NUM_NODES" if "SLURM_STEP_NUM_NODES" in env else "SLURM_NNODES", default=1
    )
    if nodes == 1:
        return world
    raise UsageError(
        "cannot tell how many tasks run on this node: SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE and "
        "SLURM_NTASKS_PER_NODE are unset; pass --ntasks-per-node to sbatch/srun"
    )


def expand_tasks_per_node(value: str, name: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """Slurm's compressed per-node counts, "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise UsageError(f"{name}={value!r}: cannot read {part!r} (expected counts like 2(x3),1)")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _first_host(nodelist: str, hostnames=None) -> str:
    """The first node of a Slurm node list ("vm", "gpu[01-04]", "a,b"): rank 0 runs there."""
    nodelist = nodelist.strip()
    if not nodelist:
        raise UsageError("MASTER_ADDR is not set and SLURM_STEP_NODELIST / SLURM_JOB_NODELIST are empty")
    if re.fullmatch(r"[\w.-]+", nodelist):
        return nodelist
    expand = hostnames or _scontrol_hostnames
    names = expand(nodelist)
    if not names:
        raise UsageError(
            f"scontrol show hostnames {nodelist!r} listed no host; export MASTER_ADDR in the job script"
        )
    return names[0]


def _scontrol_hostnames(nodelist: str) -> list[str]:
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(
            f"cannot expand the node list {nodelist!r} with scontrol ({exc}); export MASTER_ADDR in the job script"
        ) from None
    return [h for h in out.split() if h]


def _count(env: Mapping[str, str], name: str, default: int | None = None, minimum: int = 0) -> int:
    value = env.get(name)
    if value is None or not value.strip():
        if default is None:
            raise UsageError(f"{name} is {'empty' if value is not None else 'not set'} in this Slurm task")
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a whole number") from None
    if number < minimum:
        raise UsageError(f"{name}={number} must be >= {minimum}")
    return number


WARNING_SIGNAL = signal.SIGUSR1
"""The signal scripts/slurm/train.sbatch asks Slurm to send before the time limit (`--signal=B:USR1@...`): the
workers save and stop as on SIGTERM, and then the job requeues itself, so that it continues this run."""


def requeue_before_time_limit(signum: int, environ: Mapping[str, str] | None = None) -> str | None:
    """After a stop by :data:`WARNING_SIGNAL` inside a Slurm job: `scontrol requeue` this job and return a line
    saying so (or why not); None for any other stop, or outside Slurm."""
    job = current_job(environ)
    if signum != WARNING_SIGNAL or job is None:
        return None
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job.job_id], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not requeue Slurm job {job.job_id} ({exc}); resubmit it to continue"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return (
            f"could not requeue Slurm job {job.job_id} ({why[-1] if why else done.returncode}); resubmit it"
        )
    return f"requeued Slurm job {job.job_id}: when it starts again it continues this run from its latest checkpoint"
