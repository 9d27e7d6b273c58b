"""The launcher's log server: records from peers with the run token, as JSON; nothing unpickled, ever."""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import time

from mjfleet.launch.logserver import LogServer, TokenSocketHandler, frame


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Boom:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hung_up(conn: socket.socket) -> bool:
    """Whether the server closed the connection (a reset too: it closed with our bytes unread)."""
    conn.settimeout(5)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def wait_for(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_the_log_server_listens_on_the_address_it_is_given_only():
    server = LogServer("127.0.0.1", "t" * 64, [])
    try:
        assert server._sock.getsockname()[0] == "127.0.0.1"
    finally:
        server.close()


def test_records_with_the_token_arrive_with_host_rank_and_level():
    sink = Collect()
    server = LogServer("127.0.0.1", "secret-token", [sink])
    handler = TokenSocketHandler("127.0.0.1", server.port, "secret-token")
    try:
        record = logging.makeLogRecord({"msg": "hello %s", "args": ("there",), "levelno": logging.WARNING})
        record.hostname, record.local_rank = "hosta", 1
        handler.emit(record)
        assert wait_for(lambda: sink.records)
        got = sink.records[0]
        assert (got.getMessage(), got.levelno, got.hostname, got.local_rank) == (
            "hello there",
            30,
            "hosta",
            1,
        )
        assert got.name == "torchrunx.hosta.1"
    finally:
        handler.close()
        server.close()


def test_a_pickle_from_a_peer_without_the_token_is_never_unpickled(tmp_path):
    sink = Collect()
    server = LogServer("127.0.0.1", "secret-token", [sink])
    marker = tmp_path / "pwned"
    data = pickle.dumps(Boom(str(marker)))
    try:
        for payload in (frame(data), data, frame(b"wrong-token!") + frame(data)):
            with socket.create_connection(("127.0.0.1", server.port)) as conn:
                conn.sendall(payload)
                assert hung_up(conn)
        # even with the token, a frame is JSON or nothing
        with socket.create_connection(("127.0.0.1", server.port)) as conn:
            conn.sendall(frame(b"secret-token") + frame(data) + struct.pack(">L", 0))
            assert hung_up(conn)
        time.sleep(0.2)
        assert not marker.exists() and sink.records == []
    finally:
        server.close()
