"""Worker and agent logs sent to the launcher over TCP: JSON records after a per-run token, never pickle.

torchrunx's own log server unpickles every frame from anyone who connects (code execution for whoever can reach
the port). This one reads a first frame that must be the run's random token (compared in constant time) and then
only JSON objects with plain fields; a peer without the token is disconnected before anything else is read.
Frames are a 4-byte big-endian length and that many bytes, as logging.handlers.SocketHandler sends them.
"""

from __future__ import annotations

import datetime
import hmac
import json
import logging
import socket
import struct
import threading
from logging.handlers import SocketHandler
from pathlib import Path

MAX_FRAME = 1 << 20
"""Longest frame accepted (a log line with a traceback fits); a longer length prefix ends the connection."""
FIELDS = ("name", "msg", "levelno", "levelname", "created", "hostname", "local_rank", "mjfleet_rank_prefixed")


def frame(data: bytes) -> bytes:
    return struct.pack(">L", len(data)) + data


class TokenSocketHandler(SocketHandler):
    """A SocketHandler that authenticates with the run token and sends records as JSON."""

    def __init__(self, host: str, port: int, token: str) -> None:
        super().__init__(host, port)
        self._token = token.encode()

    def makeSocket(self, timeout: float = 1) -> socket.socket:  # noqa: N802 - logging's name
        sock = super().makeSocket(timeout)
        sock.sendall(frame(self._token))
        return sock

    def makePickle(self, record: logging.LogRecord) -> bytes:  # noqa: N802 - logging's name; JSON, not pickle
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        fields = {k: getattr(record, k, None) for k in FIELDS}
        fields["msg"] = text
        return frame(json.dumps(fields, default=str).encode())


def send_logs_to(hostname: str, local_rank: int | None, host: str, port: int, token: str) -> None:
    """Send this process's log records (tagged with host and local rank) to the launcher's log server."""
    logging.root.setLevel(logging.NOTSET)
    old_factory = logging.getLogRecordFactory()

    def factory(*args, **kwargs) -> logging.LogRecord:  # noqa: ANN002, ANN003
        record = old_factory(*args, **kwargs)
        record.hostname = hostname
        record.local_rank = local_rank
        return record

    logging.setLogRecordFactory(factory)
    logging.root.addHandler(TokenSocketHandler(host, port, token))


class LogServer:
    """Receives records from agents and workers on ``(address, port)`` and hands them to ``handlers``."""

    def __init__(self, address: str, token: str, handlers: list[logging.Handler]) -> None:
        self._token = token.encode()
        self._handlers = handlers
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.bind((address, 0))
        self._sock.listen(64)
        self.port: int = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="mjfleet-log-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for handler in self._handlers:
            handler.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)  # the token comes at once or never
            token = _read_frame(conn, len(self._token))
            if token is None or not hmac.compare_digest(token, self._token):
                return
            conn.settimeout(None)
            while (data := _read_frame(conn, MAX_FRAME)) is not None:
                try:
                    fields = json.loads(data)
                except ValueError:
                    return
                if isinstance(fields, dict):
                    self._handle(fields)

    def _handle(self, fields: dict) -> None:
        record = logging.makeLogRecord({k: fields.get(k) for k in FIELDS})
        record.args = None
        record.msg = str(record.msg)
        record.levelno = int(fields.get("levelno") or logging.INFO)
        record.name = f"torchrunx.{record.hostname}" + (
            f".{record.local_rank}" if record.local_rank is not None else ""
        )
        with self._lock:
            for handler in self._handlers:
                handler.handle(record)


def _read_frame(conn: socket.socket, limit: int) -> bytes | None:
    head = _read_exactly(conn, 4)
    if head is None:
        return None
    size = struct.unpack(">L", head)[0]
    return _read_exactly(conn, size) if size <= limit else None


def _read_exactly(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    try:
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    return data


class LazyFileHandler(logging.FileHandler):
    """A log file created (with its directory) only when its first record arrives: a launch that fails before
    any worker logs leaves no empty files behind."""

    def _open(self):  # noqa: ANN202 - logging's signature
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def log_folder(directory: Path) -> Path:
    """The folder of one run's log files: a timestamped one in `directory`."""
    return directory / datetime.datetime.now().isoformat(timespec="seconds")


def log_file(folder: Path, host: str, local_rank: int | None) -> Path:
    """An agent's (<host>.log) or a worker's (<host>[<local rank>].log) log file."""
    return folder / (f"{host}.log" if local_rank is None else f"{host}[{local_rank}].log")


def file_handlers(
    hosts: tuple[str, ...], workers_per_host: int, folder: Path, level: int
) -> list[logging.Handler]:
    """One file per agent and per worker (`log_file`) in `folder`."""
    formatter = logging.Formatter("%(asctime)s:%(levelname)s: %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    handlers: list[logging.Handler] = []
    for host in hosts:
        for local_rank in [None, *range(workers_per_host)]:
            handler = LazyFileHandler(log_file(folder, host, local_rank), delay=True)
            handler.addFilter(_only(host, local_rank, level))
            handler.setFormatter(formatter)
            handlers.append(handler)
    return handlers


def _only(host: str, local_rank: int | None, level: int):  # noqa: ANN202
    return lambda r: r.hostname == host and r.local_rank == local_rank and r.levelno >= level
