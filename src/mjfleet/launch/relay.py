"""Pass SIGINT/SIGTERM on to every process the launcher starts, and make sure none outlives it.

The launcher's main thread may sit inside a blocking torch.distributed call for seconds, where no Python signal
handler runs. So a signal only writes its number to a pipe (signal.set_wakeup_fd), and a watcher thread does the
work: it forwards the first signal, kills whatever still runs after the grace period, and on a second signal
kills everything at once and exits.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

import psutil

from mjfleet.signals import StopSignals

RELAYED = (signal.SIGINT, signal.SIGTERM)


class ProcessTree:
    """The processes started below this one since the tree was made, remembered when they are re-parented.

    A worker whose agent died is re-parented away and would be missing from a later look at our descendants, so
    every process seen once is kept until it ends. psutil.Process compares pid and start time: a reused pid is
    another process.
    """

    def __init__(self) -> None:
        self._root = psutil.Process()
        self._before = set(self._root.children(recursive=True))
        self._known: set[psutil.Process] = set()
        self._lock = threading.Lock()

    def alive(self) -> list[psutil.Process]:
        """The processes started since the tree was made that still run (a zombie has ended)."""
        with self._lock:
            self._known |= set(self._root.children(recursive=True)) - self._before
            self._known = {proc for proc in self._known if _running(proc)}
            return list(self._known)

    def send(self, sig: int, procs: list[psutil.Process] | None = None) -> None:
        """Send `sig` to `procs` (default: every process still alive); one that has just ended is skipped."""
        for proc in self.alive() if procs is None else procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class SignalRelay:
    """While active, SIGINT/SIGTERM sent to this process reach every process it started since; on exit, whatever
    is still running is ended (SIGTERM, then SIGKILL after the grace period)."""

    POLL_S = 1.0
    SETTLE_S = 3.0
    """How long stragglers get to end by themselves before SIGTERM, once the launcher has returned."""
    AFTER_KILL_S = 15.0

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._signals = StopSignals()
        self._stop = threading.Event()
        self._reaped = threading.Event()
        self._thread: threading.Thread | None = None
        self._agents: list = []

    def add_agents(self, agents: list) -> None:
        """The agents of a run (launch/agents.py): a signal is passed to their workers, not to them. Local workers
        get it from this process like any other child; remote ones through their agent's line ("signal N")."""
        self._agents = list(agents)

    @property
    def signum(self) -> int | None:
        """The first SIGINT/SIGTERM received, or None."""
        return self._signals.first

    def __enter__(self) -> SignalRelay:
        self.tree = ProcessTree()
        if threading.current_thread() is not threading.main_thread():
            return self  # signals can only be handled on the main thread; still reap on exit
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._old_handlers = {sig: signal.signal(sig, _wake_only) for sig in RELAYED}
        self._thread = threading.Thread(target=self._watch, name="mjfleet-signal-relay", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._reap()
        self._reaped.set()
        if self._thread is None:
            return
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._old_wakeup)
        self._stop.set()
        os.write(self._w, b"\0")  # wake the watcher
        self._thread.join(timeout=5)
        os.close(self._r)
        os.close(self._w)

    def _reap(self) -> None:
        # torchrunx has already asked its agents to stop; one that never got that far (it was still waiting to
        # connect when the launch failed) would wait for minutes, so stragglers get SIGTERM first.
        for sig, wait_s in ((signal.SIGTERM, self.SETTLE_S), (signal.SIGKILL, self.grace_s)):
            deadline = time.monotonic() + wait_s
            while self.tree.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.tree.send(sig)

    def _watch(self) -> None:
        deadline: float | None = None
        killed_at: float | None = None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._r], [], [], self.POLL_S)
            for signum in os.read(self._r, 64) if ready else b"":
                if signum and not self._stop.is_set():
                    deadline = self._on_signal(signum) or deadline
            alive = self.tree.alive()  # also keeps track of re-parented workers between signals
            now = time.monotonic()
            if deadline is not None and killed_at is None and now > deadline and alive:
                _say(f"workers still running {self.grace_s:.0f} s after {_name(self.signum)}: killing them")
                self.tree.send(signal.SIGKILL, alive)
                killed_at = now
            if killed_at is not None and now > killed_at + self.AFTER_KILL_S and not self._reaped.is_set():
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
            spared = {
                agent.proc.pid for agent in self._agents
            }  # an agent ending first would kill its workers
            targets = [proc for proc in self.tree.alive() if proc.pid not in spared]
            for agent in self._agents:
                if not agent.host.local:
                    agent.tell(f"signal {signum}")
            if signum == signal.SIGINT and _terminal_foreground():
                # Ctrl-C already reached our whole process group; a second copy could look like a second Ctrl-C.
                targets = [proc for proc in targets if _pgid(proc.pid) != os.getpgrp()]
            self.tree.send(signum, targets)
            return time.monotonic() + self.grace_s
        _say(f"second signal ({_name(signum)}): killing all workers now")
        self.tree.send(signal.SIGKILL)
        os._exit(128 + signum)


def _wake_only(signum: int, frame: object) -> None:
    """Installed so the C-level handler writes to the wakeup fd; the relay's thread does the work."""


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
