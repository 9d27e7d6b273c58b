"""A worker process from start to end: what mjfleet's agent starts through torch elastic on every host.

`worker_entrypoint` is torchrunx's worker entry point with the same steps, except: logs go to the launcher
authenticated and as JSON, rank 0's store listens on the master address only (not every interface), the master
address is the launcher's choice rather than the first agent's host name, and the worker dies with its agent.
It then calls `worker_main`, which runs the launcher's function and turns any failure into a record for the
agent (fleet/failure.py) and a prompt exit. What the function does inside the worker (its context, process group,
reducers, liveness) is mjfleet.fleet's.
"""

from __future__ import annotations

import ctypes
import datetime
import logging
import os
import signal
import sys
import time
import traceback
from logging.handlers import SocketHandler
from typing import Any, NoReturn

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import get_error_handler

from mjfleet.fleet import liveness
from mjfleet.fleet.context import join_process_group
from mjfleet.fleet.failure import LOST_PEER, USAGE_ERROR, from_exception, summary
from mjfleet.fleet.plan import WorkerPlan

MASTER_ENV = "MJFLEET_MASTER_ADDR"
"""The address rank 0's store binds and every worker connects to (the launcher's choice, not a host name)."""
FAILURE_EXIT_CODE = 1
LOST_PEER_DELAY_S = 3.0
"""How long a worker whose collective failed waits before reporting: long enough for the agent (which
polls every second) to see the worker that failed first, so that one is named as the cause."""

PREFIXED_ATTR = "mjfleet_rank_prefixed"
"""Log-record attribute marking a message that already starts with "[rank N]" (see launcher's console)."""
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent ends (no-op elsewhere)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


def worker_entrypoint(serialized_worker_args: bytes) -> object:
    """torch elastic's entry point of a worker: its environment, logs and process group, then the function
    (`worker_main`, which never raises: it ends the process on any failure)."""
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
        kv = store(master, args.master_port, args.world_size, args.rank == 0, args.timeout)
        timeout = datetime.timedelta(seconds=args.timeout)
        join_process_group(args.backend, args.rank, args.world_size, store=kv, timeout=timeout)
    try:
        result = args.function()
        liveness.finished()  # it now waits for the other workers to end: not a hang
        return result
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def worker_main(plan: WorkerPlan, payload: bytes) -> Any:
    """Entry point of every torchrunx worker: run the pickled ``(fn, args, kwargs)``, fail fast on errors.

    Unpickling happens here rather than in the torchrunx agent, so a function whose module cannot be
    imported is reported like any other worker error. Any exception is printed as "[rank N] <traceback>" (a
    UsageError, the user's to fix, as "[rank N] UsageError: <message>"; Ctrl-C as "[rank N] interrupted"),
    recorded as this process's failure record for the agent (fleet/failure.py, in torch elastic's error
    file), and the process
    exits at once with a non-zero code: the agent then stops the other workers instead of letting them
    wait in a collective until the process-group timeout. Only rank 0's return value is sent back.
    """
    import cloudpickle

    # Worker stdout is a pipe to torchrunx's log forwarder; line buffering keeps rank 0's prints live.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)
    rank = int(os.environ.get("RANK", "0"))
    # torchrunx ships every record at or above the root level to the launcher; DEBUG chatter from libraries
    # would cost socket traffic only to be dropped there.
    logging.getLogger().setLevel(min(logging.INFO, log_level_from_env()))
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        result = fn(*args, **kwargs)
    except SystemExit as exc:
        if exc.code in (None, 0):
            result = None
        else:
            _fail(rank, exc, FAILURE_EXIT_CODE)
    except KeyboardInterrupt as exc:
        # 128 + the signal that stopped training (mjfleet's Interrupted carries it), as the launcher exits
        _fail(rank, exc, 128 + int(getattr(exc, "signum", signal.SIGINT)))
    except BaseException as exc:  # noqa: BLE001 - every failure must end this process promptly
        _fail(rank, exc, FAILURE_EXIT_CODE)
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the work is done; a teardown hiccup must not turn it into a failure
            pass
    return result if rank == 0 else None


def log_level_from_env() -> int:
    """TORCHRUNX_LOG_LEVEL (a level name or number; default INFO), the level of the worker log files."""
    value = os.environ.get("TORCHRUNX_LOG_LEVEL", "INFO")
    if value.isdigit():
        return int(value)
    level = logging.getLevelNamesMapping().get(value)
    if level is None:
        raise ValueError(f"TORCHRUNX_LOG_LEVEL={value!r}: use a level name like INFO or DEBUG, or a number")
    return level


def _fail(rank: int, exc: BaseException, exit_code: int) -> NoReturn:
    record = from_exception(exc, rank)
    if record.kind == LOST_PEER:
        # Most likely another worker died and took the collective down with it. Give the agent time to
        # notice that worker first; it stops this one meanwhile, sparing the console a second traceback.
        time.sleep(LOST_PEER_DELAY_S)
    if isinstance(exc, KeyboardInterrupt):
        report = f"[rank {rank}] interrupted"  # a traceback per worker would only bury the cause
    elif record.kind == USAGE_ERROR:  # the user's to fix: one line, which the launcher raises again as such
        report = f"[rank {rank}] {summary(exc)}"
    else:
        report = f"[rank {rank}] " + "".join(traceback.format_exception(exc)).rstrip()
    # torch elastic's error file, which the agent reads back (fleet/failure.py: from_process_failure)
    get_error_handler().record_exception(record.as_exception())
    root = logging.getLogger()
    if any(isinstance(h, SocketHandler) for h in root.handlers):
        # Logged directly (synchronously over torchrunx's log socket): text written to stderr goes through
        # a pipe and a reader thread, and would be lost by the os._exit below.
        root.error(report, extra={PREFIXED_ATTR: True})
    else:
        print(report, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(exit_code)
