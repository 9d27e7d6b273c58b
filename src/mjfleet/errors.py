"""Errors that are the user's to fix: the command line prints them as one line and exits with status 2."""


class UsageError(Exception):
    """Bad input from the user (unknown task, bad --gpu-ids, ...). The message is one line, with a suggestion."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when the message is empty): for one-line
    reports of errors that come from libraries."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
