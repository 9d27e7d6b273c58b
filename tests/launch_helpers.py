"""Worker functions for the launcher tests. Workers import them by module name, so they live in a module
on PYTHONPATH (the tests put this directory there) rather than inside a test file."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from mjfleet.fleet.context import WorkerContext, seed_for, setup_worker
from mjfleet.fleet.plan import WorkerPlan

FAIL_FAST_NO_HANG_S = 120.0
"""The no-hang limit for a failing worker to end a run of 2 CPU workers. Fail-fast takes seconds (about 7 s on 2
cores); without it the run would wait for gloo's 600 s process-group timeout. A hang guard, generous for slow
machines, not a timing."""


@contextlib.contextmanager
def within_no_hang_limit(what: str, limit_s: float = FAIL_FAST_NO_HANG_S) -> Iterator[None]:
    """Fail the test when the block, once it has finished, took longer than the no-hang limit."""
    started = time.monotonic()
    yield
    took = time.monotonic() - started
    assert took < limit_s, (
        f"{what} took {took:.0f} s, past the {limit_s:.0f} s no-hang limit (a slow failure)"
    )


def report(plan: WorkerPlan, base_seed: int) -> dict:
    """Sum every rank's (rank + 1) with all_reduce and describe this worker."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    total = torch.tensor([float(ctx.rank + 1)])
    if dist.is_initialized():
        dist.all_reduce(total)
    ranks = [None] * ctx.world_size
    if dist.is_initialized():
        dist.all_gather_object(ranks, ctx.rank)
    else:
        ranks = [ctx.rank]
    print(f"hello from rank {ctx.rank}", flush=True)
    return {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "device": ctx.device,
        "seed": seed_for(base_seed, ctx),
        "all_ranks": ranks,
        "sum": total.item(),
        "threads": torch.get_num_threads(),
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
    }


def fail_on_rank(plan: WorkerPlan, bad_rank: int) -> str:
    """`bad_rank` raises at once; the others block in a collective that can never complete."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    if ctx.rank == bad_rank:
        raise ValueError(f"boom on purpose in rank {ctx.rank}")
    dist.all_reduce(torch.ones(1))
    return "unreachable"


def killed_on_rank(plan: WorkerPlan, bad_rank: int) -> str:
    """`bad_rank` is killed by SIGKILL (no Python error, no error file); the others block in a collective."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    if ctx.rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1))
    return "unreachable"


def usage_error_on_every_rank(plan: WorkerPlan) -> str:
    """Every rank finds the user's input unusable (as train's workers do with a checkpoint that does not fit)."""
    from mjfleet.errors import UsageError

    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    raise UsageError(f"checkpoint x.pt does not fit this task's policy (rank {ctx.rank})")


def warn_and_print(plan: WorkerPlan) -> int:
    """Every rank prints a line to stdout and one to stderr."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    print(f"stdout line from rank {ctx.rank}", flush=True)
    print(f"stderr line from rank {ctx.rank}", file=sys.stderr, flush=True)
    dist.barrier()
    return ctx.rank


def wait_forever(plan: WorkerPlan, ready_dir: str) -> None:
    """Mark this worker as started (a file named after its pid), then sleep until stopped."""
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    Path(ready_dir, f"rank{ctx.rank}.pid").write_text(str(os.getpid()))
    while True:
        time.sleep(0.2)


def ignore_signals_forever(plan: WorkerPlan, ready_dir: str) -> None:
    """Like wait_forever, but deaf to SIGINT and SIGTERM: only a kill ends it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    wait_forever(plan, ready_dir)
