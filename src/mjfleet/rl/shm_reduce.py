"""Summing one CPU buffer across the worker processes of one host through shared memory instead of gloo.

Between two CPU workers on one machine, a gloo collective of the PPO gradients (~9,300 floats for Cartpole) takes
0.2-0.4 ms when both arrive together and 2 ms or more one time in ten (its messages cross loopback TCP and wake a
background thread on a core that is busy with the other worker). The update issues one such collective per
minibatch, and the tail was ~9% of a 2-worker iteration. Here each rank copies its buffer into its own slot of a
shared mapping, publishes the round number in its own flag, waits until every rank has published, and sums the
slots in rank order, so every rank computes the same bits. The slots alternate between two banks: a rank can
only be one round ahead of the slowest one (it waits for all flags at the end of each round), so it never
overwrites a slot another rank is still reading.

The flag is written after the slot and read before the slots: on x86 stores become visible in program order
and loads are not reordered with older loads (total store order), which is what makes the handshake safe
without explicit fences. Other architectures keep gloo (`SharedMemoryReduce.available`).
"""

from __future__ import annotations

import os
import pathlib
import platform
import shutil
import time
import uuid

import torch
import torch.distributed as dist

_FLAG_STRIDE = 8  # int64s: one 64-byte cache line per rank's flag
_SPINS_BEFORE_YIELD = 200
_X86 = {"x86_64", "amd64", "i386", "i686"}
MAX_WORKERS = 16
"""Beyond this many ranks every rank summing every slot reads too much memory; gloo's ring takes over."""


class SharedMemoryReduce:
    """`reduce(buffer)`: buffer <- sum of every rank's buffer, in place (collective: every rank calls it with a
    buffer of the same size, at most `numel` elements of `dtype`)."""

    def __init__(self, numel: int, dtype: torch.dtype = torch.float32, timeout_s: float = 600.0) -> None:
        self.numel, self.dtype = numel, dtype
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.timeout_s = timeout_s
        flag_bytes = self.world * _FLAG_STRIDE * 8
        size = _mapping_bytes(self.world, numel, dtype)
        # Rank 0 names and sizes the file; every rank maps it; once all have, it is unlinked (the mappings stay),
        # so nothing is left in /dev/shm however the run ends.
        names = [f"/dev/shm/mjfleet-reduce-{uuid.uuid4().hex}" if self.rank == 0 else None]
        dist.broadcast_object_list(names, src=0)
        path = pathlib.Path(names[0])
        if self.rank == 0:
            with open(path, "wb") as f:
                f.truncate(size)
        dist.barrier()
        raw = torch.from_file(str(path), shared=True, size=size, dtype=torch.uint8)
        dist.barrier()
        if self.rank == 0:
            path.unlink()
        pids: list[int | None] = [None] * self.world
        dist.all_gather_object(pids, os.getpid())
        self._peers = {rank: pid for rank, pid in enumerate(pids) if rank != self.rank}
        self._flags = raw[:flag_bytes].view(torch.int64)[::_FLAG_STRIDE].numpy()
        self._banks = raw[flag_bytes:].view(dtype).view(2, self.world, numel)
        self._round = 0

    @staticmethod
    def supported_here() -> bool:
        """x86 Linux with /dev/shm, and not switched off (MJFLEET_SHM_REDUCE=0)."""
        return (
            os.environ.get("MJFLEET_SHM_REDUCE", "1") != "0"
            and platform.machine().lower() in _X86
            and os.path.isdir("/dev/shm")
        )

    @classmethod
    def available(cls, numel: int, dtype: torch.dtype = torch.float32) -> bool:
        """Whether the current process group uses it for `numel` elements: gloo, 2-16 ranks all on this host,
        `supported_here`, and /dev/shm with room for the mapping twice over (a full /dev/shm would kill the
        workers with SIGBUS, not fail cleanly). Collective: every rank calls it and all get the same answer."""
        world = dist.get_world_size() if dist.is_initialized() else 1
        if not (dist.is_initialized() and dist.get_backend() == "gloo" and 1 < world <= MAX_WORKERS):
            return False
        if not cls.supported_here():
            return False
        free = shutil.disk_usage("/dev/shm").free
        views: list[tuple[str, int] | None] = [None] * world
        dist.all_gather_object(views, (platform.node(), free))  # collective: every rank decides the same
        hosts = {host for host, _ in views}  # type: ignore[misc]
        room = min(f for _, f in views)  # type: ignore[misc]
        return len(hosts) == 1 and room >= 2 * _mapping_bytes(world, numel, dtype)

    def reduce(self, buffer: torch.Tensor) -> None:
        """Sum `buffer` over the ranks, in place: the gradients after every minibatch, and once per iteration the
        episode statistics and the stop signal (FleetPPO.sum_across_workers). Round numbers count every call."""
        self._round += 1
        bank = self._banks[self._round & 1, :, : buffer.numel()]
        bank[self.rank].copy_(buffer.view(-1))
        self._flags[self.rank] = self._round  # after the slot: the other ranks read the slot only after this
        self._wait_for(self._round)
        torch.sum(bank, dim=0, out=buffer.view(-1))

    def _wait_for(self, round_: int) -> None:
        flags = self._flags
        spins = 0
        deadline = time.monotonic() + self.timeout_s
        while flags.min() < round_:
            spins += 1
            if spins < _SPINS_BEFORE_YIELD:
                continue
            os.sched_yield()  # another process may need this core (more workers than cores)
            if spins % 10_000 == 0:
                late = [r for r in range(self.world) if flags[r] < round_]
                gone = [r for r in late if r in self._peers and not _alive(self._peers[r])]
                if gone:  # gloo would see the connection drop; here the process has to be looked at
                    raise RuntimeError(f"rank(s) {gone} exited before shared-memory reduction {round_}")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"rank(s) {late} did not reach shared-memory reduction {round_} within {self.timeout_s:.0f} s"
                    )


def _mapping_bytes(world: int, numel: int, dtype: torch.dtype) -> int:
    """Flags (one cache line per rank) and two banks of one slot per rank."""
    return world * _FLAG_STRIDE * 8 + 2 * world * numel * torch.empty(0, dtype=dtype).element_size()


def _alive(pid: int) -> bool:
    """Whether process `pid` is running (not gone, not a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        return True  # cannot tell: let the timeout decide
