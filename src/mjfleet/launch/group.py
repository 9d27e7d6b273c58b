"""The launcher-agent group of torchrunx, bound to one address and signed with the run token.

torchrunx's LauncherAgentGroup listens on every interface and unpickles whatever its peers send (through
all_gather_object). This subclass, used by the launcher and by mjfleet's agents alike, binds the launcher's
store to the rendezvous address only and exchanges byte tensors carrying an HMAC of the run token: a frame whose
HMAC does not match is rejected before it is unpickled.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from mjfleet.launch.seam import AgentFailedError, LauncherAgentGroup

TOKEN_ENV = "MJFLEET_RUN_TOKEN"
READY_KEY = "mjfleet/agent-ready/{}"


class ForgedFrame(AgentFailedError):
    """A peer of the launcher-agent group sent data without the run's signature."""


def listening_socket(address: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to `address` only and listening (for a TCPStore's master_listen_fd)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(128)
    return sock


def store(
    address: str, port: int, world_size: int, is_master: bool, timeout_s: float, **kw: Any
) -> dist.TCPStore:
    """A TCPStore whose master listens on `address` only (TCPStore alone would listen on every interface)."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if not is_master:
        return dist.TCPStore(address, port, world_size, is_master=False, timeout=timeout)
    sock = listening_socket(address, port)
    try:
        return dist.TCPStore(
            address, port, world_size, is_master=True, master_listen_fd=sock.fileno(), timeout=timeout, **kw
        )
    finally:
        sock.detach()  # the store owns the descriptor now


@dataclass
class SignedGroup(LauncherAgentGroup):
    """LauncherAgentGroup with a bound store, a wait that notices dead agents, and signed frames."""

    listen_fd: int | None = None
    """Launcher only: a socket already bound to the rendezvous address and listening."""
    check_agents: Callable[[], None] | None = None
    """Launcher only: raises when an agent has ended while the group is forming."""

    def __post_init__(self) -> None:
        self._token = os.environ.get(TOKEN_ENV, "").encode()
        if not self._token:
            raise RuntimeError(f"{TOKEN_ENV} is not set: the launcher-agent group needs the run token")
        timeout = datetime.timedelta(seconds=self.agent_timeout)
        if self.rank == 0:
            kv = dist.TCPStore(
                self.launcher_hostname,
                self.launcher_port,
                self.world_size,
                is_master=True,
                master_listen_fd=self.listen_fd,
                timeout=timeout,
                wait_for_workers=False,
            )
            self._wait_for_agents(kv)
        else:
            kv = dist.TCPStore(
                self.launcher_hostname, self.launcher_port, self.world_size, False, timeout=timeout
            )
            kv.set(READY_KEY.format(self.rank), "1")
        dist.init_process_group(
            backend="gloo", world_size=self.world_size, rank=self.rank, store=kv, timeout=timeout
        )
        self.group = None

    def _wait_for_agents(self, kv: dist.TCPStore) -> None:
        keys = [READY_KEY.format(r) for r in range(1, self.world_size)]
        deadline = time.monotonic() + self.agent_timeout
        while not kv.check(keys):
            if self.check_agents is not None:
                self.check_agents()
            if time.monotonic() > deadline:
                raise AgentFailedError(f"the agents did not connect within {self.agent_timeout} s")
            time.sleep(0.1)

    def _all_gather(self, obj: Any) -> list[Any]:
        data = cloudpickle.dumps((self.rank, obj))
        signed = hmac.new(self._token, data, hashlib.sha256).digest() + data
        try:
            frames = _all_gather_bytes(signed, self.world_size)
        except RuntimeError as exc:  # a peer ended or timed out
            raise AgentFailedError from exc
        gathered = []
        for raw in frames:
            mac, body = raw[:32], raw[32:]
            if not hmac.compare_digest(mac, hmac.new(self._token, body, hashlib.sha256).digest()):
                raise ForgedFrame("a launcher-agent frame failed its signature check")
            gathered.append(cloudpickle.loads(body))
        return [o for _, o in sorted(gathered, key=lambda pair: pair[0])]


def _all_gather_bytes(data: bytes, world_size: int) -> list[bytes]:
    """all_gather of byte strings as uint8 tensors (all_gather_object would unpickle what arrives)."""
    size = torch.tensor([len(data)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world_size)]
    dist.all_gather(out, mine)
    return [bytes(t[: int(s.item())].numpy()) for t, s in zip(out, sizes, strict=True)]
