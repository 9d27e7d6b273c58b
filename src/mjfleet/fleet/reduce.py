"""Where gradients are averaged across workers: one reducer per run, chosen once, called after every minibatch.

A reducer sums one flat float buffer over every worker, in place. `FleetPPO.apply_gradients` hands it the
minibatch's gradients with the minibatch's mean KL in one extra slot, so one collective per minibatch keeps the
ranks' parameters and adaptive learning rates identical. The runner's two small per-iteration exchanges (episode
statistics and the agreed stop signal) go through the same reducer's `sum`, and so does the observation
normaliser's synchronisation (`mjfleet.rl.normalizer`). Every other exchange between workers is here too:
`broadcast` (the initial parameters) and `gather` (consistency checks, checkpoints' RNG states). Nothing is
exchanged as a pickled object: tensors, or JSON in a uint8 tensor (`gather_json`).

The strategies, and when `choose_reducer` picks them (`--agent.ppo.gradient-reducer` overrides "auto"):

- `all-reduce`: `torch.distributed.all_reduce`. Always on nccl (GPUs) and for CUDA tensors on gloo (several
  workers sharing a GPU); also several hosts with many workers.
- `all-gather`: every rank gathers every buffer and sums them locally in rank order. On gloo with a few workers
  it costs one round of messages where gloo's ring all-reduce needs several (docs/history/benchmarks-log.md).
- `shared-memory`: CPU workers that share one x86 Linux host copy their buffers into slots of one /dev/shm
  mapping and sum the slots in rank order; no messages at all.
- `none`: no averaging; the ranks train apart (for experiments, and tests showing that averaging matters).

Every strategy sums in a fixed order, or through the collective itself, so all ranks get identical bits.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import shutil
import time
import uuid

import torch
import torch.distributed as dist

from mjfleet.errors import UsageError
from mjfleet.fleet.liveness import waits

REDUCERS = ("auto", "all-reduce", "all-gather", "shared-memory", "none")
ALL_GATHER_MAX_WORKERS = 4
"""Beyond this many gloo workers one all-gather moves more data than the ring all-reduce saves in rounds."""
SHARED_MEMORY_MAX_WORKERS = 16
"""Beyond this many ranks every rank summing every slot reads too much memory."""


class Reducer:
    """Sums a tensor across all workers in place; `average` also divides by the world size."""

    name = ""

    def __init__(self, world_size: int, group: dist.ProcessGroup | None = None) -> None:
        self.world_size = world_size
        self.group = group
        """The workers' process group (the WorkerContext's)."""

    @waits
    def sum(self, values: torch.Tensor) -> None:
        """`values` <- its sum over all workers (every worker calls this with a tensor of the same shape)."""
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=self.group)

    def average(self, flat: torch.Tensor) -> None:
        """`flat` <- its mean over all workers: the minibatch's gradients and KL."""
        self.sum(flat)
        flat /= self.world_size

    @waits
    def broadcast(self, values: torch.Tensor) -> None:
        """`values` <- rank 0's (the initial parameters)."""
        dist.broadcast(values, src=0, group=self.group)

    def gather(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Every worker's `values` (same shape on all), in rank order."""
        return gather(values, self.world_size, self.group)


@waits
def gather(
    values: torch.Tensor, world_size: int, group: dist.ProcessGroup | None = None
) -> list[torch.Tensor]:
    """Every worker's `values` (same shape and dtype on all), in rank order."""
    out = [torch.empty_like(values) for _ in range(world_size)]
    dist.all_gather(out, values, group=group)
    return out


def gather_json(value, world_size: int, group: dist.ProcessGroup | None = None) -> list:
    """Every worker's JSON-able `value`, in rank order: JSON text in uint8 tensors (what a peer sent is parsed,
    never unpickled). On the backend's device: CPU on gloo, the current CUDA device on nccl."""
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    data = torch.frombuffer(bytearray(json.dumps(value).encode()), dtype=torch.uint8)
    lengths = gather(torch.tensor([data.numel()], device=device), world_size, group)
    longest = int(max(n.item() for n in lengths))
    buffer = torch.zeros(longest, dtype=torch.uint8, device=device)
    buffer[: data.numel()] = data.to(device)
    rows = gather(buffer, world_size, group)
    return [
        json.loads(bytes(row[: int(n.item())].cpu().tolist())) for row, n in zip(rows, lengths, strict=True)
    ]


def broadcast_json(value, group: dist.ProcessGroup | None = None):
    """Rank 0's JSON-able `value` on every worker (others pass anything, e.g. None)."""
    return gather_json(value, dist.get_world_size(group), group)[0]


class AllReduce(Reducer):
    name = "all-reduce"


class AllGather(Reducer):
    """All-gather every rank's buffer, then add them in rank order on each rank."""

    name = "all-gather"

    def __init__(self, world_size: int, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(world_size, group)
        self._gathered: torch.Tensor | None = None

    @waits
    def sum(self, values: torch.Tensor) -> None:
        flat = values.view(-1)
        n = flat.numel()
        if self._gathered is None or self._gathered.numel() < self.world_size * n:
            self._gathered = flat.new_empty(self.world_size * n)
        gathered = self._gathered[: self.world_size * n]
        dist.all_gather_into_tensor(gathered, flat, group=self.group)
        torch.sum(gathered.view(self.world_size, n), dim=0, out=flat)


class NoReduce(Reducer):
    """Gradients are not averaged; `sum` (statistics, the stop signal) stays the base class's all-reduce."""

    name = "none"

    def average(self, flat: torch.Tensor) -> None:
        pass  # each rank keeps its own gradients and KL


class SharedMemory(Reducer):
    """Sums through one shared mapping in /dev/shm: each rank copies its buffer into its slot, publishes the
    round number in its flag, waits until every rank has published, and adds the slots in rank order.

    The slots alternate between two banks: a rank can be at most one round ahead of the slowest (it waits for
    every flag at the end of each round), so it never overwrites a slot another rank still reads. The flag is
    written after the slot and read before the slots; x86's total store order makes that handshake safe without
    fences, which is why other architectures are not offered this strategy.
    """

    name = "shared-memory"
    FLAG_STRIDE = 8  # int64s: one 64-byte cache line per rank's flag
    SPINS_BEFORE_YIELD = 200
    YIELD_S = 0.005
    MIN_SLEEP_S = 50e-6
    MAX_SLEEP_S = 0.001

    def __init__(
        self,
        world_size: int,
        numel: int,
        dtype: torch.dtype,
        timeout_s: float = 600.0,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__(world_size, group)
        self.numel, self.dtype, self.timeout_s = numel, dtype, timeout_s
        self.rank = dist.get_rank(group)
        flag_bytes = world_size * self.FLAG_STRIDE * 8
        # Rank 0 names, creates and sizes the file (readable by this user only); every rank maps it; once all
        # have, it is unlinked (the mappings stay), so nothing is left in /dev/shm however the run ends.
        name = broadcast_json(uuid.uuid4().hex if self.rank == 0 else None, group)
        path = pathlib.Path(f"/dev/shm/mjfleet-reduce-{name}")
        size = mapping_bytes(world_size, numel, dtype)
        if self.rank == 0:
            create_mapping_file(path, size)
        dist.barrier(group=group)
        raw = torch.from_file(str(path), shared=True, size=size, dtype=torch.uint8)
        dist.barrier(group=group)
        if self.rank == 0:
            path.unlink()
        pids = gather_json(os.getpid(), world_size, group)
        self._peers = {rank: pid for rank, pid in enumerate(pids) if rank != self.rank}
        self._flags = raw[:flag_bytes].view(torch.int64)[:: self.FLAG_STRIDE].numpy()
        self._banks = raw[flag_bytes:].view(dtype).view(2, world_size, numel)
        self._round = 0

    @classmethod
    def available(cls, numel: int, dtype: torch.dtype, group: dist.ProcessGroup | None = None) -> bool:
        """Collective: gloo with 2-16 ranks all on this x86 Linux host, with room in /dev/shm for the mapping
        twice over (a full /dev/shm kills the workers with SIGBUS instead of failing cleanly)."""
        world = dist.get_world_size(group)
        if dist.get_backend(group) != "gloo" or not 1 < world <= SHARED_MEMORY_MAX_WORKERS:
            return False
        x86 = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"}
        free = shutil.disk_usage("/dev/shm").free if x86 and os.path.isdir("/dev/shm") else 0
        views = gather_json([platform.node(), free], world, group)  # every rank decides the same
        hosts = {host for host, _ in views}
        return len(hosts) == 1 and min(f for _, f in views) >= 2 * mapping_bytes(world, numel, dtype)

    @waits
    def sum(self, values: torch.Tensor) -> None:
        if values.dtype != self.dtype or values.numel() > self.numel or values.device.type != "cpu":
            return super().sum(values)
        self._round += 1
        bank = self._banks[self._round & 1, :, : values.numel()]
        bank[self.rank].copy_(values.view(-1))
        self._flags[self.rank] = self._round  # after the slot: the other ranks read the slot only after this
        self._wait_for(self._round)
        torch.sum(bank, dim=0, out=values.view(-1))

    def _wait_for(self, round_: int) -> None:
        """Until every rank has published `round_`: spin, then yield the core for `YIELD_S` (a peer usually
        arrives within it: this is the minibatch's critical path), then sleep in growing steps up to
        `MAX_SLEEP_S`, so a rank waiting for a slow or stopped peer leaves its core alone."""
        flags = self._flags
        for _ in range(self.SPINS_BEFORE_YIELD):
            if flags.min() >= round_:
                return
        start = time.monotonic()
        check_at, nap = start + 1.0, self.MIN_SLEEP_S
        while flags.min() < round_:
            now = time.monotonic()
            if now - start < self.YIELD_S:
                os.sched_yield()  # another process may need this core (more workers than cores)
                continue
            time.sleep(nap)
            nap = min(2 * nap, self.MAX_SLEEP_S)
            if now > check_at:
                check_at = now + 1.0
                late = [r for r in range(self.world_size) if flags[r] < round_]
                gone = [r for r in late if r in self._peers and not _alive(self._peers[r])]
                if gone:  # gloo would see the connection drop; here the process has to be looked at
                    raise RuntimeError(f"rank(s) {gone} exited before shared-memory reduction {round_}")
                if now - start > self.timeout_s:
                    raise RuntimeError(
                        f"rank(s) {late} did not reach shared-memory reduction {round_} within {self.timeout_s:.0f} s"
                    )


def choose_reducer(name: str, flat: torch.Tensor, group: dist.ProcessGroup | None = None) -> Reducer:
    """The reducer for `flat` (the gradient buffer) in the workers' process `group`: `name`, or for "auto" the
    cheapest strategy the backend and the workers' placement allow. Collective: every rank calls it."""
    if name not in REDUCERS:
        raise UsageError(f"--agent.ppo.gradient-reducer {name!r}: choose one of {', '.join(REDUCERS)}")
    world, backend = dist.get_world_size(group), dist.get_backend(group)
    if name == "none":
        return NoReduce(world, group)
    if backend == "nccl" and name not in ("auto", "all-reduce"):
        raise UsageError(f"--agent.ppo.gradient-reducer {name}: GPU workers (nccl) average with all-reduce")
    # Collective (every rank learns the same): asked once, whether "auto" or "shared-memory" wants it.
    shared_memory = (
        name in ("auto", "shared-memory")
        and backend == "gloo"
        and flat.device.type == "cpu"
        and SharedMemory.available(flat.numel(), flat.dtype, group)
    )
    if name == "auto":
        if shared_memory:
            name = "shared-memory"
        elif backend == "gloo" and world <= ALL_GATHER_MAX_WORKERS and flat.device.type == "cpu":
            name = "all-gather"
        else:
            name = "all-reduce"
    if name == "shared-memory":
        if not shared_memory:
            raise UsageError(
                "--agent.ppo.gradient-reducer shared-memory needs CPU workers on one x86 Linux host "
                "(gloo, 2-16 workers) with room in /dev/shm"
            )
        return SharedMemory(world, flat.numel(), flat.dtype, group=group)
    if name == "all-gather":
        return AllGather(world, group)
    return AllReduce(world, group)


def create_mapping_file(path: pathlib.Path, size: int) -> None:
    """Create the shared-memory file `path` of `size` bytes: readable and writable by this user only, and never
    an existing file (O_EXCL: not one another user placed there in advance)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def mapping_bytes(world: int, numel: int, dtype: torch.dtype) -> int:
    """Flags (one cache line per rank) and two banks of one slot per rank."""
    element = torch.empty(0, dtype=dtype).element_size()
    return world * SharedMemory.FLAG_STRIDE * 8 + 2 * world * numel * element


def _alive(pid: int) -> bool:
    """Whether process `pid` is running (not gone, not a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        return True  # cannot tell: let the timeout decide
