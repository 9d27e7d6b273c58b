"""Run a function on the workers of a :class:`~mjfleet.launch.devices.WorkerPlan`.

One worker in total runs the function in this process. More workers are started with torchrunx: one
agent process per host (over ssh for remote hosts), which spawns that host's workers; the process group
(nccl on GPUs, gloo on CPU) exists before the function starts, and rank 0's return value comes back.

Fail fast: an exception in any worker is printed as ``[rank N] <traceback>`` and ends that worker at
once; its agent then stops the others, and this process raises :class:`WorkerFailed` naming the rank.

Console and log files: rank 0's stdout/stderr stream to this console; other ranks show WARNING and
above, prefixed with ``[rank N]``. Per-worker log files go to ``$TORCHRUNX_LOG_DIR`` if that is set, else to
``log_dir`` when given, else to ``default_log_dir`` (``""`` anywhere, or nothing: no files).

Signals: on SIGINT/SIGTERM this process passes the signal on to every process it started (so workers can
save and stop), waits up to ``grace_s`` seconds, then kills what is left; a second signal kills at once.
Nothing it started outlives it.

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
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from mjfleet.environ import environ_set
from mjfleet.errors import UsageError, first_line
from mjfleet.launch.devices import WorkerPlan
from mjfleet.launch.worker import PREFIXED_ATTR, log_level_from_env, worker_main
from mjfleet.signals import StopSignals

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
    if plan.is_cpu:
        # No GPU visible: a CPU worker must never spend time and GPU memory on a CUDA context.
        return {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(plan.threads_per_worker)}
    assert plan.cuda_visible_devices is not None
    # GPU workers on one host split its cores (plan.threads_per_worker) instead of each starting one per core.
    return {
        "CUDA_VISIBLE_DEVICES": plan.cuda_visible_devices,
        "OMP_NUM_THREADS": str(plan.threads_per_worker),
    }


# --- one worker: this process -------------------------------------------------------------------------


def _run_in_process(fn: Callable[..., R], args: tuple, kwargs: dict) -> R:
    with environ_set(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1"):
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
    launcher.set_logging_handlers(
        partial(_log_handlers, plan.hosts, plan.workers_per_host, files, _file_log_level())
    )
    # Pickled here, unpickled in the worker: an unimportable module then fails as a worker error with a
    # traceback, instead of killing the torchrunx agent, and unpicklable arguments fail before anything starts.
    payload = cloudpickle.dumps((fn, args, kwargs))
    hint = f" (worker logs in {files})" if files else " (set TORCHRUNX_LOG_DIR to keep per-worker log files)"

    relay = _SignalRelay(grace_s)
    result: Any = None
    failure: WorkerFailed | UsageError | None = None
    with relay:
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
        finally:
            relay.reap()
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


def _file_log_level() -> int:
    try:
        return log_level_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


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


# --- signals --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    pid: int
    start: int  # start time in clock ticks since boot: (pid, start) names a process even if the pid is reused


class _SignalRelay:
    """While active, SIGINT/SIGTERM sent to this process reach every process it started since.

    The signal only wakes a watcher thread (through signal.set_wakeup_fd), because the main thread may sit
    inside a blocking torch.distributed call for seconds. The watcher forwards the first signal, kills
    everything left after the grace period, and kills at once (then exits) on a second signal. It also
    keeps a list of descendants: a worker whose parent died is re-parented away and would be lost to a
    later /proc scan.
    """

    _SCAN_PERIOD_S = 1.0
    _SETTLE_S = 3.0
    _AFTER_KILL_S = 15.0

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._signals = StopSignals()
        self._known: set[_Proc] = set()
        self._before: set[_Proc] = set()
        self._lock = threading.Lock()
        self._active = False
        self._stop = threading.Event()
        self._done = threading.Event()

    @property
    def signum(self) -> int | None:
        """The first SIGINT/SIGTERM received, or None."""
        return self._signals.first

    def __enter__(self) -> _SignalRelay:
        global _active_relay
        self._pid = os.getpid()
        self._before = _descendants(self._pid)
        if threading.current_thread() is not threading.main_thread() or not _HAS_PROC:
            return self  # signals can only be handled on the main thread; still reap on exit
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._old_handlers = {s: signal.signal(s, _ignore_in_main_thread) for s in _RELAYED}
        _active_relay = self
        self._active = True
        self._thread = threading.Thread(target=self._watch, name="mjfleet-signal-relay", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        global _active_relay
        self._done.set()
        if not self._active:
            return
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._old_wakeup)
        _active_relay = None
        self._stop.set()
        os.write(self._w, b"\0")  # wake the watcher
        self._thread.join(timeout=5)
        os.close(self._r)
        os.close(self._w)

    def reap(self) -> None:
        """Make sure every process started during the run has ended: wait, terminate, wait, kill."""
        # torchrunx has already asked its agents to stop; one that never got that far (it was still waiting
        # to connect when the launch failed) would wait for minutes, so stragglers get SIGTERM first.
        for sig, wait_s in ((signal.SIGTERM, self._SETTLE_S), (signal.SIGKILL, self.grace_s)):
            deadline = time.monotonic() + wait_s
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            _send(self._alive(), sig)

    def _alive(self) -> list[_Proc]:
        with self._lock:
            self._known |= _descendants(self._pid) - self._before
            alive = _descendants_or_known(self._known)
            self._known = set(alive)
        return alive

    def _watch(self) -> None:
        deadline: float | None = None
        killed_at: float | None = None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._r], [], [], self._SCAN_PERIOD_S)
            if ready:
                for signum in os.read(self._r, 64):
                    if signum and not self._stop.is_set():
                        deadline = self._on_signal(signum) or deadline
            alive = self._alive()
            now = time.monotonic()
            if deadline is not None and killed_at is None and now > deadline and alive:
                _say(f"workers still running {self.grace_s:.0f} s after {_name(self.signum)}: killing them")
                _send(alive, signal.SIGKILL)
                killed_at = now
            if killed_at is not None and now > killed_at + self._AFTER_KILL_S and not self._done.is_set():
                _say("the launcher did not return after killing the workers: exiting")
                os._exit(128 + (self.signum or signal.SIGTERM))

    def _on_signal(self, signum: int) -> float | None:
        """Forward the first signal and return the kill deadline; ignore an echo of it (see mjfleet.signals); on a
        second one, kill everything and exit."""
        kind = self._signals.arrived(signum)
        if kind == "echo":  # `uv run` passes on the Ctrl-C our process group already received
            return None
        if kind == "first":
            _say(
                f"{_name(signum)}: stopping the workers (up to {self.grace_s:.0f} s; "
                "press Ctrl-C again to kill them now)"
            )
            targets = self._alive()
            if signum == signal.SIGINT and _terminal_foreground():
                # Ctrl-C already reached our whole process group; a second copy could look like a second Ctrl-C.
                targets = [p for p in targets if _pgid(p.pid) != os.getpgrp()]
            _send(targets, signum)
            return time.monotonic() + self.grace_s
        _say(f"second signal ({_name(signum)}): killing all workers now")
        _send(self._alive(), signal.SIGKILL)
        os._exit(128 + signum)


_RELAYED = (signal.SIGINT, signal.SIGTERM)
_HAS_PROC = os.path.isdir("/proc/self")
_active_relay: _SignalRelay | None = None


def _ignore_in_main_thread(signum: int, frame: object) -> None:
    """Installed so the C-level handler writes to the wakeup fd; the relay's thread does the work."""


