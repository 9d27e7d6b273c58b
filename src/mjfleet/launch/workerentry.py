"""The entry point of every worker process, started by mjfleet's agent through torch elastic.

torchrunx's worker entry point, with the same steps, except: logs go to the launcher authenticated and as JSON,
rank 0's store listens on the master address only (not every interface), the master address is the launcher's
choice rather than the first agent's host name, and the worker dies with its agent.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import traceback

MASTER_ENV = "MJFLEET_MASTER_ADDR"
"""The address rank 0's store binds and every worker connects to (the launcher's choice, not a host name)."""
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent ends (no-op elsewhere)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


def worker_entrypoint(serialized_worker_args: bytes) -> object:
    from mjfleet.launch import liveness
    from mjfleet.launch.failure import from_exception
    from mjfleet.launch.group import TOKEN_ENV, store
    from mjfleet.launch.logserver import send_logs_to
    from mjfleet.launch.seam import WorkerArgs, redirect_stdio_to_logger

    die_with_parent()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the agent ignores it; a worker must not
    args = WorkerArgs.from_bytes(serialized_worker_args)
    token = os.environ.pop(TOKEN_ENV, "")  # the run's function has no use for it
    send_logs_to(args.hostname, args.local_rank, args.logger_hostname, args.logger_port, token)
    redirect_stdio_to_logger(logging.getLogger())
    master = os.environ.get(MASTER_ENV) or args.master_hostname
    os.environ.update(
        RANK=str(args.rank),
        LOCAL_RANK=str(args.local_rank),
        GROUP_RANK=str(args.node_rank),
        LOCAL_WORLD_SIZE=str(args.local_world_size),
        WORLD_SIZE=str(args.world_size),
        MASTER_ADDR=master,
        MASTER_PORT=str(args.master_port),
    )
    if args.backend is not None:
        import datetime

        from mjfleet.launch.worker import join_process_group

        kv = store(master, args.master_port, args.world_size, args.rank == 0, args.timeout)
        join_process_group(
            args.backend,
            args.rank,
            args.world_size,
            store=kv,
            timeout=datetime.timedelta(seconds=args.timeout),
        )
    try:
        result = args.function()
        liveness.finished()  # it now waits for the other workers to end: not a hang
        return result
    except Exception as e:  # noqa: BLE001 - reported to the agent, as torchrunx does
        traceback.print_exc()
        return from_exception(e, args.rank, args.hostname)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
