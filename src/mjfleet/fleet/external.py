"""The environment an external launcher (torchrun, or srun through :mod:`mjfleet.launch.slurm`) gives each worker
it starts: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, read and checked once.

A launcher environment that is wrong (a job script exporting an empty ``$SLURM_NTASKS_PER_NODE`` as
LOCAL_WORLD_SIZE, a RANK beyond WORLD_SIZE) is the user's to fix: it raises :class:`UsageError` naming the
variable, never a ValueError from ``int()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from mjfleet.errors import UsageError

REQUIRED = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT")
"""Besides RANK, WORLD_SIZE and MASTER_ADDR (which say that a launcher started this process at all)."""


@dataclass(frozen=True)
class LauncherEnv:
    """This process's place in an externally launched process group."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @property
    def hosts(self) -> int:
        return self.world_size // self.local_world_size


def read_launcher_env(environ: Mapping[str, str] | None = None) -> LauncherEnv | None:
    """The launcher's variables, checked; None when no launcher started this process as one of several workers
    (RANK or MASTER_ADDR unset, or WORLD_SIZE unset or 1)."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "MASTER_ADDR" not in env or "WORLD_SIZE" not in env:
        return None
    world = _whole(env, "WORLD_SIZE", minimum=1)
    if world == 1:
        return None
    for name in REQUIRED:
        if not env.get(name, "").strip():
            raise UsageError(
                f"{name} is {'empty' if name in env else 'not set'}, but RANK and WORLD_SIZE={world} say a launcher "
                f"started this process: export {name} for every worker (torchrun sets it; see docs/distributed.md)"
            )
    rank = _whole(env, "RANK")
    local_rank = _whole(env, "LOCAL_RANK")
    local_world = _whole(env, "LOCAL_WORLD_SIZE", minimum=1)
    _whole(env, "MASTER_PORT", minimum=1)
    if rank >= world:
        raise UsageError(f"RANK={rank} is not below WORLD_SIZE={world}: ranks count 0 .. WORLD_SIZE - 1")
    if local_world > world:
        raise UsageError(f"LOCAL_WORLD_SIZE={local_world} is above WORLD_SIZE={world}")
    if world % local_world:
        raise UsageError(
            f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local_world}: every host must run the same "
            "number of workers"
        )
    if local_rank >= local_world:
        raise UsageError(
            f"LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world}: local ranks count 0 .. "
            "LOCAL_WORLD_SIZE - 1 on each host"
        )
    return LauncherEnv(rank, local_rank, world, local_world)


def _whole(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    value = env.get(name, "")
    try:
        number = int(value.strip())
    except ValueError:
        raise UsageError(
            f"{name}={value!r} is not a whole number (set by the launcher or the job script)"
        ) from None
    if number < minimum:
        raise UsageError(f"{name}={number} must be >= {minimum}")
    return number


def leave_together() -> None:
    """In a process group an external launcher started, return once every rank has got here: after a stop, rank
    0 may still be writing its checkpoint while the others are done, and under `srun --kill-on-bad-exit` (or
    torchrun) the first rank to exit with a signal's status gets the rest killed. No-op outside such a group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    try:
        dist.barrier()
    except Exception:  # noqa: BLE001 - a rank already gone: nothing left to wait for
        pass
