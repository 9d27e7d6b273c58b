"""Start one torchrunx agent per host, follow them, and stop them: the launcher side of a multi-worker run.

This takes the place of torchrunx.Launcher.run, with torchrunx's agent, payloads and status protocol, so that
the launcher chooses the address it listens on, authenticates logs, keeps secrets off command lines, reaches
remote agents through plain ``ssh`` (which reads ~/.ssh/config) and can pass signals on to remote workers.
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mjfleet.environ import environ_set
from mjfleet.launch.hosts import Host, interface_of

SSH_OPTIONS = ("-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5")


class AgentEnded(Exception):
    """An agent process (or its ssh connection) ended before the run did; the message names the host."""

    def __init__(self, message: str, rank: int | None) -> None:
        super().__init__(message)
        self.rank = rank


@dataclass
class Agent:
    """One host's agent process: ``ssh <host> python -m mjfleet.launch.agent``, or that python directly here."""

    host: Host
    first_rank: int
    workers: int
    proc: subprocess.Popen
    output: collections.deque = field(default_factory=lambda: collections.deque(maxlen=20))
    ended_at: float | None = None

    def ranks(self) -> str:
        last = self.first_rank + self.workers - 1
        return f"rank {self.first_rank}" if last == self.first_rank else f"ranks {self.first_rank}-{last}"

    def tell(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # it has ended; how is reported elsewhere

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass

    def ended(self) -> str | None:
        """Why the agent ended, in a few words, or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        last = next((line for line in reversed(self.output) if line.strip()), "")
        how = f"ssh exited with status {code}" if not self.host.local else f"exit status {code}"
        return f"{last} ({how})" if last else f"its agent ended ({how})"

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.output.append(raw.decode(errors="replace").rstrip())
        self.proc.wait()
        self.ended_at = time.monotonic()


def agent_command(host: Host) -> list[str]:
    """What starts the agent: the same interpreter and working directory on every host (as torchrunx assumes)."""
    here = f"cd {shlex.quote(os.getcwd())} && exec {shlex.quote(sys.executable)} -u -m mjfleet.launch.agent"
    if host.local:
        return [sys.executable, "-u", "-m", "mjfleet.launch.agent"]
    return ["ssh", *SSH_OPTIONS, host.name, here]


def start_agents(
    hosts: list[Host], workers_per_host: int, spec: dict[str, Any], env: dict[str, str]
) -> list[Agent]:
    """Start every agent and give it its JSON line (environment and run token included) on stdin."""
    agents = []
    for i, host in enumerate(hosts):
        proc = subprocess.Popen(
            agent_command(host),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # ssh must not see the terminal's Ctrl-C: the launcher passes signals on itself
            start_new_session=not host.local,
        )
        agent = Agent(host, i * workers_per_host, workers_per_host, proc)
        threading.Thread(target=agent._follow, daemon=True).start()
        agent.tell(json.dumps({**spec, "env": env, "rank": i + 1, "hostname": host.name}))
        agents.append(agent)
    return agents


def check_agents(agents: list[Agent]) -> None:
    """Raise AgentEnded for the agent that ended first (the others may have ended because it did)."""
    ended = [a for a in agents if a.ended_at is not None and a.ended() is not None]
    if ended:
        agent = min(ended, key=lambda a: a.ended_at or 0.0)
        raise AgentEnded(f"{agent.ranks()} on {agent.host.name}: {agent.ended()}", agent.first_rank)


def which_agent_ended(agents: list[Agent], wait_s: float = 5.0) -> AgentEnded | None:
    """After the group broke: the agent that ended (waiting a little for its process to be seen ending)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            check_agents(agents)
        except AgentEnded as exc:
            return exc
        time.sleep(0.1)
    return None


def stop_agents(agents: list[Agent], wait_s: float = 10.0) -> None:
    """Close every agent's line (its workers end, then the agent), then make sure each process has ended."""
    for agent in agents:
        agent.close()
    deadline = time.monotonic() + wait_s
    for agent in agents:
        try:
            agent.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait()


def run_agents(
    hosts: list[Host],
    workers_per_host: int,
    address: str,
    payload: Any,
    env: dict[str, str],
    handlers: list,
    on_start: Callable[[list[Agent]], None],
    agent_timeout: int = 60,
    hang: tuple[float, float] = (0.0, 0.0),
) -> list[Any]:
    """Run torchrunx's launcher-agent protocol; return each agent's list of worker return values.

    Raises FleetFailure with the failure records the agents sent (fleet/failure.py), or with a "hung" record
    when the workers' beats show a rank making no progress for `hang` = (timeout, timeout before the first
    iteration ends) seconds (fleet/liveness.py; 0 = not watched), or AgentEnded naming the host whose agent
    went away.
    """
    from mjfleet.fleet.failure import Failure
    from mjfleet.launch.group import TOKEN_ENV, SignedGroup, listening_socket
    from mjfleet.launch.logserver import LogServer
    from mjfleet.launch.seam import AgentStatus

    token = secrets.token_hex(32)
    logs = LogServer(address, token, handlers)
    listener = listening_socket(address)
    port = listener.getsockname()[1]
    spec = {"launcher_address": address, "launcher_port": port, "logger_port": logs.port}
    spec |= {"world_size": len(hosts) + 1, "agent_timeout": agent_timeout}
    agents: list[Agent] = []
    group = None
    try:
        agents = start_agents(hosts, workers_per_host, spec, {**env, TOKEN_ENV: token})
        on_start(agents)
        interface = interface_of(address) or ""
        with environ_set(
            **{TOKEN_ENV: token, "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", interface)}
        ):
            try:
                group = SignedGroup(
                    launcher_hostname=address,
                    launcher_port=port,
                    world_size=len(hosts) + 1,
                    rank=0,
                    agent_timeout=agent_timeout,
                    listen_fd=listener.fileno(),
                    check_agents=lambda: check_agents(agents),
                )
            finally:
                listener.detach()
        _naming_the_host(agents, lambda: group.sync_payloads(payload=payload))
        while True:
            statuses: list[AgentStatus] = _naming_the_host(
                agents, lambda: group.sync_agent_statuses(status=None)
            )
            failures = [value for s in statuses for value in s.return_values if isinstance(value, Failure)]
            failures += _hung(statuses, agents, *hang)
            if failures:
                raise FleetFailure(failures)
            if all(s.state == "done" for s in statuses):
                return [s.return_values for s in statuses]
    finally:
        stop_agents(agents)
        if group is not None:
            import torch.distributed as dist

            dist.destroy_process_group()
        logs.close()


