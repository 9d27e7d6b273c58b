"""tyro's flag parsing with its errors as one line (the command line's rule for bad input)."""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

from mjfleet.errors import UsageError


def parse_flags(flags_type: Any, args: list[str], prog: str, **kwargs: Any) -> Any:
    """`tyro.cli(flags_type, args)`, its parse errors one line (a UsageError) instead of a box of 5-15 lines."""
    import tyro

    from mjfleet.cli.aliases import renamed_flags

    args = renamed_flags(args)
    box = io.StringIO()
    failed = False
    try:
        with contextlib.redirect_stderr(box):
            return tyro.cli(flags_type, args=args, prog=prog, **kwargs)
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        failed = True
        raise UsageError(f"{one_line_parse_error(box.getvalue())} (see `{prog} --help`)") from None
    finally:
        if box.getvalue() and not failed:
            sys.stderr.write(box.getvalue())  # warnings pass through; an error box became the one line


def one_line_parse_error(box: str) -> str:
    """tyro's error box as one line: its first paragraph, plus the flags it suggests ("Perhaps you meant")."""
    lines = [line.strip().strip("│╭╮╰╯").strip() for line in box.splitlines()]
    if "╭" not in box:  # the plain box tyro draws where the console shows no box characters: a title, a rule
        lines = [line for line in lines if line]
        if len(lines) > 1 and set(lines[1]) <= set("-"):
            lines = lines[2:]
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if not line or set(line) <= set("─-"):
            paragraphs.append([])
        elif not line.startswith("─ "):  # a box's title, e.g. "─ Unrecognized options ───"
            paragraphs[-1].append(line)
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        return "invalid arguments"
    message = " ".join(paragraphs[0])
    suggested = [p for p in paragraphs if p[0].startswith("Perhaps you meant")]
    if suggested:
        flags = [line.split()[0] for line in suggested[0][1:] if line.startswith("--")]
        if flags:
            message += f"; did you mean {' or '.join(dict.fromkeys(flags))}?"
    return message
