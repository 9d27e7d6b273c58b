"""Errors that are the user's to fix: the command line prints them as one line and exits with status 2."""


class UsageError(Exception):
    """Bad input from the user (unknown task, bad --gpu-ids, ...). The message is one line, with a suggestion."""
