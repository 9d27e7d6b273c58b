"""Who this worker is (rank, device), its seed, and its process setup: the runtime every worker shares.

This module is the one place that reads the launcher's RANK / LOCAL_RANK / WORLD_SIZE variables and the one place
that creates the process group. A worker function started by :func:`mjfleet.launch.launcher.run_workers` begins
with::

    ctx = start_worker(plan)                # WorkerContext: rank, device, backend, process group
    torch.manual_seed(seed_for(seed, ctx))

and hands `ctx` to everything below it (`mjfleet.rl.FleetRunner` takes it as an argument).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from mjfleet.fleet.plan import WorkerPlan


@dataclass(frozen=True)
class WorkerContext:
    """This process's place in the run: global rank, rank on its host, total workers, torch device, and the
    process group its collectives use (None for one worker)."""

    rank: int
    local_rank: int
    world_size: int
    device: str
    backend: str
    group: Any = None
    """The torch.distributed process group of the run's workers (`setup_worker` joins it); None: one worker."""

    @classmethod
    def single(cls, device: str = "cpu") -> WorkerContext:
        """The context of a run with one worker, in this process: nothing to exchange with, no process group."""
        backend = "nccl" if str(device).startswith("cuda") else "gloo"
        return cls(0, 0, 1, str(device), backend)

    @property
    def is_main(self) -> bool:
        """Rank 0: the only worker that writes the run directory and prints progress."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, plan: WorkerPlan, environ: Mapping[str, str] | None = None) -> WorkerContext:
        """Read RANK, LOCAL_RANK, WORLD_SIZE (defaults 0, 0, 1); the device is the plan's for this local rank.

        A plan that runs its one worker in this process is rank 0 of 1 whatever the environment holds (variables
        left over from an outer launcher must not leak into the run)."""
        if plan.in_process:
            return cls(0, 0, 1, plan.devices[0], plan.backend)
        env = os.environ if environ is None else environ
        rank = int(env.get("RANK", "0"))
        local_rank = int(env.get("LOCAL_RANK", "0"))
        world_size = int(env.get("WORLD_SIZE", "1"))
        if not 0 <= local_rank < plan.workers_per_host:
            raise RuntimeError(
                f"LOCAL_RANK={local_rank} but the plan has {plan.workers_per_host} worker(s) per host"
            )
        if world_size != plan.world_size:
            raise RuntimeError(f"WORLD_SIZE={world_size} but the plan has {plan.world_size} worker(s)")
        return cls(rank, local_rank, world_size, plan.devices[local_rank], plan.backend)


def seed_for(base_seed: int, ctx: WorkerContext) -> int:
    """Each worker's seed: the base seed plus the GLOBAL rank, so hosts never repeat each other's data."""
    return base_seed + ctx.rank


def start_worker(plan: WorkerPlan) -> WorkerContext:
    """This worker's context, read from the launcher's environment, with the process set up and the process group
    joined (`setup_worker`)."""
    return setup_worker(WorkerContext.from_env(plan), plan)


def setup_worker(ctx: WorkerContext, plan: WorkerPlan) -> WorkerContext:
    """Prepare this process for its share of the work; safe to call more than once. Returns `ctx` with its
    process group.

    ``torch.set_num_threads(plan.threads_per_worker)`` (CPU workers: 1 by default; GPU workers: the host's
    cores split among them). GPU: make the worker's GPU the current CUDA device and point MuJoCo's EGL renderer
    at the same GPU. Several workers: join the default process group (torchrunx normally created it already,
    with the plan's backend; torchrun and srun leave that to the worker: mjfleet creates it here and nowhere
    else).
    """
    # CPU: 1 per worker by default; GPU workers split the cores
    torch.set_num_threads(plan.threads_per_worker)
    if not plan.is_cpu:
        torch.cuda.set_device(torch.device(ctx.device))
        physical = plan.physical_gpu(ctx.local_rank)
        index_here = torch.device(ctx.device).index or 0
        egl = egl_device_id(physical, index_here, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if egl is not None:
            os.environ["MUJOCO_EGL_DEVICE_ID"] = egl
    if not ctx.is_distributed:
        return ctx
    if not dist.is_initialized():
        join_process_group(ctx.backend, ctx.rank, ctx.world_size)
    return replace(ctx, group=dist.group.WORLD)


def join_process_group(
    backend: str, rank: int, world_size: int, store: Any = None, timeout: Any = None
) -> None:
    """The one place a worker joins its run's process group: through `store` when mjfleet's launcher started it
    (a store bound to one address: `launch/worker.py`), else through the external launcher's env://
    rendezvous (torchrun, srun: MASTER_ADDR, MASTER_PORT)."""
    how: dict[str, Any] = {"store": store} if store is not None else {"init_method": "env://"}
    if timeout is not None:
        how["timeout"] = timeout
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size, **how)


def egl_device_id(physical: str, index_here: int, cuda_visible_devices: str | None) -> str | None:
    """MUJOCO_EGL_DEVICE_ID naming one GPU, or None when it has no number (a UUID).

    ``physical`` is the GPU's CUDA_VISIBLE_DEVICES entry for a fresh process, ``index_here`` its cuda:<index>
    in this process, ``cuda_visible_devices`` this process's CUDA_VISIBLE_DEVICES.
    """
    if not physical.isdigit():
        return None
    visible = [v.strip() for v in (cuda_visible_devices or "").split(",") if v.strip()]
    # mujoco's EGL loader reads a number below len(CUDA_VISIBLE_DEVICES) as an index into it and a larger one
    # as a physical id. The physical id is right unless it is also a valid index that points elsewhere.
    if int(physical) < len(visible) and visible[int(physical)] != physical:
        return str(index_here)
    return physical
