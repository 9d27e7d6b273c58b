"""Where a run's workers go: the plan every worker reads its device from (launch/devices.py makes it)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Literal

GpuId = int | str
"""A GPU index (relative to CUDA_VISIBLE_DEVICES when it is set) or a GPU/MIG UUID string."""


@dataclass(frozen=True)
class WorkerPlan:
    """Where the workers run: one entry of ``devices`` per worker process on each host."""

    devices: tuple[str, ...]
    """Torch device each local worker uses, as seen inside its own process, e.g. ("cuda:0", "cuda:1")."""
    hosts: tuple[str, ...] = ("localhost",)
    backend: Literal["nccl", "gloo"] = "gloo"
    cuda_visible_devices: str | None = None
    """CUDA_VISIBLE_DEVICES for worker processes, one entry per GPU (`physical_gpu`); None in CPU mode."""
    threads_per_worker: int = 1
    """Torch intra-op threads per worker (torch.set_num_threads and OMP_NUM_THREADS; GPU workers: the host's
    cores split among them). CPU workers default to 1: warp's CPU kernels run on
    one thread, and a second torch thread only helps the PPO update of large batches on an otherwise idle core;
    on a busy machine OpenMP threads waiting for each other made training many times slower (docs/history/benchmarks-log.md).
    More cores are used best through more workers (--cpu-workers)."""
    update_threads: int = 1
    """CPU: torch threads each PPO update may use (this host's cores / its workers, unless --threads is given);
    per update, the runner measures whether they pay and otherwise stays at `threads_per_worker`
    (mjfleet.rl.update_threads)."""
    gpu_ids: tuple[GpuId, ...] = ()
    """The selected GPUs as the user named them (indices relative to CUDA_VISIBLE_DEVICES, or UUIDs)."""
    notice: str | None = None
    """One line for the user when the plan is not what they asked for explicitly (default fell back to CPU)."""

    def __post_init__(self) -> None:
        if not self.devices or not self.hosts:
            raise ValueError("a WorkerPlan needs at least one device and one host")

    @property
    def workers_per_host(self) -> int:
        return len(self.devices)

    @property
    def world_size(self) -> int:
        return self.workers_per_host * len(self.hosts)

    @property
    def is_cpu(self) -> bool:
        return self.cuda_visible_devices is None

    def physical_gpu(self, local_rank: int) -> str:
        """The CUDA_VISIBLE_DEVICES entry of local worker `local_rank`'s GPU. Workers go to the GPUs in order, the
        same number on each (`--workers-per-gpu`)."""
        assert self.cuda_visible_devices is not None, "a CPU plan has no GPUs"
        entries = self.cuda_visible_devices.split(",")
        return entries[local_rank // (len(self.devices) // len(entries))]

    @property
    def in_process(self) -> bool:
        """One worker in total, on this machine: run the function in the launching process, no torchrunx (one
        worker on another host still goes there through torchrunx)."""
        return self.world_size == 1 and is_this_host(self.hosts[0])

    def describe(self) -> str:
        """One line for humans, e.g. "2 CPU workers (gloo) on localhost" or "GPU 0 (cuda:0), 1 worker"."""
        n = self.world_size
        workers = f"{n} worker{'s' if n > 1 else ''}"
        where = self._where()
        if self.is_cpu:
            threads = f"{self.threads_per_worker} thread{'s' if self.threads_per_worker > 1 else ''}"
            if self.update_threads > self.threads_per_worker:
                threads += f", the update up to {self.update_threads}"
            if self.in_process:
                return f"CPU, 1 worker ({threads})"
            return f"{workers.replace('worker', 'CPU worker')} (gloo, {threads} each){where}"
        gpus = ", ".join(str(g) for g in self.gpu_ids)
        if self.in_process:
            return f"GPU {gpus} ({self.devices[0]}), 1 worker"
        per_host = " on each host" if len(self.hosts) > 1 else ""
        sharing = ""
        if self.workers_per_host > len(self.gpu_ids):
            sharing = f", {self.workers_per_host // len(self.gpu_ids)} per GPU"
        return f"GPU{'s' if len(self.gpu_ids) > 1 else ''} {gpus}{per_host}, {workers} ({self.backend}{sharing}){where}"

    def _where(self) -> str:
        if self.hosts == ("localhost",):
            return " on localhost"
        return f" on {len(self.hosts)} host{'s' if len(self.hosts) > 1 else ''} ({', '.join(self.hosts)})"


def is_this_host(name: str) -> bool:
    """Whether `name` is the machine this process runs on ("localhost", a loopback address, its host name)."""
    here = socket.gethostname()
    return name in ("localhost", "127.0.0.1", "::1", here, here.split(".")[0])
