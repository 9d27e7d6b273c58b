"""The shared-memory reducer when a peer is gone: two real processes in one gloo group (no simulator needed)."""

import os
import pathlib
import platform

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mjfleet.fleet.reduce import SharedMemory


def _peer_exits(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    reduce = SharedMemory(2, 8, torch.float32, timeout_s=120.0)
    buffer = torch.ones(8)
    reduce.sum(buffer)  # one round together
    if rank == 0:
        os._exit(0)  # gone without reaching the next round (and without gloo's clean-up, like a crash)
    try:
        reduce.sum(buffer)
        message = "returned"
    except RuntimeError as exc:
        message = str(exc)
    pathlib.Path(out).write_text(f"{buffer.tolist()}|{message}")
    os._exit(0)  # gloo's threads must not be torn down with a vanished peer (that aborts the process)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the shared-memory reducer needs x86 Linux")
def test_a_rank_that_exits_is_reported_long_before_the_timeout(tmp_path):
    out = tmp_path / "rank1.txt"
    mp.spawn(_peer_exits, args=(str(tmp_path / "store"), str(out)), nprocs=2)
    summed, message = out.read_text().split("|")
    assert summed == str([2.0] * 8)  # the first round summed both ranks
    assert message == "rank(s) [0] exited before shared-memory reduction 2"


def test_the_mapping_file_is_created_for_this_user_only_and_never_reused(tmp_path):
    """O_CREAT | O_EXCL with mode 0600: nobody else may read the gradients, and a file someone placed at the name
    beforehand is refused rather than shared."""
    import stat

    from mjfleet.fleet.reduce import create_mapping_file

    path = tmp_path / "mjfleet-reduce-test"
    create_mapping_file(path, 4096)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_size == 4096
    with pytest.raises(FileExistsError):
        create_mapping_file(path, 4096)


class _Spinning(SharedMemory):
    """The baseline: a waiting rank that never sleeps, only spins and yields its core (what the reducer does for
    its first `YIELD_S`)."""

    YIELD_S = float("inf")


def _peer_is_late(rank: int, store: str, out: str, late_s: float) -> None:
    import time

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=3)
    reduce = (_Spinning if rank == 2 else SharedMemory)(3, 8, torch.float32, timeout_s=120.0)
    buffer = torch.ones(8)
    reduce.sum(buffer)
    if rank == 0:
        time.sleep(late_s)  # a slow peer (rank 0 evaluating, or stopped)
    cpu = time.thread_time()  # this thread's alone: the reducer waits in it, gloo's threads are not counted
    reduce.sum(buffer)
    pathlib.Path(out).with_suffix(f".{rank}").write_text(f"{time.thread_time() - cpu}")
    dist.barrier()
    os._exit(0)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the shared-memory reducer needs x86 Linux")
def test_a_rank_waiting_for_a_late_peer_sleeps_instead_of_spinning(tmp_path):
    """Ranks 1 and 2 wait for rank 0 at the same time, on the same machine: rank 1 with the reducer, rank 2 with a
    copy that only spins. What spinning costs here and now is measured beside the rank under test, so a busy
    machine slows both rather than failing the test; a reducer that spun would cost about what the copy does."""
    out = tmp_path / "cpu"
    mp.spawn(_peer_is_late, args=(str(tmp_path / "store"), str(out), 2.0), nprocs=3)
    sleeping, spinning = (float(out.with_suffix(f".{rank}").read_text()) for rank in (1, 2))
    # Sleeping after 5 ms costs a few percent of the wait (about 4% of the spinning copy's here). Two spinning
    # ranks side by side get about equal shares, so half is far from both.
    assert sleeping < 0.5 * spinning, (
        f"CPU in the same wait: {sleeping:.3f} s waiting, {spinning:.3f} s spinning"
    )
