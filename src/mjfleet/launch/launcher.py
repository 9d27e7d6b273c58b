"""Run a function on the workers of a :class:`~mjfleet.fleet.plan.WorkerPlan`.

One worker in total runs the function in this process. More workers are started with torchrunx's agent: one
agent process per host (over the system's ssh for remote hosts, launch/agents.py), which spawns that host's
workers; the process group (nccl on GPUs, gloo on CPU) exists before the function starts, and rank 0's return
value comes back. Every listener binds one address (loopback on one host) and nothing from the network is
unpickled without the run's token (docs/distributed.md, "Network and trust").

Fail fast: an exception in any worker is printed as ``[rank N] <traceback>`` and ends that worker at
once; its agent then stops the others and sends the launcher the worker's failure record (fleet/failure.py),
from which this process raises :class:`WorkerFailed` naming the rank, its host and its log file.

Console and log files: rank 0's stdout/stderr stream to this console; other ranks show WARNING and
above, prefixed with ``[rank N]``. Per-worker log files go to ``$TORCHRUNX_LOG_DIR`` if that is set, else to
``log_dir`` when given, else to ``default_log_dir`` (``""`` anywhere, or nothing: no files).

Signals (launch/relay.py): on SIGINT/SIGTERM this process passes the signal on to every worker (local ones
directly, remote ones through their agent's ssh connection) so workers can save and stop, waits up to ``grace_s``
seconds, then kills what is left; a second signal kills at once. Nothing it started outlives it.

Several machines (``--hosts h1 h2``) need: passwordless ssh from the launching host to every host (aliases
from ~/.ssh/config work); the same paths and the same virtual environment on every host (agents are started as
``cd <cwd> && exec <sys.executable> -u -m mjfleet.launch.agent``); a filesystem shared by all hosts for the run
directory (only rank 0 writes); open TCP ports between hosts (free ports are picked; nccl/gloo need more).
``--hosts slurm`` takes the node list of the SLURM allocation it runs in. See docs/distributed.md.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from mjfleet.errors import UsageError, first_line
from mjfleet.fleet.failure import USAGE_ERROR, Failure, first_cause
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.launch.logserver import log_file, log_folder
from mjfleet.launch.relay import SignalRelay
from mjfleet.launch.worker import MASTER_ENV, PREFIXED_ATTR, log_level_from_env, worker_main

R = TypeVar("R")

WORKER_ENV_PATTERNS = (
    "MUJOCO*",
    "WARP*",
    "WANDB*",
    "OMP*",
    "MKL*",
    "MJFLEET*",
    "GLOO*",
    "HOME",
    "USER",
    "TMPDIR",
)
"""Environment variables copied to workers on top of torchrunx's defaults (PATH, PYTHON*, CUDA*, ...)."""

DEFAULT_GRACE_S = 30.0
DEFAULT_HANG_TIMEOUT_S = 120.0
DEFAULT_HANG_FIRST_TIMEOUT_S = 600.0
"""Before a rank's first iteration ends: warp compiles its kernels then (minutes for a large model, cold cache)."""


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
    rendezvous_host: str | None = None,
    hang_timeout_s: float = 0.0,
    hang_first_timeout_s: float = DEFAULT_HANG_FIRST_TIMEOUT_S,
    **kwargs: Any,
) -> R:
    """Call ``fn(*args, **kwargs)`` on every worker of ``plan`` and return rank 0's result.

    Several workers write log files to $TORCHRUNX_LOG_DIR if set, else ``log_dir`` if given, else
    ``default_log_dir`` (`worker_log_dir`).

    ``fn`` must be a picklable top-level function (workers import its module by name); it finds its rank
    and device with ``WorkerContext.from_env(plan)``. Raises :class:`WorkerFailed` when a worker fails and
    :class:`Interrupted` after SIGINT/SIGTERM.

    Several workers: a rank that makes no progress for ``hang_timeout_s`` seconds (``hang_first_timeout_s``
    before its first iteration ends; 0: not watched) ends the run as a "hung" failure (fleet/liveness.py).
    """
    if plan.in_process:
        return _run_in_process(fn, args, kwargs)
    files = worker_log_dir(log_dir, default_log_dir)
    hang = (hang_timeout_s, hang_first_timeout_s)
    return _run_with_agents(plan, fn, args, kwargs, files, grace_s, rendezvous_host, hang)


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


# --- several workers: one agent per host, which spawns its workers -------------------------------------


