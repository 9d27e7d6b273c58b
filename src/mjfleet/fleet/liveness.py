"""A worker's liveness signal: its last beat (when, what it was doing, whether it waits for the others).

Each worker of a multi-worker run beats into a small file its agent names (``MJFLEET_BEAT_FILE``): the runner at
every phase of an iteration, the reducer around every exchange ("waiting": that rank only waits for its peers),
and a ticker thread through the long phases that are legitimately slow on one rank (evaluation, a checkpoint
write). A thread of each worker marks its process alive every second apart from progress: a stopped process
cannot, a waiting one does. The agent sends its workers' beats to the launcher every round (~5 s), and the
launcher asks :func:`hung_rank` whether one rank holds the run and which. One worker in this process
has no agent and no beat file: there is no second rank to hold, so beats cost nothing and nothing is watched.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

BEAT_FILE_ENV = "MJFLEET_BEAT_FILE"
RECORD_BYTES = 256
"""A beat is one fixed-size record rewritten in place (one pwrite, no truncation)."""
TICK_S = 5.0
"""How often the ticker beats through a long legitimate phase."""
ALIVE_S = 1.0
"""How often a worker's thread marks its process as running Python (a stopped process cannot)."""
SILENT_S = 10.0
"""A process whose alive mark is older than this is not running Python (stopped, or stuck holding the GIL)."""
STARTING = "starting"
FINISHED = "finished"

F = TypeVar("F", bound=Callable)


class Beat(NamedTuple):
    """One rank's last beat, as its agent read it: its age on that host's clock, what it was doing, whether it
    was waiting for its peers, whether it had finished its first iteration (kernels compiled), and the age of its
    process's alive mark (a thread's, independent of progress)."""

    rank: int
    age_s: float
    what: str
    waiting: bool
    warm: bool
    silent_s: float = 0.0


def hung_rank(beats: list[Beat], timeout_s: float, first_timeout_s: float) -> Beat | None:
    """The beat of the rank that holds the run, or None. A rank is stale when its beat is older than
    `timeout_s` (`first_timeout_s` before its first iteration ends). The run is held when a stale rank was
    working (not waiting in an exchange) or when every rank is stale (a rank stopped inside an exchange); ranks
    that wait while another still beats (rank 0 evaluating) are not. The rank named: a stale one whose process
    has gone silent (stopped: its peers may wait in the same exchange, beat for beat), else the stalest working
    one, else the stalest."""
    if timeout_s <= 0 or not beats:
        return None
    stale = [b for b in beats if b.age_s > (timeout_s if b.warm else max(timeout_s, first_timeout_s))]
    working = [b for b in stale if not b.waiting]
    if not working and not (stale and len(stale) == len(beats)):
        return None
    silent = [b for b in stale if b.silent_s > SILENT_S]
    return max(silent or working or stale, key=lambda b: (b.silent_s, b.age_s))


def describe(beat: Beat) -> str:
    """The first line of a hung rank's failure record."""
    return f"made no progress for {beat.age_s:.0f} s (last: {beat.what})"


# --- the worker's side ------------------------------------------------------------------------------------


class _State:
    fd: int | None = None
    looked = False
    stamp = 0.0
    what = STARTING
    waiting = False
    warm = False
    lock = threading.Lock()


def _beat_fd() -> int | None:
    """The beat file, opened at the first beat (torch elastic sets the variable after the worker's imports)."""
    if not _State.looked:
        _State.looked = True
        path = os.environ.get(BEAT_FILE_ENV)
        if path:
            _State.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            threading.Thread(target=_mark_alive, name="mjfleet-alive", daemon=True).start()
    return _State.fd


def _mark_alive() -> None:
    while True:
        time.sleep(ALIVE_S)
        _write(progress=False)


def _write(progress: bool = True) -> None:
    if _beat_fd() is None:
        return
    with _State.lock:  # composed and written as one: the alive thread must not write back an older record
        now = time.time()
        if progress:
            _State.stamp = now
        text = f"{_State.stamp:.3f} {now:.3f} {int(_State.waiting)} {int(_State.warm)} {_State.what}"
        os.pwrite(_State.fd, text.encode()[:RECORD_BYTES].ljust(RECORD_BYTES), 0)


def beat(what: str) -> None:
    """This rank is working on `what` now ("collecting iteration 3")."""
    _State.what, _State.waiting = what, False
    _write()


def warmed_up() -> None:
    """This rank finished its first iteration: from now on the plain hang timeout applies."""
    _State.warm = True
    _write()


def finished() -> None:
    """This rank's function returned: it only waits for the others to end."""
    _State.what, _State.waiting = FINISHED, True
    _write()


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """This rank waits for its peers (an exchange) inside this block; a beat on entering and on leaving."""
    if _beat_fd() is None or _State.waiting:
        yield
        return
    _State.waiting = True
    _write()
    try:
        yield
    finally:
        _State.waiting = False
        _write()


def waits(fn: F) -> F:
    """Decorator: calls of `fn` are exchanges with the peers (`waiting`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with waiting():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def ticking(what: str) -> Iterator[None]:
    """A long phase that is legitimately slow on this rank alone (evaluation, a checkpoint write): beats every
    `TICK_S` until it ends, so the ranks waiting for it are not reported hung. The previous `what` is restored."""
    if _beat_fd() is None:
        yield
        return
    before = _State.what
    done = threading.Event()

    def tick() -> None:
        while not done.wait(TICK_S):
            _write()  # progress: the phase goes on

    beat(what)
    ticker = threading.Thread(target=tick, name="mjfleet-liveness", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        beat(before)


# --- the agent's side -------------------------------------------------------------------------------------


def start_file(path: str) -> None:
    """The agent's first beat for a worker it is about to start (its start counts as a beat)."""
    with open(path, "wb") as f:
        now = time.time()
        f.write(f"{now:.3f} {now:.3f} 0 0 {STARTING}".encode().ljust(RECORD_BYTES))


def read_beat(path: str, rank: int, now: float | None = None) -> Beat | None:
    """The beat in `path` (None when it cannot be read or is half-written: the next round reads it again)."""
    try:
        with open(path, "rb") as f:
            stamp, alive, waiting_, warm, what = f.read(RECORD_BYTES).decode().rstrip().split(" ", 4)
        now = time.time() if now is None else now
        age, silent = max(now - float(stamp), 0.0), max(now - float(alive), 0.0)
        return Beat(rank, age, what, waiting_ == "1", warm == "1", silent)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
