"""Run a function on the workers of a :class:`~mjfleet.launch.devices.WorkerPlan`.

One worker in total runs the function in this process. More workers are started with torchrunx: one
agent process per host (over ssh for remote hosts), which spawns that host's workers; the process group
(nccl on GPUs, gloo on CPU) exists before the function starts, and rank 0's return value comes back.

Fail fast: an exception in any worker is printed as ``[rank N] <traceback>`` and ends that worker at
once; its agent then stops the others, and this process raises :class:`WorkerFailed` naming the rank.

Console and log files: rank 0's stdout/stderr stream to this console; other ranks show WARNING and
above, prefixed with ``[rank N]``. Per-worker log files go to ``$TORCHRUNX_LOG_DIR`` if that is set, else to
``log_dir`` when given, else to ``default_log_dir`` (``""`` anywhere, or nothing: no files).

Signals (launch/relay.py): on SIGINT/SIGTERM this process passes the signal on to every process it started (so
workers can save and stop), waits up to ``grace_s`` seconds, then kills what is left; a second signal kills at
once. Nothing it started outlives it.

Several machines (``--hosts h1 h2``) need: passwordless ssh from the launching host to every host;
the same paths and the same virtual environment on every host (workers are started as
``cd <cwd> && <sys.executable> -m torchrunx``); a filesystem shared by all hosts for the run directory
(only rank 0 writes); open TCP ports between hosts (torchrunx picks free ports; nccl/gloo need more).
``--hosts slurm`` takes the node list of the SLURM allocation it runs in. See docs/distributed.md.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from mjfleet.errors import UsageError, first_line
from mjfleet.launch.devices import WorkerPlan
from mjfleet.launch.relay import SignalRelay
from mjfleet.launch.worker import PREFIXED_ATTR, log_level_from_env, worker_main

R = TypeVar("R")

WORKER_ENV_PATTERNS = ("MUJOCO*", "WARP*", "WANDB*", "OMP*", "MKL*", "MJFLEET*", "HOME", "USER", "TMPDIR")
"""Environment variables copied to workers on top of torchrunx's defaults (PATH, PYTHON*, CUDA*, ...)."""

DEFAULT_GRACE_S = 30.0


class WorkerFailed(Exception):
    """The workers failed or could not be started; the message is one line and names the rank when known."""

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank


class Interrupted(KeyboardInterrupt):
    """The run was stopped by SIGINT or SIGTERM; every worker process has ended.

    ``result`` is rank 0's return value when the workers still finished normally, else None.
    """

    def __init__(self, signum: int, result: Any = None) -> None:
        self.signum = signum
        self.result = result
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def run_workers(
    plan: WorkerPlan,
    fn: Callable[..., R],
    *args: Any,
    log_dir: str | os.PathLike[str] | None = None,
    default_log_dir: str | os.PathLike[str] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    **kwargs: Any,
) -> R:
    """Call ``fn(*args, **kwargs)`` on every worker of ``plan`` and return rank 0's result.

    Several workers write log files to $TORCHRUNX_LOG_DIR if set, else ``log_dir`` if given, else
    ``default_log_dir`` (`worker_log_dir`).

    ``fn`` must be a picklable top-level function (workers import its module by name); it finds its rank
    and device with ``WorkerContext.from_env(plan)``. Raises :class:`WorkerFailed` when a worker fails and
    :class:`Interrupted` after SIGINT/SIGTERM.
    """
    if plan.in_process:
        return _run_in_process(fn, args, kwargs)
    return _run_with_torchrunx(plan, fn, args, kwargs, worker_log_dir(log_dir, default_log_dir), grace_s)


def worker_log_dir(
    log_dir: str | os.PathLike[str] | None, default: str | os.PathLike[str] | None = None
) -> Path | None:
    """Where per-worker log files go: $TORCHRUNX_LOG_DIR if set, else ``log_dir`` when given (a flag), else
    ``default``; None ("" anywhere) when disabled.

    The variable wins so that a job environment (a cluster script, CI) can redirect every command it runs.
    """
    chosen = os.environ.get("TORCHRUNX_LOG_DIR")
    if chosen is None:
        chosen = log_dir if log_dir is not None else default
    return Path(chosen) if chosen is not None and str(chosen) else None


def worker_env(plan: WorkerPlan) -> dict[str, str]:
    """Environment variables every worker gets in addition to the copied ones."""
    # A CPU worker sees no GPU, so it never spends time and GPU memory on a CUDA context; workers on one host
    # split its cores (plan.threads_per_worker) instead of each starting one thread per core.
    return {
        "CUDA_VISIBLE_DEVICES": plan.cuda_visible_devices or "",
        "OMP_NUM_THREADS": str(plan.threads_per_worker),
    }


# --- one worker: this process -------------------------------------------------------------------------


