"""A worker's liveness signal: its last beat (when, what it was doing, whether it waits for the others).

Each worker of a multi-worker run beats into a small file its agent names (``MJFLEET_BEAT_FILE``): the runner at
every phase of an iteration, the reducer around every exchange ("waiting": that rank only waits for its peers),
and a ticker thread through the long phases that are legitimately slow on one rank (evaluation, a checkpoint
write). The agent sends its workers' beats to the launcher every round (~5 s), and the launcher asks
:func:`hung_rank` whether one rank holds the run: a working (not waiting) rank whose beat is older than the hang
timeout, or, when every rank's beat is that old, the one that stopped beating first. One worker in this process
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
STARTING = "starting"
FINISHED = "finished"

F = TypeVar("F", bound=Callable)


class Beat(NamedTuple):
    """One rank's last beat, as its agent read it: its age on that host's clock, what it was doing, whether it
    was waiting for its peers, and whether it had finished its first iteration (kernels compiled)."""

    rank: int
    age_s: float
    what: str
    waiting: bool
    warm: bool


def hung_rank(beats: list[Beat], timeout_s: float, first_timeout_s: float) -> Beat | None:
    """The beat of the rank that holds the run, or None. A rank is stale when its beat is older than
    `timeout_s` (`first_timeout_s` before its first iteration ends). A stale rank that was working (not waiting
    in an exchange) holds the others; when every rank is stale (all wait: a rank stopped inside an exchange), the
    one that beat last longest ago does. Ranks waiting while another works (rank 0 evaluating) are not hung."""
    if timeout_s <= 0 or not beats:
        return None
    stale = [b for b in beats if b.age_s > (timeout_s if b.warm else max(timeout_s, first_timeout_s))]
    working = [b for b in stale if not b.waiting]
    if working:
        return max(working, key=lambda b: b.age_s)
    if stale and len(stale) == len(beats):
        return max(stale, key=lambda b: b.age_s)
    return None


def describe(beat: Beat) -> str:
    """The first line of a hung rank's failure record."""
    return f"made no progress for {beat.age_s:.0f} s (last: {beat.what})"


# --- the worker's side ------------------------------------------------------------------------------------


class _State:
    fd: int | None = None
    looked = False
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
    return _State.fd


def _write() -> None:
    if _beat_fd() is None:
        return
    text = f"{time.time():.3f} {int(_State.waiting)} {int(_State.warm)} {_State.what}"
    data = text.encode()[:RECORD_BYTES].ljust(RECORD_BYTES)
    with _State.lock:
        os.pwrite(_State.fd, data, 0)


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
            _write()

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
        f.write(f"{time.time():.3f} 0 0 {STARTING}".encode().ljust(RECORD_BYTES))


def read_beat(path: str, rank: int, now: float | None = None) -> Beat | None:
    """The beat in `path` (None when it cannot be read or is half-written: the next round reads it again)."""
    try:
        with open(path, "rb") as f:
            stamp, waiting_, warm, what = f.read(RECORD_BYTES).decode().rstrip().split(" ", 3)
        age = (time.time() if now is None else now) - float(stamp)
        return Beat(rank, max(age, 0.0), what, waiting_ == "1", warm == "1")
    except (OSError, ValueError, UnicodeDecodeError):
        return None