def _run_with_agents(
    plan: WorkerPlan,
    fn: Callable[..., R],
    args: tuple,
    kwargs: dict,
    files: Path | None,
    grace_s: float,
    rendezvous_host: str | None = None,
    hang: tuple[float, float] = (0.0, 0.0),
) -> R:
    import cloudpickle
    import torch.distributed as dist

    from mjfleet.launch.agents import AgentEnded, FleetFailure, run_agents
    from mjfleet.launch.hosts import rendezvous_address, resolve_hosts
    from mjfleet.launch.seam import AgentFailedError, LauncherPayload

    try:
        file_level = log_level_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    hosts = resolve_hosts(plan.hosts)
    address = rendezvous_address(hosts, rendezvous_host)
    # Rank 0's store: on this machine when host 0 is, else at the address host 0 was reached at.
    master = address if hosts[0].local else hosts[0].address
    # Pickled here, unpickled in the worker: an unimportable module then fails as a worker error with a
    # traceback, instead of killing the torchrunx agent, and unpicklable arguments fail before anything starts.
    payload = cloudpickle.dumps((fn, args, kwargs))
    ranks = [
        list(range(i * plan.workers_per_host, (i + 1) * plan.workers_per_host)) for i in range(len(hosts))
    ]
    launch = LauncherPayload(
        fn=partial(worker_main, plan, payload),
        hostnames=list(plan.hosts),
        worker_global_ranks=ranks,
        worker_world_size=plan.world_size,
        backend=plan.backend,
        worker_timeout=600,
    )
    env = {k: v for k, v in os.environ.items() if any(fnmatch.fnmatch(k, p) for p in _copied_patterns())}
    env |= worker_env(plan) | {MASTER_ENV: master}
    folder = log_folder(files) if files else None
    handlers = _log_handlers(plan.hosts, plan.workers_per_host, folder, file_level)
    hint = (
        f" (worker logs in {folder})" if folder else " (set TORCHRUNX_LOG_DIR to keep per-worker log files)"
    )
    several = len(hosts) > 1

    result: Any = None
    failure: WorkerFailed | UsageError | None = None
    with SignalRelay(grace_s) as relay:  # on leaving it, no process started here is left running
        try:
            returns = run_agents(
                hosts, plan.workers_per_host, address, launch, env, handlers, relay.add_agents, hang=hang
            )
            result = returns[0][0]
        except FleetFailure as exc:
            failure = _failure_from(exc.failures, plan, folder, several)
        except AgentEnded as exc:
            failure = WorkerFailed(f"{exc}{hint}", exc.rank)
        except AgentFailedError:
            failure = WorkerFailed(
                f"a torchrunx agent process stopped or lost contact with the launcher{hint}"
            )
        except (dist.DistError, OSError) as exc:  # agents could not be started or reached
            failure = WorkerFailed(
                f"could not start the workers on {', '.join(plan.hosts)}: {first_line(exc)} "
                "(every host must resolve and accept passwordless ssh; see docs/distributed.md)"
            )
    if relay.signum is not None:
        raise Interrupted(relay.signum, result) from failure
    if failure is not None:
        raise failure
    return result


def _copied_patterns() -> tuple[str, ...]:
    from mjfleet.launch.seam import DEFAULT_ENV_VARS_FOR_COPY

    return DEFAULT_ENV_VARS_FOR_COPY + WORKER_ENV_PATTERNS


def _failure_from(
    failures: list[Failure], plan: WorkerPlan, folder: Path | None, several_hosts: bool
) -> WorkerFailed | UsageError:
    """The error to raise for the workers' failure records: their cause (`first_cause`), with its log file. A
    worker's UsageError (bad input found only where the work runs, e.g. a checkpoint that does not fit the
    policy) stays one: one line, exit status 2, as with one worker."""
    cause = first_cause(failures)
    if cause.kind == USAGE_ERROR:
        return UsageError(cause.message(several_hosts))
    no_log_file = " (set TORCHRUNX_LOG_DIR to keep per-worker log files)"
    if folder is not None and cause.rank is not None and cause.host in plan.hosts:
        cause = replace(cause, log_file=str(log_file(folder, cause.host, cause.rank % plan.workers_per_host)))
    elif folder is not None:
        no_log_file = f" (worker logs in {folder})"
    return WorkerFailed(cause.message(several_hosts, no_log_file), cause.rank)


# --- logs: handlers of the launcher's log server (launch/logserver.py) ------------------------------------


def _log_handlers(
    hosts: tuple[str, ...], workers_per_host: int, folder: Path | None, file_level: int
) -> list[logging.Handler]:
    from mjfleet.launch.logserver import file_handlers

    handlers: list[logging.Handler] = [_ConsoleHandler(hosts, workers_per_host)]
    if folder is not None:
        handlers += file_handlers(hosts, workers_per_host, folder, file_level)
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
