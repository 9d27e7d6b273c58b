"""`sweep --dashboard <dir>`: optuna-dashboard on the sweep's study, bound to 127.0.0.1 unless told otherwise,
with the `ssh -L` line that reaches it from another machine (mjfleet.address, as the browser viewer prints).

The listening socket is bound once and served as it is: a busy port moves the dashboard to the next one by trying
to bind that, never by probing a port, letting it go and binding it again (another program could take it between).
"""

from __future__ import annotations

import errno
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from mjfleet.address import address_line, check_address, exposure_warning
from mjfleet.errors import UsageError
from mjfleet.sweep.study import open_storage, storage_url

PORTS_TRIED = 100


@dataclass
class DashboardFlags:
    """Serve optuna-dashboard on a sweep's study."""

    port: int = 8080
    """The port; the next free one when it is busy (0: any free port)."""
    host: str = "127.0.0.1"
    """The address it binds. 0.0.0.0 lets other machines connect (no password: a warning says so)."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:  # one line per request would bury the address line
        pass


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per connection, as optuna-dashboard's own command serves: a browser's idle or kept-alive
    connection must not hold up every other request. The threads are daemons, not waited for at Ctrl-C."""

    daemon_threads = True
    block_on_close = False


class _Server6(_Server):
    address_family = socket.AF_INET6


def listen(host: str, first: int, app: Any) -> WSGIServer:
    """A WSGI server for `app` listening on `host` at `first`, or at the next port after it that is free (`first`
    0: the one the system gives); its `server_port` is the port it holds."""
    server_class = _Server6 if ":" in host else _Server
    last = first if first == 0 else min(first + PORTS_TRIED, 65536) - 1
    for port in range(first, last + 1):
        try:
            return make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise UsageError(
                    f"--host {host} --port {port}: cannot listen there: {exc.strerror}"
                ) from None
    raise UsageError(f"--port: no free port in {first}..{last} on {host}")


def serve(sweep_dir: Path, storage: str | None, flags: DashboardFlags) -> None:
    check_address(flags.host, flags.port, lowest=0)
    try:
        from optuna_dashboard import wsgi
    except ImportError:
        raise UsageError("sweep --dashboard needs optuna-dashboard: uv sync --extra sweep") from None
    opened = open_storage(storage_url(sweep_dir.resolve(), storage))
    server = listen(flags.host, flags.port, wsgi(opened))
    warning = exposure_warning(flags.host, "the dashboard", "read and change the study")
    if warning:
        print(warning, file=sys.stderr)
    print(f"sweep dashboard of {sweep_dir}: {address_line(flags.host, server.server_port)}", flush=True)
    with server:
        server.serve_forever()
