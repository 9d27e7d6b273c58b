"""Decide the worker plan: which devices, how many worker processes, which backend, which hosts.

Nothing here creates a CUDA context: the GPU count comes from ``torch.cuda.device_count()``, which asks
NVML and does not initialise CUDA, so worker processes started later can still be given their own
``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import Literal

from mjfleet.errors import UsageError
from mjfleet.fleet.external import read_launcher_env
from mjfleet.fleet.plan import GpuId, WorkerPlan, is_this_host
from mjfleet.launch.hosts import resolve_host_names

_ACCEPTED = "use GPU indices like `0 1`, `[0, 1]` or `0,1`, or `all`, or `None` for CPU, or `auto` alone"
_CPU_WORDS = {"none", "cpu"}
_UUID_PREFIXES = ("GPU-", "MIG-")


@dataclass(frozen=True)
class GpuRequest:
    """What `--gpu-ids` asked for, before looking at the machine."""

    mode: Literal["default", "cpu", "all", "ids"]
    ids: tuple[GpuId, ...] = ()

    def __str__(self) -> str:
        if self.mode == "ids":
            return " ".join(str(i) for i in self.ids)
        return {"default": "(default)", "cpu": "None", "all": "all"}[self.mode]


def parse_gpu_ids(tokens: list[str] | None) -> GpuRequest:
    """Read the raw tokens after `--gpu-ids`; ``None`` (flag absent) means the default device choice.

    Accepts ``0 1``, ``"[0, 1]"``, ``0,1``, ``all``, ``None``/``none``/``cpu`` and GPU/MIG UUIDs.
    """
    if tokens is None:
        return GpuRequest("default")
    # Commas, brackets and whitespace are all separators, so `[0, 1]` split by the shell into
    # `[0,` and `1]` reads the same as the quoted form.
    items = [t for t in re.split(r"[\s,\[\]()]+", " ".join(tokens)) if t]
    items = [t.strip("'\"") for t in items]
    items = [t for t in items if t]
    if not items:
        raise UsageError(f"--gpu-ids needs a value: {_ACCEPTED}")
    words = {t.lower() for t in items}
    if words & (_CPU_WORDS | {"all"}):
        if len(items) > 1:
            raise UsageError(f"--gpu-ids: {' '.join(items)!r} mixes a keyword with other values; {_ACCEPTED}")
        return GpuRequest("all" if items[0].lower() == "all" else "cpu")

    ids: list[GpuId] = []
    for item in items:
        gpu: GpuId
        if item.upper().startswith(_UUID_PREFIXES):
            gpu = item
        elif re.fullmatch(r"[+-]?\d+", item):
            gpu = int(item)
            if gpu < 0:
                raise UsageError(f"--gpu-ids: GPU index {gpu} is negative; indices start at 0")
        else:
            raise UsageError(f"--gpu-ids: cannot read {item!r}; {_ACCEPTED}")
        if gpu in ids:
            raise UsageError(f"--gpu-ids: GPU {gpu} is listed twice")
        ids.append(gpu)
    return GpuRequest("ids", tuple(ids))


def make_plan(
    request: GpuRequest,
    cpu_workers: int | None = 1,
    hosts: list[str] | None = None,
    *,
    default_cpu_workers: int = 1,
    threads: int | None = None,
    cuda_device_count: int | None = None,
    workers_per_gpu: int = 1,
) -> WorkerPlan:
    """Turn a `--gpu-ids` request, `--cpu-workers`, `--threads` and `--hosts` into a checked :class:`WorkerPlan`.

    ``workers_per_gpu`` > 1 puts that many workers on each selected GPU. nccl refuses two ranks on one device, so
    such a plan uses gloo with CUDA tensors: for small env counts and for testing the multi-worker CUDA path on a
    machine with one GPU, not for speed.

    ``threads=None``: 1 torch thread per CPU worker, and the PPO update may use the host's cores split among its
    workers when that measures faster; GPU workers split this host's cores among themselves.

    ``cuda_device_count=None`` asks torch how many GPUs this process can see (without initialising CUDA).
    Every host is assumed to look like this one (same GPU count, same CUDA_VISIBLE_DEVICES).
    ``cpu_workers=None`` (not given): on CPU ``default_cpu_workers`` (the task's), at most one per usable core;
    on GPUs it does not apply.
    Raises :class:`UsageError` (one line) for anything the user has to fix.
    """
    cores = usable_cores()
    given = cpu_workers is not None
    if cpu_workers is None:
        cpu_workers = max(1, min(default_cpu_workers, cores))
    if isinstance(cpu_workers, bool) or not isinstance(cpu_workers, int) or cpu_workers < 1:
        raise UsageError(f"--cpu-workers must be a whole number >= 1, got {cpu_workers!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UsageError(f"--threads must be a whole number >= 1, got {threads!r}")
    if isinstance(workers_per_gpu, bool) or not isinstance(workers_per_gpu, int) or workers_per_gpu < 1:
        raise UsageError(f"--workers-per-gpu must be a whole number >= 1, got {workers_per_gpu!r}")
    host_names = resolve_host_names(hosts)
    count = _visible_gpu_count() if cuda_device_count is None else cuda_device_count

    notice = None
    if request.mode == "default":
        if count == 0:
            notice = (
                "no CUDA GPU found: running on CPU (pass --gpu-ids None to choose CPU without this notice)"
            )
            request = GpuRequest("cpu")
        elif given and cpu_workers > 1:
            raise UsageError(
                f"--cpu-workers {cpu_workers} only applies with --gpu-ids None "
                "(this machine has a GPU, so the default is GPU 0)"
            )
        else:
            request = GpuRequest("ids", (0,))

    if request.mode == "cpu" and workers_per_gpu > 1:
        raise UsageError(f"--workers-per-gpu {workers_per_gpu} applies to GPUs; on CPU use --cpu-workers")
    if request.mode == "cpu":
        return WorkerPlan(
            devices=("cpu",) * cpu_workers,
            hosts=host_names,
            backend="gloo",
            cuda_visible_devices=None,
            threads_per_worker=threads or 1,
            update_threads=threads or max(1, cores // cpu_workers),
            notice=notice,
        )

    if given and cpu_workers > 1:
        raise UsageError(
            f"--cpu-workers {cpu_workers} only applies with --gpu-ids None; on GPUs there is one worker per GPU"
        )
    if count == 0:
        raise UsageError(
            f"--gpu-ids {request}: no CUDA GPU is visible on this machine; use --gpu-ids None to run on CPU"
        )
    ids = tuple(range(count)) if request.mode == "all" else request.ids
    visible = _cuda_visible_entries()
    physical = tuple(_physical_gpu(g, count, visible) for g in ids)
    in_process = len(ids) * workers_per_gpu * len(host_names) == 1 and is_this_host(host_names[0])
    if in_process:
        devices = (f"cuda:{_index_in_this_process(ids[0], visible)}",)
    else:  # worker i on the (i // workers_per_gpu)-th GPU of CUDA_VISIBLE_DEVICES
        devices = tuple(f"cuda:{k}" for k in range(len(ids)) for _ in range(workers_per_gpu))
    threads_per_worker = threads or max(1, cores // len(devices))
    return WorkerPlan(
        devices=devices,
        hosts=host_names,
        backend="nccl" if workers_per_gpu == 1 else "gloo",
        cuda_visible_devices=",".join(physical),
        threads_per_worker=threads_per_worker,
        update_threads=threads_per_worker,
        gpu_ids=ids,
        notice=notice,
    )


def launched_externally() -> bool:
    """Whether a launcher such as torchrun started this process as one of several workers (RANK, MASTER_ADDR and
    a WORLD_SIZE above 1 are set)."""
    # Checked: a bad variable is a usage error naming it (mjfleet.fleet.external).
    return read_launcher_env() is not None


def external_plan(request: GpuRequest, cpu_workers: int, hosts: list[str], threads: int | None) -> WorkerPlan:
    """The plan of a worker an external launcher started: LOCAL_WORLD_SIZE workers per host, WORLD_SIZE in all;
    local rank k uses cuda:k, or the CPU (--gpu-ids None, or no GPU). The launcher has placed the workers, so
    GPU ids, --cpu-workers and --hosts are usage errors here."""
    if request.mode == "ids" or cpu_workers != 1 or hosts != ["localhost"]:
        raise UsageError(
            "GPU ids, --cpu-workers and --hosts do not apply under a launcher such as torchrun (RANK, WORLD_SIZE "
            "set): it placed the workers; each uses the GPU of its LOCAL_RANK (--gpu-ids auto or all) or the CPU "
            "(--gpu-ids None)"
        )
    launcher = read_launcher_env()
    if launcher is None:
        raise RuntimeError("external_plan called without a launcher environment")
    world, local = launcher.world_size, launcher.local_world_size
    if runs_on_cpu(request):
        plan = make_plan(request, cpu_workers=local, threads=threads)
    else:
        plan = make_plan(GpuRequest("ids", tuple(range(local))), threads=threads)
    nodes = tuple(f"node{i}" for i in range(world // local))  # only counted: world size = workers x hosts
    return replace(plan, hosts=nodes if len(nodes) > 1 else ("localhost",))


def runs_on_cpu(request: GpuRequest) -> bool:
    """Whether `request` puts the workers on CPU: --gpu-ids None, or the default on a machine without a GPU."""
    return request.mode == "cpu" or (request.mode == "default" and _visible_gpu_count() == 0)


def _physical_gpu(gpu: GpuId, count: int, visible: list[str] | None) -> str:
    """The CUDA_VISIBLE_DEVICES entry that names `gpu` for a fresh process."""
    if isinstance(gpu, str):
        return gpu
    if gpu >= count:
        where = f" (CUDA_VISIBLE_DEVICES={','.join(visible)})" if visible is not None else ""
        valid = f"valid ids are 0..{count - 1}" if count > 1 else "the only valid id is 0"
        raise UsageError(f"--gpu-ids: there is no GPU {gpu}: {count} GPU(s) visible{where}, {valid}")
    return visible[gpu] if visible is not None and gpu < len(visible) else str(gpu)


def _index_in_this_process(gpu: GpuId, visible: list[str] | None) -> int:
    """The cuda:<index> of `gpu` in the launching process, whose CUDA_VISIBLE_DEVICES cannot change any more."""
    if isinstance(gpu, int):
        return gpu
    if visible is not None and gpu in visible:
        return visible.index(gpu)
    # Selecting a UUID needs CUDA_VISIBLE_DEVICES set before CUDA starts, which only a fresh process guarantees.
    raise UsageError(
        f"--gpu-ids {gpu}: a GPU UUID that is not in CUDA_VISIBLE_DEVICES can only select GPUs for several "
        f"workers; for one GPU run with CUDA_VISIBLE_DEVICES={gpu} (the default then uses it)"
    )


def _cuda_visible_entries() -> list[str] | None:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [e.strip() for e in value.split(",") if e.strip()]


def _visible_gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a broken driver means "no GPU" here, not a crash
        return 0


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))  # respects taskset/cgroup pinning, unlike os.cpu_count()
    except AttributeError:
        return os.cpu_count() or 1
