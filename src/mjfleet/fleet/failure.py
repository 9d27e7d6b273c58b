"""A worker's failure as a record, from the worker (or its agent) to the launcher, and the user's message made
from it in one place.

A worker that fails has torch elastic write its :class:`Failure` (as JSON, carried by a :class:`RecordedFailure`)
into torch elastic's error file (`ErrorHandler.record_exception`); its agent reads it back
(or makes one when the worker died without writing any: a signal, an exit status) and sends it to the launcher in
its status; the launcher picks the cause among all failures (:func:`first_cause`) and raises one line made by
:meth:`Failure.message`. Nothing is parsed back out of text.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, replace
from typing import Any

EXCEPTION = "exception"
SIGNAL = "signal"
LOST_PEER = "lost peer"
HUNG = "hung"
USAGE_ERROR = "usage error"
KINDS = (EXCEPTION, SIGNAL, LOST_PEER, HUNG, USAGE_ERROR)

_LOST_PEER_WORDS = ("by peer", "gloo", "NCCL", "ProcessGroup", "Broken pipe", "Connection reset")
NO_PYTHON_ERROR = "it exited without a Python error (killed, out of memory, or os._exit)"


@dataclass(frozen=True)
class Failure:
    """Why one worker ended the run: its global rank (None when unknown), its host, the kind (one of
    :data:`KINDS`), the first line of what happened, and its log file when one is kept."""

    rank: int | None
    host: str
    kind: str
    first_line: str
    log_file: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: Any) -> Failure | None:
        """The record `text` holds, or None when it holds none (another writer's error file)."""
        try:
            fields = json.loads(text)
            return cls(**fields) if isinstance(fields, dict) and fields.get("kind") in KINDS else None
        except (TypeError, ValueError):
            return None

    def as_exception(self) -> RecordedFailure:
        """This record as an exception for torch elastic's `record_exception`, which writes it to the error file."""
        return RecordedFailure(self.to_json())

    def message(self, several_hosts: bool, no_log_file: str = "") -> str:
        """The one line the user sees: ``worker rank 1 on hostb failed: ValueError: ... (its log: <file>)``; the
        host is named when the run has several (always for a hung rank: ``worker rank 1 on localhost made no progress
        for 120 s (last: collecting iteration 3); the run was stopped``). A usage error is its own first line (the user's to fix)."""
        if self.kind == USAGE_ERROR:
            return self.first_line
        who = f"worker rank {self.rank}" if self.rank is not None else "a worker"
        where = f" on {self.host}" if (several_hosts or self.kind == HUNG) and self.host else ""
        log = f" (its log: {self.log_file})" if self.log_file else no_log_file
        if self.kind == HUNG:  # its process may still exist (stopped, deadlocked): the launcher ends the run
            return f"{who}{where} {self.first_line}; the run was stopped{log}"
        return f"{who}{where} failed: {self.first_line}{log}"


class RecordedFailure(Exception):
    """Carries a :class:`Failure` through torch elastic's error file: its "message" is "RecordedFailure: <json>"."""


def lost_a_peer(exc: BaseException) -> bool:
    """The one rule for "this worker's collective failed because another process went away": such a failure is
    reported only when no worker failed by itself."""
    import torch.distributed as dist

    if isinstance(exc, dist.DistError | ConnectionError):
        return True
    return isinstance(exc, RuntimeError) and any(word in str(exc) for word in _LOST_PEER_WORDS)


def summary(exc: BaseException) -> str:
    """One line naming an exception: "ValueError: message" (first line of the message only)."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    if isinstance(exc, ImportError):
        line += " (workers import the function by module name: is its module on PYTHONPATH on every host?)"
    return line


def from_exception(exc: BaseException, rank: int | None, host: str = "") -> Failure:
    """The record of an exception that ends a worker."""
    from mjfleet.errors import UsageError, first_line

    if isinstance(exc, UsageError):
        return Failure(rank, host, USAGE_ERROR, first_line(exc))
    if isinstance(exc, KeyboardInterrupt):
        return Failure(rank, host, SIGNAL, summary(exc))
    return Failure(rank, host, LOST_PEER if lost_a_peer(exc) else EXCEPTION, summary(exc))


def from_process_failure(failure: Any, rank: int, host: str) -> Failure:
    """The record of a worker process that torch elastic saw fail: the one it wrote, else one made from how it
    ended (a signal, an exit status, torch elastic's own error record)."""
    message = failure.message
    if isinstance(message, dict):  # torch elastic's record of an exception (record_exception)
        message = message.get("message", "")
    message = str(message or "")
    written = Failure.from_json(message.removeprefix(f"{RecordedFailure.__name__}: "))
    if written is not None:
        return replace(written, rank=rank, host=host)
    if failure.exitcode is not None and failure.exitcode < 0:
        try:
            name = signal.Signals(-failure.exitcode).name
        except ValueError:
            name = f"signal {-failure.exitcode}"
        return Failure(rank, host, SIGNAL, f"killed by {name}")
    if not message or message.startswith("To enable traceback"):  # torch elastic's text for a bare exit
        message = NO_PYTHON_ERROR
    return Failure(rank, host, EXCEPTION, message.strip().splitlines()[0])


def first_cause(failures: list[Failure]) -> Failure:
    """The failure to report: a worker that failed by itself before a hung one before one that only lost a peer,
    then by rank."""
    return min(
        failures,
        key=lambda f: (f.kind == LOST_PEER, f.kind == HUNG, f.rank if f.rank is not None else 1 << 30),
    )
