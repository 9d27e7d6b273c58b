"""Where a local web page listens, said the same way by every server mjfleet starts (the browser viewer of `train`
and `play`, `sweep --dashboard`): the address is checked before anything starts, the line printed names the page
and the `ssh -L` tunnel that reaches a loopback page from another machine, and a page other machines can reach gets
one warning, because none of these pages asks for a password."""

from __future__ import annotations

import ipaddress
import socket

from mjfleet.errors import UsageError

LOOPBACK = "127.0.0.1"
"""The default address of every page: reachable from this machine only (or through ssh -L)."""


def check_address(host: str, port: int, flags: str = "--", lowest: int = 1) -> None:
    """A UsageError naming the flag (`{flags}host`, `{flags}port`) when `host` is not an IP address or `port` is
    outside `lowest`..65535 (`lowest` 0: the server takes port 0 as "any free one")."""
    if not lowest <= port < 65536:
        raise UsageError(f"{flags}port must be in {lowest}..65535, got {port}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(f"{flags}host {host!r}: give an IP address, e.g. {LOOPBACK}") from None


def address_line(host: str, port: int) -> str:
    """The line that says where the page is: on loopback, with the ssh tunnel that reaches it from elsewhere."""
    if ipaddress.ip_address(host).is_loopback:
        return f"open http://{LOOPBACK}:{port} (from another machine: ssh -L {port}:{LOOPBACK}:{port} {socket.gethostname()})"
    shown = socket.gethostname() if ipaddress.ip_address(host).is_unspecified else host
    return f"open http://{shown}:{port} (this machine: http://{LOOPBACK}:{port})"


def exposure_warning(host: str, what: str, reach: str) -> str | None:
    """The warning for a `what` (the viewer, the dashboard) that other machines can reach, saying what anyone can
    then do (`reach`); None on a loopback address."""
    if ipaddress.ip_address(host).is_loopback:
        return None
    return (
        f"warning: {what} listens on {host}: anyone who can reach this machine can {reach} (there is no "
        f"password); the default, {LOOPBACK}, with ssh -L is the safe way"
    )
