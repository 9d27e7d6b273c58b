"""A task of an ``srun`` step joins the step's process group as one worker.

``srun -n N train ...`` starts N copies of ``train``; Slurm tells each its place only through SLURM_* variables,
and which of them a site sets varies (``-n 2`` alone leaves SLURM_NTASKS_PER_NODE unset). This module turns them
into the variables every launcher uses (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
so the rest of mjfleet has one way of joining (:mod:`mjfleet.fleet.external`). Variables that are already set
win: a job script that exports its own RANK etc. is obeyed.

Only a task of a job *step* (SLURM_STEP_ID set) with several tasks joins: the batch script itself and an salloc
shell also carry SLURM_PROCID and SLURM_NTASKS, and there ``train`` is one command (e.g. with ``--hosts slurm``).
It is also where mjfleet runs ``scontrol`` (:func:`scontrol`; launch/slurm.py requeues and lists hosts with it).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, MutableMapping

from mjfleet.errors import UsageError

PORT_BASE, PORT_SPAN = 20000, 20000
"""MASTER_PORT, when the job script sets none, is PORT_BASE + job id mod PORT_SPAN: the same for every task of a
job without talking to each other, and different for jobs that share a node (unless their ids collide)."""


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
    world = count(env, world_name, default=1, minimum=1)
    if world <= 1:
        return None
    rank = count(env, "SLURM_PROCID")
    if rank >= world:
        raise UsageError(f"SLURM_PROCID={rank} is not below {world_name}={world}")
    local_world = _tasks_on_this_node(env, world)
    local_rank = count(env, "SLURM_LOCALID", default=0 if local_world == 1 else None)
    if local_rank >= local_world:
        raise UsageError(f"SLURM_LOCALID={local_rank} is not below this node's task count {local_world}")
    nodelist = (
        env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    )
    master = env.get("MASTER_ADDR") or _first_host(nodelist, hostnames)
    job_id = count(env, "SLURM_JOB_ID" if "SLURM_JOB_ID" in env else "SLURM_JOBID", default=0)
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
            node = count(env, "SLURM_NODEID", default=0)
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
        return count(env, "SLURM_NTASKS_PER_NODE", minimum=1)
    nodes = count(env, "SLURM_STEP_NUM_NODES" if "SLURM_STEP_NUM_NODES" in env else "SLURM_NNODES", default=1)
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
        return scontrol_hostnames(nodelist)
    except SlurmError as exc:
        raise UsageError(
            f"cannot expand the node list {nodelist!r} with scontrol ({exc}); export MASTER_ADDR in the job script"
        ) from None


class SlurmError(RuntimeError):
    """scontrol could not run, or said no: its last line, or why it did not start."""


def scontrol(*args: str, timeout_s: float = 60) -> str:
    """`scontrol <args>`'s output: the one place mjfleet runs scontrol. Raises SlurmError."""
    try:
        done = subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SlurmError(str(exc)) from None
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise SlurmError(why[-1] if why else f"exit status {done.returncode}")
    return done.stdout


def scontrol_hostnames(nodelist: str | None = None) -> list[str]:
    """The host names of a Slurm node list; without one, of this allocation (SLURM_JOB_NODELIST)."""
    return [h for h in scontrol("show", "hostnames", *([nodelist] if nodelist else [])).split() if h]


def count(env: Mapping[str, str], name: str, default: int | None = None, minimum: int = 0) -> int:
    """A whole-number SLURM_* variable, checked: a UsageError naming it when missing or wrong."""
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