def _naming_the_host(agents: list[Agent], exchange: Callable[[], Any]) -> Any:
    """Run one launcher-agent exchange; when it breaks because an agent ended, raise AgentEnded naming its host."""
    from mjfleet.launch.seam import AgentFailedError

    try:
        return exchange()
    except AgentFailedError:
        ended = which_agent_ended(agents)
        if ended is not None:
            raise ended from None
        raise


def _hung(statuses: list, agents: list[Agent], timeout_s: float, first_timeout_s: float) -> list:
    """The record of the rank that holds the run, judged from every host's beats (none while all progress)."""
    from mjfleet.fleet.failure import HUNG, Failure
    from mjfleet.fleet.liveness import Beat, describe, hung_rank

    host_of = {
        beat.rank: agent.host.name
        for status, agent in zip(statuses, agents, strict=True)
        for beat in status.return_values
        if isinstance(beat, Beat)
    }
    beats = [beat for status in statuses for beat in status.return_values if isinstance(beat, Beat)]
    stuck = hung_rank(beats, timeout_s, first_timeout_s)
    return [] if stuck is None else [Failure(stuck.rank, host_of[stuck.rank], HUNG, describe(stuck))]


class FleetFailure(Exception):
    """Workers failed: ``failures`` holds the record of each (fleet/failure.py)."""

    def __init__(self, failures: list) -> None:
        super().__init__(f"{len(failures)} worker(s) failed")
        self.failures = failures