def _after_fork_in_child() -> None:
    # torchrunx forks its log server from this process. It must not write to our wakeup pipe, and it should
    # keep forwarding worker logs until the launcher stops it, so it ignores the signals we relay.
    global _active_relay
    if _active_relay is not None:
        _active_relay = None
        try:
            signal.set_wakeup_fd(-1)
            for sig in _RELAYED:
                signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # forked from a thread other than the main one: nothing was inherited to undo
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _say(message: str) -> None:
    print(f"mjfleet: {message}", file=sys.stderr, flush=True)


def _name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "signal"


def _terminal_foreground() -> bool:
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _send(procs: list[_Proc], sig: int) -> None:
    for proc in procs:
        try:
            os.kill(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _read_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) from /proc/<pid>/stat, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # the command name may contain spaces and parentheses
    return int(fields[1]), fields[0], int(fields[19])


def _descendants(root: int) -> set[_Proc]:
    """Live (non-zombie) descendants of `root`, from one scan of /proc."""
    if not _HAS_PROC:
        return set()
    children: dict[int, list[tuple[int, str, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read_stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append((int(entry), stat[1], stat[2]))
    found: set[_Proc] = set()
    stack = [root]
    while stack:
        for pid, state, start in children.get(stack.pop(), []):
            if state != "Z":
                found.add(_Proc(pid, start))
            stack.append(pid)
    return found


def _descendants_or_known(known: set[_Proc]) -> list[_Proc]:
    """The processes of `known` that still run (same pid and start time, not a zombie)."""
    alive = []
    for proc in known:
        stat = _read_stat(proc.pid)
        if stat is not None and stat[2] == proc.start and stat[1] != "Z":
            alive.append(proc)
    return alive
