"""`sweep --dashboard <dir>`: optuna-dashboard on the sweep's study, bound to 127.0.0.1 unless told otherwise,
with the `ssh -L` line that reaches it from another machine (as the browser viewer prints)."""

from __future__ import annotations

import ipaddress
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from mjfleet.errors import UsageError
from mjfleet.sweep.study import open_storage, storage_url
from mjfleet.viewers.scene import viewer_address_line

PORTS_TRIED = 100


@dataclass
class DashboardFlags:
    """Serve optuna-dashboard on a sweep's study."""

    port: int = 8080
    """The port; the next free one when it is busy."""
    host: str = "127.0.0.1"
    """The address it binds. 0.0.0.0 lets other machines connect (no password: a warning says so)."""


def free_port(host: str, first: int) -> int:
    """`first`, or the next port after it that `host` can bind."""
    for port in range(first, min(first + PORTS_TRIED, 65536)):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(
                socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
            )  # as the server binds: TIME_WAIT is free
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise UsageError(f"--port: no free port in {first}..{first + PORTS_TRIED - 1} on {host}")


def serve(sweep_dir: Path, storage: str | None, flags: DashboardFlags) -> None:
    if not 0 < flags.port < 65536:
        raise UsageError(f"--port must be in 1..65535, got {flags.port}")
    try:
        ipaddress.ip_address(flags.host)
    except ValueError:
        raise UsageError(f"--host {flags.host!r}: give an IP address, e.g. 127.0.0.1") from None
    try:
        from optuna_dashboard import run_server
    except ImportError:
        raise UsageError("sweep --dashboard needs optuna-dashboard: uv sync --extra sweep") from None
    opened = open_storage(storage_url(sweep_dir.resolve(), storage))
    port = free_port(flags.host, flags.port)
    if not ipaddress.ip_address(flags.host).is_loopback:
        print(f"warning: the dashboard listens on {flags.host}: anyone who can reach this machine can read and change "
              "the study (there is no password); the default, 127.0.0.1, with ssh -L is the safe way", file=sys.stderr)  # fmt: skip
    print(f"sweep dashboard of {sweep_dir}: {viewer_address_line(flags.host, port)}", flush=True)
    run_server(opened, host=flags.host, port=port)