def _run_in_process(fn: Callable[..., R], args: tuple, kwargs: dict) -> R:
    # No RANK/WORLD_SIZE to set: WorkerContext.from_env knows an in-process plan is rank 0 of 1.
    return fn(*args, **kwargs)


# --- several workers: torchrunx -----------------------------------------------------------------------


def _run_with_torchrunx(
    plan: WorkerPlan,
    fn: Callable[..., R],
    args: tuple,
    kwargs: dict,
    files: Path | None,
    grace_s: float,
) -> R:
    import cloudpickle
    import torch.distributed as dist
    import torchrunx
    from paramiko import SSHException

    launcher = torchrunx.Launcher(
        hostnames=list(plan.hosts),
        workers_per_host=plan.workers_per_host,
        backend=plan.backend,
        copy_env_vars=torchrunx.DEFAULT_ENV_VARS_FOR_COPY + WORKER_ENV_PATTERNS,
        extra_env_vars=worker_env(plan),
    )
    try:
        file_level = log_level_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    launcher.set_logging_handlers(
        partial(_log_handlers, plan.hosts, plan.workers_per_host, files, file_level)
    )
    # Pickled here, unpickled in the worker: an unimportable module then fails as a worker error with a
    # traceback, instead of killing the torchrunx agent, and unpicklable arguments fail before anything starts.
    payload = cloudpickle.dumps((fn, args, kwargs))
    hint = f" (worker logs in {files})" if files else " (set TORCHRUNX_LOG_DIR to keep per-worker log files)"

    result: Any = None
    failure: WorkerFailed | UsageError | None = None
    with SignalRelay(grace_s) as relay:  # on leaving it, no process started here is left running
        try:
            result = launcher.run(worker_main, plan, payload).rank(0)
        except torchrunx.WorkerFailedError as exc:
            failure = _failure_from_message(str(exc), hint)
        except torchrunx.AgentFailedError:
            failure = WorkerFailed(
                f"a torchrunx agent process stopped or lost contact with the launcher{hint}"
            )
        except (dist.DistError, OSError, SSHException) as exc:  # agents could not be started or reached
            first = first_line(exc)
            failure = WorkerFailed(
                f"could not start the workers on {', '.join(plan.hosts)}: {first} "
                "(every host must resolve and accept passwordless ssh; see docs/distributed.md)"
            )
    if relay.signum is not None:
        raise Interrupted(relay.signum, result) from failure
    if failure is not None:
        raise failure
    return result


def _failure_from_message(message: str, hint: str) -> WorkerFailed | UsageError:
    """Turn torch elastic's failure message into a WorkerFailed; workers write "[rank N] <error>". A worker's
    UsageError (bad input found only where the work runs, e.g. a checkpoint that does not fit the policy) stays
    one: one line, exit status 2, as with one worker."""
    match = re.match(r"\[rank (\d+)\] (.*)", message.strip(), re.DOTALL)
    if match:
        rank = int(match.group(1))
        usage = re.match(r"UsageError: (.*)", match.group(2))
        if usage:
            return UsageError(usage.group(1).splitlines()[0])
        return WorkerFailed(f"worker rank {rank} failed: {match.group(2).splitlines()[0]}{hint}", rank)
    if message.startswith("To enable traceback"):  # torch elastic's text for a bare non-zero exit
        message = "it exited without a Python error (killed, out of memory, or os._exit)"
    first = message.splitlines()[0] if message else "unknown error"
    return WorkerFailed(f"a worker failed: {first}{hint}")


# --- logs: built inside torchrunx's log server (a fork of this process) --------------------------------


def _log_handlers(
    hosts: tuple[str, ...], workers_per_host: int, files: Path | None, file_level: int
) -> list[logging.Handler]:
    from torchrunx.utils.log_handling import file_handlers

    handlers: list[logging.Handler] = [_ConsoleHandler(hosts, workers_per_host)]
    if files is not None:
        handlers += file_handlers(
            list(hosts), [workers_per_host] * len(hosts), log_dir=files, log_level=file_level
        )
    return handlers


class _ConsoleHandler(logging.Handler):
    """Rank 0's output as it is (stdout lines to stdout); other ranks' warnings and errors, prefixed."""

    def __init__(self, hosts: tuple[str, ...], workers_per_host: int) -> None:
        super().__init__()
        self._first_rank = {host: i * workers_per_host for i, host in enumerate(hosts)}
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        local_rank = getattr(record, "local_rank", None)
        host = getattr(record, "hostname", None)
        if local_rank is None or host not in self._first_rank:
            return  # agent records: log files only
        rank = self._first_rank[host] + local_rank
        if record.levelno < (logging.INFO if rank == 0 else logging.WARNING):
            return
        try:
            text = self.format(record)
            if rank != 0 and not getattr(record, PREFIXED_ATTR, False):
                text = "\n".join(f"[rank {rank}] {line}" for line in text.splitlines())
            # torchrunx logs worker stdout lines at INFO and stderr lines at ERROR.
            stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(text + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)
