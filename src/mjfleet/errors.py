"""Errors that are the user's to fix: the command line prints them as one line and exits with status 2."""


class UsageError(Exception):
    """Bad input from the user (unknown task, bad --gpu-ids, ...). The message is one line, with a suggestion."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when the message is empty), for one-line reports
    of errors that come from libraries; a first line that ends in ":" gets the next one too ("Error(s) in loading
    state_dict for MLPModel: size mismatch for mlp.0.weight: ...")."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]
